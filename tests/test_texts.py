"""The decoder's hand-written C (streaming/_texts.c) against its Python twins: an aware
datetime's microseconds in any zone, the canonical text of every instant of years 1-9999 (and
None outside them), the ID alphabet over generated texts, the source's plain-line guard over
generated lines, and JSON templates filled with generated values (against orjson); the decoder,
`us_to_iso`, the source and the receipt scorer use the C exactly when the compiled set is in
use."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

import msgspec
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streaming import keys, native, timeutil
from streaming.contracts import bounds as B
from streaming.contracts import canonical
from streaming.operators import base
from streaming.sources import records

from .conftest import hand_written
from .test_timeutil import outcome, reference, spell

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_FIRST_US = canonical.py_instant_us(B.MIN_INSTANT)
_LAST_US = canonical.py_instant_us(B.MAX_INSTANT)


@pytest.fixture(scope="module")
def c():
    return hand_written("streaming._texts")


# Offsets a datetime may carry: UTC itself, and fixed zones to a day either side in minutes
# and seconds (timezone allows any offset strictly within a day).
_zones = st.one_of(
    st.just(UTC),
    st.integers(min_value=-86_399, max_value=86_399).map(
        lambda s: timezone(timedelta(seconds=s))),
    st.integers(min_value=-23 * 60, max_value=23 * 60).map(
        lambda m: timezone(timedelta(minutes=m))),
)


@settings(max_examples=500, deadline=None)
@given(st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30)), _zones)
def test_instant_us_equals_the_python_twin_in_every_zone(c, naive, zone):
    dt = naive.replace(tzinfo=zone)
    assert c.instant_us(dt) == canonical.py_instant_us(dt)


def test_instant_us_at_the_ends_of_the_range_and_around_the_epoch(c):
    for dt in (B.MIN_INSTANT, B.MAX_INSTANT, _EPOCH, _EPOCH - timedelta(microseconds=1),
               datetime(2000, 2, 29, 23, 59, 59, 999_999, tzinfo=UTC),
               datetime(1900, 3, 1, tzinfo=UTC), datetime(1, 1, 1, 12, tzinfo=timezone(
                   timedelta(hours=13)))):
        assert c.instant_us(dt) == canonical.py_instant_us(dt), dt


def test_instant_us_refuses_what_is_not_an_aware_datetime(c):
    with pytest.raises(ValueError, match="aware"):
        c.instant_us(datetime(2026, 1, 1))
    with pytest.raises(TypeError, match="datetime"):
        c.instant_us("2026-01-01T00:00:00Z")


@settings(max_examples=500, deadline=None)
@given(st.integers(min_value=_FIRST_US, max_value=_LAST_US))
def test_iso_utc_spells_every_instant_as_the_decoder_and_the_python_twin_do(c, us):
    want = msgspec.json.encode(_EPOCH + timedelta(microseconds=us)).decode()[1:-1]
    assert c.iso_utc(us) == want
    assert timeutil._py_us_to_iso(us) == want
    assert timeutil.us_to_iso(us) == want


def test_iso_utc_at_the_edges(c):
    for us in (_FIRST_US, _LAST_US, 0, -1, 1, 999_999, 1_000_000, -86_400_000_000,
               951_868_799_999_999):  # the last microsecond of 2000-02-29
        assert c.iso_utc(us) == timeutil._py_us_to_iso(us), us
    # Outside years 1-9999 there is no four-digit year: None, and the Python path decides.
    for us in (_FIRST_US - 1, _LAST_US + 1, -(2**62), 2**62, 2**70, -(2**70)):
        assert c.iso_utc(us) is None, us
    with pytest.raises(OverflowError):
        timeutil.us_to_iso(_LAST_US + 1)


_id_chars = st.sampled_from(
    "ABCXYZabcxyz0189._~+=@-|\x1f,:/ \t\n\x00éß€\U0001f600\\\"'")


@settings(max_examples=1000, deadline=None)
@given(st.lists(st.text(_id_chars, max_size=12), max_size=5))
def test_ids_in_alphabet_equals_the_python_twin(c, ids):
    assert c.ids_in_alphabet(tuple(ids)) == canonical.py_ids_in_alphabet(tuple(ids))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(max_size=20), max_size=4))
def test_ids_in_alphabet_on_any_text(c, ids):
    assert c.ids_in_alphabet(tuple(ids)) == canonical.py_ids_in_alphabet(tuple(ids))


def test_ids_in_alphabet_checks_every_ascii_character(c):
    for code in range(128):
        ch = chr(code)
        assert c.ids_in_alphabet(("ok", f"a{ch}b")) == canonical.py_ids_in_alphabet(
            ("ok", f"a{ch}b")), repr(ch)
    assert c.ids_in_alphabet(()) is True
    with pytest.raises(TypeError):
        c.ids_in_alphabet(("a", None))
    with pytest.raises(TypeError):
        c.ids_in_alphabet(["a"])


@settings(max_examples=1000, deadline=None)
@given(st.one_of(st.text(max_size=20), st.text(st.sampled_from("ab|\\\u00e9\u4e2d\U0001f600"),
                                                max_size=8)))
def test_plain_key_part_is_the_text_exactly_when_escaping_leaves_it(c, text):
    got = c.plain_key_part(text)
    if keys.escape(text) == text:
        assert got is text
    else:
        assert got is None
        assert keys.key_part(text) == keys.escape(text)


def test_plain_key_part_on_each_kind_of_text(c):
    for text in ("", "p-1", "a|b", "a\\b", "\u00e9|", "\u4e2d\\", "\U0001f600", "\U0001f600|"):
        assert (c.plain_key_part(text) is text) is (keys.escape(text) == text), repr(text)
        assert keys.key_part(text) == keys.escape(text)

    class Text(str):
        pass

    assert c.plain_key_part(Text("plain")) is None  # a subclass goes to the twin, which
    assert type(keys.key_part(Text("plain"))) is str  # gives a plain str as `escape` does
    with pytest.raises(TypeError):
        c.plain_key_part(1)


def test_the_decoder_and_us_to_iso_use_the_c_exactly_when_compiled():
    compiled = native.active == "compiled"
    assert (canonical._INSTANT_US is not canonical.py_instant_us) is compiled
    assert (canonical._IDS_IN_ALPHABET is not canonical.py_ids_in_alphabet) is compiled
    assert (timeutil._ISO_UTC is not None) is compiled
    assert (base._JSON_QUOTED is not None) is compiled
    assert (records._PLAIN_LINES is not records.py_plain_lines) is compiled
    assert (canonical._PAYLOAD_OF is not None) is compiled
    assert (base.JSON_FILL is not None) is compiled
    assert (records._UTC_US_TEXTS is not None) is compiled
    assert (keys._PLAIN_KEY_PART is not None) is compiled


def _orjson_text(value: object) -> str | None:
    try:
        return orjson.dumps(value).decode()
    except orjson.JSONEncodeError:
        return None


def test_json_quoted_on_every_code_point_alone_and_in_a_text(c):
    for code in range(0x110000):
        ch = chr(code)
        for s in (ch, f"ab{ch}", f"{ch}\u00e9"):
            want = _orjson_text(s)
            got = c.json_quoted(s)
            # Quoted as orjson quotes it, or left to orjson (which escapes or refuses it).
            assert got is None or got == want, (hex(code), s, got, want)
            if want == f'"{s}"':
                assert got == want, (hex(code), s)


@settings(max_examples=1000, deadline=None)
@given(st.text(max_size=40))
def test_json_scalar_is_orjson_for_any_text(s):
    want = _orjson_text(s)
    if want is None:
        with pytest.raises(orjson.JSONEncodeError):
            base.json_scalar(s)
    else:
        assert base.json_scalar(s) == want


def test_json_scalar_of_other_scalars_is_orjson():
    for v in (0, -1, 2**63 - 1, 0.5, 0.123456, 1e-7, True, False, None, "", "plain-id.1",
              "2026-03-01T10:36:07.000089Z", 'quote"d', "back\\slash", "tab\t", "é€😀"):
        assert base.json_scalar(v) == orjson.dumps(v).decode(), v


def test_json_quoted_refuses_what_is_not_a_text(c):
    with pytest.raises(TypeError):
        c.json_quoted(b"bytes")


def test_a_pure_run_decodes_with_python_alone():
    from .test_native import _child

    code = ("import json, sys; from streaming import native, timeutil; "
            "from streaming.contracts import canonical; from streaming.operators import base; "
            "from streaming.sources import records; "
            "print(json.dumps([native.active, canonical._INSTANT_US.__name__, "
            "canonical._IDS_IN_ALPHABET.__name__, timeutil._ISO_UTC is None, "
            "base._JSON_QUOTED is None, records._PLAIN_LINES.__name__, "
            "canonical._PAYLOAD_OF is None and records._UTC_US_TEXTS is None, "
            "'streaming._texts' in sys.modules, "
            "timeutil.us_to_iso(1_772_361_367_000_089), base.json_scalar('pay-1')]))")
    active, instant, ids, no_iso, no_quoted, plain, no_payload, loaded, text, quoted = \
        json.loads(_child(code, pure=True))
    assert active == f"pure: {native.ENV_VAR}=off"
    assert (instant, ids, no_iso, no_quoted, plain, no_payload, loaded) == (
        "py_instant_us", "py_ids_in_alphabet", True, True, "py_plain_lines", True, False)
    assert (text, quoted) == ("2026-03-01T10:36:07.000089Z", '"pay-1"')


# --------------------------------------------------------------------------- arrival texts
def _utc_us_agrees(c, value: object, canonical_valid: bool | None = None) -> None:
    """`utc_us_texts` of one value: the parser's microseconds, or None. It must never give a
    value the parser does not (nor one for a text the parser refuses), and it must read every
    canonical spelling of an instant that exists (`canonical_valid`), or the source's fast path
    would be dead."""
    got = c.utc_us_texts([value])
    want = outcome(reference, value)
    if got is not None:
        assert want == ("ok", got[0]), (value, got, want)
    if canonical_valid:
        assert got is not None, value


@settings(max_examples=1500, deadline=None)
@given(st.datetimes(min_value=datetime(1, 1, 1),
                    max_value=datetime(9999, 12, 31, 23, 59, 59, 999999)),
       st.sampled_from(["Z", "Z6", "Z3", "Z7", "dotZ", "utc", "offset", "naive", "lowerz",
                        "space", "nosec"]))
def test_utc_us_texts_reads_the_canonical_spellings_as_the_parser_does(c, naive, how):
    # "Z6" with no fraction is a text the canonical writer never makes, but it exists.
    _utc_us_agrees(c, spell(naive, how, timedelta(0)), canonical_valid=how in ("Z", "Z6"))


def test_utc_us_texts_refuses_every_single_character_corruption_the_parser_refuses(c):
    chars = list("0123456789-:.TZz+ _\t") + ["\u0663", "\uff11", "\u00b2", "\u2212"]
    for text in ("2024-02-29T23:59:59Z", "2024-02-29T00:00:00.000001Z", "2023-02-28T12:00:00Z",
                 "1900-02-28T00:00:00Z", "2000-02-29T00:00:00Z", "0001-01-01T00:00:00Z",
                 "9999-12-31T23:59:59.999999Z", "2026-04-30T23:59:59Z"):
        _utc_us_agrees(c, text, canonical_valid=True)
        for pos in range(len(text)):
            _utc_us_agrees(c, text[:pos] + text[pos + 1:])
            _utc_us_agrees(c, text[:pos] + text[pos] + text[pos:])
            for ch in chars:
                _utc_us_agrees(c, text[:pos] + ch + text[pos + 1:])
    for bad in ("2023-02-29T00:00:00Z", "1900-02-29T00:00:00Z", "2026-04-31T00:00:00Z",
                "2026-13-01T00:00:00Z", "2026-00-10T00:00:00Z", "2026-10-00T00:00:00Z",
                "0000-01-01T00:00:00Z", "2026-10-06T24:00:00Z", "2026-10-06T23:60:00Z",
                "2026-10-06T23:59:60Z", "2026-10-06T23:59:59.99999xZ"):
        assert c.utc_us_texts([bad]) is None, bad


@settings(max_examples=500, deadline=None)
@given(st.one_of(st.text(max_size=30), st.none(), st.integers(), st.floats(), st.binary()))
def test_utc_us_texts_on_anything(c, value):
    _utc_us_agrees(c, value)


def test_utc_us_texts_reads_a_block_whole_or_not_at_all(c):
    texts = ["2026-10-06T09:00:00Z", "2026-10-06T09:00:00.000001Z", "1970-01-01T00:00:00Z",
             "1969-12-31T23:59:59.999999Z"]
    assert c.utc_us_texts(texts) == [reference(t) for t in texts]
    assert c.utc_us_texts([]) == []
    many = [f"2026-10-06T09:{m:02d}:{s:02d}Z" for m in range(60) for s in range(60)]
    assert c.utc_us_texts(many) == [reference(t) for t in many]  # past the stack buffer
    for odd in ("2026-10-06T09:00:00+00:00", None, 5, "2026-02-30T00:00:00Z"):
        assert c.utc_us_texts([*texts, odd]) is None
        assert c.utc_us_texts([odd, *many]) is None

    class Text(str):
        pass

    assert c.utc_us_texts([Text(texts[0])]) is None  # only exact texts; the parser reads it
    with pytest.raises(TypeError):
        c.utc_us_texts(tuple(texts))


def test_the_source_reads_a_block_of_arrivals_as_line_by_line():
    """A file-log block's arrivals through `own_arrivals` (C where compiled), against the
    arrival rule on each line alone."""
    lines = [b'{"arrival_time":"2026-10-06T09:00:00Z","x":1}',
             b'{"x":2,"arrival_time":"2026-10-06T09:00:00.500000Z"}',
             b'{"arrival_time":"2024-02-29T23:59:59.999999Z"}']
    assert records.own_arrivals(lines, "arrival_time") == [
        (line, records.object_arrival(json.loads(line), "arrival_time")) for line in lines]
    odd = [*lines, b'{"arrival_time":"2026-10-06T09:00:00+00:00"}',
           b'{"arrival_time":"2023-02-29T00:00:00Z"}', b'{"arrival_time":7}']
    assert records.own_arrivals(odd, "arrival_time") == [
        (line, records.object_arrival(json.loads(line), "arrival_time")) for line in odd]


# --------------------------------------------------------------------------- plain lines
# Bytes that decide the guard (digits, "+", "e", "E", one byte past ASCII) and others, so that
# generated lines hit exponents, digit runs and non-ASCII often.
_line_bytes = st.sampled_from(b"0123456789+eE-.x\"{}:, \x7f\x80\xc3")
_lines = st.lists(st.binary(max_size=0) | st.lists(_line_bytes, max_size=40).map(bytes)
                  | st.lists(st.sampled_from(b"0123456789+ab"), min_size=190, max_size=460)
                  .map(bytes) | st.binary(max_size=300), max_size=6)


@settings(max_examples=3000, deadline=None)
@given(_lines)
def test_plain_lines_equals_the_python_twin(c, lines):
    assert c.plain_lines(lines) is records.py_plain_lines(lines)


def test_plain_lines_at_the_edges_of_each_rule(c):
    def same(lines):
        assert c.plain_lines(lines) is records.py_plain_lines(lines), lines
        return c.plain_lines(lines)

    assert same([]) is True
    assert same([b""]) is True
    # Length: a line of 2,048 bytes may be plain, one more byte is not, wherever it is.
    assert same([b"x" * 2048]) is True
    assert same([b"{}", b"x" * 2049]) is False
    # Exponents: three digits or "+" after an "e" or "E", at the end of a line too; two are
    # not enough, and nothing spans the newline that joins two lines.
    for text, plain in ((b"1e000", False), (b"1E+05", False), (b"1e+5", True), (b"1e99", True),
                        (b'"e123"', False), (b"ee123", False), (b"e12", True), (b"e", True),
                        (b"e1-23", True), (b"e-123", True)):
        assert same([b"{" + text]) is plain, text
        assert same([b"{" + text + b"}"]) is plain, text
    assert same([b"x e1", b"23 y"]) is True
    # Runs of digits or "+": 209 may be plain, 210 are not, at every offset around the probes.
    for length in (209, 210, 418, 419):
        for lead in range(0, 420, 7):
            for digit in (b"7", b"+"):
                line = b"x" * lead + digit * length + b"y"
                assert same([line]) is (length < 210), (length, lead)
    assert same([b"1" * 200, b"2" * 200]) is True
    # Anything past ASCII, anywhere, in any line of the block.
    for at in range(0, 17):
        line = bytearray(b"a" * 16)
        line[at % 16] = 0x80 + at
        assert same([b"{}", bytes(line)]) is False


def test_plain_lines_refuses_what_is_not_a_list_of_bytes(c):
    with pytest.raises(TypeError):
        c.plain_lines((b"a",))
    with pytest.raises(TypeError):
        c.plain_lines([b"a", "b"])


def _plain_float(x: float) -> bool:
    """Whether json_fill writes the float: finite, and written by Python without an exponent
    (orjson writes some of those, from 1e-4 down, in full: the C leaves them to the caller)."""
    return x == x and x not in (float("inf"), -float("inf")) and "e" not in repr(x)


def _filled_reference(parts: tuple[str, ...], kinds: bytes, values: tuple) -> str | None:
    """What json_fill writes, from orjson: each value's JSON between the parts, or None when a
    value is outside its kind."""
    out = [parts[0]]
    for part, kind, value in zip(parts[1:], kinds.decode(), values, strict=True):
        if kind in "it":
            if type(value) is not int or not -(2 ** 63) <= value < 2 ** 63:
                return None
            if kind == "t":
                if not _FIRST_US <= value <= _LAST_US:
                    return None
                value = timeutil._py_us_to_iso(value)
        elif kind == "f":
            if type(value) is not float:
                return None
            if not _plain_float(value):
                return None
            out.append(orjson.dumps(value).decode())
            out.append(part)
            continue
        elif type(value) is not str or not value.isascii():
            return None
        if kind == "r":
            out.append(value)
        else:
            text = orjson.dumps(value).decode()
            if kind == "s" and text != f'"{value}"':
                return None  # it needs an escape
            out.append(text)
        out.append(part)
    return "".join(out)


_fill_values = st.one_of(
    st.integers(-(2 ** 64), 2 ** 64), st.integers(_FIRST_US - 5, _FIRST_US + 5),
    st.integers(_LAST_US - 5, _LAST_US + 5), st.booleans(), st.floats(), st.none(),
    st.text(st.characters(max_codepoint=127), max_size=12), st.text(max_size=6))


@settings(max_examples=3000, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("istrf"), _fill_values,
                          st.text(st.characters(min_codepoint=32, max_codepoint=126),
                                  max_size=8)), max_size=8),
       st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=4))
def test_json_fill_equals_orjson_between_the_parts(c, slots, first):
    parts = (first, *(part for _, _, part in slots))
    kinds = "".join(kind for kind, _, _ in slots).encode()
    values = tuple(value for _, value, _ in slots)
    assert c.json_fill(parts, kinds, values) == _filled_reference(parts, kinds, values)


def test_json_fill_at_the_edges(c):
    one = ("[", "]")
    assert c.json_fill(one, b"i", (2 ** 63 - 1,)) == f"[{2 ** 63 - 1}]"
    assert c.json_fill(one, b"i", (-(2 ** 63),)) == f"[{-(2 ** 63)}]"
    assert c.json_fill(one, b"i", (2 ** 63,)) is None
    # Digits are written two at a time: every length, at its edges, either sign.
    for k in range(19):
        for x in (10 ** k - 1, 10 ** k, 10 ** k + 1):
            assert c.json_fill(one, b"i", (x,)) == f"[{x}]"
            assert c.json_fill(one, b"i", (-x,)) == f"[{-x}]"
    assert c.json_fill(one, b"i", (True,)) is None  # orjson writes true, not 1
    assert c.json_fill(one, b"t", (_FIRST_US,)) == '["0001-01-01T00:00:00Z"]'
    assert c.json_fill(one, b"t", (_LAST_US,)) == '["9999-12-31T23:59:59.999999Z"]'
    assert c.json_fill(one, b"t", (_FIRST_US - 1,)) is None
    assert c.json_fill(one, b"t", (_LAST_US + 1,)) is None
    assert c.json_fill(one, b"s", ("",)) == '[""]'
    for declined in ('a"b', "a\\b", "a\x1fb", "é", "a\u2028"):
        assert c.json_fill(one, b"s", (declined,)) is None
    assert c.json_fill(one, b"r", ("0.25",)) == "[0.25]"
    assert c.json_fill(one, b"r", ("é",)) is None
    assert c.json_fill(("x",), b"", ()) == "x"
    long = "k" * 2000  # past the buffer on the stack
    assert c.json_fill((long, long, long), b"si", (long, 7)) == f'{long}"{long}"{long}7{long}'


# Floats as scores are made: probabilities and other values rounded to a few decimals (the C's
# quick path), and any float at all (Python's own shortest writer), of either sign.
_scores = st.one_of(
    st.tuples(st.floats(0, 1), st.integers(0, 9)).map(lambda fd: round(fd[0], fd[1])),
    st.tuples(st.floats(-2e9, 2e9), st.integers(0, 8)).map(lambda fd: round(fd[0], fd[1])),
    st.floats(), st.floats(-1e-3, 1e-3), st.floats(1e15, 2e16))


@settings(max_examples=5000, deadline=None)
@given(_scores)
def test_json_fill_writes_a_float_as_orjson_does(c, x):
    written = c.json_fill(("[", "]"), b"f", (x,))
    if _plain_float(x):
        assert written == f"[{orjson.dumps(x).decode()}]"
        assert float(written[1:-1]) == x
    else:
        assert written is None


def test_json_fill_writes_floats_at_the_edges_of_each_path(c):
    one = ("[", "]")
    for x in (0.0, -0.0, 1.0, -1.0, 0.5, 0.05, 0.000001, 0.0001, 0.00010000000000000002,
              0.999999, 0.1234567, 1073741823.999999, 1073741824.0, 1073741824.5,
              9999999999999998.0, 0.1 + 0.2, 1 / 3, 123456.000001, 2.5e-5, 1e16, 1e-7,
              5e-324, 1.7976931348623157e308):
        want = f"[{orjson.dumps(x).decode()}]" if "e" not in repr(x) else None
        assert c.json_fill(one, b"f", (x,)) == want, x
    for refused in (float("nan"), float("inf"), -float("inf"), 1, True, "0.5", None):
        assert c.json_fill(one, b"f", (refused,)) is None
    assert c.json_fill(("x" * 600, "y" * 600), b"f", (0.125,)) == f'{"x" * 600}0.125{"y" * 600}'


def test_json_fill_finds_every_byte_that_needs_an_escape_at_every_place_in_a_word(c):
    # The text is read a word (8 bytes) at a time, then byte by byte: each ASCII byte at each
    # place of two words and a tail.
    for place in range(19):
        for code in range(128):
            text = "a" * place + chr(code) + "b" * (18 - place)
            needs = code < 0x20 or chr(code) in '"\\'
            assert c.json_fill(("", ""), b"s", (text,)) == (None if needs else f'"{text}"')


@settings(max_examples=1000, deadline=None)
@given(st.lists(st.lists(st.tuples(st.sampled_from("istrf"), _fill_values,
                                   st.text(st.characters(min_codepoint=32, max_codepoint=126),
                                           max_size=8)), max_size=4),
                min_size=1, max_size=4),
       st.lists(st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=4),
                min_size=4, max_size=4))
def test_json_fill_texts_is_json_fill_of_each_template(c, templates, firsts):
    """Templates joined with cuts give each template's json_fill, in order, or None when any
    of them is None; the cut's value is never read."""
    parts: list[str] = []
    kinds = ""
    values: list[object] = []
    want: list[str | None] = []
    for k, slots in enumerate(templates):
        one = (firsts[k], *(part for _, _, part in slots))
        one_kinds = "".join(kind for kind, _, _ in slots)
        one_values = tuple(value for _, value, _ in slots)
        want.append(c.json_fill(one, one_kinds.encode(), one_values))
        if k:
            kinds += "|"
            values.append(object())  # not a value of any kind: read, it would be refused
        parts.extend(one)
        kinds += one_kinds
        values.extend(one_values)
    got = c.json_fill_texts(tuple(parts), kinds.encode(), tuple(values))
    assert got == (None if None in want else tuple(want))


