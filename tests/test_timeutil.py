"""Property tests: `parse_utc_us` (canonical spellings read from cached parts) against the
plain ISO parser it must agree with, on generated valid and invalid strings. The fast path is
exercised on purpose: each case first parses a canonical string of the same day, so the day is
cached when the case itself is parsed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from streaming import timeutil
from streaming.timeutil import TimeFormatError, parse_utc_us

SETTINGS = settings(max_examples=600, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def reference(value: object) -> int:
    """The plain parser (`datetime.fromisoformat`), written out independently of the module."""
    if not isinstance(value, str):
        raise TimeFormatError("unparseable_time", value)
    try:
        dt = datetime.fromisoformat(value)
    except ValueError:
        raise TimeFormatError("unparseable_time", value) from None
    if dt.tzinfo is None or dt.utcoffset() is None:
        raise TimeFormatError("naive_time", value)
    return (dt - _EPOCH) // timedelta(microseconds=1)


def outcome(fn, value: object) -> tuple[str, object]:
    try:
        return "ok", fn(value)
    except TimeFormatError as exc:
        return "error", (exc.kind, str(exc))


def assert_agrees(value: object) -> None:
    if isinstance(value, str) and len(value) >= 10:
        # Warm the day cache with the canonical midnight of this string's date, when it is one.
        try:
            parse_utc_us(value[:10] + "T00:00:00Z")
        except TimeFormatError:
            pass
    got, want = outcome(parse_utc_us, value), outcome(reference, value)
    assert got == want, (value, got, want)
    # And a second time, now that the string itself may have taught the cache its day.
    assert outcome(parse_utc_us, value) == want, value


instants = st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30))
leap_days = st.builds(lambda y, s: datetime(y, 2, 29) + timedelta(microseconds=s),
                      st.sampled_from([4, 400, 1600, 1996, 2000, 2024, 2028, 9996]),
                      st.integers(0, 86_400_000_000 - 1))
offsets = st.integers(-23 * 60 - 59, 23 * 60 + 59).map(lambda m: timedelta(minutes=m))


def spell(dt: datetime, how: str, off: timedelta) -> str:
    base = dt.strftime("%Y-%m-%dT%H:%M:%S").rjust(19, "0")
    frac = f"{dt.microsecond:06d}"
    sign = "+" if off >= timedelta(0) else "-"
    mins = abs(off) // timedelta(minutes=1)
    zone = f"{sign}{mins // 60:02d}:{mins % 60:02d}"
    return {
        "Z": base + "Z",
        "Z6": f"{base}.{frac}Z",
        "Z3": f"{base}.{frac[:3]}Z",
        "Z1": f"{base}.{frac[:1]}Z",
        "Z7": f"{base}.{frac}0Z",
        "Z5": f"{base}.{frac[:5]}Z",
        "dotZ": f"{base}.Z",
        "utc": base + "+00:00",
        "offset": f"{base}.{frac}{zone}",
        "naive": base,
        "naive6": f"{base}.{frac}",
        "lowerz": base + "z",
        "space": base.replace("T", " ") + "Z",
        "lowert": base.replace("T", "t") + "Z",
        "ZZ": base + "ZZ",
        "nosec": base[:16] + "Z",
    }[how]


HOWS = ["Z", "Z6", "Z3", "Z1", "Z7", "Z5", "dotZ", "utc", "offset", "naive", "naive6", "lowerz",
        "space", "lowert", "ZZ", "nosec"]


@SETTINGS
@given(st.one_of(instants, leap_days), st.sampled_from(HOWS), offsets)
@example(datetime(2024, 2, 29, 23, 59, 59, 999999), "Z6", timedelta(0))
@example(datetime(2000, 2, 29), "Z", timedelta(0))
@example(datetime(1970, 1, 1), "Z", timedelta(0))
@example(datetime(1969, 12, 31, 23, 59, 59, 1), "Z6", timedelta(0))
def test_valid_spellings_agree(dt: datetime, how: str, off: timedelta) -> None:
    assert_agrees(spell(dt, how, off))


# Characters a corrupted canonical string may get: ASCII digits and separators, and look-alikes
# (non-ASCII digits, which `str.isdigit` and `int` would accept, signs, spaces, underscores).
CORRUPT = st.sampled_from(list("0123456789-:.TZz+ _\t") + ["\u0663", "\uff11", "\u00b2", "\u2212"])


@SETTINGS
@given(st.one_of(instants, leap_days), st.sampled_from(["Z", "Z6"]),
       st.lists(st.tuples(st.integers(0, 26), CORRUPT), min_size=1, max_size=3),
       st.sampled_from(["replace", "insert", "delete"]))
@example(datetime(2023, 2, 28), "Z", [(9, "9")], "replace")   # 2023-02-29: no such day
@example(datetime(2026, 10, 6), "Z", [(11, "2"), (12, "4")], "replace")  # hour 24
@example(datetime(2026, 10, 6), "Z", [(17, "6")], "replace")   # second 60
@example(datetime(2026, 10, 6), "Z6", [(20, "\u0663")], "replace")  # non-ASCII digit
@example(datetime(2026, 10, 6), "Z6", [(20, "+")], "replace")
@example(datetime(2026, 10, 6), "Z", [(17, " ")], "replace")
def test_corrupted_canonical_strings_agree(dt: datetime, how: str, edits: list[tuple[int, str]],
                                           op: str) -> None:
    text = spell(dt, how, timedelta(0))
    parse_utc_us(text)  # teaches the cache this day before the corrupted copy is read
    for pos, ch in edits:
        pos = min(pos, len(text) - 1)
        if op == "replace":
            text = text[:pos] + ch + text[pos + 1:]
        elif op == "insert":
            text = text[:pos] + ch + text[pos:]
        else:
            text = text[:pos] + text[pos + 1:]
    assert_agrees(text)


@SETTINGS
@given(st.one_of(st.text(max_size=40), st.none(), st.integers(), st.floats(), st.binary(),
                 st.builds(lambda d: d.replace(tzinfo=timezone.utc), instants)))
def test_garbage_agrees(value: object) -> None:
    assert_agrees(value)


def test_str_subclass_and_day_cache() -> None:
    class S(str):
        pass

    assert parse_utc_us(S("2026-10-06T09:03:40Z")) == reference("2026-10-06T09:03:40Z")
    parse_utc_us("2031-03-04T05:06:07Z")
    assert "2031-03-04T" in timeutil._DAY_US  # learnt from the full parser
    assert parse_utc_us("2031-03-04T23:59:59.000001Z") == reference("2031-03-04T23:59:59.000001Z")
    # A day the full parser refuses is never learnt.
    for bad in ("2031-02-29T00:00:00Z", "2031-13-01T00:00:00Z"):
        try:
            parse_utc_us(bad)
        except TimeFormatError as exc:
            assert exc.kind == "unparseable_time"
        else:
            raise AssertionError(bad)
        assert bad[:11] not in timeutil._DAY_US


def test_every_single_character_corruption_agrees() -> None:
    """Each position of canonical strings (a leap day, both lengths) replaced by each corrupting
    character, deleted, and doubled: the fast path must refuse exactly what the parser refuses."""
    chars = list("0123456789-:.TZz+ _\t") + ["\u0663", "\uff11", "\u00b2", "\u2212"]
    for text in ("2024-02-29T23:59:59Z", "2024-02-29T00:00:00.000001Z",
                 "0001-01-01T00:00:00Z", "9999-12-31T23:59:59.999999Z"):
        parse_utc_us(text)
        for pos in range(len(text)):
            assert_agrees(text[:pos] + text[pos + 1:])
            assert_agrees(text[:pos] + text[pos] + text[pos:])
            for ch in chars:
                assert_agrees(text[:pos] + ch + text[pos + 1:])


@SETTINGS
@given(st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31, 23, 59, 59,
                                                                   999999)))
@example(datetime(543, 4, 10, 6, 9, 38, 725650))
@example(datetime(1, 1, 1))
def test_us_to_iso_spells_every_instant_as_the_contract_decoder_does(naive):
    """Facts carry event times formatted by `us_to_iso`; the archived payloads carry the
    decoder's spelling (msgspec's RFC 3339 in C). Both must be one spelling, four-digit years
    included (the C library's %Y writes the year 543 as `543`)."""
    import msgspec
    dt = naive.replace(tzinfo=UTC)
    us = (dt - _EPOCH) // timedelta(microseconds=1)
    assert timeutil.us_to_iso(us) == msgspec.json.encode(dt).decode()[1:-1]
    assert parse_utc_us(timeutil.us_to_iso(us)) == us


def test_the_sentinels_are_spelled_as_infinities():
    # Compiled, the end of the stream is recognised by a machine-integer comparison with the
    # last finite time: POS_INF and anything past it are "+inf", NEG_INF and below "-inf".
    assert timeutil.LAST_FINITE + 1 == timeutil.POS_INF
    assert [timeutil.us_to_iso(v) for v in (timeutil.POS_INF, timeutil.POS_INF + 1, 2**70)] \
        == ["+inf"] * 3
    assert [timeutil.us_to_iso(v) for v in (timeutil.NEG_INF, timeutil.NEG_INF - 1)] \
        == ["-inf"] * 2
    assert timeutil.us_to_iso(parse_utc_us("9999-12-31T23:59:59.999999Z")) \
        == "9999-12-31T23:59:59.999999Z"
