"""`make dev` end to end: scripts/dev.sh starts `dagster dev` (webserver + daemon) on a free
port with a temporary DAGSTER_HOME; the code location loads; a `rebuild_interval` run launched
through the GraphQL API succeeds and publishes a generation; the processes are stopped by PID."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from streaming import join_published as P
from streaming.store.ops import Store
from tests.orchestration_helpers import fresh_warehouse, live_seed, prepared_manifest

pytestmark = pytest.mark.dagster
ROOT = Path(__file__).resolve().parents[1]
DAY = "2026-10-06"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def graphql(port: int, query: str, variables: dict | None = None) -> dict:
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/graphql",
        data=json.dumps({"query": query, "variables": variables or {}}).encode(),
        headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        body = json.loads(resp.read())
    assert "errors" not in body, body
    return body["data"]


def wait_for(pred, timeout: float, what: str, step: float = 1.0):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = pred()
            if last:
                return last
        except (OSError, urllib.error.URLError) as exc:
            last = exc
        time.sleep(step)
    raise AssertionError(f"timed out waiting for {what}: {last}")


LOCATIONS = """{ workspaceOrError { ... on Workspace { locationEntries {
  name loadStatus locationOrLoadError { __typename ... on PythonError { message } } } } } }"""
ADD_PARTITION = """mutation($loc: String!, $key: String!) {
  addDynamicPartition(repositorySelector: {repositoryLocationName: $loc,
                                           repositoryName: "__repository__"},
                      partitionsDefName: "replay_dates", partitionKey: $key) { __typename } }"""
LAUNCH = """mutation($params: ExecutionParams!) { launchRun(executionParams: $params) {
  __typename ... on LaunchRunSuccess { run { runId } }
  ... on PythonError { message } ... on RunConfigValidationInvalid { errors { message } } } }"""
STATUS = """query($id: ID!) { runOrError(runId: $id) { ... on Run { status } } }"""


def test_dagster_dev_loads_and_runs_rebuild_interval(seed_dir, tmp_path):
    prepared_manifest()
    src, manifest = seed_dir
    old = manifest["cases"]["old_correction"]
    url = f"sqlite:///{tmp_path}/ops.sqlite"
    live_seed(src, url)
    port = free_port()
    home = tmp_path / "dagster_home"
    env = {**os.environ, "DAGSTER_HOME": str(home), "RISKSTREAM_DAGSTER_PORT": str(port),
           "RISKSTREAM_STORE_URL": url,
           "RISKSTREAM_DUCKDB_PATH": fresh_warehouse(), "DO_NOT_TRACK": "1"}
    log = open(tmp_path / "dev.log", "wb")
    proc = subprocess.Popen(["bash", str(ROOT / "scripts" / "dev.sh")], env=env, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        entries = wait_for(lambda: [e for e in graphql(port, LOCATIONS)["workspaceOrError"]
                                    ["locationEntries"] if e["loadStatus"] == "LOADED"],
                           150, "the code location to load", 2.0)
        [loc] = entries
        assert loc["locationOrLoadError"]["__typename"] == "RepositoryLocation", loc
        graphql(port, ADD_PARTITION, {"loc": loc["name"], "key": DAY})
        params = {
            "selector": {"repositoryLocationName": loc["name"],
                         "repositoryName": "__repository__", "jobName": "rebuild_interval"},
            "runConfigData": {"ops": {"candidate_generation": {"config": {
                "merchant": old["merchant"], "start": old["old_event_time"],
                "end": old["new_event_time"]}}}},
            "executionMetadata": {"tags": [{"key": "dagster/partition", "value": DAY}]}}
        launched = graphql(port, LAUNCH, {"params": params})["launchRun"]
        assert launched["__typename"] == "LaunchRunSuccess", launched
        run_id = launched["run"]["runId"]
        status = wait_for(lambda: (graphql(port, STATUS, {"id": run_id})["runOrError"]["status"]
                                   in ("SUCCESS", "FAILURE", "CANCELED")) and
                          graphql(port, STATUS, {"id": run_id})["runOrError"]["status"],
                          240, "the run to finish", 2.0)
        assert status == "SUCCESS", (tmp_path / "dev.log").read_text()[-4000:]
    finally:
        # Stop what this test started: the script forwards TERM to `dagster dev` (its own
        # process group under set -m), which stops the webserver and the daemon.
        pid_file = home / "dagster-dev.pid"
        dev_pid = int(pid_file.read_text()) if pid_file.exists() else None
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            if dev_pid:
                os.killpg(dev_pid, signal.SIGKILL)
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        log.close()
    if dev_pid:
        wait_for(lambda: not _alive(dev_pid), 30, "dagster dev to exit", 0.5)
    store = Store(url)
    [gen] = P.generation_rows(store)
    assert (gen["status"], gen["interval_start"], gen["interval_end"]) == (
        "published", old["old_event_time"], old["new_event_time"])
    assert [q["status"] for q in store.queue("join")] == ["processed"]
    store.dispose()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); its state in /proc says it has exited.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False
