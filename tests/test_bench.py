"""`riskstream bench` at a small size: every scenario runs end to end and agrees with its
reference (no timing is asserted; speed lives in the benchmark itself)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from riskstream_tools.benchmarks import catalog
from riskstream_tools.benchmarks.scenarios import SCENARIOS
from streaming import hashing
from streaming.store.sqlite_driver import dbapi, describe

from .conftest import PG_ADMIN_DSN, need_service

EVENTS = 20_000
# The follow scenarios are paced by the broker (and one waits out a 10-second database
# restart): a few thousand events show they run and agree with the reference.
LIVE_EVENTS = 4_000
LIVE_SCENARIOS = ("nats-replay", "rebuild-duckdb", "follow-1-worker", "follow-2-workers",
                  "follow-latency", "follow-latency-no-linger", "follow-pg-restart")
COMMON_FIELDS = ("seconds", "events_per_s", "reference_events_per_s", "ratio", "peak_rss_mib")
FLOOR_SCENARIOS = ("join-sqlite-floor", "join-postgres-floor", "receipts-sqlite-floor")


def _bench(tmp_path, names: tuple[str, ...], events: int, **env: str) -> dict:
    """`riskstream bench` in a child process over `names` (every hot-path scenario when
    empty), with RISKSTREAM_BENCH_PG pointed at the test server: its JSON document, once the
    run exited 0."""
    out = tmp_path / "bench.json"
    only = [arg for name in names for arg in ("--only", name)]
    proc = subprocess.run([sys.executable, "-m", "streaming.cli.main", "bench", *only,
                           "--events", str(events), "--workdir", str(tmp_path / "work"),
                           "--json", str(out)], capture_output=True, text=True,
                          env={**os.environ, "RISKSTREAM_BENCH_PG": PG_ADMIN_DSN, **env},
                          check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.mark.postgres
def test_bench_every_scenario_agrees_with_its_reference(tmp_path):
    need_service("PostgreSQL", "127.0.0.1", 5432)
    doc = _bench(tmp_path, (), EVENTS)
    results = {r["scenario"]: r for r in doc["scenarios"]}
    assert doc["machine"]["hash_lanes"] == hashing.lanes() in (1, 4, 8)
    # Without --only or --all, the hot-path scenarios run.
    assert sorted(results) == sorted(SCENARIOS) == sorted(catalog.DEFAULT)
    for name, r in results.items():
        assert "error" not in r, (name, r.get("error"))
        assert r["reference_equal"] is True, name
        assert r["events"] == EVENTS
        for field in COMMON_FIELDS:
            assert r[field] > 0, (name, field)
        # The ratio's reference seconds are the mean of the timings before and after the run.
        before, after = r["reference_seconds_before"], r["reference_seconds_after"]
        assert before > 0 and after > 0, name
        mean_s = EVENTS / r["reference_events_per_s"]  # both timings are rounded to 1 ms
        assert min(before, after) - 0.001 <= mean_s <= max(before, after) + 0.001, name
        assert set(r["stages"]) >= {"sink_s", "checkpoint_s"}
    # Which SQLite library the SQLite stores ran on: this process's choice under the same
    # environment; none where no SQLite store was opened.
    assert results["join-sqlite"]["sqlite"] == results["receipts-sqlite"]["sqlite"] == \
        describe(dbapi())
    assert results["join-postgres"]["sqlite"] is None
    assert results["join-operator"]["sqlite"] is None
    # The pipelines really produced output that the references confirmed.
    assert results["join-sqlite"]["pairs"] == results["join-sqlite"]["reference_pairs"] > 1000
    assert results["join-postgres"]["pairs"] == results["join-sqlite"]["pairs"]
    assert results["join-operator"]["pairs"] == results["join-sqlite"]["pairs"]
    # The same events under IDs in event-time order: the same pairs under other names.
    assert results["join-sqlite-ordered-ids"]["pairs"] == results["join-sqlite"]["pairs"]
    assert results["ledger-sqlite"]["windows"] == results["ledger-sqlite"]["reference_windows"]
    assert results["receipts-sqlite"]["decisions"] == EVENTS
    # Two workers at once, each over its share of the partitions: the same answers, each
    # worker having read part of the recording.
    assert results["join-sqlite-2-workers"]["pairs"] == results["join-sqlite"]["pairs"]
    assert results["ledger-sqlite-2-workers"]["windows"] == \
        results["ledger-sqlite"]["windows"]
    assert results["receipts-sqlite-2-workers"]["decisions"] == EVENTS
    for name in ("join-sqlite-2-workers", "ledger-sqlite-2-workers",
                 "receipts-sqlite-2-workers"):
        shares = results[name]["worker_records"]
        assert len(shares) == 2 and all(0 < k < EVENTS for k in shares), (name, shares)
        # Serial commits in each worker: no writer process to measure.
        assert results[name]["writer_cpu_s"] is None, name
    # A single worker's commits run in its writer process, whose CPU seconds and writes to
    # the store's file the result reports apart from the worker's.
    for name in ("join-sqlite", "ledger-sqlite", "receipts-sqlite"):
        assert results[name]["writer_cpu_s"] > 0, name
        assert results[name]["writer_written_mib"] > 0, name
    # Every store scenario says what set its pace, from its own figures (what each value
    # means: tests/test_bench_limited_by.py); the operator alone has no store to name.
    one_worker = {"worker", "writer CPU", "writer waiting on the database", "worker and writer"}
    for name in ("join-sqlite", "join-postgres", "join-sqlite-ordered-ids", "ledger-sqlite",
                 "receipts-sqlite"):
        assert results[name]["limited_by"] in one_worker, (name, results[name]["limited_by"])
    for name in ("join-sqlite-2-workers", "ledger-sqlite-2-workers",
                 "receipts-sqlite-2-workers"):
        assert results[name]["limited_by"] in {"workers", "serial commits"}, name
    assert results["join-operator"]["limited_by"] is None
    # Of each store scenario's checkpoint stage, the worker's own serialization of the state.
    for name in ("join-sqlite", "join-postgres", "ledger-sqlite", "receipts-sqlite",
                 "ledger-sqlite-2-workers"):
        r = results[name]
        assert 0 < r["checkpoint_dump_s"] <= r["stages"]["checkpoint_s"] + 0.001, name


@pytest.mark.postgres
@pytest.mark.nats
def test_bench_live_scenarios_agree_with_their_references(tmp_path):
    """Follow mode (one and two workers, paced latency, a PostgreSQL restart), the JetStream
    replay and the DuckDB rebuild: each sink equals its reference, with the figures of issue 9
    (p50/p99 latency, recovery time) present."""
    need_service("PostgreSQL", "127.0.0.1", 5432)
    need_service("NATS", "127.0.0.1", 4222)
    doc = _bench(tmp_path, LIVE_SCENARIOS, LIVE_EVENTS, RISKSTREAM_BENCH_REPAIR_RUN="0")
    results = {r["scenario"]: r for r in doc["scenarios"]}
    assert sorted(results) == sorted(LIVE_SCENARIOS)
    assert set(catalog.ALL) == set(SCENARIOS) | set(LIVE_SCENARIOS) | set(FLOOR_SCENARIOS)
    for name, r in results.items():
        assert "error" not in r and "skipped" not in r, (name, r)
        assert r["reference_equal"] is True, name
        assert r["events"] == LIVE_EVENTS, name
        for field in COMMON_FIELDS:
            assert r[field] > 0, (name, field)
    # The follow sinks hold the reference's pairs; one worker and two agree row for row.
    one, two = results["follow-1-worker"], results["follow-2-workers"]
    assert one["pairs"] == one["reference_pairs"] > 1000
    assert two["pairs"] == one["pairs"] and two["workers"] == 2
    for name, delay_ms in (("follow-latency", 200), ("follow-latency-no-linger", 0)):
        lat = results[name]
        assert lat["rate_per_s"] == 2000 and lat["max_batch_delay_ms"] == delay_ms
        assert 0 < lat["p50_ms"] <= lat["p99_ms"]
        assert lat["pairs"] == lat["reference_pairs"] > 0 and lat["batches"] > 0
    restart = results["follow-pg-restart"]
    assert restart["down_s"] == 10.0 and restart["recovery_s"] > 0
    assert restart["pairs"] == restart["reference_pairs"] > 0
    assert results["nats-replay"]["records"] == results["nats-replay"]["reference_records"] > 0
    rebuild = results["rebuild-duckdb"]
    assert rebuild["pairs"] == rebuild["plain_pairs"] > 0 and rebuild["pair_sets_differ_by"] == 0


@pytest.mark.postgres
def test_bench_floor_scenarios_write_the_runs_rows_again(tmp_path):
    """The store's floor: each scenario runs its pipeline, writes the run's batches again into
    an empty store with the sink's statements, and finds the same facts, archive and view
    there; the time is the transactions', split into the stages, beside the issue's target."""
    need_service("PostgreSQL", "127.0.0.1", 5432)
    results = {r["scenario"]: r for r in _bench(tmp_path, FLOOR_SCENARIOS, EVENTS)["scenarios"]}
    assert sorted(results) == sorted(FLOOR_SCENARIOS)
    for name, r in results.items():
        assert "error" not in r and "skipped" not in r, (name, r)
        assert r["reference_equal"] is True and r["rows_equal_run"] is True, name
        for field in COMMON_FIELDS:
            assert r[field] > 0, (name, field)
        assert set(r["stages"]) == {"facts_s", "view_s", "archive_s", "journal_and_commit_s",
                                    "statistics_s"}
        # Statistics are PostgreSQL's: SQLite's floor spends nothing there.
        assert all(v > 0 for k, v in r["stages"].items() if k != "statistics_s"), name
        assert (r["stages"]["statistics_s"] > 0) is (r["store"] == "postgresql"), name
        assert abs(sum(r["stages"].values()) - r["seconds"]) < 0.01, name
        # Every record of the bench inputs is valid: each one's archive row was written again,
        # in the run's batches of 5,000 and its end of stream's.
        assert r["archive_rows"] == EVENTS and r["batches"] == EVENTS // 5_000 + 1, name
        assert r["target_seconds"] == round(EVENTS / r["target_events_per_s"], 3)
        assert r["floor_within_target"] is (r["seconds"] <= EVENTS / r["target_events_per_s"])
    assert [results[n]["floor_of"] for n in FLOOR_SCENARIOS] == \
        ["join-sqlite", "join-postgres", "receipts-sqlite"]
    assert [results[n]["store"] for n in FLOOR_SCENARIOS] == ["sqlite", "postgresql", "sqlite"]
    # The two join floors write the same run's rows; the receipt scorer one decision each.
    assert results["join-sqlite-floor"]["facts"] == results["join-postgres-floor"]["facts"] \
        > EVENTS
    assert results["receipts-sqlite-floor"]["facts"] == EVENTS


def test_floor_fingerprints_tell_a_changed_row(tmp_path):
    """The floor's comparison of its store with the run's is not a formality: a view row
    pointed elsewhere, a fact's hash or a missing archive row each change the fingerprints."""
    import sqlite3

    from riskstream_tools.benchmarks import floor
    from riskstream_tools.benchmarks import scenarios as sc

    src = sc.prepare_input("join", str(tmp_path), 3_000)
    run_url = sc._sqlite_url(str(tmp_path), "run")
    assert sc.child_join_store(src, run_url, 3_000)["reference_equal"]
    seconds, stages, counts = floor.write_floor(run_url, sc._sqlite_url(str(tmp_path), "floor"))
    assert counts["archive_rows"] == 3_000 and counts["facts"] > 3_000
    run_fp = floor.fingerprints(run_url)
    floor_url = f"sqlite:///{tmp_path / 'floor.sqlite'}"
    assert floor.fingerprints(floor_url) == run_fp
    changes = {
        "current_view": "UPDATE current_view SET status = 'retired' WHERE rowid = 7",
        "facts": "UPDATE facts SET payload_hash = 'x' || payload_hash WHERE id = 11",
        "archive": "DELETE FROM archive WHERE rowid = 13"}
    for table, sql in changes.items():
        db = sqlite3.connect(tmp_path / "floor.sqlite")
        with db:
            db.execute(sql)
        db.close()
        changed = floor.fingerprints(floor_url)
        assert changed[table] != run_fp[table], table
        run_fp = {**run_fp, table: changed[table]}  # the next change is seen on its own
        assert changed == run_fp


