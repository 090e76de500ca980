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


def queued_ids(store) -> str:
    return ", ".join(str(q["id"]) for q in store.queue("join"))


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
    assert req.partition_key is None  # the rebuild assets are not partitioned
    assert req.tags == {"riskstream/merchant": old["merchant"], "riskstream/queue_date": DAY,
                        "riskstream/queue_entry_ids": str(entry_id)}
    assert req.run_key.startswith(f"join:{old['merchant']}:{DAY}:")
    assert req.run_config["ops"]["candidate_generation"]["config"]["entry_ids"] == [entry_id]
    assert sensor_tick.cursor == str(entry_id)
    assert not sensor_tick.dynamic_partitions_requests
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
    job = defs_for(env).resolve_job_def("replay_rebuild")
    return job.execute_in_process(run_config=req.run_config,
                                  instance=env["instance"], tags=req.tags,
                                  raise_on_error=False)


def test_old_correction_is_published_through_the_checks(env, first_run):
    from orchestration.warehouse import connect, diff_rows
    old = env["manifest"]["cases"]["old_correction"]
    store = env["store"]
    assert first_run.success
    assert {"published_generation", "diff_pair_keys", "diff_merchant_totals",
            "candidate/pairs"} <= materialized(first_run)
    checks = first_run.get_asset_check_evaluations()
    assert checks and all(c.passed for c in checks)
    assert "changes_only_from_queued_events" in {c.check_name for c in checks}
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
    # The operator's view: run tags, the publication's diff, the live_generations table.
    tags = env["instance"].get_run_by_id(first_run.run_id).tags
    assert tags["riskstream/generation"] == gen["generation_id"]
    assert tags["riskstream/merchant"] == old["merchant"]
    assert tags["riskstream/interval"] == f"{old['old_event_time']}/{old['new_event_time']}"
    [pub] = [m.materialization for m in first_run.get_asset_materialization_events()
             if m.asset_key.to_user_string() == "published_generation"]
    assert pub.metadata["generation_id"].value == gen["generation_id"]
    assert pub.metadata["merchant"].value == old["merchant"]
    assert (pub.metadata["pairs_added"].value, pub.metadata["pairs_retired"].value,
            pub.metadata["pairs_revised"].value) == (len(added), len(retired), len(revised))
    [tot] = pub.metadata["merchant_totals"].records
    assert (tot.data["merchant"], tot.data["amount_before"], tot.data["amount_after"]) == (
        merchant, cur_amt, new_amt)
    [view] = [m.materialization for m in first_run.get_asset_materialization_events()
              if m.asset_key.to_user_string() == "live_generations"]
    [row] = [r.data for r in view.metadata["generations"].records]
    assert (row["generation"], row["status"], row["merchant"], row["pairs_added"],
            row["pairs_retired"], row["matched_before"], row["matched_after"]) == (
        gen["generation_id"], "live", old["merchant"], len(added), len(retired), cur_m, new_m)
    assert row["why"] == f"settled queue entries {queued_ids(store)}"
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
    from orchestration.jobs import manual_run_config
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
    job = defs_for(env).resolve_job_def("rebuild_interval")
    config = manual_run_config(old["merchant"], f"{DAY}T09:00:00Z", f"{DAY}T10:00:00Z")
    failed = job.execute_in_process(run_config=config,
                                    instance=env["instance"], raise_on_error=False)
    assert not failed.success
    assert "published_generation" not in materialized(failed)
    assert "candidate/pairs" in materialized(failed)
    [bad] = [c for c in failed.get_asset_check_evaluations() if not c.passed]
    assert bad.check_name == "changes_only_from_queued_events"
    # The failing check lists the failing rows: the pair of the never-joined signal.
    rows = bad.metadata["failing_rows"].value
    assert rows and {r["signal_id"] for r in rows} == {"risk-never-joined"}
    assert all(r["change"] == "added" for r in rows)
    assert bad.description.startswith("changes_only_from_queued_events failed (blocks "
                                      "publication) on ")
    gens = {g["generation_id"]: g for g in P.generation_rows(store)}
    [held] = [g for g in gens.values() if g["status"] == "held"]
    assert held["reason"] == "blocking check failed: changes_only_from_queued_events"
    # The run fails with one plain line naming the held generation and the failing rows.
    [failure] = [e for e in failed.all_events if e.is_step_failure]
    line = failure.step_failure_data.user_failure_data.description
    assert "\n" not in line and line.startswith(f"generation {held['generation_id']} held, "
                                                  "not published: changes_only_from_queued_events")
    assert "risk-never-joined" in line and f"Generation {last_good} stays live" in line
    # The generations view recorded by the held run: the last good one live, the new one held.
    [view] = [m for m in failed.get_asset_materialization_events()
              if m.asset_key.to_user_string() == "live_generations"]
    table = {r.data["generation"]: r.data for r in
             view.materialization.metadata["generations"].records}
    assert table[last_good]["status"] == "live"
    assert table[held["generation_id"]]["status"] == "held"
    assert table[held["generation_id"]]["predecessor"] == last_good
    assert table[held["generation_id"]]["why"] == held["reason"]
    assert gens[last_good]["status"] == "published"
    assert {p["generation_id"] for p in published_pointers(store)} == {last_good}
    assert P.published_pairs(store) == view_before
    with connect(env["warehouse"]) as con:
        kept = con.execute(f"SELECT count(*) FROM candidates.pairs_{held['generation_id']} "
                           "WHERE signal_id = 'risk-never-joined'").fetchone()[0]
    assert kept > 0  # the candidate stays for inspection

    with store.engine.begin() as conn:
        conn.execute(delete(S.archive).where(S.archive.c.offset == 999_999))
    passed = job.execute_in_process(run_config=config,
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


def test_riskstream_rebuild_runs_the_ui_job_in_process(env, first_run):
    """`riskstream rebuild` is `rebuild_interval` in-process: it publishes a generation that
    supersedes the live one for the interval and tags its run."""
    from orchestration.cli import rebuild
    store = env["store"]
    old = env["manifest"]["cases"]["old_correction"]
    before = {g["generation_id"] for g in P.generation_rows(store) if g["status"] == "published"}
    out = CliRunner().invoke(rebuild, [
        "--merchant", old["merchant"], "--from", f"{DAY}T08:00:00Z", "--to", f"{DAY}T11:00:00Z",
        "--store", env["url"], "--warehouse", env["warehouse"]])
    assert out.exit_code == 0, out.output
    gens = {g["generation_id"]: g for g in P.generation_rows(store)}
    [new] = [g for g in gens.values() if g["status"] == "published"]
    assert new["generation_id"] not in before
    assert (new["interval_key"], new["interval_start"], new["interval_end"]) == (
        old["merchant"], f"{DAY}T08:00:00Z", f"{DAY}T11:00:00Z")
    assert all(gens[g]["status"] == "superseded" for g in before)
    assert out.output.splitlines()[-1].startswith(
        f"rebuild {old['merchant']} [{DAY}T08:00:00Z, {DAY}T11:00:00Z]: generation "
        f"{new['generation_id']} published (run ")
