"""`riskstream join|ledger|receipts generate`: write a seed scenario as a file log."""

from __future__ import annotations

import click


@click.command("generate")
@click.option("--seed", type=int, required=True)
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False))
@click.option("--events", type=int, default=470, show_default=True)
def join_generate(seed: int, out_dir: str, events: int) -> None:
    """Write the seed scenario as a file log (DIR/<topic>/p<N>.jsonl + scenario.json)."""
    from ..workloads.join_seed import generate as gen
    m = gen(seed, out_dir, events)
    click.echo(f"wrote {m['events']} events ({m['hard_case_lines']} hard-case lines) to {out_dir}")


@click.command("generate")
@click.option("--seed", type=int, required=True)
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False))
@click.option("--payments", type=int, default=400, show_default=True,
              help="Background payments besides the named cases.")
@click.option("--rate", type=float, default=None,
              help="Background arrivals per second of source time (default: spread over "
                   "09:00-14:30).")
@click.option("--no-scenario", is_flag=True, help="Background only (pressure / benchmark).")
def ledger_generate(seed, out_dir, payments, rate, no_scenario):
    """Write the ledger scenario as a file log (DIR/<topic>/p<N>.jsonl + scenario.json)."""
    from ..workloads.ledger_seed import generate as gen
    m = gen(seed, out_dir, payments, rate, scenario=not no_scenario)
    click.echo(f"wrote {m['lines']} lines ({len(m['cases'])} named cases) to {out_dir}")


@click.command("generate")
@click.option("--seed", type=int, required=True)
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False))
@click.option("--receipts", "n", type=int, default=470, show_default=True)
@click.option("--partition-delay", type=float, default=4.0, show_default=True,
              help="Minutes every upload of the delayed shard (p2) arrives late.")
def receipts_generate(seed, out_dir, n, partition_delay):
    """Write the seed scenario as a file log (DIR/receipts/p<N>.jsonl + scenario.json)."""
    from ..workloads.receipts_seed import generate as gen
    m = gen(seed, out_dir, n, partition_delay_min=partition_delay)
    click.echo(f"wrote {m['receipts']} receipts in {m['lines']} lines "
               f"({len(m['replayed_ids'])} replayed uploads, shard p{m['delayed_partition']} "
               f"delayed {m['partition_delay_min']} min, {m['offline_store']} offline "
               f"{m['offline_period'][0]}..{m['offline_period'][1]} holding "
               f"{len(m['offline_ids'])} receipts) to {out_dir}")
