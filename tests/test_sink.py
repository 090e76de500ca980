"""The sink contract on both stores: new key written; same key and hash a no-op; same key with
another hash rejected and recorded; the current view is derived in the same transaction and
names its fact by id, whose payload the view's readers see."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from streaming.hashing import digest
from streaming.operators.base import Fact
from streaming.store import schema as S
from streaming.store.ops import Store, fact_rows, upsert_view_of_facts, write_facts


def pair_fact(key, logical, status, **payload) -> Fact:
    return Fact.make(key, "pair", logical, status, payload)


def fact(key, logical, status, **payload):
    # The sink writes fact rows: an operator's Fact as the host hands it over.
    return fact_rows([pair_fact(key, logical, status, **payload)])[0]


def assert_view_references_its_facts(store: Store) -> None:
    """Every view row names an existing fact with its own key columns, and the view's readers
    see that fact's payload."""
    v, f = S.current_view.c, S.facts.c
    rows = store.rows(select(S.current_view, f.pipeline.label("f_pipeline"),
                             f.kind.label("f_kind"), f.logical_key.label("f_logical_key"),
                             f.fact_key.label("f_fact_key"), f.status.label("f_status"),
                             f.batch_seq.label("f_batch_seq"), f.payload.label("f_payload"))
                      .select_from(S.current_view.outerjoin(S.facts, f.id == v.fact_id)))
    for r in rows:
        assert [r[c] for c in ("pipeline", "kind", "logical_key", "fact_key", "status",
                               "batch_seq")] == \
            [r[f"f_{c}"] for c in ("pipeline", "kind", "logical_key", "fact_key", "status",
                                   "batch_seq")], r
    payloads = {(r["pipeline"], r["kind"], r["logical_key"]): r["f_payload"] for r in rows}
    for pipeline, kind in {(r["pipeline"], r["kind"]) for r in rows}:
        for r in store.current(pipeline, kind):
            assert r["payload"] == payloads[(pipeline, kind, r["logical_key"])]


def test_same_hash_noop_other_hash_rejected(store_url):
    store = Store(store_url)
    with store.engine.begin() as conn:
        r1 = write_facts(conn, "join", [fact("k1", "L1", "current", v=1),
                                        fact("k2", "L2", "current", v=2)], 1)
    with store.engine.begin() as conn:
        r2 = write_facts(conn, "join", [fact("k1", "L1", "current", v=1),
                                        fact("k2", "L2", "current", v=999)], 2)
    assert (r1.written, r1.noop, r1.rejected) == (2, 0, 0)
    assert (r2.written, r2.noop, r2.rejected) == (0, 1, 1) and r2.rejected_keys == ["k2"]
    [exc] = store.sink_exception_rows("join")
    assert exc["fact_key"] == "k2" and '"v":999' in exc["rejected_payload"]
    facts = store.facts("join")
    assert [(f["fact_key"], f["payload"]) for f in facts] == [("k1", '{"v":1}'), ("k2", '{"v":2}')]
    # The rejected write never reached the current view.
    assert {r["logical_key"]: r["payload"] for r in store.current("join", "pair")} == \
        {"L1": '{"v":1}', "L2": '{"v":2}'}
    store.dispose()


def test_uniqueness_is_enforced_by_the_database(store_url):
    store = Store(store_url)
    row = {"pipeline": "join", "fact_key": "dup", "kind": "pair", "logical_key": "L",
           "status": "current", "payload_hash": "h", "payload": "{}", "created_at": "now"}
    with store.engine.begin() as conn:
        conn.execute(S.facts.insert(), [row])
    with pytest.raises(IntegrityError):
        with store.engine.begin() as conn:
            conn.execute(S.facts.insert(), [{**row, "payload_hash": "other"}])
    store.dispose()


def test_current_view_follows_fact_order_within_a_batch(store_url):
    store = Store(store_url)
    with store.engine.begin() as conn:
        write_facts(conn, "join", [fact("pub", "L", "current", pair="a"),
                                   fact("ret", "L", "retired", pair="a"),
                                   fact("pub2", "L", "current", pair="b")], 1)
    [row] = store.current("join", "pair")
    assert (row["fact_key"], row["status"]) == ("pub2", "current")
    store.dispose()


