"""Entry point: `riskstream <group> <command>`. Dagster is imported lazily, only inside the
commands that run Dagster jobs."""

from __future__ import annotations

import click

from . import join as join_cmds
from . import ops as ops_cmds


@click.group()
@click.version_option(package_name="riskstream")
def cli() -> None:
    """riskstream: recoverable event-time streaming risk pipelines."""


cli.add_command(join_cmds.join)
for cmd in ops_cmds.COMMANDS:
    cli.add_command(cmd)

if __name__ == "__main__":
    cli()
