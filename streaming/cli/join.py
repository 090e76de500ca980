"""`riskstream join ...`: generate the seed scenario, run the live join, read its results."""

from __future__ import annotations

import click

from ..assignment import AssignmentError
from ..host.checkpoints import CheckpointMismatch, SourceMismatch
from ..host.crash import CRASH_POINTS
from ..host.loop import Worker
from ..host.settings import RunSettings
from ..pipelines.join import SPEC
from ..sources.filelog import SourceError
from ..redaction import redact_text
from ..store.lease import LeaseHeld, LeaseUnavailable
from ..store.errors import STORE_FAILURE_EXIT, describe_store_error, is_store_error
from ..store.ops import loads
from .common import (SOURCE_UNAVAILABLE_EXIT, emit_rows, fail, format_option,
                     max_arrival_jump_option, open_store, overlap_commits_option,
                     batches_behind_checkpoint_option, progress_bar,
                     run_settings, source_option, store_option)
from .follow import follow_options, follow_settings, follow_summary, run_follow


PAIR_COLUMNS = ["payment_id", "signal_id", "pair_id", "status", "payment_rev", "signal_rev",
                "rule_version", "merchant_id", "payment_time", "signal_time"]
OUTCOME_COLUMNS = ["payment_id", "payment_rev", "status", "match_count", "merchant_id",
                   "payment_time"]


@click.group()
def join() -> None:
    """Payment x risk-signal interval join (-47 min .. +8 min, inclusive)."""


def run_pipeline(spec, settings: RunSettings, quiet: bool = False):
    try:
        with progress_bar(f"{spec.name} run", enabled=None if not quiet else False) as cb:
            return Worker(spec, settings, progress=cb).run()
    except (CheckpointMismatch, SourceMismatch, AssignmentError, LeaseHeld,
            LeaseUnavailable) as exc:
        fail(str(exc), exc.exit_code)
    except SourceError as exc:  # the source cannot be opened: missing, unreachable, malformed
        fail(redact_text(str(exc)), SOURCE_UNAVAILABLE_EXIT)
    except Exception as exc:  # a store that refuses writes or cannot be reached: one line
        if not is_store_error(exc):
            raise
        fail(describe_store_error(exc), STORE_FAILURE_EXIT)


@join.command()
@source_option
@store_option
@click.option("--checkpoint-every", type=int, default=10000, show_default=True,
              help="Records between checkpoints (one is also written at the end).")
@click.option("--batch-size", type=int, default=5000, show_default=True,
              help="Records per committed batch (capped by --checkpoint-every).")
@click.option("--crash-at", default=None, help=f"POINT:K, POINT in {', '.join(CRASH_POINTS)}")
@click.option("--idle-after", type=float, default=None,
              help="Minutes of source time a caught-up partition must be quiet to be idle.")
@click.option("--ttl-minutes", type=float, default=None,
              help="Too-short TTL demonstration: evict by source-time age (loses matches).")
@click.option("--end-of-stream", is_flag=True, help="Finalize: advance every watermark to the end.")
@max_arrival_jump_option
@overlap_commits_option
@batches_behind_checkpoint_option
@follow_options
@click.option("--quiet", is_flag=True)
def run(source, store_url, checkpoint_every, batch_size, crash_at, idle_after, ttl_minutes,
        end_of_stream, max_arrival_jump, overlap_commits, batches_behind_checkpoint, follow,
        max_batch_delay, worker, outage_limit, quiet):
    """Run (or resume) the live join over a source until it is drained, or follow it."""
    settings = run_settings(source, store_url, crash_at, checkpoint_every, batch_size,
                            idle_after=idle_after, ttl_minutes=ttl_minutes,
                            end_of_stream=end_of_stream, max_arrival_jump=max_arrival_jump,
                            overlap_commits=overlap_commits,
                            batches_behind_checkpoint=batches_behind_checkpoint, worker=worker)
    following = follow_settings(follow, max_batch_delay, worker, outage_limit, source)
    if following is not None:
        click.echo(follow_summary("join", run_follow(SPEC, settings, following, quiet)))
        return
    res = run_pipeline(SPEC, settings, quiet)
    st = res.metrics.get("state", {})
    peak = st.get("peak", {})
    click.echo(
        f"join run: {res.records} records in {res.batches} batches "
        f"({res.replayed_batches} replayed from the journal"
        f"{', restored from checkpoint ' + str(res.restored_from) if res.restored_from else ''}); "
        f"facts written {res.facts_written}, no-op {res.facts_noop}, "
        f"rejected {res.facts_rejected}; "
        f"checkpoints {res.checkpoints}; {res.elapsed_s:.2f}s "
        f"({res.records / res.elapsed_s if res.elapsed_s else 0:,.0f} records/s)")
    click.echo(
        f"  payment_wm {res.metrics['input_wm_iso'].get('payments')}  "
        f"risk_wm {res.metrics['input_wm_iso'].get('risk_signals')}  "
        f"end_of_stream={res.end_of_stream}")
    click.echo(
        f"  state now {st.get('state_records')} records / {st.get('state_bytes')} B; peak "
        f"{peak.get('records')} records / {peak.get('bytes')} B; hot key {peak.get('hot_key')} "
        f"peak {peak.get('hot_key_records')} records / {peak.get('hot_key_bytes')} B")
    click.echo(
        f"  late joined {st.get('late_joined')}, late queued {st.get('late_queued')}, "
        f"corrections live {st.get('corrections_live')} / queued {st.get('corrections_queued')}, "
        f"ttl evictions {st.get('ttl_evictions')}")


def pair_rows(store, include_retired: bool) -> list[dict]:
    rows = []
    if not include_retired:
        for r in store.current("join", "pair"):
            if r["status"] != "current":
                continue
            p = loads(r["payload"])
            rows.append({**p, "status": "current"})
        return sorted(rows, key=lambda r: (r["payment_id"], r["signal_id"]))
    facts = store.facts("join", "pair")
    retired = {loads(f["payload"])["pair_id"] for f in facts if f["status"] == "retired"}
    for f in facts:
        if f["status"] != "current":
            continue
        p = loads(f["payload"])
        rows.append({**p, "status": "retired" if p["pair_id"] in retired else "current"})
    return sorted(rows, key=lambda r: (r["payment_id"], r["signal_id"], r["payment_rev"],
                                       r["signal_rev"]))


@join.command()
@store_option
@click.option("--all", "include_all", is_flag=True, help="Include retired pairs.")
@click.option("--published", is_flag=True,
              help="Read the published view: generation rows inside published intervals, "
                   "live rows elsewhere.")
@format_option
def pairs(store_url, include_all, published, fmt):
    """The current pair view (one row per logical pair)."""
    store = open_store(store_url)
    if published:
        from ..join_published import published_pairs
        rows = published_pairs(store)
    else:
        rows = pair_rows(store, include_all)
    emit_rows(rows, PAIR_COLUMNS, fmt)


def outcome_rows(store) -> list[dict]:
    rows = []
    for r in store.current("join", "outcome"):
        rows.append(loads(r["payload"]))
    return sorted(rows, key=lambda r: r["payment_id"])


@join.command()
@store_option
@format_option
def outcomes(store_url, fmt):
    """Current outcome per payment: provisional | retracted | final | corrected_final."""
    emit_rows(outcome_rows(open_store(store_url)), OUTCOME_COLUMNS, fmt)
