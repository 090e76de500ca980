"""Held join entries: why they wait, whether their blocking cause is gone, and why a pending
set cannot be rebuilt yet (the watermark precondition).

A held entry set is the held replay-queue entries of one merchant and one queue date. Its
blocking cause is gone, and a retry is worth a run, when:
  - the generations published on its pieces differ from those its held candidate was built
    on (a new generation was published there since), or
  - a newer queue entry names one of its events (a newer correction arrived), or
  - it was held on open gate blockers of the join and none is open any more.
Each retry gets a run key derived from the cause, so the same cause never requests twice.

No Dagster import: the sensor, `riskstream repair run` and the tests call these functions."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from sqlalchemy import select

from .gates import HOLD_BLOCKED, HOLD_NOTHING, open_blockers
from .join_published import PIPELINE, published_pointers
from .join_rebuild import (EntrySet, WatermarkNotPassed, affected_ranges, check_watermarks,
                           entries_by_id, plan_pieces)
from .store import schema as S
from .store.ops import Store, loads
from .store.tables_generations import generation_plans


@dataclass
class HeldSet:
    merchant: str
    queue_date: str
    entry_ids: list[int]
    event_ids: list[str]
    reasons: list[str]
    generation_ids: list[str] = field(default_factory=list)

    def entry_set(self) -> EntrySet:
        return EntrySet(self.merchant, self.queue_date, self.entry_ids, self.event_ids)

    def retry_run_key(self, cause: str) -> str:
        digest = hashlib.blake2b(cause.encode(), digest_size=6).hexdigest()
        return f"{self.entry_set().run_key}:retry:{digest}"

    def describe(self) -> str:
        return (f"{self.merchant} {self.queue_date} entries {','.join(map(str, self.entry_ids))}"
                f" held: {'; '.join(self.reasons)}")


def held_entry_sets(store: Store, pipeline: str = PIPELINE) -> list[HeldSet]:
    """Held entries grouped by (merchant, queue date), in date then merchant order."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for e in store.queue(pipeline, "held"):
        groups.setdefault((e["key"], e["queue_date"]), []).append(e)
    out = []
    for (m, d), rows in sorted(groups.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        out.append(HeldSet(
            m, d, sorted(e["id"] for e in rows),
            sorted({f"{e['topic']}:{e['event_id']}" for e in rows}),
            sorted({e["status_reason"] or "no reason recorded" for e in rows}),
            sorted({e["generation_id"] for e in rows if e["generation_id"]})))
    return out


def _overlapping_generations(store: Store, pieces: list[dict], pipeline: str) -> set[str]:
    out = set()
    for p in published_pointers(store, pipeline):
        for pc in pieces:
            if (p["interval_key"] == pc["merchant"] and p["interval_start_us"] <= pc["end_us"]
                    and pc["start_us"] <= p["interval_end_us"]):
                out.add(p["generation_id"])
    return out


def retry_cause(store: Store, held: HeldSet, pipeline: str = PIPELINE) -> str | None:
    """Why a retry of `held` could now pass, or None while its blocking cause stands."""
    gp = generation_plans.c
    for gid in held.generation_ids:
        plan = store.rows(select(generation_plans).where(gp.generation_id == gid))
        if not plan:
            continue
        pieces = loads(plan[0]["pieces"])
        built_on = {b["generation_id"] for b in loads(plan[0]["based_on"])}
        now = _overlapping_generations(store, pieces, pipeline)
        if now != built_on:
            return (f"a new generation was published on its interval since {gid} was held "
                    f"({', '.join(sorted(now - built_on)) or 'a generation was replaced'})")
    q = S.replay_queue.c
    events = {e.split(":", 1)[1] for e in held.event_ids}
    newer = store.rows(select(q.id, q.event_id, q.revision).where(
        q.pipeline == pipeline, q.id > max(held.entry_ids), q.event_id.in_(sorted(events)))
        .order_by(q.id))
    if newer:
        n = newer[-1]
        return (f"a newer correction arrived: queue entry {n['id']} ({n['event_id']} revision "
                f"{n['revision']})")
    if any(r.startswith(HOLD_BLOCKED) for r in held.reasons) and \
            not open_blockers(store, pipeline):
        return "the gate blockers it was held on are resolved"
    return None


def watermark_wait(store: Store, entry_ids: list[int], pipeline: str = PIPELINE) -> str | None:
    """Why the entries cannot be rebuilt yet (the live watermarks have not passed their
    interval, with both times), or None when the precondition holds."""
    entries = entries_by_id(store, entry_ids)
    ranges = [r for e in entries for r in affected_ranges(e)]
    if not ranges:
        return None
    pieces, _ = plan_pieces(store, ranges, pipeline)
    try:
        check_watermarks(store, pieces, pipeline)
    except WatermarkNotPassed as exc:
        return str(exc)
    return None


def candidate_nothing_to_judge(meta: dict) -> str | None:
    """A candidate with no queue entry and no payment in its interval has nothing a check could
    judge (a manual rebuild of an empty interval, a mistyped merchant): it is held, not
    published."""
    if meta.get("entry_ids") or (meta.get("inputs") or {}).get("payments"):
        return None
    pieces = ", ".join(f"{p['merchant']} [{p['start']}, {p['end']}]" for p in meta["pieces"])
    return (f"{HOLD_NOTHING}: the rebuild interval ({pieces}) holds no payment and no queue "
            f"entry")