def test_json_fill_texts_cuts_at_the_edges(c):
    assert c.json_fill_texts(("a", "b"), b"|", (None,)) == ("a", "b")
    assert c.json_fill_texts(("", "", ""), b"||", (None, None)) == ("", "", "")
    assert c.json_fill_texts(("x",), b"", ()) == ("x",)
    long = "k" * 2000  # past the buffer on the stack, on both sides of the cut
    assert c.json_fill_texts((long, "", long), b"s|", (long, None)) == (f'{long}"{long}"', long)
    assert c.json_fill_texts(("[", "]|", "]"), b"i|", (2 ** 63, None)) is None
    with pytest.raises(ValueError):  # json_fill has no cuts
        c.json_fill(("a", "b"), b"|", (None,))
    with pytest.raises(ValueError):
        c.json_fill_texts(("a", "b"), b"x", (None,))
    with pytest.raises(ValueError):
        c.json_fill_texts(("a",), b"|", (None,))
    with pytest.raises(TypeError):
        c.json_fill_texts(["a", "b"], b"|", (None,))


def test_json_fill_refuses_a_malformed_template(c):
    with pytest.raises(ValueError):
        c.json_fill(("[", "]"), b"is", (1,))
    with pytest.raises(ValueError):
        c.json_fill(("[",), b"i", (1,))
    with pytest.raises(ValueError):
        c.json_fill(("[", "]"), b"x", (1,))
    with pytest.raises(TypeError):
        c.json_fill(["[", "]"], b"i", (1,))
    with pytest.raises(TypeError):
        c.json_fill(("[", "]"), "i", (1,))
    with pytest.raises(TypeError):
        c.json_fill(("[", 1), b"i", (1,))
    with pytest.raises(TypeError):
        c.json_fill(("é", "]"), b"i", (1,))
    with pytest.raises(TypeError):
        c.json_fill(("[", "]"), b"i")


def test_the_texts_module_loads_first_in_a_fresh_process(c):
    """`_texts` takes the hash from `_blake2b` when it loads: imported alone, before anything
    else of the package, it loads it itself."""
    import subprocess
    import sys

    code = ("import streaming._texts as t, hashlib; "
            "print(t.pair_texts('a', 'b', '', '', '', '', 'p', 's', 'r')[0] == "
            "hashlib.blake2b(b'ab', digest_size=16).hexdigest())")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True"
