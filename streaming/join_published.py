"""The interval join's published view: generation pointers over day pieces, and the rows a reader
sees through them.

A piece is a merchant and an inclusive payment-time range within one day; `generation_pointers`
holds, per piece, the generation that is current there. The published view takes that
generation's rows inside each piece and the live current rows everywhere else, read in one
snapshot, so a reader sees the whole old or the whole new generation. The rebuild
(`join_rebuild`) and publication (`join_generations`) both build on this module."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from collections.abc import Iterable, Iterator

from sqlalchemy import select

from .store import schema as S
from .store.ops import Store, current_with_payload, loads
from .timeutil import parse_utc_us, us_to_iso

PIPELINE = "join"
GENERATION_COLUMNS = ["generation_id", "interval_start", "interval_end", "status", "reason"]


@dataclass(frozen=True)
class Piece:
    """One published unit: a merchant and an inclusive payment-time range within one day."""

    merchant: str
    start_us: int
    end_us: int

    def as_dict(self) -> dict:
        return {"merchant": self.merchant, "start": us_to_iso(self.start_us),
                "end": us_to_iso(self.end_us), "start_us": self.start_us, "end_us": self.end_us}


def published_pointers(store: Store, pipeline: str = PIPELINE, conn=None) -> list[dict]:
    p = S.generation_pointers.c
    stmt = select(S.generation_pointers).where(p.pipeline == pipeline).order_by(
        p.interval_key, p.interval_start_us)
    if conn is not None:
        return [dict(r) for r in conn.execute(stmt).mappings()]
    return store.rows(stmt)


def in_pieces(merchant: str, payment_time: str | int, pieces: Iterable[Piece]) -> bool:
    t = payment_time if isinstance(payment_time, int) else parse_utc_us(payment_time)
    return any(p.merchant == merchant and p.start_us <= t <= p.end_us for p in pieces)


@contextmanager
def snapshot(store: Store) -> Iterator:
    """A read transaction that sees one committed state across several statements."""
    conn = store.engine.connect()
    try:
        if store.dialect == "postgresql":
            conn = conn.execution_options(isolation_level="REPEATABLE READ")
        with conn.begin():
            yield conn
    finally:
        conn.close()


def _pieces_of(pointers: list[dict]) -> list[tuple[Piece, str]]:
    return [(Piece(p["interval_key"], p["interval_start_us"], p["interval_end_us"]),
             p["generation_id"]) for p in pointers]


def published_pairs(store: Store, pipeline: str = PIPELINE) -> list[dict]:
    """Generation rows inside published pieces, live current rows elsewhere."""
    v, f = S.current_view.c, S.facts.c
    with snapshot(store) as conn:
        pointers = published_pointers(store, pipeline, conn)
        live = [loads(r.payload) for r in conn.execute(
            current_with_payload().where(v.pipeline == pipeline, v.kind == "pair",
                                         v.status == "current"))]
        gids = sorted({p["generation_id"] for p in pointers})
        gen = [(r.generation_id, loads(r.payload)) for r in conn.execute(
            select(f.generation_id, f.payload).where(
                f.pipeline == pipeline, f.kind == "pair", f.status == "current",
                f.generation_id.in_(gids)))] if gids else []
    pieces = _pieces_of(pointers)
    rows = [{**p, "status": "current"} for p in live
            if not in_pieces(p["merchant_id"], p["payment_time"], [pc for pc, _ in pieces])]
    for gid, p in gen:
        t = parse_utc_us(p["payment_time"])
        if any(g == gid and pc.merchant == p["merchant_id"] and pc.start_us <= t <= pc.end_us
               for pc, g in pieces):
            rows.append({**p, "status": "current", "generation_id": gid})
    return sorted(rows, key=lambda r: (r["payment_id"], r["signal_id"]))


def published_outcomes(store: Store, pipeline: str = PIPELINE) -> list[dict]:
    """Current outcome per payment; a publication moves corrected finals into the current view
    in its own transaction, so the current view is already the published one."""
    return sorted((loads(r["payload"]) for r in store.current(pipeline, "outcome")),
                  key=lambda r: r["payment_id"])


def generation_rows(store: Store, pipeline: str = PIPELINE) -> list[dict]:
    g = S.generations.c
    rows = store.rows(select(S.generations).where(g.pipeline == pipeline)
                      .order_by(g.created_at, g.generation_id))
    for r in rows:
        r["interval_start"] = us_to_iso(r["interval_start_us"])
        r["interval_end"] = us_to_iso(r["interval_end_us"])
    return rows
