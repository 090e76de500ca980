"""IDs are free text: keys composed from several IDs must not collide when an ID contains the
separator (payment `a|b` with signal `c` versus payment `a` with signal `b|c`)."""

from __future__ import annotations

import pytest

from streaming.keys import compose, split
from streaming.operators.base import Emit
from streaming.operators.interval_join import (RULE_VERSION, IntervalJoin, pair_id,
                                               pair_logical_key)
from streaming.store.ops import Store

from .joinutil import pairs, pay, record, run_join, sig, write_log


def _with_id(rec, field, new_id):
    """The same record under another ID: what the operator would see if an ID with a separator
    ever got past the contract (the contract refuses them; the keys must not depend on it)."""
    payload = {**rec.payload, field: new_id}
    return rec.replace(id=new_id, payload=payload)


@pytest.mark.parametrize("sep", ["|", "\x1f", "\\"])
def test_operator_keys_stay_unambiguous_for_ids_with_the_separator(sep):
    p1, p2 = f"a{sep}b", "a"
    s1, s2 = "c", f"b{sep}c"
    op = IntervalJoin()
    out = Emit()
    recs = [_with_id(record(pay("p-x", "m-1", 10), offset=0), "payment_id", p1),
            _with_id(record(pay("p-y", "m-1", 11), offset=1), "payment_id", p2),
            _with_id(record(sig("s-x", "m-1", 5), offset=2), "signal_id", s1),
            _with_id(record(sig("s-y", "m-1", 6), offset=3), "signal_id", s2)]
    for rec in recs:
        op.on_record(rec, out)
    current = [f for f in out.facts if f.kind == "pair" and f.status == "current"]
    got = sorted((f.payload["payment_id"], f.payload["signal_id"]) for f in current)
    assert got == sorted([(p1, s1), (p1, s2), (p2, s1), (p2, s2)])
    assert len({f.payload["pair_id"] for f in current}) == 4
    assert len({f.logical_key for f in current}) == 4
    assert len({f.fact_key for f in current}) == 4


@pytest.mark.parametrize("sep", ["|", "\x1f", "\\"])
def test_ids_with_the_separator_are_quarantined_at_the_door(tmp_path, store_url, sep):
    """End to end the contract's ID alphabet keeps separators out: both records with one are
    quarantined as `bad_id` at their positions, the clean pair is published, nothing is lost."""
    src = write_log(tmp_path / "log", {
        ("payments", 0): [pay(f"a{sep}b", "m-1", 10), pay("a", "m-1", 11)],
        ("risk_signals", 0): [sig("c", "m-1", 5), sig(f"b{sep}c", "m-1", 6)],
    })
    run_join(src, store_url, end_of_stream=True)
    assert sorted((r["payment_id"], r["signal_id"]) for r in pairs(store_url)) == [("a", "c")]
    store = Store(store_url)
    try:
        quarantined = sorted((q["topic"], q["offset"], q["reason"])
                             for q in store.quarantine_rows("join"))
        accounting = store.accounting("join")
    finally:
        store.dispose()
    assert quarantined == [("payments", 0, "bad_id"), ("risk_signals", 1, "bad_id")]
    assert all(row["closes"] for row in accounting)


def test_composed_keys_are_unambiguous_and_invertible():
    assert pair_logical_key("a|b", "c", RULE_VERSION) != pair_logical_key("a", "b|c", RULE_VERSION)
    assert pair_id(RULE_VERSION, "a\x1fb", 1, "c", 1) != pair_id(RULE_VERSION, "a", 1, "b\x1fc", 1)
    assert pair_id(RULE_VERSION, "a\\", 1, "|c", 1) != pair_id(RULE_VERSION, "a", 1, "\\|c", 1)
    for parts in (["a|b", "c"], ["a", "b|c"], ["x\\", "|y"], ["", ""], ["plain", "ids"]):
        assert split(compose(*parts)) == parts
    # Ordinary IDs compose as a plain join, so keys stay readable.
    assert compose("pay-1", "risk-2", RULE_VERSION) == f"pay-1|risk-2|{RULE_VERSION}"
