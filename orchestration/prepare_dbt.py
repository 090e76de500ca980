"""Prepare the dbt project's manifest offline (`dbt parse`), so the code location, pytest and
the daemon can load the dbt assets without a development server. Idempotent: a manifest newer
than every project file, parsed for the warehouse path the runs will use, is kept.

    python -m orchestration.prepare_dbt [--force]
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def _project_dir() -> Path:
    return Path(os.environ.get("RISKSTREAM_DBT_PROJECT_DIR",
                               Path(__file__).resolve().parents[1] / "dbt_project")).resolve()


def _newest_source(project: Path) -> float:
    newest = 0.0
    for sub in ("models", "macros", "tests"):
        for p in (project / sub).rglob("*"):
            if p.is_file():
                newest = max(newest, p.stat().st_mtime)
    for name in ("dbt_project.yml", "profiles.yml"):
        newest = max(newest, (project / name).stat().st_mtime)
    return newest


def prepare(force: bool = False) -> Path:
    from .paths import warehouse_path
    project = _project_dir()
    manifest = project / "target" / "manifest.json"
    # dbt's partial parse is keyed on the rendered profile, which holds the warehouse path:
    # parse again when the runs will use another path than the last parse did.
    stamp = project / "target" / "warehouse_path.txt"
    path = str(warehouse_path())
    if not force and manifest.exists() and manifest.stat().st_mtime >= _newest_source(project) \
            and stamp.exists() and stamp.read_text() == path:
        return manifest
    env = {**os.environ, "DO_NOT_TRACK": "1", "DBT_SEND_ANONYMOUS_USAGE_STATS": "false",
           "RISKSTREAM_DUCKDB_PATH": path}
    dbt = Path(sys.executable).with_name("dbt")
    cmd = [str(dbt) if dbt.exists() else "dbt", "parse", "--project-dir", str(project),
           "--profiles-dir", str(project), "--quiet"]
    subprocess.run(cmd, check=True, env=env, cwd=project)
    stamp.write_text(path)
    return manifest


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    path = prepare(force="--force" in argv)
    shown = path.relative_to(path.parents[2]) if len(path.parents) > 2 else path
    print(f"dbt manifest ready: {shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
