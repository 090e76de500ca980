"""Ledger oracle: the seed's `ledger_snapshot` (first-seen payment ID wins, cents summed per
(account, hour)), and an adapter that feeds it a file log.

The adapter validates each payment line with the shared contract (invalid lines are skipped,
as the worker quarantines them), orders the stream by revision, highest first (stable on arrival
order), so the seed's first-seen rule keeps each payment's latest revision and, within one
revision, the first content delivered: exactly the ledger's deduplication rule."""

from __future__ import annotations

from streaming.contracts import PAYMENT, InvalidRecord, validate
from streaming.sources.filelog import FileLog
from streaming.timeutil import US_PER_HOUR


def ledger_snapshot(records):
    seen = set()
    totals: dict = {}
    for row in records:
        if row["id"] in seen:
            continue
        seen.add(row["id"])
        key = (row["account"], row["hour"])
        totals[key] = totals.get(key, 0) + row["cents"]
    return totals


def reference_rows(source_dir: str) -> list[dict]:
    log = FileLog(source_dir, ["payments"], {"payments": PAYMENT.arrival_time_field})
    rows = []
    for raw in log.merged({}):
        obj = raw.obj  # decoded from the line on each access
        if not isinstance(obj, dict):
            continue
        try:
            rec = validate(PAYMENT, obj, raw.partition, raw.offset, len(raw.line))
        except InvalidRecord:
            continue
        rows.append({"id": rec.id, "revision": rec.revision, "account": rec.payload["account_id"],
                     "hour": rec.event_us - rec.event_us % US_PER_HOUR,
                     "cents": rec.payload["amount_cents"]})
    rows.sort(key=lambda r: -r["revision"])  # stable: arrival order within a revision
    return rows


def reference_totals(source_dir: str) -> dict[tuple[str, int], int]:
    """{(account_id, hour start in microseconds): total cents}."""
    return ledger_snapshot(reference_rows(source_dir))
