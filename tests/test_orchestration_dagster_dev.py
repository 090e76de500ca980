"""`make dev` end to end: scripts/dev.sh starts `dagster dev` (webserver + daemon) on a free
port with a temporary DAGSTER_HOME; the code location `riskstream` loads; bad intervals
launched through the GraphQL API are refused as they are submitted, in one line, before any run
worker starts; in headless Chromium an operator
launches the rebuild of the seed's old correction from the launchpad, sees it succeed and reads
the live generation and its diff; the processes are stopped by PID."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from riskstream_tools.ports import free_port
from streaming import join_published as P
from streaming.store.ops import Store
from tests.orchestration_helpers import fresh_warehouse, live_seed, prepared_manifest

pytestmark = pytest.mark.dagster
ROOT = Path(__file__).resolve().parents[1]
DAY = "2026-10-06"
# dagster dev stops its webserver and daemon in a few seconds.
STOP_TIMEOUT_S = 60


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
LAUNCH = """mutation($params: ExecutionParams!) { launchRun(executionParams: $params) {
  __typename ... on LaunchRunSuccess { run { runId } }
  ... on PythonError { message } ... on RunConfigValidationInvalid { errors { message } } } }"""
STATUS = ("""query($id: ID!) { runOrError(runId: $id) { ... on Run { status tags { key value } """
          """} } }""")
EVENTS = """query($id: ID!) { logsForRun(runId: $id) { ... on EventConnection { events {
  __typename ... on MessageEvent { timestamp stepKey } } } } }"""
REFUSAL = """query($id: ID!) { logsForRun(runId: $id) { ... on EventConnection { events {
  __typename ... on MessageEvent { message } } } } }"""


def _as_a_background_job() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


@pytest.fixture(scope="module")
def dev(seed_dir, tmp_path_factory):
    """`make dev` (scripts/dev.sh) on a free port with its own DAGSTER_HOME, automation
    stopped (the test launches the rebuild itself); stopped by PID at the end."""
    prepared_manifest()
    src, manifest = seed_dir
    tmp = tmp_path_factory.mktemp("dev")
    url = f"sqlite:///{tmp}/ops.sqlite"
    live_seed(src, url)
    port = free_port()
    home = tmp / "dagster_home"
    env = {**os.environ, "DAGSTER_HOME": str(home), "RISKSTREAM_DAGSTER_PORT": str(port),
           "RISKSTREAM_STORE_URL": url, "RISKSTREAM_AUTOMATION": "stopped",
           "RISKSTREAM_VENV_BIN": str(Path(sys.executable).parent),
           "RISKSTREAM_DUCKDB_PATH": fresh_warehouse(), "DO_NOT_TRACK": "1"}
    log_path = tmp / "dev.log"
    log = open(log_path, "wb")
    # Started as a shell that is not interactive starts `make dev &`: SIGINT ignored, SIGTERM
    # at its default. The script must still stop on SIGTERM (dagster dev gives SIGTERM what
    # SIGINT does).
    proc = subprocess.Popen(["bash", str(ROOT / "scripts" / "dev.sh")], env=env, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True,
                            preexec_fn=_as_a_background_job)
    try:
        entries = wait_for(lambda: [e for e in graphql(port, LOCATIONS)["workspaceOrError"]
                                    ["locationEntries"] if e["loadStatus"] == "LOADED"],
                           150, "the code location to load", 0.5)
        yield {"port": port, "url": url, "manifest": manifest, "entries": entries,
               "log": log_path, "home": home}
    finally:
        # Stop what this test started: the script forwards TERM to `dagster dev` (its own
        # process group under set -m), which stops the webserver and the daemon.
        pid_file = home / "dagster-dev.pid"
        dev_pid = int(pid_file.read_text()) if pid_file.exists() else None
        proc.send_signal(signal.SIGTERM)
        stopped = True
        try:
            proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            stopped = False
            if dev_pid:
                os.killpg(dev_pid, signal.SIGKILL)
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        log.close()
        if dev_pid:
            wait_for(lambda: not _alive(dev_pid), 30, "dagster dev to exit", 0.5)
        # Killed only to leave nothing behind: a script that SIGTERM does not stop fails.
        assert stopped, f"scripts/dev.sh did not stop within {STOP_TIMEOUT_S} s of SIGTERM"
        assert proc.returncode == 0, proc.returncode


def launch(port: int, config: dict) -> str:
    params = {"selector": {"repositoryLocationName": "riskstream",
                           "repositoryName": "__repository__", "jobName": "rebuild_interval"},
              "runConfigData": config}
    launched = graphql(port, LAUNCH, {"params": params})["launchRun"]
    assert launched["__typename"] == "LaunchRunSuccess", launched
    return launched["run"]["runId"]


def finished(port: int, run_id: str, timeout: float = 240) -> dict:
    def done():
        run = graphql(port, STATUS, {"id": run_id})["runOrError"]
        return run if run["status"] in ("SUCCESS", "FAILURE", "CANCELED") else None
    return wait_for(done, timeout, "the run to finish", 0.5)


def test_location_riskstream_refuses_bad_intervals_at_launch_in_one_line(dev):
    """Each kind of bad request is refused by the instance's launch guard as the run is
    submitted: when the launch call returns the run has already failed, with the one line as its
    failure message, no step started and nothing materialized (no run worker was started)."""
    [loc] = dev["entries"]
    assert loc["name"] == "riskstream"
    assert loc["locationOrLoadError"]["__typename"] == "RepositoryLocation", loc
    old = dev["manifest"]["cases"]["old_correction"]
    merchant = old["merchant"]
    bad = {
        "end_before_start": ({"merchant": merchant, "start": f"{DAY}T10:00:00Z",
                              "end": f"{DAY}T09:00:00Z"},
                             f"end {DAY}T09:00:00Z is not after start {DAY}T10:00:00Z: the "
                             "interval must be at least one microsecond long"),
        "unparseable_time": ({"merchant": merchant, "start": "yesterday 9am",
                              "end": f"{DAY}T10:00:00Z"},
                             "start 'yesterday 9am' is not an ISO-8601 time: write it like "
                             "2026-10-06T09:00:00Z"),
        "unknown_merchant": ({"merchant": "m-nobody", "start": f"{DAY}T09:00:00Z",
                              "end": f"{DAY}T10:00:00Z"},
                             "merchant 'm-nobody' is unknown: no payment of it has been read "
                             "by the join"),
        "empty_merchant": ({"merchant": "", "start": f"{DAY}T09:00:00Z",
                            "end": f"{DAY}T10:00:00Z"},
                           "merchant is empty: name the merchant whose interval to rebuild"),
    }
    timings = {}
    for kind, (config, expected) in bad.items():
        launched = time.monotonic()
        run_id = launch(dev["port"], config)
        run = graphql(dev["port"], STATUS, {"id": run_id})["runOrError"]
        timings[kind] = round(time.monotonic() - launched, 2)
        assert run["status"] == "FAILURE", (kind, run)
        events = graphql(dev["port"], REFUSAL, {"id": run_id})["logsForRun"]["events"]
        kinds = {e["__typename"] for e in events}
        assert not kinds & {"ExecutionStepStartEvent", "MaterializationEvent",
                            "RunStartEvent", "RunEnqueuedEvent"}, (kind, kinds)
        [failure] = [e for e in events if e["__typename"] == "RunFailureEvent"]
        assert failure["message"] == f"rebuild refused: {expected}", kind
    record_timing("refusal_launch_to_failed_s", timings)
    store = Store(dev["url"])
    assert P.generation_rows(store) == []
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
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
# Screenshots of the operator's walk through the UI; the evidence packet links them.
SHOTS = Path(os.environ.get("RISKSTREAM_UI_SHOTS", ROOT / "evidence" / "out" / "ui"))


def record_timing(name: str, value) -> None:
    """Measured for the evidence packet (a speed target belongs to the benchmark, not here)."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    path = SHOTS / "timing.json"
    timings = json.loads(path.read_text()) if path.exists() else {}
    timings[name] = round(value, 1) if isinstance(value, float) else value
    path.write_text(json.dumps(timings, indent=2, sort_keys=True))


