"""The ledger's checkpoint/restore transcript and sink-idempotency proof.

An uninterrupted run and a crashed one of the same log with the same batch and checkpoint
settings, each on a fresh SQLite store, through the real command line (`riskstream ledger run`):
the crash lands after the sink write of a batch that wrote facts and that no checkpoint covers
(`--crash-at after-sink-write:K`); the rerun restores the checkpoint before it, replays the
journal and writes that batch's facts again, which the sink answers as no-ops. The transcript is
the commands and what they printed; the proof is `no-op N, rejected 0` with N the facts of the
crashed batch, no sink exception, and a fact set equal to the uninterrupted run's."""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from typing import Any

from streaming.host.crash import CRASH_EXIT_CODE
from streaming.store.ops import Store, loads

from .join_runs import checkpoint_batches, fresh_store_url

PIPELINE = "ledger"
BATCH_SIZE = 50
CHECKPOINT_EVERY = 100
TIMEOUT_S = 300


def _args(src: str, url: str) -> list[str]:
    return ["riskstream", "ledger", "run", "--source", src, "--store", url, "--batch-size",
            str(BATCH_SIZE), "--checkpoint-every", str(CHECKPOINT_EVERY), "--end-of-stream",
            "--quiet"]


def _run(args: list[str]) -> dict:
    proc = subprocess.run([sys.executable, "-m", "streaming.cli.main", *args[1:]],
                          capture_output=True, text=True, timeout=TIMEOUT_S)
    return {"command": " ".join(args), "exit_code": proc.returncode,
            "stdout": proc.stdout.rstrip("\n").splitlines(),
            "stderr": proc.stderr.rstrip("\n").splitlines()[-5:]}


def _facts(store: Store) -> set[tuple[str, str]]:
    return {(f["fact_key"], f["payload_hash"]) for f in store.facts(PIPELINE)}


def _checkpoints(store: Store) -> list[dict]:
    return [{"id": c["id"], "journal_seq": c["journal_seq"],
             "positions": loads(c["meta"]).get("positions")} for c in store.checkpoints(PIPELINE)]


def pick_crash_batch(base: Store) -> tuple[int, int, int]:
    """(K, checkpointed batch before it, facts K wrote): the first batch that wrote facts, has a
    checkpoint before it and none right after it."""
    per_batch = Counter(f["batch_seq"] for f in base.facts(PIPELINE) if f["batch_seq"])
    ckpt_after = set(checkpoint_batches(base.journal_after(PIPELINE, 0), CHECKPOINT_EVERY))
    for k in sorted(per_batch):
        earlier = [c for c in ckpt_after if c < k]
        if earlier and k not in ckpt_after:
            return k, max(earlier), per_batch[k]
    raise RuntimeError("no batch with facts lies between two checkpoints; use a longer log")


def _number(pattern: str, lines: list[str]) -> int | None:
    m = re.search(pattern, " ".join(lines))
    return int(m.group(1)) if m else None


def crash_section(src: str, store_dir: str) -> dict:
    base_url = fresh_store_url(store_dir, "uninterrupted")
    crash_url = fresh_store_url(store_dir, "crash")
    uninterrupted = _run(_args(src, base_url))
    base = Store(base_url)
    try:
        k, ckpt, k_facts = pick_crash_batch(base)
        base_facts = _facts(base)
    finally:
        base.dispose()
    crashed = _run(_args(src, crash_url) + ["--crash-at", f"after-sink-write:{k}"])
    store = Store(crash_url)
    try:
        before: dict[str, Any] = {"checkpoints": _checkpoints(store), "journal_seq":
                  store.last_journal_seq(PIPELINE), "facts": len(_facts(store))}
    finally:
        store.dispose()
    rerun = _run(_args(src, crash_url))
    store = Store(crash_url)
    try:
        after_facts = _facts(store)
        exceptions = store.sink_exception_rows(PIPELINE)
        after = {"checkpoints": _checkpoints(store), "journal_seq":
                 store.last_journal_seq(PIPELINE), "facts": len(after_facts)}
    finally:
        store.dispose()
    noop = _number(r"no-op (\d+)", rerun["stdout"])
    rejected = _number(r"rejected (\d+)", rerun["stdout"])
    replayed = _number(r"\((\d+) replayed from the journal", rerun["stdout"])
    restored_from = before["checkpoints"][-1] if before["checkpoints"] else None
    return {
        "crash_at": f"after-sink-write:{k}", "batch_size": BATCH_SIZE,
        "checkpoint_every": CHECKPOINT_EVERY, "checkpointed_batch": ckpt,
        "crashed_batch_facts": k_facts,
        "transcript": [uninterrupted, crashed, rerun],
        "before_rerun": before, "after_rerun": after,
        "restored_from_checkpoint": restored_from,
        "rerun_replayed_batches": replayed, "rerun_noop": noop, "rerun_rejected": rejected,
        "sink_exceptions": len(exceptions),
        "fact_set_equals_uninterrupted": after_facts == base_facts,
        "facts": {"uninterrupted": len(base_facts), "after_rerun": len(after_facts)},
        "holds": (uninterrupted["exit_code"] == 0 and crashed["exit_code"] == CRASH_EXIT_CODE
                  and rerun["exit_code"] == 0 and restored_from is not None
                  and restored_from["journal_seq"] == ckpt and replayed == k - ckpt
                  and noop is not None and noop >= k_facts > 0 and rejected == 0
                  and not exceptions and after_facts == base_facts),
    }
