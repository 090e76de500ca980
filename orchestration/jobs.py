"""Jobs: the sensor's replay rebuild, the manual `rebuild_interval`, and reconciliation."""


import os

from dagster import AssetSelection, Config, RunConfig, config_mapping, define_asset_job
from pydantic import Field

from .assets.dbt import reconciliation_models, rebuild_diff_models
from .assets.ingest import ingest_store
from .assets.rebuild import candidate_generation, published_generation
from .assets.repairs import ledger_repairs, receipt_reconciliation
from .rebuild_request import EXAMPLE

REBUILD_SELECTION = (AssetSelection.assets(candidate_generation, published_generation)
                     | AssetSelection.assets(rebuild_diff_models))


class RebuildInterval(Config):
    """Rebuild one merchant's payments in [start, end] from the archive, validate the result
    against the live generation with the blocking checks, and publish it if they pass."""

    merchant: str = Field(description="Merchant whose interval to rebuild, e.g. m-0001 (must "
                                      "be a merchant the join has read payments of).")
    start: str = Field(description=f"First payment time to rebuild: ISO-8601 with a time zone, "
                                   f"e.g. {EXAMPLE}.")
    end: str = Field(description="Last payment time to rebuild (inclusive, after start): "
                                 "ISO-8601 with a time zone, e.g. 2026-10-06T10:00:00Z.")


@config_mapping
def rebuild_interval_config(config: RebuildInterval) -> RunConfig:
    # The console log level follows RISKSTREAM_DAGSTER_LOG_LEVEL (default INFO), as for
    # `riskstream repair run`: the launchpad shows only the three fields an operator sets.
    level = os.environ.get("RISKSTREAM_DAGSTER_LOG_LEVEL", "INFO").upper()
    return RunConfig(ops={"candidate_generation": {"config": {
        "merchant": config.merchant, "start": config.start, "end": config.end,
        "entry_ids": []}}}, loggers={"console": {"config": {"log_level": level}}})


replay_rebuild = define_asset_job(
    "replay_rebuild", selection=REBUILD_SELECTION,
    description="Rebuild, validate and publish one replay-queue entry set (launched by the "
                "replay-queue sensor and by `riskstream repair run`).")

rebuild_interval = define_asset_job(
    "rebuild_interval", selection=REBUILD_SELECTION, config=rebuild_interval_config,
    description="Rebuild one merchant interval: give merchant, start and end (ISO-8601 UTC) in "
                "the launchpad. A request that cannot run fails at once with one line saying "
                "why. The candidate is validated by the blocking checks and published only if "
                "they pass; the live_generations table shows the outcome.")

reconciliation = define_asset_job(
    "reconciliation",
    selection=AssetSelection.assets(ingest_store) | AssetSelection.assets(reconciliation_models),
    description="Ingest the store and dbt-build the reconciliation models and release gates.")

ledger_repair = define_asset_job(
    "ledger_repair", selection=AssetSelection.assets(ledger_repairs),
    description="Apply the pending signed ledger repair requests.")

receipt_repair = define_asset_job(
    "receipt_repair", selection=AssetSelection.assets(receipt_reconciliation),
    description="Repair the pending receipt reconciliation records.")


def rebuild_run_config(entry_ids: list[int] | None = None) -> dict:
    """Run config of `replay_rebuild` for one entry set."""
    return {"ops": {"candidate_generation": {"config": {"entry_ids": list(entry_ids or [])}}}}


def manual_run_config(merchant: str, start: str, end: str) -> dict:
    """Run config of `rebuild_interval` (what the launchpad asks for)."""
    return {"merchant": merchant, "start": start, "end": end}
