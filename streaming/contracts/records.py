"""One typed struct per input topic: the single definition the decoder, the validator and the
published JSON Schemas are derived from.

Field order is the documented order (and the order in which a record with several defects is
judged). Unknown fields are ignored; `schema_version` is optional and never part of the
business payload."""

from __future__ import annotations

from typing import Annotated

import msgspec
from msgspec import Meta

from .bounds import Cents, Flag, Id, Instant, Label, OptInstant, Revision, SchemaVersion, Score


def _doc(text: str) -> Meta:
    return Meta(description=text)


class Payment(msgspec.Struct, kw_only=True, gc=False):
    """Payments; shared by the interval join (keyed by merchant) and the ledger."""

    payment_id: Annotated[Id, _doc("globally unique event ID")]
    revision: Annotated[Revision, _doc("1 for the original, higher for corrections")]
    merchant_id: Id
    account_id: Id
    amount_cents: Annotated[Cents, _doc("integer minor units")]
    event_time: Annotated[Instant, _doc("when the payment happened (UTC, zone required)")]
    arrival_time: Annotated[Instant, _doc("when the record reached the log")]
    schema_version: SchemaVersion = 1


class RiskSignal(msgspec.Struct, kw_only=True, gc=False):
    """Risk signals keyed by merchant."""

    signal_id: Annotated[Id, _doc("globally unique signal ID")]
    revision: Revision
    merchant_id: Id
    score: Annotated[Score, _doc("risk score")]
    event_time: Instant
    arrival_time: Instant
    schema_version: SchemaVersion = 1


class MerchantCategory(msgspec.Struct, kw_only=True, gc=False):
    """Effective-dated merchant category versions (half-open ranges)."""

    version_id: Annotated[Id, _doc("globally unique version ID")]
    merchant_id: Id
    category: Label
    high_risk: Flag
    effective_from: Annotated[Instant, _doc("start of the half-open range [from, to)")]
    effective_to: Annotated[OptInstant, _doc("end of the range; null = open until the "
                                             "merchant's next version")] = None
    arrival_time: Annotated[Instant, _doc("when the version reached the log")]
    schema_version: SchemaVersion = 1


class Receipt(msgspec.Struct, kw_only=True, gc=False):
    """Receipts uploaded by stores, possibly long after they occurred; partitioned by upload
    shard."""

    receipt_id: Annotated[Id, _doc("globally unique receipt ID")]
    store_id: Annotated[Id, _doc("the store (handheld) that issued the receipt")]
    merchant_id: Annotated[Id, _doc("the merchant owning the store (the state key)")]
    amount_cents: Annotated[Cents, _doc("integer minor units")]
    occurred_at: Annotated[Instant, _doc("when the sale happened (UTC, zone required)")]
    uploaded_at: Annotated[Instant, _doc("when the upload reached the log")]
    schema_version: SchemaVersion = 1
