"""IDs drawn from the whole allowed alphabet never make two pairs share a key: every payment x
signal combination of one merchant in range is published as its own current pair."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from streaming.contracts.bounds import ID_CHARS
from streaming.operators.base import Emit
from streaming.operators.interval_join import IntervalJoin

from .joinutil import pay, record, sig

ALPHABET = "".join(chr(c) for c in range(128) if re.fullmatch(f"[{ID_CHARS}]", chr(c)))
ids = st.text(ALPHABET, min_size=1, max_size=6)


@settings(max_examples=100, deadline=None)
@given(st.lists(ids, min_size=1, max_size=4, unique=True),
       st.lists(ids, min_size=1, max_size=4, unique=True))
def test_every_pair_of_allowed_ids_is_its_own_pair(payment_ids, signal_ids):
    op, out = IntervalJoin(), Emit()
    objs = [pay(p, "m-1", 0) for p in payment_ids] + [sig(s, "m-1", 1) for s in signal_ids]
    for i, obj in enumerate(objs):
        op.on_record(record(obj, offset=i), out)
    current = {(f.payload["payment_id"], f.payload["signal_id"]): f.logical_key
               for f in out.facts if f.kind == "pair" and f.status == "current"}
    assert set(current) == {(p, s) for p in payment_ids for s in signal_ids}
    assert len(set(current.values())) == len(current)
