"""evidence.md: the join's evidence packet as a page a release reviewer reads top to bottom.
Every number on it comes from the evidence dict (and so from the stores); evidence.json holds
the full lists where the page shows a sample."""

from __future__ import annotations

from collections.abc import Callable

import orjson

from .markdown import checks_and_runs
from .markdown import table as _table
from .markdown import verdict as _verdict

TITLES = {
    "endpoints": "1. Endpoint tests (both arrival orders)",
    "asymmetric_arrival": "2. Asymmetric-arrival trace",
    "idle_partition": "3. Idle-partition trace",
    "hot_key": "4. Hot-key state peak",
    "checkpoint": "5. Checkpoint metadata",
    "crash_replay": "6. Crash and replay: output IDs",
    "provisional_retractions": "7. Provisional retractions",
    "ttl": "8. Too-short TTL run: the missing valid match",
    "replay_queue": "9. Dated replay queue",
    "accounting": "10. Accounting per topic, partition and offset range",
    "historical_rebuild": "11. Historical-rebuild diff",
}




def _short(pid: str | None) -> str:
    return f"`{pid[:12]}…`" if pid else ""


def _endpoints(e: dict) -> list[str]:
    lines = ["Each case is one payment with signals exactly on both bounds (t-47m, t+8m) and one "
             "second outside each. Present pairs are read from the current view; the pair ID "
             "is checked against hash(rule_version, payment id+rev, signal id+rev).", ""]
    for c in e["cases"]:
        p = c["payment"]
        lines.append(f"**{c['case']}** ({c['order']}, {c['merchant']}): payment "
                     f"`{p['payment_id']}` at {p['event_time']}, arrived {p['arrival_time']} "
                     f"(batch {p['read_in_batch']}). Arrival order "
                     f"{_verdict(c['arrival_order_holds'])}; "
                     f"results {_verdict(c['results_hold'])}.")
        lines.append("")
        lines += _table(["signal", "offset", "arrived", "expected", "present", "pair_id",
                         "published in batch"],
                        [[s["signal_id"], s["offset_from_payment"], s["arrival_time"],
                          s["expected"], s["present"], s["pair_id"], s["pair_batch_seq"]]
                         for s in c["signals"]])
    return lines


def _arrival(a: dict) -> list[str]:
    lines = ["Every record of the endpoint merchants in the order the worker consumed it "
             "(arrival, topic, partition, offset), and each pair with the batch that published "
             "it. A pair is published in the batch of whichever side arrives second.", ""]
    for t in a["traces"]:
        lines.append(f"**{t['case']}** ({t['order']}, {t['merchant']}): endpoint pairs completed "
                     f"by the arriving {t['endpoint_pairs_completed_by']}: {_verdict(t['holds'])}.")
        lines.append("")
        lines += _table(["step", "arrived", "event time", "position", "event", "batch"],
                        [[c["step"], c["arrival_time"], c["event_time"], c["position"],
                          f"{c['event_id']} r{c['revision']}", c["batch_seq"]]
                         for c in t["consumed"]])
        lines += _table(["pair", "pair_id", "batch", "batch clock", "steps (payment, signal)"],
                        [[f"{p['payment_id']} x {p['signal_id']}", _short(p["pair_id"]),
                          p["batch_seq"], p["batch_clock"],
                          f"{p['payment_step']}, {p['signal_step']}"]
                         for p in t["pairs_published"]])
    return lines


