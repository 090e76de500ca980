"""Demo: the receipt scorer's seed scenario end to end: a crash before the acknowledgement,
the model pointer moved during the downtime, restore and replay with the pinned model, the
release gate holding until reconciliation, then the incident packet."""

from __future__ import annotations

import os
import subprocess
import sys


def run_demo(workdir: str, store_url: str) -> list[str]:
    from streaming.host.loop import Worker
    from streaming.host.settings import RunSettings
    from streaming.models.registry import INITIAL_ARTIFACT, Registry
    from streaming.pipelines.receipts import SPEC
    from streaming.pipelines.receipts_release import release_gate
    from streaming.repairs.receipts import run_receipt_reconciliation
    from streaming.store.ops import Store

    from ..incidents.receipts import incident_packet
    from ..workloads.receipts_seed import generate

    src = os.path.join(workdir, "receipts_seed")
    models = os.path.join(workdir, "receipt_models")
    m = generate(7, src)
    lines = [f"receipts: {m['receipts']} receipts in {m['lines']} uploads "
             f"({len(m['replayed_ids'])} replayed, shard p{m['delayed_partition']} delayed "
             f"{m['partition_delay_min']:g} min, {m['offline_store']} offline "
             f"{m['offline_period'][0]}..{m['offline_period'][1]})"]
    # A crash must end the process, so the first run is a child process.
    crashed = subprocess.run(
        [sys.executable, "-m", "streaming.cli.main", "receipts", "run", "--source", src,
         "--store", store_url, "--model-dir", models, "--batch-size", "40",
         "--checkpoint-every", "120", "--end-of-stream", "--quiet", "--crash-at",
         "before-ack:4"], capture_output=True, text=True)
    lines.append(f"run 1: exit {crashed.returncode} ({crashed.stderr.strip()})")
    reg = Registry(models)
    pinned = reg.current_revision()
    stricter = dict(INITIAL_ARTIFACT, threshold_policy={"review_at": 0.3, "decline_at": 0.6})
    newer = reg.register(stricter)
    reg.promote(newer)
    lines.append(f"downtime: model pointer moved {pinned} -> {newer}")
    store = Store(store_url)
    try:
        res = Worker(SPEC, RunSettings(source=src, store_url=store_url, batch_size=40,
                                       checkpoint_every=120, end_of_stream=True,
                                       extra={"model_dir": models}), store=store).run()
        st = res.metrics["state"]
        lines.append(f"run 2: restored from checkpoint {res.restored_from}, replayed "
                     f"{res.replayed_batches} batch(es): {res.facts_written} decisions written, "
                     f"{res.facts_noop} redelivered as no-ops, {res.facts_rejected} rejected; "
                     f"scored with {st['model_revision']} (pinned), not {newer}")
        lines.append(f"  duplicates {st['duplicates']}, late within tolerance "
                     f"{st['late_within_tolerance']} (rescored live {st['rescored_live']}), "
                     f"beyond the allowed delay {st['beyond_allowed_delay']}")
        lines.append(f"release before reconciliation: {release_gate(store)['result']}")
        rec = run_receipt_reconciliation(store)
        lines.append(f"reconcile: {len(rec['repaired'])} repaired, {len(rec['rescored'])} "
                     f"rescored with a predecessor link, {rec['unchanged']} unchanged")
        lines.append(f"release after reconciliation: {release_gate(store)['result']}")
        packet = incident_packet(store)
        for d in packet["store_disconnects"]:
            lines.append(f"incident: {d['store_id']} online until {d['last_online_receipt']}, "
                         f"offline by {d['offline_from']}, reconnected {d['reconnected_at']} "
                         f"({d['held_receipts']} held receipts)")
        gaps = packet["output_gaps"]
        lines.append("incident: output gaps " + ", ".join(f"{k} {len(v)}"
                                                          for k, v in gaps.items()))
    finally:
        store.dispose()
    return lines
