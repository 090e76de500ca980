"""Small builders for join tests: records at minute offsets, file logs, runs and readers."""

from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone

import orjson

from streaming.cli.join import outcome_rows, pair_rows
from streaming.contracts import PAYMENT, RISK_SIGNAL, validate
from streaming.host.loop import Worker
from streaming.host.settings import RunSettings
from streaming.pipelines.join import SPEC
from streaming.timeutil import US_PER_MIN, iso

from .storeutil import with_store

T0 = datetime(2026, 10, 6, 10, 0, tzinfo=timezone.utc)


def at(minute: float, seconds: float = 0) -> str:
    return iso(T0 + timedelta(minutes=minute, seconds=seconds))


def pay(pid, merchant, minute, arrival=None, rev=1, cents=100, seconds=0, account="acct-1"):
    arrival = minute if arrival is None else arrival
    return {"payment_id": pid, "revision": rev, "merchant_id": merchant, "account_id": account,
            "amount_cents": cents, "event_time": at(minute, seconds),
            "arrival_time": at(arrival, seconds if arrival == minute else 0)}


def sig(sid, merchant, minute, arrival=None, rev=1, score=0.5, seconds=0):
    arrival = minute if arrival is None else arrival
    return {"signal_id": sid, "revision": rev, "merchant_id": merchant, "score": score,
            "event_time": at(minute, seconds),
            "arrival_time": at(arrival, seconds if arrival == minute else 0)}


def write_log(root, parts: dict[tuple[str, int], list[dict | bytes]],
              partitions: dict[str, int] | None = None) -> str:
    partitions = partitions or {}
    for (topic, p), _ in parts.items():
        partitions[topic] = max(partitions.get(topic, 0), p + 1)
    for topic in ("payments", "risk_signals"):
        partitions.setdefault(topic, 1)
    for topic, n in partitions.items():
        os.makedirs(os.path.join(root, topic), exist_ok=True)
        for p in range(n):
            with open(os.path.join(root, topic, f"p{p}.jsonl"), "wb") as fh:
                for obj in parts.get((topic, p), []):
                    fh.write((obj if isinstance(obj, bytes) else orjson.dumps(obj)) + b"\n")
    return str(root)


def run_join(source, store_url, **kw):
    settings = RunSettings(source=str(source), store_url=store_url, **kw)
    return with_store(store_url, lambda store: Worker(SPEC, settings, store=store).run())


def pairs(store_url, include_retired=False):
    return with_store(store_url, lambda store: pair_rows(store, include_retired))


def pair_set(store_url):
    return {(r["payment_id"], r["signal_id"]) for r in pairs(store_url)}


def outcomes(store_url):
    return with_store(store_url,
                      lambda store: {r["payment_id"]: r for r in outcome_rows(store)})


def record(obj, partition=0, offset=0):
    contract = PAYMENT if "payment_id" in obj else RISK_SIGNAL
    return validate(contract, obj, partition, offset, len(orjson.dumps(obj)))


def minutes(m):
    return int(m * US_PER_MIN)
