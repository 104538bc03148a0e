"""What the figures share: a colour-blind-safe palette and y-limits that keep noise from looking like a
trend. Pure helpers (no matplotlib import), so the figure builders stay testable on the Agg backend."""

from __future__ import annotations

import math
from typing import Iterable

# Okabe & Ito's colour-blind-safe palette, darkest first; yellow (#F0E442) is left out, it is unreadable
# as a thin line on white. Series that must stay apart from these (the sieve quantities of the AR2
# figure) take the last entries.
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000")


def palette_color(i: int) -> str:
    """The i-th series' colour (the palette repeats past its end)."""
    return PALETTE[i % len(PALETTE)]


def span_limits(
    values: Iterable[float],
    min_span: float,
    bounds: tuple[float, float] | None = (0.0, 1.0),
    margin: float = 0.08,
) -> tuple[float, float]:
    """Axis limits around ``values`` covering at least ``min_span``: a range narrower than that is
    widened about its centre, moved inside ``bounds`` (a metric's possible values, when all values lie
    in them) if it would cross one, and padded by ``margin`` of the span on both sides.
    Without finite values: the bounds, or (0, 1)."""
    finite = [float(v) for v in values if v is not None and math.isfinite(v)]
    if not finite:
        lo, hi = bounds or (0.0, 1.0)
        return lo, hi
    lo, hi = min(finite), max(finite)
    span = max(hi - lo, min_span)
    centre = (lo + hi) / 2
    lo, hi = centre - span / 2, centre + span / 2
    if bounds is not None and bounds[0] <= min(finite) and max(finite) <= bounds[1]:
        if span <= bounds[1] - bounds[0]:
            if lo < bounds[0]:
                lo, hi = bounds[0], bounds[0] + span
            elif hi > bounds[1]:
                lo, hi = bounds[1] - span, bounds[1]
    pad = margin * span
    return lo - pad, hi + pad
