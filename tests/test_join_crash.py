"""Crash and replay at each crash point: the process dies at once (exit 137); a rerun restores
the latest checkpoint, follows the journal and leaves exactly the facts and current view of an
uninterrupted run."""

from __future__ import annotations

import pytest

from streaming.store.ops import Store

from .joinutil import pairs
from .receiptsutil import riskstream

ARGS = ["--checkpoint-every", "120", "--batch-size", "40", "--end-of-stream", "--quiet"]


def fact_set(url):
    store = Store(url)
    try:
        return {(f["fact_key"], f["payload_hash"]) for f in store.facts("join")}
    finally:
        store.dispose()


def current_view(url):
    store = Store(url)
    try:
        return {(r["kind"], r["logical_key"]): (r["fact_key"], r["status"])
                for kind in ("pair", "outcome") for r in store.current("join", kind)}
    finally:
        store.dispose()


@pytest.fixture(scope="module")
def baseline(seed_dir, tmp_path_factory):
    src, _ = seed_dir
    url = f"sqlite:///{tmp_path_factory.mktemp('base')}/ops.sqlite"
    riskstream("join", "run", "--source", src, "--store", url, *ARGS)
    return url


@pytest.mark.parametrize("point,k", [("after-candidate", 3), ("after-sink-write", 4),
                                     ("before-ack", 3), ("during-checkpoint", 2)])
def test_crash_then_rerun_equals_uninterrupted(point, k, seed_dir, store_url, baseline):
    src, manifest = seed_dir
    crashed = riskstream("join", "run", "--source", src, "--store", store_url, *ARGS,
                         "--crash-at", f"{point}:{k}", check=False)
    assert crashed.returncode == 137, crashed.stderr
    assert f"crash injected at {point}:{k}" in crashed.stderr
    before = fact_set(store_url)
    before_pair_ids = {r["pair_id"] for r in pairs(store_url, include_retired=True)}
    resumed = riskstream("join", "run", "--source", src, "--store", store_url, *ARGS)
    assert "restored from checkpoint" in resumed.stdout or point == "after-candidate" and k <= 3
    # Same facts, same current view, one current row per logical pair.
    after = fact_set(store_url)
    assert after == fact_set(baseline)
    assert before <= after  # everything written before the crash is unchanged (same hash)
    assert current_view(store_url) == current_view(baseline)
    cur = pairs(store_url)
    logical = [(r["payment_id"], r["signal_id"], r["rule_version"]) for r in cur]
    assert len(logical) == len(set(logical))
    assert before_pair_ids <= {r["pair_id"] for r in pairs(store_url, include_retired=True)}
    store = Store(store_url)
    assert store.sink_exception_rows("join") == []
    assert all(r["closes"] for r in store.accounting("join"))
    store.dispose()


def test_crash_after_sink_write_replays_committed_batch_as_noops(seed_dir, sqlite_url):
    """The seed's case: the sink has a match, the checkpoint does not know it yet."""
    src, _ = seed_dir
    crashed = riskstream("join", "run", "--source", src, "--store", sqlite_url, *ARGS,
                         "--crash-at", "after-sink-write:5", check=False)
    assert crashed.returncode == 137
    store = Store(sqlite_url)
    ck = store.latest_checkpoint("join")
    committed = store.last_journal_seq("join")
    store.dispose()
    assert committed == 5 and ck["journal_seq"] == 3  # batches 4-5 are past the checkpoint
    resumed = riskstream("join", "run", "--source", src, "--store", sqlite_url, *ARGS)
    assert "2 replayed from the journal" in resumed.stdout
    assert "rejected 0" in resumed.stdout
