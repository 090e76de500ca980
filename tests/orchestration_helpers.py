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
    from orchestration.prepare_dbt import prepare
    return prepare()


def live_seed(seed_dir: str, store_url: str) -> None:
    Worker(SPEC, RunSettings(source=seed_dir, store_url=store_url, end_of_stream=True)).run()


def resources(store_url: str, warehouse_path: str) -> dict:
    from orchestration.repair import resources_for
    return resources_for(store_url, warehouse_path)


def fresh_warehouse() -> str:
    """A new, empty warehouse at a path that stays the same for this pytest process: dbt keys
    its partial parse on the rendered profile, which holds the warehouse path, so one path per
    session lets every dbt run after the first skip the full parse."""
    d = Path(tempfile.gettempdir()) / f"riskstream-warehouse-{os.getpid()}"
    if not d.exists():
        d.mkdir()
        atexit.register(shutil.rmtree, d, True)
    path = d / "warehouse.duckdb"
    for p in (path, d / "warehouse.duckdb.wal"):
        if p.exists():
            p.unlink()
    return str(path)
