"""The replay-queue sensor: pending entry sets become rebuild runs.

One run key per entry set (pipeline, merchant, date and a digest of its entry ids), so a tick
that sees the same set again requests nothing new. The cursor is the highest queue entry id
already turned into a run request; sets with no newer entry are skipped without a request."""


import hashlib

from dagster import (DefaultSensorStatus, RunRequest, SensorEvaluationContext, SensorResult,
                     SkipReason, sensor)
from sqlalchemy import select

from streaming.join_rebuild import entry_sets
from streaming.store import schema as S
from streaming.store.tables_ledger import ledger_repair_requests

from .jobs import ledger_repair, rebuild_run_config, receipt_repair, replay_rebuild
from .partitions import replay_dates
from .resources import StoreResource


def plan_requests(sets, cursor: int, known_dates: set[str]):
    fresh = [s for s in sets if max(s.entry_ids) > cursor]
    requests = [RunRequest(run_key=s.run_key, partition_key=s.queue_date,
                           run_config=rebuild_run_config(entry_ids=s.entry_ids),
                           tags={"riskstream/merchant": s.merchant,
                                 "riskstream/entries": ",".join(map(str, s.entry_ids))})
                for s in fresh]
    new_dates = sorted({s.queue_date for s in fresh} - known_dates)
    new_cursor = max([cursor] + [max(s.entry_ids) for s in fresh])
    return requests, new_dates, new_cursor


@sensor(job=replay_rebuild, minimum_interval_seconds=30,
        default_status=DefaultSensorStatus.STOPPED,
        description="Turns pending replay-queue entry sets into replay_rebuild runs.")
def replay_queue_sensor(context: SensorEvaluationContext, store: StoreResource):
    cursor = int(context.cursor or 0)
    with store.session() as st:
        sets = entry_sets(st)
    known = set(context.instance.get_dynamic_partitions(str(replay_dates.name)))
    requests, new_dates, new_cursor = plan_requests(sets, cursor, known)
    if not requests:
        return SkipReason(f"no pending entry set beyond queue entry {cursor}")
    return SensorResult(
        run_requests=requests, cursor=str(new_cursor),
        dynamic_partitions_requests=[replay_dates.build_add_request(new_dates)] if new_dates
        else [])


def pending_ledger_requests(store) -> list[str]:
    c = ledger_repair_requests.c
    return [r["request_id"] for r in store.rows(
        select(c.request_id).where(c.status == "pending").order_by(c.request_id))]


def pending_receipt_records(store) -> list[int]:
    q = S.replay_queue.c
    return [r["id"] for r in store.rows(
        select(q.id).where(q.pipeline == "receipts", q.status == "pending").order_by(q.id))]


def work_run_key(prefix: str, ids: list) -> str:
    """One run key per set of pending items: the same set on a later tick requests nothing."""
    digest = hashlib.blake2b(",".join(map(str, ids)).encode(), digest_size=8).hexdigest()
    return f"{prefix}:{len(ids)}:{digest}"


def _pending_sensor_result(context, prefix: str, ids: list):
    if not ids:
        return SkipReason(f"no pending {prefix} work")
    key = work_run_key(prefix, ids)
    if context.cursor == key:
        return SkipReason(f"{len(ids)} pending {prefix} items already requested ({key})")
    return SensorResult(run_requests=[RunRequest(run_key=key)], cursor=key)


@sensor(job=ledger_repair, minimum_interval_seconds=30,
        default_status=DefaultSensorStatus.STOPPED,
        description="Pending signed ledger repair requests -> a ledger_repair run.")
def ledger_repair_sensor(context: SensorEvaluationContext, store: StoreResource):
    with store.session() as st:
        return _pending_sensor_result(context, "ledger", pending_ledger_requests(st))


@sensor(job=receipt_repair, minimum_interval_seconds=30,
        default_status=DefaultSensorStatus.STOPPED,
        description="Pending receipt reconciliation records -> a receipt_repair run.")
def receipt_repair_sensor(context: SensorEvaluationContext, store: StoreResource):
    with store.session() as st:
        return _pending_sensor_result(context, "receipts", pending_receipt_records(st))
