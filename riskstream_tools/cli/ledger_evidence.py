"""`riskstream ledger evidence`: the ledger's evidence packet for a release reviewer."""

from __future__ import annotations

import click

from streaming.cli.common import fail, needs_extra, require_extra

from .evidence_report import report_packet


@click.command("evidence")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False),
              help="Directory for evidence.json, evidence.md, the pictures, and the logs and "
                   "stores of the runs (OUT/logs, OUT/stores).")
@click.option("--seed", type=int, default=11, show_default=True,
              help="Seed of the scenario log (the demo's).")
@click.option("--payments", type=int, default=300, show_default=True,
              help="Background payments in the scenario log.")
@click.option("--pressure-seed", type=int, default=5, show_default=True)
@click.option("--pressure-payments", type=int, default=600, show_default=True)
@click.option("--pressure-rate", type=float, default=4.0, show_default=True,
              help="Pressure arrivals per second of source time.")
@click.option("--sink-rate", type=float, default=1.0, show_default=True)
@click.option("--backlog-limit", type=int, default=240, show_default=True)
@click.option("--sink-capacity", type=float, default=10.0, show_default=True)
def evidence(out_dir, seed, payments, pressure_seed, pressure_payments, pressure_rate,
             sink_rate, backlog_limit, sink_capacity):
    """Run the seed scenario and the throttled pressure run on fresh SQLite stores and write
    the packet. Exits 1 when any check does not hold (the packet is written either way)."""
    from streaming.repairs.ledger import RepairKeyMissing
    require_extra("evidence", "matplotlib")
    with needs_extra("evidence"):
        from ..evidence.ledger import LedgerEvidenceSettings, run_ledger_evidence
    try:
        settings = LedgerEvidenceSettings(seed, payments, pressure_seed, pressure_payments,
                                          pressure_rate, sink_rate, backlog_limit,
                                          sink_capacity)
        settings.throttle()  # validates the throttle flags before anything runs
    except ValueError as exc:
        fail(str(exc))
    try:
        ev = run_ledger_evidence(out_dir, settings)
    except RepairKeyMissing as exc:
        fail(str(exc), exc.exit_code)
    report_packet("ledger", ev, out_dir, ev["packet"]["elapsed_s"])
