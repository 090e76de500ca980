"""`make bench`: throughput and memory of every pipeline's `run`, each against its naive
reference in the same run (as a ratio), written as JSON and printed as a table.

Settings (env): RISKSTREAM_BENCH_DIR (default .riskstream/bench), RISKSTREAM_BENCH_OUT
(default bench/results/bench.json), RISKSTREAM_BENCH_EVENTS (default 100000),
RISKSTREAM_BENCH_NAIVE_EVENTS (default 10000; the naive P x S scan is quadratic),
RISKSTREAM_BENCH_SECTIONS (default join,ledger,receipts,nats,rebuild,follow),
RISKSTREAM_BENCH_REBUILD_EVENTS (default 200000; the issue's figure is for 1,000,000)."""

from __future__ import annotations

import importlib
import json
import os
import platform
import resource
import shutil
import socket
import subprocess
import sys
import time

from rich.console import Console
from rich.table import Table

console = Console()


def _child_run(args: list[str]) -> tuple[float, int, str]:
    """Run the CLI in a child process: wall seconds and the child's peak RSS in MiB."""
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "streaming.cli.main", *args],
                          capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed: {proc.stderr[-2000:]}")
    rss_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return wall, rss_kib // 1024, proc.stdout


def _join_inputs(src: str):
    from streaming.contracts import CONTRACTS, validate
    from streaming.sources.filelog import FileLog
    log = FileLog(src, ["payments", "risk_signals"])
    recs = []
    for raw in log.merged({}):
        assert isinstance(raw.obj, dict)  # the seed holds no undecodable lines
        recs.append(validate(CONTRACTS[raw.topic], raw.obj, raw.partition, raw.offset,
                             len(raw.line)))
    return log, recs


