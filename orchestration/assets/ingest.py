"""Ingest: the operational store's facts, archive, queue, quarantine and generation tables,
copied into the warehouse incrementally from one snapshot of the store."""


from dagster import AssetExecutionContext, AssetKey, AssetSpec, MaterializeResult, multi_asset

from ..resources import WAREHOUSE_POOL, StoreResource, WarehouseResource
from ..warehouse import INGESTED, ingest

INGEST_KEYS = {name: AssetKey(["raw", name]) for name in INGESTED}


@multi_asset(
    specs=[AssetSpec(key, group_name="ingest",
                     description=f"The store's `{name}` table, copied into the warehouse.")
           for name, key in INGEST_KEYS.items()],
    pool=WAREHOUSE_POOL,
    name="ingest_store",
)
def ingest_store(context: AssetExecutionContext, store: StoreResource,
                 warehouse: WarehouseResource):
    st = store.open()
    try:
        with warehouse.connect() as con:
            counts = ingest(st, con)
            totals = {name: con.execute(f"SELECT count(*) FROM raw.{name}").fetchone()[0]
                      for name in INGESTED}
    finally:
        st.dispose()
    for name, key in INGEST_KEYS.items():
        yield MaterializeResult(asset_key=key, metadata={"new_rows": counts[name],
                                                         "rows": totals[name]})
