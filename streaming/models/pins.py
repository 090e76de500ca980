"""The store's record of which model revision the receipt scorer is pinned to."""

from __future__ import annotations

import orjson
from sqlalchemy import select

from ..store.ops import Store, now_iso
from ..store.tables_receipts import receipt_model_pins as P
from .registry import Model


def latest_pin(store: Store, pipeline: str = "receipts") -> tuple[int, Model] | None:
    """(pin_seq, model) of the newest pin, or None when the scorer never pinned."""
    rows = store.rows(select(P).where(P.c.pipeline == pipeline).order_by(P.c.id.desc()).limit(1))
    if not rows:
        return None
    r = rows[0]
    return r["id"], Model.from_artifact(orjson.loads(r["artifact"]),
                                        expect_revision=r["model_revision"])


def pin_history(store: Store, pipeline: str = "receipts") -> list[dict]:
    return store.rows(select(P.c.id, P.c.model_revision, P.c.reason, P.c.previous_revision,
                             P.c.created_at).where(P.c.pipeline == pipeline).order_by(P.c.id))


def pin_row(model: Model, reason: str, previous: str | None, pipeline: str = "receipts") -> dict:
    return {"pipeline": pipeline, "model_revision": model.revision,
            "artifact": orjson.dumps(model.artifact, option=orjson.OPT_SORT_KEYS).decode(),
            "reason": reason, "previous_revision": previous, "created_at": now_iso()}


def record_pin(store: Store, model: Model, reason: str, previous: str | None,
               pipeline: str = "receipts", conn=None) -> int:
    """Insert a pin row (in `conn`'s transaction when given) and return its sequence."""
    row = pin_row(model, reason, previous, pipeline)
    if conn is not None:
        pk = conn.execute(P.insert().values(**row)).inserted_primary_key
    else:
        with store.engine.begin() as c:
            pk = c.execute(P.insert().values(**row)).inserted_primary_key
    assert pk is not None  # an insert into a table with an autoincrement key
    return int(pk[0])
