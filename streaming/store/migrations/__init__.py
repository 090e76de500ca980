"""Alembic migrations of the operational store (see `streaming/store/versions.py`)."""
