"""Per-input, per-partition event-time watermarks with opt-in, evidence-based idleness.

partition_wm = max_event_time_seen - lateness
input_wm     = max(previous input_wm, min over the input's active partitions)

A partition that has sent nothing holds its input back (the safe default). A partition is
excluded from the minimum only when the host says it is caught up with the log and it has been
quiet for `idle_after` of source time; it rejoins on its next record.

The minimum is recomputed only when it can change: a partition that did not hold the minimum
moving up leaves it where it was, so most new maxima cost O(1) instead of a walk over every
partition."""

from __future__ import annotations

from typing import Any
from .timeutil import NEG_INF, POS_INF


class InputWatermark:
    __slots__ = ("topic", "lateness_us", "max_event", "idle", "last_arrival", "wm", "ended",
                 "low_p")

    def __init__(self, topic: str, partitions: int, lateness_us: int):
        self.topic = topic
        self.lateness_us = lateness_us
        self.max_event: list[int] = [NEG_INF] * partitions
        self.idle: list[bool] = [False] * partitions
        self.last_arrival: list[int] = [NEG_INF] * partitions
        self.wm = NEG_INF
        self.ended = False
        # The active partition that held the minimum at the last recompute (the first of equal
        # ones), or -1 when none did (all idle, or not computed since a restore).
        self.low_p = -1

    def partition_wm(self, p: int) -> int:
        m = self.max_event[p]
        return m if m <= NEG_INF else m - self.lateness_us

    def observe(self, p: int, event_us: int, arrival_us: int) -> bool:
        """Record an accepted event time. Returns True when the input watermark advanced."""
        rejoined = False
        if self.idle[p]:
            self.idle[p] = False
            rejoined = True
        if arrival_us > self.last_arrival[p]:
            self.last_arrival[p] = arrival_us
        if event_us > self.max_event[p]:
            self.max_event[p] = event_us
            # Only the partition holding the minimum can move it (another one rising leaves
            # the minimum, and so the watermark, as they were); a rejoin changes the set.
            if rejoined or p == self.low_p or self.low_p < 0:
                return self._recompute()
            return False
        return self._recompute() if rejoined else False

    def touch(self, p: int, arrival_us: int) -> None:
        """A record arrived from p (even a rejected one): the partition is not quiet."""
        if arrival_us > self.last_arrival[p]:
            self.last_arrival[p] = arrival_us

    def set_idle(self, p: int, idle: bool) -> bool:
        if self.idle[p] == idle:
            return False
        self.idle[p] = idle
        return self._recompute()

    def _recompute(self) -> bool:
        if self.ended:
            return False
        low = POS_INF
        low_p = -1
        idle = self.idle
        for p, m in enumerate(self.max_event):
            if idle[p]:
                continue
            pw = m if m <= NEG_INF else m - self.lateness_us
            if low_p < 0 or pw < low:
                low = pw
                low_p = p
        self.low_p = low_p
        if low_p < 0:
            return False  # all idle: hold, never jump
        if low > self.wm:
            self.wm = low
            return True
        return False

    def end_of_stream(self) -> bool:
        self.ended = True
        if self.wm < POS_INF:
            self.wm = POS_INF
            return True
        return False

    def snapshot(self) -> dict[str, Any]:
        return {"topic": self.topic, "lateness_us": self.lateness_us,
                "max_event": list(self.max_event),
                "idle": list(self.idle), "last_arrival": list(self.last_arrival), "wm": self.wm,
                "ended": self.ended}

    @classmethod
    def restore(cls, snap: dict[str, Any]) -> InputWatermark:
        w = cls(snap["topic"], len(snap["max_event"]), snap["lateness_us"])
        w.max_event = list(snap["max_event"])
        w.idle = list(snap["idle"])
        w.last_arrival = list(snap["last_arrival"])
        w.wm = snap["wm"]
        w.ended = snap["ended"]
        return w
