"""The receipt scorer's incident packet, read from the real sink.

Active decision: a decision fact that no other decision fact names as its predecessor. A
receipt with two active decisions has two live chains (a duplicate output).

The release gate itself (active decisions, chain origins) is runtime: see
`streaming/pipelines/receipts_release.py`.

Disconnect inference: per shard, the median upload lag (uploaded_at - occurred_at) of first
uploads is the shard's normal delay. A store's receipt is held back when its lag exceeds
that by more than HELD_LAG_US; consecutive held receipts (in occurrence order) form one
disconnect, from the occurrence of the first held receipt (the store was offline by then;
it was still online at `last_online_receipt`) until the first upload of the run (reconnect)."""

from __future__ import annotations

import statistics

from sqlalchemy import func, select

from streaming.models.pins import pin_history
from streaming.operators.receipts import PIPELINE
from streaming.pipelines.receipts_release import active, decision_facts, receipts_seen, release_gate
from streaming.store import schema as S
from streaming.store.ops import Store, loads
from streaming.timeutil import US_PER_MIN, us_to_iso
from streaming.workers import progress

from .receipts_reference import reference_check, render_lines

HELD_LAG_US = 3 * US_PER_MIN


def _median(xs: list[int]) -> int:
    return int(statistics.median(xs)) if xs else 0


def disconnects(seen: dict[str, dict]) -> list[dict]:
    by_part: dict[int, list[int]] = {}
    by_store: dict[str, list[tuple[int, int, int, str]]] = {}
    for rid, r in seen.items():
        p = loads(r["payload"])
        lag = r["arrival_us"] - r["event_us"]
        by_part.setdefault(r["partition"], []).append(lag)
        by_store.setdefault(p["store_id"], []).append((r["event_us"], r["arrival_us"], lag, rid))
    normal = {p: _median(v) for p, v in by_part.items()}
    part_of = {loads(r["payload"])["store_id"]: r["partition"] for r in seen.values()}
    out = []
    for store_id, items in sorted(by_store.items()):
        items.sort()
        base = normal[part_of[store_id]]
        run: list[tuple] = []
        last_online = None
        closed: list = [*items, (None, None, None, None)]  # the sentinel closes the last run
        for ev, arr, lag, rid in closed:
            held = ev is not None and lag - base > HELD_LAG_US
            if held:
                run.append((ev, arr, lag, rid))
                continue
            if run:
                out.append({
                    "store_id": store_id, "partition": part_of[store_id],
                    "last_online_receipt": us_to_iso(last_online),
                    "offline_from": us_to_iso(run[0][0]),
                    "reconnected_at": us_to_iso(min(x[1] for x in run)),
                    "uploads_arrived": [us_to_iso(min(x[1] for x in run)),
                                        us_to_iso(max(x[1] for x in run))],
                    "held_receipts": len(run), "max_upload_lag_s": max(x[2] for x in run) / 1e6,
                    "shard_normal_lag_s": base / 1e6})
                run = []
            if ev is not None:
                last_online = ev
    return out


