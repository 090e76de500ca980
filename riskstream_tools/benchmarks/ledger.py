"""Benchmark: `ledger run` over N generated payments against the ledger_snapshot reference,
timed in the same run."""

from __future__ import annotations

import os
import time


def run_bench(workdir: str, n: int) -> dict:
    from streaming.cli.ledger import window_rows
    from streaming.host.loop import Worker
    from streaming.host.settings import RunSettings
    from streaming.pipelines.ledger import make_spec, run_extra
    from streaming.repairs.ledger import DEV_KEY, RepairKey
    from streaming.store.ops import Store
    from streaming.timeutil import parse_utc_us

    from ..references.ledger import reference_totals
    from ..workloads.ledger_seed import generate

    src = os.path.join(workdir, f"ledger_bench_{n}")
    generate(1, src, payments=n, scenario=False, accounts=200)
    url = f"sqlite:///{os.path.join(workdir, f'ledger_bench_{n}.sqlite')}"
    for suffix in ("", "-wal", "-shm"):
        path = url.split("///", 1)[1] + suffix
        if os.path.exists(path):
            os.remove(path)
    key = RepairKey(DEV_KEY, "dev")
    store = Store(url)
    try:
        t0 = time.perf_counter()
        res = Worker(make_spec(key), RunSettings(source=src, store_url=url, end_of_stream=True,
                                                 checkpoint_every=10_000, batch_size=2_000,
                                                 extra=run_extra(key)), store=store).run()
        run_s = time.perf_counter() - t0
        t1 = time.perf_counter()
        ref = reference_totals(src)
        ref_s = time.perf_counter() - t1
        current = {(r["account_id"], parse_utc_us(r["event_hour"].replace("Z", ":00Z"))):
                   r["total_cents"] for r in window_rows(store, include_all=False)}
    finally:
        store.dispose()
    return {"pipeline": "ledger", "payments": n, "records": res.records,
            "run_s": round(run_s, 3), "payments_per_s": round(n / run_s),
            "reference_s": round(ref_s, 3), "reference_payments_per_s": round(n / ref_s),
            "ratio_run_to_reference": round(run_s / ref_s, 2), "facts": res.facts_written,
            "checkpoints": res.checkpoints, "agrees_with_reference": current == ref}
