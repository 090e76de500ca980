"""Pair and outcome facts assembled from per-entry cached parts against the construction from
the payload definitions (`pair_payload`, `outcome_payload`, `Fact.make`): the same fact keys,
logical keys, payloads, canonical JSON bytes and hashes, for generated entries."""

from __future__ import annotations

from typing import Any

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streaming.keys import escape
from streaming.operators.base import Emit, Fact, json_scalar
from streaming.operators.interval_join import (Entry, IntervalJoin, PaymentParts,
                                               _written_outcome_texts, _written_pair_texts,
                                               _written_payment_parts,
                                               outcome_payload, pair_fact_key, pair_id,
                                               pair_logical_key, pair_payload, payment_parts,
                                               signal_parts)
from streaming.timeutil import US_PER_MIN, us_to_iso

from .conftest import hand_written

# IDs and keys with the characters that need escaping in keys ("|", "\\") or in JSON (quotes,
# control characters, non-ASCII; no lone surrogates: decoded UTF-8 never holds one).
# Plain ASCII IDs, the ones the compiled core's C writes (`json_fill`), are drawn as often as
# the others, which it declines and the written parts spell out.
text = (st.text(alphabet=st.sampled_from(list("ab|\\\"\n\t\x00é€😀 "))
                | st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=12)
        | st.text(alphabet=st.sampled_from(list("AZaz09_-:.")), min_size=1, max_size=24))
revs = st.integers(1, 2**40)
times = st.integers(-6 * 10**16, 2 * 10**17)  # within the years datetime renders
amounts = st.none() | st.integers(-2**63, 2**63 - 1)
scores = st.none() | st.floats(allow_nan=False, allow_infinity=False) | st.integers(-10, 10)
rules = st.sampled_from(["ij-v1:-47m..+8m", "rule|with\\odd\"chars"])


def entry(eid: str, rev: int, t: int, key: str, payload: dict[str, Any]) -> Entry:
    return Entry(eid, rev, t, key, 1, 10, payload, 0)


def reference_pair(rule: str, p: Entry, s: Entry) -> Fact:
    pid = pair_id(rule, p.id, p.rev, s.id, s.rev)
    return Fact.make(pair_fact_key(p.t, pid, "publish"), "pair",
                     pair_logical_key(p.id, s.id, rule), "current",
                     pair_payload(rule, pid, p.key, p.id, p.rev, s.id, s.rev, us_to_iso(p.t),
                                  us_to_iso(s.t), p.payload.get("amount_cents"),
                                  s.payload.get("score")))


def reference_outcome(rule: str, p: Entry, status: str, seq: int, n: int) -> Fact:
    return Fact.make(f"outcome|{p.t}|{escape(p.id)}|{p.rev}|{seq}", "outcome", p.id, status,
                     outcome_payload(p.id, p.rev, p.key, us_to_iso(p.t),
                                     p.payload.get("amount_cents"), status, n, rule))


def same(got: Fact, want: Fact) -> None:
    assert got == want  # every field, the canonical JSON included
    assert got.payload_json is not None and want.payload_json is not None
    assert got.payload_json.encode() == want.payload_json.encode()
    # The dict a reader gets (decoded from the stored text when the fact carries none).
    assert got.payload == want.payload


@settings(max_examples=300, deadline=None)
@given(rules, text, text, revs, revs, times, st.integers(-47, 8), text, amounts, scores,
       st.booleans())
def test_pair_fact_from_parts(rule: str, payment_id: str, signal_id: str, p_rev: int,
                              s_rev: int, t: int, offset_min: int, key: str,
                              amount: int | None, score: Any, with_fields: bool) -> None:
    op = IntervalJoin(rule_version=rule)
    p_payload = {"amount_cents": amount} if with_fields else {}
    s_payload = {"score": score} if with_fields else {}
    p = entry(payment_id, p_rev, t, key, p_payload)
    s = entry(signal_id, s_rev, t + offset_min * US_PER_MIN, key, s_payload)
    out = Emit()
    pid = op._publish(p, s, out)
    op._publish(p, s, out)  # again, from the parts now cached on both entries
    want = reference_pair(rule, p, s)
    assert pid == want.payload["pair_id"]
    same(out.facts[0], want)
    same(out.facts[1], want)