def incident_packet(store: Store) -> dict:
    seen, late = receipts_seen(store)
    facts = decision_facts(store)
    act = active(facts)
    gate = release_gate(store)
    a = S.archive.c
    ranges = []
    times = {r["partition"]: r for r in store.rows(
        select(a.partition, func.min(a.event_us).label("first_occurred"),
               func.max(a.event_us).label("last_occurred"),
               func.min(a.arrival_us).label("first_uploaded"),
               func.max(a.arrival_us).label("last_uploaded"))
        .where(a.pipeline == PIPELINE).group_by(a.partition))}
    for row in store.accounting(PIPELINE):
        t = times.get(row["partition"], {})
        ranges.append({**row, **{k: us_to_iso(t.get(k)) for k in (
            "first_occurred", "last_occurred", "first_uploaded", "last_uploaded")}})
    # Scaled-out workers checkpoint under `receipts@I/N`: the report shows the worker that is
    # furthest behind (the pipeline's watermark is the minimum over them).
    workers = progress(store, PIPELINE)
    behind = min(workers, key=lambda w: (w.covered, w.key)) if workers else None
    ck = behind.checkpoint if behind else None
    meta = loads(ck["meta"]) if ck else {}
    last = (behind.metrics if behind else None) or {}
    st = last.get("state", {})
    runs = store.rows(select(S.runs).where(S.runs.c.pipeline == PIPELINE).order_by(S.runs.c.id))
    recovery = []
    for r in runs:
        res = loads(r["result"]) if r["result"] else None
        recovery.append({"run": r["id"], "started_at": r["started_at"],
                         "finished": res is not None,
                         "restored_from_checkpoint": res and res.get("restored_from"),
                         "facts_written": res and res.get("facts_written"),
                         "redelivered_outputs_noop": res and res.get("facts_noop"),
                         "facts_rejected": res and res.get("facts_rejected")})
    # Output gaps: missing/extra per the gate, and holes in revision chains.
    revs: dict[str, list[int]] = {}
    for f in facts:
        revs.setdefault(f["receipt_id"], []).append(f["scoring_revision"])
    chain_gaps = sorted(rid for rid, v in revs.items() if sorted(v) != list(range(1, len(v) + 1)))
    repaired = [{k: f[k] for k in ("fact_key", "predecessor_key", "fact_status", "reason",
                                   "model_revision", "score", "decision", "feature_count_7m",
                                   "feature_amount_7m", "state_cutoff")}
                for f in facts if f["batch_seq"] is None]
    q = S.replay_queue.c
    queue_rows = store.rows(select(q.event_id, q.partition, q.offset, q.event_us, q.reason,
                                   q.watermark_at_arrival_us, q.status, q.status_reason)
                            .where(q.pipeline == PIPELINE).order_by(q.event_us, q.event_id))
    dup_counts = {r["partition"]: r["duplicate"] for r in store.accounting(PIPELINE)}
    return {
        "pipeline": PIPELINE,
        "input_ranges": ranges,
        "state": {"checkpoint_id": ck["id"] if ck else None,
                  "journal_seq": ck["journal_seq"] if ck else None,
                  "last_journal_seq": behind.last_journal_seq if behind else 0,
                  "workers": [w.key for w in workers],
                  "state_schema": ck["state_schema"] if ck else None,
                  "serializer": ck["serializer"] if ck else None,
                  "code_revision": meta.get("code_revision"),
                  "watermark": min((m for m in (loads(w.checkpoint["meta"]).get(
                      "watermarks", {}).get("receipts") for w in workers if w.checkpoint)
                                    if m), default=None),
                  "reference_versions": meta.get("reference_versions", {}),
                  "state_records": st.get("state_records"),
                  "pending_unscored": st.get("pending")},
        "model": {"pinned_revision": meta.get("reference_versions", {}).get("model_revision"),
                  "pins": pin_history(store, PIPELINE),
                  "revisions_in_sink": sorted({f["model_revision"] for f in act})},
        "counts": {"receipts_seen": len(seen),
                   "duplicate_uploads": sum(dup_counts.values()),
                   "duplicate_uploads_by_partition": dup_counts,
                   "late_within_tolerance": st.get("late_within_tolerance"),
                   "beyond_allowed_delay": len(late),
                   "rescored_live": st.get("rescored_live"),
                   "decision_facts": len(facts), "active_decisions": len(act)},
        "recovery": recovery,
        "output_gaps": {"missing_live": gate["missing_live"], "extra_live": gate["extra_live"],
                        "missing_repaired": gate["missing_repaired"],
                        "extra_repaired": gate["extra_repaired"],
                        "duplicate_outputs": gate["duplicate_outputs"],
                        "revision_chain_gaps": chain_gaps},
        "reconciliation_records": [{**r, "occurred_at": us_to_iso(r.pop("event_us")),
                                    "watermark_at_arrival":
                                        us_to_iso(r.pop("watermark_at_arrival_us"))}
                                   for r in queue_rows],
        "repaired_decisions": repaired,
        "exceptions": {
            "sink": [{k: r[k] for k in ("fact_key", "existing_hash", "rejected_hash", "reason",
                                        "batch_seq")}
                     for r in store.sink_exception_rows(PIPELINE)],
            "quarantine": [{k: r[k] for k in ("partition", "offset", "reason", "detail")}
                           for r in store.quarantine_rows(PIPELINE)],
            "held_reconciliation": [r for r in queue_rows if r["status"] == "held"],
            "blockers": gate["blockers"]},
        "store_disconnects": disconnects(seen),
        "release_gate": gate,
        "reference_check": reference_check(store),
    }


