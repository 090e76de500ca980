"""A decision fact is encoded once: its hash is the hash of its stored JSON (less the run
fields), and both equal what the straightforward encoding (a dict hashed, then the whole payload
encoded again by the sink) gives, on generated decisions and under every kind of model, whether
the compiled core's template or the f-string writes it."""

from __future__ import annotations

import hashlib
import math

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from streaming.models.logistic import transformed
from streaming.models.registry import INITIAL_ARTIFACT, Model
from streaming.operators import receipts
from streaming.operators.receipts import RUN_FIELDS, decision_fact, decision_key
from streaming.store.ops import dumps
from streaming.timeutil import NEG_INF, POS_INF, us_to_iso

STRICT = {**INITIAL_ARTIFACT, "intercept": -0.4,
          "threshold_policy": {"review_at": 0.3, "decline_at": 0.6}, "score_decimals": 4}
# The terms in another order than the scorer's features, and a model reading two of the three:
# the scorer takes its features by position, so the artifact's order and choice must not leak.
REORDERED = {**INITIAL_ARTIFACT, "features": list(reversed(INITIAL_ARTIFACT["features"]))}
TWO_FEATURES = {**INITIAL_ARTIFACT, "features": ["amount_cents", "feature_count_7m"],
                "intercept": -0.9}
MODELS = [Model.from_artifact(a) for a in (INITIAL_ARTIFACT, STRICT, REORDERED, TWO_FEATURES)]


def reference_score(model: Model, features: dict) -> tuple[float, str]:
    """The score read straight from the artifact, term by term."""
    a = model.artifact
    z = a["intercept"]
    for f in a["features"]:
        pre = a["preprocessing"][f]
        x = transformed(pre["transform"], features[f])
        z += a["weights"][f] * (x - pre["center"]) / pre["scale"]
    p = round(1.0 / (1.0 + math.exp(-z)), a.get("score_decimals", 6))
    pol = a["threshold_policy"]
    if p >= pol["decline_at"]:
        return p, "decline"
    if p >= pol["review_at"]:
        return p, "review"
    return p, "approve"


def reference_fact(kw: dict) -> tuple[str, str, dict]:
    """(hash, stored JSON, payload) as encoded twice: business dict hashed, payload dumped."""
    model = kw["model"]
    score, decision = reference_score(model, {"feature_count_7m": kw["count"],
                                              "feature_amount_7m": kw["amount_7m"],
                                              "amount_cents": kw["amount_cents"]})
    occurred = us_to_iso(kw["occurred_us"])
    business = {
        "receipt_id": kw["receipt_id"], "merchant_id": kw["merchant_id"],
        "store_id": kw["store_id"], "occurred_at": occurred, "amount_cents": kw["amount_cents"],
        "scoring_revision": kw["scoring_revision"], "model_revision": model.revision,
        "score": score, "decision": decision, "feature_count_7m": kw["count"],
        "feature_amount_7m": kw["amount_7m"], "state_cutoff": occurred,
        "status": kw["status"], "origin": kw["origin"], "reason": kw["reason"]}
    payload = {**business, "watermark": us_to_iso(kw["watermark_us"])}
    h = hashlib.blake2b(orjson.dumps(business, option=orjson.OPT_SORT_KEYS),
                        digest_size=16).hexdigest()
    return h, dumps(payload), payload


# Plain ASCII texts (what the compiled core's template writes), ASCII ones that need an escape
# and any others (what it declines, for the f-string to write).
text = st.one_of(
    st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7e, blacklist_characters='"\\'),
            min_size=1, max_size=12),
    st.text(st.characters(max_codepoint=0x7f), min_size=1, max_size=12),
    st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=12))
times = st.integers(-(2 ** 50), 2 ** 52)
decisions = st.fixed_dictionaries({
    "receipt_id": text, "merchant_id": text, "store_id": text,
    "occurred_us": times,
    "amount_cents": st.integers(-(2 ** 63), 2 ** 63 - 1),
    "scoring_revision": st.integers(1, 50),
    "model": st.sampled_from(MODELS),
    "count": st.integers(0, 10_000),
    "amount_7m": st.integers(-(2 ** 63), 2 ** 63 - 1),
    "watermark_us": st.one_of(times, st.sampled_from([NEG_INF, POS_INF])),
    "status": st.sampled_from(["live", "rescored", "reconciled", "repinned"]),
    "origin": st.sampled_from(["live", "reconciliation", "repin"]),
    "reason": text,
    "predecessor_revision": st.one_of(st.none(), st.integers(1, 49)),
})


def built(kw: dict):
    """The builder's fact for a generated decision, scored by its model's scorer."""
    args = {k: v for k, v in kw.items() if k != "model"}
    return decision_fact(**args, scorer=kw["model"].scorer)