def test_an_extra_scenarios_input_is_written_before_its_child_starts(tmp_path, monkeypatch):
    """The bench's parent writes the recording `nats-replay` reads (catalog.PREPARE) before
    the scenario's child starts: the child's peak memory is then its reading's, not the
    generator's."""
    monkeypatch.setitem(catalog.SERVICES, "nats-replay", ())
    seen: dict = {}

    def child(args, **kw):
        workdir, n = args[-2], args[-1]
        root = os.path.join(workdir, "inputs", f"nats_{n}")
        seen["ready"] = os.path.exists(os.path.join(root, ".complete"))
        seen["lines"] = sum(len(open(os.path.join(d, f), "rb").read().splitlines())
                            for d, _, files in os.walk(root) for f in files
                            if f.endswith(".jsonl"))
        return subprocess.CompletedProcess(args, 0, stdout='{"scenario": "nats-replay"}\n',
                                           stderr="")

    monkeypatch.setattr(catalog.subprocess, "run", child)
    assert catalog.run_extra("nats-replay", str(tmp_path), 200) == {"scenario": "nats-replay"}
    assert seen == {"ready": True, "lines": 200}


def test_bench_skips_a_scenario_whose_service_is_missing(tmp_path, monkeypatch):
    """Outside CI a follow scenario without its services is skipped with a line saying so, and
    the run still passes; in CI the same is an error."""
    from click.testing import CliRunner

    from riskstream_tools.cli.bench import bench

    monkeypatch.setitem(catalog.SERVICES, "follow-latency", (("NATS", "127.0.0.1", 1),))
    monkeypatch.setenv("CI", "false")
    out = tmp_path / "b.json"
    args = ["--only", "follow-latency", "--events", "10", "--json", str(out),
            "--workdir", str(tmp_path)]
    res = CliRunner().invoke(bench, args)
    assert res.exit_code == 0, res.output
    assert "SKIP follow-latency: NATS is not reachable on 127.0.0.1:1" in res.output
    assert json.loads(out.read_text())["scenarios"][0]["skipped"]
    monkeypatch.setenv("CI", "true")
    res = CliRunner().invoke(bench, args)
    assert res.exit_code == 1
    assert "failed: follow-latency" in res.output


