"""Store revision 0005: the join's outcome fact keys lead with the payment's event time. The
upgrade rewrites every key of the old shape wherever it appears (the fact, a correction's
predecessor key, the current view, a sink exception), leaves every other key alone, and stops
with the store unchanged when a payload has no payment time. On SQLite and PostgreSQL."""

from __future__ import annotations

import re

import orjson
import pytest
from sqlalchemy import text

from streaming.keys import split
from streaming.store.ops import Store, make_engine
from streaming.store.versions import StoreVersionError, head_revision
from streaming.timeutil import parse_utc_us

from .joinutil import pay, run_join, sig, write_log
from .storeutil import with_store, write_conflicting_copy
from .test_store_versions import _store_at, cli, revision_of

T1, T2 = "2026-10-06T10:00:00Z", "2026-10-06T10:30:00Z"
US1, US2 = parse_utc_us(T1), parse_utc_us(T2)


def _outcome(payment_id: str, rev: int, time: str, status: str) -> bytes:
    return orjson.dumps({"payment_id": payment_id, "payment_rev": rev, "payment_time": time,
                         "status": status})


# (pipeline, fact_key, kind, logical_key, status, payload, predecessor_key) as revision 0004
# held them: live outcomes under `outcome|<payment>|<revision>|<n>` (one of a payment whose ID
# needs escaping), a generation's corrected final pointing at one of them, a pair, a ledger fact
# and an outcome under a key of no known shape.
_FACTS_0004 = [
    ("join", "outcome|p1|1|1", "outcome", "p1", "provisional", _outcome("p1", 1, T1, "p"), None),
    ("join", "outcome|p1|1|2", "outcome", "p1", "final", _outcome("p1", 1, T1, "f"), None),
    ("join", r"outcome|a\|b|2|1", "outcome", "a|b", "final", _outcome("a|b", 2, T2, "f"), None),
    ("join", "outcome|p1|1|corrected|g1", "outcome", "p1", "corrected_final",
     _outcome("p1", 1, T1, "c"), "outcome|p1|1|2"),
    ("join", f"pair|{US1}|abc|publish", "pair", "p1|s1|r", "current", b'{"v":1}', None),
    ("ledger", "outcome|x|1|1", "window", "x", "current", b'{"v":2}', None),
    ("join", "k3", "outcome", "p3", "final", b'{"v":3}', None),
]
_RENAMED = {"outcome|p1|1|1": f"outcome|{US1}|p1|1|1", "outcome|p1|1|2": f"outcome|{US1}|p1|1|2",
            r"outcome|a\|b|2|1": rf"outcome|{US2}|a\|b|2|1"}


def _fill_0004(conn, facts=_FACTS_0004) -> None:
    conn.execute(text(
        "INSERT INTO facts (pipeline, fact_key, kind, logical_key, status, payload_hash, "
        "payload, predecessor_key, batch_seq, created_at) VALUES (:p, :k, :kind, :lk, :st, "
        "'h', :pl, :pred, 1, 't')"),
        [{"p": p, "k": k, "kind": kind, "lk": lk, "st": st, "pl": pl.decode(), "pred": pred}
         for p, k, kind, lk, st, pl, pred in facts])
    # The view's current row of each (pipeline, kind, logical key): its last fact.
    conn.execute(text(
        "INSERT INTO current_view (pipeline, kind, logical_key, fact_key, status, fact_id, "
        "batch_seq) SELECT pipeline, kind, logical_key, fact_key, status, id, batch_seq "
        "FROM facts f WHERE id = (SELECT max(id) FROM facts g WHERE g.pipeline = f.pipeline "
        "AND g.kind = f.kind AND g.logical_key = f.logical_key)"))
    conn.execute(text(
        "INSERT INTO sink_exceptions (pipeline, fact_key, existing_hash, rejected_hash, "
        "rejected_payload, reason, batch_seq, created_at) VALUES ('join', 'outcome|p1|1|1', "
        "'h', 'x', '{}', 'existing key with different content', 1, 't')"))


def _keys(url: str) -> dict:
    """Every key the store holds, by table (read at any revision)."""
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            def q(sql: str) -> list:
                return sorted(tuple(r) for r in conn.execute(text(sql)))
            return {"facts": q("SELECT id, pipeline, fact_key, predecessor_key, payload_hash "
                               "FROM facts"),
                    "view": q("SELECT pipeline, kind, logical_key, fact_key, fact_id "
                              "FROM current_view"),
                    "exceptions": q("SELECT pipeline, fact_key, rejected_hash "
                                    "FROM sink_exceptions")}
    finally:
        engine.dispose()


