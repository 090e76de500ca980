"""Generations of the interval join: candidate history and atomic publication.

A generation is a validated rebuild of one or more day pieces (merchant, payment-time range);
the published view it switches lives in `join_published`.

Publication is one transaction: compare-and-set of the pointers against the pointers the diff was
built from, the generation's pair facts (through the sink, tagged with the generation id), a
corrected-final outcome fact for every final outcome the generation changes (predecessor link to
the fact it corrects), and the entry set marked processed. A candidate whose checks fail is
held with the reason; the last-good generation stays current."""

from __future__ import annotations

import logging

from sqlalchemy import and_, delete, select, update

from .join_diff import diff_pairs
from .join_published import PIPELINE
from .join_rebuild import Candidate
from .keys import compose
from .operators.base import Fact
from .operators.interval_join import RULE_VERSION, pair_fact_key, pair_logical_key
from .store import schema as S
from .store import tables_generations as T
from .store.ops import (Store, current_with_payload, dumps, fact_rows, loads, now_iso, upsert,
                        upsert_view_of_facts, write_facts)
from .timeutil import parse_utc_us

log = logging.getLogger(__name__)


class GenerationConflict(RuntimeError):
    """The pointers moved since the candidate was built: publish nothing, rebuild instead."""


def pair_diff(cand: Candidate) -> dict[str, list[dict]]:
    """Candidate vs the published rows it replaces (`join_diff.diff_pairs`): added and revised
    list the candidate's rows, retired the published rows."""
    diff = diff_pairs(cand.base_pairs, cand.pairs)
    return {change: [after if after is not None else before for before, after in rows]
            for change, rows in diff.items()}


def record_candidate(store: Store, cand: Candidate, pipeline: str = PIPELINE) -> None:
    """Write (or refresh) the generation's history row with status `candidate`."""
    with store.engine.begin() as conn:
        existing = conn.execute(select(S.generations.c.status).where(
            S.generations.c.generation_id == cand.generation_id)).scalar()
        if existing == "published":
            return
        upsert(conn, S.generations, [{
            "generation_id": cand.generation_id, "pipeline": pipeline,
            "interval_key": cand.interval_key, "interval_start_us": cand.start_us,
            "interval_end_us": cand.end_us, "status": "candidate", "reason": None,
            "based_on": _based_on_label(cand),
            "entry_ids": dumps(cand.entry_ids), "rule_version": RULE_VERSION,
            "created_at": now_iso(), "validated_at": None, "published_at": None}],
            ["generation_id"])
        upsert(conn, T.generation_plans, [{
            "generation_id": cand.generation_id,
            "pieces": dumps([p.as_dict() for p in cand.pieces]),
            "based_on": dumps(cand.based_on)}], ["generation_id"])


def _based_on_label(cand: Candidate) -> str | None:
    """The generation(s) current in the interval when the diff was built (full list in
    generation_plans)."""
    ids = sorted({b["generation_id"] for b in cand.based_on})
    if not ids:
        return None
    label = ",".join(ids)
    return label if len(label) <= 64 else f"{ids[0]}+{len(ids) - 1}"


def mark_validated(store: Store, generation_id: str) -> None:
    g = S.generations.c
    with store.engine.begin() as conn:
        conn.execute(update(S.generations).where(g.generation_id == generation_id,
                                                 g.status == "candidate")
                     .values(status="validated", validated_at=now_iso()))


def hold_entries(store: Store, entry_ids: list[int], generation_id: str | None,
                 reason: str) -> int:
    """A failed check: the entries wait with the reason; the candidate stays for inspection."""
    log.warning("holding queue entries %s (generation %s): %s", entry_ids, generation_id, reason)
    q, g = S.replay_queue.c, S.generations.c
    with store.engine.begin() as conn:
        n = conn.execute(update(S.replay_queue).where(
            q.id.in_(list(entry_ids)), q.status.in_(("pending", "held")))
            .values(status="held", status_reason=reason, generation_id=generation_id)).rowcount
        if generation_id:
            conn.execute(update(S.generations).where(g.generation_id == generation_id,
                                                     g.status != "published")
                         .values(status="held", reason=reason))
    return n


