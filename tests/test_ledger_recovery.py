"""Failure handling of `riskstream ledger run` (subprocesses, since a crash is os._exit):
a crash after candidates restores to exactly one committed revision per key, a checkpoint of
another serializer/schema version stops the worker with the store unchanged, and PostgreSQL
without a repair key is refused before anything is read or written."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
import zlib

import orjson
import pytest

from riskstream_tools.workloads.ledger_seed import generate
from streaming.store import schema as S
from streaming.store.ops import Store
from streaming.store.tables_ledger import ledger_repair_requests

from .conftest import PG_ADMIN_DSN, need_service
from .ledgerutil import ENV_KEY, cli, facts_digest, run_ledger, windows


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    out = tmp_path_factory.mktemp("ledger_recovery")
    generate(23, str(out), payments=300)
    return str(out)


@pytest.fixture(scope="module")
def uninterrupted(source, tmp_path_factory):
    url = f"sqlite:///{tmp_path_factory.mktemp('ledger_clean')}/clean.sqlite"
    run_ledger(source, url, checkpoint_every=60, batch_size=30)
    store = Store(url)
    try:
        return facts_digest(store), windows(url)
    finally:
        store.dispose()


# K is chosen so that each point fires mid-log (batches of 30, a checkpoint every 60 records).
@pytest.mark.parametrize("point", ["after-candidate:7", "after-sink-write:7", "before-ack:5",
                                   "during-checkpoint:3"])
def test_crash_then_restore_gives_one_revision_per_key(source, store_url, uninterrupted, point):
    crashed = cli("run", "--source", source, "--store", store_url, "--quiet",
                  "--checkpoint-every", "60", "--batch-size", "30",
                  "--crash-at", point, env=ENV_KEY)
    assert crashed.returncode == 137, crashed.stderr
    assert f"crash injected at {point}" in crashed.stderr
    resumed = cli("run", "--source", source, "--store", store_url, "--quiet",
                  "--checkpoint-every", "60", "--batch-size", "30", env=ENV_KEY)
    assert resumed.returncode == 0, resumed.stderr
    assert "process: healthy (restored from checkpoint" in resumed.stdout
    assert "freshness: " in resumed.stdout
    want_digest, want_windows = uninterrupted
    got = Store(store_url)
    try:
        assert facts_digest(got) == want_digest
        assert got.sink_exception_rows("ledger") == []
        hist = windows(store_url, True)
        per_key: dict[str, list[int]] = {}
        for r in hist:
            per_key.setdefault(f"{r['account_id']}|{r['event_hour']}", []).append(r["revision"])
        # One committed row per account|hour|revision, revisions 1..n without gaps.
        assert all(v == list(range(1, len(v) + 1)) for v in per_key.values())
        assert len(hist) == len({r["fact_key"] for r in hist}) > 100
        assert windows(store_url) == want_windows
        # The restored worker's first snapshots say it is healthy but behind in event time.
        trace = got.metrics_trace("ledger")
        restored = [m for m in trace if m["process"]["restored_from_checkpoint"]]
        assert restored and restored[0]["health"]["freshness"].startswith("behind by")
        assert restored[-1]["health"]["process"].startswith("healthy (restored from checkpoint")
    finally:
        got.dispose()


def _table_state(store: Store) -> tuple[dict, tuple]:
    return store.table_counts(), facts_digest(store)


def test_serializer_mismatch_stops_before_reading_or_writing(source, store_url):
    run_ledger(source, store_url, checkpoint_every=100)
    store = Store(store_url)
    try:
        latest = store.latest_checkpoint("ledger")
        row = {k: latest[k] for k in ("pipeline", "journal_seq", "meta", "size_bytes",
                                       "duration_ms", "created_at")}
        row.update(serializer="pickle/0", state_schema="ledger/1",
                   state=zlib.compress(b"not ours"))
        store.write_checkpoint(row)
        before = _table_state(store)
        res = cli("run", "--source", source, "--store", store_url, "--quiet", env=ENV_KEY)
        assert res.returncode == 3
        assert "serializer 'pickle/0'" in res.stderr and "Refusing to start" in res.stderr
        assert _table_state(store) == before
        # Another state-schema version is refused the same way.
        row.update(serializer="orjson+zlib/1", state_schema="ledger/0")
        store.write_checkpoint(row)
        before = _table_state(store)
        res = cli("run", "--source", source, "--store", store_url, "--quiet", env=ENV_KEY)
        assert res.returncode == 3 and "state schema 'ledger/0'" in res.stderr
        assert _table_state(store) == before
    finally:
        store.dispose()


def test_postgresql_without_repair_key_is_refused(source):
    need_service("PostgreSQL", "127.0.0.1", 5432)
    import psycopg
    name = f"rs_test_{uuid.uuid4().hex[:12]}"
    url = PG_ADMIN_DSN.rsplit("/", 1)[0] + f"/{name}"
    with psycopg.connect(PG_ADMIN_DSN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        env = {k: v for k, v in os.environ.items() if k != "RISKSTREAM_REPAIR_KEY"}
        res = subprocess.run([sys.executable, "-m", "streaming.cli.main", "ledger", "run",
                              "--source", source, "--store", url, "--quiet"],
                             capture_output=True, text=True, env=env, timeout=60)
        assert res.returncode == 5
        assert "RISKSTREAM_REPAIR_KEY is not set" in res.stderr
        with psycopg.connect(url) as conn:
            tables = conn.execute("select count(*) from information_schema.tables "
                                  "where table_schema = 'public'").fetchone()[0]
        assert tables == 0  # not even the schema was created
    finally:
        with psycopg.connect(PG_ADMIN_DSN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_sqlite_without_key_uses_dev_key_and_says_so(source, sqlite_url):
    env = {k: v for k, v in os.environ.items() if k != "RISKSTREAM_REPAIR_KEY"}
    res = subprocess.run([sys.executable, "-m", "streaming.cli.main", "ledger", "run",
                          "--source", source, "--store", sqlite_url, "--quiet"],
                         capture_output=True, text=True, env=env, timeout=60)
    assert res.returncode == 0, res.stderr
    store = Store(sqlite_url)
    try:
        settings = orjson.loads(store.rows(S.runs.select())[0]["settings"])
        assert settings["repair_key"] == "dev (RISKSTREAM_REPAIR_KEY unset)"
        assert (settings["watermark_delay"], settings["retention"],
                settings["max_backlog_age"]) == ("5m", "1h00m", "15m")
        meta = orjson.loads(store.checkpoints("ledger")[-1]["meta"])
        assert meta["reference_versions"]["repair_key"] == "dev (RISKSTREAM_REPAIR_KEY unset)"
        keys = {r["key_source"] for r in store.rows(ledger_repair_requests.select())}
        assert keys == {"dev"}
    finally:
        store.dispose()
