"""Worker leases: which process serves which assignment (`<pipeline>@I/N`), for operators to
read. The lock itself is a PostgreSQL advisory lock (or a file lock next to a SQLite store);
the row is its visible description, rewritten by each new holder."""

from sqlalchemy import BigInteger, Column, String, Table

from .schema import metadata

worker_leases = Table(
    "worker_leases", metadata,
    Column("lease_key", String(64), primary_key=True),
    Column("holder", String(200), nullable=False),  # host:pid
    Column("pid", BigInteger, nullable=False),
    Column("acquired_at", String(40), nullable=False),
    Column("released_at", String(40)),
)
