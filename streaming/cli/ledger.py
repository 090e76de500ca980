"""`riskstream ledger ...`: generate the scenario, run the ledger, read windows, repair and
reconcile."""

from __future__ import annotations

import os

import click
import orjson

from ..host.crash import CRASH_POINTS
from ..store.ops import loads
from .common import (echo_json, emit_rows, fail, format_option, full_checkpoint_after_option,
                     max_arrival_jump_option, open_store, overlap_commits_option,
                     batches_behind_checkpoint_option, run_settings,
                     source_option, store_option)
from .follow import follow_options, follow_settings

WINDOW_COLUMNS = ["account_id", "event_hour", "revision", "total_cents", "payment_count",
                  "risk_count", "status", "fact_key", "predecessor_key"]


@click.group()
def ledger() -> None:
    """Account-hour risk ledger: revisions, temporal merchant join, signed repairs."""


@ledger.command()
@source_option
@store_option
@click.option("--sink-rate", type=float, default=None,
              help="Throttle: records per second of worker clock the sink commits.")
@click.option("--backlog-limit", type=int, default=None,
              help="With --sink-rate: backlog size at which the sink returns to capacity.")
@click.option("--sink-capacity", type=float, default=None,
              help="With --sink-rate: records/s after the limit (default: unlimited).")
@click.option("--crash-at", default=None, help=f"POINT:K, POINT in {', '.join(CRASH_POINTS)}")
@click.option("--checkpoint-every", type=int, default=1000, show_default=True)
@click.option("--batch-size", type=int, default=500, show_default=True)
@click.option("--end-of-stream", is_flag=True, help="Finalize every window.")
@max_arrival_jump_option
@overlap_commits_option
@batches_behind_checkpoint_option
@full_checkpoint_after_option
@follow_options
@click.option("--quiet", is_flag=True)
def run(source, store_url, sink_rate, backlog_limit, sink_capacity, crash_at, checkpoint_every,
        batch_size, end_of_stream, max_arrival_jump, overlap_commits, batches_behind_checkpoint,
        full_checkpoint_after,
        follow, max_batch_delay, worker, outage_limit, quiet):
    """Run (or resume) the ledger over a source until it is drained, or follow it."""
    from ..host.throttle import ThrottleSettings
    from ..pipelines.ledger import make_spec, run_extra
    from ..repairs.ledger import RepairKeyMissing, resolve_key
    from .join import run_pipeline
    try:
        key = resolve_key(store_url)  # before the store is opened: nothing read or written
    except RepairKeyMissing as exc:
        fail(str(exc), exc.exit_code)
    try:
        throttle = None
        if sink_rate is not None:
            throttle = ThrottleSettings(sink_rate, backlog_limit, sink_capacity)
        elif backlog_limit is not None or sink_capacity is not None:
            raise ValueError("--backlog-limit and --sink-capacity need --sink-rate")
    except ValueError as exc:
        fail(str(exc))
    settings = run_settings(source, store_url, crash_at, checkpoint_every, batch_size,
                            end_of_stream=end_of_stream, extra=run_extra(key), throttle=throttle,
                            max_arrival_jump=max_arrival_jump,
                            overlap_commits=overlap_commits,
                            batches_behind_checkpoint=batches_behind_checkpoint,
                            full_checkpoint_after=full_checkpoint_after, worker=worker)
    following = follow_settings(follow, max_batch_delay, worker, outage_limit, source)
    if following is not None:
        from .follow import follow_summary, run_follow
        click.echo(follow_summary("ledger", run_follow(make_spec(key), settings, following,
                                                       quiet)))
        return
    res = run_pipeline(make_spec(key), settings, quiet)
    for line in summary_lines(res):
        click.echo(line)


def summary_lines(res) -> list[str]:
    st = res.metrics.get("state", {})
    h = res.metrics.get("health", {})
    rate = res.records / res.elapsed_s if res.elapsed_s else 0
    lines = [
        f"ledger run: {res.records} records in {res.batches} batches ({res.replayed_batches} "
        f"replayed from the journal); facts written {res.facts_written}, no-op "
        f"{res.facts_noop}, rejected {res.facts_rejected}; checkpoints {res.checkpoints}; "
        f"{res.elapsed_s:.2f}s ({rate:,.0f} records/s)",
        f"  process: {h.get('process')}",
        f"  freshness: {h.get('freshness')}",
        f"  payments_wm {res.metrics['input_wm_iso'].get('payments')}  source head "
        f"{res.metrics.get('source_head')}  end_of_stream={res.end_of_stream}",
        f"  policy: watermark delay {h.get('watermark_delay')}, retention {h.get('retention')}, "
        f"max backlog age {h.get('max_backlog_age')}",
        f"  revisions {st.get('revisions')} (provisional {st.get('provisional')}, revised "
        f"{st.get('revised')}, final {st.get('final')}); open windows {st.get('open_windows')}; "
        f"identities {st.get('identities')}; repair requests {st.get('repair_requests')}; "
        f"duplicates {st.get('duplicates')}, conflicts {st.get('conflicts')}, stale "
        f"{st.get('stale')}, category versions rejected {st.get('category_rejected')}",
    ]
    lines.extend(res.backlog_lines)
    return lines


