"""What an operator's batch collector keeps of a disposed record: its archive row, made at
once, and not the record itself; and the bounded store of texts operators keep."""

from __future__ import annotations

import sys

import orjson

from streaming.operators.base import (ACCEPTED, ARCHIVE_ROW, DUPLICATE, Emit, archive_row,
                                      fits_int64)
from streaming.store.ops import ARCHIVE_ROW as STORE_ARCHIVE_ROW

from .joinutil import pay, record

M = "merchant-1"


def test_a_disposition_is_the_records_archive_row_for_its_batch():
    rec = record(pay("p-1", M, 3, rev=2, cents=250), offset=17)
    out = Emit("join", 42)
    out.disposition(rec, ACCEPTED)
    assert len(out.dispositions) == 1
    row = dict(zip(ARCHIVE_ROW, out.dispositions[0], strict=True))
    assert row == {"pipeline": "join", "topic": rec.topic, "partition": rec.partition,
                   "offset": 17, "event_id": "p-1", "revision": 2, "key": M,
                   "event_us": rec.event_us, "arrival_us": rec.arrival_us,
                   "payload": rec.payload_json, "payload_hash": rec.payload_hash,
                   "disposition": ACCEPTED, "batch_seq": 42}
    assert orjson.loads(row["payload"]) == rec.payload
    assert out.disposed() == [("p-1", ACCEPTED)]
    # The store inserts the columns in the order the rows are made.
    assert STORE_ARCHIVE_ROW is ARCHIVE_ROW


def test_the_collector_keeps_no_reference_to_the_record():
    """The record is freed when the operator is done with it (while its objects are in the
    caches), not when the batch's collector goes."""
    rec = record(pay("p-1", M, 3), offset=1)
    before = sys.getrefcount(rec)
    out = Emit("ledger", 1)
    out.disposition(rec, DUPLICATE)
    assert sys.getrefcount(rec) == before
    assert out.disposed() == [("p-1", DUPLICATE)]


def test_a_record_without_its_json_is_archived_with_the_canonical_encoding():
    rec = record(pay("p-2", M, 0), offset=2).replace(payload_json=None)
    (row,) = [dict(zip(ARCHIVE_ROW, archive_row("join", 5, rec, ACCEPTED), strict=True))]
    assert row["payload"] == orjson.dumps(rec.payload, option=orjson.OPT_SORT_KEYS).decode()
    assert row["batch_seq"] == 5 and row["event_id"] == "p-2"


def test_fits_int64_is_exact_on_both_sides_of_the_machine_range():
    # Within the compiled int's machine range the answer is decided there; past it the 64-bit
    # bounds decide, at and beyond each edge.
    for value in (0, 1, -1, 2**62 - 1, -(2**62) + 1, 2**62, -(2**62), 2**63 - 1, -(2**63)):
        assert fits_int64(value), value
    for value in (2**63, -(2**63) - 1, 2**64, -(2**70)):
        assert not fits_int64(value), value


def test_bounded_texts_start_over_past_their_limit_and_keep_giving_the_same_texts():
    from streaming.operators.base import BoundedTexts, json_recurring, json_scalar

    store = BoundedTexts(3)
    assert store.get("a") is None
    assert store.keep("a", "A") == "A" and store.get("a") == "A"
    for k in "bc":
        store.keep(k, k.upper())
    assert len(store.texts) == 3
    store.keep("d", "D")  # past the limit: it starts over with the new text
    assert store.texts == {"d": "D"} and store.get("a") is None
    for v in ("merchant-1", 'q"t', "é€😀", "merchant-1"):
        assert json_recurring(v) == json_scalar(v)


def test_a_fact_may_leave_its_hash_for_later_and_reads_the_same_hash():
    import pytest

    from streaming.hashing import digest
    from streaming.operators.base import HASH_LATER, Fact, hash_facts

    texts = ['{"a":1}', '{"a":2}', '{"b":"x"}']
    later = [Fact(f"k{i}", "pair", f"l{i}", "current", None, HASH_LATER, None, t)
             for i, t in enumerate(texts)]
    now = [Fact(f"k{i}", "pair", f"l{i}", "current", None, digest(t), None, t)
           for i, t in enumerate(texts)]
    # Equal before and after: the hash follows from the text.
    assert later == now
    assert later[0].payload_hash == digest(texts[0])  # taken when first read
    hash_facts(later)  # the rest, together
    assert [f.hash_taken for f in later] == [digest(t) for t in texts]
    assert later == now
    with pytest.raises(ValueError, match="a hash left for later needs the payload's JSON"):
        Fact("k", "pair", "l", "current", {"a": 1}, HASH_LATER)


def test_a_fact_hashed_over_another_text_takes_that_texts_hash_first_read_or_together():
    import pytest

    from streaming.hashing import digest
    from streaming.operators.base import HASH_LATER, Fact, hash_facts

    stored = ['{"a":1,"watermark":"x"}', '{"a":2,"watermark":"x"}']
    hashed = ['{"a":1}', '{"a":2}']
    one, two = (Fact(f"k{i}", "receipt_decision", f"l{i}", "live", None, HASH_LATER, None, s, h)
                for i, (s, h) in enumerate(zip(stored, hashed, strict=True)))
    assert one.text_to_hash() == hashed[0]
    assert one.payload_hash == digest(hashed[0]) != digest(stored[0])  # taken when first read
    assert one.hash_text is None  # and the text let go
    hash_facts([one, two])
    assert (two.hash_taken, two.hash_text) == (digest(hashed[1]), None)
    assert one.payload_hash == digest(hashed[0])  # not taken again
    with pytest.raises(ValueError, match="a text to hash, but the hash is taken"):
        Fact("k", "receipt_decision", "l", "live", None, digest(hashed[0]), None, stored[0],
             hashed[0])