def _idle(i: dict) -> list[str]:
    d, o = i["default"], i["idle_after"]
    lines = [f"{i['partition']} carries {i['merchant']} only; it goes quiet after "
             f"{i['quiet_from']} and its backlog arrives at {i['burst_at']}. The default run "
             f"never marks a partition idle, so risk_wm waits for it; the opt-in run "
             f"(idle_after = {i['idle_after_minutes']:g} min of source time, caught-up partitions "
             f"only) excludes it. Pictures: `watermarks.png`, `idle_partition.png`, `state.png`.",
             ""]
    rows = []
    for label, r in (("default", d), ("idle_after", o)):
        hold = r["longest_risk_wm_hold"] or {}
        rows.append([label, r["risk_wm_first_set_at_clock"], r["max_risk_wm_lag_minutes"],
                     f"{hold.get('risk_wm')} for {hold.get('minutes')} min "
                     f"({hold.get('from_clock', '')[11:19]}-{hold.get('to_clock', '')[11:19]})",
                     r["peak_state_records"], r["peak_state_bytes"], len(r["idleness_decisions"]),
                     r["late_joined"], r["late_queued"]])
    lines += _table(["run", "risk_wm first set", "max risk lag (min)", "longest risk_wm hold",
                     "peak records", "peak bytes", "idle decisions", "late joined",
                     "late queued"], rows)
    lines.append("Idleness decisions journaled by the idle_after run (replayed verbatim on "
                 "restore):")
    lines.append("")
    lines += _table(["batch", "record in batch", "batch clock", "partition", "idle"],
                    [[x["batch_seq"], x["record_in_batch"], x["batch_clock"],
                      f"{x['topic']}:{x['partition']}", x["idle"]]
                     for x in o["idleness_decisions"]])
    lines.append("State records over source time (every 10th batch):")
    lines.append("")
    sd, si = i["series"]["default"], i["series"]["idle_after"]
    rows = [[a["clock"], a["state_records"], b["state_records"],
             ",".join(map(str, b["idle_risk_partitions"]))]
            for a, b in list(zip(sd, si, strict=False))[::10] if not a["end_of_stream"]]
    lines += _table(["clock", "default records", "idle_after records",
                     "idle risk partitions (idle_after)"], rows)
    return lines


def _hot(h: dict) -> list[str]:
    p = h["peak"]
    return [f"Peak over the default run: {p['records']} records / {p['bytes']} bytes in state; "
            f"hottest key {p['hot_key']} peaked at {p['hot_key_records']} records / "
            f"{p['hot_key_bytes']} bytes ({h['hot_key_share_of_peak_records']:.0%} of the total "
            f"peak). Hot key expected: {h['merchant']}.", "",
            f"With idle_after the peak is {h['peak_idle_after']['records']} records / "
            f"{h['peak_idle_after']['bytes']} bytes; hot key {h['peak_idle_after']['hot_key']} "
            f"{h['peak_idle_after']['hot_key_records']} records / "
            f"{h['peak_idle_after']['hot_key_bytes']} bytes. The hot key's line over time is "
            f"in `state.png`.", ""]


def _checkpoint(c: dict) -> list[str]:
    lines = ["The drained run's checkpoint (watermarks not advanced, live state held) and the "
             "final one. Meta JSON as stored:", ""]
    for label in ("drained", "final"):
        ck = c[label]
        if ck is None:
            continue
        lines.append(f"**{label}**: checkpoint {ck['id']} after journal batch "
                     f"{ck['journal_seq']}, {ck['size_bytes']} bytes compressed, "
                     f"{ck['duration_ms']} ms, {ck['meta'].get('state_records')} state records "
                     f"/ {ck['meta'].get('state_bytes')} bytes.")
        lines += ["", "```json", orjson.dumps(ck["meta"], option=orjson.OPT_INDENT_2 |
                                              orjson.OPT_SORT_KEYS).decode(), "```", ""]
    lines.append(f"{len(c['checkpoints_over_time'])} checkpoints over the run; largest "
                 f"{c['max_size_bytes']} bytes, slowest {c['max_duration_ms']} ms.")
    return lines + [""]


