"""Resources, configured from environment variables with embedded defaults, resolved when a run
uses them (not when the code location loads).

  RISKSTREAM_STORE_URL          operational store   default sqlite:///.riskstream/ops.sqlite
  RISKSTREAM_DUCKDB_PATH        DuckDB warehouse    default .riskstream/warehouse.duckdb
  RISKSTREAM_DBT_PROJECT_DIR    dbt project         default <repository>/dbt_project
"""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from functools import cached_property
from pathlib import Path
from collections.abc import Iterator

from dagster import ConfigurableResource
from dagster_dbt import DbtCliResource, DbtProject

from streaming.store.ops import Store
from streaming.store.presence import open_existing

from .paths import store_url, warehouse_path

REPO_ROOT = Path(__file__).resolve().parents[1]
# Every DuckDB writer (ingest, candidate, dbt, publication reads) runs in this pool; the
# instance gives it a limit of 1 at run granularity (see deploy/dagster.postgres.yaml).
WAREHOUSE_POOL = "duckdb_warehouse"


def dbt_project_dir() -> Path:
    return Path(os.environ.get("RISKSTREAM_DBT_PROJECT_DIR", REPO_ROOT / "dbt_project")).resolve()


def dbt_project() -> DbtProject:
    d = dbt_project_dir()
    return DbtProject(project_dir=d, profiles_dir=d)


class StoreResource(ConfigurableResource):
    """The operational store (system of record)."""

    url: str | None = None

    def resolved_url(self) -> str:
        return store_url(self.url)

    def open(self) -> Store:
        """The store a pipeline has written; a missing or uninitialized one is refused
        (`StoreMissing`, nothing created), as the command line's read commands do."""
        return open_existing(self.resolved_url())

    @contextmanager
    def session(self) -> Iterator[Store]:
        """The store for one step or tick, disposed of when it ends."""
        st = self.open()
        try:
            yield st
        finally:
            st.dispose()


class WarehouseResource(ConfigurableResource):
    """The DuckDB file dbt builds in; one process may hold it at a time."""

    path: str | None = None

    def resolved_path(self) -> str:
        p = warehouse_path(self.path)
        p.parent.mkdir(parents=True, exist_ok=True)
        return str(p)

    @contextmanager
    def connect(self) -> Iterator:
        from .warehouse import connect
        with connect(self.resolved_path()) as con:
            yield con

    @contextmanager
    def dbt_env(self) -> Iterator[None]:
        """dbt runs as a subprocess that inherits the environment: point it at this file."""
        old = os.environ.get("RISKSTREAM_DUCKDB_PATH")
        os.environ["RISKSTREAM_DUCKDB_PATH"] = self.resolved_path()
        try:
            yield
        finally:
            if old is None:
                os.environ.pop("RISKSTREAM_DUCKDB_PATH", None)
            else:
                os.environ["RISKSTREAM_DUCKDB_PATH"] = old


def dbt_executable() -> str:
    """The dbt of this interpreter's environment (the daemon's PATH may not include it)."""
    beside = Path(sys.executable).with_name("dbt")
    return str(beside) if beside.exists() else "dbt"


class RiskstreamDbtResource(DbtCliResource):
    """dbt CLI resource that skips two start-up costs dagster-dbt pays on every invocation.

    It knows its dbt version without running `dbt --version`: dagster-dbt asks once per run (a
    whole dbt start-up, about 2 s idle and 6 s on a loaded machine), and the dbt it runs is this
    environment's own (`dbt_executable`), whose version is the installed dbt-core's.

    It builds no dbt adapter handle in the run worker: dagster-dbt uses that handle only to fetch
    column metadata and row counts, which riskstream's dbt assets never ask for, and building it
    loads the profile, the project and the DuckDB adapter plugin (about 1.7 s of every rebuild's
    dbt step, before dbt itself starts)."""

    @cached_property
    def _cli_version(self):
        from importlib.metadata import version as installed
        from packaging import version
        if Path(self.dbt_executable).parent == Path(sys.executable).parent:
            return version.parse(installed("dbt-core"))
        return super()._cli_version

    def _initialize_dbt_core_adapter(self, args):
        # dagster-dbt accepts no adapter (its metadata fetchers then return nothing).
        return None


def make_dbt_resource() -> DbtCliResource:
    d = dbt_project_dir()
    # Plain log lines in run logs and failure messages (no ANSI colour codes).
    return RiskstreamDbtResource(project_dir=str(d), profiles_dir=str(d),
                          dbt_executable=dbt_executable(),
                          global_config_flags=["--no-use-colors"])


def default_resources() -> dict:
    return {"store": StoreResource(), "warehouse": WarehouseResource(),
            "dbt": make_dbt_resource()}
