"""Where the operational store and the warehouse live, resolved the same way by the runs, by
`prepare_dbt` and by the instance's launch guard (no Dagster import here). dbt keys its partial
parse on the rendered profile, which holds the warehouse path, so the manifest prepared ahead of
time and every run must agree on it or each run parses the whole project again."""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_DUCKDB_PATH = ".riskstream/warehouse.duckdb"


def warehouse_path(configured: str | None = None) -> Path:
    """`configured`, else RISKSTREAM_DUCKDB_PATH, else the default; absolute (relative paths
    are taken from the working directory)."""
    return Path(configured or os.environ.get("RISKSTREAM_DUCKDB_PATH", DEFAULT_DUCKDB_PATH)
                ).resolve()


def store_url(configured: str | None = None) -> str:
    """`configured`, else RISKSTREAM_STORE_URL, else the embedded SQLite store."""
    from streaming.store.ops import DEFAULT_STORE_URL
    return configured or os.environ.get("RISKSTREAM_STORE_URL", DEFAULT_STORE_URL)
