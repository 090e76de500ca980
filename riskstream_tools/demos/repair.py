"""Demo: the join's old correction repaired through the replay queue. The seed runs live, the
correction the live path cannot apply is queued, the same Dagster job the sensor launches
rebuilds, validates and publishes its interval in-process, and the published view, the diff
and the generation history are printed."""

from __future__ import annotations

import os
import time


def run_demo(workdir: str, store_url: str) -> list[str]:
    from streaming.host.loop import Worker
    from streaming.host.settings import RunSettings
    from streaming.join_published import GENERATION_COLUMNS, generation_rows, published_pairs
    from streaming.join_rebuild import entry_sets
    from streaming.pipelines.join import SPEC
    from streaming.store.ops import Store

    from ..workloads.join_seed import generate

    src = os.path.join(workdir, "join_seed")
    manifest = generate(7, src, 470)
    old = manifest["cases"]["old_correction"]
    store = Store(store_url)
    lines = ["repair: the join seed's old correction through the replay queue"]
    try:
        res = Worker(SPEC, RunSettings(source=src, store_url=store_url, end_of_stream=True),
                     store=store).run()
        lines.append(f"live join: {res.records} records, {res.facts_written} facts")
        for s in entry_sets(store):
            lines.append(f"pending entry set {s.run_key}: {', '.join(s.event_ids)}")
        before = {(r["payment_id"], r["signal_id"]): r for r in published_pairs(store)
                  if r["payment_id"] == old["payment_id"]}
        from orchestration.repair import run_pending  # Dagster loads only here
        t0 = time.perf_counter()
        outcomes = run_pending(store_url, os.path.join(workdir, "warehouse.duckdb"),
                               log_level="WARNING")
        elapsed = time.perf_counter() - t0
        for o in outcomes:
            lines.append(f"repair run {o.run_key}: {'success' if o.success else 'FAILED'} "
                         f"in {elapsed:.1f}s end to end (Dagster + dbt + publication)")
        after = {(r["payment_id"], r["signal_id"]): r for r in published_pairs(store)
                 if r["payment_id"] == old["payment_id"]}
        lines.append(f"published diff for {old['payment_id']} (revision 1 at "
                     f"{old['old_event_time']} -> revision 2 at {old['new_event_time']}):")
        for k in sorted(set(after) - set(before)):
            lines.append(f"  + {k[0]} x {k[1]} ({after[k]['signal_time']})")
        for k in sorted(set(before) - set(after)):
            lines.append(f"  - {k[0]} x {k[1]} ({before[k]['signal_time']})")
        revised = sorted(k for k in set(before) & set(after)
                         if before[k]["pair_id"] != after[k]["pair_id"])
        lines.append(f"  ~ {len(revised)} pairs kept with the new payment revision")
        lines.append(",".join(GENERATION_COLUMNS))
        for g in generation_rows(store):
            lines.append(",".join("" if g.get(c) is None else str(g.get(c))
                                  for c in GENERATION_COLUMNS))
    finally:
        store.dispose()
    return lines

