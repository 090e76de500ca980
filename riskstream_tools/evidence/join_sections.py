"""The sections of the join's evidence packet, each read back from a store after a run. Every
section carries the rows it shows and a `holds` verdict computed from those rows."""

from __future__ import annotations

from collections import Counter, defaultdict

from sqlalchemy import select

from streaming.operators.interval_join import RULE_VERSION, pair_id
from streaming.store import schema as S
from streaming.store.ops import Store, loads
from streaming.timeutil import NEG_INF, POS_INF, parse_utc_us, us_to_iso

PIPELINE = "join"


# ---------------------------------------------------------------------------- small readers
def signed_offset(delta_us: int) -> str:
    """-47m00s / +8m01s: a signal's distance from its payment, as the window states it."""
    sign = "-" if delta_us < 0 else "+"
    s = abs(delta_us) // 1_000_000
    return f"{sign}{s // 60}m{s % 60:02d}s"


def finite(us: int | None) -> int | None:
    return us if us is not None and NEG_INF < us < POS_INF else None


def iso_or_none(value: str | None) -> int | None:
    if value is None or value in ("+inf", "-inf"):
        return None
    return parse_utc_us(value)


def archive_rows(store: Store, merchant: str | None = None) -> list[dict]:
    a = S.archive.c
    stmt = select(S.archive).where(a.pipeline == PIPELINE)
    if merchant is not None:
        stmt = stmt.where(a.key == merchant)
    return store.rows(stmt)


def consumption_order(rows: list[dict]) -> list[dict]:
    """The order the worker read them in: the file log merges partitions by (arrival, topic,
    partition, offset)."""
    return sorted(rows, key=lambda r: (r["arrival_us"], r["topic"], r["partition"], r["offset"]))


def journal_clocks(store: Store) -> dict[int, int]:
    return {j["seq"]: j["clock_us"] for j in store.journal_after(PIPELINE, 0)}


def current_pairs(store: Store) -> dict[tuple[str, str], dict]:
    """(payment_id, signal_id) -> current pair row with its pair id and batch."""
    out = {}
    for r in store.current(PIPELINE, "pair"):
        if r["status"] != "current":
            continue
        p = loads(r["payload"])
        out[(p["payment_id"], p["signal_id"])] = {**p, "batch_seq": r["batch_seq"],
                                                  "fact_key": r["fact_key"]}
    return out


def fact_set(store: Store) -> set[tuple[str, str]]:
    return {(f["fact_key"], f["payload_hash"]) for f in store.facts(PIPELINE)}


def current_view(store: Store) -> dict[tuple[str, str], tuple[str, str]]:
    return {(r["kind"], r["logical_key"]): (r["fact_key"], r["status"])
            for kind in ("pair", "outcome") for r in store.current(PIPELINE, kind)}


def live_rows_per_logical_pair(store: Store) -> dict[str, int]:
    """Per logical pair, how many published pair facts are not retired: the sink's own
    account of how many current rows the pair has (must be 1 for a current pair)."""
    facts = store.facts(PIPELINE, "pair")
    retired = {loads(f["payload"])["pair_id"] for f in facts if f["status"] == "retired"}
    live: Counter = Counter()
    for f in facts:
        if f["status"] == "current" and f["generation_id"] is None \
                and loads(f["payload"])["pair_id"] not in retired:
            live[f["logical_key"]] += 1
    return dict(live)


