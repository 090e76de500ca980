"""The host loop: reads the source, validates, drives an operator, commits each batch (facts,
archive, quarantine, queue, journal, metrics) in one transaction, checkpoints every N records
and at the end, and restores from the latest checkpoint by replaying the journal.

The host owns I/O, clocks and watermarks; operators are pure state machines. One host serves
every pipeline through a `PipelineSpec`. Checkpoints, journal replay, the metrics snapshot, the
sink pacer and crash injection each live in their own module of this package."""

from __future__ import annotations

import logging
import time
from itertools import islice
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from ..assignment import check_assignment_history
from ..collector import run_collector
from ..operators.base import Emit, safe_text
from ..sources import open_source
from ..sources.filelog import RawRecord
from ..sources.records import own_arrival
from ..store.lease import Lease
from ..store.ops import BatchWrite, SinkResult, Store, dumps, now_iso, shared_store
from ..store.writer_process import WriterProcess, pack
from ..timeutil import NEG_INF, event_date
from ..watermarks import InputWatermark
from .checkpoints import (CheckpointChain, CheckpointDump, CheckpointMismatch, checkpoint_row,
                          checkpoint_summary, dump_checkpoint, read_checkpoint, verified_positions)
from .crash import CrashInjector
from .drive import BatchTrace, drive_batch
from .journal import journaled_batch, verify_journal
from .metrics import metrics_snapshot
from .settings import TP, Operator, PipelineSpec, RunSettings, Source
from .throttle import SinkThrottle

log = logging.getLogger(__name__)


@dataclass
class RunResult:
    records: int = 0
    batches: int = 0
    facts_written: int = 0
    facts_noop: int = 0
    facts_rejected: int = 0
    checkpoints: int = 0
    restored_from: int | None = None
    replayed_batches: int = 0
    end_of_stream: bool = False
    elapsed_s: float = 0.0
    metrics: dict = field(default_factory=dict)
    backlog: dict | None = None  # the throttle's backlog calculation, when throttled
    backlog_lines: list[str] = field(default_factory=list)
    # Wall seconds per host stage: decode_validate (decoding each line's bytes against its
    # contract), operator (the operator plus the host's per-record bookkeeping), sink
    # (building and committing each batch), checkpoint. The rest of a run is the source.
    stage_seconds: dict = field(default_factory=lambda: dict.fromkeys(
        ("decode_validate", "operator", "sink", "checkpoint"), 0.0))
    # Seconds the batch commits themselves took (`Store.commit_rows`, wherever it ran). With
    # overlapped commits the sink stage above is only what the worker spent on the sink
    # (building each batch, handing it over, waiting for a commit still in flight); this is
    # what the commits took in the writer process.
    sink_commit_s: float = 0.0
    # Batches whose commit ran in the writer process while the worker went on with the next.
    overlapped_batches: int = 0
    # Checkpoints the writer process compressed and wrote while the worker went on.
    overlapped_checkpoints: int = 0
    # Of the overlapped batches, those handed over behind a checkpoint still being written.
    queued_behind_checkpoint: int = 0
    writer_pid: int | None = None
    writer_peak_rss_mib: float | None = None  # the writer process's peak memory (Linux)
    writer_cpu_s: float | None = None  # the writer process's CPU seconds (Linux)
    writer_written_mib: float | None = None  # what the writer process wrote to storage (Linux)
    # Of the checkpoint stage, the seconds the worker spent taking and serializing the state
    # (`dump_checkpoint`); the rest of the stage is compressing and writing it (a serial run)
    # or waiting for the writer process to have done so (an overlapped one).
    checkpoint_dump_s: float = 0.0


@dataclass
class _InFlight:
    """A batch whose commit runs in the writer process, and what the host does once it has
    committed (in the serial order: accounting, crash points, ack). Its rows are not kept:
    once packed and handed over they are the writer's, and the worker frees them while the
    batch commits (up to `batches_behind_checkpoint` + 1 batches can be in flight)."""

    seq: int
    n: int
    ranges: dict
    # The checkpoint due after the batch, dumped while it commits: handed to the writer once
    # the batch has settled.
    dump: CheckpointDump | None = None
    # The batch handed over after this one, behind the same checkpoint (`_CheckpointInFlight`).
    next: _InFlight | None = None


