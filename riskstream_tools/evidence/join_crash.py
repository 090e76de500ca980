"""Crash and replay for the join's evidence packet: an uninterrupted run, then the same run
killed right after the sink committed a batch with a match but before the next checkpoint, then
a rerun that restores and replays. The packet lists the pair IDs on each side of the crash and
checks the sink at the end."""

from __future__ import annotations

import re
from collections import Counter

from sqlalchemy import select

from streaming.host.crash import CRASH_EXIT_CODE
from streaming.store import schema as S
from streaming.store.ops import Store, loads

from .join_runs import (EvidenceSettings, checkpoint_batches, cli_run_args, fresh_store_url,
                        run_cli, run_worker)
from .join_sections import PIPELINE, current_view, fact_set, live_rows_per_logical_pair


def pick_crash_batch(baseline: Store, settings: EvidenceSettings) -> tuple[int, int]:
    """The first batch that publishes a pair and is not itself followed by a checkpoint, with
    a checkpoint before it: the crash then leaves a match in the sink that the checkpoint does
    not know. Returns (batch, checkpoint batch the restore starts from)."""
    journal = baseline.journal_after(PIPELINE, 0)
    ckpts = checkpoint_batches(journal, settings.checkpoint_every)
    with_pairs = sorted({f["batch_seq"] for f in baseline.facts(PIPELINE, "pair")
                         if f["status"] == "current" and f["batch_seq"] is not None})
    for seq in with_pairs:
        before = [c for c in ckpts if c < seq]
        if seq not in ckpts and before:
            return seq, before[-1]
    raise RuntimeError("no batch publishes a pair between two checkpoints: lower "
                       "--checkpoint-every or --batch-size")


def _pair_facts(store: Store) -> list[dict]:
    out = []
    for f in store.facts(PIPELINE, "pair"):
        p = loads(f["payload"])
        out.append({"batch_seq": f["batch_seq"], "action": "publish" if f["status"] == "current"
                    else "retire", "pair_id": p["pair_id"], "payment_id": p["payment_id"],
                    "signal_id": p["signal_id"], "fact_key": f["fact_key"],
                    "payload_hash": f["payload_hash"]})
    return out


def _last_run_result(store: Store) -> dict:
    r = S.runs.c
    rows = store.rows(select(S.runs).where(r.pipeline == PIPELINE).order_by(r.id.desc()).limit(1))
    return loads(rows[0]["result"]) if rows and rows[0]["result"] else {}


def crash_replay(source: str, store_dir: str, settings: EvidenceSettings) -> dict:
    base = Store(fresh_store_url(store_dir, "uninterrupted"))
    crash = None
    try:
        run_worker(source, base, settings)
        k, ckpt = pick_crash_batch(base, settings)
        point = f"{settings.crash_point}:{k}"
        url = fresh_store_url(store_dir, "crash")
        args = cli_run_args(source, url, settings)
        crashed = run_cli(args + ["--crash-at", point], settings.subprocess_timeout_s)
        crash = Store(url)
        before_facts = fact_set(crash)
        before_pairs = _pair_facts(crash)
        ck = crash.latest_checkpoint(PIPELINE)
        restore_seq = ck["journal_seq"] if ck else 0
        crash.dispose()
        rerun = run_cli(args, settings.subprocess_timeout_s)
        crash = Store(url)
        after_facts = fact_set(crash)
        after_pairs = _pair_facts(crash)
        run = _last_run_result(crash)
        replayed = re.search(r"\((\d+) replayed from the journal", rerun.stdout)
        in_crashed = [p for p in before_pairs if p["batch_seq"] == k and p["action"] == "publish"]
        view_rows = crash.current(PIPELINE, "pair")
        rows_per_logical = Counter(r["logical_key"] for r in view_rows)
        view = {r["logical_key"]: r for r in view_rows}
        live_counts = live_rows_per_logical_pair(crash)
        crashed_batch_rows = []
        for p in in_crashed:
            logical = next(lk for lk in view if lk.startswith(f"{p['payment_id']}|"
                                                               f"{p['signal_id']}|"))
            row = view[logical]
            crashed_batch_rows.append({
                "logical_pair": logical, "pair_id": p["pair_id"],
                "current_rows": rows_per_logical[logical],
                "live_publish_facts": live_counts.get(logical, 0), "status": row["status"],
                "current_fact_key": row["fact_key"], "written_in_batch": row["batch_seq"]})
        current_logical = [lk for lk, r in view.items() if r["status"] == "current"]
        one_per_pair = all(live_counts.get(lk, 0) == 1 for lk in current_logical) and all(
            live_counts.get(lk, 0) == 0 for lk, r in view.items() if r["status"] == "retired")
        same_facts = after_facts == fact_set(base)
        same_view = current_view(crash) == current_view(base)
        exceptions = crash.sink_exception_rows(PIPELINE)
        kept = before_facts <= after_facts
        return {
            "crash_at": point, "batch_size": settings.batch_size,
            "checkpoint_every": settings.checkpoint_every,
            "crash_exit_code": crashed.returncode, "crash_message": crashed.stderr.strip()[-200:],
            "checkpoint_before_crash_journal_seq": restore_seq,
            "expected_restore_batch": ckpt,
            "pairs_written_before_crash": [p for p in before_pairs if p["action"] == "publish"],
            "pairs_in_crashed_batch": in_crashed,
            "uncheckpointed_batches": list(range(restore_seq + 1, k + 1)),
            "rerun_exit_code": rerun.returncode,
            "rerun_restored_from_checkpoint": run.get("restored_from"),
            "rerun_replayed_batches": int(replayed.group(1)) if replayed else None,
            "rerun_facts_written": run.get("facts_written"),
            "rerun_facts_noop": run.get("facts_noop"),
            "rerun_facts_rejected": run.get("facts_rejected"),
            "pairs_after_rerun": [p for p in after_pairs if p["action"] == "publish"],
            "crashed_batch_current_rows": crashed_batch_rows,
            "current_pairs": len(current_logical),
            "one_current_row_per_logical_pair": one_per_pair,
            "facts_before_crash_kept_unchanged": kept,
            "fact_set_equals_uninterrupted": same_facts,
            "current_view_equals_uninterrupted": same_view,
            "facts": {"before_crash": len(before_facts), "after_rerun": len(after_facts),
                      "uninterrupted": len(fact_set(base))},
            "sink_exceptions": len(exceptions),
            "holds": crashed.returncode == CRASH_EXIT_CODE and rerun.returncode == 0
            and restore_seq == ckpt and bool(in_crashed) and one_per_pair and kept
            and same_facts and same_view and not exceptions
            and all(r["current_rows"] == 1 and r["live_publish_facts"] ==
                    (1 if r["status"] == "current" else 0) for r in crashed_batch_rows),
        }
    finally:
        base.dispose()
        if crash is not None:
            crash.dispose()
