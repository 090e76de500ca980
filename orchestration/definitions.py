"""The one `Definitions` of riskstream (workspace.yaml points at `defs`). `build_defs` lets
in-process callers (the repair CLI, tests) bind resources explicitly."""

from dagster import Definitions, in_process_executor

from .assets.dbt import reconciliation_models, rebuild_diff_models
from .assets.ingest import ingest_store
from .assets.rebuild import candidate_generation, live_generations, published_generation
from .assets.repairs import ledger_repairs, receipt_reconciliation
from .jobs import (ledger_repair, rebuild_interval, receipt_repair, reconciliation,
                   replay_rebuild)
from .resources import default_resources
from .schedules import reconciliation_hourly
from .sensors import ledger_repair_sensor, receipt_repair_sensor, replay_queue_sensor


def build_defs(resources: dict | None = None) -> Definitions:
    return Definitions(
        assets=[ingest_store, reconciliation_models, rebuild_diff_models, candidate_generation,
                published_generation, live_generations, ledger_repairs, receipt_reconciliation],
        jobs=[replay_rebuild, rebuild_interval, reconciliation, ledger_repair, receipt_repair],
        schedules=[reconciliation_hourly],
        sensors=[replay_queue_sensor, ledger_repair_sensor, receipt_repair_sensor],
        resources=resources or default_resources(),
        # One process per run: the steps share the warehouse file (DuckDB admits one writing
        # process), and a step subprocess would reload the code location (about 10 s each).
        executor=in_process_executor,
    )


defs = build_defs()
