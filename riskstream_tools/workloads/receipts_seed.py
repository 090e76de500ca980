"""The receipt scorer's seed scenario, written as a file log (`DIR/receipts/p<N>.jsonl`).

Stores upload to 4 shards (the partitions); 8 merchants own 3 stores each, store k belongs
to merchant k % 8 and uploads to shard (k + k // 8) % 4, so a merchant spans three shards.
470 receipts with known IDs occur over two hours. Disorder and repetition:
  reordered arrival  every upload takes 5-90 s, so arrival order differs from occurrence
                     order (within the 2-minute watermark delay);
  replayed uploads   47 receipts are uploaded a second time, same payload, later upload time;
  delayed partition  shard 2 delivers every upload `partition_delay_min` minutes late;
  offline store      one store is disconnected for a period; the receipts it took meanwhile
                     arrive in one burst when it reconnects.
`scenario.json` next to the log lists the IDs of each case."""

from __future__ import annotations

import os
import random
from datetime import UTC, datetime, timedelta

import orjson

from streaming.timeutil import iso

T0 = datetime(2026, 10, 6, 9, 0, tzinfo=UTC)
SPAN_MIN = 120
SHARDS = 4
MERCHANTS = 8
STORES_PER_MERCHANT = 3
DELAYED_SHARD = 2
OFFLINE_STORE = "store-05"  # shard 1
OFFLINE_FROM_MIN = 40
OFFLINE_TO_MIN = 70
REPLAYED = 47


