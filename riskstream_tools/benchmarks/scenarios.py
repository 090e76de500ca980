"""`riskstream bench`: each pipeline end to end against its in-memory reference in the same run.

Every scenario runs in its own child process, so its peak resident memory (VmHWM, read right
after the run and before the reference is built) belongs to that scenario alone.
The child times the run, then the reference over the same input, and compares the answers: a
wrong answer fails the scenario however fast it was. On a shared machine the ratio
run / reference is the figure that counts; the absolute rate is reported beside it.

Scenarios (the `--only` names):
  join-sqlite      join, file log -> SQLite (facts, archive, journal, current view, checkpoints
                   every 50,000 records)
  join-postgres    the same with the store on a throwaway PostgreSQL database
  join-sqlite-ordered-ids
                   join-sqlite's run over the same events with IDs numbered in event-time
                   order (as sequence-numbered or time-prefixed IDs are): what the store's
                   random-key indexes cost join-sqlite, as the difference of the two
  join-operator    the join operator alone: decoded records in, no I/O
  ledger-sqlite    the account-hour ledger, file log -> SQLite
  receipts-sqlite  the receipt scorer, file log -> SQLite
  join-sqlite-2-workers, ledger-sqlite-2-workers, receipts-sqlite-2-workers
                   the same runs by two worker processes at once (`--worker 0/2` and `1/2`),
                   each over its share of the partitions, on one store

The join workload follows the issue's shape: 100 merchants, 20% of events on one hot merchant,
about 1.3 pairs per event. The join reference is the sort-and-search interval probe over the
decoded events (`fast_candidate_pairs`); the ledger and receipts references recompute their
outputs from the raw log (decoding included)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import json
import os
import resource
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from functools import partial
from itertools import islice

from streaming.collector import run_collector
from streaming.procinfo import vm_hwm_mib

SCENARIOS = ("join-sqlite", "join-postgres", "join-sqlite-ordered-ids", "join-operator",
             "ledger-sqlite", "receipts-sqlite", "join-sqlite-2-workers",
             "ledger-sqlite-2-workers", "receipts-sqlite-2-workers")
# Scenarios run by several worker processes at once, each over its share of the partitions
# (the bench inputs are partitioned by each pipeline's key): how many.
WORKERS = {"join-sqlite-2-workers": 2, "ledger-sqlite-2-workers": 2,
           "receipts-sqlite-2-workers": 2}
# Scenarios whose input is not their family's default (the first word of the name): the name
# of that input, which the input directory is named after.
ORDERED_IDS = "join-ordered-ids"
INPUTS = {"join-sqlite-ordered-ids": ORDERED_IDS}
DEFAULT_EVENTS = 1_000_000
CHECKPOINT_EVERY = 50_000
BATCH_SIZE = 5_000
JOIN_MERCHANTS = 100
JOIN_HOT_SHARE = 0.2
# Two events a minute over the whole keyspace: with a 55-minute window and a 20% hot merchant
# this gives about 1.3 pairs per event (the density of the comparison workload).
JOIN_EVENTS_PER_MINUTE = 2
PG_ADMIN_ENV = "RISKSTREAM_BENCH_PG"
PG_ADMIN_DEFAULT = "postgresql://postgres@127.0.0.1:5432/postgres"


# ---------------------------------------------------------------------------- inputs (parent)
def prepare_input(scenario: str, workdir: str, n: int) -> str:
    """Write the scenario's file log once per size (reused across scenarios and runs)."""
    family = INPUTS.get(scenario, scenario.split("-")[0])
    src = os.path.join(workdir, "inputs", f"{family}_{n}")
    done = os.path.join(src, ".complete")
    if os.path.exists(done):
        return src
    shutil.rmtree(src, ignore_errors=True)
    if family in ("join", ORDERED_IDS):
        from riskstream_tools.workloads.join_seed import generate_bulk
        generate_bulk(1, src, n, merchants=JOIN_MERCHANTS, hot_share=JOIN_HOT_SHARE,
                      events_per_minute=JOIN_EVENTS_PER_MINUTE,
                      ordered_ids=family == ORDERED_IDS)
    elif family == "ledger":
        from riskstream_tools.workloads.ledger_seed import generate
        generate(1, src, payments=n, scenario=False, accounts=200)
    elif family == "receipts":
        from streaming.models.registry import Registry
        from riskstream_tools.workloads.receipts_seed import generate_surge
        generate_surge(3, src, n)
        Registry(os.path.join(src, "models"))
    else:
        raise ValueError(f"unknown scenario {scenario}")
    open(done, "w").close()
    return src


