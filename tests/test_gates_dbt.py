"""The dbt release gates fail closed: on a store no pipeline has read anything into there is no
gate row, and the build fails (`not_empty`) instead of passing on nothing."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from orchestration.warehouse import ingest
from streaming.store.ops import Store

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.dagster


def test_release_gates_fail_on_an_empty_store(tmp_path):
    project = tmp_path / "dbt_project"
    shutil.copytree(ROOT / "dbt_project", project,
                    ignore=shutil.ignore_patterns("target", "logs", ".user.yml"))
    env = {**os.environ, "RISKSTREAM_DBT_PROJECT_DIR": str(project), "DO_NOT_TRACK": "1",
           "RISKSTREAM_DUCKDB_PATH": str(tmp_path / "warehouse.duckdb")}
    subprocess.run([sys.executable, "-m", "orchestration.prepare_dbt"], env=env, check=True,
                   capture_output=True, timeout=180)
    store = Store(f"sqlite:///{tmp_path}/ops.sqlite")  # initialized, nothing read
    with duckdb.connect(str(tmp_path / "warehouse.duckdb")) as con:
        counts = ingest(store, con)
    store.dispose()
    assert counts["facts"] == 0 and counts["archive"] == 0
    dbt = Path(sys.executable).with_name("dbt")
    out = subprocess.run([str(dbt), "build", "--select", "tag:reconciliation", "--project-dir",
                          str(project), "--profiles-dir", str(project)], env=env,
                         capture_output=True, text=True, timeout=300, cwd=project)
    assert out.returncode != 0, out.stdout[-3000:]
    assert "not_empty_rec_release_gates" in out.stdout and "FAIL 1" in out.stdout