def window_rows(store, include_all: bool) -> list[dict]:
    rows = []
    if include_all:
        for f in store.facts("ledger", "window"):
            rows.append({**loads(f["payload"]), "fact_key": f["fact_key"],
                         "predecessor_key": f["predecessor_key"]})
        return sorted(rows, key=lambda r: (r["account_id"], r["event_hour"], r["revision"]))
    keys = {}
    for r in store.current("ledger", "window"):
        keys[r["fact_key"]] = loads(r["payload"])
    preds = {f["fact_key"]: f["predecessor_key"] for f in store.facts("ledger", "window")
             if f["fact_key"] in keys}
    for k, p in keys.items():
        rows.append({**p, "fact_key": k, "predecessor_key": preds.get(k)})
    return sorted(rows, key=lambda r: (r["account_id"], r["event_hour"]))


@ledger.command()
@store_option
@click.option("--all", "include_all", is_flag=True, help="The whole revision history.")
@format_option
def windows(store_url, include_all, fmt):
    """Current revision per account-hour (or every revision with --all)."""
    emit_rows(window_rows(open_store(store_url), include_all), WINDOW_COLUMNS, fmt)


@ledger.command()
@store_option
@click.option("--retry-held", is_flag=True,
              help="Verify held requests again (a request still failing stays held); every "
                   "attempt is recorded.")
@click.option("--id", "ids", multiple=True,
              help="With --retry-held: only these held request IDs (repeatable).")
@click.option("--json", "as_json", is_flag=True)
def repair(store_url, retry_held, ids, as_json):
    """Verify signed repair requests, rebuild final account-hours and publish corrections.
    Exits 1 when anything is held (now or from an earlier run) or the ledger has open
    blockers or never ran."""
    from ..gates import pipeline_ran
    from ..repairs.ledger import (RepairKeyMissing, resolve_key, run_ledger_repairs)
    from ..store.tables_ledger import ledger_repair_requests as RR
    if ids and not retry_held:
        fail("--id needs --retry-held")
    try:
        key = resolve_key(store_url)
    except RepairKeyMissing as exc:
        fail(str(exc), exc.exit_code)
    if key.source == "dev":
        click.echo(f"ledger repair uses the development key ({key.describe()}): it applies only "
                   f"requests signed with that key", err=as_json)
    store = open_store(store_url)
    if not pipeline_ran(store, "ledger"):
        fail("nothing to repair: the ledger has committed no batch in this store", 1)
    if ids:
        known = {r["request_id"]: r["status"] for r in store.rows(
            RR.select().where(RR.c.request_id.in_(list(ids))))}
        wrong = [i for i in ids if known.get(i) != "held"]
        if wrong:
            fail("not held: " + ", ".join(f"{i} ({known.get(i, 'unknown')})" for i in wrong))
    s = run_ledger_repairs(store, key, retry_held=retry_held, ids=list(ids) or None)
    if as_json:
        echo_json(s)
    else:
        click.echo(f"ledger repair ({s['key']}): {s['pending']} pending"
                   f"{', ' + str(len(s['retried'])) + ' held retried' if retry_held else ''}; "
                   f"repaired {len(s['repaired'])}, held {len(s['held'])}, waiting "
                   f"{len(s['waiting'])}; published {', '.join(s['published']) or 'nothing'}")
        for h in s["held"]:
            click.echo(f"  held {h['request_id']}: {h['reason']}")
    if s["blocked"]:
        fail(f"no repair applied: {s['blocked']}", 1)
    if s["still_held"]:
        fail(f"{s['still_held']} repair {'request is' if s['still_held'] == 1 else 'requests are'}"
             f" held; see the reasons above or `riskstream ledger repair --retry-held` once "
             f"the cause is fixed", 1)


@ledger.command()
@store_option
def reconcile(store_url):
    """Per partition range: read = accepted + duplicate + stale + quarantined + routed."""
    from ..pipelines.ledger_accounting import equation
    from ..pipelines.ledger_accounting import reconcile as rec
    store = open_store(store_url)
    rows = rec(store)
    if not rows:
        fail("nothing to reconcile: the ledger has not read any record", 1)
    for r in rows:
        click.echo(equation(r))
    if not all(r["closes"] for r in rows):
        fail("reconciliation does not close", 1)
    from ..gates import open_blockers
    found = open_blockers(store, "ledger")
    if found:
        fail(f"hold:open-exceptions: {len(found)} open gate "
             f"{'blocker' if len(found) == 1 else 'blockers'} "
             f"({', '.join(b.blocker_id for b in found[:10])}); resolve each with `riskstream "
             f"exceptions resolve`", 1)


@ledger.command()
@click.option("--out", "out_dir", default="schemas/ledger", show_default=True,
              type=click.Path(file_okay=False))
@click.option("--check", is_flag=True, help="Exit non-zero if the files differ.")
def schemas(out_dir, check):
    """Write (or check) the machine-readable source and output schemas."""
    from ..pipelines.ledger import all_schemas
    stale = []
    for stem, schema in all_schemas().items():
        path = os.path.join(out_dir, f"{stem}.json")
        text = orjson.dumps(schema, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"
        if check:
            try:
                with open(path, "rb") as fh:
                    if fh.read() != text:
                        stale.append(path)
            except FileNotFoundError:
                stale.append(path)
            continue
        os.makedirs(out_dir, exist_ok=True)
        with open(path, "wb") as fh:
            fh.write(text)
        click.echo(f"wrote {path}")
    if stale:
        fail(f"schemas out of date: {', '.join(stale)}", 1)
