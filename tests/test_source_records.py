"""The arrival time a source reads from each line (`records.own_arrival`): the same value as the
rule it replaced, which decoded the whole line with orjson and read the field from the dict, on
good lines and on every kind of bad one (not JSON, not an object, no or an unusable arrival,
NUL and non-UTF-8 bytes, numbers beyond a double, nesting past orjson's limit, duplicate
keys)."""

from __future__ import annotations

import sys
from datetime import datetime, timedelta, timezone

import orjson
from hypothesis import example, given, settings
from hypothesis import strategies as st

from streaming.sources.records import (RawRecord, arrival_column, json_object, object_arrival,
                                       own_arrival, own_arrivals)
from streaming.timeutil import TimeFormatError, parse_utc_us

FIELDS = ("arrival_time", "received_at")


def old_rule(line: bytes, arrival_field: str) -> tuple[str, int | None]:
    """The rule as it was: orjson decodes the line; a dict's field, parsed, is the arrival.
    Also which kind of value the line decoded to (the source handed it on as `obj`)."""
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError:
        return "error", None
    if not isinstance(obj, dict):
        return "value", None
    try:
        return "object", parse_utc_us(obj.get(arrival_field))
    except TimeFormatError:
        return "object", None


def kind(obj: object) -> str:
    if isinstance(obj, orjson.JSONDecodeError):
        return "error"
    return "object" if isinstance(obj, dict) else "value"


def check(line: bytes) -> None:
    for field in FIELDS:
        old_kind, old_own = old_rule(line, field)
        assert own_arrival(line, field) == old_own, (line[:200], field)
        obj = json_object(line)
        assert kind(obj) == old_kind
        assert object_arrival(obj, field) == old_own
        assert kind(RawRecord("t", 0, 0, line, 0).obj) == old_kind


def _dumps(value: object) -> bytes:
    return orjson.dumps(value)


# -- JSON text, good and odd --------------------------------------------------------------
_ODD_NUMBERS = [b"1e400", b"-1E+0400", b"1.8e308", b"1.7e308", b"1e308", b"0e999", b"0.0e999",
                b"1e-400", b"1E0400", b"1" + b"0" * 309, b"1" + b"0" * 308, b"-1" + b"0" * 400,
                b"17" + b"0" * 307 + b".5", b"123456789012345678901234567890", b"-0", b"1E+2",
                b"0." + b"0" * 400 + b"1e400", b"9" * 250 + b"e60", b"9" * 209 + b"e99",
                b"01", b"1.", b".5", b"+1", b"-", b"1e", b"1e+", b"NaN", b"Infinity", b"-Infinity"]
_ODD_STRINGS = [b'"\\ud800"', b'"\\udc00"', b'"\\ud800\\udc00"', b'"\xff"', b'"\xed\xa0\x80"',
                b'"\xc0\x80"', b'"\xf4\x90\x80\x80"', b'"\xe2\x80\xa8"', b'"a\x00b"', b'"\x01"',
                b'"\x7f"', b'"\\q"', b'"\\u00zz"', b'"\\u0041"', b'"caf\xc3\xa9"', b'"\t"',
                b'"\\"', b'"\\\\"', b'"unterminated']
_scalar_text = st.one_of(
    st.sampled_from([b"null", b"true", b"false", b"tru", b"nul"]),
    st.integers(min_value=-(2 ** 70), max_value=2 ** 70).map(lambda i: str(i).encode()),
    st.floats(allow_nan=False, allow_infinity=False).map(_dumps),
    st.text(max_size=12).map(_dumps),
    st.sampled_from(_ODD_NUMBERS),
    st.sampled_from(_ODD_STRINGS),
)
_key_text = st.one_of(st.sampled_from([b'"id"', b'"arrival_time"', b'"received_at"',
                                       b'"\\u0061rrival_time"', b'"arrival_time\\u0000"',
                                       b'"\xff"', b'"event_time"']),
                      st.text(max_size=8).map(_dumps))
_space = st.sampled_from([b"", b"", b" ", b"\t", b"\n", b"\r\n"])


def _array(items: list[bytes]) -> bytes:
    return b"[" + b",".join(items) + b"]"


def _object(pairs: list[tuple[bytes, bytes]]) -> bytes:
    return b"{" + b",".join(k + b":" + v for k, v in pairs) + b"}"


