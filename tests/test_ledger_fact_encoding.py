"""A window's documents are written member by member (operators/ledger.py): the content's
text, whose hash decides whether a revision is published, and the fact's, which is hashed and
stored. Both must be exactly what orjson's sorted encoding of the dicts gives (the hashes a
store and its checkpoints already hold were taken over those), on generated windows and on the
facts a live run publishes."""

from __future__ import annotations

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from streaming.contracts import payload_hash
from streaming.hashing import digest
from streaming.operators import ledger as L
from streaming.operators.base import INT64_MAX, INT64_MIN, Emit

_texts = st.text(max_size=12) | st.sampled_from(["acct-1", "retail", "uncategorized", 'q"t',
                                                 "back\\slash", "é€😀", "tab\t"])
_hours = st.integers(min_value=0, max_value=253_402_300_799 * 1_000_000 // L.US_PER_HOUR).map(
    lambda h: h * L.US_PER_HOUR)
_windows = st.fixed_dictionaries({
    "account": _texts, "hour": _hours,
    "total": st.integers(min_value=INT64_MIN, max_value=INT64_MAX),
    "count": st.integers(min_value=0, max_value=10**6),
    "risk": st.integers(min_value=0, max_value=10**6),
    "by_cat": st.dictionaries(_texts, st.integers(min_value=1, max_value=10**6), max_size=5),
    "revision": st.integers(min_value=1, max_value=10**4),
    "status": st.sampled_from(["provisional", "revised", "final", "corrected"]),
})


def _content(w: dict) -> dict:
    return {"account_id": w["account"], "event_hour": L.hour_label(w["hour"]),
            "total_cents": w["total"], "payment_count": w["count"], "risk_count": w["risk"],
            "category_counts": dict(sorted(w["by_cat"].items()))}


def _sorted_json(d: dict) -> str:
    return orjson.dumps(d, option=orjson.OPT_SORT_KEYS).decode()


@settings(max_examples=1500, deadline=None)
@given(_windows)
def test_the_documents_are_orjsons_sorted_encoding(w):
    content = _content(w)
    head = L.window_head(w["account"], w["hour"], w["count"], w["by_cat"])
    text = L.content_json(head, w["risk"], w["total"])
    assert text == _sorted_json(content)
    assert digest(text) == payload_hash(content)
    fact = L.window_fact(w["account"], w["hour"], w["revision"], w["status"], content)
    payload = {**content, "revision": w["revision"], "status": w["status"]}
    assert fact.payload_json == _sorted_json(payload)
    assert fact.payload_hash == payload_hash(payload)
    assert fact.payload == payload
    assert fact.fact_key == L.window_fact_key(w["account"], w["hour"], w["revision"])
    assert fact.logical_key == L.window_logical_key(w["account"], w["hour"])
    assert fact.predecessor_key == (L.window_fact_key(w["account"], w["hour"], w["revision"] - 1)
                                    if w["revision"] > 1 else None)
    assert (fact.kind, fact.status) == ("window", w["status"])


def test_hour_labels_past_the_bound_are_formatted_again_alike():
    hours = [h * L.US_PER_HOUR for h in range(495_000, 495_000 + L._HOUR_LABELS.limit + 10)]
    first = [L.hour_label(h) for h in hours]
    assert len(L._HOUR_LABELS.texts) <= L._HOUR_LABELS.limit
    assert [L.hour_label(h) for h in hours] == first
    assert first[0] == "2026-06-21T00:00Z" and first[1] == "2026-06-21T01:00Z"


def test_a_live_runs_facts_equal_the_ones_built_from_each_windows_content():
    # Payments over three accounts and three hours, late ones among them (revisions), under
    # category versions (one high-risk, one changing a merchant mid-run): every window fact the
    # operator publishes is the one `window_fact` builds from that revision's content.
    from riskstream_tools.workloads.ledger_seed import at, payment, version

    from .ledgerutil import Driver

    d = Driver()
    facts = []
    facts += d.feed(version("v1", "m-1", "grocery", False, at(0), None, at(7))).facts
    facts += d.feed(version("v2", "m-2", "gambling", True, at(0), None, at(7))).facts
    for i in range(90):
        hour, minute = 9 + i // 30, (i * 7) % 60
        arrival = at(hour, minute)
        # Every eleventh payment from hour 10 on belongs to the hour before: late for a
        # window already published, which then gets a revision.
        t = at(hour - 1, 50) if i % 11 == 0 and hour > 9 else arrival
        facts += d.feed(payment(f"p{i}", f"acct-{i % 3}", f"m-{i % 4}", t, arrival,
                                100 + 37 * i, 1)).facts
        if i == 45:
            facts += d.feed(version("v3", "m-3", "travel", True, at(10), None, at(10, 50))).facts
    out = Emit()
    d.op.on_end_of_stream(out)
    facts += out.facts
    windows = [f for f in facts if f.kind == "window"]
    hours = [int(at(h).timestamp()) * 1_000_000 for h in (9, 10, 11, 12)]
    assert {f.status for f in windows} >= {"provisional", "revised", "final"}
    assert any(f.payload["risk_count"] for f in windows)
    assert any(len(f.payload["category_counts"]) > 1 for f in windows)
    for f in windows:
        account, _, label = f.logical_key.partition("|")
        hour_us = next(h for h in hours if L.hour_label(h) == label)
        content = {k: v for k, v in f.payload.items() if k not in ("revision", "status")}
        want = L.window_fact(account, hour_us, f.payload["revision"], f.status, content)
        assert (f.fact_key, f.payload_json, f.payload_hash, f.predecessor_key) == (
            want.fact_key, want.payload_json, want.payload_hash, want.predecessor_key)
