"""The manual rebuild request: one validation behind the UI job's typed config and behind
`riskstream rebuild`. Each refusal is one plain line naming the field, from the validator, from
the Dagster job (a `Failure` before anything is built) and from the CLI (exit 2)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from streaming.store.ops import Store
from tests.orchestration_helpers import fresh_warehouse, live_seed, prepared_manifest, resources

pytestmark = pytest.mark.dagster
DAY = "2026-10-06"


@pytest.fixture(scope="module")
def env(seed_dir, tmp_path_factory):
    src, manifest = seed_dir
    tmp = tmp_path_factory.mktemp("request")
    url = f"sqlite:///{tmp}/ops.sqlite"
    live_seed(src, url)
    store = Store(url)
    yield {"url": url, "store": store, "merchant": manifest["cases"]["old_correction"]["merchant"]}
    store.dispose()


def refusals(merchant: str) -> list[tuple[str, str, str, str]]:
    """(merchant, start, end, the refusal)."""
    return [
        ("", f"{DAY}T09:00:00Z", f"{DAY}T10:00:00Z",
         "merchant is empty: name the merchant whose interval to rebuild"),
        ("m-nobody", f"{DAY}T09:00:00Z", f"{DAY}T10:00:00Z",
         "merchant 'm-nobody' is unknown: no payment of it has been read by the join"),
        (merchant, "yesterday 9am", f"{DAY}T10:00:00Z",
         "start 'yesterday 9am' is not an ISO-8601 time: write it like 2026-10-06T09:00:00Z"),
        (merchant, f"{DAY}T09:00:00", f"{DAY}T10:00:00Z",
         f"start '{DAY}T09:00:00' has no time zone: add Z (UTC) or an offset, e.g. "
         "2026-10-06T09:00:00Z"),
        (merchant, f"{DAY}T09:00:00Z", "",
         "end is empty: give an ISO-8601 UTC time such as 2026-10-06T09:00:00Z"),
        (merchant, f"{DAY}T10:00:00Z", f"{DAY}T09:00:00Z",
         f"end {DAY}T09:00:00Z is not after start {DAY}T10:00:00Z: the interval must be at "
         "least one microsecond long"),
        (merchant, f"{DAY}T10:00:00Z", f"{DAY}T10:00:00Z",
         f"end {DAY}T10:00:00Z is not after start {DAY}T10:00:00Z: the interval must be at "
         "least one microsecond long"),
        (merchant, "2026-10-01T00:00:00Z", "2026-10-09T00:00:00Z",
         "the interval spans more than 7 days: rebuild it in pieces of at most 7 days"),
    ]


def test_each_refusal_is_one_plain_line_naming_the_field(env):
    from orchestration.rebuild_request import RebuildRefused, validate
    for merchant, start, end, expected in refusals(env["merchant"]):
        with pytest.raises(RebuildRefused) as exc:
            validate(env["store"], merchant, start, end)
        assert str(exc.value) == expected


def test_a_valid_request_is_normalised_to_utc_and_split_at_midnight(env):
    from orchestration.rebuild_request import validate
    req = validate(env["store"], f" {env['merchant']} ", f"{DAY}T23:30:00+02:00",
                   "2026-10-07T01:15:00Z")
    assert (req.merchant, req.start, req.end) == (env["merchant"], f"{DAY}T21:30:00Z",
                                                  "2026-10-07T01:15:00Z")
    assert [(p.as_dict()["start"], p.as_dict()["end"]) for p in req.pieces] == [
        (f"{DAY}T21:30:00Z", f"{DAY}T23:59:59.999999Z"),
        ("2026-10-07T00:00:00Z", "2026-10-07T01:15:00Z")]
    assert req.dates == [DAY, "2026-10-07"]


def test_the_ui_job_refuses_with_the_same_line_before_building_anything(env):
    from dagster import instance_for_test
    from orchestration.definitions import build_defs
    from orchestration.jobs import manual_run_config
    prepared_manifest()
    job = build_defs(resources(env["url"], fresh_warehouse())).resolve_job_def("rebuild_interval")
    cases = refusals(env["merchant"])
    with instance_for_test() as instance:
        for merchant, start, end, expected in (cases[1], cases[2], cases[5]):
            result = job.execute_in_process(run_config=manual_run_config(merchant, start, end),
                                            instance=instance, raise_on_error=False)
            assert not result.success
            [failure] = [e for e in result.all_events if e.is_step_failure]
            assert failure.step_key == "candidate_generation"
            assert failure.step_failure_data.user_failure_data.description == \
                f"rebuild refused: {expected}"
            assert not result.get_asset_materialization_events()
    assert not env["store"].rows(__import__("sqlalchemy").text(
        "SELECT generation_id FROM generations"))


def test_riskstream_rebuild_refuses_with_exit_2_and_one_line(env):
    from orchestration.cli import rebuild
    runner = CliRunner()
    for merchant, start, end, expected in refusals(env["merchant"]):
        out = runner.invoke(rebuild, ["--merchant", merchant, "--from", start, "--to", end,
                                      "--store", env["url"],
                                      "--warehouse", fresh_warehouse()])
        assert out.exit_code == 2, out.output
        assert out.output == f"rebuild refused: {expected}\n"


def test_the_launch_guard_fails_a_refused_run_at_submission(env, monkeypatch):
    """The instance's run coordinator (deploy/dagster.*.yaml) checks a `rebuild_interval` run as
    it is submitted: a refused request fails its run at once, with the same line as the run's
    failure message and no step started; a valid request is queued for the daemon."""
    from dagster import (DagsterEventType, DagsterRunStatus, QueuedRunCoordinator,
                         SubmitRunContext, instance_for_test)
    from orchestration.definitions import build_defs
    from orchestration.jobs import manual_run_config
    monkeypatch.setenv("RISKSTREAM_STORE_URL", env["url"])
    prepared_manifest()
    job = build_defs(resources(env["url"], fresh_warehouse())).resolve_job_def("rebuild_interval")
    guard = {"module": "orchestration.launch_guard", "class": "LaunchGuardRunCoordinator",
             "config": {"dequeue_interval_seconds": 1}}
    with instance_for_test(overrides={"run_coordinator": guard}) as instance:
        def submit(merchant: str, start: str, end: str):
            run = instance.create_run_for_job(
                job, run_config=manual_run_config(merchant, start, end))
            return instance.run_coordinator.submit_run(SubmitRunContext(run, workspace=None))
        for merchant, start, end, expected in refusals(env["merchant"]):
            run = submit(merchant, start, end)
            assert run.status == DagsterRunStatus.FAILURE
            events = [e.dagster_event for e in instance.all_logs(run.run_id)
                      if e.dagster_event is not None]
            # Only what run creation plans, then the failure: never queued, no step started.
            assert {e.event_type for e in events} == {
                DagsterEventType.ASSET_MATERIALIZATION_PLANNED,
                DagsterEventType.ASSET_CHECK_EVALUATION_PLANNED, DagsterEventType.RUN_FAILURE}
            [failure] = [e for e in events if e.event_type == DagsterEventType.RUN_FAILURE]
            assert failure.message == f"rebuild refused: {expected}"
        # A valid request, and any other job, goes on to Dagster's queue untouched.
        queued = []
        monkeypatch.setattr(QueuedRunCoordinator, "submit_run",
                            lambda self, context: queued.append(context.dagster_run.job_name))
        submit(env["merchant"], f"{DAY}T09:00:00Z", f"{DAY}T10:00:00Z")
        replay = build_defs(resources(env["url"], fresh_warehouse())).resolve_job_def(
            "replay_rebuild")
        other = instance.create_run_for_job(replay, run_config={})
        instance.run_coordinator.submit_run(SubmitRunContext(other, workspace=None))
        assert queued == ["rebuild_interval", "replay_rebuild"]
    monkeypatch.setenv("RISKSTREAM_STORE_URL", env["url"] + ".missing")
    from orchestration.launch_guard import refusal
    assert refusal(manual_run_config(env["merchant"], f"{DAY}T09:00:00Z",
                                     f"{DAY}T10:00:00Z")).startswith(
        "rebuild refused: no riskstream store at sqlite:///")
