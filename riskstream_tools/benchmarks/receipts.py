"""Benchmark: the offline surge. N receipts taken while every store was disconnected arrive
in one backlog; `receipts run` works through it, timed against the occurrence-order
reference scorer in the same run.

The run happens in a child process so its peak resident memory (getrusage ru_maxrss) is the
scorer's alone; the child also reports tracemalloc's peak of Python allocations when asked."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time


def _child(src: str, url: str, models: str, trace: bool) -> dict:
    import tracemalloc

    from streaming.host.loop import Worker
    from streaming.host.settings import RunSettings
    from streaming.pipelines.receipts import SPEC
    from streaming.store.ops import Store

    store = Store(url)
    if trace:
        tracemalloc.start()
    t0 = time.perf_counter()
    res = Worker(SPEC, RunSettings(source=src, store_url=url, end_of_stream=True,
                                   checkpoint_every=20_000, batch_size=2_000,
                                   extra={"model_dir": models}), store=store).run()
    wall = time.perf_counter() - t0
    traced = tracemalloc.get_traced_memory()[1] if trace else None
    trace_rows = store.metrics_trace("receipts")
    store.dispose()
    first = min(r["clock_us"] for r in trace_rows)
    last = max(r["clock_us"] for r in trace_rows)
    lags = [r["clock_us"] - r["input_wm"]["receipts"] for r in trace_rows
            if r["input_wm"]["receipts"] < 2**61]
    return {"records": res.records, "facts": res.facts_written, "wall_s": wall,
            "checkpoints": res.checkpoints, "worker_clock_span_s": (last - first) / 1e6,
            "max_event_time_lag_s": max(lags) / 1e6 if lags else None,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "tracemalloc_peak_mb": traced / 2**20 if traced is not None else None,
            "state_peak_records": res.metrics["state"]["peak"]["records"]}


def run_bench(workdir: str, n: int, trace: bool = False) -> dict:
    from streaming.models.registry import Registry

    from ..references.receipts import reference_decisions
    from ..workloads.receipts_seed import generate_surge

    src = os.path.join(workdir, f"receipts_surge_{n}")
    models = os.path.join(workdir, "receipt_bench_models")
    surge = generate_surge(3, src, n)
    db = os.path.join(workdir, f"receipts_surge_{n}.sqlite")
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(db + suffix):
            os.remove(db + suffix)
    url = f"sqlite:///{db}"
    Registry(models)
    proc = subprocess.run([sys.executable, "-m", "riskstream_tools.benchmarks.receipts", src, url,
                           models, "trace" if trace else "plain"],
                          capture_output=True, text=True, check=True)
    child = json.loads(proc.stdout.strip().splitlines()[-1])
    import orjson
    rows = []
    for p in sorted(os.listdir(os.path.join(src, "receipts"))):
        with open(os.path.join(src, "receipts", p), "rb") as fh:
            rows += [orjson.loads(line) for line in fh]
    t0 = time.perf_counter()
    ref = reference_decisions(rows, Registry(models).current())
    ref_s = time.perf_counter() - t0
    from streaming.pipelines.receipts_release import active, decision_facts
    from streaming.store.ops import Store
    store = Store(url)
    try:
        act = {f["receipt_id"]: f for f in active(decision_facts(store))}
    finally:
        store.dispose()
    agrees = len(act) == len(ref) and all(
        (act[r]["feature_count_7m"], act[r]["feature_amount_7m"], act[r]["score"])
        == (v["feature_count_7m"], v["feature_amount_7m"], v["score"]) for r, v in ref.items())
    wall = child["wall_s"]
    return {"pipeline": "receipts", "receipts": n, "backlog_at_reconnect": n,
            "surge": surge,
            "backlog_recovery_wall_s": round(wall, 3),
            "backlog_recovery_worker_clock_s": round(child["worker_clock_span_s"], 3),
            "max_event_time_lag_s": child["max_event_time_lag_s"],
            "receipts_per_s": round(n / wall), "decisions": child["facts"],
            "peak_rss_mb": round(child["peak_rss_mb"], 1),
            "tracemalloc_peak_mb": (round(child["tracemalloc_peak_mb"], 1)
                                    if child["tracemalloc_peak_mb"] is not None else None),
            "state_peak_receipts": child["state_peak_records"],
            "reference_s": round(ref_s, 3), "ratio_run_to_reference": round(wall / ref_s, 2),
            "agrees_with_reference": agrees}


if __name__ == "__main__":
    src_, url_, models_, mode = sys.argv[1:5]
    print(json.dumps(_child(src_, url_, models_, mode == "trace")))
