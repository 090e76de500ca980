"""The incident packet (JSON and text) and the CLI contract, on the seed scenario."""

from __future__ import annotations

import csv
import io

import orjson

from streaming.timeutil import US_PER_MIN, parse_utc_us

from .receiptsutil import riskstream


def test_cli_end_to_end_and_incident_packet(tmp_path, sqlite_url):
    src, models = str(tmp_path / "log"), str(tmp_path / "models")
    out = riskstream("receipts", "generate", "--seed", "7", "--out", src).stdout
    assert "wrote 470 receipts in 517 lines (47 replayed uploads" in out
    manifest = orjson.loads(open(f"{src}/scenario.json", "rb").read())
    riskstream("receipts", "run", "--source", src, "--store", sqlite_url, "--model-dir", models,
               "--end-of-stream", "--quiet")
    hold = riskstream("receipts", "release", "--store", sqlite_url, check=False)
    assert hold.returncode == 1 and hold.stdout.startswith("hold:missing-or-extra-output")
    rec = riskstream("receipts", "reconcile", "--store", sqlite_url, "--from",
                     "2026-10-06T09:00:00Z", "--to", "2026-10-06T09:45:00Z").stdout
    assert "repaired" in rec
    # The bounded window left the later records pending; the gate still holds.
    assert riskstream("receipts", "release", "--store", sqlite_url, check=False).returncode == 1
    riskstream("receipts", "reconcile", "--store", sqlite_url)
    assert riskstream("receipts", "release", "--store", sqlite_url).stdout.startswith(
        "accept:reconciled")

    rows = list(csv.DictReader(io.StringIO(riskstream(
        "receipts", "decisions", "--store", sqlite_url).stdout)))
    header = ("receipt_id,scoring_revision,model_revision,score,decision,feature_count_7m,"
              "feature_amount_7m,watermark,state_cutoff,status").split(",")
    assert list(rows[0])[:10] == header
    assert sorted(r["receipt_id"] for r in rows) == manifest["receipt_ids"]
    every = orjson.loads(riskstream("receipts", "decisions", "--store", sqlite_url, "--all",
                                    "--format", "json").stdout)
    assert len(every) > len(rows)
    assert {r["status"] for r in every} >= {"live", "repaired", "rescored"}

    packet = orjson.loads(riskstream("receipts", "incident", "--store", sqlite_url,
                                     "--format", "json").stdout)
    assert [r["partition"] for r in packet["input_ranges"]] == [0, 1, 2, 3]
    assert all(r["closes"] for r in packet["input_ranges"])
    assert packet["counts"]["duplicate_uploads"] == 47
    assert packet["counts"]["beyond_allowed_delay"] == len(packet["reconciliation_records"]) > 0
    assert packet["release_gate"]["result"] == "accept:reconciled"
    assert all(v == [] for v in packet["output_gaps"].values())
    assert {f["fact_status"] for f in packet["repaired_decisions"]} == {"repaired", "rescored"}
    assert packet["model"]["pinned_revision"] == packet["model"]["revisions_in_sink"][0]
    # The disconnect is inferred from occurrence vs upload times: only the offline store,
    # beginning within the offline period and ending at the reconnect, not merely "uploads
    # arrived at 10:10".
    (d,) = packet["store_disconnects"]
    start, reconnect = (parse_utc_us(t) for t in manifest["offline_period"])
    assert d["store_id"] == manifest["offline_store"]
    assert parse_utc_us(d["last_online_receipt"]) < start <= parse_utc_us(d["offline_from"])
    assert parse_utc_us(d["offline_from"]) - start < 5 * US_PER_MIN
    assert parse_utc_us(d["reconnected_at"]) == reconnect
    text = riskstream("receipts", "incident", "--store", sqlite_url).stdout
    assert "Release gate: accept:reconciled" in text
    assert f"{manifest['offline_store']} (p1): online until" in text
