"""Schema creation, serialized across processes on PostgreSQL.

`create_schema` takes a transaction-scoped advisory lock before `CREATE TABLE ... IF NOT
EXISTS`: two first starts on an empty database otherwise race in the catalog (one of them
fails with a unique violation on pg_type)."""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.engine import Engine

from . import schema as S

# The first key of every riskstream advisory lock (a namespace within the database).
LOCK_NAMESPACE = 0x52534C4B  # "RSLK", an int4
SCHEMA_LOCK = 1


def create_schema(engine: Engine) -> None:
    """Create missing tables; serialized across processes on PostgreSQL."""
    if engine.dialect.name == "postgresql":
        with engine.begin() as conn:
            conn.execute(text("SELECT pg_advisory_xact_lock(CAST(:ns AS integer), "
                              "CAST(:id AS integer))"), {"ns": LOCK_NAMESPACE, "id": SCHEMA_LOCK})
            S.metadata.create_all(conn)
        return
    S.metadata.create_all(engine)
