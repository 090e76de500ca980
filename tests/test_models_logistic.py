"""The model's score rounding: `rounded_probability` is `round()` to the last bit, for every
probability and every number of decimals an artifact may ask for, ties and their neighbours
included (the fast path decides only away from a tie, round() itself near one)."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streaming.models.logistic import LogisticScorer, rounded_probability


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) ==
                                                  math.copysign(1, b))


@settings(max_examples=3000, deadline=None)
@given(st.floats(min_value=0.0, max_value=1.0), st.integers(min_value=0, max_value=8))
def test_equals_round_for_any_probability(p, decimals):
    assert _same(rounded_probability(p, decimals), round(p, decimals))


def test_equals_round_at_ties_and_their_neighbouring_floats():
    rng = random.Random(30)
    for decimals in range(0, 8):
        scale = 10**decimals
        for _ in range(3000):
            k = rng.randrange(0, scale)
            tie = (k + 0.5) / scale  # the float nearest a decimal tie
            p = tie
            for _ in range(4):  # the tie's float and the floats either side of it
                for q in (p, math.nextafter(p, 0.0), math.nextafter(p, 1.0)):
                    assert _same(rounded_probability(q, decimals), round(q, decimals)), \
                        (q, decimals)
                p = math.nextafter(p, 1.0)


def test_the_ends_and_what_is_not_a_probability():
    for p in (0.0, -0.0, 1.0, 5e-324, 1 - 2**-53, 0.5, 0.25, 0.125, 1e-7, 0.9999995):
        for d in range(0, 9):
            assert _same(rounded_probability(p, d), round(p, d)), (p, d)
    for p in (math.nan, math.inf, -math.inf, -0.25, 1.5, 1234.5678):
        for d in (0, 3, 6, -1, 12):
            assert _same(rounded_probability(p, d), round(p, d)), (p, d)


def test_the_scorer_scores_with_it():
    scorer = LogisticScorer([("feature_count_7m", "identity", 0.4, 2.0, 3.0),
                             ("amount_cents", "log1p_dollars", 1.1, 4.0, 2.0)],
                            intercept=-1.3, decimals=6, decline_at=0.8, review_at=0.5,
                            revision="m-test")
    for count, cents in ((0, 0), (3, 12_345), (40, 10**9), (7, 99)):
        z = -1.3 + 0.4 * (count - 2.0) / 3.0 + 1.1 * (math.log1p(cents / 100.0) - 4.0) / 2.0
        want = round(1.0 / (1.0 + math.exp(-z)), 6)
        score, decision = scorer.score_receipt(count, 0, cents)
        assert score == want
        assert decision == ("decline" if want >= 0.8 else "review" if want >= 0.5 else
                            "approve")


def test_every_feature_and_transform_and_an_unknown_one_named_when_scored():
    scorer = LogisticScorer([("feature_amount_7m", "log1p_dollars", -0.7, 1.0, 0.5),
                             ("feature_count_7m", "log1p_dollars", 0.3, 0.0, 1.0),
                             ("amount_cents", "identity", 2e-6, 100.0, 7.0)],
                            intercept=0.2, decimals=4, decline_at=0.9, review_at=0.6,
                            revision="m-test")
    for count, amount_7m, cents in ((0, 0, 0), (5, -300, 1), (2, 10**7, -50), (9, 4_321, 10**6)):
        z = (0.2 + -0.7 * (math.log1p(max(amount_7m, 0) / 100.0) - 1.0) / 0.5
             + 0.3 * (math.log1p(max(count, 0) / 100.0) - 0.0) / 1.0
             + 2e-6 * (float(cents) - 100.0) / 7.0)
        assert scorer.score_receipt(count, amount_7m, cents)[0] == round(
            1.0 / (1.0 + math.exp(-z)), 4)
    odd = LogisticScorer([("amount_cents", "sqrt_dollars", 1.0, 0.0, 1.0)], intercept=0.0,
                         decimals=6, decline_at=0.9, review_at=0.6, revision="m-odd")
    with pytest.raises(ValueError, match="sqrt_dollars"):
        odd.score_receipt(1, 2, 3)