def _generation_facts(cand: Candidate, current_outcomes: dict[str, dict]) -> tuple[list, list]:
    gid = cand.generation_id
    facts = []
    for p in cand.pairs:
        t = parse_utc_us(p["payment_time"])
        facts.append(Fact.make(f"{pair_fact_key(t, p['pair_id'], 'publish')}|{gid}", "pair",
                               pair_logical_key(p["payment_id"], p["signal_id"], p["rule_version"]),
                               "current", p))
    corrected = []
    for o in cand.outcomes:
        cur = current_outcomes.get(o["payment_id"])
        if cur is not None:
            before = loads(cur["payload"])
            if (before.get("payment_rev"), before.get("match_count")) == \
                    (o["payment_rev"], o["match_count"]):
                continue
        payload = {**o, "status": "corrected_final", "generation_id": gid}
        corrected.append(Fact.make(
            compose("outcome", o["payment_id"], o["payment_rev"], "corrected", gid), "outcome",
            o["payment_id"], "corrected_final", payload,
            predecessor_key=cur["fact_key"] if cur is not None else None))
    return facts, corrected


def publish_generation(store: Store, cand: Candidate, pipeline: str = PIPELINE) -> dict:
    """Compare-and-set the pieces' pointers, write the generation, settle the entries: one
    transaction. Raises GenerationConflict (nothing written) when the pointers moved."""
    p, q, g, v = (S.generation_pointers.c, S.replay_queue.c, S.generations.c,
                  S.current_view.c)
    gid = cand.generation_id
    with store.engine.begin() as conn:
        stmt = select(S.generation_pointers).where(p.pipeline == pipeline)
        if conn.dialect.name == "postgresql":
            stmt = stmt.with_for_update()
        pointers = [dict(r) for r in conn.execute(stmt).mappings()]
        overlapping = sorted(
            (r["interval_key"], r["interval_start_us"], r["interval_end_us"],
             r["generation_id"], r["version"]) for r in pointers
            if any(pc.merchant == r["interval_key"] and r["interval_start_us"] <= pc.end_us
                   and pc.start_us <= r["interval_end_us"] for pc in cand.pieces))
        expected = sorted((b["interval_key"], b["start_us"], b["end_us"], b["generation_id"],
                           b["version"]) for b in cand.based_on)
        if overlapping != expected:
            raise GenerationConflict(
                f"generation {gid} was built on {expected} but the pointers are now "
                f"{overlapping}")
        current = {r["logical_key"]: dict(r) for r in conn.execute(
            current_with_payload().where(v.pipeline == pipeline, v.kind == "outcome",
                                         v.logical_key.in_([o["payment_id"]
                                                            for o in cand.outcomes])))
            .mappings()} if cand.outcomes else {}
        pair_facts, corrected = _generation_facts(cand, current)
        sink = write_facts(conn, pipeline, fact_rows(pair_facts + corrected), None,
                           generation_id=gid)
        # The corrected finals become current: the view points at their facts just written.
        upsert_view_of_facts(conn, pipeline, [f.fact_key for f in corrected])
        version = 1 + max((b["version"] for b in cand.based_on), default=0)
        for key, start, end, _, _ in overlapping:
            conn.execute(delete(S.generation_pointers).where(and_(
                p.pipeline == pipeline, p.interval_key == key, p.interval_start_us == start,
                p.interval_end_us == end)))
        conn.execute(S.generation_pointers.insert(), [
            {"pipeline": pipeline, "interval_key": pc.merchant, "interval_start_us": pc.start_us,
             "interval_end_us": pc.end_us, "generation_id": gid, "version": version}
            for pc in cand.pieces])
        replaced = sorted({b["generation_id"] for b in cand.based_on})
        if replaced:
            conn.execute(update(S.generations).where(g.generation_id.in_(replaced))
                         .values(status="superseded", reason=f"superseded by {gid}"))
        published_at = now_iso()
        conn.execute(update(S.generations).where(g.generation_id == gid).values(
            status="published", published_at=published_at,
            validated_at=conn.execute(select(g.validated_at).where(
                g.generation_id == gid)).scalar() or published_at, reason=None))
        settled = conn.execute(update(S.replay_queue).where(
            q.id.in_(cand.entry_ids), q.status.in_(("pending", "held")))
            .values(status="processed", status_reason=f"published in {gid}",
                    generation_id=gid)).rowcount
    log.info("published generation %s for %s: %d pairs, %d corrected finals, %d entries "
             "processed, pointer version %s", gid, cand.interval_key, len(cand.pairs),
             len(corrected), settled, version)
    return {"generation_id": gid, "pairs_written": sink.written, "pairs": len(cand.pairs),
            "corrected_finals": [f.logical_key for f in corrected],
            "entries_processed": settled, "replaced": replaced, "pointer_version": version}
