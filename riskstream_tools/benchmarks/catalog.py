"""Every `riskstream bench` scenario, by name.

The issue-8 hot-path scenarios (`scenarios.py`) run by default; the others measure what those
do not and run with `--all` (what `make bench` does) or by name with `--only`:

  nats-replay        a recording read back from JetStream against the file log (nats.py)
  rebuild-duckdb     the DuckDB candidate rebuild against the plain equi-join (rebuild.py)
  follow-1-worker    follow mode JetStream -> worker -> PostgreSQL, one worker (follow.py)
  follow-2-workers   the same with two workers, `--worker 0/2` and `1/2`
  follow-latency     end-to-end p50/p99 at a steady 2,000 events/s
  follow-latency-no-linger
                     the same with `--max-batch-delay 0` (batches close as delivered)
  follow-pg-restart  recovery after a 10-second restart of a private PostgreSQL
  join-sqlite-floor, join-postgres-floor, receipts-sqlite-floor
                     the store's floor: a run's rows written again by the sink's own
                     statements with nothing else running (floor.py)

Each runs in its own child process (its peak RSS is its own) and reports the same fields as the
hot-path scenarios: scenario, events, seconds, events_per_s, reference_events_per_s, ratio,
peak_rss_mib, reference_equal, plus its own. A scenario whose services (NATS, PostgreSQL) are
not reachable is skipped with a `skipped` reason outside CI and fails in CI (CI=true)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable
from types import ModuleType

from . import floor, follow, nats, rebuild
from . import scenarios as sc

DEFAULT = sc.SCENARIOS
_MODULES: tuple[ModuleType, ...] = (nats, rebuild, follow, floor)
EXTRA: dict[str, Callable[[str, int], dict]] = {
    name: fn for mod in _MODULES for name, fn in mod.SCENARIOS.items()}


def _services(mod: ModuleType, name: str) -> tuple[tuple[str, str, int], ...]:
    """What a scenario needs running: its module's SERVICES, one tuple for all of its
    scenarios or a dictionary by scenario (a scenario it leaves out needs nothing)."""
    services = mod.SERVICES
    return services.get(name, ()) if isinstance(services, dict) else services


SERVICES: dict[str, tuple[tuple[str, str, int], ...]] = {
    name: _services(mod, name) for mod in _MODULES for name in mod.SCENARIOS}
ALL: tuple[str, ...] = DEFAULT + tuple(EXTRA)
# An extra scenario's input, written by this (the parent) process before its child starts, so
# the child's peak memory is the scenario's own (as `scenarios.prepare_input` does for the
# default scenarios). (workdir, events) -> its path.
PREPARE: dict[str, Callable[[str, int], str]] = {
    name: fn for mod in _MODULES for name, fn in getattr(mod, "PREPARE", {}).items()}


def _missing_service(scenario: str) -> str | None:
    for label, host, port in SERVICES.get(scenario, ()):
        try:
            socket.create_connection((host, port), timeout=1).close()
        except OSError:
            return f"{label} is not reachable on {host}:{port}"
    return None


def run_extra(scenario: str, workdir: str, n: int) -> dict:
    missing = _missing_service(scenario)
    if missing:
        if os.environ.get("CI", "").lower() == "true":
            return {"scenario": scenario, "events": n, "error": f"{missing} (required in CI)"}
        print(f"SKIP {scenario}: {missing}", flush=True)
        return {"scenario": scenario, "events": n, "skipped": missing}
    sub = os.path.abspath(workdir)
    prepare = PREPARE.get(scenario)
    if prepare is not None:
        prepare(sub, n)
    proc = subprocess.run([sys.executable, "-m", __name__, "child", scenario, sub, str(n)],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        return {"scenario": scenario, "events": n,
                "error": f"child exited {proc.returncode}: {proc.stderr[-1500:]}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run(names: list[str], events: int, workdir: str) -> list[dict]:
    unknown = [s for s in names if s not in ALL]
    if unknown:
        raise ValueError(f"unknown scenario(s) {', '.join(unknown)}; choose from "
                         f"{', '.join(ALL)}")
    os.makedirs(workdir, exist_ok=True)
    return [sc.run_scenario(s, workdir, events) if s in DEFAULT
            else run_extra(s, workdir, events) for s in names]


def failed(results: list[dict]) -> list[str]:
    """Scenarios that errored or gave a wrong answer (a skipped one did neither)."""
    return [r["scenario"] for r in results
            if "error" in r or ("skipped" not in r and not r.get("reference_equal"))]


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "child":
        _, _, name, workdir_, n_ = sys.argv
        print(json.dumps(EXTRA[name](workdir_, int(n_)), default=str))
    else:
        raise SystemExit("usage: python -m riskstream_tools.benchmarks.catalog child NAME DIR N")
