"""The registered topic contracts: which struct each topic uses and the roles of its fields."""

from __future__ import annotations

from .core import Contract
from .records import MerchantCategory, Payment, Receipt, RiskSignal

PAYMENT = Contract(
    topic="payments", struct=Payment, id_field="payment_id", key_field="merchant_id",
    event_time_field="event_time", arrival_time_field="arrival_time",
    non_payload=("arrival_time",))

RISK_SIGNAL = Contract(
    topic="risk_signals", struct=RiskSignal, id_field="signal_id", key_field="merchant_id",
    event_time_field="event_time", arrival_time_field="arrival_time",
    non_payload=("arrival_time",))

# Reference data: the version's publication (arrival) is its event time, so a version that takes
# effect in the future is not mistaken for a producer clock fault; the business times are
# effective_from / effective_to. The topic adds no watermark delay.
MERCHANT_CATEGORY = Contract(
    topic="merchant_categories", struct=MerchantCategory, id_field="version_id",
    key_field="merchant_id", event_time_field="arrival_time", arrival_time_field="arrival_time",
    revision_field=None, non_payload=("arrival_time",))

RECEIPT = Contract(
    topic="receipts", struct=Receipt, id_field="receipt_id", key_field="merchant_id",
    event_time_field="occurred_at", arrival_time_field="uploaded_at", revision_field=None,
    non_payload=("uploaded_at",))

CONTRACTS: dict[str, Contract] = {c.topic: c for c in (PAYMENT, RISK_SIGNAL, MERCHANT_CATEGORY,
                                                       RECEIPT)}


def register(contract: Contract) -> Contract:
    """Register a further topic contract."""
    CONTRACTS[contract.topic] = contract
    return contract
