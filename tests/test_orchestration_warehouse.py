"""Ingest from the store into the warehouse: incremental and idempotent on both stores, and on
PostgreSQL a fact that commits late with a lower id than one already ingested is not skipped."""

from __future__ import annotations

import duckdb

from orchestration.warehouse import ingest
from streaming.store import schema as S
from streaming.store.ops import Store, now_iso


def fact_row(key: str) -> dict:
    return {"pipeline": "join", "fact_key": key, "kind": "pair", "logical_key": key,
            "status": "current", "payload_hash": "h", "payload": "{}", "predecessor_key": None,
            "batch_seq": None, "generation_id": None, "created_at": now_iso()}


def keys(con) -> list[str]:
    return [r[0] for r in con.execute("SELECT fact_key FROM raw.facts ORDER BY fact_key")
            .fetchall()]


def test_ingest_is_incremental_and_idempotent(store_url, tmp_path):
    store = Store(store_url)
    with store.engine.begin() as conn:
        conn.execute(S.facts.insert(), [fact_row("a"), fact_row("b")])
    with duckdb.connect(str(tmp_path / "w.duckdb")) as con:
        assert ingest(store, con)["facts"] == 2
        assert ingest(store, con)["facts"] == 0
        with store.engine.begin() as conn:
            conn.execute(S.facts.insert(), [fact_row("c")])
        assert ingest(store, con)["facts"] == 1
        assert keys(con) == ["a", "b", "c"]
    store.dispose()


def test_a_late_commit_with_a_lower_id_is_not_skipped(pg_url, tmp_path):
    store = Store(pg_url)
    late = store.engine.connect()
    tx = late.begin()
    late.execute(S.facts.insert(), [fact_row("late")])  # takes the lower id, commits last
    with store.engine.begin() as conn:
        conn.execute(S.facts.insert(), [fact_row("early")])
    ids = {r["fact_key"]: r["id"] for r in store.facts("join")}
    assert list(ids) == ["early"]
    with duckdb.connect(str(tmp_path / "w.duckdb")) as con:
        assert ingest(store, con)["facts"] == 1
        tx.commit()
        late.close()
        ids = {r["fact_key"]: r["id"] for r in store.facts("join")}
        assert ids["late"] < ids["early"]
        assert ingest(store, con)["facts"] == 1
        assert keys(con) == ["early", "late"]
        assert ingest(store, con)["facts"] == 0
    store.dispose()


def test_status_changes_are_seen_on_the_next_ingest(sqlite_url, tmp_path):
    store = Store(sqlite_url)
    row = {"pipeline": "join", "queue_date": "2026-10-06", "topic": "payments", "partition": 0,
           "offset": 1, "event_id": "p", "revision": 2, "key": "m", "event_us": 1,
           "reason": "r", "watermark_at_arrival_us": 0, "status": "pending",
           "status_reason": None, "detail": "{}", "generation_id": None, "batch_seq": 1}
    with store.engine.begin() as conn:
        conn.execute(S.replay_queue.insert(), [row])
    with duckdb.connect(str(tmp_path / "w.duckdb")) as con:
        ingest(store, con)
        with store.engine.begin() as conn:
            conn.execute(S.replay_queue.update().values(status="processed"))
        ingest(store, con)
        assert con.execute("SELECT status FROM raw.replay_queue").fetchall() == [("processed",)]
    store.dispose()
