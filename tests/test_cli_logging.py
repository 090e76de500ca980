"""The root `--log-level` option (and RISKSTREAM_LOG_LEVEL): WARNING by default shows nothing on
a clean run; INFO shows the source, run start and run summary; DEBUG adds every batch and
checkpoint. Logs go to stderr, the command's output stays on stdout."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from .joinutil import pay, sig, write_log

ROOT = Path(__file__).resolve().parents[1]


def run(tmp_path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    src = write_log(tmp_path / "src", {("payments", 0): [pay("p1", "m1", 0)],
                                       ("risk_signals", 0): [sig("s1", "m1", 1)]})
    store = f"sqlite:///{tmp_path}/ops-{len(list(tmp_path.iterdir()))}.sqlite"
    base = {k: v for k, v in os.environ.items() if k != "RISKSTREAM_LOG_LEVEL"}
    return subprocess.run([sys.executable, "-m", "streaming.cli.main", *args, "join", "run",
                           "--source", src, "--store", store, "--end-of-stream",
                           "--batch-size", "1"],
                          env={**base, "PYTHONPATH": str(ROOT), **(env or {})},
                          capture_output=True, text=True, timeout=120, check=True)


def test_default_level_is_warning(tmp_path):
    out = run(tmp_path)
    assert out.stderr == ""
    assert "join run: 2 records" in out.stdout


def test_info_shows_source_start_and_summary(tmp_path):
    out = run(tmp_path, "--log-level", "info")
    lines = out.stderr.splitlines()
    assert any(" INFO streaming.sources: opened FileLog source" in ln for ln in lines)
    assert any(" INFO streaming.host.loop: join: run 1 started from the beginning" in ln
               for ln in lines)
    assert any("join: run 1 finished: 2 records in 3 batches" in ln for ln in lines)
    assert not any(" DEBUG " in ln for ln in lines)
    assert "INFO" not in out.stdout


def test_env_var_sets_debug(tmp_path):
    out = run(tmp_path, env={"RISKSTREAM_LOG_LEVEL": "DEBUG"})
    batches = [ln for ln in out.stderr.splitlines() if "batch" in ln and " DEBUG " in ln]
    assert [ln.split("join: ", 1)[1].split(":")[0] for ln in batches] == [
        "batch 1 committed", "batch 2 committed", "batch 3 committed"]
    assert any("DEBUG streaming.host.loop: join: checkpoint at journal seq 3" in ln
               for ln in out.stderr.splitlines())