# ---------------------------------------------------------------------------- endpoints
def endpoints(store: Store, manifest: dict) -> dict:
    pairs = current_pairs(store)
    arch = {}
    for r in archive_rows(store):
        if r["disposition"] == "accepted":
            arch[(r["topic"], r["event_id"])] = r
    cases = []
    for label in ("A", "B"):
        case = manifest["cases"][f"endpoint_{label}"]
        pid = case["payment_id"]
        pay = arch[("payments", pid)]
        signals = []
        for expected, ids in (("match", case["match"]), ("no match", case["no_match"])):
            for sid in ids:
                s = arch[("risk_signals", sid)]
                row = pairs.get((pid, sid))
                want = pair_id(RULE_VERSION, pid, pay["revision"], sid, s["revision"])
                signals.append({
                    "signal_id": sid, "event_time": us_to_iso(s["event_us"]),
                    "offset_from_payment": signed_offset(s["event_us"] - pay["event_us"]),
                    "arrival_time": us_to_iso(s["arrival_us"]), "read_in_batch": s["batch_seq"],
                    "expected": expected, "present": row is not None,
                    "pair_id": row["pair_id"] if row else None,
                    "pair_batch_seq": row["batch_seq"] if row else None,
                    "pair_id_is_identity_hash": row is None or row["pair_id"] == want})
        arrivals = [s["arrival_time"] for s in signals]
        pay_arrival = us_to_iso(pay["arrival_us"])
        if case["order"] == "payment-first":
            order_holds = all(pay_arrival < a for a in arrivals)
        else:
            order_holds = all(a < pay_arrival for a in arrivals)
        results_hold = all(s["present"] == (s["expected"] == "match")
                           and s["pair_id_is_identity_hash"] for s in signals)
        cases.append({
            "case": f"endpoint_{label}", "order": case["order"], "merchant": case["merchant"],
            "payment": {"payment_id": pid, "revision": pay["revision"],
                        "event_time": us_to_iso(pay["event_us"]), "arrival_time": pay_arrival,
                        "read_in_batch": pay["batch_seq"]},
            "signals": signals, "arrival_order_holds": order_holds,
            "results_hold": results_hold, "holds": order_holds and results_hold})
    return {"cases": cases, "holds": all(c["holds"] for c in cases)}


# ---------------------------------------------------------------------------- arrival trace
def asymmetric_arrival(store: Store, manifest: dict) -> dict:
    clocks = journal_clocks(store)
    pair_facts = defaultdict(list)
    for f in store.facts(PIPELINE, "pair"):
        if f["status"] == "current" and f["generation_id"] is None:
            p = loads(f["payload"])
            pair_facts[p["merchant_id"]].append((f, p))
    traces = []
    for label in ("A", "B"):
        case = manifest["cases"][f"endpoint_{label}"]
        m = case["merchant"]
        rows = consumption_order(archive_rows(store, m))
        consumed = [{"step": i + 1, "arrival_time": us_to_iso(r["arrival_us"]),
                     "event_time": us_to_iso(r["event_us"]), "topic": r["topic"],
                     "position": f"{r['topic']}:{r['partition']}@{r['offset']}",
                     "event_id": r["event_id"], "revision": r["revision"],
                     "disposition": r["disposition"], "batch_seq": r["batch_seq"]}
                    for i, r in enumerate(rows)]
        step_of = {(c["topic"], c["event_id"], c["revision"]): c["step"] for c in consumed}
        published = []
        for f, p in sorted(pair_facts.get(m, []), key=lambda fp: fp[0]["id"]):
            ps = step_of.get(("payments", p["payment_id"], p["payment_rev"]))
            ss = step_of.get(("risk_signals", p["signal_id"], p["signal_rev"]))
            published.append({
                "payment_id": p["payment_id"], "signal_id": p["signal_id"],
                "pair_id": p["pair_id"], "batch_seq": f["batch_seq"],
                "batch_clock": us_to_iso(clocks.get(f["batch_seq"], 0)),
                "payment_step": ps, "signal_step": ss,
                "arrived_second": "signal" if (ss or 0) > (ps or 0) else "payment"})
        endpoint_pairs = [p for p in published if p["payment_id"] == case["payment_id"]]
        want_second = "signal" if case["order"] == "payment-first" else "payment"
        traces.append({"case": f"endpoint_{label}", "merchant": m, "order": case["order"],
                       "consumed": consumed, "pairs_published": published,
                       "endpoint_pairs_completed_by": want_second,
                       "holds": bool(endpoint_pairs) and all(
                           p["arrived_second"] == want_second for p in endpoint_pairs)})
    orders = {t["order"] for t in traces}
    return {"traces": traces,
            "holds": orders == {"payment-first", "signal-first"}
            and all(t["holds"] for t in traces)}


