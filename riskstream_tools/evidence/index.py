"""The evidence index: one page (`index.html`, with `index.json`) over every packet `make demo`
writes, listing each claim of the seed briefs with PASS or FAIL from the packet's own result
check (never from a job status), and links to the figures and files that show it.

A claim whose result is missing is a FAIL: an index that cannot see a check does not vouch
for it."""

from __future__ import annotations

import html
import os
from dataclasses import asdict, dataclass, field

import orjson

SEEDS = {
    "000": "recover a payment-risk interval join",
    "001": "account-hour ledger with effective-dated categories",
    "004": "late receipts scored by a pinned model",
}


# The packet checks the claims below decide from (any other check is listed as its own claim).
JOIN_CHECKS = {"endpoints", "asymmetric_arrival", "idle_partition", "hot_key", "checkpoint",
               "crash_replay", "provisional_retractions", "ttl", "replay_queue", "accounting",
               "drain_then_finalize_equals_one_pass", "historical_rebuild"}
LEDGER_CHECKS = {"named_windows_corrected", "oracle_agrees", "backlog_drained",
                 "scenario_reconciles", "pressure_reconciles", "crash_replay_idempotent"}


@dataclass
class Claim:
    claim_id: str
    seed: str
    claim: str
    passed: bool
    result: str  # what the check found, in one line
    links: list[str] = field(default_factory=list)  # paths relative to the index


def _check(checks: dict, name: str) -> bool:
    return checks.get(name) is True


def join_claims(ev: dict, packet_dir: str) -> list[Claim]:
    """Seed 000 from the join packet (`packet_dir` relative to the index)."""
    c = ev.get("checks", {})
    md = f"{packet_dir}/evidence.md"
    pic = lambda name: f"{packet_dir}/{name}.png"  # noqa: E731
    ck = ((ev.get("checkpoint") or {}).get("drained") or {}).get("meta") or {}
    rebuild = ev.get("historical_rebuild") or {}
    counts = rebuild.get("diff_counts") or {}
    crash = ev.get("crash_replay") or {}
    ttl = ev.get("ttl") or {}
    named = ttl.get("named_case") or {}
    peak = (ev.get("hot_key") or {}).get("peak") or {}
    hold = ((ev.get("idle_partition") or {}).get("default") or {}).get(
        "longest_risk_wm_hold") or {}
    return [
        Claim("join.endpoints", "000", "A signal exactly on each interval endpoint matches; "
              "one second outside does not (both arrival orders).",
              _check(c, "endpoints"), "endpoint table checked against the rule", [md]),
        Claim("join.asymmetric_arrival", "000", "Asymmetric arrival gives the same pairs.",
              _check(c, "asymmetric_arrival"), "trace compared", [md, pic("watermarks")]),
        Claim("join.idle_partition", "000", "An idle risk partition holds the watermark and "
              "delays cleanup; opt-in idleness resumes it.", _check(c, "idle_partition"),
              f"risk watermark held {hold.get('minutes', '?')} min by the idle partition",
              [md, pic("idle_partition"), pic("watermarks")]),
        Claim("join.hot_key", "000", "Hot-key state peak is observable.", _check(c, "hot_key"),
              f"peak {peak.get('records', '?')} records / {peak.get('bytes', '?')} B; hot key "
              f"{peak.get('hot_key', '?')} {peak.get('hot_key_records', '?')} records",
              [md, pic("state")]),
        Claim("join.checkpoint", "000", "Checkpoints hold positions, source identity, "
              "watermarks, rule version, serializer, code revision, size and duration.",
              _check(c, "checkpoint"),
              f"code revision {ck.get('code_revision', '?')}, "
              f"{len(ck.get('positions') or {})} source positions", [md]),
        Claim("join.crash_replay", "000", "A crash after the sink write and before the "
              "checkpoint, then restore and replay, leaves one current row per logical pair.",
              _check(c, "crash_replay"),
              f"crash exit {crash.get('crash_exit_code')}, rerun restored from checkpoint "
              f"{crash.get('rerun_restored_from_checkpoint')}: {crash.get('rerun_facts_noop')} "
              f"no-ops, {crash.get('rerun_facts_rejected')} rejected, "
              f"{crash.get('current_pairs')} current pairs", [md]),
        Claim("join.provisional_retractions", "000", "Provisional unmatched outcomes are "
              "retracted when a match arrives; finals only on eviction.",
              _check(c, "provisional_retractions"), "outcome chains checked", [md]),
        Claim("join.ttl", "000", "A too-short TTL run loses a valid match (shown).",
              _check(c, "ttl"),
              f"{named.get('payment_id')} x {named.get('signal_id')} missing with a "
              f"{ttl.get('ttl_minutes')}-min TTL; {len(ttl.get('missing_in_ttl_run') or [])} "
              "valid matches lost", [md]),
        Claim("join.replay_queue", "000", "An old correction goes to the dated replay queue, "
              "not through the live join.", _check(c, "replay_queue"), "queue rows checked",
              [md]),
        Claim("join.accounting", "000", "read = accepted + duplicate + stale + quarantined + "
              "routed_to_repair, per source range.", _check(c, "accounting"),
              "every range closes" if _check(c, "accounting") else "a range does not close",
              [md]),
        Claim("join.drain_then_finalize", "000", "Draining then finalizing gives what one "
              "pass gives.", _check(c, "drain_then_finalize_equals_one_pass"),
              "fact sets compared", [md]),
        Claim("repair.rebuild_diff", "000", "The Dagster repair loop rebuilds the old "
              "correction's interval, validates it with blocking checks and publishes it "
              "atomically; the last-good generation stays readable until then.",
              _check(c, "historical_rebuild"),
              f"{rebuild.get('statement', 'no rebuild ran')}; diff "
              + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())), [md]),
    ]


