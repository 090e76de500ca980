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


def _table_names(url: str) -> list[str]:
    engine = create_engine(normalize_url(url))
    try:
        with engine.connect() as conn:
            return inspect(conn).get_table_names()
    finally:
        engine.dispose()


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
    assert _table_names(pg_url) == []


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


def test_dagster_store_resource_refuses_a_missing_store(tmp_path):
    from orchestration.resources import StoreResource
    path = tmp_path / "absent" / "ops.sqlite"
    with pytest.raises(StoreMissing, match=f"no riskstream store at sqlite:///{path}"):
        StoreResource(url=f"sqlite:///{path}").open()
    assert not path.parent.exists()


def test_dagster_store_resource_refuses_an_empty_postgres_database(pg_url):
    from orchestration.resources import StoreResource
    with pytest.raises(StoreMissing, match="no riskstream store at"):
        with StoreResource(url=pg_url).session():
            pass
    assert _table_names(pg_url) == []


def test_rebuild_command_refuses_a_missing_store(tmp_path):
    from orchestration.cli import rebuild
    path = tmp_path / "absent" / "ops.sqlite"
    res = CliRunner().invoke(rebuild, ["--merchant", "m1", "--from", "2026-10-06T09:00:00Z",
                                       "--to", "2026-10-06T10:00:00Z", "--store",
                                       f"sqlite:///{path}", "--warehouse",
                                       str(tmp_path / "wh.duckdb")])
    assert res.exit_code == STORE_MISSING_EXIT, res.output
    assert f"error: no riskstream store at sqlite:///{path}" in res.output
    assert not path.parent.exists() and not (tmp_path / "wh.duckdb").exists()


def test_repair_sensor_waits_for_a_missing_store(tmp_path):
    from dagster import SkipReason, build_sensor_context

    from orchestration.resources import StoreResource
    from orchestration.sensors import ledger_repair_sensor
    path = tmp_path / "ops.sqlite"
    result = ledger_repair_sensor(build_sensor_context(
        resources={"store": StoreResource(url=f"sqlite:///{path}")}))
    assert isinstance(result, SkipReason) and "no riskstream store at" in result.skip_message
    assert not path.exists()
