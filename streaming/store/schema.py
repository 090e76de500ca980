"""Tables of the operational store (SQLAlchemy Core). One schema for SQLite and PostgreSQL."""

from __future__ import annotations

from sqlalchemy import (BigInteger, Boolean, Column, Index, Integer, LargeBinary, MetaData,
                        String, Table, Text, UniqueConstraint, text)

metadata = MetaData()

# Append-only facts. The surrogate id is insertion-ordered (the clustering key); uniqueness of
# (pipeline, fact_key) is enforced by the database, and fact keys lead with event time where the
# pipeline has one so the unique index also grows at its right edge.
facts = Table(
    "facts", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("pipeline", String(32), nullable=False),
    Column("fact_key", String(400), nullable=False),
    Column("kind", String(32), nullable=False),
    Column("logical_key", String(400), nullable=False),
    Column("status", String(32), nullable=False),
    Column("payload_hash", String(64), nullable=False),
    Column("payload", Text, nullable=False),
    Column("predecessor_key", String(400)),
    Column("batch_seq", BigInteger),
    Column("generation_id", String(64)),
    Column("created_at", String(40), nullable=False),
    UniqueConstraint("pipeline", "fact_key", name="uq_facts_key"),
)
# Facts by logical key: only the ledger repair reads them (its window facts, newest first), so
# the index covers those rows only. A full index keyed by logical key made every join fact an
# insert at a random page (keys are payment|signal|rule): a third of the facts insert's cost.
_LEDGER_WINDOWS = text("pipeline = 'ledger' AND kind = 'window'")
Index("ix_facts_ledger_window", facts.c.logical_key, facts.c.id,
      sqlite_where=_LEDGER_WINDOWS, postgresql_where=_LEDGER_WINDOWS)

# One current row per logical key, derived from the facts in the same transaction. The row
# names its fact by id (`fact_id`, the facts row's surrogate key) instead of holding a second
# copy of the payload; readers take the payload from that fact (`ops.current_rows`). The
# columns readers filter on (status, batch_seq) and the fact key stay here, equal to the
# fact's. No foreign key: facts are never deleted, and PostgreSQL would check every view write.
current_view = Table(
    "current_view", metadata,
    Column("pipeline", String(32), primary_key=True),
    Column("kind", String(32), primary_key=True),
    Column("logical_key", String(400), primary_key=True),
    Column("fact_key", String(400), nullable=False),
    Column("status", String(32), nullable=False),
    Column("fact_id", Integer, nullable=False),
    Column("batch_seq", BigInteger),
)

sink_exceptions = Table(
    "sink_exceptions", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("pipeline", String(32), nullable=False),
    Column("fact_key", String(400), nullable=False),
    Column("existing_hash", String(64), nullable=False),
    Column("rejected_hash", String(64), nullable=False),
    Column("rejected_payload", Text, nullable=False),
    Column("reason", String(200), nullable=False),
    Column("batch_seq", BigInteger),
    Column("created_at", String(40), nullable=False),
    UniqueConstraint("pipeline", "fact_key", "rejected_hash", name="uq_sink_exc"),
)

# Every valid record read, with its disposition (accepted | duplicate | stale | routed_to_repair).
archive = Table(
    "archive", metadata,
    Column("pipeline", String(32), primary_key=True),
    Column("topic", String(64), primary_key=True),
    Column("partition", Integer, primary_key=True),
    Column("offset", BigInteger, primary_key=True),
    Column("event_id", String(200), nullable=False),
    Column("revision", Integer, nullable=False),
    Column("key", String(200), nullable=False),
    Column("event_us", BigInteger, nullable=False),
    Column("arrival_us", BigInteger, nullable=False),
    Column("payload", Text, nullable=False),
    Column("payload_hash", String(64), nullable=False),
    Column("disposition", String(32), nullable=False),
    Column("batch_seq", BigInteger),
)
Index("ix_archive_key_time", archive.c.pipeline, archive.c.topic, archive.c.key, archive.c.event_us)

quarantine = Table(
    "quarantine", metadata,
    Column("pipeline", String(32), primary_key=True),
    Column("topic", String(64), primary_key=True),
    Column("partition", Integer, primary_key=True),
    Column("offset", BigInteger, primary_key=True),
    Column("reason", String(64), nullable=False),
    Column("detail", Text, nullable=False),
    Column("raw", Text, nullable=False),
    Column("batch_seq", BigInteger),
)