def _sqlite_url(workdir: str, scenario: str) -> str:
    db = os.path.join(workdir, f"{scenario}.sqlite")
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(db + suffix):
            os.remove(db + suffix)
    return f"sqlite:///{db}"


# ---------------------------------------------------------------------------- child helpers
def result_fields(scenario: str, events: int, seconds: float, reference_seconds: float,
                  peak_rss_mib: float, counted: int | None = None) -> dict:
    """The fields every scenario's result starts with (catalog.py lists them): the rates are
    `counted` records (default `events`) per second of the scenario and of its reference, and
    `ratio` is reference seconds over scenario seconds (how close the scenario comes to the
    reference's speed)."""
    k = events if counted is None else counted
    return {"scenario": scenario, "events": events, "seconds": round(seconds, 3),
            "events_per_s": round(k / seconds) if seconds else None,
            "reference_events_per_s": round(k / reference_seconds) if reference_seconds else None,
            "ratio": round(reference_seconds / seconds, 4) if seconds else None,
            "peak_rss_mib": round(peak_rss_mib, 1)}


# What bounds a run with a store (`limited_by`), read off its own figures. Two busy times
# within this share of the larger are called even: neither alone sets the pace.
EVEN_SHARE = 0.10
# A writer whose CPU seconds are below this share of its commit seconds spent the rest
# waiting: on the database server, or on storage (a SQLite file's syncs).
WRITER_CPU_SHARE = 0.75
# Serial commits (several workers, no writer process) that take more than this share of the
# workers' time together are what the run waits on.
SERIAL_COMMIT_SHARE = 0.5


def limited_by(result: dict) -> str | None:
    """What set the pace of a store scenario's run, from the figures the run reported; None
    for a run without them (the operator alone).

    One worker with a writer process: the two run at once, so the run lasts about as long as
    the busier of them. The worker is busy for its CPU seconds; the writer for its commit
    seconds, of which its CPU seconds are its own work and the rest waits.
    - "worker": the worker's CPU seconds exceed the writer's commit seconds;
    - "writer CPU" or "writer waiting on the database": the commits exceed the worker's CPU,
      by whether the writer spent them mostly computing;
    - "worker and writer": the two are within `EVEN_SHARE` of each other.
    Commits made serially (several workers, each committing its own batches; or one worker
    without a writer process, by choice or because no batch overlapped): "serial commits"
    when they take more than `SERIAL_COMMIT_SHARE` of the workers' seconds together, else
    "workers" ("worker")."""
    worker_cpu = result.get("worker_cpu_s")
    commit = result.get("sink_commit_s")
    if worker_cpu is None or commit is None:
        return None
    # Serial too: a run with overlap on whose batches all committed in the worker (a run of
    # one batch never starts the writer process).
    serial = result.get("overlap_commits") is False or result.get("overlapped_batches") == 0
    if result.get("workers") or serial:
        # The commits are part of each worker's own time: its wall seconds, summed.
        spent = sum(result.get("worker_seconds") or ()) or result.get("seconds") or 0.0
        if spent and commit > SERIAL_COMMIT_SHARE * spent:
            return "serial commits"
        return "workers" if result.get("workers") else "worker"
    if abs(commit - worker_cpu) <= EVEN_SHARE * max(commit, worker_cpu):
        return "worker and writer"
    if worker_cpu > commit:
        return "worker"
    writer_cpu = result.get("writer_cpu_s")
    if writer_cpu is not None and writer_cpu >= WRITER_CPU_SHARE * commit:
        return "writer CPU"
    return "writer waiting on the database"