def render_text(p: dict) -> str:
    L = ["Incident packet: receipt scorer", ""]
    L.append(f"Release gate: {p['release_gate']['result']} (live {p['release_gate']['live']}, "
             f"repaired {p['release_gate']['repaired']})")
    if p["release_gate"]["hold_reason"]:
        L.append(f"  {p['release_gate']['hold_reason']}")
    s = p["state"]
    L.append(f"State: checkpoint {s['checkpoint_id']} at journal {s['journal_seq']} "
             f"(last committed {s['last_journal_seq']}), schema {s['state_schema']}, "
             f"watermark {s['watermark']}, code {s['code_revision']}")
    m = p["model"]
    L.append(f"Model: pinned {m['pinned_revision']}; in sink {', '.join(m['revisions_in_sink'])}")
    for pin in m["pins"]:
        L.append(f"  pin {pin['id']}: {pin['model_revision']} ({pin['reason']}"
                 f"{', was ' + pin['previous_revision'] if pin['previous_revision'] else ''})")
    L.append("Input ranges per partition:")
    for r in p["input_ranges"]:
        L.append(f"  p{r['partition']}: offsets {r['first_offset']}..{r['last_offset']} "
                 f"read {r['read']} = accepted {r['accepted']} + duplicate {r['duplicate']} + "
                 f"quarantined {r['quarantined']} + routed {r['routed_to_repair']} "
                 f"({'closes' if r['closes'] else 'DOES NOT CLOSE'}); occurred "
                 f"{r['first_occurred']}..{r['last_occurred']}, uploaded "
                 f"{r['first_uploaded']}..{r['last_uploaded']}")
    c = p["counts"]
    L.append(f"Counts: {c['receipts_seen']} receipts, {c['duplicate_uploads']} duplicate uploads, "
             f"{c['late_within_tolerance']} late within tolerance, {c['beyond_allowed_delay']} "
             f"beyond the allowed delay; {c['active_decisions']} active decisions of "
             f"{c['decision_facts']} facts")
    L.append("Recovery:")
    for r in p["recovery"]:
        L.append(f"  run {r['run']}: {'finished' if r['finished'] else 'DID NOT FINISH'}"
                 + (f", restored from checkpoint {r['restored_from_checkpoint']}, "
                    f"{r['facts_written']} written, {r['redelivered_outputs_noop']} redelivered "
                    f"(no-op), {r['facts_rejected']} rejected" if r["finished"] else ""))
    g = p["output_gaps"]
    L.append("Output gaps: " + ", ".join(f"{k} {len(v)}" for k, v in g.items()))
    for k, v in g.items():
        if v:
            L.append(f"  {k}: {', '.join(v[:20])}{' ...' if len(v) > 20 else ''}")
    L.append(f"Reconciliation records: {len(p['reconciliation_records'])}")
    for r in p["reconciliation_records"]:
        L.append(f"  {r['event_id']} occurred {r['occurred_at']} wm {r['watermark_at_arrival']} "
                 f"{r['status']} {r['status_reason'] or ''}")
    L.append(f"Repaired decisions: {len(p['repaired_decisions'])}")
    for f in p["repaired_decisions"][:60]:
        L.append(f"  {f['fact_key']} <- {f['predecessor_key'] or '-'} {f['fact_status']} "
                 f"{f['decision']} score {f['score']} count {f['feature_count_7m']} "
                 f"amount {f['feature_amount_7m']}")
    e = p["exceptions"]
    L.append(f"Exceptions: sink {len(e['sink'])}, quarantine {len(e['quarantine'])}, "
             f"held reconciliation {len(e['held_reconciliation'])}")
    for r in e["sink"]:
        L.append(f"  sink: {r['fact_key']} rejected ({r['reason']}; kept {r['existing_hash']})")
    for r in e["quarantine"]:
        L.append(f"  quarantine: p{r['partition']}@{r['offset']} {r['reason']} {r['detail']}")
    L.append(f"Gate blockers: {sum(b['status'] == 'open' for b in e['blockers'])} open, "
             f"{sum(b['status'] == 'resolved' for b in e['blockers'])} resolved")
    for b in e["blockers"]:
        d = b["decision"]
        L.append(f"  {b['id']} {b['kind']} {b['status']}: {b['detail']}"
                 + (f"; decision {d['decision']} by {d['decided_by']} at {d['decided_at']}: "
                    f"{d['reason']}" if d else ""))
    L.extend(render_lines(p["reference_check"]))
    L.append("Store disconnects (inferred from occurrence vs upload times):")
    for d in p["store_disconnects"]:
        L.append(f"  {d['store_id']} (p{d['partition']}): online until {d['last_online_receipt']}, "
                 f"offline by {d['offline_from']}, reconnected {d['reconnected_at']}; "
                 f"{d['held_receipts']} held receipts uploaded {d['uploads_arrived'][0]}.."
                 f"{d['uploads_arrived'][1]} (lag up to {d['max_upload_lag_s']:.0f} s, shard "
                 f"normal {d['shard_normal_lag_s']:.0f} s)")
    return "\n".join(L) + "\n"
