"""The validated record: built by the decoder, compared by value, copied with changes, pickled
by its fields, in the compiled build as in the pure one."""

from __future__ import annotations

import copy
import pickle

import orjson
import pytest

from streaming import native
from streaming.contracts import PAYMENT, decode
from streaming.contracts import record as record_module
from streaming.contracts.record import FIELDS, Record

LINE = orjson.dumps({"payment_id": "p-1", "revision": 3, "merchant_id": "m-1",
                     "account_id": "a-1", "amount_cents": 100,
                     "event_time": "2026-10-06T10:00:00Z",
                     "arrival_time": "2026-10-06T10:00:30Z"})


def decoded() -> Record:
    return decode(PAYMENT, LINE, 2, 17)


def test_the_decoder_fills_every_field_in_order():
    rec = decoded()
    assert rec.as_tuple() == tuple(getattr(rec, name) for name in FIELDS)
    assert (rec.topic, rec.partition, rec.offset, rec.id, rec.revision, rec.key) == (
        "payments", 2, 17, "p-1", 3, "m-1")
    assert rec.event_us == rec.times["event_time"] and rec.arrival_us == rec.times["arrival_time"]
    assert rec.arrival_us - rec.event_us == 30_000_000
    assert rec.size == len(LINE)
    assert orjson.loads(rec.payload_json) == rec.payload
    assert rec.payload_bytes == rec.payload_json.encode()
    # Built positionally from its own fields, it is the same record.
    assert Record(*rec.as_tuple()) == rec


def test_defaults_are_an_empty_times_dict_of_its_own_and_no_json():
    a = Record("t", 0, 1, "i", 1, "k", 5, 6, {}, "h", 10)
    b = Record("t", 0, 1, "i", 1, "k", 5, 6, {}, "h", 10)
    assert a.times == {} and a.payload_json is None and a.payload_bytes is None
    a.times["x"] = 1
    assert b.times == {}  # not one dict shared by every record


def changed(value):
    """Another value of the same type (the compiled class checks its fields' types)."""
    if isinstance(value, str):
        return value + "~"
    if isinstance(value, int):
        return value + 1
    return {**value, "changed": True}


@pytest.mark.parametrize("name", FIELDS)
def test_records_differing_in_any_one_field_are_unequal(name):
    rec = decoded()
    other = rec.replace(**{name: changed(getattr(rec, name))})
    assert getattr(other, name) == changed(getattr(rec, name)) != getattr(rec, name)
    assert other != rec and not other == rec
    # Every other field was copied as it was.
    assert [getattr(other, n) for n in FIELDS if n != name] == [
        getattr(rec, n) for n in FIELDS if n != name]
    assert rec.replace() == rec and rec.replace() is not rec


def test_replace_refuses_a_field_records_do_not_have():
    with pytest.raises(TypeError, match="no field colour"):
        decoded().replace(colour="red")


def test_the_compiled_record_checks_its_fields_types():
    if native.active != "compiled":
        pytest.skip(f"the core runs {native.active}: plain Python does not check types")
    with pytest.raises(TypeError):
        decoded().replace(offset="17")


def test_records_compare_unequal_to_other_types_and_are_not_hashable():
    rec = decoded()
    assert rec != rec.as_tuple()
    with pytest.raises(TypeError):
        hash(rec)


def test_a_record_survives_pickle_and_copies():
    rec = decoded()
    for back in (pickle.loads(pickle.dumps(rec, protocol=pickle.HIGHEST_PROTOCOL)),
                 copy.copy(rec), copy.deepcopy(rec)):
        assert type(back) is Record and back == rec


def test_the_repr_names_every_field():
    text = repr(decoded())
    assert text.startswith("Record(topic='payments', partition=2, offset=17, id='p-1'")
    assert all(f"{name}=" in text for name in FIELDS)


def test_the_record_is_part_of_the_compiled_core():
    # Compiled operators read a record's fields as struct members only when the record's class
    # is compiled with them.
    assert "streaming.contracts.record" in native.COMPILED
    if native.active == "compiled":
        assert record_module.__file__.endswith(".so")
