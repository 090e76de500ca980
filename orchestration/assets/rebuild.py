"""The candidate generation of a replay-queue entry set (or of a manual interval), and its
publication. Between them sit the dbt diff models and their blocking checks."""

from typing import Any

from dagster import (AssetExecutionContext, AssetSpec, Config, Failure, MaterializeResult,
                     MetadataValue, asset, multi_asset)

from streaming.join_generations import pair_diff, publish_generation, record_candidate
from streaming.join_rebuild import (WatermarkNotPassed, build_candidate, describe, entries_in,
                                    manual_pieces, pending_entries)

from ..partitions import replay_dates
from ..resources import WAREHOUSE_POOL, StoreResource, WarehouseResource
from ..warehouse import ingest, load_candidate, run_candidate_meta, write_candidate
from .names import CANDIDATE_KEYS, DIFF_KEYS, PUBLISHED_KEY


class RebuildConfig(Config):
    """Either the queue entries of one entry set (what the sensor sends), or a manual interval
    (merchant, start, end as ISO-8601 UTC) which also settles the queued entries it covers.
    With neither, every pending entry of the partition's date is rebuilt."""

    entry_ids: list[int] = []
    merchant: str = ""
    start: str = ""
    end: str = ""


def select_work(store, config: RebuildConfig, partition_date: str):
    if config.merchant:
        if not (config.start and config.end):
            raise Failure(description="a manual rebuild needs merchant, start and end")
        pieces = manual_pieces(config.merchant, config.start, config.end)
        return sorted(set(entries_in(store, pieces)) | set(config.entry_ids)), pieces
    if config.entry_ids:
        return sorted(config.entry_ids), None
    ids = [e["id"] for e in pending_entries(store) if e["queue_date"] == partition_date]
    if not ids:
        raise Failure(description=f"no pending replay-queue entries dated {partition_date}")
    return ids, None


@multi_asset(
    name="candidate_generation", partitions_def=replay_dates, pool=WAREHOUSE_POOL,
    specs=[AssetSpec(key, group_name="rebuild",
                     description="The running rebuild's candidate table (a view of the table "
                                 "named by its generation id).") for key in CANDIDATE_KEYS],
    description="Rebuild of the entry set's interval from the archive into candidate tables "
                "named by generation id.")
def candidate_generation(context: AssetExecutionContext, config: RebuildConfig,
                         store: StoreResource, warehouse: WarehouseResource):
    st = store.open()
    try:
        entry_ids, pieces = select_work(st, config, context.partition_key)
        with warehouse.connect() as con:
            counts = ingest(st, con)
            try:
                cand = build_candidate(st, entry_ids, con=con, pieces=pieces)
            except WatermarkNotPassed as exc:
                raise Failure(description=str(exc)) from exc
            record_candidate(st, cand)
            write_candidate(con, cand, context.run.run_id)
    finally:
        st.dispose()
    diff = pair_diff(cand)
    info = describe(cand)
    summary: dict[str, Any] = {
        "generation_id": cand.generation_id,
        "pieces": MetadataValue.json(info["pieces"]),
        "entry_ids": MetadataValue.json(cand.entry_ids),
        "candidate_pairs": len(cand.pairs), "current_pairs": len(cand.base_pairs),
        "added": len(diff["added"]), "retired": len(diff["retired"]),
        "revised": len(diff["revised"]), "ingested": MetadataValue.json(counts)}
    for key in CANDIDATE_KEYS:
        yield MaterializeResult(asset_key=key, metadata=summary)


@asset(key=PUBLISHED_KEY, partitions_def=replay_dates, group_name="rebuild",
       pool=WAREHOUSE_POOL, deps=DIFF_KEYS,
       description="The validated candidate written into the operational store, its pointers "
                   "compared-and-set and its entries processed, in one transaction.")
def published_generation(context: AssetExecutionContext, store: StoreResource,
                         warehouse: WarehouseResource):
    with warehouse.connect() as con:
        cand = load_candidate(con, run_candidate_meta(con, context.run.run_id))
    st = store.open()
    try:
        result = publish_generation(st, cand)
    finally:
        st.dispose()
    context.log.info(f"published {result['generation_id']}: {result}")
    return MaterializeResult(metadata={
        "generation_id": result["generation_id"], "pairs": result["pairs"],
        "corrected_finals": MetadataValue.json(result["corrected_finals"]),
        "entries_processed": result["entries_processed"],
        "replaced": MetadataValue.json(result["replaced"]),
        "pointer_version": result["pointer_version"]})