def _peak_rss_mib() -> float:
    """This process's peak resident memory: VmHWM (ru_maxrss, the fallback, would carry over
    the parent's peak across fork + exec, and the parent generated the inputs)."""
    hwm = vm_hwm_mib("self")
    if hwm is not None:
        return hwm
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _run_worker(spec, settings, url: str) -> tuple[Any, float, dict, float, dict]:
    """Run the worker; (result, wall seconds, stage seconds, peak RSS MiB right after, the
    run's commit figures). RISKSTREAM_OVERLAP_COMMITS (1/0), as for the run commands, turns
    overlapped commits on or off instead of the store's default."""
    from streaming.host.loop import Worker
    from streaming.store.ops import Store
    flag = os.environ.get("RISKSTREAM_OVERLAP_COMMITS", "").strip().lower()
    if flag:
        settings.overlap_commits = flag in ("1", "true", "yes", "on")
    store = Store(url)
    try:
        t0 = time.perf_counter()
        cpu0 = time.process_time()
        res = Worker(spec, settings, store=store).run()
        wall = time.perf_counter() - t0
        cpu = time.process_time() - cpu0
    finally:
        store.dispose()
    rss = _peak_rss_mib()
    host = res.stage_seconds
    stages = {f"{k}_s": v for k, v in host.items()}
    # Reading and JSON-parsing the source, run start-up and the final metrics.
    stages["source_and_other_s"] = max(0.0, wall - sum(host.values()))
    # The worker's CPU seconds (every thread of it) against its wall seconds: what the run
    # spent waiting (on the database server, mostly) is the difference.
    # The writer process's peak memory, beside the worker's (`peak_rss_mib`): a run with
    # overlapped commits is the two processes.
    commits = {"overlap_commits": settings.overlap_commits, "worker_cpu_s": cpu,
               "sink_commit_s": res.sink_commit_s, "overlapped_batches": res.overlapped_batches,
               "overlapped_checkpoints": res.overlapped_checkpoints,
               "queued_behind_checkpoint": res.queued_behind_checkpoint, "batches": res.batches,
               "writer_peak_rss_mib": res.writer_peak_rss_mib,
               # What the commits cost the writer process: its CPU seconds and the MiB it
               # wrote to storage (WAL frames and the checkpoints' copies on SQLite).
               "writer_cpu_s": res.writer_cpu_s, "writer_written_mib": res.writer_written_mib,
               # Of the checkpoint stage, the worker's own taking and serializing of the
               # state; the rest is the writer's compressing and writing, or the wait for it.
               "checkpoint_dump_s": res.checkpoint_dump_s}
    return res, wall, stages, rss, commits


def _spec_and_settings(family: str, src: str, url: str, assignment: str | None = None):
    """The pipeline and the run settings a scenario of `family` runs with; `assignment`
    ("I/N") for one of several workers."""
    from streaming.assignment import Assignment
    from streaming.host.settings import RunSettings
    extra: dict = {}
    if family == "ledger":
        from streaming.pipelines.ledger import make_spec, run_extra
        from streaming.repairs.ledger import DEV_KEY, RepairKey
        key = RepairKey(DEV_KEY, "dev")
        spec, extra = make_spec(key), run_extra(key)
    elif family == "receipts":
        from streaming.pipelines.receipts import SPEC as spec
        extra = {"model_dir": os.path.join(src, "models")}
    else:
        from streaming.pipelines.join import SPEC as spec
    # Several workers on this machine commit serially, each on its own thread: their writer
    # processes would want the cores the workers already fill (ledger, 1,000,000 events, two
    # workers: 16.8 s overlapped, 13.5 s serial; docs/performance.md, twenty-first round).
    return spec, RunSettings(source=src, store_url=url, end_of_stream=True,
                             checkpoint_every=CHECKPOINT_EVERY, batch_size=BATCH_SIZE,
                             extra=extra, assignment=Assignment.parse(assignment),
                             overlap_commits=assignment is None)


