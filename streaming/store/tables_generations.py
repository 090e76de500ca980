"""Generation plans: the day pieces of a generation and the pointers it was built on (the
compare-and-set basis), beside the generation history row of `schema.generations`."""

from sqlalchemy import Column, String, Table, Text

from .schema import metadata

generation_plans = Table(
    "generation_plans", metadata,
    Column("generation_id", String(64), primary_key=True),
    Column("pieces", Text, nullable=False),  # [{merchant, start_us, end_us, ...}]
    # [{interval_key, start_us, end_us, generation_id, version}]
    Column("based_on", Text, nullable=False),
)