# ---------------------------------------------------------------------------- traces
def metrics_series(store: Store, hot_key: str | None) -> list[dict]:
    """One point per committed batch: the worker's source-time clock, both input watermarks,
    the risk partitions' watermarks, idleness, state and the hot key's share."""
    out = []
    for m in store.metrics_trace(PIPELINE):
        st = m.get("state", {})
        hot = (m.get("top_keys") or {}).get(hot_key) if hot_key else None
        out.append({
            "seq": m["seq"], "clock_us": m["clock_us"], "clock": us_to_iso(m["clock_us"]),
            "payment_wm_us": finite(m["input_wm"].get("payments")),
            "risk_wm_us": finite(m["input_wm"].get("risk_signals")),
            "end_of_stream": m["input_wm"].get("risk_signals", 0) >= POS_INF,
            "risk_partition_wm_us": [iso_or_none(v) for v in
                                     m.get("partition_wm", {}).get("risk_signals", [])],
            "idle_risk_partitions": m.get("idle_partitions", {}).get("risk_signals", []),
            "state_records": st.get("state_records", 0), "state_bytes": st.get("state_bytes", 0),
            "hot_key_records": (hot["payments"] + hot["signals"]) if hot else 0,
            "hot_key_bytes": hot["bytes"] if hot else 0,
            "checkpoint": m.get("checkpoint") or {},
        })
    return out


def idleness_decisions(store: Store) -> list[dict]:
    out = []
    for j in store.journal_after(PIPELINE, 0):
        for i, topic, part, idle in loads(j["idleness"]):
            out.append({"batch_seq": j["seq"], "record_in_batch": i,
                        "batch_clock": us_to_iso(j["clock_us"]), "topic": topic,
                        "partition": part, "idle": idle})
    return out


def _held_spans(series: list[dict]) -> list[dict]:
    """Stretches of source time over which risk_wm stood still while the clock advanced."""
    spans, start = [], None
    for a, b in zip(series, series[1:], strict=False):
        if b["end_of_stream"]:
            break
        same = a["risk_wm_us"] == b["risk_wm_us"]
        if same and start is None:
            start = a
        if not same and start is not None:
            spans.append((start, a))
            start = None
    if start is not None:
        last = [p for p in series if not p["end_of_stream"]][-1]
        spans.append((start, last))
    return [{"risk_wm": us_to_iso(s["risk_wm_us"]) if s["risk_wm_us"] else "-inf",
             "from_clock": s["clock"], "to_clock": e["clock"],
             "minutes": round((e["clock_us"] - s["clock_us"]) / 60e6, 1)}
            for s, e in spans]


def _run_summary(series: list[dict], peak: dict) -> dict:
    """`peak` is the operator's own peak (tracked per record); the series is per batch."""
    live = [p for p in series if not p["end_of_stream"]]
    lags = [(p["clock_us"] - p["risk_wm_us"]) / 60e6 for p in live if p["risk_wm_us"]]
    first = next((p for p in live if p["risk_wm_us"] is not None), None)
    held = sorted(_held_spans(series), key=lambda s: -s["minutes"])
    top = max(live, key=lambda p: p["state_records"]) if live else None
    return {"risk_wm_first_set_at_clock": first["clock"] if first else None,
            "max_risk_wm_lag_minutes": round(max(lags), 1) if lags else None,
            "longest_risk_wm_hold": held[0] if held else None,
            "peak_state_records": peak.get("records", 0),
            "peak_state_bytes": peak.get("bytes", 0),
            "largest_snapshot_at_clock": top["clock"] if top else None}