def _run_family(family: str, src: str, url: str, workers: int) -> tuple[dict, float, dict,
                                                                         float, dict]:
    """Run the scenario's pipeline over `src` into `url`: one worker in this process, or
    `workers` worker processes at once (`worker_child`), each over its share of the
    partitions. (counts, wall seconds, stage seconds, peak RSS MiB, commit figures) as
    `_run_worker` gives them; for several workers the seconds run from the first start to
    the last end, stages and counts are summed, peaks are the largest."""
    if workers == 1:
        spec, settings = _spec_and_settings(family, src, url)
        res, wall, stages, rss, commits = _run_worker(spec, settings, url)
        return ({"records": res.records, "facts_written": res.facts_written,
                 "checkpoints": res.checkpoints}, wall, stages, rss, commits)
    from streaming.store.ops import Store
    Store(url).dispose()  # created once, before the workers open it together
    # By its name: this runs in a scenario's child, where the module is `__main__`.
    procs = [subprocess.Popen([sys.executable, "-m", "riskstream_tools.benchmarks.scenarios",
                               "worker", family, src, url,
                               f"{i}/{workers}"], stdout=subprocess.PIPE, text=True)
             for i in range(workers)]
    outs = [p.communicate()[0] for p in procs]
    failed = [i for i, p in enumerate(procs) if p.returncode != 0]
    if failed:
        raise RuntimeError(f"worker(s) {failed} of {workers} exited non-zero")
    runs = [json.loads(out.strip().splitlines()[-1]) for out in outs]
    counts = {k: sum(r[k] for r in runs) for k in ("records", "facts_written", "checkpoints")}
    summed: dict[str, float] = {}
    for r in runs:
        for k, v in r["stages"].items():
            summed[k] = summed.get(k, 0.0) + v
    commits = {"workers": workers, "worker_cpu_s": sum(r["worker_cpu_s"] for r in runs),
               "sink_commit_s": sum(r["sink_commit_s"] for r in runs),
               "checkpoint_dump_s": sum(r["checkpoint_dump_s"] for r in runs),
               "batches": sum(r["batches"] for r in runs),
               # None when the workers committed serially (no writer process).
               "writer_peak_rss_mib": max((r["writer_peak_rss_mib"] for r in runs
                                           if r["writer_peak_rss_mib"] is not None),
                                          default=None),
               **{k: _sum_known(r[k] for r in runs)
                  for k in ("writer_cpu_s", "writer_written_mib")},
               "worker_seconds": [round(r["end"] - r["start"], 3) for r in runs],
               "worker_records": [r["records"] for r in runs]}
    wall = max(r["end"] for r in runs) - min(r["start"] for r in runs)
    return counts, wall, summed, max(r["peak_rss_mib"] for r in runs), commits


def _sum_known(values: Iterable[float | None]) -> float | None:
    """The sum of the values that are known; None when none is (no writer process)."""
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def worker_child(family: str, src: str, url: str, assignment: str) -> dict:
    """One of several workers (`_run_family`): its run, timed by the wall clock so that the
    parent can span the workers' runs, as JSON."""
    spec, settings = _spec_and_settings(family, src, url, assignment)
    start = time.time()
    res, wall, stages, rss, commits = _run_worker(spec, settings, url)
    return {"start": start, "end": start + wall, "stages": stages, "peak_rss_mib": rss,
            "records": res.records, "facts_written": res.facts_written,
            "checkpoints": res.checkpoints, **commits}


def _join_reference_input(src: str) -> tuple[dict, dict, float]:
    """Latest revision of every payment and signal in the log: {id: (merchant, event_us)}."""
    import orjson

    from streaming.timeutil import parse_utc_us
    t0 = time.perf_counter()
    out: dict[str, dict] = {"payments": {}, "risk_signals": {}}
    ident = {"payments": "payment_id", "risk_signals": "signal_id"}
    for topic in out:
        best: dict[str, tuple[int, str, int]] = {}
        tdir = os.path.join(src, topic)
        for name in sorted(os.listdir(tdir)):
            with open(os.path.join(tdir, name), "rb") as fh:
                for line in fh:
                    o = orjson.loads(line)
                    i = o[ident[topic]]
                    rev = o["revision"]
                    cur = best.get(i)
                    if cur is None or cur[0] < rev:
                        best[i] = (rev, o["merchant_id"], parse_utc_us(o["event_time"]))
        out[topic] = {k: (v[1], v[2]) for k, v in best.items()}
    return out["payments"], out["risk_signals"], time.perf_counter() - t0