@settings(max_examples=300, deadline=None)
@given(rules, text, revs, times, text, amounts, st.lists(text, max_size=3, unique=True),
       st.lists(st.sampled_from(["provisional", "retracted", "final"]), min_size=1,
                max_size=4))
def test_outcome_fact_from_parts(rule: str, payment_id: str, rev: int, t: int, key: str,
                                 amount: int | None, matched: list[str],
                                 statuses: list[str]) -> None:
    op = IntervalJoin(rule_version=rule)
    p = entry(payment_id, rev, t, key, {"amount_cents": amount})
    p.matches = {sid: "x" for sid in matched}
    out = Emit()
    for status in statuses:
        op._outcome(p, status, out)
    assert len(out.facts) == len(statuses)
    for seq, (status, got) in enumerate(zip(statuses, out.facts, strict=True), start=1):
        same(got, reference_outcome(rule, p, status, seq, len(matched)))


def _fields(parts: PaymentParts) -> tuple[str, ...]:
    return (parts.pair_head, parts.pair_mid, parts.pid_head, parts.fact_key_head,
            parts.outcome_head, parts.outcome_mid, parts.outcome_key_head)


@settings(max_examples=500, deadline=None)
@given(rules, text, revs, times, text, amounts, text, revs, scores)
def test_filled_parts_are_the_written_parts(rule: str, payment_id: str, rev: int, t: int,
                                            key: str, amount: int | None, signal_id: str,
                                            s_rev: int, score: Any) -> None:
    """The C's parts (where the compiled core is in use) against the ones the module writes
    itself, field by field."""
    rule_json = json_scalar(rule)
    args = (rule_json, escape(rule), escape(payment_id), payment_id, rev, key, t, amount)
    assert _fields(payment_parts(*args)) == _fields(_written_payment_parts(*args))
    got = signal_parts(escape(signal_id), signal_id, s_rev, t, score)
    assert got.pair_tail == (f'"score":{json_scalar(score)},"signal_id":{json_scalar(signal_id)}'
                             f',"signal_rev":{s_rev},"signal_time":"{us_to_iso(t)}"}}')
    assert got.pid_tail == f"{escape(signal_id)}|{s_rev}"


def test_parts_of_a_plain_payment() -> None:
    """One payment's parts spelled out: the texts a pair's and an outcome's JSON and keys are
    joined from."""
    parts = payment_parts('"ij-v1"', "ij-v1", "p-1", "p-1", 3, "m-7", 1_700_000_000_000_000, 1250)
    assert parts.pair_head == '{"amount_cents":1250,"merchant_id":"m-7","pair_id":"'
    assert parts.pair_mid == ('","payment_id":"p-1","payment_rev":3,'
                              '"payment_time":"2023-11-14T22:13:20Z","rule_version":"ij-v1",')
    assert parts.pid_head == "ij-v1|p-1|3|"
    assert parts.fact_key_head == "pair|1700000000000000|"
    assert parts.outcome_head == '{"amount_cents":1250,"match_count":'
    assert parts.outcome_mid == (',"merchant_id":"m-7","payment_id":"p-1","payment_rev":3,'
                                 '"payment_time":"2023-11-14T22:13:20Z",'
                                 '"rule_version":"ij-v1","status":')
    assert parts.outcome_key_head == "outcome|1700000000000000|p-1|3|"


# Texts of any length around the C's 256-byte buffer for the ID's text, most of them ASCII (what
# it writes); some past ASCII (what it declines).
_ascii = (st.text(alphabet=st.characters(max_codepoint=127), max_size=40)
          | st.text(alphabet=st.characters(max_codepoint=127), min_size=100, max_size=300))
