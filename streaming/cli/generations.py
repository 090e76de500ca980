"""`riskstream generations list` and `riskstream repair run`: the generation history and the
in-process repair job (Dagster is imported only inside `repair run`)."""

from __future__ import annotations

import click

from ..generations import GENERATION_COLUMNS, generation_rows
from .common import emit_rows, fail, format_option, open_store, store_option

warehouse_option = click.option(
    "--warehouse", "warehouse_path", envvar="RISKSTREAM_DUCKDB_PATH",
    default=".riskstream/warehouse.duckdb", show_default=True,
    help="DuckDB warehouse the rebuild validates in (one writer at a time).")


@click.group()
def generations() -> None:
    """Generations: validated rebuilds of join intervals, published atomically."""


@generations.command("list")
@store_option
@format_option
def list_generations(store_url, fmt):
    """Generation history; `published` marks the current generation of its interval."""
    emit_rows(generation_rows(open_store(store_url)), GENERATION_COLUMNS, fmt)


@click.group()
def repair() -> None:
    """Repairs from the dated replay queue."""


@repair.command("run")
@store_option
@warehouse_option
@click.option("--retry-held", is_flag=True,
              help="Also rebuild every held entry set again (its hold reason is shown); a set "
                   "whose blocking check still fails is held again.")
@click.option("--log-level", default=None, envvar="RISKSTREAM_DAGSTER_LOG_LEVEL",
              type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
              help="Dagster console log level for the runs (default INFO).")
def run_repairs(store_url, warehouse_path, retry_held, log_level):
    """Run the sensor's rebuild job in-process over every pending entry set.
    Exits 1 when a run did not publish or entries wait for the watermark."""
    store = open_store(store_url)  # refuse a missing store before Dagster starts
    from ..gates import pipeline_ran
    ran = [p for p in ("join", "ledger", "receipts") if pipeline_ran(store, p)]
    store.dispose()
    if not ran:
        fail("nothing to repair: no pipeline has committed a batch in this store", 1)
    from orchestration.repair import run_pending  # lazily: Dagster loads only here
    outcomes = run_pending(store_url, warehouse_path, log_level=log_level,
                           retry_held=retry_held)
    store = open_store(store_url)
    if not outcomes:
        from ..held import held_entry_sets
        held = held_entry_sets(store)
        if held and not retry_held:
            click.echo(f"repair run: nothing pending; {len(held)} held entry "
                       f"{'set' if len(held) == 1 else 'sets'} (retry with --retry-held):")
            for h in held:
                click.echo(f"  {h.describe()}")
            raise SystemExit(1)
        click.echo("repair run: nothing pending")
        return
    for o in outcomes:
        entries = f"entries {','.join(map(str, o.entry_ids))}" if o.entry_ids else "pending set"
        if o.held_reason:
            click.echo(f"retrying held {entries} of {o.merchant} {o.queue_date} "
                       f"(held: {o.held_reason})")
        if o.waiting:
            click.echo(f"repair run {o.run_key}: {entries} of {o.merchant} {o.queue_date} wait "
                       f"for the watermark: {o.waiting}")
            continue
        click.echo(f"repair run {o.run_key}: {entries} -> "
                   f"{'success' if o.success else 'failed'} (run {o.run_id})")
    for g in generation_rows(store):
        if g["status"] in ("published", "held"):
            click.echo(f"  generation {g['generation_id']} {g['status']} "
                       f"{g['interval_key']} [{g['interval_start']}, {g['interval_end']}]"
                       f"{' ' + g['reason'] if g['reason'] else ''}")
    if any(not o.success and not o.waiting for o in outcomes):
        fail("a repair run did not publish (see the held generations above)", 1)
    if any(o.waiting for o in outcomes):
        fail("entries wait for the live watermarks to pass their interval; run the live "
             "pipeline further (or with --end-of-stream) and repair again", 1)


COMMANDS = [generations, repair]
