"""IDs are free text: keys composed from several IDs must not collide when an ID contains the
separator (payment `a|b` with signal `c` versus payment `a` with signal `b|c`)."""

from __future__ import annotations

import pytest

from streaming.keys import compose, split
from streaming.operators.interval_join import RULE_VERSION, pair_id, pair_logical_key

from .joinutil import pairs, pay, run_join, sig, write_log


@pytest.mark.parametrize("sep", ["|", "\x1f", "\\"])
def test_ids_with_the_separator_give_four_current_pairs(tmp_path, store_url, sep):
    p1, p2 = f"a{sep}b", "a"
    s1, s2 = "c", f"b{sep}c"
    src = write_log(tmp_path / "log", {
        ("payments", 0): [pay(p1, "m-1", 10), pay(p2, "m-1", 11)],
        ("risk_signals", 0): [sig(s1, "m-1", 5), sig(s2, "m-1", 6)],
    })
    run_join(src, store_url, end_of_stream=True)
    rows = pairs(store_url)
    got = sorted((r["payment_id"], r["signal_id"]) for r in rows)
    assert got == sorted([(p1, s1), (p1, s2), (p2, s1), (p2, s2)])
    assert len({r["pair_id"] for r in rows}) == 4
    assert all(r["status"] == "current" for r in rows)


def test_composed_keys_are_unambiguous_and_invertible():
    assert pair_logical_key("a|b", "c", RULE_VERSION) != pair_logical_key("a", "b|c", RULE_VERSION)
    assert pair_id(RULE_VERSION, "a\x1fb", 1, "c", 1) != pair_id(RULE_VERSION, "a", 1, "b\x1fc", 1)
    assert pair_id(RULE_VERSION, "a\\", 1, "|c", 1) != pair_id(RULE_VERSION, "a", 1, "\\|c", 1)
    for parts in (["a|b", "c"], ["a", "b|c"], ["x\\", "|y"], ["", ""], ["plain", "ids"]):
        assert split(compose(*parts)) == parts
    # Ordinary IDs compose as a plain join, so keys stay readable.
    assert compose("pay-1", "risk-2", RULE_VERSION) == f"pay-1|risk-2|{RULE_VERSION}"