def run_phases(port: int, run_id: str) -> dict:
    """Seconds from the run's first event to its worker starting, each step, and the end."""
    events = graphql(port, EVENTS, {"id": run_id})["logsForRun"]["events"]
    t = [(e["__typename"], e.get("stepKey"), int(e["timestamp"]) / 1000) for e in events
         if e.get("timestamp")]
    first = t[0][2]
    out = {}
    for kind, step, ts in t:
        if kind == "RunStartEvent":
            out["worker_started_s"] = round(ts - first, 1)
        elif kind == "ExecutionStepStartEvent":
            out[f"{step}_start_s"] = round(ts - first, 1)
        elif kind in ("ExecutionStepSuccessEvent", "ExecutionStepFailureEvent"):
            out[f"{step}_end_s"] = round(ts - first, 1)
        elif kind in ("RunSuccessEvent", "RunFailureEvent"):
            out["run_end_s"] = round(ts - first, 1)
    return out


def need_browser():
    try:
        import playwright  # noqa: F401
    except ImportError:
        reason = "playwright is not installed (pip install '.[test]')"
    else:
        reason = None if Path(CHROMIUM).exists() else \
            f"no Chromium at {CHROMIUM} (apt-get install chromium)"
    if reason:
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        print(f"SKIP: {reason}")
        pytest.skip(reason)


