"""Follow-mode scenarios: JetStream -> worker -> PostgreSQL (the `follow-*` names of
`riskstream bench`).

- `follow-1-worker`, `follow-2-workers`: the join workload (the `join-*` scenarios' shape,
  re-keyed to 4 partitions) is published as fast as the server acknowledges while one worker,
  then two (`--worker 0/2` and `1/2`), follow; the rate is records / seconds from the start of
  publishing until the store's journal holds every record;
- `follow-latency`: the same at a steady 2,000 events/s; the end-to-end percentiles (JetStream
  message timestamp -> commit of its batch) come from the worker's metrics;
- `follow-latency-no-linger`: the same with `--max-batch-delay 0`, each batch what was
  delivered by the time the worker took it;
- `follow-pg-restart`: a private PostgreSQL is stopped for 10 s while a paced producer
  publishes; `recovery_s` is the time from the server being back to the worker's next commit.

Every scenario then compares the sink's current pairs with the file-log reference (the same
sort-and-search probe as `join-sqlite`, over the recording that was published):
`reference_equal`. Start-up (imports, connection, lease) is not counted in `seconds`.
Peak RSS is the largest VmHWM of the worker processes, read just before they are stopped.

Needs NATS (RISKSTREAM_NATS_SERVER, default nats://127.0.0.1:4222) and PostgreSQL
(RISKSTREAM_BENCH_PG, default the local server); `follow-pg-restart` also needs the PostgreSQL
server binaries (initdb, pg_ctl). Event counts are capped by RISKSTREAM_BENCH_FOLLOW_EVENTS
(default 40,000; latency 20,000 and restart 8,000 at most): a follow run is paced by the
broker, not a replay."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass

from sqlalchemy import func, select

from streaming.procinfo import vm_hwm_mib

from .scenarios import (
    JOIN_EVENTS_PER_MINUTE,
    JOIN_HOT_SHARE,
    JOIN_MERCHANTS,
    PG_ADMIN_DEFAULT,
    PG_ADMIN_ENV,
    _timed_join_reference,
    result_fields,
)

NATS_ENV = "RISKSTREAM_NATS_SERVER"
NATS_DEFAULT = "nats://127.0.0.1:4222"
FOLLOW_EVENTS_ENV = "RISKSTREAM_BENCH_FOLLOW_EVENTS"
FOLLOW_EVENTS_DEFAULT = 40_000
LATENCY_EVENTS_MAX = 20_000
LATENCY_RATE = 2_000
RESTART_EVENTS_MAX = 8_000
RESTART_RATE = 500
RESTART_DOWN_S = 10.0
STARTUP_S = 3.0
PARTITIONS = "4"
LINGER_MS = 200  # the follow scenarios' --max-batch-delay (the CLI's default)
FOLLOW_ARGS = ["--batch-size", "2000", "--checkpoint-every", "20000", "--max-batch-delay",
               str(LINGER_MS)]


def _pg_admin() -> str:
    return os.environ.get(PG_ADMIN_ENV, PG_ADMIN_DEFAULT)


def _nats() -> str:
    return os.environ.get(NATS_ENV, NATS_DEFAULT)


def _cli(*args: str) -> subprocess.CompletedProcess:
    res = subprocess.run([sys.executable, "-m", "streaming.cli.main", *args],
                         capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(args[:3])}: {res.stderr[-1500:]}")
    return res


def _follow(url: str, store: str, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "streaming.cli.main", "join", "run",
                             "--source", url, "--store", store, "--follow", "--quiet",
                             *FOLLOW_ARGS, *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _stop(procs: list[subprocess.Popen]) -> float:
    """SIGTERM every worker (they finish the batch in hand and checkpoint); returns the largest
    peak RSS among them, read before the signal."""
    peak = max((vm_hwm_mib(p.pid) or 0.0 for p in procs), default=0.0)
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    errors = []
    for p in procs:
        _, err = p.communicate(timeout=30)
        if p.returncode != 0:
            errors.append(f"follow worker exited {p.returncode}: {err[-1500:]}")
    if errors:
        raise RuntimeError("; ".join(errors))
    return peak


def _consumed(store_url: str) -> int:
    from streaming.store import schema as S
    from streaming.store.ops import make_engine
    eng = make_engine(store_url)
    try:
        j = S.journal.c
        with eng.connect() as conn:
            total = conn.execute(select(func.coalesce(func.sum(j.records), 0)).where(
                (j.pipeline == "join") | j.pipeline.like("join@%"))).scalar()
            return int(total or 0)
    except Exception:  # noqa: BLE001  (tables not created yet, or the server is restarting)
        return -1
    finally:
        eng.dispose()


def _wait(store_url: str, n: int, procs: list[subprocess.Popen], timeout: float = 600) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for p in procs:
            if p.poll() is not None:
                err = p.stderr.read() if p.stderr is not None else ""
                raise RuntimeError(f"worker exited {p.returncode}: {err[-1500:]}")
        if _consumed(store_url) >= n:
            return time.monotonic()
        time.sleep(0.05)
    raise RuntimeError(f"not all {n} records consumed in {timeout}s")


class _Database:
    """A throwaway database on the shared PostgreSQL server."""

    def __init__(self) -> None:
        import psycopg
        self.name = f"rs_bench_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(_pg_admin(), autocommit=True, connect_timeout=3) as conn:
            conn.execute(f'CREATE DATABASE "{self.name}"')
        self.url = _pg_admin().rsplit("/", 1)[0] + f"/{self.name}"

    def drop(self) -> None:
        import psycopg
        with psycopg.connect(_pg_admin(), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')


def _stream(tag: str) -> str:
    return f"{_nats()}?stream=rs_bench_{tag}_{uuid.uuid4().hex[:8]}"


def _empty_layout(url: str, workdir: str) -> None:
    """Create the stream with the re-keyed layout and no messages, so the workers can start
    before the first record is published."""
    empty = os.path.join(workdir, "empty")
    for topic in ("payments", "risk_signals"):
        os.makedirs(os.path.join(empty, topic), exist_ok=True)
        open(os.path.join(empty, topic, "p0.jsonl"), "w").close()
    _cli("nats", "publish", "--source", empty, "--url", url, "--quiet", "--pipeline", "join",
         "--partitions", PARTITIONS, "--topics", "payments,risk_signals")


def _publish_args(rec: str, url: str, rate: int | None = None) -> list[str]:
    args = ["nats", "publish", "--source", rec, "--url", url, "--quiet", "--pipeline", "join",
            "--partitions", PARTITIONS]
    return args + (["--rate", str(rate)] if rate else [])


def _recording(workdir: str, seed: int, n: int) -> str:
    from riskstream_tools.workloads.join_seed import generate_bulk
    rec = os.path.join(workdir, "inputs", f"follow_{seed}_{n}")
    done = os.path.join(rec, ".complete")
    if not os.path.exists(done):
        generate_bulk(seed, rec, n, merchants=JOIN_MERCHANTS, hot_share=JOIN_HOT_SHARE,
                      events_per_minute=JOIN_EVENTS_PER_MINUTE)
        open(done, "w").close()
    return rec


def _sink_vs_reference(store_url: str, rec: str) -> dict:
    from streaming.cli.join import pair_rows
    from streaming.store.ops import Store
    store = Store(store_url)
    try:
        live = {(r["payment_id"], r["signal_id"]) for r in pair_rows(store, False)}
        follow = (store.last_metrics("join") or {}).get("follow") or {}
    finally:
        store.dispose()
    ref, ref_s, ref_decode_s = _timed_join_reference(rec)
    return {"live": live, "ref": ref, "ref_s": ref_s + ref_decode_s, "follow": follow}


def _shape(scenario: str, n: int, seconds: float, peak: float, cmp: dict, **extra) -> dict:
    """The common JSON fields. The reference rate is the file-log reference's (decode and
    probe), so `ratio` says how far live following is from recomputing the answer offline."""
    out = result_fields(scenario, n, seconds, cmp["ref_s"], peak)
    out.update({"reference_equal": cmp["live"] == cmp["ref"] and len(cmp["ref"]) > 0,
                "pairs": len(cmp["live"]), "reference_pairs": len(cmp["ref"])}, **extra)
    return out


def _follow_events(n: int) -> int:
    return min(n, int(os.environ.get(FOLLOW_EVENTS_ENV, FOLLOW_EVENTS_DEFAULT)))


@dataclass
class _FollowRun:
    seconds: float  # from the start of publishing until the store's journal holds every record
    publish_seconds: float  # from the start of publishing until the producer returned
    peak_rss_mib: float
    cmp: dict  # `_sink_vs_reference`


def _publish_while_following(workdir: str, seed: int, n: int, tag: str,
                             assignments: list[list[str]], rate: int | None = None) -> _FollowRun:
    """Start one follow worker per entry of `assignments` (its extra arguments) on a new stream
    and a throwaway database, publish the recording of `seed` (at `rate` events/s, or as fast
    as the server acknowledges) once they are up, wait until every record is consumed, stop
    the workers and compare the sink with the reference."""
    from streaming.sources.nats_publish import delete_stream
    rec = _recording(workdir, seed, n)
    url = _stream(tag)
    db = _Database()
    try:
        _empty_layout(url, workdir)
        procs = [_follow(url, db.url, *a) for a in assignments]
        try:
            time.sleep(STARTUP_S)
            t0 = time.monotonic()
            _cli(*_publish_args(rec, url, rate))
            published = time.monotonic()
            done = _wait(db.url, n, procs)
        finally:
            peak = _stop(procs)
            delete_stream(url)
        cmp = _sink_vs_reference(db.url, rec)
    finally:
        db.drop()
    return _FollowRun(done - t0, published - t0, peak, cmp)


def _throughput(scenario: str, workdir: str, n: int, workers: int) -> dict:
    n = _follow_events(n)
    assignments = [[]] if workers == 1 else [["--worker", f"{i}/{workers}"]
                                             for i in range(workers)]
    run = _publish_while_following(workdir, 11, n, f"w{workers}", assignments)
    return _shape(scenario, n, run.seconds, run.peak_rss_mib, run.cmp, workers=workers,
                  publish_seconds=round(run.publish_seconds, 3))


def follow_1_worker(workdir: str, n: int) -> dict:
    return _throughput("follow-1-worker", workdir, n, 1)


def follow_2_workers(workdir: str, n: int) -> dict:
    return _throughput("follow-2-workers", workdir, n, 2)


def _latency(scenario: str, workdir: str, n: int, delay_ms: int) -> dict:
    n = min(_follow_events(n), LATENCY_EVENTS_MAX)
    run = _publish_while_following(workdir, 12, n, "lat", [["--max-batch-delay", str(delay_ms)]],
                                   LATENCY_RATE)
    follow = run.cmp["follow"]
    e2e = follow.get("e2e_latency_ms") or {}
    return _shape(scenario, n, run.seconds, run.peak_rss_mib, run.cmp,
                  rate_per_s=LATENCY_RATE, max_batch_delay_ms=delay_ms, p50_ms=e2e.get("p50"),
                  p99_ms=e2e.get("p99"), commit_ms=follow.get("commit_ms"),
                  batches=sum((follow.get("batches_closed_by") or {}).values()))


def follow_latency(workdir: str, n: int) -> dict:
    return _latency("follow-latency", workdir, n, LINGER_MS)


def follow_latency_no_linger(workdir: str, n: int) -> dict:
    return _latency("follow-latency-no-linger", workdir, n, 0)


def follow_pg_restart(workdir: str, n: int) -> dict:
    from streaming.sources.nats_publish import delete_stream

    from .private_pg import PrivatePostgres
    n = min(_follow_events(n), RESTART_EVENTS_MAX)
    rec = _recording(workdir, 13, n)
    pg = PrivatePostgres()
    url = _stream("rec")
    try:
        pg.start()
        _empty_layout(url, workdir)
        procs = [_follow(url, pg.url, "--batch-size", "200", "--max-batch-delay", "100")]
        producer_error: list[BaseException] = []

        def produce() -> None:
            try:
                _cli(*_publish_args(rec, url, RESTART_RATE))
            except BaseException as exc:  # noqa: BLE001  (reported after the join)
                producer_error.append(exc)

        producer = threading.Thread(target=produce)
        try:
            time.sleep(STARTUP_S)
            t0 = time.monotonic()
            producer.start()
            _wait(pg.url, 1, procs, timeout=60)
            back = pg.restart_after(RESTART_DOWN_S)
            before = _consumed(pg.url)
            resumed = _wait(pg.url, before + 1, procs, timeout=120)
            producer.join()
            if producer_error:
                raise producer_error[0]
            done = _wait(pg.url, n, procs)
        finally:
            if producer.is_alive():
                producer.join()
            peak = _stop(procs)
        cmp = _sink_vs_reference(pg.url, rec)
    finally:
        delete_stream(url)
        pg.destroy()
    return _shape("follow-pg-restart", n, done - t0, peak, cmp, rate_per_s=RESTART_RATE,
                  down_s=RESTART_DOWN_S, recovery_s=round(resumed - back, 3),
                  store_outage=cmp["follow"].get("store"))


SCENARIOS = {"follow-1-worker": follow_1_worker, "follow-2-workers": follow_2_workers,
             "follow-latency": follow_latency,
             "follow-latency-no-linger": follow_latency_no_linger,
             "follow-pg-restart": follow_pg_restart}
# What each scenario needs running: (name, host, port); checked before it starts.
SERVICES = (("NATS", "127.0.0.1", 4222), ("PostgreSQL", "127.0.0.1", 5432))
