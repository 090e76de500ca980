"""The candidate generation of a replay-queue entry set (or of a manual interval), and its
publication. Between them sit the dbt diff models and their blocking checks.

The rebuild assets are not partitioned: a generation is identified by (merchant, interval),
which a run carries as tags (`riskstream/merchant`, `riskstream/interval`,
`riskstream/generation`) and which the `live_generations` table lists, live and held."""

from typing import Any


from dagster import (AssetExecutionContext, AssetMaterialization, AssetSpec, Config, Failure,
                     MaterializeResult, MetadataValue, asset, multi_asset)
from pydantic import Field

from streaming.join_generations import pair_diff, publish_generation, record_candidate
from streaming.join_rebuild import WatermarkNotPassed, build_candidate, describe, entries_in

from ..generations_view import diff_metadata, recorded_diffs, view_metadata
from ..rebuild_request import EXAMPLE, RebuildRefused, validate
from ..resources import WAREHOUSE_POOL, StoreResource, WarehouseResource
from ..warehouse import ingest, load_candidate, run_candidate_meta, write_candidate
from .names import CANDIDATE_KEYS, CANDIDATE_TABLES, DIFF_KEYS, GENERATIONS_KEY, PUBLISHED_KEY

TAG_MERCHANT = "riskstream/merchant"
TAG_INTERVAL = "riskstream/interval"
TAG_GENERATION = "riskstream/generation"
TAG_ENTRY_IDS = "riskstream/queue_entry_ids"


class RebuildConfig(Config):
    """What to rebuild: a manual interval (merchant, start, end), or the replay-queue entries
    of one entry set (what the replay-queue sensor sends)."""

    merchant: str = Field(default="", description="Merchant whose interval to rebuild, e.g. "
                                                  "m-0001. Empty when entry_ids are given.")
    start: str = Field(default="", description=f"First payment time to rebuild, ISO-8601 with a "
                                               f"time zone, e.g. {EXAMPLE}.")
    end: str = Field(default="", description="Last payment time to rebuild (inclusive, after "
                                             "start), ISO-8601 with a time zone, e.g. "
                                             "2026-10-06T10:00:00Z.")
    entry_ids: list[int] = Field(default=[], description="Replay-queue entry ids to rebuild "
                                                         "(set by the replay-queue sensor).")


def select_work(store, config: RebuildConfig):
    """(entry ids, pieces or None, request or None); Failure with one plain line otherwise."""
    if config.merchant or config.start or config.end:
        try:
            req = validate(store, config.merchant, config.start, config.end)
        except RebuildRefused as exc:
            raise Failure(description=exc.line) from None
        pieces = list(req.pieces)
        return sorted(set(entries_in(store, pieces)) | set(config.entry_ids)), pieces, req
    if config.entry_ids:
        return sorted(config.entry_ids), None, None
    raise Failure(description="rebuild refused: nothing to rebuild; give merchant, start and "
                              "end (or the replay-queue entry ids)")


@multi_asset(
    name="candidate_generation", pool=WAREHOUSE_POOL,
    specs=[AssetSpec(CANDIDATE_KEYS[source], group_name="rebuild", description=text)
           for source, (_, text) in CANDIDATE_TABLES.items()],
    description="Rebuild one merchant interval from the archive (latest revisions, queued "
                "records included) into candidate tables named by generation id.")
def candidate_generation(context: AssetExecutionContext, config: RebuildConfig,
                         store: StoreResource, warehouse: WarehouseResource):
    with store.session() as st:
        entry_ids, pieces, req = select_work(st, config)
        with warehouse.connect() as con:
            counts = ingest(st, con)
            try:
                cand = build_candidate(st, entry_ids, con=con, pieces=pieces)
            except WatermarkNotPassed as exc:
                raise Failure(description=f"rebuild refused: {exc}") from None
            record_candidate(st, cand)
            write_candidate(con, cand, context.run.run_id)
    info = describe(cand)
    merchant = ",".join(sorted({p["merchant"] for p in info["pieces"]}))
    interval = f"{info['pieces'][0]['start']}/{info['pieces'][-1]['end']}"
    context.instance.add_run_tags(context.run.run_id, {
        TAG_MERCHANT: merchant, TAG_INTERVAL: interval, TAG_GENERATION: cand.generation_id,
        TAG_ENTRY_IDS: ",".join(map(str, cand.entry_ids)) or "none"})
    diff = pair_diff(cand)
    common: dict[str, Any] = {"generation_id": cand.generation_id, "merchant": merchant,
                              "interval": interval}
    per_table: dict[str, dict[str, Any]] = {
        "cand_pairs": {"rows": len(cand.pairs), "pairs_added": len(diff["added"]),
                       "pairs_retired": len(diff["retired"]),
                       "pairs_revised": len(diff["revised"])},
        "base_pairs": {"rows": len(cand.base_pairs),
                       "replaces_generations": MetadataValue.json(
                           sorted({b["generation_id"] for b in cand.based_on}))},
        "cand_outcomes": {"rows": len(cand.outcomes)},
        "cand_pieces": {"rows": len(cand.pieces), "pieces": MetadataValue.json(info["pieces"])},
        "cand_entries": {"rows": len(cand.entry_events),
                         "queue_entry_ids": MetadataValue.json(cand.entry_ids),
                         "ingested": MetadataValue.json(counts)},
    }
    for source, key in CANDIDATE_KEYS.items():
        yield MaterializeResult(asset_key=key, metadata={**common, **per_table[source]})


@asset(key=PUBLISHED_KEY, group_name="rebuild", pool=WAREHOUSE_POOL, deps=DIFF_KEYS,
       description="The validated candidate made live: written into the operational store, the "
                   "interval's generation pointer compared-and-set and its queue entries "
                   "processed, in one transaction. Runs only when every blocking check passed.")
def published_generation(context: AssetExecutionContext, store: StoreResource,
                         warehouse: WarehouseResource):
    with warehouse.connect() as con:
        meta = run_candidate_meta(con, context.run.run_id)
        cand = load_candidate(con, meta)
        diff = recorded_diffs(con).get(cand.generation_id, {})
        with store.session() as st:
            result = publish_generation(st, cand)
            view = view_metadata(st, con)
    context.log.info(f"published {result['generation_id']}: {result}")
    yield AssetMaterialization(asset_key=GENERATIONS_KEY, metadata=view)
    merchant = ",".join(sorted({p.merchant for p in cand.pieces}))
    yield MaterializeResult(metadata={
        "generation_id": result["generation_id"], "merchant": merchant,
        "interval": f"{meta['pieces'][0]['start']}/{meta['pieces'][-1]['end']}",
        "predecessor": ", ".join(result["replaced"]) or "none (first generation)",
        "pairs": result["pairs"], **diff_metadata(diff),
        "corrected_finals": MetadataValue.json(result["corrected_finals"]),
        "queue_entries_processed": result["entries_processed"],
        "pointer_version": result["pointer_version"]})


live_generations = AssetSpec(
    GENERATIONS_KEY, group_name="rebuild",
    description="What is live for each merchant and interval: the live generation, its "
                "predecessor, when and why it was published or held, and what it changed (pairs "
                "added / retired / revised, the merchant's matched payments and amount before and "
                "after). Recorded by every rebuild run, published or held.")