@given(keys=st.lists(st.tuples(st.sampled_from(["pair", "outcome"]),
                                st.sampled_from(["L1", "L2", "L3", "L4"])), max_size=30))
def test_last_fact_per_logical_key_and_the_facts_it_supersedes(keys):
    from streaming.store.ops import _last_per_logical_key, _superseded_in_batch
    rows = [(f"k{i}", kind, logical, "current", "h", "{}", "") for i, (kind, logical)
            in enumerate(keys)]
    last = [i for i, k in enumerate(keys) if k not in keys[i + 1:]]
    assert _last_per_logical_key(rows) == last
    assert sorted(_superseded_in_batch(rows)) == [i for i in range(len(keys)) if i not in last]


def test_payload_hash_ignores_arrival_time():
    from streaming.contracts import PAYMENT, validate
    base = {"payment_id": "p", "revision": 1, "merchant_id": "m", "account_id": "a",
            "amount_cents": 5, "event_time": "2026-10-06T10:00:00Z"}
    a = validate(PAYMENT, {**base, "arrival_time": "2026-10-06T10:00:01Z"}, 0, 0, 1)
    b = validate(PAYMENT, {**base, "arrival_time": "2026-10-06T11:00:00Z"}, 0, 1, 1)
    c = validate(PAYMENT, {**base, "amount_cents": 6, "arrival_time": "2026-10-06T10:00:01Z"},
                 0, 2, 1)
    assert a.payload_hash == b.payload_hash != c.payload_hash


def test_only_the_ledger_window_lookup_is_indexed_by_logical_key(store_url):
    # The facts are indexed by logical key only where a reader needs it: the ledger repair's
    # newest-window-fact lookup. Its plan uses the partial index, not a scan of all facts.
    from sqlalchemy import text

    from streaming.repairs.ledger import latest_fact_query
    store = Store(store_url)
    try:
        with store.engine.connect() as conn:
            sql = str(latest_fact_query("acct-1|2026-10-06T10:00Z").compile(
                conn, compile_kwargs={"literal_binds": True}))
            if store.dialect == "sqlite":
                plan = " ".join(str(r[-1]) for r in conn.exec_driver_sql(
                    f"EXPLAIN QUERY PLAN {sql}"))
                idx = {r[0] for r in conn.exec_driver_sql(
                    "SELECT name FROM sqlite_master WHERE type = 'index' "
                    "AND tbl_name = 'facts' AND sql IS NOT NULL")}
            else:
                conn.execute(text("SET enable_seqscan = off"))
                plan = " ".join(r[0] for r in conn.exec_driver_sql(f"EXPLAIN {sql}"))
                idx = {r[0] for r in conn.exec_driver_sql(
                    "SELECT indexname FROM pg_indexes WHERE tablename = 'facts' "
                    "AND position(' WHERE ' in indexdef) > 0")}
    finally:
        store.dispose()
    assert "ix_facts_ledger_window" in plan
    assert idx == {"ix_facts_ledger_window"}


def test_current_view_keeps_the_last_written_fact_when_later_ones_already_exist(store_url):
    # Batch 2 repeats fact "b2" (a no-op) after a new fact "a2" of the same logical key: the
    # view takes "a2", the last fact of the key this batch wrote, and "c2" of another key.
    store = Store(store_url)
    with store.engine.begin() as conn:
        write_facts(conn, "join", [fact("b2", "L", "current", v="b2"),
                                   fact("x1", "X", "current", v="x1")], 1)
    with store.engine.begin() as conn:
        r = write_facts(conn, "join", [fact("a1", "L", "current", v="a1"),
                                       fact("a2", "L", "retired", v="a2"),
                                       fact("b2", "L", "current", v="b2"),
                                       fact("c1", "C", "current", v="c1"),
                                       fact("c2", "C", "current", v="c2")], 2)
    assert (r.written, r.noop, r.rejected) == (4, 1, 0)
    view = {row["logical_key"]: (row["fact_key"], row["status"], row["payload"], row["batch_seq"])
            for row in store.current("join", "pair")}
    assert view == {"L": ("a2", "retired", '{"v":"a2"}', 2),
                    "C": ("c2", "current", '{"v":"c2"}', 2),
                    "X": ("x1", "current", '{"v":"x1"}', 1)}
    assert [f["fact_key"] for f in store.facts("join")] == ["b2", "x1", "a1", "a2", "c1", "c2"]
    assert_view_references_its_facts(store)
    store.dispose()


