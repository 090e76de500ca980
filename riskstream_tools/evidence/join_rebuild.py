"""The historical-rebuild section of the join's evidence packet: the old correction in the
replay queue is rebuilt into a candidate generation, compared (pair keys and merchant totals)
and published, and the published view is read before and after.

The repair runs as the repair job itself (`dagster`: candidate, dbt diff models, blocking checks,
publication), so the packet shows what the release gate actually let through; `none` skips it.
The diff shown is read from the published view, so it shows what a reader sees."""

from __future__ import annotations

import importlib
from collections import defaultdict

from streaming.join_diff import diff_pairs
from streaming.store.ops import Store

from .join_runs import EvidenceSettings
from .join_sections import replay_queue

NOT_PUBLISHED = "no generation was published in this run"


def generations_module():
    """The published view with generations, when this build of the project has one."""
    try:
        mod = importlib.import_module("streaming.join_published")
    except ImportError:
        return None
    if not all(hasattr(mod, n) for n in ("generation_rows", "published_pairs")):
        return None
    return mod


def view_diff(before: list[dict], after: list[dict]) -> dict[str, list[dict]]:
    """The published view before vs after, by `join_diff.diff_pairs`, each row in brief (a
    revised row names the pair id it replaces)."""
    def brief(r: dict, old: dict | None = None) -> dict:
        out = {"payment_id": r["payment_id"], "signal_id": r["signal_id"],
               "pair_id": r["pair_id"], "payment_rev": r["payment_rev"],
               "payment_time": r["payment_time"], "signal_time": r["signal_time"],
               "generation_id": r.get("generation_id")}
        if old is not None:
            out["replaces_pair_id"] = old["pair_id"]
        return out
    diff = diff_pairs(before, after)
    return {"added": [brief(a) for _, a in diff["added"]],
            "retired": [brief(b) for b, _ in diff["retired"]],
            "revised": [brief(a, b) for b, a in diff["revised"]]}


def merchant_totals(outcomes: list[dict], pairs: list[dict]) -> dict[str, dict]:
    """Per merchant: payments, matched payments, matched amount and pairs."""
    tot: dict[str, dict] = defaultdict(lambda: {"payments": 0, "matched_payments": 0,
                                                "matched_amount_cents": 0, "pairs": 0})
    for o in outcomes:
        t = tot[o["merchant_id"]]
        t["payments"] += 1
        if o.get("match_count", 0) > 0:
            t["matched_payments"] += 1
            t["matched_amount_cents"] += o.get("amount_cents") or 0
    for p in pairs:
        tot[p["merchant_id"]]["pairs"] += 1
    return dict(tot)


def _run_dagster(store: Store, warehouse_path: str) -> tuple[list[dict], list[str]]:
    from orchestration.repair import run_pending  # Dagster loads only here
    outcomes = run_pending(store.url, warehouse_path, log_level="WARNING")
    runs = [{"entry_set": o.run_key, "entry_ids": o.entry_ids, "dagster_run_id": o.run_id,
             "success": o.success} for o in outcomes]
    return runs, [f"{o.run_key} did not publish" for o in outcomes if not o.success]


def historical_rebuild(store: Store, manifest: dict, settings: EvidenceSettings,
                       warehouse_path: str) -> dict:
    G = generations_module()
    if G is None:
        return {"available": False, "mode": settings.repair, "published": False,
                "statement": f"{NOT_PUBLISHED}: this build has no published view with "
                             f"generations", "holds": None}
    if settings.repair == "none":
        return {"available": True, "mode": "none", "published": False,
                "statement": f"{NOT_PUBLISHED}: the repair was not requested",
                "holds": None}
    old = manifest["cases"]["old_correction"]
    pairs_before, outcomes_before = G.published_pairs(store), G.published_outcomes(store)
    runs, failures = _run_dagster(store, warehouse_path)
    pairs_after, outcomes_after = G.published_pairs(store), G.published_outcomes(store)
    gens = [{k: g.get(k) for k in ("generation_id", "interval_key", "interval_start",
                                   "interval_end", "status", "reason", "based_on",
                                   "published_at")} for g in G.generation_rows(store)]
    published = [g for g in gens if g["status"] == "published"]
    diff = view_diff(pairs_before, pairs_after)
    tb = merchant_totals(outcomes_before, pairs_before)
    ta = merchant_totals(outcomes_after, pairs_after)
    changed_merchants = sorted(m for m in set(tb) | set(ta) if tb.get(m) != ta.get(m))
    outcome = {"before": next((o for o in outcomes_before
                               if o["payment_id"] == old["payment_id"]), None),
               "after": next((o for o in outcomes_after
                              if o["payment_id"] == old["payment_id"]), None)}
    added = {r["signal_id"] for r in diff["added"] if r["payment_id"] == old["payment_id"]}
    retired = {r["signal_id"] for r in diff["retired"] if r["payment_id"] == old["payment_id"]}
    touched = {r["payment_id"] for rows in diff.values() for r in rows}
    queue = [q for q in replay_queue(store) if q["event_id"] == old["payment_id"]]
    if not published:
        statement = f"{NOT_PUBLISHED}: " + ("; ".join(failures) or "nothing was pending")
    else:
        statement = (f"generation {published[-1]['generation_id']} published for "
                     f"{published[-1]['interval_key']} [{published[-1]['interval_start']}, "
                     f"{published[-1]['interval_end']}]")
    return {
        "available": True, "mode": settings.repair, "published": bool(published),
        "statement": statement, "runs": runs, "failures": failures, "generations": gens,
        "published_view_diff": diff,
        "diff_counts": {k: len(v) for k, v in diff.items()},
        "merchant_totals": [{"merchant": m, "before": tb.get(m), "after": ta.get(m)}
                            for m in changed_merchants],
        "old_correction": {**old, "gained": sorted(added), "lost": sorted(retired),
                           "outcome": outcome},
        "queue_after": queue,
        "holds": bool(published) and old["gains"] in added and old["loses"] in retired
        and touched == {old["payment_id"]} and set(changed_merchants) <= {old["merchant"]}
        and all(q["status"] == "processed" for q in queue)
        and (outcome["after"] or {}).get("status") == "corrected_final",
    }
