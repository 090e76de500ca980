"""Jobs: the sensor's replay rebuild, the manual `rebuild_interval`, and reconciliation."""

from __future__ import annotations

from dagster import AssetSelection, define_asset_job

from .assets.dbt import reconciliation_models, rebuild_diff_models
from .assets.ingest import ingest_store
from .assets.rebuild import candidate_generation, published_generation
from .assets.repairs import ledger_repairs, receipt_reconciliation

REBUILD_SELECTION = (AssetSelection.assets(candidate_generation, published_generation)
                     | AssetSelection.assets(rebuild_diff_models))

replay_rebuild = define_asset_job(
    "replay_rebuild", selection=REBUILD_SELECTION,
    description="Rebuild, validate and publish one replay-queue entry set (launched by the "
                "replay-queue sensor and by `riskstream repair run`).")

rebuild_interval = define_asset_job(
    "rebuild_interval", selection=REBUILD_SELECTION,
    description="Manual rebuild of (merchant, start, end): set them under "
                "ops.candidate_generation.config; the partition is the date of `start`.")

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


def rebuild_run_config(entry_ids: list[int] | None = None, merchant: str = "", start: str = "",
                       end: str = "") -> dict:
    return {"ops": {"candidate_generation": {"config": {
        "entry_ids": list(entry_ids or []), "merchant": merchant, "start": start, "end": end}}}}
