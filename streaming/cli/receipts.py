"""`riskstream receipts ...` (the receipt scorer) and `riskstream model ...` (the registry)."""

from __future__ import annotations

import click
import orjson

from ..host.crash import CRASH_POINTS
from ..models.registry import DEFAULT_MODEL_DIR, MODEL_DIR_ENV, ModelError, Registry
from ..timeutil import TimeFormatError, parse_utc_us
from .common import (echo_json, emit_rows, fail, format_option, full_checkpoint_after_option,
                     max_arrival_jump_option, open_store, overlap_commits_option,
                     batches_behind_checkpoint_option, run_settings,
                     source_option, store_option)
from .follow import follow_options, follow_settings

DECISION_COLUMNS = ["receipt_id", "scoring_revision", "model_revision", "score", "decision",
                    "feature_count_7m", "feature_amount_7m", "watermark", "state_cutoff",
                    "status", "merchant_id", "store_id", "occurred_at", "amount_cents", "origin",
                    "reason", "predecessor_key"]

model_dir_option = click.option(
    "--model-dir", envvar=MODEL_DIR_ENV, default=DEFAULT_MODEL_DIR, show_default=True,
    help="Model registry directory (created with the built-in initial revision if missing).")


@click.group()
def receipts() -> None:
    """Receipt scorer: 7-minute merchant window at occurrence time, pinned model."""


@receipts.command()
@source_option
@store_option
@model_dir_option
@click.option("--crash-at", default=None, help=f"POINT:K, POINT in {', '.join(CRASH_POINTS)}")
@click.option("--checkpoint-every", type=int, default=1000, show_default=True)
@click.option("--batch-size", type=int, default=500, show_default=True)
@click.option("--idle-after", type=float, default=None,
              help="Minutes of source time a caught-up shard must be quiet to be idle.")
@click.option("--end-of-stream", is_flag=True,
              help="Finalize: advance the watermark to the end and score every receipt.")
@max_arrival_jump_option
@overlap_commits_option
@batches_behind_checkpoint_option
@full_checkpoint_after_option
@follow_options
@click.option("--quiet", is_flag=True)
def run(source, store_url, model_dir, crash_at, checkpoint_every, batch_size, idle_after,
        end_of_stream, max_arrival_jump, overlap_commits, batches_behind_checkpoint,
        full_checkpoint_after, follow,
        max_batch_delay, worker, outage_limit, quiet):
    """Run (or resume) the live scorer over a source until it is drained, or follow it."""
    from ..pipelines.receipts import SPEC
    from .join import run_pipeline
    settings = run_settings(source, store_url, crash_at, checkpoint_every, batch_size,
                            idle_after=idle_after, end_of_stream=end_of_stream,
                            extra={"model_dir": model_dir}, max_arrival_jump=max_arrival_jump,
                            overlap_commits=overlap_commits,
                            batches_behind_checkpoint=batches_behind_checkpoint,
                            full_checkpoint_after=full_checkpoint_after, worker=worker)
    following = follow_settings(follow, max_batch_delay, worker, outage_limit, source)
    try:
        if following is not None:
            from .follow import follow_summary, run_follow
            click.echo(follow_summary("receipts", run_follow(SPEC, settings, following, quiet)))
            return
        res = run_pipeline(SPEC, settings, quiet)
    except ModelError as exc:
        fail(str(exc), exc.exit_code)
    st = res.metrics.get("state", {})
    rate = res.records / res.elapsed_s if res.elapsed_s else 0
    click.echo(
        f"receipts run: {res.records} records in {res.batches} batches "
        f"({res.replayed_batches} replayed from the journal"
        f"{', restored from checkpoint ' + str(res.restored_from) if res.restored_from else ''}); "
        f"decisions written {res.facts_written}, no-op {res.facts_noop}, rejected "
        f"{res.facts_rejected}; {res.elapsed_s:.2f}s ({rate:,.0f} receipts/s)")
    click.echo(
        f"  model {st.get('model_revision')}  watermark {st.get('watermark')}  "
        f"pending {st.get('pending')}  state {st.get('state_records')} receipts; "
        f"duplicates {st.get('duplicates')}, late within tolerance "
        f"{st.get('late_within_tolerance')}, beyond allowed delay "
        f"{st.get('beyond_allowed_delay')}, rescored live {st.get('rescored_live')}")


def decision_rows(store, include_all: bool) -> list[dict]:
    from ..pipelines.receipts_release import active, decision_facts
    facts = decision_facts(store)
    rows = facts if include_all else active(facts)
    return sorted(rows, key=lambda r: (r["receipt_id"], r["scoring_revision"]))


@receipts.command()
@store_option
@click.option("--all", "include_all", is_flag=True, help="Every scoring revision, not only "
              "the active decision of each receipt.")
@format_option
def decisions(store_url, include_all, fmt):
    """Decisions: one active row per receipt (or every revision with --all)."""
    emit_rows(decision_rows(open_store(store_url), include_all), DECISION_COLUMNS, fmt)