def test_bench_prints_a_failed_scenarios_whole_error(tmp_path, monkeypatch):
    """The table cuts an error to its cell; below it the run prints each error whole, so a
    failed run's output alone (a CI log) names the cause: here the last line of a child's
    traceback, far past the cell's width."""
    from click.testing import CliRunner

    from riskstream_tools.cli.bench import bench

    cause = "RuntimeError: worker exited 1: " + "x" * 200 + " the cause at the end"

    def child(args, **kwargs):
        return subprocess.CompletedProcess(args, 1, stdout="", stderr=f"Traceback\n{cause}\n")

    monkeypatch.setitem(catalog.SERVICES, "follow-latency", ())
    monkeypatch.setattr(catalog.subprocess, "run", child)
    res = CliRunner().invoke(bench, ["--only", "follow-latency", "--events", "10", "--json",
                                     str(tmp_path / "b.json"), "--workdir", str(tmp_path)])
    assert res.exit_code == 1
    assert f"child exited 1: Traceback\n{cause}" in res.output
    assert res.output.rstrip().endswith("failed: follow-latency")


def test_bench_fails_a_wrong_answer(tmp_path, monkeypatch):
    """A scenario whose answer differs from the reference fails the run (exit 1)."""
    from click.testing import CliRunner

    from riskstream_tools.benchmarks import scenarios as sc
    from riskstream_tools.cli.bench import bench

    def wrong(scenario, workdir, n):
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