def _crash(c: dict) -> list[str]:
    lines = [f"`riskstream join run --batch-size {c['batch_size']} --checkpoint-every "
             f"{c['checkpoint_every']} --end-of-stream --crash-at {c['crash_at']}` in a "
             f"subprocess: exit {c['crash_exit_code']} ({c['crash_message']}). The last "
             f"checkpoint covered batch {c['checkpoint_before_crash_journal_seq']}; batches "
             f"{c['uncheckpointed_batches']} were in the sink but not in a checkpoint. The rerun "
             f"exited {c['rerun_exit_code']}, restored checkpoint id "
             f"{c['rerun_restored_from_checkpoint']} (written after batch "
             f"{c['checkpoint_before_crash_journal_seq']}), replayed {c['rerun_replayed_batches']} "
             f"journal batches: {c['rerun_facts_written']} facts written, "
             f"{c['rerun_facts_noop']} no-ops (same key, same hash), "
             f"{c['rerun_facts_rejected']} rejected.", "",
             f"- pair IDs written before the crash: {len(c['pairs_written_before_crash'])}; "
             f"after the rerun: {len(c['pairs_after_rerun'])} (full lists in evidence.json)",
             f"- one current row per logical pair ({c['current_pairs']} current pairs): "
             f"{_verdict(c['one_current_row_per_logical_pair'])}",
             f"- facts written before the crash kept unchanged: "
             f"{_verdict(c['facts_before_crash_kept_unchanged'])}",
             f"- fact set equals the uninterrupted run ({c['facts']}): "
             f"{_verdict(c['fact_set_equals_uninterrupted'])}",
             f"- current view equals the uninterrupted run: "
             f"{_verdict(c['current_view_equals_uninterrupted'])}",
             f"- sink exceptions: {c['sink_exceptions']}", "",
             "Pairs the sink received in the crashed batch, after the rerun:", ""]
    lines += _table(["logical pair", "pair_id", "current rows", "live publish facts", "status",
                     "written in batch"],
                    [[r["logical_pair"], r["pair_id"], r["current_rows"],
                      r["live_publish_facts"], r["status"], r["written_in_batch"]]
                     for r in c["crashed_batch_current_rows"]])
    return lines


def _retractions(r: dict, shown: int = 12) -> list[str]:
    lines = [f"{r['count']} payments went provisional -> retracted (their first match arrived "
             f"after them); {r['provisional_then_final_unmatched']} stayed unmatched and became "
             f"final with no match. From the outcome facts"
             + (f" (first {shown}; all in evidence.json)" if r["count"] > shown else "") + ":",
             ""]
    rows = sorted(r["retracted"], key=lambda x: (not x["payment_id"].startswith("pay-ep"),
                                                 x["provisional_batch"], x["payment_id"]))
    return lines + _table(["payment", "merchant", "payment time", "statuses",
                           "provisional batch", "retracted batch", "final matches"],
                          [[x["payment_id"], x["merchant_id"], x["payment_time"],
                            " -> ".join(x["statuses"]), x["provisional_batch"],
                            x["retracted_batch"], x["final_match_count"]]
                           for x in rows[:shown]])


def _ttl(t: dict) -> list[str]:
    n = t["named_case"]
    lines = [f"TTL = {t['ttl_minutes']:g} min of source time (opt-in demonstration mode). "
             f"Named case: `{n['payment_id']}` x `{n['signal_id']}` ({n['merchant']}), signal "
             f"{n['signal_minutes_before_payment']} min before the payment: a valid match. The "
             f"signal arrived {n['signal_arrival']}, the payment {n['payment_arrival']}; the TTL "
             f"evicted the signal first.", "",
             f"- default run: present = {n['present_in_default_run']}, pair_id "
             f"`{n['pair_id_default_run']}`, outcome {n['outcome_default_run']}",
             f"- TTL run: present = {n['present_in_ttl_run']}, outcome {n['outcome_ttl_run']} "
             f"**(the missing valid match)**",
             f"- pairs: default {t['pairs_default_run']}, TTL {t['pairs_ttl_run']}; "
             f"{len(t['missing_in_ttl_run'])} valid matches lost, "
             f"{len(t['extra_in_ttl_run'])} extra; {t['ttl_evictions']} TTL evictions", ""]
    return lines


def _queue(q: dict) -> list[str]:
    lines = ["Nothing that cannot apply live is forced through or dropped: it waits in the "
             "dated replay queue with its reason and the watermark at arrival.", ""]
    for label, rows in (("default run", q["default_run"]),
                        ("idle_after run", q["idle_after_run"])):
        lines.append(f"**{label}**:")
        lines.append("")
        lines += _table(["date", "event", "event time", "position", "reason", "wm at arrival",
                         "status"],
                        [[e["queue_date"], f"{e['event_id']} r{e['revision']}", e["event_time"],
                          e["position"], e["reason"], e["watermark_at_arrival"], e["status"]]
                         for e in rows])
    return lines