@settings(max_examples=1500, deadline=None)
@given(decisions)
def test_one_encoding_gives_the_reference_hash_json_and_decision(kw):
    fact = built(kw)
    h, stored, payload = reference_fact(kw)
    assert fact.payload_json == stored
    assert fact.payload_hash == h
    assert fact.payload == payload
    assert fact.fact_key == decision_key(kw["receipt_id"], kw["scoring_revision"])
    pred = kw["predecessor_revision"]
    assert fact.predecessor_key == (decision_key(kw["receipt_id"], pred) if pred else None)
    # The hash is the hash of the stored JSON with the run fields taken out.
    doc = orjson.loads(fact.payload_json)
    assert set(RUN_FIELDS) <= set(doc)
    business = {k: v for k, v in doc.items() if k not in RUN_FIELDS}
    assert fact.payload_hash == hashlib.blake2b(
        orjson.dumps(business, option=orjson.OPT_SORT_KEYS), digest_size=16).hexdigest()
    # And the stored JSON is what the sink would have written from the payload itself.
    assert fact.payload_json == dumps(fact.payload)


def test_the_run_fields_sort_after_every_business_field():
    """The single encoding appends the run fields at the end of the hashed document."""
    kw = {"receipt_id": "r", "merchant_id": "m", "store_id": "s", "occurred_us": 0,
          "amount_cents": 1, "scoring_revision": 1, "model": MODELS[0], "count": 0,
          "amount_7m": 0, "watermark_us": 0, "status": "live", "origin": "live", "reason": "x"}
    keys = list(orjson.loads(built(kw).payload_json))
    assert keys[-len(RUN_FIELDS):] == sorted(RUN_FIELDS)
    assert keys == sorted(keys)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.integers(-(2 ** 50), 2 ** 52), st.sampled_from([0, 1, POS_INF])),
                min_size=1, max_size=12))
def test_each_decision_carries_its_own_watermark_through_repeats_and_returns(watermarks):
    """A decision built without a kept tail renders its own: a repeat, a return to an earlier
    watermark and an infinite one each carry their own (the hash never includes it)."""
    kw = {"receipt_id": "r", "merchant_id": "m", "store_id": "s", "occurred_us": 0,
          "amount_cents": 1, "scoring_revision": 1, "model": MODELS[0], "count": 0,
          "amount_7m": 0, "status": "live", "origin": "live", "reason": "x"}
    hashes = set()
    for w in [*watermarks, *reversed(watermarks)]:
        fact = built({**kw, "watermark_us": w})
        assert orjson.loads(fact.payload_json)["watermark"] == us_to_iso(w)
        hashes.add(fact.payload_hash)
    assert len(hashes) == 1


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(MODELS), st.integers(0, 5000), st.integers(-(2 ** 63), 2 ** 63 - 1),
       st.integers(-(2 ** 63), 2 ** 63 - 1))
def test_model_terms_read_once_score_like_the_artifact(model, count, amount_7m, amount):
    features = {"feature_count_7m": count, "feature_amount_7m": amount_7m,
                "amount_cents": amount}
    expected = reference_score(model, features)
    assert model.score(features) == expected
    assert model.scorer.score_receipt(count, amount_7m, amount) == expected


def test_a_model_reads_only_the_features_it_names():
    """A feature the artifact leaves out is not read: its absence is no error, and its value
    changes nothing."""
    two = Model.from_artifact(TWO_FEATURES)
    named = {"feature_count_7m": 3, "amount_cents": 12_345}
    assert two.score(named) == reference_score(two, named)
    assert (two.scorer.score_receipt(3, 0, 12_345) == two.scorer.score_receipt(3, 10 ** 9, 12_345)
            == two.score(named))


entries = st.tuples(
    times, text, st.integers(-(2 ** 63), 2 ** 63 - 1), text, st.integers(0, 50),
    st.integers(0, 10_000), st.integers(-(2 ** 63), 2 ** 63 - 1),
    st.one_of(st.none(), st.sampled_from([m.revision for m in MODELS]), text),
    st.sampled_from([receipts.PENDING, receipts.SCORED, receipts.HISTORY]),
    st.integers(0, 1 << 20))


@settings(max_examples=1500, deadline=None)
@given(entries, text)
def test_an_entrys_kept_checkpoint_json_is_orjsons(fields, merchant):
    """The JSON an entry keeps for checkpoints (the compiled core's template, or orjson for
    what it declines) is orjson's encoding of the entry's fields and its merchant."""
    e = [*fields, None, merchant]
    assert len(e) == receipts.MERCHANT + 1
    receipts._encoded(e)
    row = [*fields, merchant]
    assert orjson.dumps(e[receipts.ENCODED]) == orjson.dumps(row)
    assert orjson.loads(orjson.dumps(e[receipts.ENCODED])) == row
    assert receipts._checkpoint_row(e) is e[receipts.ENCODED]
    e[receipts.ENCODED] = None  # a pending entry's row: its fields and merchant as they are
    assert receipts._checkpoint_row(e) == row