def bench_join(workdir: str, n: int, naive_n: int) -> dict:
    from streaming.cli.join import pair_rows
    from streaming.operators.base import Emit
    from streaming.operators.interval_join import LATENESS_US, IntervalJoin
    from streaming.store.ops import Store
    from streaming.watermarks import InputWatermark

    from .references.join import candidate_pairs, fast_candidate_pairs
    from .workloads.join_seed import generate_bulk

    out: dict = {"events": n}
    src = os.path.join(workdir, f"join_{n}")
    generate_bulk(1, src, n)
    # Stage costs: decode + validate, then the operator alone (no store), then end to end.
    t0 = time.perf_counter()
    log, recs = _join_inputs(src)
    out["decode_validate_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    op = IntervalJoin()
    wms = {t: InputWatermark(t, log.partition_counts[t], LATENESS_US) for t in log.topics}
    emit = Emit()
    for r in recs:
        op.on_record(r, emit)
        w = wms[r.topic]
        if w.observe(r.partition, r.event_us, r.arrival_us):
            op.on_watermark(r.topic, w.wm, emit)
    op.on_end_of_stream(emit)
    out["operator_only_s"] = time.perf_counter() - t0
    out["operator_events_per_s"] = n / out["operator_only_s"]
    url = f"sqlite:///{os.path.join(workdir, f'join_{n}.sqlite')}"
    wall, rss, _ = _child_run(["join", "run", "--source", src, "--store", url,
                               "--end-of-stream", "--quiet"])
    out["run_s"] = wall
    out["run_events_per_s"] = n / wall
    out["run_peak_rss_mib"] = rss
    store = Store(url)
    live = {(r["payment_id"], r["signal_id"]) for r in pair_rows(store, False)}
    ck = store.latest_checkpoint("join")
    store.dispose()
    assert ck is not None, "the measured run writes a checkpoint at its end"
    out["pairs"] = len(live)
    out["checkpoint_bytes"] = ck["size_bytes"]
    out["sink_share_estimate"] = max(0.0, 1 - (out["decode_validate_s"] +
                                               out["operator_only_s"]) / wall)
    pay = {r.id: (r.key, r.event_us) for r in recs if r.topic == "payments"}
    sig = {r.id: (r.key, r.event_us) for r in recs if r.topic == "risk_signals"}
    t0 = time.perf_counter()
    ref = fast_candidate_pairs(pay, sig)
    out["fast_reference_s"] = time.perf_counter() - t0
    out["pairs_equal_fast_reference"] = ref == live
    # The naive P x S scan is quadratic: compare at a size it can finish.
    small = os.path.join(workdir, f"join_{naive_n}")
    generate_bulk(2, small, naive_n)
    _, srecs = _join_inputs(small)
    spay = {r.id: (r.key, r.event_us) for r in srecs if r.topic == "payments"}
    ssig = {r.id: (r.key, r.event_us) for r in srecs if r.topic == "risk_signals"}
    t0 = time.perf_counter()
    naive = candidate_pairs(spay, ssig)
    out["naive_events"] = naive_n
    out["naive_reference_s"] = time.perf_counter() - t0
    surl = f"sqlite:///{os.path.join(workdir, f'join_{naive_n}.sqlite')}"
    swall, _, _ = _child_run(["join", "run", "--source", small, "--store", surl,
                              "--end-of-stream", "--quiet"])
    out["run_s_at_naive_size"] = swall
    store = Store(surl)
    out["pairs_equal_naive_reference"] = naive == {
        (r["payment_id"], r["signal_id"]) for r in pair_rows(store, False)}
    store.dispose()
    out["ratio_naive_over_run_same_size"] = out["naive_reference_s"] / swall
    out["postgresql"] = _join_on_postgres(src, n)
    out["naive_extrapolated_s_at_n"] = out["naive_reference_s"] * (n / naive_n) ** 2
    out["ratio_naive_extrapolated_over_run_at_n"] = out["naive_extrapolated_s_at_n"] / wall
    return out


def _join_on_postgres(src: str, n: int) -> dict:
    """The same `join run` with the store on PostgreSQL (a throwaway database), when one is
    reachable at RISKSTREAM_BENCH_PG (default postgresql://postgres@127.0.0.1:5432/postgres)."""
    import uuid
    admin = os.environ.get("RISKSTREAM_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
    try:
        import psycopg
        conn = psycopg.connect(admin, autocommit=True, connect_timeout=3)
    except Exception as exc:  # no server: say so in the results rather than fail the bench
        return {"skipped": f"PostgreSQL not reachable: {exc.__class__.__name__}"}
    name = f"rs_bench_{uuid.uuid4().hex[:10]}"
    conn.execute(f'CREATE DATABASE "{name}"')
    try:
        url = admin.rsplit("/", 1)[0] + f"/{name}"
        wall, _, _ = _child_run(["join", "run", "--source", src, "--store", url,
                                 "--end-of-stream", "--quiet"])
        return {"run_s": wall, "run_events_per_s": n / wall}
    finally:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.close()


def _hook(name: str, workdir: str, n: int) -> dict:
    mod = importlib.import_module(f"riskstream_tools.benchmarks.{name}")
    sub = os.path.join(workdir, name)
    os.makedirs(sub, exist_ok=True)
    return mod.run_bench(sub, n)


def _flatten(prefix: str, obj, rows: list[tuple[str, str]]) -> None:
    if isinstance(obj, dict):
        for k, v in obj.items():
            _flatten(f"{prefix}.{k}" if prefix else k, v, rows)
    elif isinstance(obj, float):
        rows.append((prefix, f"{obj:,.3f}"))
    elif isinstance(obj, (list, tuple)):
        rows.append((prefix, json.dumps(obj)[:80]))
    else:
        rows.append((prefix, str(obj)))


def main() -> int:
    workdir = os.environ.get("RISKSTREAM_BENCH_DIR", os.path.join(".riskstream", "bench"))
    out_path = os.environ.get("RISKSTREAM_BENCH_OUT", os.path.join("bench", "results",
                                                                    "bench.json"))
    n = int(os.environ.get("RISKSTREAM_BENCH_EVENTS", "100000"))
    naive_n = int(os.environ.get("RISKSTREAM_BENCH_NAIVE_EVENTS", "10000"))
    rebuild_n = int(os.environ.get("RISKSTREAM_BENCH_REBUILD_EVENTS", "200000"))
    sections = [s.strip() for s in os.environ.get(
        "RISKSTREAM_BENCH_SECTIONS", "join,ledger,receipts,nats,rebuild,follow").split(",") if s]
    shutil.rmtree(workdir, ignore_errors=True)
    os.makedirs(workdir, exist_ok=True)
    results: dict = {"machine": {"python": platform.python_version(),
                                 "platform": platform.platform(), "cpus": os.cpu_count()},
                     "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    failed = []
    for name in sections:
        console.rule(f"[bold]bench: {name}")
        t0 = time.perf_counter()
        try:
            if name == "join":
                results[name] = bench_join(workdir, n, naive_n)
            elif name in ("nats", "follow"):
                try:
                    socket.create_connection(("127.0.0.1", 4222), timeout=1).close()
                except OSError:
                    results[name] = {"skipped": "NATS not reachable on 127.0.0.1:4222"}
                    continue
                results[name] = _hook(name, workdir, n)
            elif name == "rebuild":
                results[name] = _hook(name, workdir, rebuild_n)
            else:
                results[name] = _hook(name, workdir, n)
        except ModuleNotFoundError as exc:
            results[name] = {"skipped": f"not available in this build ({exc.name})"}
        except Exception as exc:
            console.print_exception()
            results[name] = {"error": str(exc)}
            failed.append(name)
        results.setdefault(name, {})["section_s"] = time.perf_counter() - t0
    os.makedirs(os.path.dirname(out_path) or ".", exist_ok=True)
    with open(out_path, "w") as fh:
        json.dump(results, fh, indent=2, default=str)
    table = Table(title=f"riskstream bench ({out_path})")
    table.add_column("measure")
    table.add_column("value", justify="right")
    rows: list[tuple[str, str]] = []
    _flatten("", {k: v for k, v in results.items() if k != "machine"}, rows)
    for k, v in rows:
        table.add_row(k, v)
    console.print(table)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