def _timed_join_reference(src: str) -> tuple[set, float, float]:
    from riskstream_tools.references.join import fast_candidate_pairs
    pay, sig, decode_s = _join_reference_input(src)
    t0 = time.perf_counter()
    ref = fast_candidate_pairs(pay, sig)
    return ref, time.perf_counter() - t0, decode_s


def child_join_store(src: str, url: str, n: int, workers: int = 1) -> dict:
    from streaming.cli.join import pair_rows
    from streaming.store.ops import Store
    counts, wall, stages, rss, commits = _run_family("join", src, url, workers)
    store = Store(url)
    try:
        live = {(r["payment_id"], r["signal_id"]) for r in pair_rows(store, False)}
    finally:
        store.dispose()
    ref, ref_s, ref_decode_s = _timed_join_reference(src)
    return {"seconds": wall, "reference_seconds": ref_s, "reference_decode_s": ref_decode_s,
            "peak_rss_mib": rss, "reference_equal": live == ref, "stages": stages, **counts,
            "pairs": len(live), "reference_pairs": len(ref), **commits}


def child_join_operator(src: str, url: str, n: int) -> dict:
    """The operator alone, batch by batch as the host drives it: each batch of the recording
    is decoded (timed as its own stage), then driven through the operator with per-topic
    watermarks (timed as the operator's). Reading the lines is the source's work and neither.
    Decoding the whole recording first held 5.6 GiB of records at 1,000,000 events and slowed
    the operator by that memory's cache misses, which no host run has (docs/performance.md,
    fourteenth round)."""
    import orjson

    from streaming.contracts import InvalidRecord, validate
    from streaming.operators.base import Emit, hash_facts
    from streaming.pipelines.join import SPEC
    from streaming.sources.filelog import FileLog
    from streaming.watermarks import InputWatermark

    log = FileLog(src, SPEC.topics)
    contracts = SPEC.contracts
    op = SPEC.make_operator(_spec_and_settings("join", src, url)[1])
    wms = {t: InputWatermark(t, log.partition_counts[t], SPEC.lateness_us[t])
           for t in log.topics}
    # The operator's current pairs: the last fact per logical key decides. Their IDs are read
    # from the facts' JSON between batches, off the clock: the operator hands the sink text,
    # and decoding it is the check's work, not the operator's.
    current: dict[str, tuple[str, str]] = {}
    decode_s = op_s = 0.0
    records = 0

    def drive(recs: list, emit: Emit) -> None:
        for r in recs:
            op.on_record(r, emit)
            w = wms[r.topic]
            if w.observe(r.partition, r.event_us, r.arrival_us):
                op.on_watermark(r.topic, w.wm, emit)

    def check(emit: Emit) -> None:
        for f in emit.facts:
            if f.kind != "pair":
                continue
            if f.status == "current":
                d = orjson.loads(f.payload_json or "")
                current[f.logical_key] = (d["payment_id"], d["signal_id"])
            else:
                current.pop(f.logical_key, None)

    # As the host does: one Emit per batch, handed on and dropped; the host's collector
    # settings, kept for the reference's timing as they have been since the first round.
    with run_collector():
        lines = log.merged({})
        while True:
            raws = list(islice(lines, BATCH_SIZE))
            t0 = time.perf_counter()
            recs = []
            for raw in raws:
                try:
                    recs.append(validate(contracts[raw.topic], raw.obj, raw.partition,
                                         raw.offset, len(raw.line)))
                except InvalidRecord:
                    continue
            t1 = time.perf_counter()
            emit = Emit()
            drive(recs, emit)
            if not raws:
                for w in wms.values():
                    w.end_of_stream()
                op.on_end_of_stream(emit)
            # The hashes the facts left for later, taken as the host's sink rows take them.
            hash_facts(emit.facts)
            t2 = time.perf_counter()
            decode_s += t1 - t0
            op_s += t2 - t1
            records += len(recs)
            check(emit)
            if not raws:
                break
        rss = _peak_rss_mib()
        live = set(current.values())
        ref, ref_s, ref_decode_s = _timed_join_reference(src)
    return {"seconds": op_s, "reference_seconds": ref_s, "reference_decode_s": ref_decode_s,
            "peak_rss_mib": rss, "reference_equal": live == ref,
            "stages": {"decode_validate_s": decode_s, "operator_s": op_s, "sink_s": 0.0,
                       "checkpoint_s": 0.0},
            "records": records,
            "pairs": len(live), "reference_pairs": len(ref)}


