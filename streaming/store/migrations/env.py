"""Alembic environment of the operational store: runs on the connection the caller passes in
`config.attributes["connection"]` (already inside a transaction that holds the store's
migration lock), against the store's SQLAlchemy metadata, on SQLite and PostgreSQL alike."""

from __future__ import annotations

from alembic import context

from streaming.store import tables  # noqa: F401  (registers every table on the metadata)
from streaming.store.schema import metadata
from streaming.store.versions import VERSION_TABLE

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("the store's migrations run through streaming.store.versions "
                       "(`riskstream store upgrade`), which passes the connection")
context.configure(connection=connection, target_metadata=metadata,
                  version_table=VERSION_TABLE, render_as_batch=True, compare_type=True,
                  transactional_ddl=True)
with context.begin_transaction():
    context.run_migrations()
