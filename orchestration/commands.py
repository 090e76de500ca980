"""CLI commands that run Dagster jobs, registered into `riskstream` through the
`riskstream.commands` entry point: `riskstream repair run` and `riskstream rebuild`. Dagster is
imported only inside the command, so loading this module costs only click."""

from __future__ import annotations

import click

from streaming.cli.common import fail, needs_extra, open_store, store_option
from streaming.gates import pipeline_ran
from streaming.join_held import held_entry_sets
from streaming.join_published import generation_rows

warehouse_option = click.option(
    "--warehouse", "warehouse_path", envvar="RISKSTREAM_DUCKDB_PATH",
    default=".riskstream/warehouse.duckdb", show_default=True,
    help="DuckDB warehouse the rebuild validates in (one writer at a time).")


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
    Exits 1 when a run did not publish, entries wait for the watermark, or held entry sets
    remain without --retry-held (docs/gates.md)."""
    store = open_store(store_url)  # refuse a missing store before Dagster starts
    ran = [p for p in ("join", "ledger", "receipts") if pipeline_ran(store, p)]
    store.dispose()
    if not ran:
        fail("nothing to repair: no pipeline has committed a batch in this store", 1)
    with needs_extra("orchestration"):
        from .repair import run_pending  # Dagster loads only here
    outcomes = run_pending(store_url, warehouse_path, log_level=log_level,
                           retry_held=retry_held)
    store = open_store(store_url)
    if not outcomes:
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


def register(cli: click.Group) -> None:
    from .cli import rebuild  # click only; Dagster loads inside the command
    cli.add_command(repair)
    cli.add_command(rebuild)
