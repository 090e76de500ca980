"""Validation: one specific reason per defect."""

from __future__ import annotations

import pytest

from streaming.contracts import PAYMENT, RISK_SIGNAL, InvalidRecord, parse_line, validate

GOOD = {"payment_id": "p", "revision": 1, "merchant_id": "m", "account_id": "a",
        "amount_cents": 100, "event_time": "2026-10-06T10:00:00Z",
        "arrival_time": "2026-10-06T10:00:30+00:00"}


def reason(obj, contract=PAYMENT):
    with pytest.raises(InvalidRecord) as exc:
        validate(contract, obj, 0, 0, 1)
    return exc.value.reason


def test_good_record_parses_times_to_utc_microseconds():
    r = validate(PAYMENT, {**GOOD, "event_time": "2026-10-06T12:00:00+02:00"}, 3, 7, 10)
    assert (r.partition, r.offset, r.id, r.key, r.revision) == (3, 7, "p", "m", 1)
    assert r.event_us == validate(PAYMENT, GOOD, 0, 0, 1).event_us
    assert "arrival_time" not in r.payload


@pytest.mark.parametrize("patch,expected", [
    ({"event_time": "2026-10-06T10:00:00"}, "naive_time"),
    ({"event_time": "yesterday"}, "unparseable_time"),
    ({"event_time": 1759744800}, "unparseable_time"),
    ({"amount_cents": 12.5}, "non_integer_cents"),
    ({"amount_cents": "100"}, "non_integer_cents"),
    ({"amount_cents": True}, "non_integer_cents"),
    ({"revision": "1"}, "wrong_type"),
    ({"revision": 0}, "wrong_type"),
    ({"merchant_id": ""}, "wrong_type"),
    ({"event_time": "2026-10-06T10:06:00Z"}, "event_time_after_arrival"),
    ({"schema_version": 2}, "unknown_schema_version"),
])
def test_specific_reason_per_defect(patch, expected):
    assert reason({**GOOD, **patch}) == expected


def test_event_time_up_to_five_minutes_after_arrival_is_tolerated():
    validate(PAYMENT, {**GOOD, "event_time": "2026-10-06T10:05:30Z"}, 0, 0, 1)


def test_missing_field_names_the_field():
    obj = dict(GOOD)
    del obj["account_id"]
    with pytest.raises(InvalidRecord) as exc:
        validate(PAYMENT, obj, 0, 0, 1)
    assert (exc.value.reason, exc.value.detail) == ("missing_field", "account_id")


def test_malformed_lines():
    with pytest.raises(InvalidRecord) as exc:
        parse_line(b'{"payment_id": ')
    assert exc.value.reason == "malformed_json"
    with pytest.raises(InvalidRecord) as exc:
        parse_line(b"[1, 2]")
    assert exc.value.reason == "not_an_object"


def test_signal_score_must_be_a_number():
    sig = {"signal_id": "s", "revision": 1, "merchant_id": "m", "score": "high",
           "event_time": "2026-10-06T10:00:00Z", "arrival_time": "2026-10-06T10:00:00Z"}
    assert reason(sig, RISK_SIGNAL) == "wrong_type"


def test_json_schema_lists_required_fields():
    schema = PAYMENT.json_schema()
    assert set(schema["required"]) == {"payment_id", "revision", "merchant_id", "account_id",
                                       "amount_cents", "event_time", "arrival_time"}
    assert schema["properties"]["amount_cents"]["type"] == "integer"