@dataclass
class _CheckpointInFlight:
    """A checkpoint the writer process compresses and writes, and the ack of the batch it
    follows (which a serial run makes after the checkpoint)."""

    seq: int
    ranges: dict
    paused: bool  # the writer stops mid-write for the during-checkpoint crash point
    # The batches handed to the writer behind the checkpoint (`Worker._queues_behind`), the
    # first of a chain (`_InFlight.next`): the writer commits them once the checkpoint is
    # written, and they settle after it, in order.
    then: _InFlight | None = None
    queued: int = 0  # how many

    def queue(self, batch: _InFlight) -> None:
        if self.then is None:
            self.then = batch
        else:
            last = self.then
            while last.next is not None:
                last = last.next
            last.next = batch
        self.queued += 1


class Worker:
    def __init__(self, spec: PipelineSpec, settings: RunSettings, store: Store | None = None,
                 progress: Callable[[int, int], None] | None = None):
        self.spec = spec
        self.settings = settings
        # What this worker's journal, checkpoints, metrics and runs are kept under: the
        # pipeline's name, or `<pipeline>@I/N` for one of several (streaming/assignment.py).
        self.key = settings.assignment.store_key(spec.name)
        # A run creates an empty store and migrates an older one before it reads anything.
        self.store = store or Store(settings.store_url, schema="upgrade")
        self.progress = progress
        self.crash = CrashInjector(settings.crash_at)
        self.op: Operator = spec.make_operator(settings)
        self.source: Source  # opened by run(), once the checkpoint is known to be readable
        self.wms: dict[str, InputWatermark] = {}
        self.positions: dict[TP, int] = {}
        self.clock = NEG_INF
        self.stream_start = NEG_INF
        self.seq = 0
        self.records_total = 0
        self.since_ckpt = 0
        self.last_ckpt: dict = {}
        self.result = RunResult()
        self.ended = False
        self.throttle = SinkThrottle(settings.throttle) if settings.throttle else None
        self.replaying = False
        self.source_head_us: int | None = None
        self._tp_names: dict[TP, str] = {}  # ("topic", p) -> "topic:p", as the journal names it
        # Overlapped commits (RunSettings.overlap_commits): one writer process, at most one
        # batch in flight. Only the bounded loop below turns it on (`_overlap`).
        self._overlap = False
        self._writer: WriterProcess | None = None
        self._inflight: _InFlight | _CheckpointInFlight | None = None
        # What the next checkpoint builds on (a delta names it). None until this run's first
        # checkpoint, which is full even after a restore: a chain never spans two runs, so a
        # delta is always applied to a state the same code wrote (a restored checkpoint may
        # come from a release whose operator state had another layout).
        self._chain: CheckpointChain | None = None
        self.lease: Lease | None = None  # held for the length of run()

    @property
    def restored_from(self) -> int | None:
        return self.result.restored_from

    # ------------------------------------------------------------------ set-up
    def _open_source(self) -> Source:
        arrival = {t: c.arrival_time_field for t, c in self.spec.contracts.items()}
        assignment = self.settings.assignment
        owns = None
        if assignment.count > 1:
            owns = lambda tp: assignment.owns(self.spec.name, tp[0], tp[1])  # noqa: E731
        return open_source(self.settings.source, self.spec.topics, arrival,
                           self.settings.max_arrival_jump_us, owns=owns)

    def _restore(self, source: Source, ck: dict | None) -> None:
        if ck is None:
            for t in self.spec.topics:
                self.wms[t] = InputWatermark(t, source.partition_counts[t],
                                             self.spec.lateness_us[t])
            self.positions = {tp: 0 for tp in source.tps()}
            if self.settings.assignment.count > 1:
                # Partitions of other workers never deliver here: leave them out of the
                # minimum (a checkpoint keeps this, as every idleness).
                for topic, wm in self.wms.items():
                    for p in range(len(wm.idle)):
                        if not source.owns((topic, p)):
                            wm.set_idle(p, True)
            return
        state = ck["decoded"]
        self.positions = verified_positions(ck, source)
        try:
            log.info("%s: restoring checkpoint %s (journal seq %s, %s records read)",
                     self.spec.name, ck["id"], state.get("journal_seq"),
                     state.get("records_total"))
            self.op.restore(state["operator"])
            self.wms = {t: InputWatermark.restore(s) for t, s in state["watermarks"].items()}
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
            raise CheckpointMismatch(
                f"checkpoint {ck['id']} decodes but its operator or watermark state does not "
                f"have the shape this code writes ({type(exc).__name__}: {exc}); refusing to "
                f"start: nothing was read or written") from None
        self.clock = state["clock"]
        self.stream_start = state["stream_start"]
        self.seq = state["journal_seq"]
        self.records_total = state["records_total"]
        self.ended = state.get("ended", False)
        self.result.restored_from = ck["id"]

    # ------------------------------------------------------------------ the loop
    def _take_lease(self) -> Lease:
        """The lease on this worker's key (streaming/store/lease.py), refused (`LeaseHeld`,
        exit 6) while another live process holds it."""
        return Lease(self.store.engine, self.key).acquire()

    def run(self) -> RunResult:
        t0 = time.perf_counter()
        # One live process per worker key, for a bounded run as for a following one: two runs
        # of one key at once would interleave their journal sequence numbers and checkpoints.
        # Taken before anything is read; the kernel (SQLite) or the server (PostgreSQL)
        # releases it when the process dies.
        self.lease = self._take_lease()
        try:
            # Refuse before reading or writing anything: a worker count other than the one
            # the store's journal was kept under, or a state format that is not ours.
            check_assignment_history(self.store.journal_keys(), self.spec.name,
                                     self.settings.assignment)
            ck = read_checkpoint(self.store, self.key, self.op.state_schema)
            self.source = self._open_source()
            self._restore(self.source, ck)
            # The recording and restored state live for the whole run: out of the cyclic
            # collector's sight, and young objects collected less often
            # (streaming/collector.py). Measured: about a third of operator time on 100,000
            # events went to collections before the first of these.
            with run_collector():
                try:
                    return self._run_loop(t0)
                finally:
                    self._close_writer()
        finally:
            self.lease.release()

    def _run_loop(self, t0: float) -> RunResult:
        journal = list(self.store.journal_after(self.key, self.seq))
        verify_journal(journal, self.source, self.positions)
        if self.spec.prepare is not None:
            self.spec.prepare(self.op, self.store)
        run_id = self.store.start_run(self.key, self.settings.describe())
        start = (f"checkpoint {self.result.restored_from}"
                 if self.result.restored_from is not None else "the beginning")
        log.info("%s: run %s started from %s (%s)", self.spec.name, run_id, start,
                 self.settings.source)
        total = self.source.total_records() - sum(self.positions.values())
        self.source_head_us = self._source_head()
        done = 0
        self.replaying = True
        # 1. Follow the journal past the checkpoint: same records, same order, same decisions.
        for entry in journal:
            n = self._replay_entry(entry)
            done += n
            self.result.replayed_batches += 1
            if self.progress:
                self.progress(done, total)
        self.replaying = False
        if self.result.replayed_batches:
            log.info("%s: replayed %d journaled batches (%d records) after the checkpoint",
                     self.spec.name, self.result.replayed_batches, done)
        # 2. Read freely (through the sink throttle when one is set). Commits overlap the next
        # batch's work only here: not while replaying (the journaled batches above were each
        # committed before the next was re-run), not under the throttle (it paces commits in
        # worker-clock time and reports the backlog per commit), and not on a store only
        # this process can open (an in-memory SQLite database).
        self._overlap = bool(self.settings.overlap_commits and self.throttle is None
                             and shared_store(self.store.url))
        limit = max(1, min(self.settings.batch_size, self.settings.checkpoint_every))
        if self.throttle is not None:
            base = done
            prog = (lambda n: self.progress(base + n, total)) if self.progress else None
            for paced in self.throttle.batches(self.source.merged(self.positions), limit, prog):
                self._run_batch(paced, None)
            done += self.throttle.report.committed
            self.result.backlog = self.throttle.report.as_dict()
            self.result.backlog_lines = self.throttle.report.lines()
        records = self.source.merged(self.positions) if self.throttle is None else iter(())
        while batch := list(islice(records, limit)):
            # The run's last batch commits serially: nothing is left to overlap it with, and a
            # run of one batch then never starts a writer process. (A batch shorter than the
            # limit is the last one.)
            self._run_batch(batch, None,
                            may_overlap=len(batch) >= limit and done + len(batch) < total)
            done += len(batch)
            if self.progress:
                self.progress(done, total)
        if self.settings.end_of_stream and not self.ended:
            self._run_batch([], None, end_of_stream=True)
        self._settle()  # the last batch's commit, crash points and ack before the checkpoint
        self._overlap = False
        if self.since_ckpt > 0 or self.result.batches > 0 or self.result.replayed_batches > 0:
            self._checkpoint()
        self.result.elapsed_s = time.perf_counter() - t0
        self.result.end_of_stream = self.ended
        self.result.metrics = self._metrics_snapshot()
        self.store.finish_run(run_id, {
            "records": self.result.records, "facts_written": self.result.facts_written,
            "facts_noop": self.result.facts_noop, "facts_rejected": self.result.facts_rejected,
            "restored_from": self.result.restored_from, "elapsed_s": self.result.elapsed_s,
            "end_of_stream": self.ended,
            **({"backlog": self.result.backlog} if self.result.backlog else {})})
        log.info("%s: run %s finished: %d records in %d batches, facts written %d, no-op %d, "
                 "rejected %d, %d checkpoints, %.2fs", self.spec.name, run_id,
                 self.result.records, self.result.batches, self.result.facts_written,
                 self.result.facts_noop, self.result.facts_rejected, self.result.checkpoints,
                 self.result.elapsed_s)
        return self.result

    def _source_head(self) -> int | None:
        """Newest arrival time held by the source: what a caught-up reader would have seen."""
        newest = getattr(self.source, "newest_arrival", None)
        if newest is not None:  # a streamed source knows it without reading the partitions
            return newest()
        last = getattr(self.source, "next_arrival", None)
        if last is None:
            return None
        head = None
        for tp in self.source.tps():
            end = self.source.end_offset(tp)
            if end:
                a = last(tp, end - 1)
                if a is not None and (head is None or a > head):
                    head = a
        return head

    def _replay_entry(self, entry: dict) -> int:
        raws, decisions = journaled_batch(entry, self.source, self.positions)
        self._replay_arrivals(raws)
        self._run_batch(raws, decisions, end_of_stream=bool(entry["end_of_stream"]),
                        seq=entry["seq"])
        return len(raws)

    def _replay_arrivals(self, raws: list[RawRecord]) -> None:
        """Arrival times of replayed records from the journaled jump decisions and the
        partitions' arrivals this worker consumed, not from what the source judges today (a
        log that grew since can judge a partition's last records otherwise)."""
        running: dict[TP, int] = {}
        contracts = self.spec.contracts
        for raw in raws:
            tp = (raw.topic, raw.partition)
            prev = running.get(tp)
            if prev is None:
                prev = self.wms[raw.topic].last_arrival[raw.partition]
            own = (None if raw.fault is not None else
                   own_arrival(raw.line, contracts[raw.topic].arrival_time_field))
            running[tp] = raw.arrival_us = prev if own is None else max(prev, own)

    def _run_batch(self, raws: list[RawRecord], decisions: list | None,
                   end_of_stream: bool = False, seq: int | None = None,
                   may_overlap: bool = False) -> None:
        # The batch's journal sequence number: the next one, or a replayed entry's own.
        seq = self.seq + 1 if seq is None else seq
        out = Emit(self.spec.name, seq)
        op = self.op
        wms = self.wms
        following = decisions is not None
        stages = self.result.stage_seconds
        if raws and self.stream_start <= NEG_INF:
            self.stream_start = raws[0].arrival_us
        trace = BatchTrace(self.clock)
        idle_after = self.settings.idle_after_us
        # An operator that decides nothing by the clock is not called after every record.
        on_clock = op.on_clock if getattr(op, "clocked", True) else None
        clock = time.perf_counter
        t_batch = clock()
        drive_batch(raws, op, wms, self.spec.contracts, out, self.positions, self._tp_names,
                    trace, on_clock,
                    sorted(decisions or [], key=lambda d: d[0]) if following else None,
                    (None if following or idle_after is None
                     else lambda i, clock, emit, made: self._idleness(i, clock, idle_after,
                                                                      emit, made)))
        self.clock = trace.clock
        if end_of_stream:
            for wm in wms.values():
                wm.end_of_stream()
            op.on_end_of_stream(out)
            self.ended = True
        t_sink = clock()
        stages["decode_validate"] += trace.decode_s
        stages["operator"] += t_sink - t_batch - trace.decode_s
        handing = bool(self._overlap and may_overlap and not end_of_stream
                       and decisions is None)
        queued = handing and self._queues_behind(self._inflight)
        if isinstance(self._inflight, _CheckpointInFlight) and not queued:
            # Written while this batch ran; settled before the batch is built, as its metrics
            # snapshot reports the newest checkpoint. The wait is the checkpoint stage's.
            self._settle()
            t_sink = clock()
        n = len(raws)
        self.records_total += n
        self.since_ckpt += n
        self.result.records += n
        self.seq = seq
        ranges = trace.journal_ranges()
        # Building the batch reads only host and operator state (not the store), and settling
        # the batch in flight changes none of it (a batch followed by a checkpoint settled
        # before this batch began), so it runs before the settle, overlapped with that commit.
        # So does packing it for the writer, when it is to be handed over: the writer then
        # waits only for the message, not for the pickling (docs/performance.md, ninth round).
        bw = self._batch_write(seq, out, ranges, trace.order_runs, trace.made, n,
                               end_of_stream)
        # The end of the stream and a replayed batch commit serially: an end of stream is
        # followed by the run's last checkpoint, written here.
        handed = pack(bw.rows()) if handing else None
        stages["sink"] += clock() - t_sink
        if not queued:
            self._settle()
        self.crash.hit("after-candidate")
        # Decided now, from the state this batch left: a later batch's records must not count.
        checkpoint = self.since_ckpt >= self.settings.checkpoint_every
        if handed is not None:
            t_hand = clock()
            self._started_writer().submit(handed)
            stages["sink"] += clock() - t_hand
            batch = _InFlight(seq, n, ranges)
            if isinstance(self._inflight, _CheckpointInFlight):
                self._inflight.queue(batch)  # committed once the checkpoint is written
                self.result.queued_behind_checkpoint += 1
            else:
                self._inflight = batch
            self.result.overlapped_batches += 1
            if checkpoint:
                # The state this batch left, dumped while it commits (its commit changes none
                # of it); the checkpoint follows the batch to the writer once it has settled,
                # after the batch's after-sink-write crash point, as in a serial run.
                batch.dump = self._dump_checkpoint()
                self._settle()
            return
        t_commit = clock()
        res = self._timed_commit(bw)
        self._committed(res, seq, n, end_of_stream, ranges, checkpoint, t_commit)

    def _queues_behind(self, inflight: _InFlight | _CheckpointInFlight | None) -> bool:
        """Whether the next batch goes to the writer behind the checkpoint in flight instead
        of waiting for it to be written. The writer commits in the order it is handed work, so
        the store sees the checkpoint, then the batch, as in a serial run; the worker meanwhile
        runs the batch after (a large checkpoint's compression and write took longer than a
        batch: docs/performance.md, thirty-fourth round). The batch's metrics then report the
        checkpoint before it, and the checkpoint's ack waits until the batch is handed over.
        Not with a crash point set: each crash point must find the store and the acks as the
        serial order leaves them."""
        return (isinstance(inflight, _CheckpointInFlight)
                and inflight.queued < self.settings.batches_behind_checkpoint
                and not inflight.paused and self.crash.spec is None)

    def _started_writer(self) -> WriterProcess:
        if self._writer is None:  # started by the first batch or checkpoint that overlaps
            self._writer = WriterProcess(self.store.url, self.spec.name,
                                         1 + self.settings.batches_behind_checkpoint)
            self.result.writer_pid = self._writer.pid
        return self._writer

    def _timed_commit(self, bw: BatchWrite) -> tuple[SinkResult, float]:
        t0 = time.perf_counter()
        res = self.store.commit_batch(bw)
        return res, time.perf_counter() - t0

    def _settle(self) -> None:
        """Wait for the batch in flight, if any, and do what follows its commit, in the order
        a serial run does it. An exception its commit raised is raised here, in the worker's
        thread, before anything after that commit (crash points, checkpoint, ack) happens."""
        inflight, self._inflight = self._inflight, None
        if inflight is None:
            return
        assert self._writer is not None  # a batch in flight was handed to it
        t0 = time.perf_counter()
        if isinstance(inflight, _CheckpointInFlight):
            def mid_write() -> None:
                self.crash.hit("during-checkpoint")
            if not inflight.paused:
                mid_write()  # counted in its place in the order; it does not fire here
            try:
                self.last_ckpt = self._writer.checkpoint_result(mid_write=mid_write)
            except BaseException:
                # A batch queued behind it is still the writer's to answer: the run's end
                # (`_close_writer`) waits for it.
                self._inflight = inflight.then
                raise
            self._checkpoint_written(t0)
            self._acked(inflight.ranges)
            if inflight.then is not None:
                self._inflight = inflight.then
                self._settle()
            return
        try:
            res = self._writer.result()
        except BaseException:
            self._inflight = inflight.next  # as above
            raise
        self._committed(res, inflight.seq, inflight.n, False, inflight.ranges,
                        inflight.dump is not None, t0, dump=inflight.dump)
        if inflight.next is not None:
            # Queued behind a checkpoint: only the chain's last batch can have a checkpoint
            # due (its dump settles the chain at once), so nothing else is in flight here.
            assert self._inflight is None
            self._inflight = inflight.next
            self._settle()

    def _close_writer(self) -> None:
        """End of a run, normal or not: wait for a commit still in flight (its transaction is
        the store's to keep or roll back) without doing what follows it: a run that fails
        acknowledges and checkpoints nothing past the failure."""
        inflight, self._inflight = self._inflight, None
        writer, self._writer = self._writer, None
        if writer is None:
            return
        if isinstance(inflight, _CheckpointInFlight):
            try:  # the state of a batch that committed: written whole or not at all
                writer.checkpoint_result(mid_write=lambda: None)
            except Exception as exc:  # noqa: BLE001 - the run is already failing
                log.warning("%s: the checkpoint at batch %d failed while the run was ending: "
                            "%s", self.spec.name, inflight.seq, exc)
            inflight = inflight.then
        while inflight is not None:
            try:
                writer.result()
            except Exception as exc:  # noqa: BLE001 - the run is already failing
                log.warning("%s: batch %d's commit failed while the run was ending: %s",
                            self.spec.name, inflight.seq, exc)
            inflight = inflight.next
        writer.close()
        self.result.writer_peak_rss_mib = writer.peak_rss_mib
        self.result.writer_cpu_s = writer.cpu_s
        self.result.writer_written_mib = writer.written_mib

    def _committed(self, timed: tuple[SinkResult, float], seq: int, n: int,
                   end_of_stream: bool, ranges: dict, checkpoint: bool, t_sink: float,
                   dump: CheckpointDump | None = None) -> None:
        """After a batch's commit: its accounting, crash points, the
        checkpoint when one is due, and the source ack (strictly after the commit). The sink
        stage is counted from `t_sink` (the commit's start, or the start of the wait for it).
        Given the checkpoint's `dump`, the checkpoint is handed to the writer process, and the
        rest (its during-checkpoint crash point, before-ack, the ack) waits for it to settle."""
        res, commit_s = timed
        self.result.sink_commit_s += commit_s
        self.result.batches += 1
        self.result.facts_written += res.written
        self.result.facts_noop += res.noop
        self.result.facts_rejected += res.rejected
        if log.isEnabledFor(logging.DEBUG):
            log.debug("%s: batch %d committed: %d records, facts written %d, no-op %d, "
                      "rejected %d%s", self.spec.name, seq, n, res.written, res.noop,
                      res.rejected, " (end of stream)" if end_of_stream else "")
        if res.rejected:
            log.warning("%s: batch %d: %d facts rejected by the sink (existing key, other "
                        "content): %s", self.spec.name, seq, res.rejected,
                        ", ".join(res.rejected_keys[:5]))
        self.result.stage_seconds["sink"] += time.perf_counter() - t_sink
        self.crash.hit("after-sink-write")
        if checkpoint and dump is not None:
            self._checkpoint((dump, ranges))
            return
        if checkpoint:
            self._checkpoint()
        self._acked(ranges)

    def _acked(self, ranges: dict) -> None:
        self.crash.hit("before-ack")
        self.source.ack({k: (v[0], v[1]) for k, v in ranges.items()})

    def _idleness(self, i: int, clock: int, idle_after: int, out: Emit, made: list) -> None:
        """After record `i` of a batch, at worker clock `clock`: every partition quiet for
        `idle_after` of source time with nothing waiting at the log is declared idle."""
        for topic, wm in self.wms.items():
            for p in range(len(wm.idle)):
                if wm.idle[p]:
                    continue
                quiet_since = max(wm.last_arrival[p], self.stream_start)
                if clock - quiet_since < idle_after:
                    continue
                if not self.source.caught_up((topic, p), self.positions[(topic, p)], clock):
                    continue  # records are waiting at the log: slow, not idle
                made.append([i, topic, p, True])
                if wm.set_idle(p, True):
                    self.op.on_watermark(topic, wm.wm, out)

    def _batch_write(self, seq, out: Emit, ranges, order_runs, made, n, eos) -> BatchWrite:
        name = self.spec.name
        archive = out.dispositions
        quarantine = [{"pipeline": name, "topic": q.topic, "partition": q.partition,
                       "offset": q.offset, "reason": q.reason, "detail": safe_text(q.detail),
                       "raw": safe_text(q.raw), "batch_seq": seq} for q in out.quarantine]
        queue = [{"pipeline": name, "queue_date": event_date(e.event_us), "topic": e.topic,
                  "partition": e.partition, "offset": e.offset, "event_id": e.event_id,
                  "revision": e.revision, "key": e.key, "event_us": e.event_us,
                  "reason": e.reason, "watermark_at_arrival_us": e.watermark_at_arrival,
                  "status": "pending", "status_reason": None, "detail": dumps(e.detail),
                  "generation_id": None, "batch_seq": seq} for e in out.queue]
        journal = {"pipeline": self.key, "seq": seq, "ranges": dumps(ranges),
                   "order_runs": dumps(order_runs), "idleness": dumps(made), "records": n,
                   "clock_us": self.clock if self.clock > NEG_INF else 0,
                   "end_of_stream": eos, "committed_at": now_iso()}
        metrics = {"pipeline": self.key, "seq": seq,
                   "clock_us": self.clock if self.clock > NEG_INF else 0,
                   "snapshot": dumps(self._metrics_snapshot(out))}
        extra = {t: rows for t, rows in out.extra.items()}
        return BatchWrite(name, seq, out.facts, archive, quarantine, queue, journal, metrics,
                          extra)

    # ------------------------------------------------------------------ checkpoints
    def _checkpoint(self, overlapped: tuple[CheckpointDump, dict] | None = None) -> None:
        """Checkpoint the state of this moment. `overlapped` is the state's dump (taken while
        the batch it follows committed) and that batch's ranges (whose ack waits for the
        checkpoint): the writer process compresses and writes it while the next batch runs,
        and `_settle` waits for it."""
        self.since_ckpt = 0
        if overlapped is None:
            dump = self._dump_checkpoint()  # timed there
            t0 = time.perf_counter()
            row = checkpoint_row(dump)
            self.store.write_checkpoint(row, mid_write=lambda: self.crash.hit("during-checkpoint"))
            self.last_ckpt = checkpoint_summary(row)
            self._checkpoint_written(t0)
            return
        t0 = time.perf_counter()
        dump, ranges = overlapped
        # The writer stops mid-write only for a crash point about to fire: otherwise the
        # transaction's commit would wait for the worker.
        paused = self.crash.fires_next("during-checkpoint")
        self._started_writer().submit_checkpoint(replace(dump, pause_mid_write=paused))
        self._inflight = _CheckpointInFlight(self.seq, ranges, paused)
        self.result.overlapped_checkpoints += 1
        self.result.stage_seconds["checkpoint"] += time.perf_counter() - t0

    def _dump_checkpoint(self) -> CheckpointDump:
        t0 = time.perf_counter()
        dump, self._chain = dump_checkpoint(
            self.spec, self.op, self.source, self.wms, self.positions, clock=self.clock,
            stream_start=self.stream_start, seq=self.seq, records_total=self.records_total,
            ended=self.ended, key=self.key, chain=self._chain,
            full_after=self.settings.full_checkpoint_after)
        took = time.perf_counter() - t0
        self.result.stage_seconds["checkpoint"] += took
        self.result.checkpoint_dump_s += took
        return dump

    def _checkpoint_written(self, t0: float) -> None:
        self.result.checkpoints += 1
        log.debug("%s: checkpoint at journal seq %d (%s bytes)", self.spec.name,
                  self.last_ckpt.get("id_journal_seq"), self.last_ckpt.get("size_bytes"))
        self.result.stage_seconds["checkpoint"] += time.perf_counter() - t0

    # ------------------------------------------------------------------ metrics
    def _metrics_snapshot(self, out: Emit | None = None) -> dict:
        return metrics_snapshot(self, out)