def test_batch_constants_are_stored_as_given(store_url):
    # The pipeline name, batch number and creation time are bound once per batch (SQLite:
    # as literals); a quote in a constant is data, not SQL.
    store = Store(store_url)
    with store.engine.begin() as conn:
        r = write_facts(conn, "it's", [fact("k1", "L1", "current", v=1),
                                       fact("k2", "L1", "retired", v=2)], 7)
    assert r.written == 2
    facts = store.facts("it's")
    assert [(f["pipeline"], f["fact_key"], f["batch_seq"], f["generation_id"]) for f in facts] == \
        [("it's", "k1", 7, None), ("it's", "k2", 7, None)]
    assert facts[0]["created_at"] == facts[1]["created_at"]
    [row] = store.current("it's", "pair")
    assert (row["pipeline"], row["fact_key"], row["status"], row["batch_seq"]) == \
        ("it's", "k2", "retired", 7)
    store.dispose()


def test_a_fact_without_a_predecessor_is_stored_with_none(store_url):
    """A fact row says "no predecessor" with an empty string (the driver binds it without its
    adapter lookup); the store holds NULL for it and the predecessor's key for the others, on
    the direct path (every key new) and on the staged one (some key already stored), and a
    row that still carries None is stored the same way."""
    store = Store(store_url)
    first = [pair_fact("k1", "L1", "current", v=1),
             Fact.make("k2", "pair", "L1", "retired", {"v": 2}, predecessor_key="k1")]
    rows = fact_rows(first)
    assert [r[-1] for r in rows] == ["", "k1"]
    with store.engine.begin() as conn:
        assert write_facts(conn, "join", rows, 1).written == 2
    # k1 again (a no-op) takes the batch to the staged path.
    second = fact_rows([pair_fact("k1", "L1", "current", v=1),
                        pair_fact("k3", "L3", "current", v=3),
                        Fact.make("k4", "pair", "L3", "retired", {"v": 4},
                                  predecessor_key="k3")])
    legacy = fact(*("k5", "L5", "current"), v=5)[:-1] + (None,)
    with store.engine.begin() as conn:
        r = write_facts(conn, "join", [*second, legacy], 2)
    assert (r.written, r.noop) == (3, 1)
    assert [(f["fact_key"], f["predecessor_key"]) for f in store.facts("join")] == \
        [("k1", None), ("k2", "k1"), ("k3", None), ("k4", "k3"), ("k5", None)]
    store.dispose()


def test_generation_facts_leave_the_current_view_alone(store_url):
    store = Store(store_url)
    with store.engine.begin() as conn:
        write_facts(conn, "join", [fact("live", "L", "current", v=1)], 1)
    with store.engine.begin() as conn:
        r = write_facts(conn, "join", [fact("gen", "L", "current", v=2)], None,
                        generation_id="g1")
    assert r.written == 1
    [row] = store.current("join", "pair")
    assert row["fact_key"] == "live"
    assert [(f["fact_key"], f["generation_id"]) for f in store.facts("join")] == \
        [("live", None), ("gen", "g1")]
    store.dispose()


