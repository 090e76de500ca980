"""Worker leases, gate decisions and ledger repair attempts.

Follow mode's one-live-worker-per-assignment leases, the fail-closed gates' recorded decisions
and the history of ledger repair attempts. A store created before versioning by a release that
already had these tables is adopted as 0001, so each table is created only where it is missing.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def _missing(name: str) -> bool:
    return not sa.inspect(op.get_bind()).has_table(name)


def upgrade() -> None:
    if _missing('gate_decisions'):
        op.create_table('gate_decisions',
        sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
        sa.Column('pipeline', sa.String(length=32), nullable=False),
        sa.Column('blocker_id', sa.String(length=300), nullable=False),
        sa.Column('decision', sa.String(length=32), nullable=False),
        sa.Column('decided_by', sa.String(length=200), nullable=False),
        sa.Column('reason', sa.Text(), nullable=False),
        sa.Column('decided_at', sa.String(length=40), nullable=False),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('pipeline', 'blocker_id', name='uq_gate_decision')
        )
    if _missing('ledger_repair_attempts'):
        op.create_table('ledger_repair_attempts',
        sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
        sa.Column('request_id', sa.String(length=300), nullable=False),
        sa.Column('attempted_at', sa.String(length=40), nullable=False),
        sa.Column('key_source', sa.String(length=16), nullable=False),
        sa.Column('retry', sa.Integer(), nullable=False),
        sa.Column('result', sa.String(length=16), nullable=False),
        sa.Column('reason', sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint('id')
        )
        op.create_index('ix_ledger_repair_attempts', 'ledger_repair_attempts',
                        ['request_id', 'id'], unique=False)
    if _missing('worker_leases'):
        op.create_table('worker_leases',
        sa.Column('lease_key', sa.String(length=64), nullable=False),
        sa.Column('holder', sa.String(length=200), nullable=False),
        sa.Column('pid', sa.BigInteger(), nullable=False),
        sa.Column('acquired_at', sa.String(length=40), nullable=False),
        sa.Column('released_at', sa.String(length=40), nullable=True),
        sa.PrimaryKeyConstraint('lease_key')
        )


def downgrade() -> None:
    op.drop_table('worker_leases')
    op.drop_index('ix_ledger_repair_attempts', table_name='ledger_repair_attempts')
    op.drop_table('ledger_repair_attempts')
    op.drop_table('gate_decisions')
