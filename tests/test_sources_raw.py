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
