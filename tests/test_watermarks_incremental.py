"""The input watermark's cached minimum against the plain recompute over every partition: the
same watermark and the same "advanced" answer after every step of any sequence of records,
idleness changes, snapshots and the end of the stream."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from streaming.timeutil import NEG_INF, POS_INF
from streaming.watermarks import InputWatermark


class PlainWatermark:
    """The definition, walked in full on every change."""

    def __init__(self, partitions: int, lateness_us: int) -> None:
        self.lateness_us = lateness_us
        self.max_event = [NEG_INF] * partitions
        self.idle = [False] * partitions
        self.wm = NEG_INF
        self.ended = False

    def _recompute(self) -> bool:
        if self.ended:
            return False
        active = [m if m <= NEG_INF else m - self.lateness_us
                  for p, m in enumerate(self.max_event) if not self.idle[p]]
        if not active or min(active) <= self.wm:
            return False
        self.wm = min(active)
        return True

    def observe(self, p: int, event_us: int) -> bool:
        rejoined = self.idle[p]
        self.idle[p] = False
        if event_us > self.max_event[p]:
            self.max_event[p] = event_us
            return self._recompute()
        return self._recompute() if rejoined else False

    def set_idle(self, p: int, idle: bool) -> bool:
        if self.idle[p] == idle:
            return False
        self.idle[p] = idle
        return self._recompute()

    def end_of_stream(self) -> bool:
        self.ended = True
        if self.wm < POS_INF:
            self.wm = POS_INF
            return True
        return False


def steps(partitions: int) -> st.SearchStrategy:
    part = st.integers(0, partitions - 1)
    # Few distinct times, so ties between partitions (and equal maxima) are common.
    return st.lists(st.one_of(
        st.tuples(st.just("observe"), part, st.integers(0, 12)),
        st.tuples(st.just("idle"), part, st.booleans()),
        st.tuples(st.just("restore"), st.just(0), st.just(0)),
    ), max_size=80)


@settings(max_examples=400, deadline=None)
@given(st.integers(1, 5).flatmap(lambda n: st.tuples(st.just(n), steps(n))),
       st.booleans())
def test_cached_minimum_matches_the_plain_recompute(case, end: bool) -> None:
    partitions, ops = case
    lateness = 3
    fast = InputWatermark("t", partitions, lateness)
    plain = PlainWatermark(partitions, lateness)
    for i, (what, p, v) in enumerate(ops):
        if what == "observe":
            got, want = fast.observe(p, v * 10, i), plain.observe(p, v * 10)
        elif what == "idle":
            got, want = fast.set_idle(p, v), plain.set_idle(p, v)
        else:  # a checkpoint in between: the restored watermark goes on the same way
            fast = InputWatermark.restore(fast.snapshot())
            got = want = False
        assert (got, fast.wm) == (want, plain.wm)
    if end:
        assert (fast.end_of_stream(), fast.wm) == (plain.end_of_stream(), plain.wm)
        assert fast.observe(0, 10**6, 0) is plain.observe(0, 10**6) is False