def test_current_view_when_sqlite_rowids_are_not_sequential(sqlite_url):
    # With the largest rowid taken SQLite picks new rowids at random, so the batch's facts are
    # not the rowids after the previous largest: the view rows are then bound from the batch.
    store = Store(sqlite_url)
    with store.engine.begin() as conn:
        conn.execute(S.facts.insert(), [{
            "id": 2**63 - 1, "pipeline": "join", "fact_key": "top", "kind": "pair",
            "logical_key": "T", "status": "current", "payload_hash": "h", "payload": "{}",
            "created_at": "then"}])
    with store.engine.begin() as conn:
        r = write_facts(conn, "join", [fact("a1", "L", "current", v=1),
                                       fact("b1", "M", "current", v=2),
                                       fact("a2", "L", "retired", v=3)], 1)
    assert r.written == 3
    view = {row["logical_key"]: (row["fact_key"], row["payload"])
            for row in store.current("join", "pair")}
    assert view == {"L": ("a2", '{"v":3}'), "M": ("b1", '{"v":2}')}
    assert_view_references_its_facts(store)
    store.dispose()


def test_view_rows_read_the_payload_of_the_fact_they_name(store_url):
    # Each way the view is written: a batch of new keys (SQLite: straight into the facts), a
    # batch where some keys exist (the staged path), and a published generation's corrected
    # fact pointed at by key. The readers' rows keep their columns, `payload` included.
    store = Store(store_url)
    try:
        with store.engine.begin() as conn:
            write_facts(conn, "join", [fact("a1", "A", "current", v="a1"),
                                       fact("b1", "B", "current", v="b1"),
                                       fact("a2", "A", "retired", v="a2")], 1)
        with store.engine.begin() as conn:
            write_facts(conn, "join", [fact("b1", "B", "current", v="b1"),
                                       fact("b2", "B", "retired", v="b2"),
                                       fact("c1", "C", "current", v="c1"),
                                       fact("c2", "C", "current", v="c2")], 2)
        with store.engine.begin() as conn:
            corrected = fact("a3", "A", "corrected_final", v="a3")
            write_facts(conn, "join", [corrected], None, generation_id="g1")
            upsert_view_of_facts(conn, "join", ["a3"])
        rows = store.current("join", "pair")
        assert [list(r) for r in rows] == [["pipeline", "kind", "logical_key", "fact_key",
                                            "status", "payload", "batch_seq"]] * 3
        assert [(r["logical_key"], r["fact_key"], r["status"], r["payload"], r["batch_seq"])
                for r in rows] == [("A", "a3", "corrected_final", '{"v":"a3"}', None),
                                   ("B", "b2", "retired", '{"v":"b2"}', 2),
                                   ("C", "c2", "current", '{"v":"c2"}', 2)]
        ids = {r["fact_key"]: r["id"] for r in store.facts("join")}
        view = store.rows(select(S.current_view.c.logical_key, S.current_view.c.fact_id)
                          .order_by(S.current_view.c.logical_key))
        assert [(r["logical_key"], r["fact_id"]) for r in view] == \
            [("A", ids["a3"]), ("B", ids["b2"]), ("C", ids["c2"])]
        assert_view_references_its_facts(store)
    finally:
        store.dispose()


# Batches of facts over a few fact keys and logical keys, with the payload a fact key carries
# varying so batches repeat keys as no-ops and as conflicts.
_FACTS = st.tuples(st.integers(0, 7), st.integers(0, 2), st.sampled_from(["current", "retired"]),
                   st.integers(0, 1))
_BATCHES = st.lists(st.lists(_FACTS, min_size=1, max_size=8), min_size=1, max_size=4)
_PIPELINES = itertools.count()


def _expected_view(batches: list[list[Fact]]) -> dict[str, tuple]:
    """The current view by the sink contract, from the facts alone: a fact key's first stored
    payload wins; the view holds the last fact a batch wrote of each logical key."""
    stored: set[str] = set()
    view: dict[str, tuple] = {}
    for seq, batch in enumerate(batches, 1):
        for f in batch:
            if f.fact_key not in stored:
                stored.add(f.fact_key)
                view[f.logical_key] = (f.fact_key, f.status, f.payload_json, seq)
    return view


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=_BATCHES)
def test_current_view_equals_the_last_written_fact_per_logical_key(store_url, batches):
    # One store for every example, one pipeline name per example.
    pipeline = f"prop{next(_PIPELINES)}"
    facts = [[pair_fact(f"k{k}", f"L{lk}", status, v=v) for k, lk, status, v in batch]
             for batch in batches]
    store = Store(store_url)
    try:
        for seq, batch in enumerate(facts, 1):
            with store.engine.begin() as conn:
                write_facts(conn, pipeline, fact_rows(batch), seq)
        assert {r["logical_key"]: (r["fact_key"], r["status"], r["payload"], r["batch_seq"])
                for r in store.current(pipeline, "pair")} == _expected_view(facts)
        assert_view_references_its_facts(store)
    finally:
        store.dispose()