def ledger_claims(ev: dict, packet_dir: str) -> list[Claim]:
    c = ev.get("checks", {})
    md = f"{packet_dir}/evidence.md"
    ck = ((ev.get("checkpoint") or {}).get("scenario")) or {}
    return [
        Claim("ledger.revision_history", "001", "Every named window's late change is published "
              "as a corrected revision with a predecessor link.",
              _check(c, "named_windows_corrected"), "revision history checked",
              [md, f"{packet_dir}/revisions.png"]),
        Claim("ledger.temporal_join", "001", "Totals and risk counts agree with a reference "
              "pass over the recording (effective-dated categories).",
              _check(c, "oracle_agrees"), "reference comparison", [md]),
        Claim("ledger.backlog_drain", "001", "A throttled backlog drains; its age and event-time "
              "lag are reported apart.", _check(c, "backlog_drained"), "backlog series checked",
              [md, f"{packet_dir}/backlog_drain.png"]),
        Claim("ledger.reconciliation", "001", "Accepted, quarantined and repaired events "
              "reconcile (scenario and pressure runs).",
              _check(c, "scenario_reconciles") and _check(c, "pressure_reconciles"),
              "both runs reconcile" if _check(c, "scenario_reconciles")
              and _check(c, "pressure_reconciles") else "a run does not reconcile", [md]),
        Claim("ledger.checkpoint_restore", "001", "A checkpoint/restore transcript and sink "
              "idempotency: a crashed run's replay reports no-ops and no rejections.",
              _check(c, "crash_replay_idempotent"), "crash and replay compared", [md]),
        Claim("ledger.code_revision_positions", "001", "The exact source positions and code "
              "revision are recorded so the release is reproducible.",
              bool(ck.get("code_revision")) and bool(ck.get("positions")),
              f"code revision {ck.get('code_revision')}, positions "
              f"{len(ck.get('positions') or {})} partitions", [md]),
    ]


