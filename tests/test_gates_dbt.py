"""The dbt release gates fail closed: on a store no pipeline has read anything into there is no
gate row, and the build fails (`not_empty`) instead of passing on nothing; an open sink
exception fails its pipeline's `no_open_sink_exceptions` gate until a decision resolves it."""

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


@pytest.fixture(scope="module")
def parsed_copy(tmp_path_factory):
    """A copy of the dbt project parsed once for the module's warehouse path (a full parse
    takes seconds; the builds after it parse nothing)."""
    tmp = tmp_path_factory.mktemp("gates_dbt")
    project = tmp / "dbt_project"
    shutil.copytree(ROOT / "dbt_project", project,
                    ignore=shutil.ignore_patterns("target", "logs", ".user.yml"))
    warehouse = tmp / "warehouse.duckdb"
    env = {**os.environ, "RISKSTREAM_DBT_PROJECT_DIR": str(project), "DO_NOT_TRACK": "1",
           "RISKSTREAM_DUCKDB_PATH": str(warehouse)}
    subprocess.run([sys.executable, "-m", "orchestration.prepare_dbt"], env=env, check=True,
                   capture_output=True, timeout=180)
    return project, env, warehouse


@pytest.fixture
def dbt_copy(parsed_copy):
    """The parsed copy with an empty warehouse: (project, env, warehouse path)."""
    project, env, warehouse = parsed_copy
    for p in (warehouse, warehouse.with_name(warehouse.name + ".wal")):
        p.unlink(missing_ok=True)
    return project, env, str(warehouse)


def _build(project, env):
    dbt = Path(sys.executable).with_name("dbt")
    return subprocess.run([str(dbt), "build", "--select", "tag:reconciliation", "--project-dir",
                           str(project), "--profiles-dir", str(project)], env=env,
                          capture_output=True, text=True, timeout=300, cwd=project)


def test_release_gates_fail_on_an_empty_store(tmp_path, dbt_copy):
    project, env, warehouse = dbt_copy
    store = Store(f"sqlite:///{tmp_path}/ops.sqlite")  # initialized, nothing read
    with duckdb.connect(warehouse) as con:
        counts = ingest(store, con)
    store.dispose()
    assert counts["facts"] == 0 and counts["archive"] == 0
    out = _build(project, env)
    assert out.returncode != 0, out.stdout[-3000:]
    assert "release_gates_have_something_to_judge" in out.stdout and "FAIL 1" in out.stdout


def test_open_sink_exception_fails_the_release_gates_until_resolved(seed_dir, tmp_path,
                                                                     dbt_copy):
    from streaming.gates import resolve
    from tests.orchestration_helpers import live_seed
    from tests.storeutil import write_conflicting_copy
    project, env, warehouse = dbt_copy
    url = f"sqlite:///{tmp_path}/ops.sqlite"
    live_seed(seed_dir[0], url)
    store = Store(url)
    assert write_conflicting_copy(store, "join", "pair").rejected == 1
    with duckdb.connect(warehouse) as con:
        ingest(store, con)
    out = _build(project, env)
    assert out.returncode != 0 and "release_gates_pass" in out.stdout
    with duckdb.connect(warehouse, read_only=True) as con:
        assert con.execute("SELECT passed, failing FROM main.rec_release_gates WHERE gate = "
                           "'no_open_sink_exceptions'").fetchall() == [(False, 1)]
    [exc] = store.sink_exception_rows("join")
    resolve(store, f"sx-{exc['id']}", "keep-existing", "ops", "a test's second writer")
    with duckdb.connect(warehouse) as con:
        ingest(store, con)
    store.dispose()
    out = _build(project, env)
    assert out.returncode == 0, out.stdout[-3000:]
    with duckdb.connect(warehouse, read_only=True) as con:
        assert con.execute("SELECT passed, failing FROM main.rec_release_gates WHERE gate = "
                           "'no_open_sink_exceptions'").fetchall() == [(True, 0)]
