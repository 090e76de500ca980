"""Read, judge and repair commands on a missing or uninitialized store: `no riskstream store
at ...`, a non-zero exit, and nothing created (neither a file nor a table)."""

from __future__ import annotations

import os

import pytest
from click.testing import CliRunner
from sqlalchemy import create_engine, inspect

from streaming.cli.main import cli
from streaming.store.ops import normalize_url
from streaming.store.presence import StoreMissing, check_store, shown_url

STORE_MISSING_EXIT = 7

# Every command that opens an existing store: reads, gates, reconciliations, repairs.
READ_COMMANDS = [
    ["metrics"],
    ["metrics", "--trace"],
    ["queue", "list"],
    ["join", "pairs"],
    ["join", "pairs", "--published"],
    ["join", "outcomes"],
    ["ledger", "windows"],
    ["ledger", "reconcile"],
    ["ledger", "repair"],
    ["receipts", "decisions"],
    ["receipts", "release"],
    ["receipts", "reconcile"],
    ["receipts", "incident"],
    ["receipts", "reference-check"],
    ["receipts", "rescore", "--model", "m0"],
    ["generations", "list"],
    ["repair", "run"],
    ["exceptions", "list"],
    ["exceptions", "resolve", "--id", "sx-1", "--decision", "keep-existing", "--by", "ops",
     "--reason", "x"],
]


def _run(args, store_url, tmp_path):
    env = {"RISKSTREAM_MODEL_DIR": str(tmp_path / "models"), "RISKSTREAM_REPAIR_KEY": "k1",
           "RISKSTREAM_DUCKDB_PATH": str(tmp_path / "wh.duckdb")}
    return CliRunner().invoke(cli, args + ["--store", store_url], env=env)


@pytest.mark.parametrize("args", READ_COMMANDS, ids=lambda a: " ".join(a))
def test_missing_sqlite_store_is_refused_and_not_created(args, tmp_path):
    path = tmp_path / "no-such-dir" / "no-such-store.sqlite"
    res = _run(args, f"sqlite:///{path}", tmp_path)
    assert res.exit_code == STORE_MISSING_EXIT, res.output
    assert f"no riskstream store at sqlite:///{path}" in res.output
    assert not path.exists() and not path.parent.exists()
    assert not (tmp_path / "wh.duckdb").exists()


@pytest.mark.parametrize("args", [["metrics"], ["receipts", "release"], ["ledger", "windows"]],
                         ids=lambda a: " ".join(a))
def test_uninitialized_sqlite_file_is_refused_and_left_untouched(args, tmp_path):
    path = tmp_path / "empty.sqlite"
    path.write_bytes(b"")
    res = _run(args, f"sqlite:///{path}", tmp_path)
    assert res.exit_code == STORE_MISSING_EXIT, res.output
    assert "holds no riskstream tables" in res.output
    assert path.read_bytes() == b""
    assert sorted(os.listdir(tmp_path)) == ["empty.sqlite"]


@pytest.mark.parametrize("args", [["metrics"], ["join", "pairs"], ["receipts", "release"],
                                  ["ledger", "repair"]], ids=lambda a: " ".join(a))
def test_empty_postgres_database_is_refused_and_gets_no_tables(args, pg_url, tmp_path):
    res = _run(args, pg_url, tmp_path)
    assert res.exit_code == STORE_MISSING_EXIT, res.output
    assert "no riskstream store at" in res.output
    engine = create_engine(normalize_url(pg_url))
    try:
        with engine.connect() as conn:
            assert inspect(conn).get_table_names() == []
    finally:
        engine.dispose()


def test_missing_postgres_database_is_refused(pg_url, tmp_path):
    url = pg_url + "_absent"
    res = _run(["join", "outcomes"], url, tmp_path)
    assert res.exit_code == STORE_MISSING_EXIT, res.output
    assert "no riskstream store at" in res.output and "cannot open it" in res.output


def test_an_initialized_store_opens(store_url):
    from streaming.store.ops import Store
    Store(store_url).dispose()
    check_store(store_url)  # no exception
    with pytest.raises(StoreMissing):
        check_store("sqlite:///:memory:")


def test_shown_url_hides_the_whole_password():
    assert shown_url("postgresql://u:p@ss@SECRET@127.0.0.1:5432/db") == \
        "postgresql://***@127.0.0.1:5432/db"
    assert shown_url("sqlite:///a@b/ops.sqlite") == "sqlite:///a@b/ops.sqlite"
