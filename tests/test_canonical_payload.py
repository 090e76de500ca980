"""The decoder's payload in C (`payload_of`, streaming/_texts.c) against its Python twin
(`canonical.py_payload_of`): for generated structs of every contract (IDs in and out of the
alphabet, texts that need escaping or lie past ASCII, integers past 64 bits, any float, times
in any zone and at the ends of the range, as text canonical or not, absent optional times)
both give the same payload in the same key order, the same canonical JSON, the same times, or
both refuse (None) or both raise the same error."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streaming.contracts import CONTRACTS
from streaming.contracts import bounds as B
from streaming.contracts import canonical

from .conftest import hand_written

_ID_CHARS = "".join(chr(c) for c in range(128) if chr(c).isalnum()) + "._~+=@-"
_ids = st.text(alphabet=_ID_CHARS, min_size=1, max_size=12) | st.text(max_size=8)
_texts = st.text(max_size=10) | st.sampled_from(['q"t', "back\\slash", "tab\t", "é€😀", ""])
_ints = st.integers(min_value=-(2**63), max_value=2**63 - 1) | st.integers()
_floats = st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from([0.0, -0.0, 0.5, 1e16])
_zones = st.sampled_from([UTC, timezone(timedelta(hours=2)), timezone(timedelta(minutes=-330)),
                          timezone(timedelta(hours=23, minutes=59))])
_times = st.builds(lambda naive, zone: naive.replace(tzinfo=zone),
                   st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31,
                                                                                23, 59, 59)),
                   _zones)
# Instants as the C decoder's struct holds them, as text (`instants_as_text`): canonical UTC
# spellings (read in C), the zero fraction written out (written again without it), UTC with
# `+00:00` or a fraction of one to six digits (read in C), other spellings (read by
# `read_instant`: another zone, a lower-case zone, more digits) and
# texts both sides refuse: a day that does not exist, year 0, digits past ASCII, a leap second,
# a text that is no instant.
_utc = st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31, 23, 59, 59)
                   ).map(lambda naive: naive.replace(tzinfo=UTC))
_time_texts = (_utc.map(lambda t: t.isoformat().replace("+00:00", "Z"))
               | _utc.map(lambda t: t.replace(microsecond=0).isoformat()
                          .replace("+00:00", ".000000Z"))
               | st.builds(lambda t: t.isoformat(), _times)
               | st.builds(lambda t, k, zone: (f"{t.year:04d}-{t.month:02d}-{t.day:02d}T"
                                                f"{t.hour:02d}:{t.minute:02d}:{t.second:02d}"
                                                + (f".{t.microsecond:06d}987"[:k + 1] if k else "")
                                                + zone),
                           _utc, st.integers(0, 9),
                           st.sampled_from(["Z", "+00:00", "-00:00", "z", "+01:30", "+0000"]))
               | st.sampled_from(["2026-10-06T10:00:00z", "2026-02-30T00:00:00Z",
                                  "0000-12-31T23:59:59Z", "2026-10-06T10:00:0\u0665Z",
                                  "2026-12-31T23:59:60Z", "2026-10-06T10:00:00.5Z", "", "x"]))


def _value_for(contract, name: str):
    kind = next(k for n, k, _ in contract.fields if n == name)
    if kind in (B.ID, B.LABEL):
        return _ids | _texts
    if kind == B.TIME:
        return _times | _time_texts
    if kind == B.OPT_TIME:
        return st.none() | _times | _time_texts
    if kind == B.FLAG:
        return st.booleans()
    if kind == B.SCORE:
        return _floats
    return _ints


@st.composite
def _structs(draw):
    topic = draw(st.sampled_from(sorted(CONTRACTS)))
    c = CONTRACTS[topic]
    values = {n: draw(_value_for(c, n)) for n, _, _ in c.fields}
    # Built without validation (a struct's constructor checks nothing): values the decoder
    # would refuse are fine here, both sides must treat them alike.
    return c, c.struct(**values)


@pytest.fixture(scope="module")
def c_module():
    return hand_written("streaming._texts")


def _outcome(fn):
    try:
        got = fn()
    except Exception as exc:  # noqa: BLE001  (compared below)
        return ("raised", type(exc).__name__)
    if got is None:
        return None
    payload, text, times = got
    return (list(payload.items()), text, list(times.items()))


@settings(max_examples=3000, deadline=None)
@given(_structs())
def test_payload_of_equals_the_python_twin(c_module, case):
    contract, s = case
    plan = contract.plan
    c_side = _outcome(lambda: c_module.payload_of(
        msgspec.structs.astuple(s), plan.fields, plan.roles, plan.order,
        canonical._ENCODE_SORTED, canonical.read_instant))
    assert c_side == _outcome(lambda: canonical.py_payload_of(plan, s))


def test_payload_of_at_the_ends_of_the_range_and_past_them(c_module):
    plan = CONTRACTS["payments"].plan
    base = dict(payment_id="p-1", revision=1, merchant_id="m-1", account_id="a-1",
                amount_cents=5, schema_version=1)
    one_hour_east = timezone(timedelta(hours=1))
    for event, arrival in ((B.MIN_INSTANT, B.MAX_INSTANT), (B.MAX_INSTANT, B.MIN_INSTANT),
                           (datetime(1, 1, 1, tzinfo=one_hour_east), B.MIN_INSTANT),
                           (datetime(1970, 1, 1, tzinfo=UTC), datetime(1969, 12, 31, 23, 59, 59,
                                                                       999_999, tzinfo=UTC))):
        s = CONTRACTS["payments"].struct(**base, event_time=event, arrival_time=arrival)
        values = msgspec.structs.astuple(s)
        assert _outcome(lambda v=values: c_module.payload_of(
            v, plan.fields, plan.roles, plan.order, canonical._ENCODE_SORTED,
            canonical.read_instant)) == _outcome(
            lambda s=s: canonical.py_payload_of(plan, s))
    # One hour east of UTC on the first day lies before year 1 in UTC: refused.
    s = CONTRACTS["payments"].struct(**base, event_time=datetime(1, 1, 1, tzinfo=one_hour_east),
                                     arrival_time=B.MIN_INSTANT)
    assert canonical.py_payload_of(plan, s) is None


def test_payload_of_refuses_arguments_of_the_wrong_shape(c_module):
    plan = CONTRACTS["receipts"].plan
    with pytest.raises(TypeError):
        c_module.payload_of((), plan.fields, plan.roles, plan.order)
    with pytest.raises(ValueError):
        c_module.payload_of((1,), plan.fields, plan.roles, plan.order, canonical._ENCODE_SORTED,
                            canonical.read_instant)
    with pytest.raises(TypeError):
        c_module.payload_of(list(plan.fields), plan.fields, plan.roles, plan.order,
                            canonical._ENCODE_SORTED, canonical.read_instant)


def test_the_c_range_of_instants_is_the_contracts(c_module):
    assert (c_module.FIRST_US, c_module.LAST_US) == (canonical.MIN_US, canonical.MAX_US)


def test_a_field_name_json_would_escape_is_refused_when_the_plan_is_built():
    with pytest.raises(ValueError):
        canonical.payload_roles(("a", 'b"c'), (), (), ())
    roles, order = canonical.payload_roles(("zeta", "alpha", "gone", "when"), ("zeta",),
                                           ("when",), ("gone",))
    assert list(roles) == [canonical.ROLE_IN_PAYLOAD | canonical.ROLE_ID,
                           canonical.ROLE_IN_PAYLOAD, 0,
                           canonical.ROLE_IN_PAYLOAD | canonical.ROLE_TIME]
    assert order == (1, 3, 0)
