"""In-process repair over everything pending, through the same jobs the sensors launch: one
`replay_rebuild` run per join entry set, then `ledger_repair` and `receipt_repair` when those
pipelines have pending work (for scripts, the demo and CI)."""

from __future__ import annotations

from typing import Any

import logging
import os
from dataclasses import dataclass

from dagster import DagsterInstance

from streaming.join_held import held_entry_sets, watermark_wait
from streaming.join_rebuild import entry_sets

from .definitions import build_defs
from .jobs import rebuild_run_config
from .resources import StoreResource, WarehouseResource, make_dbt_resource
from .sensors import (entry_set_tags, pending_ledger_requests, pending_receipt_records,
                      work_run_key)

log = logging.getLogger(__name__)


@dataclass
class RepairOutcome:
    run_key: str
    merchant: str
    queue_date: str
    entry_ids: list[int]
    run_id: str
    success: bool
    waiting: str | None = None  # why the set was not run: the watermark has not passed it
    held_reason: str | None = None  # for a retry: why the set was held


def resources_for(store_url: str | None = None, warehouse_path: str | None = None) -> dict:
    return {"store": StoreResource(url=store_url), "warehouse": WarehouseResource(
        path=warehouse_path), "dbt": make_dbt_resource()}


def _instance() -> DagsterInstance:
    """The instance under DAGSTER_HOME when one is configured, else an ephemeral one."""
    import os
    return DagsterInstance.get() if os.environ.get("DAGSTER_HOME") else \
        DagsterInstance.ephemeral()


def _console(level: str | None) -> dict:
    """Run config for Dagster's console logger; the level comes from the caller or
    RISKSTREAM_DAGSTER_LOG_LEVEL (default INFO; the demo and evidence packet use WARNING)."""
    level = (level or os.environ.get("RISKSTREAM_DAGSTER_LOG_LEVEL", "INFO")).upper()
    return {"loggers": {"console": {"config": {"log_level": level}}}}


def run_pending(store_url: str | None = None, warehouse_path: str | None = None,
                instance: DagsterInstance | None = None,
                log_level: str | None = None, retry_held: bool = False) -> list[RepairOutcome]:
    """Run the rebuild job once per pending entry set (and, with `retry_held`, once per held
    set); returns one outcome per set. A set whose interval the live watermarks have not passed
    is not run: its outcome says what it waits for."""
    res = resources_for(store_url, warehouse_path)
    store = res["store"].open()
    try:
        sets: list[tuple[Any, str | None, str | None]] = [
            (s, None, watermark_wait(store, s.entry_ids)) for s in entry_sets(store)]
        if retry_held:
            sets += [(h.entry_set(), "; ".join(h.reasons), watermark_wait(store, h.entry_ids))
                     for h in held_entry_sets(store)]
        ledger = pending_ledger_requests(store)
        receipts = pending_receipt_records(store)
    finally:
        store.dispose()
    log.info("pending work: %d join entry sets, %d ledger requests, %d receipt records",
             len(sets), len(ledger), len(receipts))
    if not (sets or ledger or receipts):
        return []
    out = [RepairOutcome(s.run_key, s.merchant, s.queue_date, s.entry_ids, "", False,
                         waiting=wait, held_reason=held)
           for s, held, wait in sets if wait]
    runnable = [(s, held) for s, held, wait in sets if not wait]
    if not (runnable or ledger or receipts):
        return out
    own = instance is None
    instance = instance or _instance()
    defs = build_defs(res)
    job = defs.resolve_job_def("replay_rebuild")
    try:
        for name, prefix, ids in (("ledger_repair", "ledger", ledger),
                                  ("receipt_repair", "receipts", receipts)):
            if not ids:
                continue
            key = work_run_key(prefix, ids)
            result = defs.resolve_job_def(name).execute_in_process(
                run_config=_console(log_level), instance=instance, raise_on_error=False,
                tags={"dagster/run_key": key})
            out.append(RepairOutcome(key, "", "", [], result.run_id, result.success))
            log.info("%s run %s (%s): %s", name, result.run_id, key,
                     "succeeded" if result.success else "failed")
        for s, held in runnable:
            key = s.run_key + (":retry" if held else "")
            result = job.execute_in_process(
                run_config={**rebuild_run_config(entry_ids=s.entry_ids), **_console(log_level)},
                instance=instance, raise_on_error=False,
                tags={"dagster/run_key": key, **entry_set_tags(s)})
            out.append(RepairOutcome(key, s.merchant, s.queue_date, s.entry_ids,
                                     result.run_id, result.success, held_reason=held))
            log.info("replay_rebuild run %s (%s, %s %s): %s", result.run_id, key, s.merchant,
                     s.queue_date, "succeeded" if result.success else "failed")
    finally:
        if own:
            instance.dispose()
    return out