def launch_from_launchpad(page, base: str, config: str, shot: Path | None = None,
                          first_visit: bool = False) -> tuple[str, float]:
    """Open the job's launchpad, put `config` in its editor, click Launch Run: the run id and
    the moment of the click (time.monotonic), from which the operator's wait is measured."""
    from playwright.sync_api import expect
    page.goto(f"{base}/locations/riskstream/jobs/rebuild_interval/playground")
    page.locator(".CodeMirror").first.wait_for()
    if first_visit:
        dismiss_welcome(page)
    # The launchpad's config editor: replace the scaffold with the three fields.
    page.evaluate("cfg => document.querySelector('.CodeMirror').CodeMirror.setValue(cfg)",
                  config)
    if shot:
        page.screenshot(path=str(shot))
    # The launchpad keeps Launch Run disabled while it checks the config it was just given
    # (about 1 s); the operator's wait starts when the button can be clicked.
    button = page.get_by_role("button", name="Launch Run")
    expect(button).to_be_enabled()
    clicked = time.monotonic()
    button.click()
    page.wait_for_url("**/runs/**")
    return page.url.rstrip("/").split("/runs/")[1].split("?")[0].split("/")[0], clicked


def dismiss_welcome(page) -> None:
    """A fresh instance greets its first visitor with a newsletter dialog: skip it (the browser
    remembers that, so later visits are not greeted; were one greeted, the dialog would cover
    Launch Run and the click would time out)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    try:
        page.get_by_role("button", name="Skip").click(timeout=5_000)
    except PlaywrightTimeout:
        pass


def test_operator_rebuilds_the_old_correction_from_the_ui(dev):
    need_browser()
    from playwright.sync_api import sync_playwright
    old = dev["manifest"]["cases"]["old_correction"]
    base = f"http://127.0.0.1:{dev['port']}"
    config = (f"merchant: {old['merchant']}\nstart: \"{old['old_event_time']}\"\n"
              f"end: \"{old['new_event_time']}\"\n")
    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.set_default_timeout(60_000)
            # A typo first: the run is refused with one plain line on the run page.
            bad = config.replace(old["old_event_time"], "yesterday 9am")
            run_id, clicked = launch_from_launchpad(page, base, bad, first_visit=True)
            refusal = "rebuild refused: start 'yesterday 9am' is not an ISO-8601 time"
            page.get_by_text(refusal).first.wait_for()
            record_timing("refusal_click_to_shown_s", time.monotonic() - clicked)
            assert finished(dev["port"], run_id)["status"] == "FAILURE"
            page.screenshot(path=str(SHOTS / "0-refused.png"))
            # Then the seed's old correction.
            run_id, clicked = launch_from_launchpad(page, base, config,
                                                    shot=SHOTS / "1-launchpad.png")
            run = finished(dev["port"], run_id)
            record_timing("rebuild_click_to_finished_s", time.monotonic() - clicked)
            record_timing("rebuild_phases", run_phases(dev["port"], run_id))
            tags = {t["key"]: t["value"] for t in run["tags"]}
            assert run["status"] == "SUCCESS", dev["log"].read_text()[-4000:]
            page.reload()
            page.get_by_text("Success").first.wait_for()
            page.screenshot(path=str(SHOTS / "2-run-succeeded.png"))
            gid = tags["riskstream/generation"]
            assert tags["riskstream/merchant"] == old["merchant"]
            assert tags["riskstream/interval"] == f"{old['old_event_time']}/{old['new_event_time']}"
            page.goto(f"{base}/assets/live_generations")
            page.get_by_text(gid).first.wait_for()
            body = page.inner_text("body")
            page.screenshot(path=str(SHOTS / "3-live-generations.png"), full_page=True)
            assert "live" in body and old["merchant"] in body
            page.goto(f"{base}/assets/published_generation")
            page.get_by_text(gid).first.wait_for()
            body = page.inner_text("body")
            page.screenshot(path=str(SHOTS / "4-published-generation.png"), full_page=True)
            for label in ("pairs_added", "pairs_retired", "pairs_revised", "merchant_totals"):
                assert label in body, label
        finally:
            browser.close()
    store = Store(dev["url"])
    [gen] = P.generation_rows(store)
    assert (gen["generation_id"], gen["status"], gen["interval_start"], gen["interval_end"]) == (
        gid, "published", old["old_event_time"], old["new_event_time"])
    assert [q["status"] for q in store.queue("join")] == ["processed"]
    store.dispose()
