"""Advisory-lock keys of the store on PostgreSQL: one namespace for every riskstream lock, and
within it the key of the schema's migrations (`versions.py`); the worker leases (`lease.py`)
take their keys from the same namespace. Two first starts on an empty database would otherwise
race in the catalog (one of them fails with a unique violation on pg_type)."""

from __future__ import annotations

# The first key of every riskstream advisory lock (a namespace within the database).
LOCK_NAMESPACE = 0x52534C4B  # "RSLK", an int4
SCHEMA_LOCK = 1