def child_ledger(src: str, url: str, n: int, workers: int = 1) -> dict:
    from streaming.cli.ledger import window_rows
    from streaming.store.ops import Store
    from streaming.timeutil import parse_utc_us

    counts, wall, stages, rss, commits = _run_family("ledger", src, url, workers)
    store = Store(url)
    try:
        current = {(r["account_id"], parse_utc_us(r["event_hour"].replace("Z", ":00Z"))):
                   r["total_cents"] for r in window_rows(store, include_all=False)}
    finally:
        store.dispose()
    ref, ref_s = _timed_ledger_reference(src)
    return {"seconds": wall, "reference_seconds": ref_s, "peak_rss_mib": rss,
            "reference_equal": current == ref and len(ref) > 0, "stages": stages, **counts,
            "windows": len(current), "reference_windows": len(ref), **commits}


def child_receipts(src: str, url: str, n: int, workers: int = 1) -> dict:
    from streaming.pipelines.receipts_release import active, decision_facts
    from streaming.store.ops import Store

    counts, wall, stages, rss, commits = _run_family("receipts", src, url, workers)
    store = Store(url)
    try:
        act = {f["receipt_id"]: f for f in active(decision_facts(store))}
    finally:
        store.dispose()
    ref, ref_s = _timed_receipts_reference(src)
    equal = len(act) == len(ref) > 0 and all(
        r in act and (act[r]["feature_count_7m"], act[r]["feature_amount_7m"], act[r]["score"])
        == (v["feature_count_7m"], v["feature_amount_7m"], v["score"]) for r, v in ref.items())
    return {"seconds": wall, "reference_seconds": ref_s, "peak_rss_mib": rss,
            "reference_equal": equal, "stages": stages, **counts, "decisions": len(act),
            "reference_decisions": len(ref), **commits}


def _timed_ledger_reference(src: str) -> tuple[dict, float]:
    from riskstream_tools.references.ledger import reference_totals
    t0 = time.perf_counter()
    ref = reference_totals(src)
    return ref, time.perf_counter() - t0


def _timed_receipts_reference(src: str) -> tuple[dict, float]:
    import orjson

    from streaming.models.registry import Registry
    from riskstream_tools.references.receipts import reference_decisions
    t0 = time.perf_counter()
    rows = []
    rdir = os.path.join(src, "receipts")
    for p in sorted(os.listdir(rdir)):
        with open(os.path.join(rdir, p), "rb") as fh:
            rows += [orjson.loads(line) for line in fh]
    ref = reference_decisions(rows, Registry(os.path.join(src, "models")).current())
    return ref, time.perf_counter() - t0


# Each family's reference (the first word of a scenario's name), timed.
REFERENCES = {"join": lambda src: _timed_join_reference(src)[:2],
              "ledger": _timed_ledger_reference, "receipts": _timed_receipts_reference}


def child_reference(scenario: str, src: str) -> float:
    """The scenario's reference alone, timed as the scenario's child times it after the run:
    the parent runs this in a child of its own before the scenario (see `run_scenario`)."""
    return REFERENCES[scenario.split("-")[0]](src)[1]


CHILDREN: dict[str, Callable[..., dict]] = {
    "join-sqlite": child_join_store, "join-postgres": child_join_store,
    "join-sqlite-ordered-ids": child_join_store, "join-operator": child_join_operator,
    "ledger-sqlite": child_ledger, "receipts-sqlite": child_receipts}
