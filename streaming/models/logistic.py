"""The logistic score a model artifact defines, as compiled code (streaming.native): the receipt
scorer scores every receipt, most of them more than once, and the interpreted loop over the
artifact's terms cost a quarter of a decision's work.

Numbers are C doubles here and Python floats in the interpreter: the same IEEE arithmetic in
the same order, and `exp` is the C library's in both, so the two builds give the same score to
the last bit (tests/test_native.py compares the facts they write)."""

from __future__ import annotations

import math
from typing import Final

# The features the receipt scorer computes (state schema receipt-features/1), in the order
# `score_receipt` takes them; an artifact's terms name them by position in this tuple.
FEATURES: Final = ("feature_count_7m", "feature_amount_7m", "amount_cents")
IDENTITY: Final = "identity"
LOG1P_DOLLARS: Final = "log1p_dollars"  # log1p of whole dollars, negatives as 0
TRANSFORMS: Final = (IDENTITY, LOG1P_DOLLARS)


# 10**d as floats, exact for every d here: the scales `rounded_probability` works at.
_SCALES: Final = [10.0**d for d in range(7)]
# How far from a tie the scaled value must be for its rounding direction to be certain: the
# product p * 10**d is within half an ulp of 10**6 (1.2e-10 / 2) of its exact value.
_TIE_MARGIN: Final = 1e-6


def rounded_probability(p: float, decimals: int) -> float:
    """`round(p, decimals)`, exactly, for a probability: the same float, one multiplication
    and one division instead of round()'s correctly rounded decimal conversion and its parse
    back (2,600 of a decision's instructions; docs/performance.md, thirtieth round).

    Round() gives the float nearest the decimal with `decimals` digits nearest p (ties to
    even). Scaled by 10**d (d <= 6), p's product is off its exact value by less than 1e-10, so
    when its fraction is further than _TIE_MARGIN from one half, the nearest integer r is
    certain; r and 10**d are exact floats, and their quotient, rounded once by the division,
    is the float nearest r / 10**d: round()'s answer. Near a tie, outside (0, 1] (either zero and
    a NaN included) or at more decimals, round() itself decides."""
    if 0 <= decimals <= 6 and 0.0 < p <= 1.0:
        scale = _SCALES[decimals]
        y = p * scale
        whole = float(int(y))  # y >= 0: truncation is the floor
        frac = y - whole
        if abs(frac - 0.5) > _TIE_MARGIN:
            return (whole + 1.0 if frac > 0.5 else whole) / scale
    return round(p, decimals)


# Bound once: compiled, `math.log1p` was an attribute lookup on the module at every call,
# about 140 instructions, two per decision (callgrind, docs/performance.md, fifty-second round).
_LOG1P: Final = math.log1p


def transformed(transform: str, x: int) -> float:
    """A feature's value after its preprocessing transform (one of TRANSFORMS)."""
    if transform == LOG1P_DOLLARS:
        return _LOG1P(max(x, 0) / 100.0)
    if transform == IDENTITY:
        return float(x)
    raise ValueError(f"unknown transform {transform!r}")


class LogisticScorer:
    """What `score` reads of an artifact, taken out once per model: per feature (its position
    in FEATURES, transform, weight, center, scale), the intercept, the decimals the score is
    rounded to and the two decision thresholds; and the model's revision, which every decision
    it scores names (read here by compiled code, where the interpreted `Model`'s attributes
    were three lookups by name a decision: docs/performance.md, fifty-third round)."""

    def __init__(self, terms: list[tuple[str, str, float, float, float]], intercept: float,
                 decimals: int, decline_at: float, review_at: float, revision: str) -> None:
        self.revision = revision
        # By position, not name: the scorer passes its three features as C integers, where a
        # dict of them was built and searched for every decision (docs/performance.md,
        # twenty-seventh round).
        self.slots = [(FEATURES.index(name), transform, weight, center, scale)
                      for name, transform, weight, center, scale in terms]
        # Which of FEATURES the terms read: `score` looks up only those.
        used = {slot for slot, _, _, _, _ in self.slots}
        self.reads = (0 in used, 1 in used, 2 in used)
        self.intercept = intercept
        self.decimals = decimals
        self.decline_at = decline_at
        self.review_at = review_at

    def score(self, features: dict[str, int]) -> tuple[float, str]:
        """(score, decision) of features given by name (only those the artifact uses are
        read)."""
        count_read, amount_7m_read, amount_cents_read = self.reads
        return self.score_receipt(features[FEATURES[0]] if count_read else 0,
                                  features[FEATURES[1]] if amount_7m_read else 0,
                                  features[FEATURES[2]] if amount_cents_read else 0)

    def score_receipt(self, count: int, amount_7m: int, amount_cents: int) -> tuple[float, str]:
        """(score, decision) of one receipt's features, in FEATURES order."""
        z = self.intercept
        for slot, transform, weight, center, scale in self.slots:
            x = count if slot == 0 else amount_7m if slot == 1 else amount_cents
            z += weight * (transformed(transform, x) - center) / scale
        p = rounded_probability(1.0 / (1.0 + math.exp(-z)), self.decimals)
        if p >= self.decline_at:
            return p, "decline"
        if p >= self.review_at:
            return p, "review"
        return p, "approve"
