"""The current view names its fact by id instead of holding a copy of the payload.

Every current view row held a second copy of its fact's payload text, written again by every
batch that changed the row (a fifth of a join store's size). A row now carries `fact_id`, the
id of the facts row it is taken from, and readers join the facts for the payload. The upgrade
fills `fact_id` from the fact with the row's (pipeline, fact_key), which every view row has:
the view was only ever written from stored facts. A row without one means the store was
changed by hand; the upgrade then stops with the rows named and the store is left as it was
(the migration runs in one transaction).

The payload column is dropped before the fill, so on PostgreSQL the fill writes the rows
without it and autovacuum can reuse the old rows' space. On SQLite each of the two steps
rebuilds the table (SQLite cannot change a column's nullability in place).

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa

from streaming.store.versions import StoreVersionError
from alembic import op

revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None

# How many rows without a fact the error names.
_NAMED = 5


def _before_batch_seq() -> dict:
    """Where a new column goes: before batch_seq where SQLite rebuilds the table anyway (the
    metadata's order); PostgreSQL adds a column at the end."""
    return {"insert_before": "batch_seq"} if op.get_bind().dialect.name == "sqlite" else {}


def upgrade() -> None:
    with op.batch_alter_table('current_view') as batch:
        # The drop first: it is what makes SQLite rebuild the table, which placing the new
        # column requires.
        batch.drop_column('payload')
        batch.add_column(sa.Column('fact_id', sa.Integer(), nullable=True),
                         **_before_batch_seq())
    bind = op.get_bind()
    bind.execute(sa.text(
        "UPDATE current_view SET fact_id = (SELECT f.id FROM facts f "
        "WHERE f.pipeline = current_view.pipeline AND f.fact_key = current_view.fact_key)"))
    orphans = bind.execute(sa.text(
        "SELECT pipeline, kind, logical_key, fact_key FROM current_view WHERE fact_id IS NULL "
        f"ORDER BY pipeline, kind, logical_key LIMIT {_NAMED + 1}")).all()
    if orphans:
        named = "; ".join("/".join(map(str, r)) for r in orphans[:_NAMED])
        raise StoreVersionError(
            f"cannot upgrade the store to revision 0004: current view rows whose fact_key is not in the facts (pipeline/kind/logical_key/"
            f"fact_key): {named}{' and more' if len(orphans) > _NAMED else ''}; the store "
            f"was not changed")
    with op.batch_alter_table('current_view') as batch:
        batch.alter_column('fact_id', existing_type=sa.Integer(), nullable=False)


def downgrade() -> None:
    with op.batch_alter_table('current_view') as batch:
        batch.add_column(sa.Column('payload', sa.Text(), nullable=True))
    op.get_bind().execute(sa.text(
        "UPDATE current_view SET payload = (SELECT f.payload FROM facts f "
        "WHERE f.id = current_view.fact_id)"))
    with op.batch_alter_table('current_view') as batch:
        batch.drop_column('fact_id')
        batch.alter_column('payload', existing_type=sa.Text(), nullable=False)
