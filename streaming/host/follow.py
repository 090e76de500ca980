"""Follow mode: a worker that keeps consuming a NATS JetStream stream as it is published.

The host loop of `Worker` is kept (validation, operator, watermarks, idleness, journal,
checkpoints, one transaction per batch); what changes is where records come from and when a
batch closes:

1. restore from the latest checkpoint and replay the journal after it (by offset, i.e. by
   stream sequence), as in replay mode;
2. consume what the stream held at open and this worker has not consumed, in the recorded
   arrival merge;
3. then consume live messages (or, with `end_of_stream`, end the stream there and exit) in
   the order they are delivered. A batch closes when it holds `batch_size` records or
   `max_batch_delay` of wall time has passed since its first record; a delay of 0 lingers
   not at all: the batch closes with whatever was delivered by the time the worker took it,
   so batches grow only while a commit is under way (group commit). The wall clock decides
   only when to commit. The journal records the interleaving consumed,
   so a restore replays the same decisions.

SIGTERM/SIGINT: the batch in hand is committed, a checkpoint written, the run closed, exit 0.

Store outages: a failed commit (or checkpoint, or any store read at start) is retried with
exponential backoff (0.1 s doubling to 2 s); the transaction either committed or did not, and
a retried commit of an already committed batch writes nothing new (facts, journal and archive
are keyed). Past `outage_limit` the worker stops with exit 7. A broker outage is absorbed by
the live tail's reconnects (`nats_tail`: messages are read by sequence from the last one
delivered, nothing is lost); past the limit the worker stops with exit 8. Both are counted in
the metrics."""

from __future__ import annotations

import collections
import dataclasses
import signal
import time
from dataclasses import dataclass
from typing import Any
from collections.abc import Callable

from sqlalchemy.exc import InterfaceError, OperationalError

from ..sources.filelog import RawRecord
from ..store.lease import Lease
from ..store.ops import BatchWrite, Store
from .journal import verify_journal
from .loop import RunResult, Worker
from .settings import PipelineSpec, RunSettings

DEFAULT_MAX_BATCH_DELAY_S = 0.2
# How long an idle worker waits for a first record when batches do not linger (a delay of 0):
# the loop still wakes this often to check the broker, report status and see a stop.
IDLE_WAIT_S = 0.2
DEFAULT_OUTAGE_LIMIT_S = 30.0
STORE_UNAVAILABLE_EXIT = 7
BROKER_UNAVAILABLE_EXIT = 8
BACKOFF_FIRST_S = 0.1
BACKOFF_MAX_S = 2.0
LATENCY_SAMPLES = 20_000


class StoreUnavailable(RuntimeError):
    exit_code = STORE_UNAVAILABLE_EXIT


class BrokerUnavailable(RuntimeError):
    exit_code = BROKER_UNAVAILABLE_EXIT


@dataclass(frozen=True)
class FollowSettings:
    max_batch_delay_s: float = DEFAULT_MAX_BATCH_DELAY_S
    outage_limit_s: float = DEFAULT_OUTAGE_LIMIT_S

    def describe(self) -> dict:
        return {"follow": True, "max_batch_delay_s": self.max_batch_delay_s,
                "outage_limit_s": self.outage_limit_s}


@dataclass
class StoreOutages:
    count: int = 0
    seconds: float = 0.0
    retries: int = 0
    last_error: str | None = None

    def as_dict(self) -> dict:
        return {"outages": self.count, "outage_seconds": round(self.seconds, 3),
                "retries": self.retries, "last_error": self.last_error}


