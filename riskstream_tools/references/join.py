"""Interval-join oracles over the final (latest-revision) events.

`candidate_pairs` is the naive P x S scan of the seed; `fast_candidate_pairs` is an exact
per-merchant sorted probe. Both take {id: (merchant, event_time)} maps with datetimes or
integer microseconds."""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from datetime import timedelta

from streaming.timeutil import US_PER_MIN


def _window(sample):
    if isinstance(sample, int):
        return 47 * US_PER_MIN, 8 * US_PER_MIN
    return timedelta(minutes=47), timedelta(minutes=8)


def candidate_pairs(payment_events: dict, risk_events: dict) -> set[tuple[str, str]]:
    if not payment_events:
        return set()
    lower, upper = _window(next(iter(payment_events.values()))[1])
    return {(payment_id, signal_id)
            for payment_id, (payment_merchant, payment_at) in payment_events.items()
            for signal_id, (signal_merchant, signal_at) in risk_events.items()
            if payment_merchant == signal_merchant
            and payment_at - lower <= signal_at <= payment_at + upper}


def fast_candidate_pairs(payment_events: dict, risk_events: dict) -> set[tuple[str, str]]:
    if not payment_events or not risk_events:
        return set()
    lower, upper = _window(next(iter(payment_events.values()))[1])
    by_merchant: dict[str, list] = {}
    for sid, (m, s) in risk_events.items():
        by_merchant.setdefault(m, []).append((s, sid))
    for v in by_merchant.values():
        v.sort()
    times = {m: [s for s, _ in v] for m, v in by_merchant.items()}
    out = set()
    for pid, (m, t) in payment_events.items():
        signals = by_merchant.get(m)
        if not signals:
            continue
        ts = times[m]
        i = bisect_left(ts, t - lower)
        j = bisect_right(ts, t + upper)
        for x in range(i, j):
            out.add((pid, signals[x][1]))
    return out
