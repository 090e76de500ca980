"""The release gate's three outcomes, conflicting content at the sink, and the explicit
re-pin, all on real sink contents (SQLite and PostgreSQL)."""

from __future__ import annotations

import pytest

from riskstream_tools.incidents.receipts import incident_packet
from riskstream_tools.workloads.receipts_seed import generate
from streaming.models.registry import Model, Registry
from streaming.operators.receipts import decision_fact
from streaming.pipelines.receipts_release import release_gate
from streaming.repairs.receipts import run_receipt_reconciliation, run_receipt_repin
from streaming.store.ops import BatchWrite
from streaming.timeutil import parse_utc_us

from .receiptsutil import (active_by_receipt, all_facts, rcpt, read_log, riskstream, run_scorer,
                           stricter_artifact, with_store, write_log)


@pytest.fixture(scope="module")
def seed(tmp_path_factory):
    out = tmp_path_factory.mktemp("receipts_gate_seed")
    manifest = generate(7, str(out))
    return str(out), manifest


def _rewrite(url, fact):
    """Commit one fact through the sink, as any writer would."""
    return with_store(url, lambda s: s.commit_batch(BatchWrite("receipts", 0, facts=[fact])))


def _decision_as(payload: dict, model: Model, rev: int, pred: int | None, status="live"):
    return decision_fact(
        receipt_id=payload["receipt_id"], merchant_id=payload["merchant_id"],
        store_id=payload["store_id"], occurred_us=parse_utc_us(payload["occurred_at"]),
        amount_cents=payload["amount_cents"], scoring_revision=rev, scorer=model.scorer,
        count=payload["feature_count_7m"], amount_7m=payload["feature_amount_7m"],
        watermark_us=parse_utc_us(payload["occurred_at"]), status=status, origin="live",
        reason="second_writer", predecessor_revision=pred)


def test_gate_outcomes_and_conflicting_content(seed, store_url, tmp_path):
    src, manifest = seed
    models = tmp_path / "models"
    # 1. Drained but not finalized: the newest receipts are not scored yet, and the
    #    reconciliation records are not repaired: missing output.
    res = run_scorer(src, store_url, models)
    gate = with_store(store_url, release_gate)
    assert gate["result"] == "hold:missing-or-extra-output"
    assert gate["missing_live"] and gate["extra_live"] == []
    wm = res.metrics["input_wm"]["receipts"]
    occurred = {r["receipt_id"]: parse_utc_us(r["occurred_at"]) for r in read_log(src)}
    assert set(gate["missing_live"]) == {rid for rid, t in occurred.items() if t > wm}
    assert set(gate["missing_repaired"]) == {r["event_id"] for r in with_store(
        store_url, lambda s: s.queue("receipts"))}
    # 2. Finalized and reconciled: accept.
    run_scorer(src, store_url, models, end_of_stream=True)
    with_store(store_url, lambda s: run_receipt_reconciliation(s))
    gate = with_store(store_url, release_gate)
    assert gate["result"] == "accept:reconciled", gate
    # 3. Conflicting content for an existing key is rejected and listed; the view keeps the
    #    original decision.
    active = active_by_receipt(store_url)
    victim = sorted(active)[0]
    original = active[victim]
    other = Registry(str(models)).load(Registry(str(models)).register(stricter_artifact()))
    clash = _decision_as(original, other, original["scoring_revision"],
                         original["scoring_revision"] - 1 or None)
    assert clash.fact_key == original["fact_key"]
    res = _rewrite(store_url, clash)
    assert (res.written, res.rejected, res.rejected_keys) == (0, 1, [original["fact_key"]])
    assert active_by_receipt(store_url)[victim]["model_revision"] == original["model_revision"]
    packet = with_store(store_url, incident_packet)
    assert [e["fact_key"] for e in packet["exceptions"]["sink"]] == [original["fact_key"]]
    # The open exception holds the gate until a recorded decision resolves it.
    gate = with_store(store_url, release_gate)
    assert gate["result"] == "hold:open-exceptions", gate
    [blocker] = gate["blockers"]
    assert blocker["kind"] == "sink_exception" and blocker["status"] == "open"
    assert original["fact_key"] in blocker["detail"]
    riskstream("exceptions", "resolve", "--store", store_url, "--id", blocker["id"],
               "--decision", "keep-existing", "--by", "release-reviewer",
               "--reason", "a second writer; the committed decision stands")
    assert with_store(store_url, release_gate)["result"] == "accept:reconciled"
    # 4. A second chain for a receipt (a new key with no predecessor link): duplicate output.
    rogue = _decision_as(original, other, original["scoring_revision"] + 1, None)
    assert _rewrite(store_url, rogue).written == 1
    gate = with_store(store_url, release_gate)
    assert gate["result"] == "hold:duplicate-output" and gate["duplicate_outputs"] == [victim]
    cli = riskstream("receipts", "release", "--store", store_url, check=False)
    assert cli.returncode == 1 and cli.stdout.splitlines()[0] == "hold:duplicate-output"


def test_explicit_repin_is_a_correction_the_live_scorer_then_follows(store_url, tmp_path):
    models = str(tmp_path / "models")
    src = write_log(tmp_path / "log", {0: [rcpt("a", "m1", 1, cents=40_000),
                                          rcpt("b", "m1", 3, cents=35_000),
                                          rcpt("c", "m1", 5, cents=30_000),
                                          rcpt("z", "m1", 9, cents=100)]})
    run_scorer(src, store_url, models)  # wm = 9 - 2 = 7: a, b, c scored; z pending
    reg = Registry(models)
    first = reg.current_revision()
    stricter = reg.register(stricter_artifact())
    out = with_store(store_url, lambda s: run_receipt_repin(s, stricter, models))
    assert sorted(out["rescored"]) == ["a|2", "b|2", "c|2"]
    facts = {f["fact_key"]: f for f in all_facts(store_url)}
    assert facts["c|2"]["predecessor_key"] == "c|1" and facts["c|2"]["status"] == "repinned"
    assert facts["c|2"]["model_revision"] == stricter and facts["c|1"]["model_revision"] == first
    assert facts["c|2"]["feature_amount_7m"] == facts["c|1"]["feature_amount_7m"] == 75_000
    # The log grows: a late receipt within tolerance and more traffic. The restored scorer
    # scores with the re-pinned model and continues the chains it did not write itself.
    write_log(tmp_path / "log", {0: [rcpt("a", "m1", 1, cents=40_000),
                                     rcpt("b", "m1", 3, cents=35_000),
                                     rcpt("c", "m1", 5, cents=30_000),
                                     rcpt("z", "m1", 9, cents=100),
                                     rcpt("late", "m1", 4, upload=9.5, cents=20_000),
                                     rcpt("y", "m1", 12, upload=12.2, cents=100)]})
    run_scorer(src, store_url, models, end_of_stream=True)
    facts = {f["fact_key"]: f for f in all_facts(store_url)}
    assert facts["c|3"]["predecessor_key"] == "c|2"
    assert facts["c|3"]["feature_amount_7m"] == 95_000
    assert {facts[k]["model_revision"] for k in ("z|1", "late|1", "y|1", "c|3")} == {stricter}
    assert "a|3" not in facts  # the late receipt at 4 is after a (1)
    assert with_store(store_url, release_gate)["result"] == "accept:reconciled"
    pins = with_store(store_url, incident_packet)["model"]["pins"]
    assert [(p["model_revision"], p["reason"]) for p in pins] == \
        [(first, "initial_pin"), (stricter, "explicit_repin")]
