"""Store helpers for tests: open a store for one piece of work (and always close it), and a
second writer that rewrites one committed fact under its key with other content, which the
sink rejects and records as an open sink exception."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from streaming.operators.base import Fact
from streaming.store.ops import SinkResult, Store, fact_rows, write_facts

T = TypeVar("T")


def with_store(url: str, fn: Callable[[Store], T]) -> T:
    store = Store(url)
    try:
        return fn(store)
    finally:
        store.dispose()


def write_conflicting_copy(store: Store, pipeline: str, kind: str | None = None) -> SinkResult:
    """Write the first committed fact of `pipeline` (of `kind`, when given) again with another
    payload. The sink's answer says how many were rejected (one) and under which key."""
    f = store.facts(pipeline, kind)[0]
    copy = Fact.make(f["fact_key"], f["kind"], f["logical_key"], f["status"],
                     {"rewritten": True})
    with store.engine.begin() as conn:
        return write_facts(conn, pipeline, fact_rows([copy]), None)