def idle_partition(default: Store, idle: Store, manifest: dict, idle_after_us: int,
                   default_res, idle_res, hot_key: str) -> dict:
    case = manifest["cases"]["idle_partition"]
    sd, si = metrics_series(default, hot_key), metrics_series(idle, hot_key)
    decisions = idleness_decisions(idle)
    d_st, i_st = default_res.metrics["state"], idle_res.metrics["state"]
    d_sum, i_sum = _run_summary(sd, d_st["peak"]), _run_summary(si, i_st["peak"])
    decisions_default = idleness_decisions(default)
    idle_part = [d for d in decisions if d["topic"] == case["topic"]
                 and d["partition"] == case["partition"]]
    return {
        "partition": f"{case['topic']}:{case['partition']}", "merchant": case["merchant"],
        "quiet_from": case["quiet_from"], "burst_at": case["burst_at"],
        "idle_after_minutes": idle_after_us / 60e6,
        "default": {**d_sum, "idleness_decisions": decisions_default,
                    "late_queued": d_st.get("late_queued"),
                    "late_joined": d_st.get("late_joined")},
        "idle_after": {**i_sum, "idleness_decisions": decisions,
                       "late_queued": i_st.get("late_queued"),
                       "late_joined": i_st.get("late_joined")},
        "series": {"default": sd, "idle_after": si},
        # The default holds risk_wm back (no idleness is ever decided) and so keeps more
        # state; the opt-in run marks the quiet partition idle and cleans up sooner.
        "holds": not decisions_default and bool(idle_part)
        and d_sum["peak_state_records"] > i_sum["peak_state_records"]
        and (d_sum["max_risk_wm_lag_minutes"] or 0) > (i_sum["max_risk_wm_lag_minutes"] or 0),
    }


def hot_key(default_res, idle_res, series: list[dict], hot: str) -> dict:
    peak = dict(default_res.metrics["state"]["peak"])
    top = max(series, key=lambda p: p["hot_key_records"]) if series else None
    return {"merchant": hot, "peak": peak, "peak_idle_after": idle_res.metrics["state"]["peak"],
            "hot_key_share_of_peak_records": round(peak["hot_key_records"] / peak["records"], 3)
            if peak.get("records") else None,
            "hot_key_trace_peak": {"records": top["hot_key_records"], "bytes": top["hot_key_bytes"],
                                   "at_clock": top["clock"]} if top else None,
            "holds": peak.get("hot_key") == hot and peak.get("records", 0) > 0}


def checkpoint_section(drained: dict | None, final: dict | None, series: list[dict]) -> dict:
    def shape(ck):
        if ck is None:
            return None
        return {"id": ck["id"], "journal_seq": ck["journal_seq"], "size_bytes": ck["size_bytes"],
                "duration_ms": ck["duration_ms"], "serializer": ck["serializer"],
                "state_schema": ck["state_schema"], "meta": loads(ck["meta"])}
    sizes, seen = [], set()
    for p in series:
        ck = p["checkpoint"]
        if ck and ck.get("id_journal_seq") not in seen:
            seen.add(ck["id_journal_seq"])
            sizes.append({"journal_seq": ck["id_journal_seq"], "size_bytes": ck["size_bytes"],
                          "duration_ms": ck["duration_ms"], "clock": p["clock"]})
    d, f = shape(drained), shape(final)
    need = ("positions", "source", "watermarks", "rule_version", "serializer", "state_schema",
            "code_revision", "state_bytes", "size_bytes", "duration_ms")
    return {"drained": d, "final": f, "checkpoints_over_time": sizes,
            "max_size_bytes": max((s["size_bytes"] for s in sizes), default=None),
            "max_duration_ms": max((s["duration_ms"] for s in sizes), default=None),
            "holds": d is not None and all(k in d["meta"] for k in need)
            and d["meta"]["state_records"] > 0}


def provisional_retractions(store: Store) -> dict:
    by_payment: dict[str, list[dict]] = defaultdict(list)
    for f in store.facts(PIPELINE, "outcome"):
        by_payment[f["logical_key"]].append(f)
    rows = []
    never_matched = 0
    for pid, facts in sorted(by_payment.items()):
        statuses = [f["status"] for f in facts]
        if "provisional" in statuses and "final" in statuses and "retracted" not in statuses:
            never_matched += 1
        if "retracted" not in statuses:
            continue
        first_prov = next(f for f in facts if f["status"] == "provisional")
        first_retr = next(f for f in facts if f["status"] == "retracted")
        last = loads(facts[-1]["payload"])
        rows.append({"payment_id": pid, "merchant_id": last["merchant_id"],
                     "payment_time": last["payment_time"], "statuses": statuses,
                     "provisional_batch": first_prov["batch_seq"],
                     "retracted_batch": first_retr["batch_seq"],
                     "final_status": facts[-1]["status"], "final_match_count":
                     last["match_count"]})
    ordered = all(r["provisional_batch"] <= r["retracted_batch"] and
                  r["statuses"].index("provisional") < r["statuses"].index("retracted")
                  for r in rows)
    return {"retracted": rows, "count": len(rows),
            "provisional_then_final_unmatched": never_matched,
            "holds": bool(rows) and ordered
            and all(r["final_match_count"] > 0 for r in rows if r["final_status"] == "final")}


