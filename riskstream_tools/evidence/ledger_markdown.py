"""evidence.md for the ledger's packet: the same content as evidence.json, shortened where a
list is long (the backlog trace stays in the JSON and the picture)."""

from __future__ import annotations

import orjson

from .markdown import checks_and_runs
from .markdown import table as _table
from .markdown import verdict as _verdict


def render(ev: dict) -> str:
    p = ev["packet"]
    pr = p["pressure"]
    L = ["# Ledger: evidence packet", "",
         f"Scenario: seed {p['seed']}, {p['background_payments']} background payments "
         f"({p['scenario_lines']} lines). Pressure: seed {pr['seed']}, {pr['payments']} payments "
         f"at {pr['rate_per_s']:g}/s ({pr['lines']} lines). Repair key: {p['repair_key']}. "
         f"Built in {p.get('elapsed_s')} s.", ""]
    L += checks_and_runs(ev, run_counts=("checkpoints",))

    b = ev["backlog"]
    L += ["## Backlog under a throttled sink", "",
          f"Verdict: **{_verdict(b['holds'])}** (the backlog reached the limit and drained; "
          f"every record read was committed).", "",
          "The calculation, as the run printed it (worker-clock time):", "", "```"]
    L += b["lines"]
    L += ["```", "",
          f"The metrics trace has one snapshot per committed batch ({len(b['trace'])} batches): "
          f"its largest backlog is {b['trace_max_backlog']} records (after a commit), its largest "
          f"backlog age {b['trace_max_age_s']:g} s. The throttle report's peak "
          f"({b['report'].get('peak_backlog')}) is measured per record read, between commits.",
          "", "![backlog_drain](backlog_drain.png)", ""]

    L += ["## Revision history of the named account-hours", "",
          f"Named by the scenario: {', '.join(ev['named_windows'])}. Rows as "
          f"`riskstream ledger windows --all` lists them, after the signed repair job "
          f"(repaired {len(ev['repair']['repaired'])}, held {len(ev['repair']['held'])}, "
          f"published {', '.join(ev['repair']['published']) or 'nothing'}).", ""]
    L += _table(["fact key", "status", "total_cents", "payments", "risk", "predecessor"],
                [[r["fact_key"], r["status"], r["total_cents"], r["payment_count"],
                  r["risk_count"], r["predecessor_key"]] for r in ev["revisions"]])
    L += ["![revisions](revisions.png)", ""]

    o = ev["oracle"]
    L += ["## Oracle", "",
          f"Verdict: **{_verdict(o['holds'])}**. The seed's `ledger_snapshot` over the log gives "
          f"{o['account_hours']} account-hours; the current view has {o['current_windows']}; "
          f"differing: {', '.join(o['differ']) or 'none'}.", ""]

    L += ["## Reconciliation per partition range", ""]
    for name, rec in ev["reconciliation"].items():
        L += [f"{name} store: **{_verdict(rec['holds'])}**", "", "```"]
        L += rec["equations"]
        L += ["```", ""]

    c = ev["crash_replay"]
    L += ["## Checkpoint, crash and restore: the sink is idempotent", "",
          f"Verdict: **{_verdict(c['holds'])}**. The scenario log run three times through the "
          f"command line with batches of {c['batch_size']} and a checkpoint every "
          f"{c['checkpoint_every']} records: uninterrupted, crashed with `--crash-at "
          f"{c['crash_at']}` (batch committed, no checkpoint after it: it wrote "
          f"{c['crashed_batch_facts']} facts), and rerun. The rerun restored checkpoint "
          f"{c['restored_from_checkpoint']['id'] if c['restored_from_checkpoint'] else '-'} "
          f"(journal {c['checkpointed_batch']}), replayed {c['rerun_replayed_batches']} "
          f"batch(es) from the journal and wrote the crashed batch's facts again: **no-op "
          f"{c['rerun_noop']}, rejected {c['rerun_rejected']}**, {c['sink_exceptions']} sink "
          f"exceptions; the fact set "
          f"{'equals' if c['fact_set_equals_uninterrupted'] else 'DIFFERS FROM'}"
          f" the uninterrupted run's ({c['facts']['after_rerun']} vs "
          f"{c['facts']['uninterrupted']} facts).", "",
          "Checkpoints before the rerun: " + ", ".join(
              f"{x['id']} at journal {x['journal_seq']}" for x in c["before_rerun"]["checkpoints"])
          + f" (last committed batch {c['before_rerun']['journal_seq']}); after: " + ", ".join(
              f"{x['id']} at journal {x['journal_seq']}" for x in c["after_rerun"]["checkpoints"])
          + f" (last committed batch {c['after_rerun']['journal_seq']}).", "",
          "Transcript:", "", "```"]
    for t in c["transcript"]:
        L.append(f"$ {t['command']}")
        L += t["stdout"]
        L += [f"(stderr) {line}" for line in t["stderr"]]
        L.append(f"(exit {t['exit_code']})")
    L += ["```", ""]

    L += ["## Checkpoint meta", ""]
    for name, ck in ev["checkpoint"].items():
        if ck is None:
            L += [f"{name}: no checkpoint.", ""]
            continue
        L += [f"{name}: checkpoint {ck['id']} at journal {ck['journal_seq']}, "
              f"{ck['serializer']} / {ck['state_schema']}, {ck['size_bytes']} bytes in "
              f"{ck['duration_ms']} ms; code revision `{ck['code_revision']}`.", "",
              "Source positions (next offset per topic:partition):", ""]
        L += _table(["topic:partition", "position"],
                    [[k, v] for k, v in sorted((ck["positions"] or {}).items())])
        L += ["<details><summary>full meta</summary>", "", "```json",
              orjson.dumps(ck["meta"], option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS
                           | orjson.OPT_NON_STR_KEYS).decode(),
              "```", "", "</details>", ""]
    return "\n".join(L)
