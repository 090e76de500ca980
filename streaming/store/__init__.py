"""The operational store, the system of record: SQLite by default, PostgreSQL by URL, one
SQLAlchemy-Core code path."""

from .ops import Store, open_store  # noqa: F401
