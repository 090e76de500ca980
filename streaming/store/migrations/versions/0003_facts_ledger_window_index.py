"""Facts by logical key only where they are read: the ledger repair's window facts.

The full index on (pipeline, kind, logical_key) made every join fact an insert at a random
page of that index (logical keys are payment|signal|rule), about a third of the facts insert's
cost; only the ledger repair reads facts by logical key, so a partial index over the ledger's
window facts replaces it.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None

_LEDGER_WINDOWS = sa.text("pipeline = 'ledger' AND kind = 'window'")


def _has_index(name: str) -> bool:
    return any(ix["name"] == name for ix in sa.inspect(op.get_bind()).get_indexes("facts"))


def upgrade() -> None:
    if _has_index('ix_facts_logical'):
        op.drop_index('ix_facts_logical', table_name='facts')
    if not _has_index('ix_facts_ledger_window'):
        op.create_index('ix_facts_ledger_window', 'facts', ['logical_key', 'id'], unique=False,
                        sqlite_where=_LEDGER_WINDOWS, postgresql_where=_LEDGER_WINDOWS)


def downgrade() -> None:
    op.drop_index('ix_facts_ledger_window', table_name='facts')
    op.create_index('ix_facts_logical', 'facts', ['pipeline', 'kind', 'logical_key'],
                    unique=False)