_piece = _ascii | st.text(max_size=20)


@settings(max_examples=1000, deadline=None)
@given(st.lists(_piece, min_size=9, max_size=9))
def test_pair_texts_in_c_are_the_written_ones(pieces: list[str]) -> None:
    """`_texts.pair_texts` against `_written_pair_texts`: the same four texts for ASCII ones,
    None when any is past ASCII (the written ones then serve), and the ID is blake2b-128 of
    the ID's text as hashlib computes it."""
    c = hand_written("streaming._texts")
    got = c.pair_texts(*pieces)
    want = _written_pair_texts(*pieces)
    assert want[0] == hashlib.blake2b((pieces[0] + pieces[1]).encode(),
                                      digest_size=16).hexdigest()
    if all(p.isascii() for p in pieces):
        assert got == want
    else:
        assert got is None


def test_pair_texts_of_a_plain_pair() -> None:
    """One pair spelled out, and the arguments the C refuses."""
    c = hand_written("streaming._texts")
    head = "x" * 300  # the ID's text past the C's stack buffer
    pid = hashlib.blake2b(f"{head}s-1|2".encode(), digest_size=16).hexdigest()
    assert c.pair_texts(head, "s-1|2", '{"a":"', '","b":1,', '"c":2}', "pair|7|", "p-1", "s-1",
                        "ij-v1") == (pid, f'{{"a":"{pid}","b":1,"c":2}}', f"pair|7|{pid}|publish",
                                     "p-1|s-1|ij-v1")
    with pytest.raises(TypeError, match="argument 3 is not a str"):
        c.pair_texts("a", "b", "c", b"d", "e", "f", "g", "h", "i")
    with pytest.raises(TypeError, match="takes 9 arguments"):
        c.pair_texts("a", "b")


@settings(max_examples=1000, deadline=None)
@given(st.lists(_piece, min_size=4, max_size=4), st.integers(0, 2**63 - 1),
       st.integers(0, 2**63 - 1))
def test_outcome_texts_in_c_are_the_written_ones(pieces: list[str], count: int,
                                                 seq: int) -> None:
    """`_texts.outcome_texts` against `_written_outcome_texts`: the same two texts for ASCII
    ones, None when any is past ASCII (the written ones then serve)."""
    c = hand_written("streaming._texts")
    head, mid, tail, key_head = pieces
    got = c.outcome_texts(head, count, mid, tail, key_head, seq)
    want = _written_outcome_texts(head, count, mid, tail, key_head, seq)
    assert want == (f"{head}{count}{mid}{tail}", f"{key_head}{seq}")
    if all(p.isascii() for p in pieces):
        assert got == want
    else:
        assert got is None


def test_outcome_texts_of_a_plain_outcome() -> None:
    """One outcome spelled out, the numbers it leaves to the written texts, and the arguments
    it refuses."""
    c = hand_written("streaming._texts")
    assert c.outcome_texts('{"n":', 12, ',"s":', '"final"}', "outcome|7|p|1|", 3) == (
        '{"n":12,"s":"final"}', "outcome|7|p|1|3")
    assert c.outcome_texts("a", 0, "b", "c", "k|", 2**63 - 1) == ("a0bc",
                                                                  "k|9223372036854775807")
    assert c.outcome_texts("a", 2**63, "b", "c", "k|", 1) is None  # past 64 bits
    assert c.outcome_texts("a", -1, "b", "c", "k|", 1) is None
    with pytest.raises(TypeError, match="argument 1 is not an int"):
        c.outcome_texts("a", "1", "b", "c", "k|", 1)
    with pytest.raises(TypeError, match="argument 3 is not a str"):
        c.outcome_texts("a", 1, "b", None, "k|", 1)
    with pytest.raises(TypeError, match="takes 6 arguments"):
        c.outcome_texts("a", 1)