def _expected_facts(batches: list[list[Fact]]) -> tuple[list[tuple], list[tuple]]:
    """The facts table by the sink contract, from the facts alone: within a batch the first
    fact of a key counts (a later one with its hash is a no-op, with another hash rejected);
    a batch's new keys take the next ids in batch order, a stored key's fact is a no-op or
    rejected by its hash. And per batch (written, no-op, rejected keys)."""
    stored: dict[str, str] = {}
    rows: list[tuple] = []
    results: list[tuple] = []
    for seq, batch in enumerate(batches, 1):
        first: dict[str, Fact] = {}
        noop, rejected_in_batch, rejected_stored = 0, [], []
        for f in batch:
            g = first.setdefault(f.fact_key, f)
            if g is not f:
                if g.payload_hash == f.payload_hash:
                    noop += 1
                else:
                    rejected_in_batch.append(f.fact_key)
        written = 0
        for f in first.values():
            h = stored.get(f.fact_key)
            if h is None:
                stored[f.fact_key] = f.payload_hash
                rows.append((len(rows) + 1, f.fact_key, f.logical_key, f.status,
                             f.payload_json, seq))
                written += 1
            elif h == f.payload_hash:
                noop += 1
            else:
                rejected_stored.append(f.fact_key)
        results.append((written, noop, rejected_in_batch + rejected_stored))
    return rows, results


@settings(max_examples=40, deadline=None, database=None)
@given(batches=_BATCHES)
def test_sqlite_batches_with_existing_keys_write_the_new_keys_in_batch_order(
        tmp_path_factory, batches):
    # SQLite writes a batch straight into the facts and decides the keys that existed after
    # (no savepoint to roll back to): the new keys' ids, rows and the counts must be the
    # staged path's, i.e. the contract's.
    facts = [[pair_fact(f"k{k}", f"L{lk}", status, v=v) for k, lk, status, v in batch]
             for batch in batches]
    store = Store(f"sqlite:///{tmp_path_factory.mktemp('direct')}/ops.sqlite")
    try:
        results = []
        for seq, batch in enumerate(facts, 1):
            with store.engine.begin() as conn:
                r = write_facts(conn, "join", fact_rows(batch), seq)
            results.append((r.written, r.noop, r.rejected_keys))
        f = S.facts.c
        rows = store.rows(select(f.id, f.fact_key, f.logical_key, f.status, f.payload,
                                 f.batch_seq).order_by(f.id))
        assert ([tuple(r.values()) for r in rows], results) == _expected_facts(facts)
        assert {r["logical_key"]: (r["fact_key"], r["status"], r["payload"], r["batch_seq"])
                for r in store.current("join", "pair")} == _expected_view(facts)
    finally:
        store.dispose()


def test_sqlite_view_is_written_in_bounded_statements(tmp_path, monkeypatch):
    # The view is written a chunk of facts per statement (each of the three SQLite paths);
    # with chunks of two the result is the one-statement result.
    from streaming.store import ops
    monkeypatch.setattr(ops, "SQLITE_VIEW_CHUNK", 2)
    batches = [[pair_fact(f"a{i}", f"L{i % 3}", "current", v=i) for i in range(7)],
               [pair_fact("a1", "L1", "current", v=1)]
               + [pair_fact(f"b{i}", f"L{i % 4}", "retired", v=i) for i in range(5)]]
    store = Store(f"sqlite:///{tmp_path}/ops.sqlite")
    try:
        for seq, batch in enumerate(batches, 1):
            with store.engine.begin() as conn:
                write_facts(conn, "join", fact_rows(batch), seq)
            assert {r["logical_key"]: (r["fact_key"], r["status"], r["payload"], r["batch_seq"])
                    for r in store.current("join", "pair")} == _expected_view(batches[:seq])
        with store.engine.begin() as conn:
            corrected = [pair_fact(f"c{i}", f"L{i}", "corrected_final", v=i) for i in range(5)]
            write_facts(conn, "join", fact_rows(corrected), None, generation_id="g1")
            upsert_view_of_facts(conn, "join", [c.fact_key for c in corrected])
        assert {r["logical_key"]: r["fact_key"] for r in store.current("join", "pair")} == \
            {f"L{i}": f"c{i}" for i in range(5)}
        assert_view_references_its_facts(store)
    finally:
        store.dispose()


