"""`dbt build` of the project from a clean copy (no target/, no packages), offline: the build's
prepare step writes the manifest, ingest fills the warehouse from a store, and every model and
test of the project passes; the release gates and the source-range accounting hold real rows."""

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
from tests.orchestration_helpers import live_seed

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.dagster


def test_dbt_build_passes_offline_from_a_clean_copy(seed_dir, tmp_path):
    project = tmp_path / "dbt_project"
    shutil.copytree(ROOT / "dbt_project", project,
                    ignore=shutil.ignore_patterns("target", "logs", ".user.yml"))
    env = {**os.environ, "RISKSTREAM_DBT_PROJECT_DIR": str(project), "DO_NOT_TRACK": "1",
           "RISKSTREAM_DUCKDB_PATH": str(tmp_path / "warehouse.duckdb"),
           # No route out: dbt must not need the package hub or anything else remote.
           "HTTPS_PROXY": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9"}
    prep = [sys.executable, "-m", "orchestration.prepare_dbt"]
    subprocess.run(prep, env=env, check=True, capture_output=True, timeout=180)
    manifest = project / "target" / "manifest.json"
    stamp = manifest.stat().st_mtime_ns
    subprocess.run(prep, env=env, check=True, capture_output=True, timeout=180)
    assert manifest.stat().st_mtime_ns == stamp  # idempotent: nothing to redo

    src, _ = seed_dir
    url = f"sqlite:///{tmp_path}/ops.sqlite"
    live_seed(src, url)
    store = Store(url)
    with duckdb.connect(str(tmp_path / "warehouse.duckdb")) as con:
        counts = ingest(store, con)
    store.dispose()
    assert counts["facts"] > 0 and counts["archive"] > 0 and counts["replay_queue"] == 1
    dbt = Path(sys.executable).with_name("dbt")
    out = subprocess.run([str(dbt), "build", "--project-dir", str(project), "--profiles-dir",
                          str(project)], env=env, capture_output=True, text=True, timeout=300,
                         cwd=project)
    assert out.returncode == 0, out.stdout[-4000:]
    assert "ERROR=0" in out.stdout and "PASS=" in out.stdout
    with duckdb.connect(str(tmp_path / "warehouse.duckdb"), read_only=True) as con:
        gates = con.execute("SELECT pipeline, gate, passed FROM main.rec_release_gates "
                            "ORDER BY gate").fetchall()
        ranges = con.execute("SELECT topic, sum(read), sum(routed_to_repair), sum(pending), "
                             "bool_and(closes) FROM main.rec_source_ranges GROUP BY topic "
                             "ORDER BY topic").fetchall()
    assert gates == [("join", "accounting_closes", True), ("join", "no_open_sink_exceptions", True),
                     ("join", "one_current_row_per_key", True),
                     ("join", "queued_records_accounted", True)]
    assert [(t, q, p, c) for t, _, q, p, c in ranges] == [("payments", 1, 1, True),
                                                          ("risk_signals", 0, 0, True)]
    assert sum(r for _, r, _, _, _ in ranges) == 470
