"""Builders for ledger tests: validated records, operator drivers, in-process runs, readers."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys

import orjson

from streaming.cli.ledger import window_rows
from streaming.contracts import PAYMENT, validate
from streaming.host.loop import Worker
from streaming.host.settings import RunSettings
from streaming.operators.base import Emit
from streaming.operators.ledger import LedgerOperator
from streaming.pipelines.ledger import MERCHANT_CATEGORY, make_spec, run_extra
from streaming.repairs.ledger import RepairKey
from streaming.store.ops import Store

from .storeutil import with_store

TEST_KEY = RepairKey(b"ledger-test-key", "env")
ENV_KEY = {"RISKSTREAM_REPAIR_KEY": "ledger-test-key"}


def rec(obj: dict, partition: int = 0, offset: int = 0):
    contract = PAYMENT if "payment_id" in obj else MERCHANT_CATEGORY
    return validate(contract, obj, partition, offset, len(orjson.dumps(obj)))


class Driver:
    """Feeds an operator the way the host does: record, then the watermark it implies."""

    def __init__(self, op: LedgerOperator | None = None, delay_min: int = 5):
        self.op = op or LedgerOperator(TEST_KEY.sign, TEST_KEY.source)
        self.delay = delay_min * 60_000_000
        self.max_event = None
        self.offset = 0

    def feed(self, obj: dict) -> Emit:
        out = Emit()
        r = rec(obj, 0, self.offset)
        self.offset += 1
        self.op.on_record(r, out)
        if r.topic == "payments" and (self.max_event is None or r.event_us > self.max_event):
            self.max_event = r.event_us
            self.op.on_watermark("payments", r.event_us - self.delay, out)
        return out


def run_ledger(source: str, store_url: str, key: RepairKey = TEST_KEY, **kw):
    settings = RunSettings(source=source, store_url=store_url, extra=run_extra(key), **kw)
    return with_store(store_url,
                      lambda store: Worker(make_spec(key), settings, store=store).run())


def cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "streaming.cli.main", "ledger", *args],
                          capture_output=True, text=True, env=full_env, timeout=120)


def windows(store_url: str, include_all: bool = False) -> list[dict]:
    return with_store(store_url, lambda store: window_rows(store, include_all))


def facts_digest(store: Store) -> tuple[int, str]:
    rows = sorted((f["fact_key"], f["payload_hash"]) for f in store.facts("ledger"))
    return len(rows), hashlib.sha256(orjson.dumps(rows)).hexdigest()
