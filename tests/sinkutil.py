"""A second writer for tests of what an open sink exception holds: it rewrites one committed
fact under its key with other content, which the sink rejects and records as an exception."""

from __future__ import annotations

from streaming.operators.base import Fact
from streaming.store.ops import SinkResult, Store, write_facts


def write_conflicting_copy(store: Store, pipeline: str, kind: str | None = None) -> SinkResult:
    """Write the first committed fact of `pipeline` (of `kind`, when given) again with another
    payload. The sink's answer says how many were rejected (one) and under which key."""
    f = store.facts(pipeline, kind)[0]
    copy = Fact.make(f["fact_key"], f["kind"], f["logical_key"], f["status"],
                     {"rewritten": True})
    with store.engine.begin() as conn:
        return write_facts(conn, pipeline, [copy], None)