def ttl_run(default: Store, ttl: Store, manifest: dict, ttl_us: int, ttl_res) -> dict:
    case = manifest["cases"]["ttl"]
    key = (case["payment_id"], case["signal_id"])
    dp, tp = current_pairs(default), current_pairs(ttl)
    missing = sorted(set(dp) - set(tp))
    extra = sorted(set(tp) - set(dp))
    arch = {(r["topic"], r["event_id"]): r for r in archive_rows(ttl, case["merchant"])}
    pay, sig = arch.get(("payments", key[0])), arch.get(("risk_signals", key[1]))

    def outcome(store):
        for r in store.current(PIPELINE, "outcome"):
            if r["logical_key"] == key[0]:
                p = loads(r["payload"])
                return {"status": r["status"], "match_count": p["match_count"]}
        return None
    return {
        "ttl_minutes": ttl_us / 60e6, "named_case": {
            "payment_id": key[0], "signal_id": key[1], "merchant": case["merchant"],
            "signal_minutes_before_payment": case["signal_minutes_before_payment"],
            "signal_arrival": us_to_iso(sig["arrival_us"]) if sig else None,
            "payment_arrival": us_to_iso(pay["arrival_us"]) if pay else None,
            "pair_id_default_run": dp[key]["pair_id"] if key in dp else None,
            "present_in_default_run": key in dp, "present_in_ttl_run": key in tp,
            "outcome_default_run": outcome(default), "outcome_ttl_run": outcome(ttl)},
        "pairs_default_run": len(dp), "pairs_ttl_run": len(tp),
        "missing_in_ttl_run": [{"payment_id": p, "signal_id": s,
                                "pair_id": dp[(p, s)]["pair_id"]} for p, s in missing],
        "extra_in_ttl_run": [list(k) for k in extra],
        "ttl_evictions": ttl_res.metrics["state"].get("ttl_evictions"),
        "holds": key in dp and key not in tp and not extra,
    }


def replay_queue(store: Store) -> list[dict]:
    return [{"id": q["id"], "queue_date": q["queue_date"], "topic": q["topic"],
             "position": f"{q['topic']}:{q['partition']}@{q['offset']}",
             "event_id": q["event_id"], "revision": q["revision"], "key": q["key"],
             "event_time": us_to_iso(q["event_us"]), "reason": q["reason"],
             "watermark_at_arrival": us_to_iso(q["watermark_at_arrival_us"]),
             "status": q["status"], "status_reason": q["status_reason"],
             "generation_id": q["generation_id"], "detail": loads(q["detail"])}
            for q in store.queue(PIPELINE)]


def queue_section(default: Store, idle: Store, manifest: dict) -> dict:
    old = manifest["cases"]["old_correction"]
    entries = replay_queue(default)
    mine = [e for e in entries if e["event_id"] == old["payment_id"]
            and e["revision"] == old["revision"]]
    return {"default_run": entries, "idle_after_run": replay_queue(idle),
            "old_correction": {**old, "queued": bool(mine),
                               "entry": mine[0] if mine else None},
            "holds": len(mine) == 1 and mine[0]["status"] == "pending"}


def accounting_section(stores: dict[str, Store]) -> dict:
    runs = {name: st.accounting(PIPELINE) for name, st in stores.items()}
    return {"default_run": runs.get("default", []),
            "closes_per_run": {name: all(r["closes"] for r in rows) and bool(rows)
                               for name, rows in runs.items()},
            "holds": all(all(r["closes"] for r in rows) and rows for rows in runs.values())}
