"""Follow mode: JetStream -> worker -> PostgreSQL.

- throughput: the join's bulk workload (re-keyed, 4 partitions) is published as fast as the
  server acknowledges while one worker (then two, `--worker 0/2` and `1/2`) follows; the figure
  is records / seconds from the start of publishing until the store holds every record;
- latency: the same at a steady 2,000 events/s (and 1,000, below the sustained rate here);
  the end-to-end percentiles (JetStream message timestamp -> commit of its batch) come from
  the worker's metrics;
- recovery: a private PostgreSQL is stopped for 10 s while a paced producer publishes; the
  figure is the time from the server being back to the worker's next commit.

Needs NATS on 127.0.0.1:4222 and PostgreSQL (RISKSTREAM_BENCH_PG, default the local server);
the recovery row also needs the PostgreSQL server binaries (initdb, pg_ctl)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid

from sqlalchemy import func, select

PG_ADMIN = os.environ.get("RISKSTREAM_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
NATS = os.environ.get("RISKSTREAM_NATS_SERVER", "nats://127.0.0.1:4222")
FOLLOW_ARGS = ["--batch-size", "2000", "--checkpoint-every", "20000", "--max-batch-delay", "200"]


def _cli(*args: str) -> subprocess.CompletedProcess:
    res = subprocess.run([sys.executable, "-m", "streaming.cli.main", *args],
                         capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(args[:3])}: {res.stderr[-1500:]}")
    return res


def _follow(url: str, store: str, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "streaming.cli.main", "join", "run",
                             "--source", url, "--store", store, "--follow", "--quiet",
                             *FOLLOW_ARGS, *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    if proc.returncode != 0:
        raise RuntimeError(f"follow worker exited {proc.returncode}: {err[-1500:]}")


def _consumed(store_url: str) -> int:
    from streaming.store import schema as S
    from streaming.store.ops import make_engine
    eng = make_engine(store_url)
    try:
        j = S.journal.c
        with eng.connect() as conn:
            return int(conn.execute(select(func.coalesce(func.sum(j.records), 0)).where(
                (j.pipeline == "join") | j.pipeline.like("join@%"))).scalar() or 0)
    except Exception:  # tables not created yet, or the server is restarting
        return -1
    finally:
        eng.dispose()


def _wait(store_url: str, n: int, procs, timeout: float = 600) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for p in procs:
            if p.poll() is not None:
                raise RuntimeError(f"worker exited {p.returncode}: {p.stderr.read()[-1500:]}")
        if _consumed(store_url) >= n:
            return time.monotonic()
        time.sleep(0.05)
    raise RuntimeError(f"not all {n} records consumed in {timeout}s")


class _Databases:
    def __init__(self) -> None:
        self.names: list[str] = []

    def new(self) -> str:
        import psycopg
        name = f"rs_bench_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        self.names.append(name)
        return PG_ADMIN.rsplit("/", 1)[0] + f"/{name}"

    def drop(self) -> None:
        import psycopg
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            for name in self.names:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _stream(tag: str) -> str:
    return f"{NATS}?stream=rs_bench_{tag}_{uuid.uuid4().hex[:8]}"


def _empty_layout(rec: str, url: str, workdir: str) -> None:
    """Create the stream with the re-keyed layout and no messages."""
    empty = os.path.join(workdir, "empty")
    for topic in ("payments", "risk_signals"):
        os.makedirs(os.path.join(empty, topic), exist_ok=True)
        open(os.path.join(empty, topic, "p0.jsonl"), "w").close()
    _cli("nats", "publish", "--source", empty, "--url", url, "--quiet", "--pipeline", "join",
         "--partitions", "4", "--topics", "payments,risk_signals")


def _throughput(rec: str, n: int, workers: int, dbs: _Databases, workdir: str) -> dict:
    from streaming.sources.nats_publish import delete_stream
    url = _stream(f"w{workers}")
    store = dbs.new()
    _empty_layout(rec, url, workdir)
    assignments = [[]] if workers == 1 else [["--worker", f"{i}/{workers}"]
                                             for i in range(workers)]
    procs = [_follow(url, store, *a) for a in assignments]
    try:
        time.sleep(3.0)  # start-up (imports, connection, lease) is not throughput
        t0 = time.monotonic()
        pub = _cli("nats", "publish", "--source", rec, "--url", url, "--quiet", "--pipeline",
                   "join", "--partitions", "4")
        published = time.monotonic()
        done = _wait(store, n, procs)
    finally:
        for p in procs:
            _stop(p)
        delete_stream(url)
    return {"workers": workers, "records": n, "seconds": round(done - t0, 3),
            "records_per_s": round(n / (done - t0)),
            "publish_seconds": round(published - t0, 3), "publisher": pub.stdout.split("\n")[0]}


def _latency(rec: str, n: int, rate: int, dbs: _Databases, workdir: str) -> dict:
    from streaming.sources.nats_publish import delete_stream
    from streaming.store.ops import Store
    url = _stream("lat")
    store = dbs.new()
    _empty_layout(rec, url, workdir)
    proc = _follow(url, store)
    try:
        time.sleep(3.0)
        _cli("nats", "publish", "--source", rec, "--url", url, "--quiet", "--pipeline", "join",
             "--partitions", "4", "--rate", str(rate))
        _wait(store, n, [proc])
    finally:
        _stop(proc)
        delete_stream(url)
    s = Store(store)
    try:
        f = (s.last_metrics("join") or {})["follow"]
    finally:
        s.dispose()
    return {"rate_per_s": rate, "records": n, "e2e_ms": f["e2e_latency_ms"],
            "commit_ms": f["commit_ms"]}


def _recovery(rec: str, n: int, workdir: str) -> dict:
    from streaming.sources.nats_publish import delete_stream
    from streaming.store.ops import Store
    from .private_pg import PrivatePostgres
    pg = PrivatePostgres()
    pg.start()
    url = _stream("rec")
    try:
        _empty_layout(rec, url, workdir)
        proc = _follow(url, pg.url, "--batch-size", "200", "--max-batch-delay", "100")
        producer = threading.Thread(target=_cli, args=(
            "nats", "publish", "--source", rec, "--url", url, "--quiet", "--pipeline", "join",
            "--partitions", "4", "--rate", "500"))
        try:
            time.sleep(3.0)
            producer.start()
            time.sleep(3.0)
            back = pg.restart_after(10.0)
            before = _consumed(pg.url)
            resumed = _wait(pg.url, before + 1, [proc], timeout=120)
            producer.join()
            _wait(pg.url, n, [proc])
        finally:
            _stop(proc)
        s = Store(pg.url)
        try:
            outage = (s.last_metrics("join") or {})["follow"]["store"]
        finally:
            s.dispose()
    finally:
        delete_stream(url)
        pg.destroy()
    return {"down_s": 10.0, "first_commit_after_back_s": round(resumed - back, 3),
            "store_outage_metrics": outage}


def run_bench(workdir: str, n: int) -> dict:
    from ..workloads.join_seed import generate_bulk
    n = min(n, int(os.environ.get("RISKSTREAM_BENCH_FOLLOW_EVENTS", "40000")))
    rec = os.path.join(workdir, "bulk")
    generate_bulk(11, rec, n)
    lat_rec = os.path.join(workdir, "bulk-latency")
    lat_n = min(n, 20000)
    generate_bulk(12, lat_rec, lat_n)
    slow_rec = os.path.join(workdir, "bulk-latency-1000")
    slow_n = min(n, 10000)
    generate_bulk(14, slow_rec, slow_n)
    rec_rec = os.path.join(workdir, "bulk-recovery")
    generate_bulk(13, rec_rec, 8000)
    dbs = _Databases()
    out: dict = {}
    try:
        out["one_worker"] = _throughput(rec, n, 1, dbs, workdir)
        out["two_workers"] = _throughput(rec, n, 2, dbs, workdir)
        out["latency_2000_per_s"] = _latency(lat_rec, lat_n, 2000, dbs, workdir)
        # Below the sustained throughput, for the steady-state figure.
        out["latency_1000_per_s"] = _latency(slow_rec, slow_n, 1000, dbs, workdir)
    finally:
        dbs.drop()
    try:
        out["postgres_restart_10s"] = _recovery(rec_rec, 8000, workdir)
    except (RuntimeError, OSError, subprocess.CalledProcessError) as exc:
        out["postgres_restart_10s"] = {"skipped": str(exc)[:200]}
    return out