_json_text = st.recursive(
    _scalar_text,
    lambda inner: st.one_of(st.lists(inner, max_size=4).map(_array),
                            st.lists(st.tuples(_key_text, inner), max_size=4).map(_object)),
    max_leaves=12)

_BASE = datetime(2026, 10, 6, 9, 0, tzinfo=timezone.utc)
_times = st.builds(lambda s, us: _BASE + timedelta(seconds=s, microseconds=us),
                   st.integers(0, 10 ** 8), st.sampled_from([0, 0, 1, 500_000, 999_999]))
_arrival_text = st.one_of(
    _times.map(lambda t: _dumps(t.isoformat().replace("+00:00", "Z"))),  # the canonical spelling
    _times.map(lambda t: _dumps(t.isoformat())),  # "+00:00"
    _times.map(lambda t: _dumps(t.astimezone(timezone(timedelta(hours=-5))).isoformat())),
    _times.map(lambda t: _dumps(t.replace(tzinfo=None).isoformat())),  # naive: unusable
    _times.map(lambda t: _dumps(t.isoformat().replace("+00:00", "Z")) + b" "),
    _times.map(lambda t: b'"' + t.isoformat().replace("+00:00", "Z").encode()
               + b'\\u0000"'),
    st.sampled_from([b'"2026-13-01T00:00:00Z"', b'"2026-10-06T09:00:00"', b'""', b'"yesterday"',
                     b'"2026-10-06T09:00:00Z\\n"', b'"\\u0032026-10-06T09:00:00Z"']),
    _json_text,
)


@st.composite
def lines(draw) -> bytes:
    """A line: an object with arrival fields (none, one, or several: duplicates) among other
    fields, or any JSON text, then maybe spoilt by an odd byte put in, taken out or added."""
    if draw(st.integers(0, 9)) == 0:
        text = draw(_json_text)
    else:
        pairs = draw(st.lists(st.tuples(_key_text, _json_text), max_size=5))
        for _ in range(draw(st.integers(0, 3))):
            key = draw(st.sampled_from([b'"arrival_time"', b'"received_at"',
                                        b'"\\u0061rrival_time"']))
            pairs.insert(draw(st.integers(0, len(pairs))), (key, draw(_arrival_text)))
        sp = draw(_space)
        text = b"{" + sp + (b"," + sp).join(k + sp + b":" + v for k, v in pairs) + sp + b"}"
    text = draw(_space) + text + draw(_space)
    how = draw(st.integers(0, 5))
    if how == 0 and text:
        at = draw(st.integers(0, len(text)))
        odd = draw(st.sampled_from([b"\x00", b"\xff", b"\xed\xa0\x80", b'"', b"\\", b"{", b"[",
                                    b",", b":", b"e400", b"9", b"\xef\xbb\xbf", b"}"]))
        text = text[:at] + odd + text[at:]
    elif how == 1 and text:
        at = draw(st.integers(0, len(text) - 1))
        text = text[:at] + text[at + 1:]
    return text


def _nested(depth: int, leaf: bytes = b"1") -> bytes:
    return b"[" * depth + leaf + b"]" * depth


@settings(max_examples=3000, deadline=None)
@given(lines())
@example(b'{"arrival_time":"2026-10-06T09:00:00Z","arrival_time":"2026-10-06T10:00:00Z"}')
@example(b'{"arrival_time":"2026-10-06T09:00:00Z","arrival_time":5}')
@example(b'{"arrival_time":5,"arrival_time":"2026-10-06T09:00:00Z"}')
@example(b'{"arrival_time":"2026-10-06T09:00:00Z","\\u0061rrival_time":null}')
@example(b'{"x":"\xff","arrival_time":"2026-10-06T09:00:00Z"}')
@example(b'{"x":1e400,"arrival_time":"2026-10-06T09:00:00Z"}')
@example(b'{"x":1' + b"0" * 400 + b',"arrival_time":"2026-10-06T09:00:00Z"}')
@example(b'{"x":"a\x00b","arrival_time":"2026-10-06T09:00:00Z"}')
@example(b'{"arrival_time":"2026-10-06T09:00:00Z"}\x00')
@example(b'\xef\xbb\xbf{"arrival_time":"2026-10-06T09:00:00Z"}')
@example(b'[{"arrival_time":"2026-10-06T09:00:00Z"}]')
@example(b'"2026-10-06T09:00:00Z"')
@example(b"")
def test_own_arrival_is_the_orjson_rule(line: bytes) -> None:
    check(line)


