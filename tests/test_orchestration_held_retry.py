"""Held join entries are never stranded: an open sink exception of the join holds its rebuild
(fail closed); `repair run` names the held sets and their reasons and exits non-zero; `repair
run --retry-held` retries them (held again while the cause stands); the replay sensor retries a
held set once its cause is gone. A set whose interval the watermarks have not passed waits,
and `repair run` says so with both times."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from sqlalchemy import update

from streaming import join_published as G
from streaming.cli.main import cli
from streaming.join_held import held_entry_sets, retry_cause, watermark_wait
from streaming.store import schema as S
from streaming.store.ops import Store
from streaming.timeutil import US_PER_HOUR
from tests.orchestration_helpers import fresh_warehouse, live_seed, prepared_manifest, resources
from tests.storeutil import write_conflicting_copy

pytestmark = pytest.mark.dagster


@pytest.fixture(scope="module")
def env(seed_dir, tmp_path_factory):
    from dagster import instance_for_test
    prepared_manifest()
    src, manifest = seed_dir
    tmp = tmp_path_factory.mktemp("held_retry")
    url = f"sqlite:///{tmp}/ops.sqlite"
    live_seed(src, url)
    warehouse = fresh_warehouse()
    (tmp / "dagster_home").mkdir()
    with instance_for_test(temp_dir=str(tmp / "dagster_home")) as instance:
        store = Store(url)
        yield {"url": url, "manifest": manifest, "res": resources(url, warehouse),
               "instance": instance, "store": store, "warehouse": warehouse, "src": src}
        store.dispose()


def _tick(env):
    from dagster import build_sensor_context
    from orchestration.sensors import replay_queue_sensor
    return replay_queue_sensor(build_sensor_context(
        instance=env["instance"], cursor=None, resources={"store": env["res"]["store"]}))


def _run(env, req):
    from orchestration.definitions import build_defs
    job = build_defs(env["res"]).resolve_job_def("replay_rebuild")
    return job.execute_in_process(run_config=req.run_config, instance=env["instance"],
                                  tags=req.tags, raise_on_error=False)


def _join_sink_exception(store) -> str:
    """A second writer rewrites one committed join fact with other content."""
    res = write_conflicting_copy(store, "join", "outcome")
    assert res.rejected == 1
    return res.rejected_keys[0]


def test_open_exception_holds_then_retry_publishes_once_resolved(env):
    from dagster import SkipReason
    store, url = env["store"], env["url"]
    old = env["manifest"]["cases"]["old_correction"]
    victim = _join_sink_exception(store)
    [req] = _tick(env).run_requests
    held_run = _run(env, req)
    assert not held_run.success
    materialized = {e.asset_key.to_user_string()
                    for e in held_run.get_asset_materialization_events()}
    assert "published_generation" not in materialized
    [entry] = store.queue("join")
    assert entry["event_id"] == old["payment_id"] and entry["status"] == "held"
    assert entry["status_reason"].startswith("hold:open-exceptions: 1 open blocker (sx-")
    assert G.published_pairs(store) and not [g for g in G.generation_rows(store)
                                            if g["status"] == "published"]
    # `repair run` used to answer "nothing pending" here: it names the held set and fails.
    runner = CliRunner()
    env_vars = {"RISKSTREAM_DUCKDB_PATH": env["warehouse"]}
    out = runner.invoke(cli, ["repair", "run", "--store", url], env=env_vars)
    assert out.exit_code == 1, out.output
    assert "nothing pending; 1 held entry set (retry with --retry-held)" in out.output
    assert f"{old['merchant']} 2026-10-06 entries {entry['id']} held: hold:open-exceptions" \
        in out.output
    # While the exception is open the cause stands: the sensor does not retry, and an explicit
    # retry is held again.
    [held] = held_entry_sets(store)
    assert retry_cause(store, held) is None
    skip = _tick(env)
    assert isinstance(skip, SkipReason) and "held until their cause is gone" in skip.skip_message
    again = runner.invoke(cli, ["repair", "run", "--store", url, "--retry-held",
                                "--log-level", "ERROR"], env=env_vars)
    assert again.exit_code == 1, again.output
    assert f"retrying held entries {entry['id']} of {old['merchant']} 2026-10-06 (held: " \
           f"hold:open-exceptions" in again.output
    assert store.queue("join")[0]["status"] == "held"
    # A recorded decision resolves the exception: the sensor now retries, once per cause.
    [blocker] = [r for r in store.sink_exception_rows("join") if r["fact_key"] == victim]
    resolved = runner.invoke(cli, ["exceptions", "resolve", "--store", url, "--id",
                                   f"sx-{blocker['id']}", "--decision", "keep-existing",
                                   "--by", "ops", "--reason", "test writer"])
    assert resolved.exit_code == 0, resolved.output
    [held] = held_entry_sets(store)
    assert retry_cause(store, held) == "the gate blockers it was held on are resolved"
    [retry] = _tick(env).run_requests
    assert retry.run_key.endswith(":retry:" + retry.run_key.rsplit(":", 1)[1])
    assert retry.run_key == held.retry_run_key(retry_cause(store, held))
    assert retry.tags["riskstream/held_reason"].startswith("hold:open-exceptions")
    assert retry.tags["riskstream/retry_cause"] == "the gate blockers it was held on are resolved"
    assert retry.run_config["ops"]["candidate_generation"]["config"]["entry_ids"] == \
        [entry["id"]]
    done = _run(env, retry)
    assert done.success
    assert [q["status"] for q in store.queue("join")] == ["processed"]
    [gen] = [g for g in G.generation_rows(store) if g["status"] == "published"]
    view = {r["signal_id"] for r in G.published_pairs(store)
            if r["payment_id"] == old["payment_id"]}
    assert old["gains"] in view and old["loses"] not in view
    assert gen["interval_start"] == old["old_event_time"]


@pytest.fixture
def waiting_store(seed_dir, tmp_path):
    url = f"sqlite:///{tmp_path}/ops.sqlite"
    live_seed(seed_dir[0], url)
    store = Store(url)
    [entry] = store.queue("join")
    # The entry's event lies two hours past the live watermarks (a correction that moved its
    # payment forward): its interval cannot be rebuilt yet.
    wm = store.last_metrics("join")["input_wm"]["payments"]
    with store.engine.begin() as conn:
        conn.execute(update(S.replay_queue).where(S.replay_queue.c.id == entry["id"])
                     .values(event_us=wm + 2 * US_PER_HOUR, detail="{}"))
    yield url, store, entry
    store.dispose()


def test_repair_run_says_entries_wait_for_the_watermark_with_both_times(waiting_store, tmp_path):
    url, store, entry = waiting_store
    why = watermark_wait(store, [entry["id"]])
    assert why.startswith("rebuild needs payment_wm > ") and "live has payment_wm=" in why
    out = CliRunner().invoke(cli, ["repair", "run", "--store", url],
                             env={"RISKSTREAM_DUCKDB_PATH": str(tmp_path / "wh.duckdb")})
    assert out.exit_code == 1, out.output
    assert "did not publish" not in out.output and "held generations" not in out.output
    assert f"entries {entry['id']} of {entry['key']} {entry['queue_date']} wait for the " \
           f"watermark: {why}" in out.output
    assert "entries wait for the live watermarks to pass their interval" in out.output
    assert store.queue("join")[0]["status"] == "pending"
    assert G.generation_rows(store) == []


def test_manual_rebuild_of_an_empty_interval_is_held_not_published(env):
    from orchestration.definitions import build_defs
    from orchestration.jobs import manual_run_config
    store = env["store"]
    before = {g["generation_id"]: g["status"] for g in G.generation_rows(store)}
    job = build_defs(env["res"]).resolve_job_def("rebuild_interval")
    # A known merchant (an unknown one is refused before anything is built), an hour before
    # the seed's first payment.
    merchant = env["manifest"]["cases"]["old_correction"]["merchant"]
    config = manual_run_config(merchant, "2026-10-06T05:00:00Z", "2026-10-06T06:00:00Z")
    run = job.execute_in_process(run_config=config, instance=env["instance"],
                                 raise_on_error=False)
    assert not run.success
    assert "published_generation" not in {
        e.asset_key.to_user_string() for e in run.get_asset_materialization_events()}
    [held] = [g for g in G.generation_rows(store) if g["generation_id"] not in before]
    assert held["status"] == "held"
    assert held["reason"] == (f"hold:nothing-to-judge: the rebuild interval ({merchant} "
                              "[2026-10-06T05:00:00Z, 2026-10-06T06:00:00Z]) holds no payment "
                              "and no queue entry")
    assert {g["generation_id"]: g["status"] for g in G.generation_rows(store)
            if g["generation_id"] in before} == before