def receipts_claims(packet: dict, packet_dir: str, pictures: list[str]) -> list[Claim]:
    """Seed 004 from the receipts incident packet."""
    gate = packet.get("release_gate") or {}
    links = [f"{packet_dir}/incident.txt", f"{packet_dir}/incident.json"] + [
        f"{packet_dir}/{p}" for p in pictures]
    disconnects = packet.get("store_disconnects") or []
    gaps = packet.get("output_gaps") or {}
    repaired = packet.get("repaired_decisions") or []
    state = packet.get("state") or {}
    ranges = packet.get("input_ranges") or []
    open_gaps = {k: len(v) for k, v in gaps.items() if v}
    ref = packet.get("reference_check") or {}
    return [
        Claim("receipts.release_gate", "004", "The release gate accepts only when live and "
              "repaired decisions reconcile: one active decision per eligible key.",
              gate.get("result") == "accept:reconciled" and gate.get("eligible_receipts", 0) > 0
              and not gate.get("duplicate_outputs"),
              f"{gate.get('result')}: {gate.get('live_outputs')} live and "
              f"{gate.get('repaired_outputs')} repaired outputs for "
              f"{gate.get('eligible_receipts')} eligible receipts", links),
        Claim("receipts.output_gaps", "004", "No output gaps: nothing missing, extra or "
              "duplicated, and every revision chain complete.", not open_gaps,
              "no gaps" if not open_gaps else f"gaps {open_gaps}", links),
        Claim("receipts.repaired_decisions", "004", "A deliberate correction carries a new "
              "scoring revision and a predecessor link.",
              any(r.get("predecessor_key") for r in repaired),
              f"{len(repaired)} repaired decision(s), "
              f"{sum(1 for r in repaired if r.get('predecessor_key'))} with a predecessor link",
              links),
        Claim("receipts.incident", "004", "The incident shows when a store disconnected, not "
              "just when its uploads arrived.", bool(disconnects) and all(
                  d.get("offline_from") for d in disconnects),
              "; ".join(f"{d.get('store_id')} offline from {d.get('offline_from')}"
                        for d in disconnects) or "no disconnect found", links),
        Claim("receipts.reference_check", "004", "Live decisions equal a reference run in "
              "occurrence order with the pinned model.",
              bool(ref.get("receipts")) and ref.get("equal") == ref.get("receipts")
              and not (ref.get("differ") or ref.get("missing") or ref.get("extra")),
              f"{ref.get('equal')} of {ref.get('receipts')} receipts equal; differ "
              f"{len(ref.get('differ') or [])}, missing {len(ref.get('missing') or [])}, "
              f"extra {len(ref.get('extra') or [])}", links),
        Claim("receipts.code_revision_positions", "004", "Input ranges, state and model "
              "revisions are published with the code revision.",
              bool(state.get("code_revision")) and bool(ranges),
              f"code revision {state.get('code_revision')}, {len(ranges)} input range(s)",
              links),
    ]


def other_checks(pipeline: str, seed: str, checks: dict, known: set[str], link: str
                 ) -> list[Claim]:
    """Checks a packet reports that no claim above names: listed too, so none is unseen."""
    return [Claim(f"{pipeline}.{name}", seed, f"{pipeline} packet check `{name}`.",
                  value is True, "holds" if value is True else "does not hold", [link])
            for name, value in sorted(checks.items()) if name not in known]


def ui_links(ui_dir: str, root: str) -> list[str]:
    if not os.path.isdir(os.path.join(root, ui_dir)):
        return []
    return sorted(f"{ui_dir}/{f}" for f in os.listdir(os.path.join(root, ui_dir)))


def write_index(root: str, claims: list[Claim], extra_links: list[str]) -> dict:
    """index.json and index.html in `root`; returns the index."""
    index = {"all_pass": all(c.passed for c in claims) and bool(claims),
             "passed": sum(c.passed for c in claims), "failed": sum(not c.passed for c in claims),
             "seeds": SEEDS, "claims": [asdict(c) for c in claims], "ui": extra_links}
    with open(os.path.join(root, "index.json"), "wb") as fh:
        fh.write(orjson.dumps(index, option=orjson.OPT_INDENT_2))
    e = html.escape
    rows = "\n".join(
        f"<tr class={'pass' if c.passed else 'fail'}><td>{'PASS' if c.passed else 'FAIL'}</td>"
        f"<td>{e(c.seed)}</td><td>{e(c.claim_id)}</td><td>{e(c.claim)}</td>"
        f"<td>{e(c.result)}</td><td>"
        + " ".join(f"<a href='{e(link)}'>{e(os.path.basename(link))}</a>" for link in c.links)
        + "</td></tr>" for c in claims)
    shots = "".join(f"<figure><img src='{e(s)}' width=640><figcaption>{e(os.path.basename(s))}"
                    "</figcaption></figure>" for s in extra_links if s.endswith(".png"))
    page = f"""<!doctype html><meta charset=utf-8><title>riskstream evidence</title>
<style>body{{font-family:sans-serif;margin:2em}}td{{padding:4px 8px;vertical-align:top}}
tr.pass td:first-child{{color:#070}}tr.fail td:first-child{{color:#b00;font-weight:bold}}</style>
<h1>riskstream evidence: {index['passed']} PASS, {index['failed']} FAIL</h1>
<p>Each claim of the seed briefs with the result check that decides it.</p>
<table><tr><th>result</th><th>seed</th><th>claim id</th><th>claim</th><th>what the check found</th>
<th>evidence</th></tr>
{rows}
</table>
<h2>The operator's page (from the browser test)</h2>
{shots or '<p>No screenshots: run the browser test (tests/test_orchestration_dagster_dev.py).</p>'}
"""
    with open(os.path.join(root, "index.html"), "w") as fh:
        fh.write(page)
    return index
