"""Receipt-scorer oracles.

The seed's release check, `receipt_stream_release`, is applied at run time by the release gate
and lives beside it in `streaming/pipelines/receipts_release.py`.
`reference_decisions` scores receipts in a single batch pass in occurrence order: no
watermark, no sink, no checkpoint; each receipt's features come from the same merchant's
receipts (deduplicated by receipt_id) with occurred_at in [t - 7 min, t)."""

from __future__ import annotations

from collections import deque

from streaming.models.registry import Model
from streaming.timeutil import US_PER_MIN, parse_utc_us


def dedupe(receipts: list[dict]) -> list[dict]:
    """One receipt per receipt_id: the first upload (by uploaded_at, then position)."""
    seen: dict[str, dict] = {}
    for r in receipts:
        if r["receipt_id"] not in seen:
            seen[r["receipt_id"]] = r
    return list(seen.values())


def reference_features(receipts: list[dict]) -> dict[str, tuple[int, int]]:
    """receipt_id -> (feature_count_7m, feature_amount_7m) at each receipt's state cutoff."""
    window = 7 * US_PER_MIN
    rows = sorted((parse_utc_us(r["occurred_at"]), r["receipt_id"], r["merchant_id"],
                    r["amount_cents"]) for r in dedupe(receipts))
    out: dict[str, tuple[int, int]] = {}
    recent: dict[str, deque] = {}  # merchant -> (t, amount) with t in [t_now - 7 min, ...)
    sums: dict[str, int] = {}
    i = 0
    while i < len(rows):
        # Receipts at the same instant do not see each other (cutoff is exclusive).
        j = i
        while j < len(rows) and rows[j][0] == rows[i][0]:
            j += 1
        t = rows[i][0]
        for _, rid, m, _ in rows[i:j]:
            q = recent.setdefault(m, deque())
            while q and q[0][0] < t - window:
                sums[m] -= q.popleft()[1]
            out[rid] = (len(q), sums.get(m, 0))
        for _, _, m, amount in rows[i:j]:
            recent[m].append((t, amount))
            sums[m] = sums.get(m, 0) + amount
        i = j
    return out


def reference_decisions(receipts: list[dict], model: Model) -> dict[str, dict]:
    """receipt_id -> {features, score, decision, model_revision} scored in occurrence order."""
    amounts = {r["receipt_id"]: r["amount_cents"] for r in receipts}
    out = {}
    for rid, (cnt, amt) in reference_features(receipts).items():
        score, decision = model.score({"feature_count_7m": cnt, "feature_amount_7m": amt,
                                       "amount_cents": amounts[rid]})
        out[rid] = {"feature_count_7m": cnt, "feature_amount_7m": amt, "score": score,
                    "decision": decision, "model_revision": model.revision}
    return out
