"""Candidate rebuilds and generations on the join's seed scenario, without Dagster: the batch
rebuild agrees with the live join, the old correction's generation retires and adds exactly the
expected pairs, publication is one compare-and-set transaction, a held candidate changes
nothing, and the published view is never mixed. Runs on SQLite and PostgreSQL."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import select

from riskstream_tools.references.join import candidate_pairs
from streaming import join_generations as G
from streaming import join_published as P
from streaming import join_rebuild as R
from streaming.host.loop import Worker
from streaming.host.settings import RunSettings
from streaming.pipelines.join import SPEC
from streaming.store import schema as S
from streaming.store.ops import Store, loads
from streaming.timeutil import US_PER_DAY, US_PER_MIN, parse_utc_us


def run_live(seed_dir: str, url: str, end_of_stream: bool = True) -> Store:
    Worker(SPEC, RunSettings(source=seed_dir, store_url=url, end_of_stream=end_of_stream)).run()
    return Store(url)


def latest_events(store: Store, topic: str) -> dict[str, tuple[str, int]]:
    a = S.archive.c
    best: dict[str, dict] = {}
    for r in store.rows(select(a.event_id, a.revision, a.key, a.event_us).where(
            a.pipeline == "join", a.topic == topic,
            a.disposition.in_(R.LIVE_DISPOSITIONS))):
        if r["event_id"] not in best or r["revision"] > best[r["event_id"]]["revision"]:
            best[r["event_id"]] = r
    return {k: (v["key"], v["event_us"]) for k, v in best.items()}


@pytest.fixture
def live(seed_dir, store_url):
    src, manifest = seed_dir
    store = run_live(src, store_url)
    yield store, manifest
    store.dispose()


def test_batch_rebuild_agrees_with_live_join(live):
    """Every merchant's day rebuilt in DuckDB gives the live path's current pairs, pair id for
    pair id; the only difference is the queued correction the live path could not apply."""
    store, manifest = live
    day = parse_utc_us(manifest["t0"]) // US_PER_DAY * US_PER_DAY
    live_pairs = {(r["payment_id"], r["signal_id"]): r["pair_id"]
                  for r in P.published_pairs(store)}
    merchants = sorted({m for m, _ in latest_events(store, "payments").values()})
    batch_pairs = {}
    for m in merchants:
        cand = R.build_candidate(store, [], pieces=[P.Piece(m, day, day + US_PER_DAY - 1)])
        assert cand.based_on == []
        batch_pairs.update({(p["payment_id"], p["signal_id"]): p["pair_id"]
                            for p in cand.pairs})
    old = manifest["cases"]["old_correction"]
    differs = {k for k in set(live_pairs) | set(batch_pairs)
               if live_pairs.get(k) != batch_pairs.get(k)}
    assert differs and {pid for pid, _ in differs} == {old["payment_id"]}
    # Apart from that payment the two agree exactly, and both match the naive oracle.
    live_rest = {k: v for k, v in live_pairs.items() if k[0] != old["payment_id"]}
    batch_rest = {k: v for k, v in batch_pairs.items() if k[0] != old["payment_id"]}
    assert live_rest == batch_rest
    oracle = candidate_pairs(latest_events(store, "payments"),
                             latest_events(store, "risk_signals"))
    assert set(batch_pairs) == oracle


def test_old_correction_generation_publishes(live):
    store, manifest = live
    old = manifest["cases"]["old_correction"]
    sets = R.entry_sets(store)
    assert [(s.merchant, s.queue_date, s.event_ids) for s in sets] == [
        (old["merchant"], old["new_event_time"][:10], [f"payments:{old['payment_id']}"])]
    cand = R.build_candidate(store, sets[0].entry_ids)
    assert [(p.merchant, p.start_us, p.end_us) for p in cand.pieces] == [
        (old["merchant"], parse_utc_us(old["old_event_time"]),
         parse_utc_us(old["new_event_time"]))]
    diff = G.pair_diff(cand)
    payments = latest_events(store, "payments")
    signals = latest_events(store, "risk_signals")
    before = {s for p, s in candidate_pairs(
        {old["payment_id"]: (old["merchant"], parse_utc_us(old["old_event_time"]))}, signals)}
    after = {s for p, s in candidate_pairs({old["payment_id"]: payments[old["payment_id"]]},
                                           signals)}
    assert {r["signal_id"] for r in diff["added"]} == after - before
    assert {r["signal_id"] for r in diff["retired"]} == before - after
    assert old["gains"] in after - before and old["loses"] in before - after
    assert {r["signal_id"] for r in diff["revised"]} == before & after
    assert {r["payment_id"] for r in diff["added"] + diff["retired"] + diff["revised"]} == {
        old["payment_id"]}

    G.record_candidate(store, cand)
    result = G.publish_generation(store, cand)
    assert result["entries_processed"] == 1 and result["corrected_finals"] == [old["payment_id"]]
    view = {(r["payment_id"], r["signal_id"]): r for r in P.published_pairs(store)}
    mine = {s for p, s in view if p == old["payment_id"]}
    assert mine == after
    assert all(view[(old["payment_id"], s)]["generation_id"] == cand.generation_id
               for s in mine)
    assert all(view[(old["payment_id"], s)]["payment_rev"] == old["revision"] for s in mine)
    # The live current view is untouched: the published view is what changed.
    assert {r["logical_key"].split("|")[1] for r in store.current("join", "pair")
            if r["logical_key"].startswith(old["payment_id"] + "|")
            and r["status"] == "current"} == before
    rows = P.generation_rows(store)
    assert [(r["generation_id"], r["status"], r["interval_start"], r["interval_end"])
            for r in rows] == [(cand.generation_id, "published", old["old_event_time"],
                                old["new_event_time"])]
    assert [(q["status"], q["generation_id"]) for q in store.queue("join")] == [
        ("processed", cand.generation_id)]
    outcome = [r for r in store.current("join", "outcome")
               if r["logical_key"] == old["payment_id"]][0]
    payload = loads(outcome["payload"])
    assert (outcome["status"], payload["match_count"], payload["payment_rev"]) == (
        "corrected_final", len(after), old["revision"])
    fact = [f for f in store.facts("join", "outcome") if f["fact_key"] == outcome["fact_key"]][0]
    # The predecessor is revision 1's live outcome, keyed by that revision's payment time.
    assert fact["predecessor_key"].startswith(
        f"outcome|{parse_utc_us(old['old_event_time'])}|{old['payment_id']}|1|")
    assert fact["generation_id"] == cand.generation_id
    # Nothing is left pending, so a second look finds no entry set.
    assert R.entry_sets(store) == []


def test_stale_candidate_loses_the_compare_and_set(live):
    store, _ = live
    ids = R.entry_sets(store)[0].entry_ids
    first = R.build_candidate(store, ids)
    second = R.build_candidate(store, ids)
    G.record_candidate(store, first)
    G.publish_generation(store, first)
    facts_before = len(store.facts("join"))
    with pytest.raises(G.GenerationConflict):
        G.publish_generation(store, second)
    assert len(store.facts("join")) == facts_before
    # A rebuild planned now is built on the published pointer and replaces it.
    manual = R.build_candidate(store, [], pieces=first.pieces)
    assert [b["generation_id"] for b in manual.based_on] == [first.generation_id]
    assert G.pair_diff(manual) == {"added": [], "retired": [], "revised": []}
    G.record_candidate(store, manual)
    out = G.publish_generation(store, manual)
    assert out["replaced"] == [first.generation_id] and out["pointer_version"] == 2
    statuses = {r["generation_id"]: r["status"] for r in P.generation_rows(store)}
    assert statuses == {first.generation_id: "superseded", manual.generation_id: "published"}


def test_held_candidate_keeps_the_last_good_view(live):
    store, _ = live
    ids = R.entry_sets(store)[0].entry_ids
    view_before = P.published_pairs(store)
    cand = R.build_candidate(store, ids)
    G.record_candidate(store, cand)
    assert G.hold_entries(store, ids, cand.generation_id, "blocking check failed: x") == 1
    assert P.published_pairs(store) == view_before
    assert [(q["status"], q["status_reason"]) for q in store.queue("join")] == [
        ("held", "blocking check failed: x")]
    assert [(r["status"], r["reason"]) for r in P.generation_rows(store)] == [
        ("held", "blocking check failed: x")]
    assert P.published_pointers(store) == []
    # A held entry is no longer pending: the sensor does not pick it up again.
    assert R.entry_sets(store) == []


def test_readers_never_see_a_mixed_published_view(live):
    store, _ = live
    ids = R.entry_sets(store)[0].entry_ids
    cand = R.build_candidate(store, ids)
    G.record_candidate(store, cand)
    key = lambda rows: frozenset((r["payment_id"], r["signal_id"], r["pair_id"]) for r in rows)  # noqa: E731
    before = key(P.published_pairs(store))
    seen: list[frozenset] = []
    stop = threading.Event()
    reader = Store(store.url)

    def poll():
        while not stop.is_set():
            seen.append(key(P.published_pairs(reader)))
        seen.append(key(P.published_pairs(reader)))

    t = threading.Thread(target=poll)
    t.start()
    while len(seen) < 3:
        stop.wait(0.01)
    G.publish_generation(store, cand)
    stop.set()
    t.join(timeout=60)
    reader.dispose()
    after = key(P.published_pairs(store))
    assert before != after
    assert seen[0] == before and seen[-1] == after
    assert set(seen) <= {before, after}


def test_watermarks_must_pass_the_interval(seed_dir, sqlite_url):
    src, manifest = seed_dir
    store = run_live(src, sqlite_url, end_of_stream=False)
    wm = R.live_watermarks(store)
    risk_wm = wm["risk_signals"]
    inside = P.Piece("merchant-29", risk_wm - 20 * US_PER_MIN, risk_wm - 8 * US_PER_MIN - 1)
    R.check_watermarks(store, [inside])
    late = P.Piece("merchant-29", risk_wm - 20 * US_PER_MIN, risk_wm - 8 * US_PER_MIN)
    with pytest.raises(R.WatermarkNotPassed):
        R.check_watermarks(store, [late])
    with pytest.raises(R.WatermarkNotPassed):
        R.build_candidate(store, [], pieces=[late])


def test_pieces_split_at_midnight_and_widen_to_published(live):
    store, _ = live
    day = 20_000 * US_PER_DAY
    pieces = R.split_at_midnight("m", day - 10 * US_PER_MIN, day + 5 * US_PER_MIN)
    assert [(p.start_us, p.end_us) for p in pieces] == [
        (day - 10 * US_PER_MIN, day - 1), (day, day + 5 * US_PER_MIN)]
    # A signal affects the payments 8 min before to 47 min after it.
    entry = {"topic": "risk_signals", "key": "m", "event_us": day, "detail": "{}"}
    assert R.affected_ranges(entry) == [("m", day - 8 * US_PER_MIN, day + 47 * US_PER_MIN)]
    ids = R.entry_sets(store)[0].entry_ids
    cand = R.build_candidate(store, ids)
    G.record_candidate(store, cand)
    G.publish_generation(store, cand)
    p = cand.pieces[0]
    planned, based_on = R.plan_pieces(store, [(p.merchant, p.end_us, p.end_us + US_PER_MIN)])
    assert [(x.start_us, x.end_us) for x in planned] == [(p.start_us, p.end_us + US_PER_MIN)]
    assert [b["generation_id"] for b in based_on] == [cand.generation_id]
