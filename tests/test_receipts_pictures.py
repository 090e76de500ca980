"""`riskstream receipts incident --pictures DIR`: the pictures' data against the incident packet
and the store, on the seed scenario run in small batches (one metrics snapshot per batch)."""

from __future__ import annotations

import os

import orjson
import pytest

from riskstream_tools.workloads.receipts_seed import generate
from streaming.timeutil import NEG_INF, POS_INF

from .receiptsutil import riskstream, run_scorer, with_store

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def seed(tmp_path_factory):
    out = tmp_path_factory.mktemp("receipts_seed")
    return str(out), generate(7, str(out), 470, partition_delay_min=4.0)


def _png_size(path: str) -> tuple[int, int]:
    with open(path, "rb") as fh:
        head = fh.read(24)
    assert head[:8] == PNG_MAGIC
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")


def test_incident_pictures_match_the_packet(seed, store_url, tmp_path):
    src, manifest = seed
    models = str(tmp_path / "models")
    run_scorer(src, store_url, models, end_of_stream=True, batch_size=10)
    out = str(tmp_path / "pictures")
    proc = riskstream("receipts", "incident", "--store", store_url, "--format", "json",
                      "--pictures", out)
    # The packet on stdout is unchanged (still plain JSON); the file lines go to stderr.
    packet = orjson.loads(proc.stdout)
    assert f"wrote {os.path.join(out, 'backlog.png')}" in proc.stderr
    with open(os.path.join(out, "pictures.json"), "rb") as fh:
        shown = orjson.loads(fh.read())

    timeline = shown["incident_timeline"]
    assert timeline["disconnects"] == packet["store_disconnects"]
    (d,) = timeline["disconnects"]
    assert d["store_id"] == manifest["offline_store"] == "store-05"
    assert d["reconnected_at"] == manifest["offline_period"][1]
    assert timeline["receipts"] == packet["counts"]["receipts_seen"] == 470
    assert timeline["held_receipts"] == d["held_receipts"]
    assert timeline["stores"] == 24

    back = shown["backlog"]
    trace = with_store(store_url, lambda s: s.metrics_trace("receipts"))
    finite = [m for m in trace if NEG_INF < m["input_wm"]["receipts"] < POS_INF]
    assert back["points"] == len(finite) > 40
    assert back["max_lag_s"] == max(m["event_time_lag_s"]["receipts"] for m in finite)
    assert back["max_pending"] == max(m["state"]["pending"] for m in finite)
    assert back["reconciliation_records"] == packet["counts"]["beyond_allowed_delay"] > 0
    assert back["surges"] == [{"store_id": d["store_id"],
                               "uploads_arrived": d["uploads_arrived"],
                               "held_receipts": d["held_receipts"]}]

    for name, min_height in (("incident_timeline", 1000), ("backlog", 1400)):
        path = os.path.join(out, f"{name}.png")
        width, height = _png_size(path)
        assert width == 1100 and height >= min_height
        assert os.path.getsize(path) == shown[name]["bytes"] > 60_000


def test_incident_without_pictures_writes_none(seed, sqlite_url, tmp_path):
    src, _ = seed
    run_scorer(src, sqlite_url, str(tmp_path / "models"), end_of_stream=True)
    proc = riskstream("receipts", "incident", "--store", sqlite_url)
    assert proc.stdout.startswith("Incident packet: receipt scorer")
    assert proc.stderr == ""
    assert not any(name.endswith(".png") for name in os.listdir(tmp_path))
