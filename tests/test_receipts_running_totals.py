"""The receipt scorer's running totals (a window sum read as the difference of two totals)
against a recompute over the merchant's entries, through random receipts (out of order, equal
times, late, beyond the allowed delay, amounts large enough to overflow a window), watermark
advances that evict prefixes, and snapshot/restore."""

from __future__ import annotations

from itertools import pairwise

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streaming.contracts.bounds import MAX_ABS_CENTS
from streaming.models.registry import INITIAL_ARTIFACT, Model
from streaming.operators.base import AGGREGATE_OVERFLOW, Emit
from streaming.operators.receipts import AMOUNT, T, WINDOW_US, ReceiptScorer
from streaming.timeutil import parse_utc_us

from .receiptsutil import at, rcpt, record

MODEL = Model.from_artifact(INITIAL_ARTIFACT)
HUGE = 2**62  # beyond the contract's bound, so set on the decoded record: sums can overflow

receipt = st.tuples(
    st.sampled_from(["m1", "m2", "m3"]),
    st.integers(0, 60).map(lambda q: q / 4),  # minute, on quarter minutes: many equal times
    st.one_of(st.integers(-MAX_ABS_CENTS, MAX_ABS_CENTS), st.sampled_from([HUGE, -HUGE, 0, 1])),
)
step = st.one_of(
    st.tuples(st.just("receipt"), receipt),
    st.tuples(st.just("watermark"), st.integers(0, 8)),  # advance by that many minutes
    st.tuples(st.just("restore"), st.none()),
)


def assert_totals_match(op: ReceiptScorer) -> None:
    for m, w in op.windows.items():
        lst, cum = w.entries, w.cum
        assert w.times == [e[T] for e in lst]
        assert w.amounts == [e[AMOUNT] for e in lst]
        assert 1 <= len(cum) <= len(lst) + 1  # a valid prefix of the totals
        assert [b - a for a, b in pairwise(cum)] == [e[AMOUNT] for e in lst][:len(cum) - 1]
        live = op.live_entries(m)  # the list less its evicted prefix not yet cut
        assert live and live == lst[len(lst) - len(live):]
        for e in live:  # every window the scorer can read, against a recompute
            window = [x[AMOUNT] for x in live if e[T] - WINDOW_US <= x[T] < e[T]]
            assert w.features(e[T]) == (len(window), sum(window))
        whole = w.totals(len(lst))
        assert [b - a for a, b in pairwise(whole)] == [e[AMOUNT] for e in lst]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(step, min_size=1, max_size=120))
def test_running_totals_equal_a_recompute(steps):
    op = ReceiptScorer(MODEL)
    out = Emit()
    minute = 0.0
    for i, (what, arg) in enumerate(steps):
        if what == "receipt":
            merchant, offset, amount = arg
            rec = record(rcpt(f"r{i:03d}", merchant, minute + offset - 10), 0, i)
            rec = rec.replace(payload={**rec.payload, "amount_cents": amount})
            op.on_record(rec, out)
        elif what == "watermark":
            minute += arg
            op.on_watermark("receipts", parse_utc_us(at(minute)), out)
        else:
            again = ReceiptScorer()
            again.restore(orjson.loads(orjson.dumps(op.snapshot())))
            op = again  # its totals start from 0 again: only their differences must agree
        assert_totals_match(op)


def test_the_random_steps_reach_every_path():
    """The property above is worth as much as the paths its steps reach: overflow, late and
    beyond-delay receipts, live rescoring, insertion before the end, and eviction (with the
    evicted prefix both cut and not yet cut)."""
    import random
    rng = random.Random(4)
    op = ReceiptScorer(MODEL)
    out = Emit()
    minute = 0.0
    mid_inserts = uncut = 0
    for i in range(3000):
        if rng.random() < 0.2:
            minute += rng.randint(0, 3)
            op.on_watermark("receipts", parse_utc_us(at(minute)), out)
            continue
        merchant = rng.choice(["m1", "m2"])
        offset = rng.randint(0, 60) / 4
        amount = rng.choice([rng.randint(1, 10**6), HUGE, -HUGE])
        rec = record(rcpt(f"r{i:04d}", merchant, minute + offset - 10), 0, i)
        rec = rec.replace(payload={**rec.payload, "amount_cents": amount})
        times = op.windows[merchant].times if merchant in op.windows else []
        mid_inserts += bool(times) and rec.event_us < times[-1]
        op.on_record(rec, out)
        if i % 100 == 0:
            assert_totals_match(op)
            # checked with an evicted prefix not yet cut
            uncut += any(w.dead for w in op.windows.values())
    assert_totals_match(op)
    c = op.counters
    assert c[AGGREGATE_OVERFLOW] > 0 and c["late_within_tolerance"] > 0
    assert c["beyond_allowed_delay"] > 0 and c["rescored_live"] > 0 and c["evicted"] > 0
    assert mid_inserts > 100 and uncut > 5
