"""What is live for each merchant and interval, and what each generation changed: the
`live_generations` table an operator reads in the Dagster UI.

Status, predecessor and times come from the store's generation history (the system of record);
the diff of each generation (pairs added / retired / revised, the merchant's totals before and
after) is kept in the warehouse when its dbt diff models are built, in `rebuild.generation_diffs`
(written only by Dagster runs, like every warehouse table)."""

from __future__ import annotations

from typing import Any

import orjson
from dagster import MetadataValue, TableColumn, TableRecord, TableSchema
from sqlalchemy import select

from streaming.join_published import generation_rows
from streaming.store import schema as S

from .warehouse import diff_rows

DIFF_TABLE = "rebuild.generation_diffs"
VIEW_COLUMNS = [
    ("merchant", "string", "Merchant of the interval."),
    ("interval_start", "string", "First payment time the generation covers (UTC)."),
    ("interval_end", "string", "Last payment time the generation covers (UTC, inclusive)."),
    ("generation", "string", "Generation id."),
    ("status", "string", "live (published and current), held, or superseded."),
    ("predecessor", "string", "The generation that was live when this one's diff was built."),
    ("decided_at", "string", "When it was published (or last validated or held)."),
    ("why", "string", "Hold reason, or the queue entries it settled."),
    ("pairs_added", "int", "Logical pairs the generation adds."),
    ("pairs_retired", "int", "Logical pairs it retires."),
    ("pairs_revised", "int", "Logical pairs it keeps with a new revision."),
    ("matched_before", "int", "The merchant's matched payments before the generation."),
    ("matched_after", "int", "... and with it published."),
    ("amount_before", "int", "The merchant's matched amount (cents) before."),
    ("amount_after", "int", "... and with it published."),
]
SCHEMA = TableSchema(columns=[TableColumn(n, t, description=d) for n, t, d in VIEW_COLUMNS])


def record_diff(con, generation_id: str) -> dict:
    """Keep the diff the dbt models just built for this generation; returns it."""
    rows = diff_rows(con)
    counts = {k: sum(1 for c, _, _ in rows["pairs"] if c == k)
              for k in ("added", "retired", "revised")}
    totals = [dict(zip(("merchant", "payments_before", "matched_before", "amount_before",
                        "payments_after", "matched_after", "amount_after"), t, strict=True))
              for t in rows["totals"]]
    diff = {**counts, "totals": totals,
            "changes": [{"change": c, "payment_id": p, "signal_id": s}
                        for c, p, s in rows["pairs"]]}
    con.execute(f"CREATE TABLE IF NOT EXISTS {DIFF_TABLE} (generation_id VARCHAR PRIMARY KEY, "
                "diff VARCHAR, recorded_at TIMESTAMPTZ)")
    con.execute(f"INSERT OR REPLACE INTO {DIFF_TABLE} VALUES (?, ?, now())",
                [generation_id, orjson.dumps(diff).decode()])
    return diff


def recorded_diffs(con) -> dict[str, dict]:
    exists = con.execute("SELECT count(*) FROM information_schema.tables WHERE "
                         "table_schema = 'rebuild' AND table_name = 'generation_diffs'"
                         ).fetchone()[0]
    if not exists:
        return {}
    return {gid: orjson.loads(d) for gid, d in
            con.execute(f"SELECT generation_id, diff FROM {DIFF_TABLE}").fetchall()}


def view_rows(store, con) -> list[dict]:
    """One row per published, held or superseded generation, live ones first per merchant."""
    live = {r["generation_id"] for r in store.rows(select(S.generation_pointers.c.generation_id))}
    diffs = recorded_diffs(con)
    out = []
    for g in generation_rows(store):
        if g["status"] not in ("published", "held", "superseded"):
            continue
        status = "live" if g["status"] == "published" and g["generation_id"] in live else (
            "superseded" if g["status"] in ("published", "superseded") else "held")
        d = diffs.get(g["generation_id"], {})
        tot: dict[str, Any] = next(
            (t for t in d.get("totals", []) if t["merchant"] == g["interval_key"]), {})
        entries = orjson.loads(g["entry_ids"]) if g["entry_ids"] else []
        why = g["reason"] or (f"settled queue entries {', '.join(map(str, entries))}"
                              if entries else "manual rebuild")
        out.append({
            "merchant": g["interval_key"], "interval_start": g["interval_start"],
            "interval_end": g["interval_end"], "generation": g["generation_id"],
            "status": status, "predecessor": g["based_on"] or "",
            "decided_at": g["published_at"] or g["validated_at"] or g["created_at"],
            "why": why,
            "pairs_added": d.get("added"), "pairs_retired": d.get("retired"),
            "pairs_revised": d.get("revised"),
            "matched_before": tot.get("matched_before"), "matched_after": tot.get("matched_after"),
            "amount_before": tot.get("amount_before"), "amount_after": tot.get("amount_after")})
    order = {"live": 0, "held": 1, "superseded": 2}
    out.sort(key=lambda r: (r["merchant"], r["interval_start"], order[r["status"]],
                            r["decided_at"] or ""))
    return out


def view_metadata(store, con) -> dict:
    rows = view_rows(store, con)
    live = [r for r in rows if r["status"] == "live"]
    return {
        "generations": MetadataValue.table(
            records=[TableRecord({k: v for k, v in r.items() if v is not None}) for r in rows],
            schema=SCHEMA),
        "live_intervals": len(live),
        "held": sum(1 for r in rows if r["status"] == "held"),
    }


def diff_metadata(diff: dict) -> dict:
    """One generation's diff as metadata: counts, totals and the changed pairs (first 20)."""
    totals = diff.get("totals", [])
    changes = diff.get("changes", [])[:20]
    out = {"pairs_added": diff.get("added", 0), "pairs_retired": diff.get("retired", 0),
           "pairs_revised": diff.get("revised", 0)}
    if totals:
        out["merchant_totals"] = MetadataValue.table(
            records=[TableRecord(t) for t in totals],
            schema=TableSchema(columns=[
                TableColumn("merchant", "string"), TableColumn("payments_before", "int"),
                TableColumn("matched_before", "int"), TableColumn("amount_before", "int"),
                TableColumn("payments_after", "int"), TableColumn("matched_after", "int"),
                TableColumn("amount_after", "int")]))
    if changes:
        out["changed_pairs"] = MetadataValue.table(
            records=[TableRecord(c) for c in changes],
            schema=TableSchema(columns=[TableColumn("change", "string"),
                                        TableColumn("payment_id", "string"),
                                        TableColumn("signal_id", "string")]))
    return out