def test_old_outcome_keys_are_rewritten_wherever_they_appear(store_factory):
    url = store_factory()
    engine = _store_at(url, "0004")
    with engine.begin() as conn:
        _fill_0004(conn)
    engine.dispose()
    before = _keys(url)
    out = cli("store", "upgrade", "--store", url)
    assert out.returncode == 0, out.stderr
    assert revision_of(url) == head_revision()
    after = _keys(url)

    def new(key):
        return _RENAMED.get(key, key)
    # Same ids, same hashes; only the old-shape join outcome keys changed.
    assert after["facts"] == [(i, p, new(k) if p == "join" else k,
                               new(pred) if pred else pred, h)
                              for i, p, k, pred, h in before["facts"]]
    assert {k for _, _, k, _, _ in after["facts"]} >= {
        f"outcome|{US1}|p1|1|1", f"outcome|{US1}|p1|1|2", rf"outcome|{US2}|a\|b|2|1",
        "outcome|p1|1|corrected|g1", f"pair|{US1}|abc|publish", "outcome|x|1|1", "k3"}
    corrected = [f for f in after["facts"] if f[2] == "outcome|p1|1|corrected|g1"][0]
    assert corrected[3] == f"outcome|{US1}|p1|1|2"
    assert after["view"] == sorted((p, kind, lk, new(k) if p == "join" else k, i)
                                   for p, kind, lk, k, i in before["view"])
    assert (r"join", "outcome", "a|b", rf"outcome|{US2}|a\|b|2|1", 3) in after["view"]
    assert after["exceptions"] == [("join", f"outcome|{US1}|p1|1|1", "x")]


def test_an_outcome_without_a_payment_time_stops_the_upgrade_unchanged(store_factory):
    url = store_factory()
    engine = _store_at(url, "0004")
    with engine.begin() as conn:
        _fill_0004(conn, _FACTS_0004 + [("join", "outcome|p9|1|1", "outcome", "p9", "final",
                                         b'{"payment_id":"p9"}', None)])
    engine.dispose()
    before = _keys(url)
    with pytest.raises(StoreVersionError, match=re.escape("outcome|p9|1|1: no payment_time")):
        Store(url, schema="upgrade")
    assert revision_of(url) == "0004"
    assert _keys(url) == before


def test_a_live_run_round_trips_through_the_downgrade(store_factory, tmp_path):
    """A real run's outcomes: written in the new shape (the payment time of the revision they
    describe leads), back in the old shape after a downgrade to 0004, and after the upgrade
    exactly as the run wrote them, which is what a fresh run writes again."""
    from alembic import command

    from streaming.store.versions import alembic_config
    src = write_log(tmp_path / "log", {
        ("payments", 0): [pay("p1", "m1", 0), pay("a.b@c", "m1", 5),
                          pay("p2", "m2", 10), pay("p2", "m2", 12, arrival=20, rev=2),
                          pay("late", "m3", 200)],
        ("risk_signals", 0): [sig("s1", "m1", 3, arrival=30), sig("s2", "m2", 14, arrival=30),
                              sig("s9", "m3", 200)]})
    url = store_factory()
    run_join(src, url, end_of_stream=True)
    with_store(url, lambda st: write_conflicting_copy(st, "join", "outcome"))
    written = _keys(url)
    outcomes = with_store(url, lambda st: st.facts("join", "outcome"))
    assert {f["logical_key"] for f in outcomes} >= {"p1", "a.b@c", "p2", "late"}
    for f in outcomes:
        parts = split(f["fact_key"])
        p = orjson.loads(f["payload"])
        assert parts[:4] == ["outcome", str(parse_utc_us(p["payment_time"])), p["payment_id"],
                             str(p["payment_rev"])], f["fact_key"]
    assert written["exceptions"] and all(k.startswith("outcome|")
                                         for _, k, _ in written["exceptions"])

    engine = make_engine(url)
    cfg = alembic_config()
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0004")
    engine.dispose()
    old = _keys(url)
    assert revision_of(url) == "0004"
    for _, _, key, _, _ in old["facts"]:
        parts = split(key)
        if parts[0] == "outcome":
            assert len(parts) == 4 and parts[1] in {"p1", "a.b@c", "p2", "late"}, key
    assert {k for _, _, _, k, _ in old["view"]} <= {k for _, _, k, _, _ in old["facts"]}
    assert {k for _, k, _ in old["exceptions"]} <= {k for _, _, k, _, _ in old["facts"]}

    out = cli("store", "upgrade", "--store", url)
    assert out.returncode == 0, out.stderr
    assert _keys(url) == written
    fresh = store_factory()
    run_join(src, fresh, end_of_stream=True)
    assert [f[1:] for f in _keys(fresh)["facts"]] == [f[1:] for f in written["facts"]]
