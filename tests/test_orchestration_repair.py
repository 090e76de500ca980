"""The repair route in-process: the join seed's old correction goes live -> replay queue ->
sensor run request -> candidate -> blocking checks -> published; then a candidate whose blocking
check fails leaves publication un-materialized and the last-good generation current, and the
same rebuild passes and publishes once the cause is gone."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from sqlalchemy import delete

from streaming import join_published as P
from streaming.cli.main import cli
from streaming.join_published import published_pointers
from streaming.store import schema as S
from streaming.store.ops import Store, loads
from tests.orchestration_helpers import fresh_warehouse, live_seed, prepared_manifest, resources

pytestmark = pytest.mark.dagster

DAY = "2026-10-06"


@pytest.fixture(scope="module")
def env(seed_dir, tmp_path_factory):
    from dagster import instance_for_test
    prepared_manifest()
    src, manifest = seed_dir
    tmp = tmp_path_factory.mktemp("repair")
    url = f"sqlite:///{tmp}/ops.sqlite"
    live_seed(src, url)
    warehouse = fresh_warehouse()
    res = resources(url, warehouse)
    (tmp / "dagster_home").mkdir()
    with instance_for_test(temp_dir=str(tmp / "dagster_home")) as instance:
        yield {"url": url, "manifest": manifest, "res": res, "instance": instance,
               "store": Store(url), "warehouse": warehouse}


def defs_for(env):
    from orchestration.definitions import build_defs
    return build_defs(env["res"])


def materialized(result) -> set[str]:
    return {e.asset_key.to_user_string() for e in result.get_asset_materialization_events()}


@pytest.fixture(scope="module")
def sensor_tick(env):
    from dagster import SensorResult, build_sensor_context

    from orchestration.sensors import replay_queue_sensor
    ctx = build_sensor_context(instance=env["instance"], cursor=None,
                               resources={"store": env["res"]["store"]})
    result = replay_queue_sensor(ctx)
    assert isinstance(result, SensorResult)
    return result


def test_sensor_requests_one_run_per_entry_set_and_advances_its_cursor(env, sensor_tick):
    from dagster import SkipReason, build_sensor_context

    from orchestration.sensors import replay_queue_sensor
    old = env["manifest"]["cases"]["old_correction"]
    [req] = sensor_tick.run_requests
    queued = env["store"].queue("join", "pending")
    assert [q["event_id"] for q in queued] == [old["payment_id"]]
    entry_id = queued[0]["id"]
    assert req.partition_key == DAY
    assert req.run_key.startswith(f"join:{old['merchant']}:{DAY}:")
    assert req.run_config["ops"]["candidate_generation"]["config"]["entry_ids"] == [entry_id]
    assert sensor_tick.cursor == str(entry_id)
    assert [r.partition_keys for r in sensor_tick.dynamic_partitions_requests] == [[DAY]]
    # The next tick with the cursor requests nothing; a tick without it gives the same run key,
    # which Dagster deduplicates.
    again = replay_queue_sensor(build_sensor_context(
        instance=env["instance"], cursor=sensor_tick.cursor,
        resources={"store": env["res"]["store"]}))
    assert isinstance(again, SkipReason)
    fresh = replay_queue_sensor(build_sensor_context(
        instance=env["instance"], cursor=None, resources={"store": env["res"]["store"]}))
    assert [r.run_key for r in fresh.run_requests] == [req.run_key]


@pytest.fixture(scope="module")
def first_run(env, sensor_tick):
    [req] = sensor_tick.run_requests
    env["instance"].add_dynamic_partitions("replay_dates", [req.partition_key])
    job = defs_for(env).get_job_def("replay_rebuild")
    return job.execute_in_process(run_config=req.run_config, partition_key=req.partition_key,
                                  instance=env["instance"], tags=req.tags,
                                  raise_on_error=False)


def test_old_correction_is_published_through_the_checks(env, first_run):
    from orchestration.warehouse import connect, diff_rows
    old = env["manifest"]["cases"]["old_correction"]
    store = env["store"]
    assert first_run.success
    assert {"published_generation", "diff_pair_keys", "diff_merchant_totals",
            "rebuild/cand_pairs"} <= materialized(first_run)
    checks = first_run.get_asset_check_evaluations()
    assert checks and all(c.passed for c in checks)
    assert any(c.check_name.startswith("changed_pairs_involve_entry_set") for c in checks)
    [gen] = P.generation_rows(store)
    assert (gen["status"], gen["interval_start"], gen["interval_end"]) == (
        "published", old["old_event_time"], old["new_event_time"])
    assert gen["validated_at"] and gen["published_at"]
    view = [r for r in P.published_pairs(store) if r["payment_id"] == old["payment_id"]]
    signals = {r["signal_id"] for r in view}
    assert old["gains"] in signals and old["loses"] not in signals
    assert {r["generation_id"] for r in view} == {gen["generation_id"]}
    # The diff models hold exactly the expected changes and merchant totals.
    with connect(env["warehouse"]) as con:
        diff = diff_rows(con)
    added = {s for c, p, s in diff["pairs"] if c == "added"}
    retired = {s for c, p, s in diff["pairs"] if c == "retired"}
    revised = {s for c, p, s in diff["pairs"] if c == "revised"}
    assert old["gains"] in added and retired == {old["loses"]}
    assert {p for _, p, _ in diff["pairs"]} == {old["payment_id"]}
    assert added | revised == signals
    amounts = {loads(f["payload"])["payment_rev"]: loads(f["payload"])["amount_cents"]
               for f in store.facts("join", "outcome")
               if f["logical_key"] == old["payment_id"]}
    [(merchant, cur_n, cur_m, cur_amt, new_n, new_m, new_amt)] = diff["totals"]
    assert merchant == old["merchant"] and (cur_n, cur_m) == (new_n, new_m)
    assert new_amt - cur_amt == amounts[2] - amounts[1]
    # The CLI reads the same history and view.
    runner = CliRunner()
    out = runner.invoke(cli, ["generations", "list", "--store", env["url"]])
    assert out.exit_code == 0, out.output
    assert out.output.splitlines() == [
        "generation_id,interval_start,interval_end,status,reason",
        f"{gen['generation_id']},{old['old_event_time']},{old['new_event_time']},published,"]
    pairs = runner.invoke(cli, ["join", "pairs", "--published", "--store", env["url"],
                                "--format", "json"])
    rows = [r for r in loads(pairs.output) if r["payment_id"] == old["payment_id"]]
    assert {r["signal_id"] for r in rows} == signals
    assert [q["status"] for q in store.queue("join")] == ["processed"]


def test_failing_blocking_check_holds_then_passing_check_publishes(env, first_run):
    """A record the live path never joined (archived, unmatched) makes a manual rebuild change a
    pair outside any entry set: the check blocks publication; once it is gone, the same rebuild
    publishes and supersedes the last-good generation."""
    from orchestration.jobs import rebuild_run_config
    from orchestration.warehouse import connect
    store = env["store"]
    old = env["manifest"]["cases"]["old_correction"]
    [last_good] = [g["generation_id"] for g in P.generation_rows(store)
                   if g["status"] == "published"]
    view_before = P.published_pairs(store)
    stray = {"pipeline": "join", "topic": "risk_signals", "partition": 0, "offset": 999_999,
             "event_id": "risk-never-joined", "revision": 1, "key": old["merchant"],
             "event_us": 1791279000000000, "arrival_us": 1791279000000000,
             "payload": '{"score":0.5}', "payload_hash": "x", "disposition": "accepted",
             "batch_seq": None}
    with store.engine.begin() as conn:
        conn.execute(S.archive.insert(), [stray])
    job = defs_for(env).get_job_def("rebuild_interval")
    config = rebuild_run_config(merchant=old["merchant"], start=f"{DAY}T09:00:00Z",
                                end=f"{DAY}T10:00:00Z")
    failed = job.execute_in_process(run_config=config, partition_key=DAY,
                                    instance=env["instance"], raise_on_error=False)
    assert not failed.success
    assert "published_generation" not in materialized(failed)
    assert "rebuild/cand_pairs" in materialized(failed)
    bad = [c for c in failed.get_asset_check_evaluations() if not c.passed]
    assert [c.check_name for c in bad] == [
        n for n in (c.check_name for c in bad) if n.startswith("changed_pairs_involve_entry_set")]
    assert bad
    gens = {g["generation_id"]: g for g in P.generation_rows(store)}
    [held] = [g for g in gens.values() if g["status"] == "held"]
    assert held["reason"].startswith("blocking check failed: changed_pairs_involve_entry_set")
    assert gens[last_good]["status"] == "published"
    assert {p["generation_id"] for p in published_pointers(store)} == {last_good}
    assert P.published_pairs(store) == view_before
    with connect(env["warehouse"]) as con:
        kept = con.execute(f"SELECT count(*) FROM candidates.pairs_{held['generation_id']} "
                           "WHERE signal_id = 'risk-never-joined'").fetchone()[0]
    assert kept > 0  # the candidate stays for inspection

    with store.engine.begin() as conn:
        conn.execute(delete(S.archive).where(S.archive.c.offset == 999_999))
    passed = job.execute_in_process(run_config=config, partition_key=DAY,
                                    instance=env["instance"], raise_on_error=False)
    assert passed.success
    assert "published_generation" in materialized(passed)
    assert all(c.passed for c in passed.get_asset_check_evaluations())
    gens = {g["generation_id"]: g["status"] for g in P.generation_rows(store)}
    assert gens[last_good] == "superseded"
    assert gens[held["generation_id"]] == "published"
    assert {p["generation_id"] for p in published_pointers(store)} == {
        held["generation_id"]}
    # Same rows as before, now all from the new generation inside its wider interval.
    strip = lambda rows: sorted((r["payment_id"], r["signal_id"], r["pair_id"]) for r in rows)  # noqa: E731
    assert strip(P.published_pairs(store)) == strip(view_before)