def _accounting(a: dict) -> list[str]:
    lines = ["read = accepted + duplicate + stale + quarantined + routed_to_repair, per "
             f"partition (default run). Closes in every run: {a['closes_per_run']}.", ""]
    cols = ["topic", "partition", "first_offset", "last_offset", "read", "accepted", "duplicate",
            "stale", "quarantined", "routed_to_repair", "closes"]
    return lines + _table(cols, [[r[c] for c in cols] for r in a["default_run"]])


def _rebuild(r: dict) -> list[str]:
    lines = [r["statement"] + ".", ""]
    if not r.get("published") and "published_view_diff" not in r:
        return lines
    lines.append(f"Repair mode: {r['mode']}. Published view diff (before -> after): "
                 f"{r['diff_counts']}.")
    lines.append("")
    d = r["published_view_diff"]
    rows = [["+ added", x["payment_id"], x["signal_id"], x["signal_time"], _short(x["pair_id"])]
            for x in d["added"]]
    rows += [["- retired", x["payment_id"], x["signal_id"], x["signal_time"],
              _short(x["pair_id"])] for x in d["retired"]]
    rows += [["~ revised", x["payment_id"], x["signal_id"], x["signal_time"],
              f"{_short(x['replaces_pair_id'])} -> {_short(x['pair_id'])}"] for x in d["revised"]]
    lines += _table(["change", "payment", "signal", "signal time", "pair_id"], rows)
    def moved(m, field):
        a, b = (m["before"] or {}).get(field), (m["after"] or {}).get(field)
        return a if a == b else f"{a} -> {b}"
    lines.append("Merchant totals (published outcomes and pairs), merchants that changed:")
    lines.append("")
    lines += _table(["merchant", "payments", "matched payments", "matched amount (cents)",
                     "pairs"],
                    [[m["merchant"], moved(m, "payments"), moved(m, "matched_payments"),
                      moved(m, "matched_amount_cents"), moved(m, "pairs")]
                     for m in r["merchant_totals"]])
    for run in r.get("runs", []):
        if "gate" in run:
            lines.append(f"Gate conditions for {run['generation_id']}: {run['gate']}")
    oc = r["old_correction"]["outcome"]

    def outcome(o):
        if not o:
            return "none"
        return (f"revision {o['payment_rev']} at {o['payment_time']}, {o['status']}, "
                f"{o['match_count']} matches, {o['amount_cents']} cents")
    lines += ["", f"Outcome of `{r['old_correction']['payment_id']}`: {outcome(oc['before'])} "
              f"-> {outcome(oc['after'])}. Its queue entry now: "
              + "; ".join(f"{q['status']} ({q['status_reason']})" for q in r["queue_after"])
              + ".", ""]
    lines += _table(["generation", "interval", "status", "reason"],
                    [[g["generation_id"], f"{g['interval_key']} [{g['interval_start']}, "
                      f"{g['interval_end']}]", g["status"], g["reason"]]
                     for g in r["generations"]])
    return lines


RENDER: dict[str, Callable[[dict], list[str]]] = {
          "endpoints": _endpoints, "asymmetric_arrival": _arrival, "idle_partition": _idle,
          "hot_key": _hot, "checkpoint": _checkpoint, "crash_replay": _crash,
          "provisional_retractions": _retractions, "ttl": _ttl, "replay_queue": _queue,
          "accounting": _accounting, "historical_rebuild": _rebuild}


def render(ev: dict) -> str:
    p = ev["packet"]
    lines = ["# Interval join: evidence packet", "",
             f"Rule {p['rule_version']}; seed {p['seed']} ({p['events']} events); settings "
             f"{p['settings']}. Built in {p['timings_s'].get('total')} s.", ""]
    lines += checks_and_runs(ev)
    for name, title in TITLES.items():
        sec = ev[name]
        lines += [f"## {title}", "", f"Verdict: **{_verdict(sec.get('holds'))}**.", ""]
        lines += RENDER[name](sec)
    lines += ["## Pictures", ""]
    for name, pic in ev.get("pictures", {}).items():
        lines.append(f"![{name}]({pic['file']})")
        lines.append("")
    return "\n".join(lines)