replay_queue = Table(
    "replay_queue", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("pipeline", String(32), nullable=False),
    Column("queue_date", String(10), nullable=False),
    Column("topic", String(64), nullable=False),
    Column("partition", Integer, nullable=False),
    Column("offset", BigInteger, nullable=False),
    Column("event_id", String(200), nullable=False),
    Column("revision", Integer, nullable=False),
    Column("key", String(200), nullable=False),
    Column("event_us", BigInteger, nullable=False),
    Column("reason", String(120), nullable=False),
    Column("watermark_at_arrival_us", BigInteger, nullable=False),
    Column("status", String(16), nullable=False),  # pending | held | processed
    Column("status_reason", Text),
    Column("detail", Text, nullable=False),
    Column("generation_id", String(64)),
    Column("batch_seq", BigInteger),
    UniqueConstraint("pipeline", "topic", "partition", "offset", name="uq_queue_pos"),
)
Index("ix_queue_status", replay_queue.c.pipeline, replay_queue.c.status, replay_queue.c.queue_date)

# What each committed batch consumed, in consumption order, with its idleness decisions.
journal = Table(
    "journal", metadata,
    Column("pipeline", String(32), primary_key=True),
    Column("seq", BigInteger, primary_key=True),
    Column("ranges", Text, nullable=False),
    Column("order_runs", Text, nullable=False),
    Column("idleness", Text, nullable=False),
    Column("records", Integer, nullable=False),
    Column("clock_us", BigInteger, nullable=False),
    Column("end_of_stream", Boolean, nullable=False),
    Column("committed_at", String(40), nullable=False),
)

checkpoints = Table(
    "checkpoints", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("pipeline", String(32), nullable=False),
    Column("journal_seq", BigInteger, nullable=False),
    Column("serializer", String(64), nullable=False),
    Column("state_schema", String(64), nullable=False),
    Column("meta", Text, nullable=False),
    Column("state", LargeBinary, nullable=False),
    Column("size_bytes", BigInteger, nullable=False),
    Column("duration_ms", Integer, nullable=False),
    Column("created_at", String(40), nullable=False),
)
Index("ix_ckpt_pipeline", checkpoints.c.pipeline, checkpoints.c.id)

# A trace over time: one metrics snapshot per committed batch.
metrics = Table(
    "metrics", metadata,
    Column("pipeline", String(32), primary_key=True),
    Column("seq", BigInteger, primary_key=True),
    Column("clock_us", BigInteger, nullable=False),
    Column("snapshot", Text, nullable=False),
)

runs = Table(
    "runs", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("pipeline", String(32), nullable=False),
    Column("started_at", String(40), nullable=False),
    Column("finished_at", String(40)),
    Column("settings", Text, nullable=False),
    Column("result", Text),
)

# Generations: validated rebuilds of (key, payment-time interval) published atomically.
generations = Table(
    "generations", metadata,
    Column("generation_id", String(64), primary_key=True),
    Column("pipeline", String(32), nullable=False),
    Column("interval_key", String(200), nullable=False),
    Column("interval_start_us", BigInteger, nullable=False),
    Column("interval_end_us", BigInteger, nullable=False),
    Column("status", String(16), nullable=False),  # candidate|validated|published|held|superseded
    Column("reason", Text),
    Column("based_on", String(64)),  # the generation current when the diff was built
    Column("entry_ids", Text, nullable=False),
    Column("rule_version", String(64), nullable=False),
    Column("created_at", String(40), nullable=False),
    Column("validated_at", String(40)),
    Column("published_at", String(40)),
)

# The current generation of each published interval; compare-and-set on `version`.
generation_pointers = Table(
    "generation_pointers", metadata,
    Column("pipeline", String(32), primary_key=True),
    Column("interval_key", String(200), primary_key=True),
    Column("interval_start_us", BigInteger, primary_key=True),
    Column("interval_end_us", BigInteger, primary_key=True),
    Column("generation_id", String(64), nullable=False),
    Column("version", Integer, nullable=False),
)
