"""DPR ``has_answer``: does a passage contain one of a question's answers?

String mode (NQ, TQ, SQuAD): NFD-normalise, tokenise with DPR's SimpleTokenizer regex, lowercase; a
passage matches when an answer's token sequence occurs contiguously in the passage's text tokens.
Regex mode (CuratedTREC): each answer is a pattern, searched case-insensitively in the NFD text.
The passage title is never part of the match (as in DPR's evaluation).

Everything here is a pure function except ``AnswerMatcher``, which only adds a per-pid cache: an
evaluation run is queries x depth pairs and the same passage comes back for many queries.
"""

from __future__ import annotations

import unicodedata
from typing import Iterable, Sequence

import regex

MATCH_MODES = ("string", "regex")

# DPR's SimpleTokenizer: runs of letters/digits/marks, or any single non-space, non-control char.
_TOKEN_RE = regex.compile(
    r"([\p{L}\p{N}\p{M}]+)|([^\p{Z}\p{C}])", flags=regex.IGNORECASE | regex.UNICODE | regex.MULTILINE
)
_PATTERN_FLAGS = regex.IGNORECASE | regex.UNICODE | regex.MULTILINE

# Tokens never contain a control character (\p{C} is excluded by the tokeniser and lowercasing
# cannot create one), so joining with NUL makes "contiguous token sequence" equal to "substring of
# the NUL-delimited string" - a C-speed substring test instead of a Python sliding window.
_SEP = "\x00"


def normalize(text: str) -> str:
    return unicodedata.normalize("NFD", text)


def tokenize(text: str) -> list[str]:
    """NFD-normalised, lowercased DPR tokens of ``text``."""
    return [m.group().lower() for m in _TOKEN_RE.finditer(normalize(text))]


def token_key(tokens: Sequence[str]) -> str:
    """The NUL-delimited form in which contiguous token matching is a substring test."""
    return _SEP + _SEP.join(tokens) + _SEP


def has_token_sequence(needle: Sequence[str], haystack: Sequence[str]) -> bool:
    """True iff ``needle`` occurs contiguously in ``haystack`` (both already tokenised).

    An empty needle is rejected: DPR would count it as present in every passage, which silently
    turns a broken answer into a hit.
    """
    if not needle:
        raise ValueError("an answer with no tokens cannot be matched")
    return token_key(needle) in token_key(haystack)


def string_has_answer(answers: Iterable[str], text: str) -> bool:
    """DPR string-mode has_answer of one passage text."""
    key = token_key(tokenize(text))
    for answer in answers:
        tokens = tokenize(answer)
        if not tokens:
            raise ValueError(f"answer {answer!r} has no tokens")
        if token_key(tokens) in key:
            return True
    return False


def compile_answer_pattern(pattern: str) -> regex.Pattern:
    """Compile a CuratedTREC answer pattern (NFD, case-insensitive); raises ``regex.error``."""
    return regex.compile(normalize(pattern), flags=_PATTERN_FLAGS)


def regex_has_answer(patterns: Iterable[str], text: str) -> bool:
    """DPR regex-mode has_answer of one passage text."""
    text = normalize(text)
    return any(compile_answer_pattern(p).search(text) is not None for p in patterns)


def has_answer(answers: Iterable[str], text: str, mode: str = "string") -> bool:
    if mode == "string":
        return string_has_answer(answers, text)
    if mode == "regex":
        return regex_has_answer(answers, text)
    raise ValueError(f"unknown match mode {mode!r} (expected one of {MATCH_MODES})")


class AnswerMatcher:
    """has_answer over many (query, passage) pairs; each passage is normalised/tokenised once.

    ``prepare_answers`` turns a query's answers into the matcher's form once per query; ``add_passage``
    stores a passage's prepared text by pid (call it while streaming the corpus); ``matches`` tests.
    """

    def __init__(self, mode: str = "string"):
        if mode not in MATCH_MODES:
            raise ValueError(f"unknown match mode {mode!r} (expected one of {MATCH_MODES})")
        self.mode = mode
        self._passages: dict[str, str] = {}

    def __len__(self) -> int:
        return len(self._passages)

    def __contains__(self, pid: str) -> bool:
        return pid in self._passages

    def add_passage(self, pid: str, text: str) -> None:
        if pid in self._passages:
            return
        self._passages[pid] = token_key(tokenize(text)) if self.mode == "string" else normalize(text)

    def prepare_answers(self, answers: Sequence[str]) -> list:
        """Token keys (string mode) or compiled patterns (regex mode).

        Raises ValueError naming the answer when it has no tokens (string mode) or is not a valid
        pattern (regex mode); the caller turns it into a DataError that names the query.
        """
        if self.mode == "string":
            keys = []
            for answer in answers:
                tokens = tokenize(answer)
                if not tokens:
                    raise ValueError(f"answer {answer!r} has no tokens")
                keys.append(token_key(tokens))
            return keys
        patterns = []
        for answer in answers:
            try:
                patterns.append(compile_answer_pattern(answer))
            except regex.error as exc:
                raise ValueError(f"answer {answer!r} is not a valid regular expression: {exc}") from None
        return patterns

    def matches(self, prepared: list, pid: str) -> bool:
        """has_answer of passage ``pid`` (must have been added) for prepared answers."""
        passage = self._passages[pid]
        if self.mode == "string":
            return any(key in passage for key in prepared)
        return any(p.search(passage) is not None for p in prepared)
