"""DPR has_answer, string and regex modes: hand-checked cases."""

from __future__ import annotations

import random
import unicodedata

import pytest

from pipeline.data.answers import (
    AnswerMatcher,
    has_answer,
    has_token_sequence,
    regex_has_answer,
    string_has_answer,
    tokenize,
)

NFC_CAFE = "caf\u00e9"  # é as one code point
NFD_CAFE = "cafe\u0301"  # e + combining acute


def test_tokenize_splits_words_and_single_punctuation_and_lowercases():
    assert tokenize("Hello, World!") == ["hello", ",", "world", "!"]
    assert tokenize("U.S. 1,000") == ["u", ".", "s", ".", "1", ",", "000"]
    assert tokenize("  \t\n ") == []


def test_tokenize_is_nfd_so_both_forms_give_the_same_tokens():
    assert NFC_CAFE != NFD_CAFE
    assert tokenize(NFC_CAFE) == tokenize(NFD_CAFE) == [NFD_CAFE]
    # The combining mark stays inside the word token (\p{M}), not split off as punctuation.
    assert len(tokenize("Caf\u00e9 au lait")) == 3


@pytest.mark.parametrize(
    "answer,text",
    [(NFC_CAFE, f"a {NFD_CAFE} here"), (NFD_CAFE, f"a {NFC_CAFE} here"), ("CAF\u00c9", f"le {NFC_CAFE}")],
)
def test_nfc_and_nfd_forms_match_each_other(answer, text):
    assert string_has_answer([answer], text)


def test_accents_are_not_stripped():
    assert not string_has_answer(["cafe"], f"un {NFC_CAFE} noir")
    assert not string_has_answer([NFC_CAFE], "un cafe noir")


def test_punctuation_is_part_of_the_token_sequence():
    assert string_has_answer(["U.S."], "the U.S. army")
    assert not string_has_answer(["U.S."], "the US army")
    assert string_has_answer(["US"], "the US army")
    # Tokens are compared whole: "U.S" (no final dot) is a prefix of the passage's token sequence.
    assert string_has_answer(["U.S"], "the U.S. army")


def test_multi_token_answers_must_be_contiguous_and_ordered():
    text = "He moved to New York City in 1990."
    assert string_has_answer(["new york"], text)
    assert string_has_answer(["New   York\nCity"], text)  # whitespace differences do not matter
    assert not string_has_answer(["York New"], text)
    assert not string_has_answer(["New City"], text)
    assert string_has_answer(["City in 1990."], text)


def test_token_boundaries_are_respected():
    assert not string_has_answer(["York"], "a New Yorker")
    assert not string_has_answer(["New York"], "a New Yorker")
    assert not string_has_answer(["york"], "NewYork")
    assert not string_has_answer(["19"], "in 1990")


@pytest.mark.parametrize("text", ["Paris is big", "the capital is Paris", "Paris", "(Paris)"])
def test_answer_at_passage_boundaries(text):
    assert string_has_answer(["paris"], text)


def test_any_answer_suffices_and_no_answer_matches_nothing():
    assert string_has_answer(["Lyon", "Paris"], "Paris")
    assert not string_has_answer(["Lyon", "Nice"], "Paris")
    assert not string_has_answer([], "Paris")


def test_an_answer_without_tokens_is_an_error_not_a_universal_match():
    with pytest.raises(ValueError, match="no tokens"):
        string_has_answer([" "], "anything")
    with pytest.raises(ValueError):
        has_token_sequence([], ["a"])


def test_has_token_sequence_agrees_with_a_sliding_window():
    rng = random.Random(0)
    vocab = ["a", "b", "ab", "ba", ".", "é"]
    for _ in range(2000):
        hay = [rng.choice(vocab) for _ in range(rng.randint(0, 8))]
        needle = [rng.choice(vocab) for _ in range(rng.randint(1, 3))]
        window = any(hay[i : i + len(needle)] == needle for i in range(len(hay) - len(needle) + 1))
        assert has_token_sequence(needle, hay) == window, (needle, hay)


def test_regex_mode_is_case_insensitive_search_of_the_nfd_pattern():
    assert regex_has_answer([r"\b(1,?000|one thousand)\b"], "About One Thousand people")
    assert regex_has_answer(["paris"], "PARIS")
    assert regex_has_answer([NFC_CAFE], f"un {NFD_CAFE}")
    assert regex_has_answer([NFD_CAFE], f"un {NFC_CAFE}")
    assert not regex_has_answer([r"^paris$"], "Paris, France")
    assert has_answer([r"\d{4}"], "in 1990", mode="regex")
    assert not has_answer([r"\d{4}"], "in 199", mode="regex")


def test_unknown_mode_is_rejected():
    with pytest.raises(ValueError, match="unknown match mode"):
        has_answer(["a"], "a", mode="fuzzy")
    with pytest.raises(ValueError, match="unknown match mode"):
        AnswerMatcher("fuzzy")


@pytest.mark.parametrize("mode", ["string", "regex"])
def test_matcher_equals_the_pure_functions(mode):
    texts = {"p1": "The Eiffel Tower is in Paris.", "p2": f"Un {NFD_CAFE}.", "p3": "U.S. Army"}
    queries = [["paris"], ["Eiffel Tower"], [NFC_CAFE], ["u.s."], ["London", "army"], ["tower is in"]]
    matcher = AnswerMatcher(mode)
    for pid, text in texts.items():
        matcher.add_passage(pid, text)
    assert len(matcher) == 3 and "p1" in matcher
    for answers in queries:
        prepared = matcher.prepare_answers(answers)
        for pid, text in texts.items():
            assert matcher.matches(prepared, pid) == has_answer(answers, text, mode), (answers, pid)


def test_matcher_regex_errors_name_the_answer():
    with pytest.raises(ValueError, match=r"'\(unclosed' is not a valid regular expression"):
        AnswerMatcher("regex").prepare_answers(["ok", "(unclosed"])
    with pytest.raises(ValueError, match="' ' has no tokens"):
        AnswerMatcher("string").prepare_answers(["ok", " "])


def test_matcher_keeps_nfd_text_in_regex_mode():
    matcher = AnswerMatcher("regex")
    matcher.add_passage("p", NFC_CAFE)
    assert matcher.matches(matcher.prepare_answers([unicodedata.normalize("NFC", NFD_CAFE)]), "p")