def _checkpoint_row(seq: int) -> dict:
    return {"pipeline": "join", "journal_seq": seq, "serializer": "s", "state_schema": "x",
            "meta": "{}", "state": b"", "size_bytes": 0, "duration_ms": 0, "created_at": "now"}


def test_checkpoint_statistics_keep_the_read_back_on_the_unique_index(pg_url):
    # The checkpoint analyses the key columns only; on a filled store the read-back of
    # existing hashes must still probe the unique index, not scan every fact.
    from streaming.store.ops import READ_BACK, _stage_facts
    store = Store(pg_url)
    try:
        with store.engine.begin() as conn:  # only the checkpoint's ANALYZE, never the daemon's
            for t in ("facts", "current_view"):
                conn.exec_driver_sql(f"ALTER TABLE {t} SET (autovacuum_enabled = false)")
        for b in range(4):
            with store.engine.begin() as conn:
                write_facts(conn, "join", [fact(f"k{b}-{i}", f"L{i}", "current", v=i, b=b)
                                           for i in range(5000)], b + 1)
        store.write_checkpoint(_checkpoint_row(4))
        with store.engine.connect() as conn:
            analysed = {(r[0], r[1]) for r in conn.exec_driver_sql(
                "SELECT tablename, attname FROM pg_stats WHERE tablename IN "
                "('facts', 'current_view')")}
            sizes = dict(conn.exec_driver_sql(
                "SELECT relname, reltuples FROM pg_class WHERE relname IN "
                "('facts', 'current_view')").all())
        assert {("facts", "pipeline"), ("facts", "fact_key"), ("facts", "logical_key"),
                ("current_view", "logical_key")} <= analysed
        assert ("facts", "payload") not in analysed
        assert sizes == {"facts": 20000, "current_view": 5000}
        with store.engine.begin() as conn:
            again = [("join", f"k1-{i}", "pair", f"L{i}", "current", "h", "{}", None, 9, None,
                      "now") for i in range(100)]
            _stage_facts(conn, again)
            conn.exec_driver_sql("ANALYZE fact_stage")  # as the sink does before reading back
            plan = " ".join(r[0] for r in conn.exec_driver_sql(f"EXPLAIN {READ_BACK}"))
        assert "uq_facts_key" in plan and "Seq Scan on facts" not in plan
    finally:
        store.dispose()


def test_checkpoint_analyses_again_only_once_the_facts_grew_by_half(pg_url):
    from streaming.store.ops import ANALYZE_GROWTH
    assert ANALYZE_GROWTH == 1.5  # the sizes below are chosen around it
    store = Store(pg_url)

    def counted() -> dict:
        with store.engine.connect() as conn:
            return dict(conn.exec_driver_sql(
                "SELECT relname, reltuples FROM pg_class WHERE relname IN "
                "('facts', 'current_view')").all())

    def write(b: int, n: int) -> None:
        with store.engine.begin() as conn:
            write_facts(conn, "join", [fact(f"k{b}-{i}", f"L{b}-{i}", "current", v=i, b=b)
                                       for i in range(n)], b + 1)

    try:
        with store.engine.begin() as conn:  # only the checkpoint's ANALYZE, never the daemon's
            for t in ("facts", "current_view"):
                conn.exec_driver_sql(f"ALTER TABLE {t} SET (autovacuum_enabled = false)")
        assert counted() == {"facts": -1, "current_view": -1}  # never analysed
        write(0, 4000)
        store.write_checkpoint(_checkpoint_row(1))
        assert counted() == {"facts": 4000, "current_view": 4000}
        write(1, 2000)  # 6,000 facts: not past 1.5 x 4,000
        store.write_checkpoint(_checkpoint_row(2))
        assert counted() == {"facts": 4000, "current_view": 4000}
        write(2, 1)  # 6,001: past it
        store.write_checkpoint(_checkpoint_row(3))
        assert counted() == {"facts": 6001, "current_view": 6001}
    finally:
        store.dispose()