def _time(value: str | None, name: str) -> int | None:
    if value is None:
        return None
    try:
        return parse_utc_us(value)
    except TimeFormatError:
        fail(f"--{name} must be a timezone-aware ISO-8601 time, got {value!r}")


@receipts.command()
@store_option
@model_dir_option
@click.option("--from", "start", default=None, help="Occurrence time from (inclusive, ISO-8601).")
@click.option("--to", "end", default=None, help="Occurrence time to (inclusive, ISO-8601).")
def reconcile(store_url, model_dir, start, end):
    """Repair pending reconciliation records in a bounded occurrence window."""
    from ..repairs.receipts import RepairRefused, run_receipt_reconciliation
    try:
        out = run_receipt_reconciliation(open_store(store_url), _time(start, "from"),
                                         _time(end, "to"), model_dir)
    except (RepairRefused, ModelError) as exc:
        fail(str(exc), exc.exit_code)
    click.echo(f"reconciled {out['records']} records in {out['window'][0]}..{out['window'][1]} "
               f"with model {out['model_revision']}: {len(out['repaired'])} repaired, "
               f"{len(out['rescored'])} rescored, {out['unchanged']} unchanged, "
               f"{len(out['duplicates'])} duplicate uploads, {len(out['held'])} held; "
               f"rejected {out['facts_rejected']}")


@receipts.command()
@store_option
@click.option("--json", "as_json", is_flag=True)
def release(store_url, as_json):
    """The release gate over the sink; exits 1 on hold."""
    from ..pipelines.receipts_release import release_gate
    g = release_gate(open_store(store_url))
    if as_json:
        echo_json(g)
    else:
        click.echo(g["result"])
        if g["hold_reason"]:
            click.echo(f"  {g['hold_reason']}")
        click.echo(f"  live: {g['live']} ({g['live_outputs']} outputs for "
                   f"{g['eligible_receipts']} on-time eligible receipts)")
        click.echo(f"  repaired: {g['repaired']} ({g['repaired_outputs']} outputs for "
                   f"{g['reconciliation_records']} reconciliation records)")
        for k in ("duplicate_outputs", "missing_live", "extra_live", "missing_repaired",
                  "extra_repaired"):
            if g[k]:
                click.echo(f"  {k}: {', '.join(g[k][:20])}{' ...' if len(g[k]) > 20 else ''}")
    if g["result"] != "accept:reconciled":
        raise SystemExit(1)


@receipts.command()
@click.option("--model", "revision", required=True, help="The model revision to pin.")
@store_option
@model_dir_option
def rescore(revision, store_url, model_dir):
    """Re-pin explicitly: rescore every active decision with REV (new scoring revisions)."""
    from ..repairs.receipts import RepairRefused, run_receipt_repin
    try:
        out = run_receipt_repin(open_store(store_url), revision, model_dir)
    except (RepairRefused, ModelError) as exc:
        fail(str(exc), exc.exit_code)
    if not out["rescored"]:
        click.echo(f"{out['model_revision']} is already pinned; nothing rescored")
        return
    click.echo(f"re-pinned {out['previous_revision']} -> {out['model_revision']} "
               f"(pin {out['model_pin_seq']}): {len(out['rescored'])} decisions rescored, "
               f"{out['facts_written']} written, {out['facts_rejected']} rejected")


@click.group()
def model() -> None:
    """The receipt model registry (content-hashed artifacts, movable `current` pointer)."""


@model.command("list")
@model_dir_option
def model_list(model_dir):
    """Known revisions; the current one is marked with *."""
    try:
        reg = Registry(model_dir)
        cur = reg.current_revision()
    except ModelError as exc:
        fail(str(exc), exc.exit_code)
    for rev in reg.revisions():
        click.echo(f"{'*' if rev == cur else ' '} {rev}")


@model.command("register")
@click.argument("artifact_file", type=click.Path(exists=True, dir_okay=False))
@model_dir_option
def model_register(artifact_file, model_dir):
    """Store an artifact JSON under its content hash; prints the revision."""
    with open(artifact_file, "rb") as fh:
        artifact = orjson.loads(fh.read())
    try:
        click.echo(Registry(model_dir).register(artifact))
    except ModelError as exc:
        fail(str(exc), exc.exit_code)


@model.command("show")
@click.argument("revision", required=False)
@model_dir_option
def model_show(revision, model_dir):
    """Print an artifact (default: the current one)."""
    try:
        reg = Registry(model_dir)
        m = reg.load(revision) if revision else reg.current()
    except ModelError as exc:
        fail(str(exc), exc.exit_code)
    echo_json({"revision": m.revision, "artifact": m.artifact})


@model.command("promote")
@click.argument("revision")
@model_dir_option
def model_promote(revision, model_dir):
    """Move the `current` pointer to REV (new scorers pin it; running ones keep theirs)."""
    try:
        prev = Registry(model_dir).promote(revision)
    except ModelError as exc:
        fail(str(exc), exc.exit_code)
    click.echo(f"current: {prev} -> {revision}")


COMMANDS = [receipts, model]
