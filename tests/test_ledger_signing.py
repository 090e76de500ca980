"""Repair-request signing: key resolution per store, HMAC verification and its rejections."""

from __future__ import annotations

import hashlib
import hmac

import pytest

from streaming.repairs.ledger import (DEV_KEY, SIGNED_FIELDS, RepairKey, RepairKeyMissing,
                                      canonical, resolve_key, verify)

BODY = {"request_id": "payment|acct-8|2026-10-06T10:00Z|payments:1:7", "kind": "payment",
        "account_id": "acct-8", "event_hour": "2026-10-06T10:00Z", "hour_us": 1791280800000000,
        "topic": "payments", "partition": 1, "offset": 7, "subject_id": "pay-106",
        "subject_revision": 1, "subject_hash": "ab" * 16, "reason": "beyond_retention",
        "watermark_us": 1791288000000000}


def test_key_resolution_per_store():
    env = {"RISKSTREAM_REPAIR_KEY": "s3cret"}
    assert resolve_key("postgresql://postgres@127.0.0.1:5432/db", env) == \
        RepairKey(b"s3cret", "env")
    assert resolve_key("sqlite:///x.sqlite", {}) == RepairKey(DEV_KEY, "dev")
    assert resolve_key("sqlite:///x.sqlite", {}).describe() == "dev (RISKSTREAM_REPAIR_KEY unset)"
    with pytest.raises(RepairKeyMissing, match="RISKSTREAM_REPAIR_KEY is not set"):
        resolve_key("postgresql://postgres@127.0.0.1:5432/db", {})


def test_signature_is_hmac_sha256_over_canonical_body():
    key = RepairKey(b"k1", "env")
    want = hmac.new(b"k1", canonical(BODY), hashlib.sha256).hexdigest()
    assert key.sign(BODY) == want and len(want) == 64
    assert canonical(BODY).startswith(b'{"account_id":"acct-8","event_hour"')
    assert set(SIGNED_FIELDS) == set(BODY)


def test_verification_rejects_tampered_unsigned_and_foreign_key():
    key = RepairKey(b"k1", "env")
    row = {**BODY, "signature": key.sign(BODY), "status": "pending"}
    assert verify(key, row) is None
    for field, value in (("account_id", "acct-7"), ("offset", 8), ("subject_hash", "cd" * 16)):
        assert verify(key, {**row, field: value}).startswith("bad_signature")
    assert verify(key, {**row, "signature": None}).startswith("unsigned")
    assert verify(RepairKey(b"k2", "env"), row).startswith("bad_signature")
    # Unsigned bookkeeping columns may change without breaking the signature.
    assert verify(key, {**row, "status": "held", "status_reason": "x"}) is None
