"""Shared set-up for the orchestration tests: a prepared dbt manifest, the join seed run live
into a store, and the resources bound to a temporary warehouse."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

from streaming.host.loop import Worker
from streaming.host.settings import RunSettings
from streaming.pipelines.join import SPEC

os.environ.setdefault("DO_NOT_TRACK", "1")


def prepared_manifest():
    """The dbt manifest, parsed for this session's warehouse path (`fresh_warehouse`). dbt keys
    its partial parse on the rendered profile, which holds that path, and Dagster starts every
    dbt invocation from the project's partial parse: parsed for another path, each invocation
    of the session's runs would parse the whole project again."""
    from orchestration.prepare_dbt import prepare
    saved = os.environ.get("RISKSTREAM_DUCKDB_PATH")
    os.environ["RISKSTREAM_DUCKDB_PATH"] = str(_session_warehouse())
    try:
        return prepare()
    finally:
        if saved is None:
            del os.environ["RISKSTREAM_DUCKDB_PATH"]
        else:
            os.environ["RISKSTREAM_DUCKDB_PATH"] = saved


def live_seed(seed_dir: str, store_url: str) -> None:
    Worker(SPEC, RunSettings(source=seed_dir, store_url=store_url, end_of_stream=True)).run()


def resources(store_url: str, warehouse_path: str) -> dict:
    from orchestration.repair import resources_for
    return resources_for(store_url, warehouse_path)


def _session_warehouse() -> Path:
    """The warehouse path of this pytest process (its directory made on first use)."""
    d = Path(tempfile.gettempdir()) / f"riskstream-warehouse-{os.getpid()}"
    if not d.exists():
        d.mkdir()
        atexit.register(shutil.rmtree, d, True)
    return d / "warehouse.duckdb"


def fresh_warehouse() -> str:
    """A new, empty warehouse at a path that stays the same for this pytest process: dbt keys
    its partial parse on the rendered profile, which holds the warehouse path, so one path per
    session (the one `prepared_manifest` parses for) lets every dbt run skip the full parse."""
    path = _session_warehouse()
    for p in (path, path.with_name(path.name + ".wal")):
        if p.exists():
            p.unlink()
    return str(path)
