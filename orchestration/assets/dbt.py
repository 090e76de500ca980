"""dbt models as assets; dbt tests as asset checks.

A test of severity `error` is a blocking check: a failure stops everything downstream
(publication) from materializing. The others warn. Every test carries a description of what it
protects (`meta.description` in the dbt yml), and a failing one lists its first failing rows.

Reconciliation (staging + reconciliation models) is unpartitioned and runs hourly. The diff models
compare the running rebuild's candidate with the current view; when one of their blocking checks
fails the entry set is held with the failed checks as the reason, the live generation stays, and
the step fails with a one-line explanation (no publication)."""


from typing import Any
from collections.abc import Iterator, Mapping

from dagster import (AssetCheckResult, AssetCheckSeverity, AssetCheckSpec, AssetExecutionContext,
                     AssetKey, AssetMaterialization, Failure, MetadataValue)
from dagster_dbt import (DagsterDbtTranslator, DagsterDbtTranslatorSettings, DbtCliResource,
                         dbt_assets)
from dagster_dbt.asset_utils import default_asset_check_fn

from streaming.gates import hold_reason
from streaming.join_generations import hold_entries, mark_validated
from streaming.join_held import candidate_nothing_to_judge
from streaming.join_published import PIPELINE

from ..generations_view import record_diff, view_metadata
from ..resources import WAREHOUSE_POOL, StoreResource, WarehouseResource, dbt_project
from ..warehouse import run_candidate_meta
from .names import CANDIDATE_KEYS, GENERATIONS_KEY

PROJECT = dbt_project()
FAILED_ROWS_SHOWN = 20


class RiskstreamTranslator(DagsterDbtTranslator):
    """raw.* sources are the ingest assets; rebuild.* sources are the candidate tables; model
    descriptions come from the yml (never the raw SQL); check descriptions from the tests'
    `meta.description`."""

    def get_asset_key(self, dbt_resource_props: Mapping[str, Any]) -> AssetKey:
        if dbt_resource_props["resource_type"] == "source":
            if dbt_resource_props["source_name"] == "rebuild":
                return CANDIDATE_KEYS[dbt_resource_props["name"]]
            return AssetKey([dbt_resource_props["source_name"], dbt_resource_props["name"]])
        return super().get_asset_key(dbt_resource_props)

    def get_group_name(self, dbt_resource_props: Mapping[str, Any]) -> str | None:
        tags = dbt_resource_props.get("tags") or []
        return "rebuild" if "diff" in tags else "reconciliation"

    def get_description(self, dbt_resource_props: Mapping[str, Any]) -> str:
        return dbt_resource_props.get("description") or (
            f"dbt {dbt_resource_props['resource_type']} {dbt_resource_props['name']}")

    def get_asset_check_spec(self, asset_spec, manifest, unique_id, project
                             ) -> AssetCheckSpec | None:
        spec = default_asset_check_fn(manifest=manifest, dagster_dbt_translator=self,
                                      asset_key=asset_spec.key, test_unique_id=unique_id,
                                      project=project)
        if spec is None:
            return None
        node = manifest["nodes"][unique_id]
        meta = node.get("meta") or node.get("config", {}).get("meta") or {}
        description = " ".join((meta.get("description") or node.get("description") or "")
                               .split())
        return spec._replace(description=description or None) if hasattr(spec, "_replace") \
            else AssetCheckSpec(name=spec.name, asset=spec.asset_key, description=description,
                                additional_deps=spec.additional_deps, metadata=spec.metadata,
                                blocking=spec.blocking)


TRANSLATOR = RiskstreamTranslator(settings=DagsterDbtTranslatorSettings(enable_asset_checks=True))


def dbt_target_path():
    """One target directory for every invocation, so dbt's partial parse is reused (a fresh
    directory per run means a full parse, about twice the time). Runs touching the warehouse
    never overlap (pool limit 1), so they never share it at the same time."""
    return PROJECT.project_dir / "target"


def test_name(unique_id: str) -> str:
    return unique_id.split(".")[2]


def failed_nodes(run_results: Mapping[str, Any]) -> list[str]:
    """Names of the dbt tests of error severity that failed and the models that errored."""
    return sorted(test_name(r["unique_id"]) for r in run_results.get("results", [])
                  if r["status"] in ("fail", "error"))


def errored_models(run_results: Mapping[str, Any]) -> list[str]:
    return sorted(r["unique_id"] for r in run_results.get("results", [])
                  if r["unique_id"].startswith("model.") and r["status"] == "error")


