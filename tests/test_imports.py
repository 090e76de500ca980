"""Import rule: nothing under streaming/ imports Dagster at module level."""

import ast
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1] / "streaming"


def test_no_module_level_dagster_import_in_streaming():
    offenders = []
    for path in ROOT.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in tree.body:  # module level only; CLI commands may import lazily
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offenders += [f"{path}:{node.lineno} {n}" for n in names
                          if n.split(".")[0] in ("dagster", "dagster_dbt", "dagster_postgres")]
    assert offenders == []


def test_importing_the_worker_and_cli_loads_no_dagster():
    code = ("import sys, streaming.worker, streaming.cli.main, streaming.pipelines.join; "
            "print(sorted(m for m in sys.modules if m.startswith('dagster')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
