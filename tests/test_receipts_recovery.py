"""Crash, restore and replay with the CLI in a subprocess (a crash is os._exit): the rerun
leaves exactly the facts of an uninterrupted run, with the pinned model even when the
registry's pointer moved during the downtime."""

from __future__ import annotations

import pytest

from riskstream_tools.workloads.receipts_seed import generate
from streaming.models.registry import Registry

from .receiptsutil import (active_by_receipt, all_facts, fact_set, riskstream, run_scorer,
                           stricter_artifact, with_store)

ARGS = ["--batch-size", "40", "--end-of-stream", "--quiet"]


@pytest.fixture(scope="module")
def seed(tmp_path_factory):
    out = tmp_path_factory.mktemp("receipts_crash_seed")
    generate(7, str(out))
    return str(out)


@pytest.fixture(scope="module")
def baseline(seed, tmp_path_factory):
    d = tmp_path_factory.mktemp("receipts_base")
    url = f"sqlite:///{d}/ops.sqlite"
    run_scorer(seed, url, d / "models", end_of_stream=True, batch_size=40, checkpoint_every=120)
    return url


def _crash_promote_rerun(seed, store_url, model_dir, point, k, every):
    crashed = riskstream("receipts", "run", "--source", seed, "--store", store_url,
                         "--model-dir", model_dir, "--checkpoint-every", str(every), *ARGS,
                         "--crash-at", f"{point}:{k}", check=False)
    assert crashed.returncode == 137, crashed.stderr
    assert f"crash injected at {point}:{k}" in crashed.stderr
    reg = Registry(model_dir)
    pinned = reg.current_revision()
    newer = reg.register(stricter_artifact())
    reg.promote(newer)  # during the downtime
    rerun = riskstream("receipts", "run", "--source", seed, "--store", store_url,
                       "--model-dir", model_dir, "--checkpoint-every", str(every), *ARGS)
    return pinned, newer, rerun.stdout


def test_crash_before_ack_with_pointer_moved_replays_with_pinned_model(
        seed, baseline, store_url, tmp_path):
    model_dir = str(tmp_path / "models")
    # Batch 4 is committed to the sink, not covered by the checkpoint of batch 3, and its
    # acknowledgement never returns.
    pinned, newer, out = _crash_promote_rerun(seed, store_url, model_dir, "before-ack", 4, 120)
    # Expected event-and-revision keys (and content) equal an uninterrupted run's.
    assert fact_set(store_url) == fact_set(baseline)
    facts = all_facts(store_url)
    assert {f["model_revision"] for f in facts} == {pinned} != {newer}
    keys = [f["fact_key"] for f in facts]
    assert len(keys) == len(set(keys))
    assert len(active_by_receipt(store_url)) == len({f["receipt_id"] for f in facts})
    # The replayed batch reached the sink twice: visible as no-op rewrites, not as rows.
    assert "rejected 0" in out and "no-op 0" not in out
    from riskstream_tools.incidents.receipts import incident_packet
    packet = with_store(store_url, incident_packet)
    runs = packet["recovery"]
    assert [r["finished"] for r in runs] == [False, True]
    assert runs[1]["redelivered_outputs_noop"] > 0
    assert runs[1]["restored_from_checkpoint"] is not None
    assert packet["model"]["pinned_revision"] == pinned
    assert [p["model_revision"] for p in packet["model"]["pins"]] == [pinned]


@pytest.mark.parametrize("point,k,every", [("after-candidate", 4, 120),
                                           ("after-sink-write", 5, 120),
                                           ("during-checkpoint", 2, 120),
                                           # before any checkpoint: the pin comes from the store
                                           ("before-ack", 2, 100_000)])
def test_other_crash_points_equal_uninterrupted(point, k, every, seed, baseline, sqlite_url,
                                                tmp_path):
    model_dir = str(tmp_path / "models")
    pinned, _, _ = _crash_promote_rerun(seed, sqlite_url, model_dir, point, k, every)
    assert fact_set(sqlite_url) == fact_set(baseline)
    assert {f["model_revision"] for f in all_facts(sqlite_url)} == {pinned}
    assert with_store(sqlite_url, lambda s: s.sink_exception_rows("receipts")) == []


def test_reconcile_refuses_until_the_crashed_run_is_restored(seed, sqlite_url, tmp_path):
    model_dir = str(tmp_path / "models")
    crashed = riskstream("receipts", "run", "--source", seed, "--store", sqlite_url,
                         "--model-dir", model_dir, "--checkpoint-every", "120", *ARGS,
                         "--crash-at", "after-sink-write:5", check=False)
    assert crashed.returncode == 137
    before = fact_set(sqlite_url)
    refused = riskstream("receipts", "reconcile", "--store", sqlite_url, "--model-dir",
                         model_dir, check=False)
    assert refused.returncode == 6 and "restore and replay first" in refused.stderr
    assert fact_set(sqlite_url) == before