def test_batch_work_mem_is_local_to_the_batch_transaction(pg_url):
    from streaming.store.ops import batch_work_mem
    BATCH_WORK_MEM = batch_work_mem()
    store = Store(pg_url)
    try:
        with store.engine.connect() as conn:
            server = conn.exec_driver_sql("SHOW work_mem").scalar()
            conn.commit()
            assert server != BATCH_WORK_MEM  # else the test could not tell them apart
            with conn.begin():
                r = write_facts(conn, "join", [fact("k1", "L1", "current", v=1)], 1)
                inside = conn.exec_driver_sql("SHOW work_mem").scalar()
            after = conn.exec_driver_sql("SHOW work_mem").scalar()
            conn.commit()
        assert r.written == 1
        assert (inside, after) == (BATCH_WORK_MEM, server)
    finally:
        store.dispose()


@settings(max_examples=25, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=_BATCHES, hinted=st.booleans())
def test_postgresql_copies_a_batch_of_new_keys_and_stages_one_with_existing_keys(
        pg_url, monkeypatch, batches, hinted):
    # PostgreSQL COPYs a batch straight into the facts when every key is new, and otherwise
    # rolls the COPY back and takes the staged path: either way the facts, the counts and the
    # view are the contract's. Every batch is let try the COPY here (the store tries it from
    # 64 facts on). `hinted`: the view rows are tried as plain inserts first, every other
    # batch after a miss (ViewInserts), which must leave the same view.
    from streaming.store import ops
    monkeypatch.setattr(ops, "_COPY_MIN_ROWS", 1)
    tried: list[tuple[str, bool]] = []
    copy = ops._copy_if_all_new

    def spy(conn, table, cols, params):
        done = copy(conn, table, cols, params)
        tried.append((table, done))
        return done

    monkeypatch.setattr(ops, "_copy_if_all_new", spy)
    pipeline = f"copy{next(_PIPELINES)}"
    facts = [[pair_fact(f"k{k}", f"L{lk}", status, v=v) for k, lk, status, v in batch]
             for batch in batches]
    hints = ops.ViewInserts(retry_after=1) if hinted else None
    store = Store(pg_url)
    try:
        results = []
        for batch in facts:
            with store.engine.begin() as conn:
                r = write_facts(conn, pipeline, fact_rows(batch), len(results) + 1,
                                view_inserts=hints)
            results.append((r.written, r.noop, r.rejected_keys))
        f = S.facts.c
        rows = store.rows(select(f.fact_key, f.logical_key, f.status, f.payload, f.batch_seq)
                          .where(f.pipeline == pipeline).order_by(f.id))
        want_rows, want_results = _expected_facts(facts)
        assert ([tuple(r.values()) for r in rows], results) == \
            ([row[1:] for row in want_rows], want_results)
        assert {r["logical_key"]: (r["fact_key"], r["status"], r["payload"], r["batch_seq"])
                for r in store.current(pipeline, "pair")} == _expected_view(facts)
        assert_view_references_its_facts(store)
        # The COPY held exactly for the batches none of whose keys was stored before.
        stored: set[str] = set()
        all_new = []
        for batch in facts:
            keys = {x.fact_key for x in batch}
            all_new.append(not keys & stored)
            stored |= keys
        assert [done for table, done in tried if table == "facts"] == all_new
    finally:
        store.dispose()


