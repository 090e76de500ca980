"""Entry point: `riskstream <group> <command>`. The runtime's commands are added here; the
commands that need the tooling or Dagster are registered by their packages through the
`riskstream.commands` entry points (see `plugins.py`)."""

from __future__ import annotations

import logging

import click

from ..store.versions import StoreVersionError
from . import contracts as contracts_cmds
from . import exceptions as exceptions_cmds
from . import generations as generations_cmds
from . import join as join_cmds
from . import ledger as ledger_cmds
from . import nats as nats_cmds
from . import ops as ops_cmds
from . import receipts as receipts_cmds
from . import store as store_cmds
from .common import fail
from .plugins import load_plugins

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def configure_logging(level: str) -> None:
    """One stderr handler on the root logger: every module logs to a logger named after it
    (`logging.getLogger(__name__)`), so the level chooses how much of all of them shows."""
    logging.basicConfig(level=level.upper(), format=LOG_FORMAT, force=True)
    if level.upper() != "DEBUG":  # Alembic narrates its set-up at INFO; the store logs the gist
        logging.getLogger("alembic").setLevel(logging.WARNING)


class RiskstreamGroup(click.Group):
    """Ends any command on a store it cannot use (missing, older or newer schema) with one
    line naming the revisions and exit code 9."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except StoreVersionError as exc:
            fail(str(exc), exc.exit_code)


@click.group(cls=RiskstreamGroup)
@click.version_option(package_name="riskstream")
@click.option("--log-level", type=click.Choice(LOG_LEVELS, case_sensitive=False),
              default="WARNING", show_default=True, envvar="RISKSTREAM_LOG_LEVEL",
              help="Log level of the stderr log (run start/restore/finish and publications at "
                   "INFO, every batch and checkpoint at DEBUG).")
def cli(log_level: str) -> None:
    """riskstream: recoverable event-time streaming risk pipelines."""
    configure_logging(log_level)


cli.add_command(contracts_cmds.contracts)
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
cli.add_command(store_cmds.store)
load_plugins(cli)

if __name__ == "__main__":
    cli()