class AssignedStore:
    """The store as a follow worker sees it: every call that can meet a store outage retried
    with bounded backoff (the worker names its journal, checkpoint, metrics, run and lease rows
    by its key itself: `Worker.key`). Everything else is the underlying store."""

    def __init__(self, store: Store, outage_limit_s: float,
                 on_recovered: Callable[[], None] | None = None):
        self._store = store
        self.outage_limit_s = outage_limit_s
        self.outages = StoreOutages()
        self.on_recovered = on_recovered

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def retry(self, what: str, fn: Callable[[], Any]) -> Any:
        delay = BACKOFF_FIRST_S
        started: float | None = None
        while True:
            try:
                value = fn()
            except (OperationalError, InterfaceError) as exc:
                now = time.monotonic()
                if started is None:
                    started = now
                    self.outages.count += 1
                self.outages.retries += 1
                self.outages.last_error = str(exc.orig or exc).strip().splitlines()[0][:200]
                if now - started >= self.outage_limit_s:
                    self.outages.seconds += now - started
                    raise StoreUnavailable(
                        f"store unavailable for {now - started:.1f}s during {what} (limit "
                        f"{self.outage_limit_s:g}s): {self.outages.last_error}; the batch in "
                        f"hand was not committed and is read again on restart") from None
                time.sleep(delay)
                delay = min(delay * 2, BACKOFF_MAX_S)
                continue
            if started is not None:
                self.outages.seconds += time.monotonic() - started
                if self.on_recovered is not None:
                    self.on_recovered()
            return value

    # -- retried -------------------------------------------------------------------------------
    # The worker names its journal, metrics, checkpoint and run rows by its key itself
    # (`Worker.key`): these only retry.
    def commit_batch(self, b: BatchWrite, before_commit=None):
        return self.retry(f"commit of batch {b.seq}",
                          lambda: self._store.commit_batch(b, before_commit))

    def write_checkpoint(self, row: dict, mid_write=None, keep: int = 3) -> None:
        self.retry("checkpoint", lambda: self._store.write_checkpoint(row, mid_write, keep))

    def latest_checkpoint(self, pipeline: str):
        return self.retry("checkpoint read",
                          lambda: self._store.latest_checkpoint(pipeline))

    def checkpoint_chain(self, pipeline: str):
        return self.retry("checkpoint read",
                          lambda: self._store.checkpoint_chain(pipeline))

    def journal_after(self, pipeline: str, seq: int):
        return self.retry("journal read",
                          lambda: self._store.journal_after(pipeline, seq))

    def start_run(self, pipeline: str, settings: dict) -> int:
        return self.retry("run start", lambda: self._store.start_run(pipeline, settings))

    def finish_run(self, run_id: int, result: dict) -> None:
        self.retry("run finish", lambda: self._store.finish_run(run_id, result))

    def journal_keys(self) -> list[str]:
        return self.retry("journal keys", self._store.journal_keys)


