"""The first versioned store schema.

Facts, current view, sink exceptions, archive, quarantine, replay queue, journal, checkpoints,
metrics, runs, generations with their pointers and plans, ledger repair requests and receipt
model pins.

Revision ID: 0001
Revises: (none)
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('archive',
    sa.Column('pipeline', sa.String(length=32), nullable=False),
    sa.Column('topic', sa.String(length=64), nullable=False),
    sa.Column('partition', sa.Integer(), nullable=False),
    sa.Column('offset', sa.BigInteger(), nullable=False),
    sa.Column('event_id', sa.String(length=200), nullable=False),
    sa.Column('revision', sa.Integer(), nullable=False),
    sa.Column('key', sa.String(length=200), nullable=False),
    sa.Column('event_us', sa.BigInteger(), nullable=False),
    sa.Column('arrival_us', sa.BigInteger(), nullable=False),
    sa.Column('payload', sa.Text(), nullable=False),
    sa.Column('payload_hash', sa.String(length=64), nullable=False),
    sa.Column('disposition', sa.String(length=32), nullable=False),
    sa.Column('batch_seq', sa.BigInteger(), nullable=True),
    sa.PrimaryKeyConstraint('pipeline', 'topic', 'partition', 'offset')
    )
    op.create_index('ix_archive_key_time', 'archive', ['pipeline', 'topic', 'key', 'event_us'], unique=False)

    op.create_table('checkpoints',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('pipeline', sa.String(length=32), nullable=False),
    sa.Column('journal_seq', sa.BigInteger(), nullable=False),
    sa.Column('serializer', sa.String(length=64), nullable=False),
    sa.Column('state_schema', sa.String(length=64), nullable=False),
    sa.Column('meta', sa.Text(), nullable=False),
    sa.Column('state', sa.LargeBinary(), nullable=False),
    sa.Column('size_bytes', sa.BigInteger(), nullable=False),
    sa.Column('duration_ms', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.String(length=40), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    op.create_index('ix_ckpt_pipeline', 'checkpoints', ['pipeline', 'id'], unique=False)

    op.create_table('current_view',
    sa.Column('pipeline', sa.String(length=32), nullable=False),
    sa.Column('kind', sa.String(length=32), nullable=False),
    sa.Column('logical_key', sa.String(length=400), nullable=False),
    sa.Column('fact_key', sa.String(length=400), nullable=False),
    sa.Column('status', sa.String(length=32), nullable=False),
    sa.Column('payload', sa.Text(), nullable=False),
    sa.Column('batch_seq', sa.BigInteger(), nullable=True),
    sa.PrimaryKeyConstraint('pipeline', 'kind', 'logical_key')
    )
    op.create_table('facts',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('pipeline', sa.String(length=32), nullable=False),
    sa.Column('fact_key', sa.String(length=400), nullable=False),
    sa.Column('kind', sa.String(length=32), nullable=False),
    sa.Column('logical_key', sa.String(length=400), nullable=False),
    sa.Column('status', sa.String(length=32), nullable=False),
    sa.Column('payload_hash', sa.String(length=64), nullable=False),
    sa.Column('payload', sa.Text(), nullable=False),
    sa.Column('predecessor_key', sa.String(length=400), nullable=True),
    sa.Column('batch_seq', sa.BigInteger(), nullable=True),
    sa.Column('generation_id', sa.String(length=64), nullable=True),
    sa.Column('created_at', sa.String(length=40), nullable=False),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('pipeline', 'fact_key', name='uq_facts_key')
    )
    op.create_index('ix_facts_logical', 'facts', ['pipeline', 'kind', 'logical_key'], unique=False)

    op.create_table('generation_plans',
    sa.Column('generation_id', sa.String(length=64), nullable=False),
    sa.Column('pieces', sa.Text(), nullable=False),
    sa.Column('based_on', sa.Text(), nullable=False),
    sa.PrimaryKeyConstraint('generation_id')
    )
    op.create_table('generation_pointers',
    sa.Column('pipeline', sa.String(length=32), nullable=False),
    sa.Column('interval_key', sa.String(length=200), nullable=False),
    sa.Column('interval_start_us', sa.BigInteger(), nullable=False),
    sa.Column('interval_end_us', sa.BigInteger(), nullable=False),
    sa.Column('generation_id', sa.String(length=64), nullable=False),
    sa.Column('version', sa.Integer(), nullable=False),
    sa.PrimaryKeyConstraint('pipeline', 'interval_key', 'interval_start_us', 'interval_end_us')
    )
    op.create_table('generations',
    sa.Column('generation_id', sa.String(length=64), nullable=False),
    sa.Column('pipeline', sa.String(length=32), nullable=False),
    sa.Column('interval_key', sa.String(length=200), nullable=False),
    sa.Column('interval_start_us', sa.BigInteger(), nullable=False),
    sa.Column('interval_end_us', sa.BigInteger(), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('reason', sa.Text(), nullable=True),
    sa.Column('based_on', sa.String(length=64), nullable=True),
    sa.Column('entry_ids', sa.Text(), nullable=False),
    sa.Column('rule_version', sa.String(length=64), nullable=False),
    sa.Column('created_at', sa.String(length=40), nullable=False),
    sa.Column('validated_at', sa.String(length=40), nullable=True),
    sa.Column('published_at', sa.String(length=40), nullable=True),
    sa.PrimaryKeyConstraint('generation_id')
    )
    op.create_table('journal',
    sa.Column('pipeline', sa.String(length=32), nullable=False),
    sa.Column('seq', sa.BigInteger(), nullable=False),
    sa.Column('ranges', sa.Text(), nullable=False),
    sa.Column('order_runs', sa.Text(), nullable=False),
    sa.Column('idleness', sa.Text(), nullable=False),
    sa.Column('records', sa.Integer(), nullable=False),
    sa.Column('clock_us', sa.BigInteger(), nullable=False),
    sa.Column('end_of_stream', sa.Boolean(), nullable=False),
    sa.Column('committed_at', sa.String(length=40), nullable=False),
    sa.PrimaryKeyConstraint('pipeline', 'seq')
    )
    op.create_table('ledger_repair_requests',
    sa.Column('request_id', sa.String(length=300), nullable=False),
    sa.Column('kind', sa.String(length=16), nullable=False),
    sa.Column('account_id', sa.String(length=200), nullable=False),
    sa.Column('event_hour', sa.String(length=20), nullable=False),
    sa.Column('hour_us', sa.BigInteger(), nullable=False),
    sa.Column('queue_date', sa.String(length=10), nullable=False),
    sa.Column('topic', sa.String(length=64), nullable=False),
    sa.Column('partition', sa.Integer(), nullable=False),
    sa.Column('offset', sa.BigInteger(), nullable=False),
    sa.Column('subject_id', sa.String(length=200), nullable=False),
    sa.Column('subject_revision', sa.Integer(), nullable=False),
    sa.Column('subject_hash', sa.String(length=64), nullable=False),
    sa.Column('reason', sa.String(length=120), nullable=False),
    sa.Column('watermark_us', sa.BigInteger(), nullable=False),
    sa.Column('signature', sa.String(length=64), nullable=True),
    sa.Column('key_source', sa.String(length=16), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('status_reason', sa.Text(), nullable=True),
    sa.Column('corrected_fact_key', sa.String(length=400), nullable=True),
    sa.Column('repaired_at', sa.String(length=40), nullable=True),
    sa.PrimaryKeyConstraint('request_id')
    )
    op.create_index('ix_ledger_repair_source', 'ledger_repair_requests', ['topic', 'partition', 'offset'], unique=False)
    op.create_index('ix_ledger_repair_status', 'ledger_repair_requests', ['status', 'queue_date'], unique=False)

    op.create_table('metrics',
    sa.Column('pipeline', sa.String(length=32), nullable=False),
    sa.Column('seq', sa.BigInteger(), nullable=False),
    sa.Column('clock_us', sa.BigInteger(), nullable=False),
    sa.Column('snapshot', sa.Text(), nullable=False),
    sa.PrimaryKeyConstraint('pipeline', 'seq')
    )
    op.create_table('quarantine',
    sa.Column('pipeline', sa.String(length=32), nullable=False),
    sa.Column('topic', sa.String(length=64), nullable=False),
    sa.Column('partition', sa.Integer(), nullable=False),
    sa.Column('offset', sa.BigInteger(), nullable=False),
    sa.Column('reason', sa.String(length=64), nullable=False),
    sa.Column('detail', sa.Text(), nullable=False),
    sa.Column('raw', sa.Text(), nullable=False),
    sa.Column('batch_seq', sa.BigInteger(), nullable=True),
    sa.PrimaryKeyConstraint('pipeline', 'topic', 'partition', 'offset')
    )
    op.create_table('receipt_model_pins',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('pipeline', sa.String(length=32), nullable=False),
    sa.Column('model_revision', sa.String(length=64), nullable=False),
    sa.Column('artifact', sa.Text(), nullable=False),
    sa.Column('reason', sa.String(length=200), nullable=False),
    sa.Column('previous_revision', sa.String(length=64), nullable=True),
    sa.Column('created_at', sa.String(length=40), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    op.create_index('ix_receipt_pins', 'receipt_model_pins', ['pipeline', 'id'], unique=False)

    op.create_table('replay_queue',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('pipeline', sa.String(length=32), nullable=False),
    sa.Column('queue_date', sa.String(length=10), nullable=False),
    sa.Column('topic', sa.String(length=64), nullable=False),
    sa.Column('partition', sa.Integer(), nullable=False),
    sa.Column('offset', sa.BigInteger(), nullable=False),
    sa.Column('event_id', sa.String(length=200), nullable=False),
    sa.Column('revision', sa.Integer(), nullable=False),
    sa.Column('key', sa.String(length=200), nullable=False),
    sa.Column('event_us', sa.BigInteger(), nullable=False),
    sa.Column('reason', sa.String(length=120), nullable=False),
    sa.Column('watermark_at_arrival_us', sa.BigInteger(), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('status_reason', sa.Text(), nullable=True),
    sa.Column('detail', sa.Text(), nullable=False),
    sa.Column('generation_id', sa.String(length=64), nullable=True),
    sa.Column('batch_seq', sa.BigInteger(), nullable=True),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('pipeline', 'topic', 'partition', 'offset', name='uq_queue_pos')
    )
    op.create_index('ix_queue_status', 'replay_queue', ['pipeline', 'status', 'queue_date'], unique=False)

    op.create_table('runs',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('pipeline', sa.String(length=32), nullable=False),
    sa.Column('started_at', sa.String(length=40), nullable=False),
    sa.Column('finished_at', sa.String(length=40), nullable=True),
    sa.Column('settings', sa.Text(), nullable=False),
    sa.Column('result', sa.Text(), nullable=True),
    sa.PrimaryKeyConstraint('id')
    )
    op.create_table('sink_exceptions',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('pipeline', sa.String(length=32), nullable=False),
    sa.Column('fact_key', sa.String(length=400), nullable=False),
    sa.Column('existing_hash', sa.String(length=64), nullable=False),
    sa.Column('rejected_hash', sa.String(length=64), nullable=False),
    sa.Column('rejected_payload', sa.Text(), nullable=False),
    sa.Column('reason', sa.String(length=200), nullable=False),
    sa.Column('batch_seq', sa.BigInteger(), nullable=True),
    sa.Column('created_at', sa.String(length=40), nullable=False),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('pipeline', 'fact_key', 'rejected_hash', name='uq_sink_exc')
    )


def downgrade() -> None:
    op.drop_table('sink_exceptions')
    op.drop_table('runs')
    op.drop_index('ix_queue_status', table_name='replay_queue')
    op.drop_table('replay_queue')
    op.drop_index('ix_receipt_pins', table_name='receipt_model_pins')
    op.drop_table('receipt_model_pins')
    op.drop_table('quarantine')
    op.drop_table('metrics')
    op.drop_index('ix_ledger_repair_status', table_name='ledger_repair_requests')
    op.drop_index('ix_ledger_repair_source', table_name='ledger_repair_requests')
    op.drop_table('ledger_repair_requests')
    op.drop_table('journal')
    op.drop_table('generations')
    op.drop_table('generation_pointers')
    op.drop_table('generation_plans')
    op.drop_index('ix_facts_logical', table_name='facts')
    op.drop_table('facts')
    op.drop_table('current_view')
    op.drop_index('ix_ckpt_pipeline', table_name='checkpoints')
    op.drop_table('checkpoints')
    op.drop_index('ix_archive_key_time', table_name='archive')
    op.drop_table('archive')
