"""`riskstream receipts reference-check`: the live decisions against the occurrence-order
reference, from the store alone, and its result in the incident packet (SQLite, PostgreSQL)."""

from __future__ import annotations

import orjson
import pytest

from riskstream_tools.incidents.receipts import incident_packet
from streaming.repairs.receipts import run_receipt_reconciliation
from streaming.store.ops import Store
from riskstream_tools.workloads.receipts_seed import generate

from .receiptsutil import riskstream, run_scorer, with_store


@pytest.fixture(scope="module")
def seed(tmp_path_factory):
    out = tmp_path_factory.mktemp("receipts_refcheck_seed")
    manifest = generate(7, str(out))
    return str(out), manifest


def test_reference_check_before_and_after_reconciliation(seed, store_url, tmp_path):
    src, manifest = seed
    run_scorer(src, store_url, tmp_path / "models", end_of_stream=True)
    queued = {r["event_id"] for r in with_store(store_url, lambda s: s.queue("receipts"))}
    assert queued
    before = riskstream("receipts", "reference-check", "--store", store_url, "--json",
                        check=False)
    assert before.returncode == 1
    c = orjson.loads(before.stdout)
    assert c["result"] == "differs" and c["receipts"] == 470
    assert set(c["missing"]) == queued and c["extra"] == []
    # Receipts whose window held a reconciliation record differ until it is repaired.
    assert c["differ"] and all(set(d["fields"]) <= {"feature_count_7m", "feature_amount_7m",
                                                    "score", "decision"} for d in c["differ"])
    assert c["equal"] == 470 - len(queued) - len(c["differ"])
    with_store(store_url, lambda s: run_receipt_reconciliation(s))
    after = riskstream("receipts", "reference-check", "--store", store_url)
    assert after.stdout.splitlines()[0].startswith(
        "reference check: match (470 of 470 receipts equal the occurrence-order reference")
    packet = with_store(store_url, incident_packet)
    assert packet["reference_check"]["result"] == "match"
    assert packet["reference_check"]["equal"] == 470
    text = riskstream("receipts", "incident", "--store", store_url).stdout
    assert "reference check: match (470 of 470" in text


def test_reference_check_with_nothing_to_compare_fails(store_url):
    Store(store_url).dispose()
    out = riskstream("receipts", "reference-check", "--store", store_url, check=False)
    assert out.returncode == 1
    assert out.stdout.startswith("reference check: nothing-to-compare")
