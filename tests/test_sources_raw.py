"""The raw record every source yields: its fields, its line's JSON on demand, value equality,
pickling, and its place in the compiled core."""

from __future__ import annotations

import copy
import pickle

import orjson
import pytest

from streaming import native
from streaming.sources import raw as raw_module
from streaming.sources.raw import RawRecord, json_object
from streaming.sources.records import RawRecord as ReexportedRawRecord

LINE = b'{"id":1,"arrival_time":"2026-10-06T09:00:00Z"}'


def test_fields_in_order_and_no_fault_by_default():
    rec = RawRecord("payments", 1, 7, LINE, 42)
    assert rec.as_tuple() == ("payments", 1, 7, LINE, 42, None)
    assert RawRecord("payments", 1, 7, LINE, 42, ("arrival_time_jump", "d")).fault == (
        "arrival_time_jump", "d")
    assert ReexportedRawRecord is RawRecord


def test_obj_decodes_the_line_on_each_access():
    rec = RawRecord("payments", 0, 0, LINE, 0)
    assert rec.obj == orjson.loads(LINE) and rec.obj is not rec.obj
    assert isinstance(RawRecord("payments", 0, 0, b"{no", 0).obj, orjson.JSONDecodeError)
    assert json_object(b"[1]") == [1]


@pytest.mark.parametrize("index", range(6))
def test_records_differing_in_any_one_field_are_unequal(index):
    fields = list(RawRecord("payments", 1, 7, LINE, 42).as_tuple())
    base = RawRecord(*fields)
    fields[index] = ("x", "y") if index == 5 else fields[index] * 2
    other = RawRecord(*fields)
    assert other != base and not other == base
    assert RawRecord(*base.as_tuple()) == base


def test_the_fault_can_be_set_and_cleared_as_a_replay_does():
    rec = RawRecord("payments", 0, 3, LINE, 9)
    rec.fault = ("arrival_time_jump", "judged on replay")
    assert rec != RawRecord("payments", 0, 3, LINE, 9)
    rec.fault = None
    assert rec == RawRecord("payments", 0, 3, LINE, 9)
    with pytest.raises(TypeError):
        hash(rec)


def test_a_raw_record_survives_pickle_and_copies():
    rec = RawRecord("payments", 0, 3, LINE, 9, ("arrival_time_jump", "d"))
    for back in (pickle.loads(pickle.dumps(rec, protocol=pickle.HIGHEST_PROTOCOL)),
                 copy.copy(rec), copy.deepcopy(rec)):
        assert type(back) is RawRecord and back == rec
    assert repr(rec).startswith("RawRecord(topic='payments', partition=0, offset=3, line=b'")


def test_the_raw_record_is_part_of_the_compiled_core():
    # The compiled host reads a raw record's fields as struct members only when the class is
    # compiled with it.
    assert "streaming.sources.raw" in native.COMPILED
    if native.active == "compiled":
        assert raw_module.__file__.endswith(".so")


def test_vouched_run_fills_until_the_first_suspect():
    from collections import deque

    from streaming.sources.raw import vouched_run
    jump = 100
    lines = [(b"a", 10), (b"b", None), (b"c", 5), (b"d", 60), (b"e", 500), (b"f", 510)]
    ahead = deque(lines)
    window: deque[RawRecord] = deque()
    marks: dict[int, int] = {0: -1}
    # From offset 6 (a mark every 2 lines): 10 is vouched after nothing known only when the
    # bound is off, so the running arrival starts at 0 here.
    off, prev = vouched_run("payments", 3, 6, 12, ahead, 0, jump, window, marks, 2)
    # 500 jumps more than 100 past 60: the caller judges it, and nothing after it is taken
    assert (off, prev) == (10, 60)
    assert [(r.offset, r.line, r.arrival_us) for r in window] == [
        (6, b"a", 10), (7, b"b", 10), (8, b"c", 10), (9, b"d", 60)]
    assert all(r.topic == "payments" and r.partition == 3 and r.fault is None for r in window)
    assert marks == {0: -1, 3: 0, 4: 10, 5: 60}  # the arrival before lines 6, 8 and 10
    assert list(ahead) == lines[4:]
    # Without a bound every arrival is vouched, up to the end given.
    off, prev = vouched_run("payments", 3, 10, 12, ahead, 60, None, window, marks, 2)
    assert (off, prev, [r.arrival_us for r in window][-2:]) == (12, 510, [500, 510])
    assert not ahead