def percentile(values, q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    i = min(len(ordered) - 1, max(0, int(round(q * (len(ordered) - 1)))))
    return ordered[i]


class FollowWorker(Worker):
    """`Worker` reading a NATS stream live; see the module docstring. Its batches always commit
    serially (its own loop never turns on overlapped commits): a JetStream ack must follow the
    commit of its batch, and the live loop's commit latency and outage retries are measured and
    handled per commit on the worker's thread."""

    # The store as one assignment sees it (AssignedStore) and the live NATS source: both
    # stand in for what the loop is typed with and add what follow mode needs.
    store: Any
    source: Any

    def __init__(self, spec: PipelineSpec, settings: RunSettings, follow: FollowSettings,
                 store: Store | None = None,
                 status: Callable[[dict], None] | None = None):
        if settings.throttle is not None:
            raise ValueError("--follow cannot be combined with a sink throttle")
        if not settings.source.startswith("nats://"):
            raise ValueError("--follow needs a nats:// source")
        # Serial commits (see the class docstring), and the run's recorded settings say so.
        settings = dataclasses.replace(settings, overlap_commits=False)
        self.follow = follow
        base = store or Store(settings.store_url, schema="upgrade")
        assigned: Any = AssignedStore(base, follow.outage_limit_s, self._store_recovered)
        super().__init__(spec, settings, assigned)
        self.status = status
        self.stop_requested = False
        self.stop_signal: str | None = None
        self._commit_ms: collections.deque = collections.deque(maxlen=1000)
        self._e2e_ms: collections.deque = collections.deque(maxlen=LATENCY_SAMPLES)
        self._rate_window: collections.deque = collections.deque()
        self.closed_by = {"size": 0, "delay": 0, "stop": 0}

    # -- lease -------------------------------------------------------------------------------
    def _take_lease(self) -> Lease:
        # Through an outage at start-up as every store call of a following worker.
        store: AssignedStore = self.store
        return store.retry("lease", super()._take_lease)

    def _store_recovered(self) -> None:
        if self.lease is not None and not self.lease.alive():
            self.lease.reacquire()

    # -- set-up ------------------------------------------------------------------------------
    def _open_source(self):
        from ..sources.nats_follow import NatsFollowSource
        arrival = {t: c.arrival_time_field for t, c in self.spec.contracts.items()}
        assignment = self.settings.assignment
        owned = None
        if assignment.count > 1:
            # The layout decides the partition counts; read it before choosing subjects.
            counts = _layout_counts(self.settings.source, self.spec.topics)
            owned = assignment.owned(self.spec.name, counts)
        # Live, a record whose arrival nothing confirms yet is held back until later records
        # judge it; a run that ends the stream at open judges it against what is there.
        return NatsFollowSource(self.settings.source, self.spec.topics, arrival, owned=owned,
                                assignment=str(assignment),
                                max_arrival_jump_us=self.settings.max_arrival_jump_us,
                                hold_trailing=not self.settings.end_of_stream)

    def run(self) -> RunResult:
        # From here on a stop request is honoured at the next batch boundary.
        previous = {sig: signal.signal(sig, self._on_signal)
                    for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            return super().run()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            source = getattr(self, "source", None)
            if source is not None:
                source.close()

    def _on_signal(self, signum, _frame) -> None:
        self.stop_requested = True
        self.stop_signal = signal.Signals(signum).name

    # -- the loop ----------------------------------------------------------------------------
    def _run_loop(self, t0: float) -> RunResult:
        # A journaled batch whose lines were rewritten is refused before anything is written
        # (no run row, no prepared state), as in a bounded run.
        journal = list(self.store.journal_after(self.key, self.seq))
        verify_journal(journal, self.source, self.positions)
        if self.spec.prepare is not None:
            self.spec.prepare(self.op, self.store)
        run_id = self.store.start_run(self.key, {**self.settings.describe(),
                                                       **self.follow.describe()})
        self.source_head_us = self._source_head()
        self.replaying = True
        for entry in journal:
            self._replay_entry(entry)
            self.result.replayed_batches += 1
        self.replaying = False
        limit = max(1, min(self.settings.batch_size, self.settings.checkpoint_every))
        delay = self.follow.max_batch_delay_s
        batch: list[RawRecord] = []
        # What the stream held at open: the recorded arrival merge.
        for raw in self.source.merged(self.positions):
            batch.append(raw)
            if len(batch) >= limit:
                self._commit(batch, "size")
                batch = []
            if self.stop_requested:
                break
        if batch:
            self._commit(batch, "size")
            batch = []
        # Live: whatever is delivered, in delivery order. With --end-of-stream the worker
        # finalizes what the stream held at open instead and exits (a bounded stream's end).
        first_at = 0.0
        last_status = 0.0
        if self.settings.end_of_stream and not self.stop_requested and not self.ended:
            self._run_batch([], None, end_of_stream=True)
        while not self.stop_requested and not self.settings.end_of_stream:
            now = time.monotonic()
            # With a batch open, until its delay is up; with none, until a first record comes
            # (a record arriving ends the wait at once).
            wait = (first_at + delay - now) if batch else (delay or IDLE_WAIT_S)
            got = self.source.poll(limit - len(batch), max(0.0, wait))
            now = time.monotonic()
            if got:
                if not batch:
                    first_at = now
                batch.extend(got)
            if batch and len(batch) >= limit:
                self._commit(batch, "size")
                batch = []
            elif batch and now - first_at >= delay:
                self._commit(batch, "delay")
                batch = []
            self._check_broker()
            if self.status is not None and now - last_status >= 0.25:
                last_status = now
                self.status(self.live_figures())
        if batch:
            self._commit(batch, "stop")
        self._checkpoint()
        self.result.elapsed_s = time.perf_counter() - t0
        self.result.metrics = self._metrics_snapshot()
        self.store.finish_run(run_id, {
            "records": self.result.records, "facts_written": self.result.facts_written,
            "facts_noop": self.result.facts_noop, "facts_rejected": self.result.facts_rejected,
            "restored_from": self.result.restored_from, "elapsed_s": self.result.elapsed_s,
            "stopped_by": self.stop_signal, "follow": self.result.metrics.get("follow")})
        return self.result

    def _check_broker(self) -> None:
        health = self.source.health
        down = health.down_for()
        if down >= self.follow.outage_limit_s:
            # The live tail's last failure says why (refused, closed, a status), as the store's
            # outage line does for the store.
            why = f": {health.last_error}" if health.last_error else ""
            raise BrokerUnavailable(
                f"NATS at {self.source.location.server_address} unreachable for {down:.1f}s "
                f"(limit {self.follow.outage_limit_s:g}s){why}; every committed batch is in "
                f"the store; the next start resumes from it")

    def _commit(self, batch: list[RawRecord], reason: str) -> None:
        t = time.perf_counter()
        # Within a batch, consume by arrival time (ties: topic, partition, offset): every
        # partition keeps its offset order (its arrival times never decrease) and the skew
        # between subjects' deliveries stays out of event-time decisions as far as one batch
        # reaches. The journal records this order.
        batch.sort(key=_arrival_order)
        ranges: dict[str, list[int]] = {}
        for raw in batch:
            k = f"{raw.topic}:{raw.partition}"
            r = ranges.get(k)
            if r is None:
                ranges[k] = [raw.offset, raw.offset]
            else:
                r[1] = raw.offset
        self._run_batch(batch, None)
        done_ns = time.time_ns()
        self._commit_ms.append((time.perf_counter() - t) * 1000)
        for stamp in self.source.take_stamps(ranges):
            self._e2e_ms.append((done_ns - stamp) / 1e6)
        self.closed_by[reason] += 1
        self._rate_window.append((time.monotonic(), len(batch)))

    # -- figures -------------------------------------------------------------------------------
    def _rate(self) -> float:
        now = time.monotonic()
        win = self._rate_window
        while win and now - win[0][0] > 5.0:
            win.popleft()
        if not win:
            return 0.0
        span = max(now - win[0][0], 1.0)
        return sum(n for _, n in win) / span

    def live_figures(self) -> dict:
        src = getattr(self, "source", None)
        sm = self.op.state_metrics()
        commit = list(self._commit_ms)
        e2e = list(self._e2e_ms)
        return {
            "worker": str(self.settings.assignment),
            "records_total": self.records_total,
            "rate_per_s": round(self._rate(), 1),
            "lag": src.lag(self.positions) if src is not None else {},
            "watermarks": {t: w.wm for t, w in self.wms.items()},
            "state_records": sm.get("state_records"), "state_bytes": sm.get("state_bytes"),
            "commit_ms": {"last": round(commit[-1], 2) if commit else None,
                          "p50": _r(percentile(commit, 0.5)),
                          "p99": _r(percentile(commit, 0.99))},
            "e2e_latency_ms": {"p50": _r(percentile(e2e, 0.5)), "p99": _r(percentile(e2e, 0.99)),
                               "samples": len(e2e)},
            "batches_closed_by": dict(self.closed_by),
            "store": self.store.outages.as_dict(),
            "broker": src.health.as_dict() if src is not None else None,
        }

    def _metrics_snapshot(self, out=None) -> dict:
        snap = super()._metrics_snapshot(out)
        if hasattr(getattr(self, "source", None), "lag"):
            snap["follow"] = self.live_figures()
        return snap


def _arrival_order(raw: RawRecord) -> tuple:
    return (raw.arrival_us, raw.topic, raw.partition, raw.offset)


def _r(v: float | None) -> float | None:
    return round(v, 2) if v is not None else None


def _layout_counts(location: str, topics: list[str]) -> dict[str, int]:
    from ..sources.filelog import SourceError
    from ..sources.nats_publish import PublishError, describe_stream
    try:
        parts = describe_stream(location)["partitions"]
    except PublishError as exc:
        raise SourceError(str(exc)) from None
    return {t: parts[t] for t in topics if t in parts}


def status_line(fig: dict) -> str:
    """The live one-liner: rate, records, lag (total and the worst partition), watermarks
    (time of day), state size, commit and end-to-end latency."""
    from ..timeutil import us_to_iso
    lag = fig["lag"]
    worst = max(lag.items(), key=lambda kv: kv[1]) if lag else None
    lag_text = (f"{sum(lag.values()):,} (max {worst[0]} {worst[1]:,})" if worst else "-")
    wms = " ".join(
        f"{t[:4]} {us_to_iso(w)[11:19] if isinstance(w, int) and abs(w) < 1 << 62 else '-'}"
        for t, w in fig["watermarks"].items())
    c = fig["commit_ms"]
    e = fig["e2e_latency_ms"]
    kb = (fig["state_bytes"] or 0) / 1024
    return (f"{fig['worker']} | {fig['rate_per_s']:,.0f} rec/s | {fig['records_total']:,} rec | "
            f"lag {lag_text} | wm {wms} | state {fig['state_records']} rec {kb:,.0f} kB | "
            f"commit {c['p50']} ms | e2e p50/p99 {e['p50']}/{e['p99']} ms")