for _name, _n in WORKERS.items():
    CHILDREN[_name] = partial(CHILDREN[_name.removesuffix(f"-{_n}-workers")], workers=_n)


# ---------------------------------------------------------------------------- parent
class _PgDatabase:
    """A throwaway database on the PostgreSQL server named by RISKSTREAM_BENCH_PG."""

    def __init__(self) -> None:
        import psycopg
        self.admin = os.environ.get(PG_ADMIN_ENV, PG_ADMIN_DEFAULT)
        self.conn = psycopg.connect(self.admin, autocommit=True, connect_timeout=3)
        self.name = f"rs_bench_{uuid.uuid4().hex[:10]}"
        self.conn.execute(f'CREATE DATABASE "{self.name}"')
        self.url = self.admin.rsplit("/", 1)[0] + f"/{self.name}"

    def drop(self) -> None:
        try:
            self.conn.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')
        finally:
            self.conn.close()


def run_scenario(scenario: str, workdir: str, n: int) -> dict:
    """Prepare the input, run the scenario in a child process, and shape its result."""
    src = prepare_input(scenario, workdir, n)
    pg = None
    if scenario == "join-postgres":
        try:
            pg = _PgDatabase()
        except Exception as exc:  # noqa: BLE001  (no server: the scenario cannot run)
            return {"scenario": scenario, "events": n, "error":
                    f"PostgreSQL not reachable at {PG_ADMIN_ENV}: {exc.__class__.__name__}"}
        url = pg.url
    else:
        url = _sqlite_url(workdir, scenario)
    try:
        before = subprocess.run([sys.executable, "-m", __name__, "reference", scenario, src],
                                capture_output=True, text=True)
        proc = subprocess.run([sys.executable, "-m", __name__, "child", scenario, src, url,
                               str(n)], capture_output=True, text=True)
    finally:
        if pg is not None:
            pg.drop()
    for what, p in (("reference", before), ("scenario", proc)):
        if p.returncode != 0:
            return {"scenario": scenario, "events": n,
                    "error": f"the {what} child exited {p.returncode}: {p.stderr[-1500:]}"}
    child = json.loads(proc.stdout.strip().splitlines()[-1])
    # The reference is timed right before the run (a child of its own, so the run's child
    # holds nothing of it) and right after it (in the run's child): the ratio takes their
    # mean, so a machine that changes speed during a run moves both sides alike.
    ref_before = float(json.loads(before.stdout.strip().splitlines()[-1])["reference_seconds"])
    ref_after = child.pop("reference_seconds")
    secs, ref_s = child.pop("seconds"), (ref_before + ref_after) / 2
    out = result_fields(scenario, n, secs, ref_s, child.pop("peak_rss_mib"))
    out["reference_seconds_before"] = round(ref_before, 3)
    out["reference_seconds_after"] = round(ref_after, 3)
    out["reference_equal"] = bool(child.pop("reference_equal"))
    out["stages"] = {k: (round(v, 3) if isinstance(v, float) else v)
                     for k, v in child.pop("stages").items()}
    out.update(child)
    out["limited_by"] = limited_by(out)
    return out


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "reference":
        print(json.dumps({"reference_seconds": child_reference(sys.argv[2], sys.argv[3])}))
    elif len(sys.argv) == 6 and sys.argv[1] == "worker":
        print(json.dumps(worker_child(*sys.argv[2:]), default=str))
    elif len(sys.argv) == 6 and sys.argv[1] == "child":
        from streaming import native
        from streaming.store.sqlite_driver import in_use

        _, _, name, src_, url_, n_ = sys.argv
        # Which SQLite library the scenario's store ran on (`sqlite_driver`; None without a
        # SQLite store), beside the core's build.
        print(json.dumps({**CHILDREN[name](src_, url_, int(n_)), "core": native.active,
                          "sqlite": in_use()},
                         default=str))
    else:
        raise SystemExit(
            "usage: python -m riskstream_tools.benchmarks.scenarios child NAME SRC URL N\n"
            "       python -m riskstream_tools.benchmarks.scenarios worker FAMILY SRC URL I/N\n"
            "       python -m riskstream_tools.benchmarks.scenarios reference NAME SRC")
