"""dbt models as assets. dbt tests of error severity are blocking asset checks: a failing one
stops everything downstream (publication) from materializing.

Reconciliation (staging + reconciliation models) is unpartitioned and runs hourly. The diff models
are partitioned by replay date and compare the running rebuild's candidate with the current view;
when one of their checks fails the entry set is held with the failed checks as the reason."""


from typing import Any
from collections.abc import Mapping

from dagster import AssetExecutionContext, AssetKey, Failure
from dagster_dbt import (DagsterDbtTranslator, DagsterDbtTranslatorSettings, DbtCliResource,
                         dbt_assets)

from streaming.gates import hold_reason
from streaming.join_generations import hold_entries, mark_validated
from streaming.join_held import candidate_nothing_to_judge
from streaming.join_published import PIPELINE

from ..partitions import replay_dates
from ..resources import WAREHOUSE_POOL, StoreResource, WarehouseResource, dbt_project
from ..warehouse import run_candidate_meta

PROJECT = dbt_project()


class RiskstreamTranslator(DagsterDbtTranslator):
    """raw.* sources are the ingest assets; rebuild.* sources are the candidate generation."""

    def get_asset_key(self, dbt_resource_props: Mapping[str, Any]) -> AssetKey:
        if dbt_resource_props["resource_type"] == "source":
            return AssetKey([dbt_resource_props["source_name"], dbt_resource_props["name"]])
        return super().get_asset_key(dbt_resource_props)

    def get_group_name(self, dbt_resource_props: Mapping[str, Any]) -> str | None:
        tags = dbt_resource_props.get("tags") or []
        return "rebuild" if "diff" in tags else "reconciliation"


TRANSLATOR = RiskstreamTranslator(settings=DagsterDbtTranslatorSettings(enable_asset_checks=True))


def dbt_target_path():
    """One target directory for every invocation, so dbt's partial parse is reused (a fresh
    directory per run means a full parse, about twice the time). Runs touching the warehouse
    never overlap (pool limit 1), so they never share it at the same time."""
    return PROJECT.project_dir / "target"


def failed_nodes(run_results: Mapping[str, Any]) -> list[str]:
    """Names of the dbt tests that failed and the models that errored."""
    return sorted(r["unique_id"].split(".")[2] for r in run_results.get("results", [])
                  if r["status"] in ("fail", "error"))


def errored_models(run_results: Mapping[str, Any]) -> list[str]:
    return sorted(r["unique_id"] for r in run_results.get("results", [])
                  if r["unique_id"].startswith("model.") and r["status"] == "error")


@dbt_assets(manifest=PROJECT.manifest_path, select="tag:reconciliation",
            dagster_dbt_translator=TRANSLATOR, pool=WAREHOUSE_POOL,
            name="reconciliation_models")
def reconciliation_models(context: AssetExecutionContext, dbt: DbtCliResource,
                          warehouse: WarehouseResource):
    with warehouse.dbt_env():
        yield from dbt.cli(["build"], context=context, target_path=dbt_target_path()).stream()


@dbt_assets(manifest=PROJECT.manifest_path, select="tag:diff",
            dagster_dbt_translator=TRANSLATOR, pool=WAREHOUSE_POOL,
            partitions_def=replay_dates, name="rebuild_diff_models")
def rebuild_diff_models(context: AssetExecutionContext, dbt: DbtCliResource,
                        warehouse: WarehouseResource, store: StoreResource):
    with warehouse.connect() as con:
        meta = run_candidate_meta(con, context.run.run_id)
    with warehouse.dbt_env():
        invocation = dbt.cli(["build"], context=context, raise_on_error=False,
                             target_path=dbt_target_path())
        yield from invocation.stream()
    results = invocation.get_artifact("run_results.json")
    failed = failed_nodes(results)
    st = store.open()
    try:
        blocked = None if failed else (hold_reason(st, PIPELINE)
                                       or candidate_nothing_to_judge(meta))
        if failed:
            reason = "blocking check failed: " + ", ".join(failed)
            hold_entries(st, meta["entry_ids"], meta["generation_id"], reason)
            context.log.warning(f"generation {meta['generation_id']} held: {reason}")
            if errored_models(results):
                # A model that did not build has no check to block on: fail the step instead.
                raise Failure(description=reason)
        elif blocked:
            # Fail closed: open gate blockers of the join (a sink exception, an accounting
            # gap) hold publication until a recorded decision resolves them; a candidate with
            # nothing to judge is held too.
            hold_entries(st, meta["entry_ids"], meta["generation_id"], blocked)
            context.log.warning(f"generation {meta['generation_id']} held: {blocked}")
            raise Failure(description=blocked)
        else:
            mark_validated(st, meta["generation_id"])
    finally:
        st.dispose()
