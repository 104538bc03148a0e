"""The false-negative dial of synthkb: generate a dataset with a requested share of false negatives.

Two requests (config ``datasets.<name>.fn_share`` / ``fn_paraphrase``, CLI ``--fn-share`` /
``--fn-paraphrase``):

* ``fn_share``: the share of true false negatives among the BM25 top-30 negatives of the train
  questions (pipeline.synthkb.measure). None (the default) leaves the generator's own restatement
  rates: 7.2 % at 320 entities, seed 0.
* ``fn_paraphrase``: the share of those false negatives whose text holds no answer string (the
  answer is given in another form: pipeline.synthkb.paraphrase). 0 (the default) paraphrases nothing.

Both act through two generator settings, found by search on the generated data itself:

* the *restatement level* L: below 1, the optional restatements of ``Knobs`` (``RESTATE_FIELDS``)
  scaled by L (0: a fact is stated again only where the structure needs it, about 1 %); 1, the
  default generator; above 1, the default plus on average L - 1 echo passages per entity
  (pipeline.synthkb.echo). The share grows with L;
* the paraphrase rate p (``Knobs.paraphrase``). The string-free share grows with p.

The search measures the candidate datasets on a probe, the first blocks of the layout
(``PROBE_ENTITIES``; the whole dataset up to that size): blocks are self-contained, and the share
measured on 2,000 entities is within 0.2 points of that on 6,000. Defaults of both requests skip
the search: the dataset is then byte-identical to the generator without a dial.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from pipeline.core.config import ConfigError
from pipeline.synthkb.draft import Knobs

RESTATE_FIELDS = ("lead_restate", "list_mention", "list_appositive", "bio_in_work", "restate", "cross_bio")
ECHO_STEPS = (1, 2, 4, 8, 16, 32, 64)  # echo passages per entity tried, in turn, to bracket a share
TOLERANCE = 0.005  # the search stops within half a point of each request
ACCEPT = 0.02  # further than two points from a request is an error
MAX_EVALUATIONS = 40
PROBE_ENTITIES = 2000


@dataclass(frozen=True)
class Dial:
    fn_share: float | None = None
    fn_paraphrase: float = 0.0

    @property
    def active(self) -> bool:
        return self.fn_share is not None or self.fn_paraphrase > 0


def check_share(value: object, name: str, optional: bool = False) -> float | None:
    """``value`` as a share in [0, 1]; a ConfigError naming ``name`` otherwise."""
    if value is None and optional:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or not 0 <= value <= 1
    ):
        allowed = "a number in [0, 1]" + (" or null" if optional else "")
        raise ConfigError(f"{name} must be {allowed}, got {value!r}")
    return float(value)


def make_dial(fn_share: object = None, fn_paraphrase: object = 0.0) -> Dial:
    """A checked Dial (the CLI checks its flags itself, naming them)."""
    return Dial(
        check_share(fn_share, "synthkb: fn_share", optional=True),
        check_share(fn_paraphrase, "synthkb: fn_paraphrase"),
    )


def knobs_at(base: Knobs, level: float, paraphrase: float) -> Knobs:
    """The article knobs at restatement level ``level`` and paraphrase rate ``paraphrase``."""
    if level < 1:
        scaled = {name: getattr(base, name) * level for name in RESTATE_FIELDS}
        return replace(base, **scaled, echo=0.0, paraphrase=paraphrase)
    return replace(base, echo=level - 1, paraphrase=paraphrase)


Measure = Callable[[Knobs], dict]


class _Exhausted(Exception):
    """The search has measured MAX_EVALUATIONS datasets."""


class Search:
    """Finds (level, paraphrase) whose measured shares meet the dial's requests; logs every try."""

    def __init__(self, measure: Measure, base: Knobs, dial: Dial):
        self.measure, self.base, self.dial = measure, base, dial
        self.trace: list[dict] = []
        self.level, self.paraphrase = 1.0, 0.0
        self._seen: dict[tuple[float, float], dict] = {}

    def at(self, level: float, paraphrase: float) -> dict:
        key = (round(level, 6), round(paraphrase, 6))
        if key not in self._seen:
            if len(self._seen) >= MAX_EVALUATIONS:
                raise _Exhausted
            m = self.measure(knobs_at(self.base, *key))
            self._seen[key] = m
            self.trace.append(
                {
                    "level": key[0],
                    "paraphrase": key[1],
                    "share": round(m["share"], 4),
                    "string_free_share": round(m["string_free_share"], 4),
                }
            )
        return self._seen[key]

    def misses(self, m: dict) -> list[tuple[str, float, float]]:
        """(request, requested, measured) of each request further than TOLERANCE from its target."""
        out = []
        if self.dial.fn_share is not None and abs(m["share"] - self.dial.fn_share) > TOLERANCE:
            out.append(("fn_share", self.dial.fn_share, m["share"]))
        if self.dial.fn_paraphrase > 0 and abs(m["string_free_share"] - self.dial.fn_paraphrase) > TOLERANCE:
            out.append(("fn_paraphrase", self.dial.fn_paraphrase, m["string_free_share"]))
        return out

    def run(self) -> tuple[float, float]:
        """Alternate the two one-dimensional searches (paraphrasing moves the share a little);
        the (level, paraphrase) measured closest to the requests, the share first."""
        level, para = 1.0, self.dial.fn_paraphrase
        try:
            for _ in range(3):
                if self.dial.fn_share is not None:
                    level = self._fit(
                        lambda x, p=para: self.at(x, p)["share"],
                        self.dial.fn_share,
                        level,
                        [1.0 + n for n in ECHO_STEPS],
                    )
                if self.dial.fn_paraphrase > 0:
                    para = self._fit(
                        lambda x, lv=level: self.at(lv, x)["string_free_share"],
                        self.dial.fn_paraphrase,
                        para,
                        [1.0],
                    )
                if not self.misses(self.at(level, para)):
                    break
        except _Exhausted:
            pass
        self.level, self.paraphrase = min(self._seen, key=lambda key: self._distance(self._seen[key]))
        return self.level, self.paraphrase

    def _distance(self, m: dict) -> tuple[float, float, float]:
        """Sort key: the share first (within TOLERANCE, or as near as possible), then the
        string-free share."""
        share = abs(m["share"] - self.dial.fn_share) if self.dial.fn_share is not None else 0.0
        free = abs(m["string_free_share"] - self.dial.fn_paraphrase) if self.dial.fn_paraphrase else 0.0
        return max(share - TOLERANCE, 0.0), free, share

    @classmethod
    def _fit(cls, f: Callable[[float], float], target: float, x0: float, highs: list[float]) -> float:
        """One knob's search, from 0 up (neither knob goes below 0), its result on the grid of 6 decimals
        that ``at`` keys its measurements by."""
        return round(cls._solve(f, target, x0, 0.0, highs), 6)

    @staticmethod
    def _solve(f: Callable[[float], float], target: float, x0: float, lo: float, highs: list[float]) -> float:
        """x with f(x) near ``target``, f increasing (up to noise): bracket from x0 (upwards
        through ``highs``), then Illinois regula falsi; the best x seen."""
        seen: dict[float, float] = {}

        def f_(x: float) -> float:
            seen[x] = f(x)
            return seen[x]

        def best() -> float:
            return min(seen, key=lambda x: (abs(seen[x] - target), x))

        y0 = f_(x0)
        if abs(y0 - target) <= TOLERANCE:
            return x0
        if y0 > target:
            (a, fa), (b, fb) = (lo, f_(lo)), (x0, y0)
        else:
            (a, fa), (b, fb) = (x0, y0), (x0, y0)
            for high in (h for h in highs if h > x0):
                b, fb = high, f_(high)
                if fb >= target:
                    break
                a, fa = b, fb
        if not fa <= target <= fb:
            return best()
        side = 0
        for _ in range(12):
            x = b - (fb - target) * (b - a) / (fb - fa) if fb != fa else (a + b) / 2
            x = min(max(x, a + 1e-3 * (b - a)), b - 1e-3 * (b - a))
            y = f_(x)
            if abs(y - target) <= TOLERANCE:
                break
            if y < target:
                a, fa = x, y
                if side == -1:
                    fb = target + (fb - target) / 2
                side = -1
            else:
                b, fb = x, y
                if side == 1:
                    fa = target + (fa - target) / 2
                side = 1
        return best()
