"""Ledger reconciliation: per source partition and offset range,
read = accepted + duplicate + stale + quarantined + routed_to_repair, with routed_to_repair
split by the state of its signed repair requests into pending, held and repaired."""

from __future__ import annotations

from sqlalchemy import select

from ..operators.base import BUCKETS
from ..store import schema as S
from ..store.ops import Store
from ..store.tables_ledger import ledger_repair_requests as RR

ROUTED_SPLIT = ("pending", "held", "repaired")


def record_status(statuses: set[str]) -> str:
    """One state per routed record: held if any of its requests is held, repaired when all
    are repaired, pending otherwise (a record may touch several final windows)."""
    if "held" in statuses:
        return "held"
    if statuses and statuses <= {"repaired"}:
        return "repaired"
    return "pending"


def reconcile(store: Store, pipeline: str = "ledger") -> list[dict]:
    rows = store.accounting(pipeline)
    by_pos: dict[tuple[str, int, int], set[str]] = {}
    c = RR.c
    for r in store.rows(select(c.topic, c.partition, c.offset, c.status)):
        by_pos.setdefault((r["topic"], r["partition"], r["offset"]), set()).add(r["status"])
    a = S.archive.c
    split: dict[tuple[str, int], dict[str, int]] = {}
    for r in store.rows(select(a.topic, a.partition, a.offset).where(
            a.pipeline == pipeline, a.disposition == "routed_to_repair")):
        st = record_status(by_pos.get((r["topic"], r["partition"], r["offset"]), set()))
        d = split.setdefault((r["topic"], r["partition"]), dict.fromkeys(ROUTED_SPLIT, 0))
        d[st] += 1
    out = []
    for row in rows:
        d = split.get((row["topic"], row["partition"]), dict.fromkeys(ROUTED_SPLIT, 0))
        total = sum(row[b] for b in BUCKETS)
        out.append({**row, **d,
                    "closes": row["read"] == total
                    and row["routed_to_repair"] == sum(d.values())})
    return out


def equation(row: dict) -> str:
    return (f"{row['topic']}:{row['partition']} offsets "
            f"{row['first_offset']}..{row['last_offset']}: "
            f"read {row['read']} = accepted {row['accepted']} + duplicate {row['duplicate']} + "
            f"stale {row['stale']} + quarantined {row['quarantined']} + routed_to_repair "
            f"{row['routed_to_repair']} (pending {row['pending']}, held {row['held']}, "
            f"repaired {row['repaired']}) -> {'closes' if row['closes'] else 'DOES NOT CLOSE'}")
