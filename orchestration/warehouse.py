"""The DuckDB warehouse: incremental ingest from the operational store and candidate tables.

Ingest reads every store table inside one read snapshot of the store, so the copies agree with
each other. Append-only tables (facts, archive, quarantine, journal) are copied incrementally and
idempotently (insert-or-ignore on their natural key) behind a cursor kept in the warehouse in the
same DuckDB transaction as the rows:
  SQLite: the rowid. SQLite has one writer at a time and assigns rowids inside the writing
          transaction, so rowids become visible in commit order and a rowid cursor skips nothing.
  PostgreSQL: not the id sequence (a transaction can take id 10, commit after one that took 11,
          and a cursor at 11 would skip it for ever) but the snapshot's transaction horizon: the
          next ingest takes rows whose inserting transaction is not older than the previous
          snapshot's xmin, i.e. every transaction that might still have been running. Re-read
          rows are ignored by the natural key.
Small tables whose rows change status (replay queue, generations, pointers) or that stay small
(sink exceptions, gate decisions) are replaced whole.

Candidate tables are named by generation id (candidates.pairs_<gid>, ...); the views in schema
`rebuild` point at the candidate of the running rebuild (one rebuild at a time: the warehouse
pool has a limit of 1)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

import orjson
from sqlalchemy import literal_column, select, text

from streaming.join_published import Piece, snapshot
from streaming.join_rebuild import Candidate, duck_load
from streaming.store import schema as S
from streaming.store.ops import Store, dumps

APPEND_ONLY = {
    "facts": ("id",),
    "archive": ("pipeline", "topic", "partition", "offset"),
    "quarantine": ("pipeline", "topic", "partition", "offset"),
    "journal": ("pipeline", "seq"),
}
# Sink exceptions and the decisions on gate blockers feed the release gates (docs/gates.md).
REPLACED = ("replay_queue", "generations", "generation_pointers", "sink_exceptions",
            "gate_decisions")
INGESTED = tuple(APPEND_ONLY) + REPLACED

log = logging.getLogger(__name__)


def _duck_type(col) -> str:
    name = type(col.type).__name__
    return {"Integer": "BIGINT", "BigInteger": "BIGINT", "Boolean": "BOOLEAN",
            "LargeBinary": "BLOB"}.get(name, "VARCHAR")


def columns_of(name: str) -> dict[str, str]:
    return {c.name: _duck_type(c) for c in S.metadata.tables[name].columns}


def bootstrap(con) -> None:
    """Schemas, raw tables and empty candidate views, so dbt can build on a new warehouse."""
    for schema in ("raw", "candidates", "rebuild"):
        con.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
    for name in INGESTED:
        cols = columns_of(name)
        decl = ", ".join(f'"{c}" {t}' for c, t in cols.items())
        pk = APPEND_ONLY.get(name)
        if pk:
            decl += ", PRIMARY KEY (" + ", ".join(f'"{c}"' for c in pk) + ")"
        con.execute(f"CREATE TABLE IF NOT EXISTS raw.{name} ({decl})")
    con.execute("CREATE TABLE IF NOT EXISTS raw._ingest_cursor (table_name VARCHAR PRIMARY KEY, "
                "dialect VARCHAR, position BIGINT, updated_at TIMESTAMPTZ)")
    con.execute("CREATE TABLE IF NOT EXISTS rebuild.runs (run_id VARCHAR PRIMARY KEY, "
                "generation_id VARCHAR, candidate VARCHAR, created_at TIMESTAMPTZ)")
    exists = {r[0] for r in con.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'rebuild'"
    ).fetchall()}
    if "cand_pairs" not in exists:
        _create_candidate_tables(con, "empty")
        _point_views(con, "empty")


# ---------------------------------------------------------------------------- ingest
def _pg_xid_filter(cursor: int):
    # age() counts back from the current transaction, so it survives the 32-bit xid wrap.
    return text(f"age(xmin) <= age('{cursor % (1 << 32)}'::xid)")


def ingest(store: Store, con) -> dict[str, int]:
    """Copy what is new since the last ingest, from one snapshot of the store."""
    bootstrap(con)
    dialect = store.dialect
    counts: dict[str, int] = {}
    with snapshot(store) as sconn:
        next_pg_cursor = None
        if dialect == "postgresql":
            next_pg_cursor = int(sconn.execute(text(
                "SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint")).scalar())
        con.execute("BEGIN TRANSACTION")
        try:
            for name in APPEND_ONLY:
                t = S.metadata.tables[name]
                row = con.execute("SELECT position, dialect FROM raw._ingest_cursor "
                                  "WHERE table_name = ?", [name]).fetchone()
                cursor = row[0] if row and row[1] == dialect else None
                cols = [c.name for c in t.columns]
                if dialect == "sqlite":
                    stmt = select(literal_column("rowid").label("_pos"), *t.columns)
                    if cursor is not None:
                        stmt = stmt.where(literal_column("rowid") > cursor)
                else:
                    stmt = select(*t.columns)
                    if cursor is not None:
                        stmt = stmt.where(_pg_xid_filter(cursor))
                rows = sconn.execute(stmt).all()
                if dialect == "sqlite":
                    pos = max((r[0] for r in rows), default=cursor or 0)
                    data = [tuple(r[1:]) for r in rows]
                else:
                    pos = next_pg_cursor
                    data = [tuple(r) for r in rows]
                before = con.execute(f"SELECT count(*) FROM raw.{name}").fetchone()[0]
                _insert_ignore(con, name, cols, data)
                after = con.execute(f"SELECT count(*) FROM raw.{name}").fetchone()[0]
                counts[name] = after - before
                con.execute("INSERT OR REPLACE INTO raw._ingest_cursor VALUES (?, ?, ?, now())",
                            [name, dialect, pos])
            for name in REPLACED:
                t = S.metadata.tables[name]
                cols = [c.name for c in t.columns]
                data = [tuple(r) for r in sconn.execute(select(*t.columns)).all()]
                con.execute(f"DELETE FROM raw.{name}")
                _insert_ignore(con, name, cols, data)
                counts[name] = len(data)
            con.execute("COMMIT")
        except Exception:
            con.execute("ROLLBACK")
            raise
    log.debug("ingested from the %s store: %s", dialect, counts)
    return counts


def _insert_ignore(con, name: str, cols: list[str], data: list[tuple]) -> None:
    """Insert-or-ignore on the natural key where the table has one, a plain insert otherwise."""
    if not data:
        return
    types = columns_of(name)
    staging = f"_ingest_{name}"
    duck_load(con, staging, {c: types[c] for c in cols}, data, temp=True)
    names = ", ".join(f'"{c}"' for c in cols)
    verb = "INSERT OR IGNORE" if name in APPEND_ONLY else "INSERT"
    con.execute(f"{verb} INTO raw.{name} ({names}) SELECT {names} FROM {staging}")
    con.execute(f"DROP TABLE {staging}")


# ---------------------------------------------------------------------------- candidates
PAIR_COLUMNS = {"generation_id": "VARCHAR", "pair_id": "VARCHAR", "rule_version": "VARCHAR",
                "merchant_id": "VARCHAR", "payment_id": "VARCHAR", "payment_rev": "INTEGER",
                "signal_id": "VARCHAR", "signal_rev": "INTEGER", "payment_time": "VARCHAR",
                "amount_cents": "BIGINT", "payload": "VARCHAR"}
OUTCOME_COLUMNS = {"generation_id": "VARCHAR", "payment_id": "VARCHAR", "payment_rev": "INTEGER",
                   "merchant_id": "VARCHAR", "payment_time": "VARCHAR", "amount_cents": "BIGINT",
                   "match_count": "INTEGER", "payload": "VARCHAR"}
PIECE_COLUMNS = {"generation_id": "VARCHAR", "merchant": "VARCHAR", "start_us": "BIGINT",
                 "end_us": "BIGINT"}
ENTRY_COLUMNS = {"generation_id": "VARCHAR", "entry_id": "BIGINT", "topic": "VARCHAR",
                 "event_id": "VARCHAR"}
CANDIDATE_TABLES = {"pairs": PAIR_COLUMNS, "base_pairs": PAIR_COLUMNS,
                    "outcomes": OUTCOME_COLUMNS, "pieces": PIECE_COLUMNS,
                    "entries": ENTRY_COLUMNS}
VIEWS = {"cand_pairs": "pairs", "base_pairs": "base_pairs", "cand_outcomes": "outcomes",
         "cand_pieces": "pieces", "cand_entries": "entries"}


def _create_candidate_tables(con, gid: str) -> None:
    for kind, cols in CANDIDATE_TABLES.items():
        decl = ", ".join(f'"{c}" {t}' for c, t in cols.items())
        con.execute(f"CREATE OR REPLACE TABLE candidates.{kind}_{gid} ({decl})")


def _point_views(con, gid: str) -> None:
    for view, kind in VIEWS.items():
        con.execute(f"CREATE OR REPLACE VIEW rebuild.{view} AS "
                    f"SELECT * FROM candidates.{kind}_{gid}")


def _pair_tuple(gid: str, p: dict) -> tuple:
    return (gid, p["pair_id"], p["rule_version"], p["merchant_id"], p["payment_id"],
            p["payment_rev"], p["signal_id"], p["signal_rev"], p["payment_time"],
            p.get("amount_cents"), dumps(p))


def write_candidate(con, cand: Candidate, run_id: str) -> None:
    """Candidate tables named by generation id; views of schema `rebuild` point at them."""
    gid = cand.generation_id
    _create_candidate_tables(con, gid)
    duck_load(con, f"candidates.pairs_{gid}", PAIR_COLUMNS,
              (_pair_tuple(gid, p) for p in cand.pairs), replace=False)
    duck_load(con, f"candidates.base_pairs_{gid}", PAIR_COLUMNS,
              (_pair_tuple(gid, p) for p in cand.base_pairs), replace=False)
    duck_load(con, f"candidates.outcomes_{gid}", OUTCOME_COLUMNS,
              ((gid, o["payment_id"], o["payment_rev"], o["merchant_id"], o["payment_time"],
                o.get("amount_cents"), o["match_count"], dumps(o)) for o in cand.outcomes),
              replace=False)
    duck_load(con, f"candidates.pieces_{gid}", PIECE_COLUMNS,
              ((gid, p.merchant, p.start_us, p.end_us) for p in cand.pieces), replace=False)
    entries = []
    for ev in cand.entry_events:
        topic, _, event_id = ev.partition(":")
        entries.append((gid, None, topic, event_id))
    duck_load(con, f"candidates.entries_{gid}", ENTRY_COLUMNS, entries, replace=False)
    _point_views(con, gid)
    meta = {"generation_id": gid, "pieces": [p.as_dict() for p in cand.pieces],
            "entry_ids": cand.entry_ids, "entry_events": cand.entry_events,
            "based_on": cand.based_on, "inputs": cand.inputs}
    con.execute("INSERT OR REPLACE INTO rebuild.runs VALUES (?, ?, ?, now())",
                [run_id, gid, dumps(meta)])


def run_candidate_meta(con, run_id: str) -> dict:
    row = con.execute("SELECT candidate FROM rebuild.runs WHERE run_id = ?", [run_id]).fetchone()
    if row is None:
        raise LookupError(f"run {run_id} built no candidate")
    return orjson.loads(row[0])


def load_candidate(con, meta: dict) -> Candidate:
    """The candidate as validated: read back from its generation-named tables."""
    gid = meta["generation_id"]
    pairs = [orjson.loads(r[0]) for r in con.execute(
        f"SELECT payload FROM candidates.pairs_{gid} ORDER BY payment_id, signal_id").fetchall()]
    base = [orjson.loads(r[0]) for r in con.execute(
        f"SELECT payload FROM candidates.base_pairs_{gid} ORDER BY payment_id, signal_id"
    ).fetchall()]
    outcomes = [orjson.loads(r[0]) for r in con.execute(
        f"SELECT payload FROM candidates.outcomes_{gid} ORDER BY payment_id").fetchall()]
    pieces = [Piece(p["merchant"], p["start_us"], p["end_us"]) for p in meta["pieces"]]
    cand = Candidate(gid, pieces, meta["entry_ids"], meta["entry_events"], meta["based_on"],
                     pairs=pairs, outcomes=outcomes, base_pairs=base)
    cand.inputs = meta.get("inputs", {})
    return cand


def diff_rows(con) -> dict[str, list[tuple]]:
    """What the dbt diff models hold (for metadata, the demo and the tests)."""
    out = {}
    out["pairs"] = con.execute(
        "SELECT change, payment_id, signal_id FROM main.diff_pair_keys "
        "WHERE change <> 'unchanged' ORDER BY change, payment_id, signal_id").fetchall()
    out["totals"] = con.execute(
        "SELECT merchant_id, current_payments, current_matched_payments, "
        "current_matched_amount, candidate_payments, candidate_matched_payments, "
        "candidate_matched_amount FROM main.diff_merchant_totals WHERE affected "
        "ORDER BY merchant_id").fetchall()
    return out


@contextmanager
def connect(path: str, read_only: bool = False) -> Iterator:
    import duckdb
    con = duckdb.connect(path, read_only=read_only)
    try:
        yield con
    finally:
        con.close()
