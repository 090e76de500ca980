"""The worker host: reads the source, validates, drives an operator, commits each batch (facts,
archive, quarantine, queue, journal, metrics) in one transaction, checkpoints every N records
and at the end, and restores from the latest checkpoint by replaying the journal.

The host owns I/O, clocks and watermarks; operators are pure state machines. One host serves
every pipeline through a `PipelineSpec`."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import time
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

import orjson

from .contracts import Contract, InvalidRecord, validate
from .operators.base import Emit
from .sources.filelog import FileLog, RawRecord
from .store.ops import BatchWrite, Store, dumps, now_iso
from .throttle import SinkThrottle, ThrottleSettings
from .timeutil import NEG_INF, POS_INF, event_date, us_to_iso
from .watermarks import InputWatermark

SERIALIZER = "orjson+zlib/1"
CRASH_POINTS = ("after-candidate", "after-sink-write", "before-ack", "during-checkpoint")
CRASH_EXIT_CODE = 137


class CheckpointMismatch(RuntimeError):
    exit_code = 3


class SourceMismatch(RuntimeError):
    exit_code = 4


class Operator(Protocol):
    pipeline: str
    state_schema: str

    def on_record(self, rec, out: Emit) -> None: ...
    def on_watermark(self, topic: str, wm: int, out: Emit) -> None: ...
    def on_clock(self, clock_us: int, out: Emit) -> None: ...
    def on_end_of_stream(self, out: Emit) -> None: ...
    def snapshot(self) -> dict: ...
    def restore(self, snap: dict) -> None: ...
    def state_metrics(self) -> dict: ...


@dataclass
class PipelineSpec:
    name: str
    contracts: dict[str, Contract]
    lateness_us: dict[str, int]
    make_operator: Callable[["RunSettings"], Any]
    # Called after restore/creation with the store, so the operator can reload host facts
    # (pending queue entries, published generations).
    prepare: Callable[[Any, Store], None] | None = None
    reference_versions: Callable[[Any], dict] | None = None
    on_batch_committed: Callable[[Any, Store, "BatchWrite"], None] | None = None
    # Optional: pipeline-specific health/freshness wording added to every metrics snapshot,
    # called with (operator, snapshot) after the generic fields are filled in.
    health: Callable[[Any, dict], dict] | None = None

    @property
    def topics(self) -> list[str]:
        return list(self.contracts)


@dataclass
class RunSettings:
    source: str
    store_url: str
    checkpoint_every: int = 10000
    batch_size: int = 5000
    crash_at: tuple[str, int] | None = None
    idle_after_us: int | None = None
    end_of_stream: bool = False
    ttl_us: int | None = None
    extra: dict = field(default_factory=dict)
    # Opt-in pressure test: commit through a sink throttled in worker-clock time.
    throttle: ThrottleSettings | None = None

    def describe(self) -> dict:
        return {"source": redact(self.source), "store": redact(self.store_url),
                "checkpoint_every": self.checkpoint_every, "batch_size": self.batch_size,
                "crash_at": f"{self.crash_at[0]}:{self.crash_at[1]}" if self.crash_at else None,
                "idle_after_us": self.idle_after_us, "end_of_stream": self.end_of_stream,
                "ttl_us": self.ttl_us,
                **({"throttle": self.throttle.describe()} if self.throttle else {}),
                **self.extra}


def redact(url: str) -> str:
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        return f"{scheme}://***@{rest.split('@', 1)[1]}"
    return url


def parse_crash_at(value: str | None) -> tuple[str, int] | None:
    if not value:
        return None
    point, _, k = value.partition(":")
    if point not in CRASH_POINTS or not k.isdigit() or int(k) < 1:
        raise ValueError(f"--crash-at must be one of {', '.join(CRASH_POINTS)} followed by :K "
                         f"(K >= 1), got {value!r}")
    return point, int(k)


class CrashInjector:
    """Ends the process at once (no cleanup, exit 137) at the K-th occurrence of a point."""

    def __init__(self, spec: tuple[str, int] | None):
        self.spec = spec
        self.counts = {p: 0 for p in CRASH_POINTS}

    def hit(self, point: str) -> None:
        self.counts[point] += 1
        if self.spec and self.spec[0] == point and self.counts[point] == self.spec[1]:
            sys.stdout.flush()
            sys.stderr.write(f"crash injected at {point}:{self.spec[1]}\n")
            sys.stderr.flush()
            os._exit(CRASH_EXIT_CODE)


_CODE_REV: str | None = None


def code_revision() -> str:
    global _CODE_REV
    if _CODE_REV is None:
        here = os.path.dirname(os.path.abspath(__file__))
        try:
            rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True,
                                 text=True, timeout=5).stdout.strip()
            dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                                   cwd=here, capture_output=True, text=True,
                                   timeout=5).stdout.strip()
            _CODE_REV = (rev + ("+dirty" if dirty else "")) if rev else "unknown"
        except (OSError, subprocess.SubprocessError):
            _CODE_REV = "unknown"
    return _CODE_REV


def tp_str(topic: str, partition: int) -> str:
    return f"{topic}:{partition}"


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


class Worker:
    def __init__(self, spec: PipelineSpec, settings: RunSettings, store: Store | None = None,
                 progress: Callable[[int, int], None] | None = None):
        self.spec = spec
        self.settings = settings
        self.store = store or Store(settings.store_url)
        self.progress = progress
        self.crash = CrashInjector(settings.crash_at)
        self.source: FileLog | None = None
        self.op = None
        self.wms: dict[str, InputWatermark] = {}
        self.positions: dict[tuple[str, int], int] = {}
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

    # ------------------------------------------------------------------ set-up
    def _open_source(self) -> FileLog:
        from .sources import open_source
        arrival = {t: c.arrival_time_field for t, c in self.spec.contracts.items()}
        return open_source(self.settings.source, self.spec.topics, arrival)

    def _check_checkpoint(self) -> dict | None:
        """Refuse before reading or writing anything when the state format is not ours."""
        ck = self.store.latest_checkpoint(self.spec.name)
        self.op = self.spec.make_operator(self.settings)
        if ck is None:
            return None
        if ck["serializer"] != SERIALIZER or ck["state_schema"] != self.op.state_schema:
            raise CheckpointMismatch(
                f"checkpoint {ck['id']} of pipeline {self.spec.name!r} was written with serializer "
                f"{ck['serializer']!r} and state schema {ck['state_schema']!r}; this code reads "
                f"{SERIALIZER!r} / {self.op.state_schema!r}. Refusing to start: nothing was read "
                f"or written. Migrate the checkpoint or start a new store.")
        try:
            ck["decoded"] = orjson.loads(zlib.decompress(ck["state"]))
        except (zlib.error, orjson.JSONDecodeError) as exc:
            raise CheckpointMismatch(f"checkpoint {ck['id']} cannot be decoded: {exc}") from None
        return ck

    def _restore(self, ck: dict | None) -> None:
        if ck is None:
            for t in self.spec.topics:
                self.wms[t] = InputWatermark(t, self.source.partition_counts[t],
                                             self.spec.lateness_us[t])
            self.positions = {tp: 0 for tp in self.source.tps()}
            return
        state = ck["decoded"]
        src = state["source"]
        if src["partitions"] != self.source.partition_counts:
            raise SourceMismatch(
                f"source partitions {self.source.partition_counts} differ from the checkpoint's "
                f"{src['partitions']}: the log was repartitioned; restore refused")
        # Sources that know their own identity (a broker stream) judge the rest of it.
        refusal = getattr(self.source, "restore_refusal", None)
        reason = refusal(src) if refusal is not None else None
        if reason:
            raise SourceMismatch(f"{reason}: restore refused")
        positions = {tuple(k.rsplit(":", 1)): v for k, v in state["positions"].items()}
        self.positions = {(t, int(p)): v for (t, p), v in positions.items()}
        for tp, off in self.positions.items():
            want = src["fingerprints"][tp_str(*tp)]
            got = self.source.fingerprint(tp, off)
            if want != got:
                raise SourceMismatch(
                    f"partition {tp_str(*tp)} changed before offset {off} since checkpoint "
                    f"{ck['id']} (fingerprint {got[:12]} != {want[:12]}): restore refused")
        self.op.restore(state["operator"])
        self.wms = {t: InputWatermark.restore(s) for t, s in state["watermarks"].items()}
        self.clock = state["clock"]
        self.stream_start = state["stream_start"]
        self.seq = state["journal_seq"]
        self.records_total = state["records_total"]
        self.ended = state.get("ended", False)
        self.result.restored_from = ck["id"]

    # ------------------------------------------------------------------ the loop
    def run(self) -> RunResult:
        t0 = time.perf_counter()
        ck = self._check_checkpoint()
        self.source = self._open_source()
        self._restore(ck)
        # The recording and restored state live for the whole run: move them out of the cyclic
        # collector's sight, and collect young objects less often (the hot loop allocates many
        # short-lived dicts and none of them form cycles). Measured: about a third of operator
        # time on 100,000 events went to collections before this.
        gc.freeze()
        saved_thresholds = gc.get_threshold()
        gc.set_threshold(50_000, 20, 50)
        try:
            return self._run_loop(t0)
        finally:
            gc.set_threshold(*saved_thresholds)
            gc.unfreeze()

    def _run_loop(self, t0: float) -> RunResult:
        if self.spec.prepare is not None:
            self.spec.prepare(self.op, self.store)
        run_id = self.store.start_run(self.spec.name, self.settings.describe())
        total = self.source.total_records() - sum(self.positions.values())
        self.source_head_us = self._source_head()
        done = 0
        self.replaying = True
        # 1. Follow the journal past the checkpoint: same records, same order, same decisions.
        for entry in self.store.journal_after(self.spec.name, self.seq):
            n = self._replay_entry(entry)
            done += n
            self.result.replayed_batches += 1
            if self.progress:
                self.progress(done, total)
        self.replaying = False
        # 2. Read freely (through the sink throttle when one is set).
        limit = max(1, min(self.settings.batch_size, self.settings.checkpoint_every))
        if self.throttle is not None:
            base = done
            prog = (lambda n: self.progress(base + n, total)) if self.progress else None
            for paced in self.throttle.batches(self.source.merged(self.positions), limit, prog):
                self._run_batch(paced, None)
            done += self.throttle.report.committed
            self.result.backlog = self.throttle.report.as_dict()
            self.result.backlog_lines = self.throttle.report.lines()
        batch: list[RawRecord] = []
        for raw in (self.source.merged(self.positions) if self.throttle is None else ()):
            batch.append(raw)
            if len(batch) >= limit:
                self._run_batch(batch, None)
                done += len(batch)
                batch = []
                if self.progress:
                    self.progress(done, total)
        if batch:
            self._run_batch(batch, None)
            done += len(batch)
            if self.progress:
                self.progress(done, total)
        if self.settings.end_of_stream and not self.ended:
            self._run_batch([], None, end_of_stream=True)
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
        return self.result

    def _source_head(self) -> int | None:
        """Newest arrival time held by the source: what a caught-up reader would have seen."""
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
        runs = orjson.loads(entry["order_runs"])
        decisions = orjson.loads(entry["idleness"])
        raws: list[RawRecord] = []
        cursor = dict(self.positions)
        for tps, count in runs:
            topic, part = tps.rsplit(":", 1)
            tp = (topic, int(part))
            off = cursor[tp]
            if off + count > self.source.end_offset(tp):
                raise SourceMismatch(f"journal batch {entry['seq']} consumed {tps} up to "
                                     f"{off + count - 1} but the log ends at "
                                     f"{self.source.end_offset(tp) - 1}: restore refused")
            for i in range(count):
                raws.append(self.source.read_at(tp, off + i))
            cursor[tp] = off + count
        self._run_batch(raws, decisions, end_of_stream=bool(entry["end_of_stream"]),
                        seq=entry["seq"])
        return len(raws)

    def _run_batch(self, raws: list[RawRecord], decisions: list | None,
                   end_of_stream: bool = False, seq: int | None = None) -> None:
        out = Emit()
        op = self.op
        wms = self.wms
        contracts = self.spec.contracts
        ranges: dict[str, list[int]] = {}
        order_runs: list[list] = []
        made: list[list] = []
        following = decisions is not None
        pending = sorted(decisions or [], key=lambda d: d[0])
        pi = 0
        idle_after = self.settings.idle_after_us
        for i, raw in enumerate(raws):
            tp = (raw.topic, raw.partition)
            tps = tp_str(*tp)
            if order_runs and order_runs[-1][0] == tps:
                order_runs[-1][1] += 1
            else:
                order_runs.append([tps, 1])
            r = ranges.get(tps)
            if r is None:
                ranges[tps] = [raw.offset, raw.offset]
            else:
                r[1] = raw.offset
            self.positions[tp] = raw.offset + 1
            if raw.arrival_us > self.clock:
                self.clock = raw.arrival_us
            if self.stream_start <= NEG_INF:
                self.stream_start = raw.arrival_us
            wm = wms[raw.topic]
            contract = contracts[raw.topic]
            obj = raw.obj
            try:
                if isinstance(obj, Exception):
                    raise InvalidRecord("malformed_json", str(obj)[:120])
                if not isinstance(obj, dict):
                    raise InvalidRecord("not_an_object", type(obj).__name__)
                rec = validate(contract, obj, raw.partition, raw.offset, len(raw.line))
            except InvalidRecord as exc:
                out.quarantine.append(_quarantined(raw, exc.reason, exc.detail))
                wm.touch(raw.partition, raw.arrival_us)
            else:
                op.on_record(rec, out)
                if wm.observe(raw.partition, rec.event_us, raw.arrival_us):
                    op.on_watermark(raw.topic, wm.wm, out)
            op.on_clock(self.clock, out)
            # Idleness: follow journaled decisions on replay, decide from evidence otherwise.
            if following:
                while pi < len(pending) and pending[pi][0] == i:
                    _, topic, part, idle = pending[pi]
                    if wms[topic].set_idle(part, idle):
                        op.on_watermark(topic, wms[topic].wm, out)
                    made.append(pending[pi])
                    pi += 1
            elif idle_after is not None:
                self._idleness(i, idle_after, out, made)
        if end_of_stream:
            for t, wm in wms.items():
                wm.end_of_stream()
            op.on_end_of_stream(out)
            self.ended = True
        n = len(raws)
        self.records_total += n
        self.since_ckpt += n
        self.result.records += n
        if seq is None:
            self.seq += 1
            seq = self.seq
        else:
            self.seq = seq
        self.crash.hit("after-candidate")
        bw = self._batch_write(seq, out, ranges, order_runs, made, n, end_of_stream)
        res = self.store.commit_batch(bw)
        self.result.batches += 1
        self.result.facts_written += res.written
        self.result.facts_noop += res.noop
        self.result.facts_rejected += res.rejected
        if self.spec.on_batch_committed is not None:
            self.spec.on_batch_committed(op, self.store, bw)
        self.crash.hit("after-sink-write")
        if self.since_ckpt >= self.settings.checkpoint_every:
            self._checkpoint()
        self.crash.hit("before-ack")
        self.source.ack({k: tuple(v) for k, v in ranges.items()})

    def _idleness(self, i: int, idle_after: int, out: Emit, made: list) -> None:
        clock = self.clock
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
        archive = [{"pipeline": name, "topic": rec.topic, "partition": rec.partition,
                    "offset": rec.offset, "event_id": rec.id, "revision": rec.revision,
                    "key": rec.key, "event_us": rec.event_us, "arrival_us": rec.arrival_us,
                    "payload": rec.payload_json or dumps(rec.payload),
                    "payload_hash": rec.payload_hash,
                    "disposition": disp, "batch_seq": seq}
                   for rec, disp in out.dispositions]
        quarantine = [{"pipeline": name, "topic": q.topic, "partition": q.partition,
                       "offset": q.offset, "reason": q.reason, "detail": q.detail,
                       "raw": q.raw, "batch_seq": seq} for q in out.quarantine]
        queue = [{"pipeline": name, "queue_date": event_date(e.event_us), "topic": e.topic,
                  "partition": e.partition, "offset": e.offset, "event_id": e.event_id,
                  "revision": e.revision, "key": e.key, "event_us": e.event_us,
                  "reason": e.reason, "watermark_at_arrival_us": e.watermark_at_arrival,
                  "status": "pending", "status_reason": None, "detail": dumps(e.detail),
                  "generation_id": None, "batch_seq": seq} for e in out.queue]
        journal = {"pipeline": name, "seq": seq, "ranges": dumps(ranges),
                   "order_runs": dumps(order_runs), "idleness": dumps(made), "records": n,
                   "clock_us": self.clock if self.clock > NEG_INF else 0,
                   "end_of_stream": eos, "committed_at": now_iso()}
        metrics = {"pipeline": name, "seq": seq,
                   "clock_us": self.clock if self.clock > NEG_INF else 0,
                   "snapshot": dumps(self._metrics_snapshot(out))}
        extra = {t: rows for t, rows in out.extra.items()}
        return BatchWrite(name, seq, out.facts, archive, quarantine, queue, journal, metrics,
                          extra)

    # ------------------------------------------------------------------ checkpoints
    def _checkpoint(self) -> None:
        t0 = time.perf_counter()
        op_state = self.op.snapshot()
        fps = {tp_str(*tp): self.source.fingerprint(tp, off) for tp, off in self.positions.items()}
        state = {
            "operator": op_state,
            "watermarks": {t: w.snapshot() for t, w in self.wms.items()},
            "positions": {tp_str(*tp): off for tp, off in self.positions.items()},
            "source": {**self.source.identity(), "fingerprints": fps},
            "clock": self.clock, "stream_start": self.stream_start,
            "journal_seq": self.seq, "records_total": self.records_total, "ended": self.ended,
        }
        blob = zlib.compress(orjson.dumps(state, option=orjson.OPT_NON_STR_KEYS), 3)
        sm = self.op.state_metrics()
        meta = {
            "pipeline": self.spec.name, "journal_seq": self.seq,
            "positions": state["positions"], "source": state["source"],
            "watermarks": {t: us_to_iso(w.wm) for t, w in self.wms.items()},
            "idle_partitions": {t: [p for p, i in enumerate(w.idle) if i]
                                for t, w in self.wms.items()},
            "rule_version": getattr(self.op, "rule_version", None),
            "reference_versions": (self.spec.reference_versions(self.op)
                                   if self.spec.reference_versions else {}),
            "serializer": SERIALIZER, "state_schema": self.op.state_schema,
            "code_revision": code_revision(), "state_bytes": sm.get("state_bytes"),
            "state_records": sm.get("state_records"), "records_total": self.records_total,
            "clock": us_to_iso(self.clock) if self.clock > NEG_INF else None,
            "end_of_stream": self.ended,
        }
        duration_ms = int((time.perf_counter() - t0) * 1000)
        meta["size_bytes"] = len(blob)
        meta["duration_ms"] = duration_ms
        row = {"pipeline": self.spec.name, "journal_seq": self.seq, "serializer": SERIALIZER,
               "state_schema": self.op.state_schema, "meta": dumps(meta), "state": blob,
               "size_bytes": len(blob), "duration_ms": duration_ms, "created_at": now_iso()}
        self.store.write_checkpoint(row, mid_write=lambda: self.crash.hit("during-checkpoint"))
        self.last_ckpt = {"id_journal_seq": self.seq, "size_bytes": len(blob),
                          "duration_ms": duration_ms}
        self.since_ckpt = 0
        self.result.checkpoints += 1

    # ------------------------------------------------------------------ metrics
    def _metrics_snapshot(self, out: Emit | None = None) -> dict:
        sm = self.op.state_metrics() if self.op is not None else {}
        parts = {t: [us_to_iso(w.partition_wm(p)) if w.max_event[p] > NEG_INF else None
                     for p in range(len(w.max_event))] for t, w in self.wms.items()}
        snap = {
            "clock": us_to_iso(self.clock) if self.clock > NEG_INF else None,
            "records_total": self.records_total,
            "input_wm": {t: w.wm for t, w in self.wms.items()},
            "input_wm_iso": {t: us_to_iso(w.wm) for t, w in self.wms.items()},
            "partition_wm": parts,
            "idle_partitions": {t: [p for p, i in enumerate(w.idle) if i]
                                for t, w in self.wms.items()},
            "checkpoint": dict(self.last_ckpt),
            "state": sm,
        }
        if hasattr(self.op, "keyed_counts"):
            kc = self.op.keyed_counts()
            top = sorted(kc.items(), key=lambda kv: (-(kv[1]["bytes"]), kv[0]))[:5]
            snap["top_keys"] = dict(top)
        if out is not None:
            snap["batch"] = {"facts": len(out.facts), "queued": len(out.queue),
                             "quarantined": len(out.quarantine)}
        # Process health and event-time freshness are reported apart: a restored, healthy
        # process can still be far behind the source in event time.
        snap["process"] = {"restored_from_checkpoint": self.result.restored_from,
                           "replaying_journal": self.replaying}
        snap["source_head"] = us_to_iso(self.source_head_us)
        snap["source_head_us"] = self.source_head_us
        read_clock = self.clock
        if self.throttle is not None:
            bm = self.throttle.backlog_metrics()
            snap["backlog"] = bm
            if self.throttle.now_us is not None:
                read_clock = max(read_clock, self.throttle.now_us)
        snap["event_time_lag_s"] = {
            t: ((read_clock - w.wm) / 1e6 if NEG_INF < w.wm < POS_INF and read_clock > NEG_INF
                else None) for t, w in self.wms.items()}
        if self.spec.health is not None and self.op is not None:
            snap.update(self.spec.health(self.op, snap))
        return snap


def _quarantined(raw: RawRecord, reason: str, detail: str):
    from .operators.base import Quarantined
    try:
        text = raw.line.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.line.decode("utf-8", "replace")
    return Quarantined(raw.topic, raw.partition, raw.offset, reason, detail, text)
