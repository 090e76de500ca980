"""The join's outcome fact keys lead with the payment's event time.

A live outcome's key was `outcome|<payment>|<revision>|<n>`: with payment IDs that are not
ordered in time, each outcome went into the facts' unique index at a random page, and a batch
dirtied thousands of its pages (docs/performance.md, twenty-third round). The key is now
`outcome|<payment time, integer µs>|<payment>|<revision>|<n>`, as the pair keys already lead
with it. Fact keys are the sink's identity for exactly-once writes: a replay over a store
holding the old keys would write every outcome again under its new key. So the upgrade
rewrites each old key where it appears: the fact's own key, the predecessor key of a fact
that corrects it (a generation's corrected final), the current view row that names it and a
sink exception recorded against it. The time comes from the fact's payload (`payment_time`),
the one the operator put in the key's place.

Only keys of that shape change: four parts, the first `outcome`, in the join pipeline, kind
outcome. A generation's corrected final (`outcome|<payment>|<revision>|corrected|<gen>`) keeps
its key. A fact of that shape whose payload has no readable `payment_time` stops the upgrade
with the facts named, and the store is left as it was (the migration runs in one transaction).

The facts are rewritten in id order a chunk at a time (memory stays bounded however many
outcomes the store holds); the other tables are rewritten from the facts' ids.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import orjson
import sqlalchemy as sa

from streaming.keys import compose, split
from streaming.store.versions import StoreVersionError
from streaming.timeutil import parse_utc_us
from alembic import op

revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None

_CHUNK = 10_000
_NAMED = 5  # how many facts an error names
_PIPELINE = "join"
_KIND = "outcome"
_PREFIX = "outcome|%"  # LIKE pattern of the keys either shape of an outcome key matches


def old_to_new(key: str, payload: str) -> str | None:
    """The new key of a fact with the old key shape, from its payload; None for any other
    key. ValueError when the payload has no payment time to lead with."""
    parts = split(key)
    if len(parts) != 4 or parts[0] != _KIND:
        return None
    try:
        us = parse_utc_us(orjson.loads(payload)["payment_time"])
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{key}: no payment_time in its payload ({exc})") from None
    return compose(_KIND, us, *parts[1:])


def new_to_old(key: str, payload: str) -> str | None:
    """The key a fact had before this revision (for the downgrade); None for a key this
    revision did not write."""
    parts = split(key)
    # A corrected final (`outcome|<payment>|<revision>|corrected|<gen>`) has five parts too.
    if (len(parts) != 5 or parts[0] != _KIND or not parts[1].lstrip("-").isdigit()
            or not parts[3].isdigit() or not parts[4].isdigit()):
        return None
    return compose(_KIND, *parts[2:])


def _rekey(rename: Callable[[str, str], str | None]) -> None:
    bind = op.get_bind()
    # Predecessor keys first, while the facts they name still have the keys they hold.
    preds = bind.execute(sa.text(
        "SELECT c.id, p.fact_key, p.payload FROM facts c JOIN facts p "
        "ON p.pipeline = c.pipeline AND p.fact_key = c.predecessor_key "
        "WHERE c.pipeline = :p AND c.predecessor_key LIKE :prefix"),
        {"p": _PIPELINE, "prefix": _PREFIX}).all()
    # Sink exceptions name a fact by key too (the existing fact a rejected write collided
    # with).
    excs = bind.execute(sa.text(
        "SELECT x.id, f.fact_key, f.payload FROM sink_exceptions x JOIN facts f "
        "ON f.pipeline = x.pipeline AND f.fact_key = x.fact_key "
        "WHERE x.pipeline = :p AND x.fact_key LIKE :prefix"),
        {"p": _PIPELINE, "prefix": _PREFIX}).all()
    bad: list[str] = []

    def renamed(rows: Sequence[sa.Row]) -> list[dict]:
        out = []
        for row_id, key, payload in rows:
            try:
                new = rename(str(key), str(payload))
            except ValueError as exc:
                bad.append(str(exc))
                continue
            if new is not None:
                out.append({"id": row_id, "k": new})
        return out

    pred_updates, exc_updates = renamed(preds), renamed(excs)
    last = 0
    while True:
        rows = bind.execute(sa.text(
            "SELECT id, fact_key, payload FROM facts WHERE pipeline = :p AND kind = :k "
            "AND fact_key LIKE :prefix AND id > :last ORDER BY id LIMIT :n"),
            {"p": _PIPELINE, "k": _KIND, "prefix": _PREFIX, "last": last, "n": _CHUNK}).all()
        if not rows:
            break
        last = rows[-1][0]
        updates = renamed(rows)
        # Written as they are found: the keys of one shape never meet the other's (four parts
        # against five), so no update collides with a key not yet rewritten. A failure below
        # rolls all of it back.
        if updates:
            bind.execute(sa.text("UPDATE facts SET fact_key = :k WHERE id = :id"), updates)
    if bad:
        raise StoreVersionError(
            f"cannot upgrade the store to revision 0005: outcome facts whose payload names no "
            f"payment time: {'; '.join(bad[:_NAMED])}{' and more' if len(bad) > _NAMED else ''}"
            f"; the store was not changed")
    if pred_updates:
        bind.execute(sa.text("UPDATE facts SET predecessor_key = :k WHERE id = :id"),
                     pred_updates)
    if exc_updates:
        bind.execute(sa.text("UPDATE sink_exceptions SET fact_key = :k WHERE id = :id"),
                     exc_updates)
    # A view row carries its fact's key beside its id (ops.current_with_payload).
    bind.execute(sa.text(
        "UPDATE current_view SET fact_key = (SELECT f.fact_key FROM facts f "
        "WHERE f.id = current_view.fact_id) WHERE pipeline = :p AND kind = :k"),
        {"p": _PIPELINE, "k": _KIND})


def upgrade() -> None:
    _rekey(old_to_new)


def downgrade() -> None:
    _rekey(new_to_old)