@settings(max_examples=200, deadline=None)
@given(st.integers(990, 1040), st.sampled_from([b"[", b'{"a":']))
def test_own_arrival_deep_nesting(depth: int, opener: bytes) -> None:
    # orjson refuses more than 1024 levels; msgspec's skipping counts Python's recursion limit
    closer = b"]" if opener == b"[" else b"}"
    deep = opener * depth + b"1" + closer * depth
    good = b'"arrival_time":"2026-10-06T09:00:00Z","received_at":"2026-10-06T09:00:00Z"'
    check(b'{"x":' + deep + b"," + good + b"}")
    check(b"{" + good + b',"x":' + deep + b"}")


def test_own_arrival_deep_nesting_under_a_raised_recursion_limit() -> None:
    # msgspec nests as deep as Python's recursion limit lets it: orjson's limit still decides
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(10_000)
    try:
        for depth in (1000, 1023, 1024, 1025, 1100, 3000):
            check(b'{"x":' + _nested(depth) + b',"arrival_time":"2026-10-06T09:00:00Z"}')
    finally:
        sys.setrecursionlimit(limit)


@given(st.lists(lines(), max_size=8))
def test_own_arrivals_is_own_arrival_per_line(block: list[bytes]) -> None:
    # a block is judged plain as a whole: odd lines in it must not change any line's arrival
    plain = [b'{"id":%d,"arrival_time":"2026-10-06T09:00:%02dZ"}' % (i, i) for i in range(3)]
    block = plain + block + plain
    got = own_arrivals(block, "arrival_time")
    assert got == [(line, own_arrival(line, "arrival_time")) for line in block]
    assert [own for _, own in got] == [old_rule(line, "arrival_time")[1] for line in block]


def test_raw_record_obj_is_the_lines_json() -> None:
    rec = RawRecord("payments", 0, 3, b'{"id":1,"arrival_time":"2026-10-06T09:00:00Z"}', 7)
    assert rec.obj == {"id": 1, "arrival_time": "2026-10-06T09:00:00Z"}
    assert isinstance(RawRecord("payments", 0, 4, b"{not json", 7).obj, orjson.JSONDecodeError)
    assert RawRecord("payments", 0, 5, b"[1]", 7).obj == [1]


def test_a_block_read_in_one_call_never_gives_a_line_another_lines_arrival() -> None:
    # msgspec's decode_lines skips a blank line and reads two objects on one line as two
    # values: together the count of values matches the count of lines, paired wrongly
    two = b'{"arrival_time":"2026-10-06T09:00:01Z"} {"arrival_time":"2026-10-06T09:00:02Z"}'
    one = b'{"arrival_time":"2026-10-06T09:00:03Z"}'
    for block in ([two, b"", one], [two, b"   ", one], [one, b"\t", two], [two, one],
                  [one, b'{"arrival_time":5}', one], [one, b'{"arrival_time":"soon"}'],
                  [one, b'{"other":1}'], [one, b"[1]", one], [one, one]):
        got = own_arrivals(block, "arrival_time")
        assert got == [(line, old_rule(line, "arrival_time")[1]) for line in block], block
    assert [own for _, own in own_arrivals([one, one], "arrival_time")] == [
        parse_utc_us("2026-10-06T09:00:03Z")] * 2


@settings(max_examples=60, deadline=None)
@given(st.lists(lines(), max_size=6), st.integers(0, 2500), st.integers(1, 5))
def test_arrival_column_is_own_arrival_per_line_across_blocks(odd: list[bytes], at: int,
                                                               block: int) -> None:
    # Odd lines fall anywhere in a column of several blocks (small ones, so that the same
    # odd lines also straddle block edges): every line keeps its own arrival.
    plain = [b'{"id":%d,"arrival_time":"2026-10-06T09:%02d:%02dZ"}' % (i, i // 60 % 60, i % 60)
             for i in range(2500)]
    column = plain[:at] + odd + plain[at:]
    want = [own_arrival(line, "arrival_time") for line in column]
    assert arrival_column(column, "arrival_time") == want
    assert arrival_column(column, "arrival_time", block) == want
