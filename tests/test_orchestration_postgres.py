"""The join repair with the Dagster instance stored in PostgreSQL (dagster-postgres), configured
by the checked-in deploy/dagster.postgres.yaml, launched as `riskstream repair run` against a
PostgreSQL operational store."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from streaming import join_published as P
from streaming.store.ops import Store
from tests.conftest import PG_ADMIN_DSN
from tests.orchestration_helpers import fresh_warehouse, live_seed, prepared_manifest

pytestmark = [pytest.mark.dagster, pytest.mark.postgres]
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def dagster_pg_db(pg_url):
    import psycopg
    name = f"rs_dagster_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(PG_ADMIN_DSN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield name
    with psycopg.connect(PG_ADMIN_DSN, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_repair_run_with_the_instance_in_postgresql(seed_dir, pg_url, dagster_pg_db, tmp_path):
    from dagster import DagsterInstance, DagsterRunStatus
    prepared_manifest()
    src, manifest = seed_dir
    old = manifest["cases"]["old_correction"]
    live_seed(src, pg_url)
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(ROOT / "deploy" / "dagster.postgres.yaml", home / "dagster.yaml")
    env = {**os.environ, "DAGSTER_HOME": str(home), "DAGSTER_PG_USERNAME": "postgres",
           "DAGSTER_PG_PASSWORD": "", "DAGSTER_PG_HOST": "127.0.0.1",
           "DAGSTER_PG_DB": dagster_pg_db, "DO_NOT_TRACK": "1",
           "RISKSTREAM_DUCKDB_PATH": fresh_warehouse()}
    proc = subprocess.run([sys.executable, "-m", "streaming.cli.main", "repair", "run",
                           "--store", pg_url], env=env, capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert "-> success" in proc.stdout
    store = Store(pg_url)
    [gen] = P.generation_rows(store)
    assert (gen["status"], gen["interval_start"], gen["interval_end"]) == (
        "published", old["old_event_time"], old["new_event_time"])
    assert [q["status"] for q in store.queue("join")] == ["processed"]
    signals = {r["signal_id"] for r in P.published_pairs(store)
               if r["payment_id"] == old["payment_id"]}
    assert old["gains"] in signals and old["loses"] not in signals
    store.dispose()
    # The run is recorded in the PostgreSQL-backed instance.
    os.environ["DAGSTER_PG_DB"] = dagster_pg_db
    try:
        for k in ("DAGSTER_PG_USERNAME", "DAGSTER_PG_PASSWORD", "DAGSTER_PG_HOST"):
            os.environ[k] = env[k]
        instance = DagsterInstance.from_config(str(home))
        try:
            assert type(instance.run_storage).__name__ == "PostgresRunStorage"
            runs = instance.get_runs()
            assert [(r.job_name, r.status) for r in runs] == [
                ("replay_rebuild", DagsterRunStatus.SUCCESS)]
            assert runs[0].tags["riskstream/queue_date"] == old["new_event_time"][:10]
            assert runs[0].tags["riskstream/merchant"] == old["merchant"]
            assert runs[0].tags["riskstream/generation"] == gen["generation_id"]
        finally:
            instance.dispose()
    finally:
        for k in ("DAGSTER_PG_DB", "DAGSTER_PG_USERNAME", "DAGSTER_PG_PASSWORD",
                  "DAGSTER_PG_HOST"):
            os.environ.pop(k, None)
