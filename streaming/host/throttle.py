"""A sink throttle for pressure tests, in worker-clock (source) time.

Model. The reader takes records in arrival order; the worker clock is the arrival time of the
record being read. The sink commits once per tick (default 1 s of worker clock): at a tick at
time T it may commit up to `rate x tick` records that were read before T (unused credit is not
banked once the backlog is empty). The rate is `sink_rate` until the backlog first reaches
`backlog_limit`; from the next tick on it is `capacity_rate` (None = unlimited: the whole
backlog is committed at that tick). When the log is exhausted the clock keeps ticking until the
backlog is empty, so a recorded replay drains the same way at any wall-clock speed.

Backlog = records read but not committed. Backlog age = worker clock - the oldest uncommitted
record's arrival. Records committed at a tick go through the host's normal batch path (journal,
checkpoints, crash points), so a throttled run publishes the same facts as an unthrottled one.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from ..timeutil import US_PER_S, us_to_iso


@dataclass(frozen=True)
class ThrottleSettings:
    sink_rate: float  # records per second of worker clock while throttled
    backlog_limit: int | None = None  # backlog size that restores capacity (None: never)
    capacity_rate: float | None = None  # records per second after the limit (None: unlimited)
    tick_us: int = US_PER_S

    def __post_init__(self) -> None:
        if self.sink_rate <= 0:
            raise ValueError("--sink-rate must be > 0 records per second")
        if self.backlog_limit is not None and self.backlog_limit < 1:
            raise ValueError("--backlog-limit must be >= 1")
        if self.capacity_rate is not None and self.capacity_rate <= 0:
            raise ValueError("--sink-capacity must be > 0 records per second")
        if self.tick_us <= 0:
            raise ValueError("the sink tick must be positive")

    def describe(self) -> dict:
        return {"sink_rate": self.sink_rate, "backlog_limit": self.backlog_limit,
                "sink_capacity": self.capacity_rate, "sink_tick_s": self.tick_us / US_PER_S}


@dataclass
class BacklogReport:
    """What the throttled run measured; all times are worker-clock microseconds."""

    settings: ThrottleSettings
    start_us: int | None = None
    read: int = 0
    committed: int = 0
    peak_backlog: int = 0
    peak_at_us: int | None = None
    peak_age_us: int = 0
    limit_reached_at_us: int | None = None  # clock when the backlog first reached the limit
    backlog_at_limit: int = 0
    read_before_limit: int = 0
    committed_before_limit: int = 0
    read_during_drain: int = 0
    drained_at_us: int | None = None  # first tick after the limit with an empty backlog
    ticks: int = 0
    trace: list[dict] = field(default_factory=list)  # one sample per tick

    def as_dict(self) -> dict:
        s = self.settings
        out = {**s.describe(), "read": self.read, "committed": self.committed,
               "peak_backlog": self.peak_backlog, "peak_at": us_to_iso(self.peak_at_us),
               "peak_backlog_age_s": self.peak_age_us / US_PER_S,
               "limit_reached_at": us_to_iso(self.limit_reached_at_us),
               "drained_at": us_to_iso(self.drained_at_us), "ticks": self.ticks}
        if self.start_us is not None and self.limit_reached_at_us is not None:
            fill_s = (self.limit_reached_at_us - self.start_us) / US_PER_S
            out["fill_s"] = fill_s
            out["arrival_rate_fill"] = self.read_before_limit / fill_s if fill_s > 0 else None
            out["growth_rate"] = ((self.read_before_limit - self.committed_before_limit) / fill_s
                                  if fill_s > 0 else None)
        if self.limit_reached_at_us is not None and self.drained_at_us is not None:
            drain_s = (self.drained_at_us - self.limit_reached_at_us) / US_PER_S
            out["time_to_drain_s"] = drain_s
            out["arrival_rate_drain"] = self.read_during_drain / drain_s if drain_s > 0 else None
            out["net_drain_rate"] = self.backlog_at_limit / drain_s if drain_s > 0 else None
            if s.capacity_rate is not None and out["arrival_rate_drain"] is not None:
                net = s.capacity_rate - out["arrival_rate_drain"]
                out["expected_net_drain_rate"] = net
                out["expected_time_to_drain_s"] = (self.backlog_at_limit / net if net > 0
                                                   else None)
        return out

    def lines(self) -> list[str]:
        """The backlog calculation, as printed at the end of a throttled run."""
        d = self.as_dict()
        cap = "unlimited" if d["sink_capacity"] is None else f"{d['sink_capacity']:g} rec/s"
        out = [f"backlog: sink {d['sink_rate']:g} rec/s until the backlog reaches "
               f"{d['backlog_limit']}, then {cap} (tick {d['sink_tick_s']:g}s of worker clock)",
               f"  read {d['read']}, committed {d['committed']}; peak backlog "
               f"{d['peak_backlog']} at {d['peak_at']} (oldest record {d['peak_backlog_age_s']:g}s "
               f"old)"]
        if d.get("fill_s") is not None:
            out.append(f"  fill: {self.read_before_limit} read - {self.committed_before_limit} "
                       f"committed in {d['fill_s']:g}s "
                       f"= growth {d['growth_rate']:.3f} rec/s (arrivals "
                       f"{d['arrival_rate_fill']:.3f} - sink {d['sink_rate']:g}); limit reached at "
                       f"{d['limit_reached_at']} with backlog {self.backlog_at_limit}")
        else:
            out.append("  the backlog never reached the limit: the sink stayed throttled")
        if d.get("time_to_drain_s") is not None:
            line = (f"  drain: {self.backlog_at_limit} rec in {d['time_to_drain_s']:g}s = net "
                    f"drain {d['net_drain_rate']:.3f} rec/s (arrivals during drain "
                    f"{d['arrival_rate_drain']:.3f} rec/s)")
            if d.get("expected_net_drain_rate") is not None:
                exp = d.get("expected_time_to_drain_s")
                line += (f"; expected capacity - arrivals = {d['expected_net_drain_rate']:.3f} "
                         f"rec/s -> {exp:.1f}s" if exp is not None else
                         "; capacity does not exceed arrivals: no drain expected")
            out.append(line)
            out.append(f"  drained at {d['drained_at']}")
        elif d.get("fill_s") is not None:
            out.append("  the backlog was not drained when the run ended")
        return out


class SinkThrottle:
    """Paces a worker's free-reading phase: `batches` reads the records and yields the batches
    the throttled sink may commit, tick by tick; the host loop commits each one (its normal
    batch path) before the next is computed. The pacer never calls the host."""

    def __init__(self, settings: ThrottleSettings):
        self.settings = settings
        self.report = BacklogReport(settings)
        self.pending: deque = deque()
        self.credit = 0.0
        self.capacity = False
        self.now_us: int | None = None

    # -- metrics seen by the host's snapshot ------------------------------------------------
    def backlog_metrics(self) -> dict:
        now = self.now_us
        oldest = self.pending[0].arrival_us if self.pending else None
        age = (now - oldest) if (now is not None and oldest is not None) else 0
        # The snapshot's own clock is the last committed record's; while throttled the
        # reader is ahead of it, and the backlog is measured at the reader's clock.
        return {"read_clock_us": now, "read_clock": us_to_iso(now),
                "backlog_records": len(self.pending), "backlog_age_s": age / US_PER_S,
                "oldest_uncommitted_arrival": us_to_iso(oldest),
                "sink_phase": "capacity" if self.capacity else "throttled",
                "read": self.report.read, "committed": self.report.committed}

    def _rate(self) -> float | None:
        return self.settings.capacity_rate if self.capacity else self.settings.sink_rate

    def _tick(self, at_us: int, batch_limit: int) -> Iterator[list]:
        """One sink tick: yields the due records in batches of at most `batch_limit`. The
        report counts a batch as committed before it is yielded, so the host's metrics
        snapshot taken while committing it already includes it."""
        rep = self.report
        rep.ticks += 1
        self.now_us = at_us
        rate = self._rate()
        if rate is None:
            n = len(self.pending)
        else:
            self.credit += rate * self.settings.tick_us / US_PER_S
            n = min(int(self.credit + 1e-9), len(self.pending))
            self.credit -= n
        before = len(self.pending)
        left = n
        while left:
            k = min(batch_limit, left)
            chunk = [self.pending.popleft() for _ in range(k)]
            left -= k
            rep.committed += k
            yield chunk
        if not self.pending:
            self.credit = 0.0
            if self.capacity and rep.drained_at_us is None:
                rep.drained_at_us = at_us
        rep.trace.append({"at": at_us, "backlog_before": before, "committed": n,
                          "backlog_after": len(self.pending)})

    def _after_read(self, raw) -> None:
        rep = self.report
        rep.read += 1
        if self.capacity and rep.drained_at_us is None:
            rep.read_during_drain += 1
        size = len(self.pending)
        if size > rep.peak_backlog:
            rep.peak_backlog = size
            rep.peak_at_us = raw.arrival_us
            rep.peak_age_us = raw.arrival_us - self.pending[0].arrival_us
        limit = self.settings.backlog_limit
        if not self.capacity and limit is not None and size >= limit:
            self.capacity = True
            rep.limit_reached_at_us = raw.arrival_us
            rep.backlog_at_limit = size
            rep.read_before_limit = rep.read
            rep.committed_before_limit = rep.committed

    def batches(self, records: Iterable, batch_limit: int,
                progress: Callable[[int], None] | None = None) -> Iterator[list]:
        """Read `records` (in arrival order) through the throttle until they are exhausted and
        the backlog drained, yielding each batch the sink commits; `progress` gets the
        committed count after every tick."""
        tick = self.settings.tick_us
        next_tick: int | None = None
        rep = self.report
        for raw in records:
            if next_tick is None:
                rep.start_us = raw.arrival_us
                next_tick = raw.arrival_us + tick
            while next_tick <= raw.arrival_us:
                yield from self._tick(next_tick, batch_limit)
                next_tick += tick
                if progress:
                    progress(rep.committed)
            self.now_us = raw.arrival_us
            self.pending.append(raw)
            self._after_read(raw)
        while self.pending:
            assert next_tick is not None  # set with the first record read
            yield from self._tick(next_tick, batch_limit)
            next_tick += tick
            if progress:
                progress(rep.committed)
