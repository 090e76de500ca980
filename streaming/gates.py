"""What holds a pipeline's gates, shared by every command that judges or publishes.

A gate accepts only when it has something to judge and nothing unexplained stands beside it:
  nothing to judge   the pipeline never committed a batch (no journal entry);
  blockers           an open sink exception (an existing fact key rewritten with other
                     content), an accounting gap (a partition whose read count is not the sum
                     of its buckets), or a quarantine row without a reason or source detail.
A blocker is open until a recorded decision names it (`riskstream exceptions resolve`); the
decision is stored with who made it and why, and shown in the incident packets. A gap whose
numbers change gets a new ID, so an old decision never covers a new gap."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import func, select

from .store import schema as S
from .store.ops import Store, now_iso
from .store.tables_gates import gate_decisions as GD

# decision -> what it means (docs/gates.md)
DECISIONS = {
    "keep-existing": "the committed fact stands; the rejected content is discarded",
    "superseded": "a later correction or generation publishes the right content",
    "explained": "the gap or quarantine row was investigated and its cause is recorded",
}
HOLD_NOTHING = "hold:nothing-to-judge"
HOLD_BLOCKED = "hold:open-exceptions"


class DecisionRefused(ValueError):
    exit_code = 2


@dataclass
class Blocker:
    blocker_id: str
    pipeline: str
    kind: str  # sink_exception | accounting_gap | unexplained_quarantine
    detail: str
    decision: dict | None = None

    @property
    def open(self) -> bool:
        return self.decision is None

    def as_dict(self) -> dict:
        return {"id": self.blocker_id, "pipeline": self.pipeline, "kind": self.kind,
                "detail": self.detail, "status": "open" if self.open else "resolved",
                "decision": self.decision}


def pipeline_ran(store: Store, pipeline: str) -> bool:
    """True once the pipeline (any of its workers) committed at least one batch."""
    from .workers import ran
    return ran(store, pipeline)


def _decisions(store: Store, pipeline: str | None) -> dict[tuple[str, str], dict]:
    stmt = select(GD)
    if pipeline:
        stmt = stmt.where(GD.c.pipeline == pipeline)
    return {(r["pipeline"], r["blocker_id"]): {k: r[k] for k in (
        "decision", "decided_by", "reason", "decided_at")} for r in store.rows(stmt)}


def _pipelines(store: Store) -> list[str]:
    j, e = S.journal.c, S.sink_exceptions.c
    names = {r["pipeline"] for r in store.rows(select(j.pipeline).distinct())}
    names |= {r["pipeline"] for r in store.rows(select(e.pipeline).distinct())}
    return sorted(names)


def blockers(store: Store, pipeline: str | None = None) -> list[Blocker]:
    """Every blocker of one pipeline (or of all), open or resolved, in a stable order."""
    out: list[Blocker] = []
    for p in ([pipeline] if pipeline else _pipelines(store)):
        for r in store.sink_exception_rows(p):
            out.append(Blocker(
                f"sx-{r['id']}", p, "sink_exception",
                f"{r['fact_key']}: {r['reason']} (stored {r['existing_hash'][:12]}, "
                f"rejected {r['rejected_hash'][:12]}, batch {r['batch_seq']})"))
        for row in store.accounting(p):
            if not row["closes"]:
                buckets = sum(row[n] for n in ("accepted", "duplicate", "stale", "quarantined",
                                               "routed_to_repair"))
                out.append(Blocker(
                    f"gap:{row['topic']}:{row['partition']}:{row['read']}:{buckets}", p,
                    "accounting_gap",
                    f"{row['topic']} p{row['partition']} offsets {row['first_offset']}.."
                    f"{row['last_offset']}: read {row['read']} but the buckets hold {buckets}"))
        q = S.quarantine.c
        for r in store.rows(select(q.topic, q.partition, q.offset).where(
                q.pipeline == p, (func.length(q.reason) == 0) | (func.length(q.detail) == 0))):
            out.append(Blocker(f"q:{r['topic']}:{r['partition']}:{r['offset']}", p,
                               "unexplained_quarantine",
                               f"{r['topic']} p{r['partition']} offset {r['offset']} is "
                               f"quarantined without a reason"))
    decided = _decisions(store, pipeline)
    for b in out:
        b.decision = decided.get((b.pipeline, b.blocker_id))
    return out


def open_blockers(store: Store, pipeline: str) -> list[Blocker]:
    return [b for b in blockers(store, pipeline) if b.open]


def hold_reason(store: Store, pipeline: str) -> str | None:
    """Why the pipeline's gates must hold now, or None. Nothing to judge comes first."""
    if not pipeline_ran(store, pipeline):
        return (f"{HOLD_NOTHING}: the {pipeline} pipeline has committed no batch in this "
                f"store")
    found = open_blockers(store, pipeline)
    if found:
        shown = ", ".join(b.blocker_id for b in found[:10])
        return (f"{HOLD_BLOCKED}: {len(found)} open {'blocker' if len(found) == 1 else 'blockers'}"
                f" ({shown}{' ...' if len(found) > 10 else ''}); resolve each with `riskstream "
                f"exceptions resolve`")
    return None


def resolve(store: Store, blocker_id: str, decision: str, decided_by: str, reason: str,
            pipeline: str | None = None) -> Blocker:
    """Record a decision on an open blocker. Refuses unknown IDs, decisions, empty names and
    blockers already decided."""
    if decision not in DECISIONS:
        raise DecisionRefused(f"unknown decision {decision!r}; one of {', '.join(DECISIONS)}")
    if not decided_by.strip() or not reason.strip():
        raise DecisionRefused("a decision needs who made it (--by) and why (--reason)")
    matches = [b for b in blockers(store, pipeline) if b.blocker_id == blocker_id]
    if not matches:
        raise DecisionRefused(f"no blocker {blocker_id!r}"
                              f"{' in ' + pipeline if pipeline else ''}; see `riskstream "
                              f"exceptions list`")
    if len(matches) > 1:
        raise DecisionRefused(f"{blocker_id!r} exists in several pipelines "
                              f"({', '.join(b.pipeline for b in matches)}); name one with "
                              f"--pipeline")
    b = matches[0]
    if not b.open:
        assert b.decision is not None  # a resolved blocker carries its decision
        raise DecisionRefused(f"{blocker_id} was already resolved ({b.decision['decision']} by "
                              f"{b.decision['decided_by']} at {b.decision['decided_at']})")
    row = {"pipeline": b.pipeline, "blocker_id": blocker_id, "decision": decision,
           "decided_by": decided_by.strip(), "reason": reason.strip(), "decided_at": now_iso()}
    with store.engine.begin() as conn:
        conn.execute(GD.insert(), [row])
    b.decision = {k: row[k] for k in ("decision", "decided_by", "reason", "decided_at")}
    return b
