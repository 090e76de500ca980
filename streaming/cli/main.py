"""Entry point: `riskstream <group> <command>`. The runtime's commands are added here; the
commands that need the tooling or Dagster are registered by their packages through the
`riskstream.commands` entry points (see `plugins.py`)."""

from __future__ import annotations

import click

from . import exceptions as exceptions_cmds
from . import generations as generations_cmds
from . import join as join_cmds
from . import ledger as ledger_cmds
from . import nats as nats_cmds
from . import ops as ops_cmds
from . import receipts as receipts_cmds
from .plugins import load_plugins


@click.group()
@click.version_option(package_name="riskstream")
def cli() -> None:
    """riskstream: recoverable event-time streaming risk pipelines."""


cli.add_command(join_cmds.join)
cli.add_command(ledger_cmds.ledger)
cli.add_command(nats_cmds.nats)
for cmd in ops_cmds.COMMANDS:
    cli.add_command(cmd)
for cmd in generations_cmds.COMMANDS:
    cli.add_command(cmd)
cli.add_command(receipts_cmds.receipts)
for cmd in exceptions_cmds.COMMANDS:
    cli.add_command(cmd)
cli.add_command(receipts_cmds.model)
load_plugins(cli)

if __name__ == "__main__":
    cli()
