"""`riskstream bench` at a small size: every scenario runs end to end and agrees with its
in-memory reference (no timing is asserted; speed lives in the benchmark itself)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from riskstream_tools.benchmarks.scenarios import SCENARIOS

from .conftest import PG_ADMIN_DSN, need_service

EVENTS = 20_000


@pytest.mark.postgres
def test_bench_every_scenario_agrees_with_its_reference(tmp_path):
    need_service("PostgreSQL", "127.0.0.1", 5432)
    out = tmp_path / "bench.json"
    env = {**os.environ, "RISKSTREAM_BENCH_PG": PG_ADMIN_DSN}
    proc = subprocess.run([sys.executable, "-m", "streaming.cli.main", "bench",
                           "--events", str(EVENTS), "--workdir", str(tmp_path / "work"),
                           "--json", str(out)], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    results = {r["scenario"]: r for r in doc["scenarios"]}
    assert sorted(results) == sorted(SCENARIOS)
    for name, r in results.items():
        assert "error" not in r, (name, r.get("error"))
        assert r["reference_equal"] is True, name
        assert r["events"] == EVENTS
        for field in ("seconds", "events_per_s", "reference_events_per_s", "ratio",
                      "peak_rss_mib"):
            assert r[field] > 0, (name, field)
        assert set(r["stages"]) >= {"sink_s", "checkpoint_s"}
    # The pipelines really produced output that the references confirmed.
    assert results["join-sqlite"]["pairs"] == results["join-sqlite"]["reference_pairs"] > 1000
    assert results["join-postgres"]["pairs"] == results["join-sqlite"]["pairs"]
    assert results["join-operator"]["pairs"] == results["join-sqlite"]["pairs"]
    assert results["ledger-sqlite"]["windows"] == results["ledger-sqlite"]["reference_windows"]
    assert results["receipts-sqlite"]["decisions"] == EVENTS


def test_bench_fails_a_wrong_answer(tmp_path, monkeypatch):
    """A scenario whose answer differs from the reference fails the run (exit 1)."""
    from click.testing import CliRunner

    from riskstream_tools.benchmarks import scenarios as sc
    from riskstream_tools.cli.bench import bench

    def wrong(scenario, workdir, n):  # noqa: ANN001
        return {"scenario": scenario, "events": n, "seconds": 0.1, "events_per_s": 10 * n,
                "reference_events_per_s": n, "ratio": 10.0, "peak_rss_mib": 1.0,
                "reference_equal": False, "stages": {"sink_s": 0.0, "checkpoint_s": 0.0}}

    monkeypatch.setattr(sc, "run_scenario", wrong)
    out = tmp_path / "b.json"
    res = CliRunner().invoke(bench, ["--only", "join-operator", "--events", "10",
                                     "--json", str(out), "--workdir", str(tmp_path)])
    assert res.exit_code == 1
    assert "failed: join-operator" in res.output
    assert json.loads(out.read_text())["scenarios"][0]["reference_equal"] is False