def store_shard(store_id: str) -> int:
    # A merchant's three stores (k, k + 8, k + 16) upload to three different shards.
    k = int(store_id.split("-")[1])
    return (k + k // MERCHANTS) % SHARDS


def stores() -> list[tuple[str, str]]:
    """(store_id, merchant_id) pairs."""
    out = []
    for k in range(MERCHANTS * STORES_PER_MERCHANT):
        out.append((f"store-{k:02d}", f"merchant-{k % MERCHANTS:02d}"))
    return out


def receipt(rid: str, store: str, merchant: str, cents: int, occurred: datetime,
            uploaded: datetime) -> dict:
    return {"receipt_id": rid, "store_id": store, "merchant_id": merchant,
            "amount_cents": cents, "occurred_at": iso(occurred), "uploaded_at": iso(uploaded)}


def _amount(rng: random.Random) -> int:
    # Mostly small baskets, a tail of large ones: log-normal around $25.
    return max(50, int(round(rng.lognormvariate(7.8, 0.9))))


def generate(seed: int, out_dir: str, n: int = 470, partition_delay_min: float = 4.0,
             span_min: float = SPAN_MIN, replayed: int = REPLAYED,
             offline: tuple[float, float] | None = (OFFLINE_FROM_MIN, OFFLINE_TO_MIN)) -> dict:
    rng = random.Random(seed)
    store_list = stores()
    weights = [8 if s == OFFLINE_STORE else 1 + (i % 3) for i, (s, _) in enumerate(store_list)]
    delay = timedelta(minutes=partition_delay_min)
    rows: dict[int, list[tuple[datetime, int, bytes]]] = {p: [] for p in range(SHARDS)}
    seq = 0
    originals: list[dict] = []
    offline_ids: list[str] = []
    reconnect = T0 + timedelta(minutes=offline[1]) if offline else None
    burst_i = 0
    for i in range(n):
        store, merchant = rng.choices(store_list, weights=weights)[0]
        occurred = T0 + timedelta(microseconds=rng.randrange(int(span_min * 60e6)))
        occurred = occurred.replace(microsecond=(occurred.microsecond // 1000) * 1000)
        uploaded = occurred + timedelta(seconds=rng.uniform(5, 90))
        if store_shard(store) == DELAYED_SHARD:
            uploaded += delay
        if (offline and reconnect is not None and store == OFFLINE_STORE
                and T0 + timedelta(minutes=offline[0]) <= occurred < reconnect):
            # Held on the handheld; sent in occurrence order once the store reconnects.
            offline_ids.append(f"receipt-{i:04d}")
        rec = receipt(f"receipt-{i:04d}", store, merchant, _amount(rng), occurred, uploaded)
        originals.append(rec)
    if offline_ids:
        assert reconnect is not None  # only an offline period holds receipts
        held = sorted((r for r in originals if r["receipt_id"] in set(offline_ids)),
                      key=lambda r: r["occurred_at"])
        for r in held:
            r["uploaded_at"] = iso(reconnect + timedelta(seconds=2 * burst_i))
            burst_i += 1
    for r in originals:
        up = datetime.fromisoformat(r["uploaded_at"])
        rows[store_shard(r["store_id"])].append((up, seq, orjson.dumps(r)))
        seq += 1
    # Replayed uploads: the same receipt (same payload) sent again 30 s to 20 min later.
    dup_ids = []
    picks = rng.sample(range(len(originals)), replayed)
    # Make sure replays of held receipts are exercised too.
    held_idx = [i for i, r in enumerate(originals) if r["receipt_id"] in set(offline_ids)]
    for k, hi in enumerate(held_idx[:3]):
        if hi not in picks:
            picks[k] = hi
    for i in picks:
        r = dict(originals[i])
        up = datetime.fromisoformat(r["uploaded_at"]) + timedelta(seconds=rng.uniform(30, 1200))
        r["uploaded_at"] = iso(up)
        rows[store_shard(r["store_id"])].append((up, seq, orjson.dumps(r)))
        seq += 1
        dup_ids.append(r["receipt_id"])
    tdir = os.path.join(out_dir, "receipts")
    os.makedirs(tdir, exist_ok=True)
    for p in range(SHARDS):
        with open(os.path.join(tdir, f"p{p}.jsonl"), "wb") as fh:
            for _, _, line in sorted(rows[p], key=lambda r: (r[0], r[1])):
                fh.write(line + b"\n")
    manifest = {
        "seed": seed, "receipts": len(originals), "lines": seq,
        "receipt_ids": [r["receipt_id"] for r in originals],
        "replayed_ids": sorted(dup_ids),
        "delayed_partition": DELAYED_SHARD, "partition_delay_min": partition_delay_min,
        "offline_store": OFFLINE_STORE if offline else None,
        "offline_period": ([iso(T0 + timedelta(minutes=offline[0])), iso(reconnect)]
                           if offline and reconnect is not None else None),
        "offline_ids": sorted(offline_ids),
        "shards": SHARDS, "merchants": MERCHANTS,
    }
    with open(os.path.join(out_dir, "scenario.json"), "wb") as fh:
        fh.write(orjson.dumps(manifest, option=orjson.OPT_INDENT_2))
    return manifest


def generate_surge(seed: int, out_dir: str, n: int, merchants: int = 200, stores_n: int = 600,
                   offline_min: float = 90.0, drain_ms: float = 2.0) -> dict:
    """The offline surge: n receipts taken over `offline_min` minutes while every store was
    disconnected, all uploaded after reconnecting. Each shard's uploader drains its backlog in
    occurrence order, one receipt every `drain_ms` of source time, so nothing is late: the run
    measures catching up, not reconciliation."""
    rng = random.Random(seed)
    reconnect = T0 + timedelta(minutes=offline_min)
    per_shard: dict[int, list] = {p: [] for p in range(SHARDS)}
    for i in range(n):
        s = rng.randrange(stores_n)
        occurred = T0 + timedelta(milliseconds=rng.randrange(int(offline_min * 60e3)))
        per_shard[s % SHARDS].append((occurred, i, s))
    tdir = os.path.join(out_dir, "receipts")
    os.makedirs(tdir, exist_ok=True)
    last = reconnect
    for p, items in per_shard.items():
        items.sort()
        with open(os.path.join(tdir, f"p{p}.jsonl"), "wb") as fh:
            for k, (occurred, i, s) in enumerate(items):
                up = reconnect + timedelta(milliseconds=drain_ms * k)
                last = max(last, up)
                r = receipt(f"receipt-{i:06d}", f"store-{s:03d}", f"merchant-{s % merchants:03d}",
                            _amount(rng), occurred, up)
                fh.write(orjson.dumps(r) + b"\n")
    return {"receipts": n, "reconnect": iso(reconnect), "last_upload": iso(last),
            "offline_min": offline_min, "drain_ms": drain_ms}
