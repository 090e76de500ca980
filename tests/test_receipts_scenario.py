"""The seed scenario end to end on the real store (SQLite and PostgreSQL): live decisions
against the occurrence-order reference per receipt, duplicates, the allowed delay,
reconciliation and the release gate."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from riskstream_tools.references.receipts import reference_decisions, reference_features
from riskstream_tools.workloads.receipts_seed import DELAYED_SHARD, generate, store_shard
from streaming.models.registry import Registry
from streaming.repairs.receipts import run_receipt_reconciliation
from streaming.store import schema as S
from streaming.store.ops import Store, loads
from streaming.timeutil import US_PER_MIN, parse_utc_us

from .receiptsutil import active_by_receipt, all_facts, read_log, run_scorer, with_store

COMPARED = ("feature_count_7m", "feature_amount_7m", "score", "decision", "model_revision")


@pytest.fixture(scope="module")
def seed(tmp_path_factory):
    out = tmp_path_factory.mktemp("receipts_seed")
    manifest = generate(7, str(out))
    return str(out), manifest


def _queue_ids(url, status=None):
    return with_store(url, lambda s: [r["event_id"] for r in s.queue("receipts", status)])


def _assert_parity(active, reference, ids):
    for rid in ids:
        got = {k: active[rid][k] for k in COMPARED}
        assert got == reference[rid], rid


def test_seed_live_then_reconciled_matches_reference_per_receipt(seed, store_url, tmp_path):
    src, manifest = seed
    res = run_scorer(src, store_url, tmp_path / "models", end_of_stream=True,
                     checkpoint_every=200, batch_size=100)
    model = Registry(str(tmp_path / "models")).current()
    log = read_log(src)
    ids = set(manifest["receipt_ids"])
    assert len(ids) == 470 and len(log) == 470 + 47

    # Accounting closes; the 47 replayed uploads are duplicates and nothing else.
    store = Store(store_url)
    acct = store.accounting("receipts")
    assert all(r["closes"] for r in acct) and sum(r["read"] for r in acct) == 517
    assert sum(r["duplicate"] for r in acct) == 47
    a = S.archive.c
    arch = store.rows(select(a.event_id).where(a.pipeline == "receipts",
                                               a.disposition == "duplicate"))
    assert sorted(r["event_id"] for r in arch) == manifest["replayed_ids"]
    store.dispose()

    # Receipts beyond the allowed delay are the offline store's, as reconciliation records.
    queued = _queue_ids(store_url)
    assert queued and set(queued) <= set(manifest["offline_ids"])
    assert len(queued) == len(set(queued)) == res.metrics["state"]["beyond_allowed_delay"]

    facts = all_facts(store_url)
    active = active_by_receipt(store_url)
    # One decision chain per scored receipt: a duplicate upload never emits a second one.
    assert sorted(f["receipt_id"] for f in facts if f["scoring_revision"] == 1) == \
        sorted(ids - set(queued))
    assert set(active) == ids - set(queued)
    for f in facts:
        assert f["state_cutoff"] == f["occurred_at"]
        # Scored once the watermark reached the cutoff ("+inf": at end-of-stream finalization).
        assert f["watermark"] == "+inf" or \
            parse_utc_us(f["watermark"]) >= parse_utc_us(f["state_cutoff"])
        if f["scoring_revision"] > 1:
            assert f["predecessor_key"] == f"{f['receipt_id']}|{f['scoring_revision'] - 1}"

    # Feature parity at each receipt's cutoff: receipts whose window holds no reconciliation
    # record equal the occurrence-order reference exactly.
    reference = reference_decisions(log, model)
    t_of = {r["receipt_id"]: (parse_utc_us(r["occurred_at"]), r["merchant_id"]) for r in log}
    affected = {rid for rid in active for q in queued
                if t_of[q][1] == t_of[rid][1]
                and t_of[rid][0] - 7 * US_PER_MIN <= t_of[q][0] < t_of[rid][0]}
    _assert_parity(active, reference, set(active) - affected)
    assert len(set(active) - affected) > 400

    # Reconcile: the records are scored against reconstructed history, the decisions they
    # changed get new revisions; then every receipt equals the reference.
    with_store(store_url, lambda s: run_receipt_reconciliation(s))
    out = with_store(store_url, lambda s: run_receipt_reconciliation(s))
    assert out["records"] == 0 and out["repaired"] == []  # idempotent
    active = active_by_receipt(store_url)
    assert set(active) == ids
    _assert_parity(active, reference, ids)
    assert {active[q]["origin"] for q in queued} == {"repair"}
    assert set(_queue_ids(store_url, "processed")) == set(queued)
    rescored = [f for f in all_facts(store_url) if f["reason"] == "reconciled_history"]
    assert rescored and all(f["receipt_id"] in affected for f in rescored)
    from streaming.pipelines.receipts_release import release_gate
    gate = with_store(store_url, release_gate)
    assert gate["result"] == "accept:reconciled"
    assert gate["live_outputs"] == 470 - len(queued)
    assert gate["repaired_outputs"] == len(queued)


@pytest.mark.parametrize("delay_min,beyond", [(4.0, False), (20.0, True)])
def test_delayed_partition_within_or_beyond_tolerance(delay_min, beyond, store_url, tmp_path):
    src = str(tmp_path / "log")
    manifest = generate(11, src, partition_delay_min=delay_min, offline=None)
    res = run_scorer(src, store_url, tmp_path / "models", end_of_stream=True,
                     idle_after_us=US_PER_MIN)
    st = res.metrics["state"]
    log = read_log(src)
    reference = reference_decisions(log, Registry(str(tmp_path / "models")).current())
    queued = _queue_ids(store_url)
    shard_of = {r["receipt_id"]: store_shard(r["store_id"]) for r in log}
    assert st["late_within_tolerance"] > 0  # the idle shard resumed below the watermark
    if not beyond:
        # Within tolerance: scored live (with live rescores), no reconciliation record, and
        # every decision equals the reference.
        assert queued == []
        assert st["rescored_live"] > 0
        active = active_by_receipt(store_url)
        assert set(active) == set(manifest["receipt_ids"])
        _assert_parity(active, reference, active)
    else:
        # Beyond: reconciliation records, all from the delayed shard, none scored live.
        assert len(queued) > 20 and {shard_of[q] for q in queued} == {DELAYED_SHARD}
        assert not set(queued) & set(active_by_receipt(store_url))
        detail = with_store(store_url, lambda s: [loads(r["detail"]) for r in s.queue("receipts")])
        assert all(d["below_watermark_us"] > d["tolerance_us"] for d in detail)
        with_store(store_url, lambda s: run_receipt_reconciliation(s))
        active = active_by_receipt(store_url)
        _assert_parity(active, reference, manifest["receipt_ids"])


def test_reference_features_exclude_the_cutoff_instant_and_duplicates():
    rows = [{"receipt_id": "a", "merchant_id": "m", "amount_cents": 5,
             "occurred_at": "2026-10-06T09:00:00Z"},
            {"receipt_id": "a", "merchant_id": "m", "amount_cents": 5,
             "occurred_at": "2026-10-06T09:00:00Z"},
            {"receipt_id": "b", "merchant_id": "m", "amount_cents": 7,
             "occurred_at": "2026-10-06T09:07:00Z"},
            {"receipt_id": "c", "merchant_id": "m", "amount_cents": 9,
             "occurred_at": "2026-10-06T09:07:00Z"},
            {"receipt_id": "d", "merchant_id": "m", "amount_cents": 1,
             "occurred_at": "2026-10-06T09:07:00.000001Z"}]
    assert reference_features(rows) == {"a": (0, 0), "b": (1, 5), "c": (1, 5), "d": (2, 16)}
