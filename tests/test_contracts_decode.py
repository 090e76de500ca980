"""The one-pass decoder: every defect of a raw line gets the same reason through `decode` (raw
bytes, the hot path) and `validate` (an already-parsed object), defect by defect, for every
topic contract; the new bounds quarantine with their own reasons."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streaming.contracts import (CONTRACTS, MAX_ABS_CENTS, MAX_ID_LENGTH, MAX_REVISION,
                                 MERCHANT_CATEGORY, PAYMENT, RECEIPT, RISK_SIGNAL, InvalidRecord,
                                 decode, parse_line, validate)
from streaming.contracts import bounds as B
from streaming.contracts.canonical import decoded_record
from streaming.timeutil import parse_utc_us, us_to_iso

T = "2026-10-06T10:00:00Z"
GOOD = {
    "payments": {"payment_id": "p-1", "revision": 1, "merchant_id": "m-1", "account_id": "a-1",
                 "amount_cents": 100, "event_time": T, "arrival_time": "2026-10-06T10:00:30Z"},
    "risk_signals": {"signal_id": "s-1", "revision": 2, "merchant_id": "m-1", "score": 0.25,
                     "event_time": T, "arrival_time": T},
    "merchant_categories": {"version_id": "v-1", "merchant_id": "m-1", "category": "grocery",
                            "high_risk": False, "effective_from": "2026-10-06T00:00:00Z",
                            "effective_to": None, "arrival_time": T},
    "receipts": {"receipt_id": "r-1", "store_id": "store-01", "merchant_id": "m-1",
                 "amount_cents": 999, "occurred_at": "2026-10-06T09:00:00Z",
                 "uploaded_at": T},
}


def line(obj) -> bytes:
    return obj if isinstance(obj, bytes) else orjson.dumps(obj)


def verdicts(topic: str, raw: bytes) -> tuple[str | None, str | None]:
    """(reason from the raw-line decoder, reason from the dict validator); None = valid."""
    c = CONTRACTS[topic]
    got = []
    try:
        decode(c, raw, 0, 0)
        got.append(None)
    except InvalidRecord as exc:
        got.append(exc.reason)
    try:
        validate(c, parse_line(raw), 0, 0, len(raw))
        got.append(None)
    except InvalidRecord as exc:
        got.append(exc.reason)
    return got[0], got[1]


def patched(topic, **patch):
    obj = {**GOOD[topic], **patch}
    return {k: v for k, v in obj.items() if v is not DROP}


DROP = object()

DEFECTS = [
    # line-level
    ("payments", b'{"payment_id": "p-1", "revision": 1,', "malformed_json"),
    ("payments", b'{"payment_id": 5, "revision": 1,', "malformed_json"),  # JSON before fields
    ("payments", b"\xef\xbb\xbf" + orjson.dumps(GOOD["payments"]), "malformed_json"),
    ("payments", orjson.dumps(GOOD["payments"]) + b" x", "malformed_json"),
    ("payments", b'{"payment_id": "p\xff"}', "invalid_utf8"),
    ("payments", b"[1, 2]", "not_an_object"),
    ("receipts", b'"receipt"', "not_an_object"),
    ("risk_signals", b"null", "not_an_object"),
    # schema version
    ("payments", patched("payments", schema_version=2), "unknown_schema_version"),
    ("payments", patched("payments", schema_version="1"), "unknown_schema_version"),
    ("payments", patched("payments", schema_version=True), "unknown_schema_version"),
    ("receipts", patched("receipts", schema_version=None), "unknown_schema_version"),
    # missing fields
    ("payments", patched("payments", account_id=DROP), "missing_field"),
    ("risk_signals", patched("risk_signals", score=DROP), "missing_field"),
    ("merchant_categories", patched("merchant_categories", high_risk=DROP), "missing_field"),
    ("receipts", patched("receipts", uploaded_at=DROP), "missing_field"),
    # wrong types
    ("payments", patched("payments", payment_id=5), "wrong_type"),
    ("payments", patched("payments", merchant_id=""), "wrong_type"),
    ("payments", patched("payments", merchant_id=None), "wrong_type"),
    ("payments", patched("payments", revision="1"), "wrong_type"),
    ("payments", patched("payments", revision=1.0), "wrong_type"),
    ("payments", patched("payments", revision=True), "wrong_type"),
    ("payments", patched("payments", revision=0), "wrong_type"),
    ("risk_signals", patched("risk_signals", revision=-3), "wrong_type"),
    ("risk_signals", patched("risk_signals", score="high"), "wrong_type"),
    ("risk_signals", patched("risk_signals", score=True), "wrong_type"),
    ("merchant_categories", patched("merchant_categories", high_risk=1), "wrong_type"),
    ("merchant_categories", patched("merchant_categories", category=["a"]), "wrong_type"),
    ("receipts", patched("receipts", store_id={"id": 1}), "wrong_type"),
    # cents
    ("payments", patched("payments", amount_cents=12.5), "non_integer_cents"),
    ("payments", patched("payments", amount_cents=12.0), "non_integer_cents"),
    ("payments", patched("payments", amount_cents="100"), "non_integer_cents"),
    ("receipts", patched("receipts", amount_cents=True), "non_integer_cents"),
    ("receipts", patched("receipts", amount_cents=None), "non_integer_cents"),
    # times
    ("payments", patched("payments", event_time="2026-10-06T10:00:00"), "naive_time"),
    ("receipts", patched("receipts", occurred_at="2026-10-06T09:00:00"), "naive_time"),
    ("merchant_categories", patched("merchant_categories", effective_to="2026-10-07T00:00:00"),
     "naive_time"),
    ("payments", patched("payments", event_time="2026-10-06"), "naive_time"),
    ("payments", patched("payments", event_time="2026-10-06T10:00"), "naive_time"),
    ("payments", patched("payments", event_time="yesterday"), "unparseable_time"),
    ("payments", patched("payments", event_time=1759744800), "unparseable_time"),
    ("payments", patched("payments", arrival_time=None), "unparseable_time"),
    ("payments", patched("payments", event_time="2026-10-06T25:00:00Z"), "unparseable_time"),
    ("merchant_categories", patched("merchant_categories", effective_from=False),
     "unparseable_time"),
    ("merchant_categories", patched("merchant_categories", effective_to=3), "unparseable_time"),
    # record rules
    ("payments", patched("payments", event_time="2026-10-06T10:06:00Z"),
     "event_time_after_arrival"),
    ("receipts", patched("receipts", occurred_at="2026-10-06T10:05:01Z"),
     "event_time_after_arrival"),
    # new bounds: out_of_range
    ("payments", patched("payments", revision=MAX_REVISION + 1), "out_of_range"),
    ("payments", patched("payments", revision=2**63), "out_of_range"),
    ("payments", patched("payments", amount_cents=MAX_ABS_CENTS + 1), "out_of_range"),
    ("payments", patched("payments", amount_cents=-MAX_ABS_CENTS - 1), "out_of_range"),
    ("payments", patched("payments", amount_cents=2**63 - 1), "out_of_range"),
    ("receipts", patched("receipts", amount_cents=9223372036854775807), "out_of_range"),
    ("risk_signals", patched("risk_signals", score=1.5), "out_of_range"),
    ("risk_signals", patched("risk_signals", score=-0.1), "out_of_range"),
    # new bounds: bad_id (too long, or a character outside the alphabet)
    ("payments", patched("payments", payment_id="p" * (MAX_ID_LENGTH + 1)), "bad_id"),
    ("payments", patched("payments", payment_id="p" * 201), "bad_id"),
    ("payments", patched("payments", payment_id="a|b"), "bad_id"),
    ("payments", patched("payments", payment_id="a\u001fb"), "bad_id"),
    ("payments", patched("payments", payment_id="a\u0000"), "bad_id"),
    ("payments", patched("payments", account_id="acct 1"), "bad_id"),
    ("risk_signals", patched("risk_signals", signal_id="b|c"), "bad_id"),
    ("risk_signals", patched("risk_signals", merchant_id="m\n1"), "bad_id"),
    ("merchant_categories", patched("merchant_categories", category="caf\u00e9"), "bad_id"),
    ("merchant_categories", patched("merchant_categories", version_id="v,1"), "bad_id"),
    ("receipts", patched("receipts", store_id="store:1"), "bad_id"),
    ("receipts", patched("receipts", receipt_id="r/1"), "bad_id"),
]


@pytest.mark.parametrize("topic,raw,expected", DEFECTS)
def test_each_defect_has_its_reason_on_both_paths(topic, raw, expected):
    assert verdicts(topic, line(raw)) == (expected, expected)


def test_good_records_of_every_topic_decode_on_both_paths():
    for topic, obj in GOOD.items():
        raw = orjson.dumps(obj)
        a = decode(CONTRACTS[topic], raw, 3, 7)
        b = validate(CONTRACTS[topic], obj, 3, 7, len(raw))
        assert a == b
        assert (a.topic, a.partition, a.offset, a.size) == (topic, 3, 7, len(raw))


def test_record_fields_the_operators_use():
    r = decode(PAYMENT, orjson.dumps(GOOD["payments"]), 1, 42)
    assert (r.id, r.revision, r.key) == ("p-1", 1, "m-1")
    assert r.event_us == parse_utc_us(T) == 1_791_280_800_000_000
    assert r.arrival_us - r.event_us == 30_000_000
    assert r.payload == {"account_id": "a-1", "amount_cents": 100, "event_time": T,
                         "merchant_id": "m-1", "payment_id": "p-1", "revision": 1}
    assert r.payload_bytes == orjson.dumps(r.payload, option=orjson.OPT_SORT_KEYS)
    assert r.payload_json == r.payload_bytes.decode()
    # The canonical JSON is kept as text: the encoder's own bytes object keeps a 4 KiB block
    # for as long as the record lives (contracts.record).
    assert type(r.payload_json) is str
    assert not any(isinstance(value, bytes) for value in r.as_tuple())
    assert r.times == {"event_time": r.event_us, "arrival_time": r.arrival_us}
    cat = decode(MERCHANT_CATEGORY, orjson.dumps(GOOD["merchant_categories"]), 0, 0)
    assert cat.revision == 1 and cat.times["effective_to"] is None
    assert cat.event_us == cat.arrival_us
    rec = decode(RECEIPT, orjson.dumps(GOOD["receipts"]), 0, 0)
    assert "uploaded_at" not in rec.payload and rec.key == "m-1"


def test_bounds_are_inclusive():
    for patch in ({"revision": MAX_REVISION}, {"amount_cents": MAX_ABS_CENTS},
                  {"amount_cents": -MAX_ABS_CENTS}, {"payment_id": "p" * MAX_ID_LENGTH},
                  {"payment_id": "Az09._~+=@-"}):
        decode(PAYMENT, orjson.dumps(patched("payments", **patch)), 0, 0)
    for score in (0, 0.0, 1, 1.0):
        decode(RISK_SIGNAL, orjson.dumps(patched("risk_signals", score=score)), 0, 0)


def test_unknown_fields_are_ignored_and_not_hashed():
    plain = decode(PAYMENT, orjson.dumps(GOOD["payments"]), 0, 0)
    extra = decode(PAYMENT, orjson.dumps({**GOOD["payments"], "note": "x", "schema_version": 1}),
                   0, 0)
    assert extra.payload_hash == plain.payload_hash


def test_repeated_key_takes_the_last_value_on_both_paths():
    raw = orjson.dumps(GOOD["payments"])[:-1] + b', "revision": "x", "revision": 4}'
    assert decode(PAYMENT, raw, 0, 0).revision == 4
    assert validate(PAYMENT, orjson.loads(raw), 0, 0, len(raw)).revision == 4


def test_first_defect_in_documented_order_wins():
    # Version first, then fields in contract order, then the revision floor, then clock fault.
    obj = patched("payments", schema_version=9, payment_id=5, event_time="naive")
    assert verdicts("payments", orjson.dumps(obj)) == ("unknown_schema_version",) * 2
    # JSON order puts amount first, contract order puts account_id (missing) first.
    raw = b'{"amount_cents": 1.5, "payment_id": "p", "revision": 1, "merchant_id": "m",' \
          b' "event_time": "2026-10-06T10:00:00Z", "arrival_time": "2026-10-06T10:00:00Z"}'
    assert verdicts("payments", raw) == ("missing_field", "missing_field")
    obj = patched("payments", revision=0, event_time="2026-10-06T10:00:00")
    assert verdicts("payments", orjson.dumps(obj)) == ("naive_time", "naive_time")


def test_details_name_the_field_and_value():
    with pytest.raises(InvalidRecord) as exc:
        decode(PAYMENT, orjson.dumps(patched("payments", account_id=DROP)), 0, 0)
    assert exc.value.detail == "account_id"
    with pytest.raises(InvalidRecord) as exc:
        decode(PAYMENT, orjson.dumps(patched("payments", payment_id="a|b")), 0, 0)
    assert exc.value.detail.startswith("payment_id:") and "'a|b'" in exc.value.detail
    with pytest.raises(InvalidRecord) as exc:
        decode(PAYMENT, orjson.dumps(patched("payments", payment_id="x" * 5000)), 0, 0)
    assert len(exc.value.detail) <= 200


def test_times_follow_rfc3339():
    # Spellings outside RFC 3339 that Python's ISO parser used to accept are refused now.
    for spelled in ("2026-10-06T10:00Z", "20261006T100000Z", "2026-10-06T10:00:00+02",
                    "2026-10-06T10:00:00,5Z"):
        assert verdicts("payments", orjson.dumps(patched("payments", event_time=spelled))) == \
            ("unparseable_time",) * 2
    for spelled in ("2026-10-06t10:00:00z", "2026-10-06 10:00:00Z", "2026-10-06T12:00:00+0200"):
        r = decode(PAYMENT, orjson.dumps(patched("payments", event_time=spelled)), 0, 0)
        assert r.payload["event_time"] == T


def _spellings(us: int) -> list[str]:
    """One instant in spellings RFC 3339 allows (a fraction cut short spells another): the
    canonical UTC text and other UTC spellings with up to six fraction digits (read in C), its
    zero fraction written out, and others (read through `read_instant`)."""
    dt = datetime.fromtimestamp(0, UTC) + timedelta(microseconds=us)
    canonical_text = us_to_iso(us)
    out = [canonical_text, dt.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
           dt.isoformat(), dt.astimezone(timezone(timedelta(hours=-2))).isoformat(),
           canonical_text[:-1] + "z", canonical_text.replace("T", " ")]
    if us % 1_000_000 == 0:
        out.append(canonical_text[:-1] + ".000000Z")
    whole = canonical_text[:19]
    for k in range(1, 10):  # fractions of one to nine digits, in UTC either way
        digits = f".{dt.microsecond:06d}987"[:k + 1]
        out += [whole + digits + "Z", whole + digits + "+00:00"]
    return out


@settings(max_examples=400, deadline=None)
@given(topic=st.sampled_from(sorted(GOOD)), data=st.data())
def test_the_c_decoder_reads_every_spelling_of_an_instant_as_the_general_path_does(
        topic, data):
    """Instants are read as text by the C decoder (`instants_as_text`), the canonical UTC
    spelling in C and any other through `read_instant`: every line is built there, into the
    record the general path gives for the same object (payload, canonical bytes, hash, times
    and fields)."""
    c = CONTRACTS[topic]
    obj = dict(GOOD[topic])
    # Each instant a step after the one before it, in field order: an event never after its
    # arrival, a range never ending before it starts.
    base = data.draw(st.sampled_from([0, 1_791_280_800_000_000, -1])
                     | st.integers(-62_135_596_800_000_000 + 86_400_000_000,
                                   253_402_300_799_999_999 - 86_400_000_000))
    step = data.draw(st.sampled_from([0, 1_000_000, 1_500_000, 7]))
    for i, (name, kind, _) in enumerate(c.fields):
        if kind in (B.TIME, B.OPT_TIME) and (kind == B.TIME or data.draw(st.booleans())):
            obj[name] = data.draw(st.sampled_from(_spellings(base + i * step)))
    raw = orjson.dumps(obj)
    fast = decoded_record(c.plan, raw, 3, 7)
    want = validate(c, orjson.loads(raw), 3, 7, len(raw))
    assert fast is not None
    assert fast == want
    assert (fast.payload, fast.payload_json, fast.payload_hash, fast.times) == \
        (want.payload, want.payload_json, want.payload_hash, want.times)
    assert (fast.id, fast.revision, fast.key, fast.event_us, fast.arrival_us) == \
        (want.id, want.revision, want.key, want.event_us, want.arrival_us)


def test_hash_of_canonically_spelled_records_is_unchanged():
    # The seeds spell times canonically: their payload bytes, hence stored hashes, stay as
    # they were before the structs (sorted-key JSON of the business fields as received).
    import hashlib
    for topic, obj in GOOD.items():
        obj = {**obj, **({"score": 0.125} if topic == "risk_signals" else {})}
        c = CONTRACTS[topic]
        before = orjson.dumps({k: v for k, v in obj.items() if k not in c.non_payload},
                              option=orjson.OPT_SORT_KEYS)
        r = decode(c, orjson.dumps(obj), 0, 0)
        assert r.payload_bytes == before
        assert r.payload_hash == hashlib.blake2b(before, digest_size=16).hexdigest()
    sub = decode(PAYMENT, orjson.dumps(patched("payments", event_time="2026-10-06T10:00:00.5Z")),
                 0, 0)
    assert sub.payload["event_time"] == "2026-10-06T10:00:00.500000Z"


def test_quarantine_text_is_storable_and_keeps_everything_else():
    from streaming.contracts import quarantine_text
    assert quarantine_text(b'{"payment_id": "p\x00x"}') == '{"payment_id": "p\\x00x"}'
    assert quarantine_text(b"caf\xc3\xa9 \xff") == "caf\u00e9 \\xff"
    assert quarantine_text(b'{"a": "\\u0000"}') == '{"a": "\\u0000"}'
    assert "\x00" not in quarantine_text(bytes(range(256)))


@pytest.mark.parametrize("topic", sorted(CONTRACTS))
@pytest.mark.parametrize("depth", [900, 1000, 1020, 1100, 100_000])
def test_deeply_nested_lines_are_quarantined_not_raised(topic, depth):
    """msgspec follows nesting only to the interpreter's recursion limit (about 1,000 levels,
    below orjson's 1,024): a line nested deeper, in a field the contract lacks or as the whole
    line, is judged by the general reader and quarantined with a reason; it never stops the
    worker with a RecursionError."""
    nested = b"[" * depth + b"1" + b"]" * depth
    good = line(GOOD[topic])
    inside = good[:-1] + b',"extra":' + nested + b"}"
    expected = "malformed_json" if depth > 1024 else None  # past orjson's depth limit
    c = CONTRACTS[topic]
    if expected is None:
        rec = decode(c, inside, 0, 7)  # an unknown field is ignored, however deep
        assert rec.payload_hash == decode(c, good, 0, 7).payload_hash
    else:
        with pytest.raises(InvalidRecord) as err:
            decode(c, inside, 0, 7)
        assert err.value.reason == expected
    with pytest.raises(InvalidRecord) as whole:
        decode(c, nested, 0, 7)
    assert whole.value.reason == ("malformed_json" if depth > 1024 else "not_an_object")
