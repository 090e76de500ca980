"""Where the warehouse lives, resolved the same way by the runs and by `prepare_dbt` (no Dagster
import here): dbt keys its partial parse on the rendered profile, which holds this path, so the
manifest prepared ahead of time and every run must agree on it or each run parses the whole
project again."""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_DUCKDB_PATH = ".riskstream/warehouse.duckdb"


def warehouse_path(configured: str | None = None) -> Path:
    """`configured`, else RISKSTREAM_DUCKDB_PATH, else the default; absolute (relative paths
    are taken from the working directory)."""
    return Path(configured or os.environ.get("RISKSTREAM_DUCKDB_PATH", DEFAULT_DUCKDB_PATH)
                ).resolve()