def failing_rows(con, run_results: Mapping[str, Any]) -> dict[str, list[dict]]:
    """The first failing rows of every failed or warning test, re-read with its compiled SQL
    once dbt has released the warehouse."""
    out = {}
    for r in run_results.get("results", []):
        if not r["unique_id"].startswith("test.") or r["status"] not in ("fail", "warn"):
            continue
        sql = r.get("compiled_code")
        if not sql:
            continue
        cur = con.execute(f"SELECT * FROM ({sql}) AS failing LIMIT {FAILED_ROWS_SHOWN}")
        cols = [d[0] for d in cur.description]
        out[test_name(r["unique_id"])] = [
            {c: (v if isinstance(v, (int, float, bool)) or v is None else str(v))
             for c, v in zip(cols, row, strict=True)} for row in cur.fetchall()]
    return out


def explain_check(result: AssetCheckResult, rows: Mapping[str, list[dict]]) -> AssetCheckResult:
    """A failing check with its failing rows (first 20) and a one-line description."""
    if result.passed or result.check_name is None or result.check_name not in rows:
        return result
    failing = rows[result.check_name]
    count = result.metadata.get("dagster_dbt/failed_row_count")
    count = getattr(count, "value", count)
    shown = MetadataValue.json(failing)
    first = "; ".join(", ".join(f"{k}={v}" for k, v in row.items()) for row in failing[:3])
    kind = "blocks publication" if result.severity == AssetCheckSeverity.ERROR else "warning"
    return result._replace(
        metadata={**result.metadata, "failing_rows": shown,
                  "failing_rows_shown": MetadataValue.int(len(failing))},
        description=f"{result.check_name} failed ({kind}) on "
                    f"{count if count is not None else len(failing)} "
                    f"row(s): {first}")


def run_dbt_build(context, dbt: DbtCliResource, warehouse: WarehouseResource
                  ) -> tuple[list, Mapping[str, Any], dict[str, list[dict]]]:
    """dbt build of this asset's selection; the events come back once dbt has finished, so the
    failing rows can be read from the warehouse it held."""
    with warehouse.dbt_env():
        invocation = dbt.cli(["build"], context=context, raise_on_error=False,
                             target_path=dbt_target_path())
        events = list(invocation.stream())
    results = invocation.get_artifact("run_results.json")
    with warehouse.connect() as con:
        rows = failing_rows(con, results)
    events = [explain_check(e, rows) if isinstance(e, AssetCheckResult) else e for e in events]
    return events, results, rows


@dbt_assets(manifest=PROJECT.manifest_path, select="tag:reconciliation",
            dagster_dbt_translator=TRANSLATOR, pool=WAREHOUSE_POOL,
            name="reconciliation_models")
def reconciliation_models(context: AssetExecutionContext, dbt: DbtCliResource,
                          warehouse: WarehouseResource):
    events, results, rows = run_dbt_build(context, dbt, warehouse)
    yield from events
    if errored_models(results):
        raise Failure(description="reconciliation models did not build: "
                                  + ", ".join(errored_models(results)))


def _one_line(rows: list[dict]) -> str:
    return "; ".join(", ".join(f"{k}={v}" for k, v in r.items()) for r in rows[:3])


@dbt_assets(manifest=PROJECT.manifest_path, select="tag:diff",
            dagster_dbt_translator=TRANSLATOR, pool=WAREHOUSE_POOL,
            name="rebuild_diff_models")
def rebuild_diff_models(context: AssetExecutionContext, dbt: DbtCliResource,
                        warehouse: WarehouseResource, store: StoreResource) -> Iterator:
    with warehouse.connect() as con:
        meta = run_candidate_meta(con, context.run.run_id)
    gid = meta["generation_id"]
    events, results, rows = run_dbt_build(context, dbt, warehouse)
    yield from events
    failed = failed_nodes(results)
    detail = blocked = None
    with warehouse.connect() as con, store.session() as st:
        if not errored_models(results):
            record_diff(con, gid)
        # Fail closed: open gate blockers of the join (a sink exception, an accounting gap)
        # hold publication until a recorded decision resolves them; a candidate with nothing
        # to judge is held too.
        blocked = None if failed else (hold_reason(st, PIPELINE)
                                       or candidate_nothing_to_judge(meta))
        if failed:
            detail = "; ".join(f"{n}: {_one_line(rows[n])}" if rows.get(n) else n
                               for n in failed)
            hold_entries(st, meta["entry_ids"], gid, "blocking check failed: " + ", ".join(failed))
        elif blocked:
            hold_entries(st, meta["entry_ids"], gid, blocked)
            detail = blocked
        else:
            mark_validated(st, gid)
        if detail:
            view = view_metadata(st, con)
    if detail:
        # The held generation shows in the operator's table (publication records it otherwise).
        # Yielded, not logged: a logged event would be lost when the step fails right after.
        yield AssetMaterialization(asset_key=GENERATIONS_KEY, metadata=view)
        live = sorted({b["generation_id"] for b in meta.get("based_on", [])})
        stays = (f"Generation {', '.join(live)} stays live." if live
                 else "The live rows stay current.")
        raise Failure(description=f"generation {gid} held, not published: {detail}. {stays}"
                      .replace("\n", " "))
