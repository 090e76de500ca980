"""Entry point: `riskstream <group> <command>`. Dagster is imported lazily, only inside the
commands that run Dagster jobs."""

from __future__ import annotations

import click

from . import bench as bench_cmds
from . import generations as generations_cmds
from . import join as join_cmds
from . import join_evidence as join_evidence_cmds
from . import ledger as ledger_cmds
from . import ledger_evidence as ledger_evidence_cmds
from . import nats as nats_cmds
from . import ops as ops_cmds
from . import receipts as receipts_cmds


@click.group()
@click.version_option(package_name="riskstream")
def cli() -> None:
    """riskstream: recoverable event-time streaming risk pipelines."""


cli.add_command(join_cmds.join)
join_cmds.join.add_command(join_evidence_cmds.evidence)
cli.add_command(ledger_cmds.ledger)
ledger_cmds.ledger.add_command(ledger_evidence_cmds.evidence)
cli.add_command(nats_cmds.nats)
for cmd in ops_cmds.COMMANDS:
    cli.add_command(cmd)
for cmd in generations_cmds.COMMANDS:
    cli.add_command(cmd)
cli.add_command(receipts_cmds.receipts)
cli.add_command(receipts_cmds.model)
cli.add_command(bench_cmds.bench)

if __name__ == "__main__":
    cli()
