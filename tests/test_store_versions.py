"""Store schema versions (Alembic), on SQLite and PostgreSQL: a new store is created by the
migrations and equals the metadata (compare_metadata finds nothing), readers never create a
store, a store at a revision this release does not know is refused with both revisions named,
two first starts on one empty store do not race, and a store created before versioning is
adopted as revision 0001 and migrated with its data kept."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from sqlalchemy import insert, inspect, select, text

from streaming.store import schema as S
from streaming.store import tables  # noqa: F401  (every table on the metadata)
from streaming.store.ops import Store, make_engine, open_store
from streaming.store.versions import (
    FIRST_REVISION,
    VERSION_TABLE,
    StoreVersionError,
    head_revision,
    store_revision,
)

from .joinutil import pay, sig, write_log

ROOT = Path(__file__).resolve().parents[1]


def schema_diff(url: str) -> list:
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            mc = MigrationContext.configure(conn, opts={"compare_type": True,
                                                        "version_table": VERSION_TABLE})
            return compare_metadata(mc, S.metadata)
    finally:
        engine.dispose()


def revision_of(url: str) -> str | None:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            return store_revision(conn)
    finally:
        engine.dispose()


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "streaming.cli.main", *args],
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
                          text=True, timeout=120)


def test_new_store_is_created_at_head_and_equals_the_metadata(store_factory):
    url = store_factory()
    Store(url).dispose()
    assert revision_of(url) == head_revision()
    assert schema_diff(url) == []
    # Opening it again reads the revision and changes nothing.
    st = Store(url)
    with st.engine.connect() as conn:
        assert conn.execute(text(f"SELECT count(*) FROM {VERSION_TABLE}")).scalar() == 1
    st.dispose()


def test_readers_never_create_a_store(store_factory, tmp_path):
    url = store_factory()
    out = cli("join", "pairs", "--store", url)
    assert out.returncode == 7 and out.stdout == ""
    assert out.stderr.startswith("error: no riskstream store at ")
    assert len(out.stderr.strip().splitlines()) == 1
    if url.startswith("sqlite"):
        assert not os.path.exists(url.split("///", 1)[1])
    else:
        engine = make_engine(url)
        with engine.connect() as conn:
            assert inspect(conn).get_table_names() == []
        engine.dispose()
    with pytest.raises(StoreVersionError, match="there is no store"):
        open_store(url)


def test_a_run_creates_the_store_and_store_upgrade_is_idempotent(store_factory, tmp_path):
    url = store_factory()
    src = write_log(tmp_path / "src", {("payments", 0): [pay("p1", "m1", 0)],
                                       ("risk_signals", 0): [sig("s1", "m1", 1)]})
    out = cli("join", "run", "--source", src, "--store", url, "--end-of-stream")
    assert out.returncode == 0, out.stderr
    out = cli("store", "upgrade", "--store", url)
    assert out.returncode == 0, out.stderr
    assert f"is at revision {head_revision()} (head {head_revision()})" in out.stdout
    out = cli("join", "pairs", "--store", url)
    assert out.returncode == 0 and "p1,s1," in out.stdout


def test_newer_revision_is_refused_naming_both(store_factory, tmp_path):
    url = store_factory()
    Store(url).dispose()
    engine = make_engine(url)
    with engine.begin() as conn:
        conn.execute(text(f"UPDATE {VERSION_TABLE} SET version_num = '9999_future'"))
    engine.dispose()
    for schema in ("create", "upgrade", "existing"):
        with pytest.raises(StoreVersionError) as exc:
            Store(url, schema=schema)
        assert "9999_future" in str(exc.value) and head_revision() in str(exc.value)
    src = write_log(tmp_path / "src", {("payments", 0): [pay("p1", "m1", 0)]})
    for args in (("join", "run", "--source", src, "--store", url),
                 ("join", "pairs", "--store", url), ("store", "upgrade", "--store", url)):
        out = cli(*args)
        assert out.returncode == 9, (args, out.stderr)
        (line,) = out.stderr.strip().splitlines()
        assert "revision 9999_future" in line and f"newest is {head_revision()}" in line
    # Nothing was written by the refused run.
    engine = make_engine(url)
    with engine.connect() as conn:
        assert conn.execute(select(S.journal)).all() == []
    engine.dispose()


@pytest.mark.timeout(120)  # without the migration lock the starters block each other
def test_two_first_starts_on_an_empty_store_do_not_race(store_factory):
    url = store_factory()
    barrier = threading.Barrier(4)
    errors: list[BaseException] = []

    def first_start() -> None:
        barrier.wait()
        try:
            Store(url, schema="upgrade").dispose()
        except BaseException as exc:  # noqa: BLE001  (reported below)
            errors.append(exc)

    threads = [threading.Thread(target=first_start) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert revision_of(url) == head_revision()
    assert schema_diff(url) == []


def test_a_store_created_between_the_revisions_reads_is_read_at_its_revision(pg_url):
    # The interleaving behind a first start refused as "revision 0001" on PostgreSQL: another
    # process creates the store (tables and version row in one commit) right after the
    # reader's first statement. The reader must then see the store at head, not as one from
    # before versioning. (On SQLite the reader's open statement keeps the creator's write
    # waiting, so this interleaving cannot be staged there.)
    from sqlalchemy import event

    url = pg_url
    reader = make_engine(url)
    created: list[str] = []

    def create_once(*_args) -> None:
        if not created:
            created.append("yes")
            Store(url, schema="upgrade").dispose()

    event.listen(reader, "after_cursor_execute", create_once)
    try:
        with reader.connect() as conn:
            rev = store_revision(conn)
    finally:
        event.remove(reader, "after_cursor_execute", create_once)
        reader.dispose()
    assert created == ["yes"]
    assert rev == head_revision()


def test_store_at_0001_is_refused_then_upgraded_with_its_data(store_factory):
    """A store at revision 0001 with rows in it: opening it for writing or reading is refused
    (older), `riskstream store upgrade` migrates it to head, and the rows are still there."""
    from alembic import command

    from streaming.store.versions import alembic_config
    url = store_factory()
    engine = make_engine(url)
    cfg = alembic_config()
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, FIRST_REVISION)
        conn.execute(insert(S.facts), [{
            "pipeline": "join", "fact_key": "k1", "kind": "pair", "logical_key": "p1|s1",
            "status": "current", "payload_hash": "h", "payload": "{}", "created_at": "t"}])
    engine.dispose()
    assert revision_of(url) == FIRST_REVISION != head_revision()
    for schema in ("create", "existing"):
        with pytest.raises(StoreVersionError, match=f"revision {FIRST_REVISION}, older than "
                                                    f"this release's {head_revision()}"):
            Store(url, schema=schema)
    out = cli("join", "pairs", "--store", url)
    assert out.returncode == 9 and "riskstream store upgrade" in out.stderr
    out = cli("store", "upgrade", "--store", url)
    assert out.returncode == 0, out.stderr
    assert revision_of(url) == head_revision()
    assert schema_diff(url) == []
    st = Store(url, schema="existing")
    try:
        assert [f["fact_key"] for f in st.facts("join")] == ["k1"]
    finally:
        st.dispose()


def test_store_created_before_versioning_is_adopted_and_kept(store_factory):
    """A store made by `create_all` of the first versioned schema (no version table) counts as
    revision 0001; upgrading stamps it and migrates it to head with its rows kept."""
    from alembic import command
    from alembic.runtime.migration import MigrationContext

    from streaming.store.versions import alembic_config
    url = store_factory()
    engine = make_engine(url)
    cfg = alembic_config()
    with engine.begin() as conn:  # the 0001 schema, then drop the version table
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, FIRST_REVISION)
        conn.execute(text(f"DROP TABLE {VERSION_TABLE}"))
        conn.execute(insert(S.journal), [{
            "pipeline": "join", "seq": 1, "ranges": "{}", "order_runs": "[]", "idleness": "[]",
            "records": 0, "clock_us": 0, "end_of_stream": False, "committed_at": "t"}])
    with engine.connect() as conn:
        assert MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE}
                                          ).get_current_revision() is None
        assert store_revision(conn) == FIRST_REVISION
    engine.dispose()
    if head_revision() != FIRST_REVISION:
        with pytest.raises(StoreVersionError, match=f"revision {FIRST_REVISION}, older"):
            Store(url)
    st = Store(url, schema="upgrade")
    try:
        assert [r["seq"] for r in st.journal_after("join", 0)] == [1]
    finally:
        st.dispose()
    assert revision_of(url) == head_revision()
    assert schema_diff(url) == []


def _store_at(url: str, revision: str):
    """An engine on a new store migrated to `revision` only."""
    from alembic import command

    from streaming.store.versions import alembic_config
    engine = make_engine(url)
    cfg = alembic_config()
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)
    return engine


# Facts of two pipelines that share fact keys, and the current view as revision 0003 held it:
# a copy of each fact's payload.
_FACTS_0003 = [("join", "k1", "pair", "p1|s1", "current", '{"v":1}', 1),
               ("join", "k2", "pair", "p1|s1", "retired", '{"v":2}', 2),
               ("join", "k3", "outcome", "p1", "final", '{"v":3}', 2),
               ("ledger", "k1", "window", "a|w", "current", '{"v":4}', None)]
_VIEW_0003 = [("join", "pair", "p1|s1", "k2", "retired", '{"v":2}', 2),
              ("join", "outcome", "p1", "k3", "final", '{"v":3}', 2),
              ("ledger", "window", "a|w", "k1", "current", '{"v":4}', None)]
_VIEW_COLUMNS = ("pipeline", "kind", "logical_key", "fact_key", "status", "payload",
                 "batch_seq")


def _fill_0003(conn, view=_VIEW_0003) -> None:
    conn.execute(text(
        "INSERT INTO facts (pipeline, fact_key, kind, logical_key, status, payload_hash, "
        "payload, batch_seq, created_at) VALUES (:p, :k, :kind, :lk, :st, 'h', :pl, :seq, "
        "'t')"), [dict(zip(("p", "k", "kind", "lk", "st", "pl", "seq"), f, strict=True))
                  for f in _FACTS_0003])
    conn.execute(text(
        f"INSERT INTO current_view ({', '.join(_VIEW_COLUMNS)}) VALUES (:pipeline, :kind, "
        ":logical_key, :fact_key, :status, :payload, :batch_seq)"),
        [dict(zip(_VIEW_COLUMNS, r, strict=True)) for r in view])


def test_store_at_0003_with_a_current_view_is_upgraded_to_fact_ids(store_factory):
    """The view's payload copy becomes the id of the fact with the row's (pipeline, fact_key);
    its readers return the rows they returned before the upgrade."""
    url = store_factory()
    engine = _store_at(url, "0003")
    with engine.begin() as conn:
        _fill_0003(conn)
    engine.dispose()
    assert revision_of(url) == "0003"
    out = cli("store", "upgrade", "--store", url)
    assert out.returncode == 0, out.stderr
    assert revision_of(url) == head_revision()
    assert schema_diff(url) == []
    st = Store(url, schema="existing")
    try:
        for pipeline, kind in (("join", "pair"), ("join", "outcome"), ("ledger", "window")):
            assert [tuple(r.values()) for r in st.current(pipeline, kind)] == \
                [r for r in _VIEW_0003 if r[:2] == (pipeline, kind)]
        ids = {(f["pipeline"], f["fact_key"]): f["id"]
               for p in ("join", "ledger") for f in st.facts(p)}
        v = S.current_view.c
        assert {(r["pipeline"], r["fact_key"]): r["fact_id"]
                for r in st.rows(select(v.pipeline, v.fact_key, v.fact_id))} == \
            {(r[0], r[3]): ids[(r[0], r[3])] for r in _VIEW_0003}
    finally:
        st.dispose()


def test_a_view_row_without_its_fact_stops_the_upgrade_unchanged(store_factory):
    url = store_factory()
    engine = _store_at(url, "0003")
    with engine.begin() as conn:
        _fill_0003(conn, _VIEW_0003 + [("join", "pair", "p9|s9", "gone", "current", "{}", 3)])
    engine.dispose()
    with pytest.raises(StoreVersionError, match=re.escape("join/pair/p9|s9/gone")):
        Store(url, schema="upgrade")
    assert revision_of(url) == "0003"
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            assert {c["name"] for c in inspect(conn).get_columns("current_view")} == \
                set(_VIEW_COLUMNS)
            assert conn.execute(text("SELECT count(*) FROM current_view")).scalar() == 4
    finally:
        engine.dispose()


def test_downgrade_from_0004_copies_the_payloads_back(store_factory):
    from alembic import command

    from streaming.store.versions import alembic_config
    url = store_factory()
    engine = _store_at(url, "0003")
    with engine.begin() as conn:
        _fill_0003(conn)
    cfg = alembic_config()
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0004")
        command.downgrade(cfg, "0003")
    try:
        with engine.connect() as conn:
            assert sorted(tuple(r) for r in conn.execute(text(
                f"SELECT {', '.join(_VIEW_COLUMNS)} FROM current_view"))) == \
                sorted(_VIEW_0003, key=lambda r: tuple(map(str, r)))
    finally:
        engine.dispose()