def test_postgresql_view_rows_of_new_keys_go_in_as_plain_inserts(pg_url, monkeypatch):
    # A kind whose view rows were all new keys is tried as a plain insert again; one that met
    # an existing key is upserted for `retry_after` batches, then tried again. A plain insert
    # that meets a key is rolled back and upserted. The view ends the same either way.
    from streaming.store import ops
    monkeypatch.setattr(ops, "_COPY_MIN_ROWS", 1)
    plain: list[list[int]] = []
    view_of_ids = ops._pg_view_of_ids

    def spy(conn, ids, upsert=True):
        if not upsert:
            plain.append(sorted(ids))
        view_of_ids(conn, ids, upsert)

    monkeypatch.setattr(ops, "_pg_view_of_ids", spy)

    def row(key: str, kind: str, logical: str, status: str) -> tuple:
        payload = f'{{"k":"{key}"}}'
        return (key, kind, logical, status, digest(payload), payload, "")

    hints = ops.ViewInserts(retry_after=2)
    batches = [
        [row("p1", "pair", "A", "current"), row("p2", "pair", "B", "current"),
         row("o1", "outcome", "X", "provisional")],
        [row("p3", "pair", "C", "current"), row("o2", "outcome", "X", "final")],  # X exists
        [row("p4", "pair", "D", "current"), row("o3", "outcome", "Y", "provisional")],
        [row("p5", "pair", "A", "retired"), row("o4", "outcome", "Z", "provisional")],  # A exists
        [row("p6", "pair", "E", "current"), row("o5", "outcome", "Y", "final")],
    ]
    store = Store(pg_url)
    try:
        tried = []
        for seq, batch in enumerate(batches, 1):
            plain.clear()
            with store.engine.begin() as conn:
                r = write_facts(conn, "hinted", batch, seq, view_inserts=hints)
            assert r.written == len(batch)
            by_id = {x["id"]: x["fact_key"] for x in store.rows(
                select(S.facts.c.fact_key, S.facts.c.id).where(S.facts.c.pipeline == "hinted"))}
            tried.append([[by_id[i] for i in attempt] for attempt in plain])
        assert tried == [
            [["p1", "p2"], ["o1"]],  # both kinds new: tried
            [["p3"], ["o2"]],  # the outcome attempt meets X: rolled back, upserted
            [["p4"]],  # outcomes upserted (1 of 2 batches)
            [["p5"]],  # the pair attempt meets A; outcomes upserted (2 of 2)
            [["o5"]],  # pairs upserted now; outcomes tried again (and meet Y)
        ]
        view = {(r["kind"], r["logical_key"]): (r["fact_key"], r["status"])
                for r in store.rows(select(S.current_view).where(
                    S.current_view.c.pipeline == "hinted"))}
        assert view == {("pair", "A"): ("p5", "retired"), ("pair", "B"): ("p2", "current"),
                        ("pair", "C"): ("p3", "current"), ("pair", "D"): ("p4", "current"),
                        ("pair", "E"): ("p6", "current"),
                        ("outcome", "X"): ("o2", "final"), ("outcome", "Y"): ("o5", "final"),
                        ("outcome", "Z"): ("o4", "provisional")}
        assert_view_references_its_facts(store)
    finally:
        store.dispose()


def test_postgresql_copies_new_archive_rows_and_stages_rows_already_there(pg_url):
    from streaming.operators.base import ARCHIVE_ROW
    from streaming.store.ops import DO_NOTHING, _bulk_tuples

    def rows(offsets):
        return [("join", "payments", 0, o, f"p-{o}", 1, "m-1", o, o, '{"x":1}', "h",
                 "accepted", 1) for o in offsets]

    store = Store(pg_url)
    try:
        with store.engine.begin() as conn:
            assert _bulk_tuples(conn, S.archive, ARCHIVE_ROW, rows(range(100)), DO_NOTHING) == 100
        # A replayed batch: its rows are there already, and ten new ones follow them.
        with store.engine.begin() as conn:
            assert _bulk_tuples(conn, S.archive, ARCHIVE_ROW, rows(range(110)), DO_NOTHING) == 10
        a = S.archive.c
        assert [r["offset"] for r in store.rows(select(a.offset).order_by(a.offset))] == \
            list(range(110))
    finally:
        store.dispose()
