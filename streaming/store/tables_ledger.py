"""Tables of the account-hour ledger: its signed repair requests (the ledger's dated queue for
payments beyond retention and late category changes for final windows)."""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, Index, Integer, String, Table, Text

from .schema import metadata

ledger_repair_requests = Table(
    "ledger_repair_requests", metadata,
    Column("request_id", String(300), primary_key=True),
    Column("kind", String(16), nullable=False),  # payment | category
    Column("account_id", String(200), nullable=False),
    Column("event_hour", String(20), nullable=False),
    Column("hour_us", BigInteger, nullable=False),
    Column("queue_date", String(10), nullable=False),
    Column("topic", String(64), nullable=False),
    Column("partition", Integer, nullable=False),
    Column("offset", BigInteger, nullable=False),
    Column("subject_id", String(200), nullable=False),
    Column("subject_revision", Integer, nullable=False),
    Column("subject_hash", String(64), nullable=False),
    Column("reason", String(120), nullable=False),
    Column("watermark_us", BigInteger, nullable=False),
    Column("signature", String(64)),  # hex HMAC-SHA256 over the canonical request body
    Column("key_source", String(16), nullable=False),  # env | dev
    Column("status", String(16), nullable=False),  # pending | held | repaired
    Column("status_reason", Text),
    Column("corrected_fact_key", String(400)),
    Column("repaired_at", String(40)),
)
Index("ix_ledger_repair_status", ledger_repair_requests.c.status,
      ledger_repair_requests.c.queue_date)
Index("ix_ledger_repair_source", ledger_repair_requests.c.topic,
      ledger_repair_requests.c.partition, ledger_repair_requests.c.offset)

# Every verification of a repair request (first run and each retry): who held or verified it
# with which key, and why. The request row keeps only its latest status.
ledger_repair_attempts = Table(
    "ledger_repair_attempts", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("request_id", String(300), nullable=False),
    Column("attempted_at", String(40), nullable=False),
    Column("key_source", String(16), nullable=False),  # the key of this run: env | dev
    Column("retry", Integer, nullable=False),  # 1 when the request was held before
    Column("result", String(16), nullable=False),  # verified | held
    Column("reason", Text),
)
Index("ix_ledger_repair_attempts", ledger_repair_attempts.c.request_id, ledger_repair_attempts.c.id)
