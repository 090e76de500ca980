"""Builders for receipt-scorer tests: receipts at minute offsets, file logs, in-process runs,
CLI subprocesses and sink readers."""

from __future__ import annotations

import glob
import os
import subprocess
import sys
from datetime import datetime, timedelta, timezone

import orjson

from streaming.contracts import validate
from streaming.host.loop import Worker
from streaming.host.settings import RunSettings
from streaming.models.registry import INITIAL_ARTIFACT, Registry
from streaming.pipelines.receipts import RECEIPT, SPEC
from streaming.pipelines.receipts_release import active, decision_facts
from streaming.timeutil import iso

from .storeutil import with_store

T0 = datetime(2026, 10, 6, 9, 0, tzinfo=timezone.utc)


def at(minute: float) -> str:
    return iso(T0 + timedelta(minutes=minute))


def rcpt(rid, merchant, minute, upload=None, cents=1000, store="store-00"):
    upload = minute + 0.1 if upload is None else upload
    return {"receipt_id": rid, "store_id": store, "merchant_id": merchant, "amount_cents": cents,
            "occurred_at": at(minute), "uploaded_at": at(upload)}


def record(obj, partition=0, offset=0):
    return validate(RECEIPT, obj, partition, offset, len(orjson.dumps(obj)))


def write_log(root, parts: dict[int, list[dict]]) -> str:
    os.makedirs(os.path.join(root, "receipts"), exist_ok=True)
    for p in range(max(parts) + 1):
        rows = sorted(parts.get(p, []), key=lambda r: r["uploaded_at"])
        with open(os.path.join(root, "receipts", f"p{p}.jsonl"), "wb") as fh:
            for r in rows:
                fh.write(orjson.dumps(r) + b"\n")
    return str(root)


def read_log(source) -> list[dict]:
    """Every line of a generated log, in upload order (first upload of a receipt first)."""
    rows = []
    for path in sorted(glob.glob(os.path.join(source, "receipts", "p*.jsonl"))):
        with open(path, "rb") as fh:
            rows += [orjson.loads(line) for line in fh if line.strip()]
    return sorted(rows, key=lambda r: r["uploaded_at"])


def stricter_artifact() -> dict:
    a = orjson.loads(orjson.dumps(INITIAL_ARTIFACT))
    a["threshold_policy"] = {"review_at": 0.3, "decline_at": 0.6}
    return a


def run_scorer(source, store_url, model_dir, **kw):
    settings = RunSettings(source=str(source), store_url=store_url,
                           extra={"model_dir": str(model_dir)}, **kw)
    return with_store(store_url, lambda store: Worker(SPEC, settings, store=store).run())


def riskstream(*args, check=True):
    proc = subprocess.run([sys.executable, "-m", "streaming.cli.main", *args],
                          capture_output=True, text=True, timeout=300)
    if check and proc.returncode != 0:
        raise AssertionError(f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc


def active_by_receipt(url) -> dict[str, dict]:
    return with_store(url, lambda s: {f["receipt_id"]: f for f in active(decision_facts(s))})


def all_facts(url) -> list[dict]:
    return with_store(url, decision_facts)


def fact_set(url) -> set[tuple[str, str]]:
    return with_store(url, lambda s: {(f["fact_key"], f["payload_hash"])
                                      for f in s.facts("receipts")})


def model_dir_with_initial(path) -> tuple[str, str]:
    reg = Registry(str(path))
    return str(path), reg.current_revision()
