"""The replay-queue sensor: pending entry sets become rebuild runs, and held sets whose
blocking cause is gone (a new generation, a newer correction, resolved gate blockers) are
retried, with the hold reason and the cause in the run's tags.

One run key per entry set (pipeline, merchant, date and a digest of its entry ids), so a tick
that sees the same set again requests nothing new. The cursor is the highest queue entry id
already turned into a run request; sets with no newer entry are skipped without a request."""


import hashlib

from dagster import (RunRequest, SensorEvaluationContext, SensorResult,
                     SkipReason, sensor)
from sqlalchemy import select

from streaming.join_held import held_entry_sets, retry_cause
from streaming.join_rebuild import entry_sets
from streaming.store import schema as S
from streaming.store.tables_ledger import ledger_repair_requests

from .jobs import ledger_repair, rebuild_run_config, receipt_repair, replay_rebuild
from .assets.rebuild import TAG_ENTRY_IDS, TAG_MERCHANT
from .automation import default_sensor_status
from .resources import StoreResource

TAG_QUEUE_DATE = "riskstream/queue_date"


def entry_set_tags(s) -> dict[str, str]:
    """Tags of an entry set's run (the generation and interval tags follow once it is built)."""
    return {TAG_MERCHANT: s.merchant, TAG_QUEUE_DATE: s.queue_date,
            TAG_ENTRY_IDS: ",".join(map(str, s.entry_ids))}


def plan_requests(sets, cursor: int):
    fresh = [s for s in sets if max(s.entry_ids) > cursor]
    requests = [RunRequest(run_key=s.run_key,
                           run_config=rebuild_run_config(entry_ids=s.entry_ids),
                           tags=entry_set_tags(s))
                for s in fresh]
    new_cursor = max([cursor] + [max(s.entry_ids) for s in fresh])
    return requests, new_cursor


@sensor(job=replay_rebuild, minimum_interval_seconds=30,
        default_status=default_sensor_status(),
        description="Turns pending replay-queue entry sets into replay_rebuild runs.")
def replay_queue_sensor(context: SensorEvaluationContext, store: StoreResource):
    cursor = int(context.cursor or 0)
    with store.session() as st:
        sets = entry_sets(st)
        held = [(h, retry_cause(st, h)) for h in held_entry_sets(st)]
    requests, new_cursor = plan_requests(sets, cursor)
    requests += plan_retries(held)
    if not requests:
        waiting = "; ".join(h.describe() for h, _ in held)
        return SkipReason(f"no pending entry set beyond queue entry {cursor}"
                          + (f"; held until their cause is gone: {waiting}" if waiting else ""))
    return SensorResult(run_requests=requests, cursor=str(new_cursor))


def _tag(text: str) -> str:
    return text if len(text) <= 250 else text[:247] + "..."


def plan_retries(held) -> list[RunRequest]:
    """One retry request per held entry set whose blocking cause is gone; its run key derives
    from the cause, so the same cause never requests twice."""
    return [RunRequest(run_key=h.retry_run_key(cause),
                       run_config=rebuild_run_config(entry_ids=h.entry_ids),
                       tags={**entry_set_tags(h),
                             "riskstream/held_reason": _tag("; ".join(h.reasons)),
                             "riskstream/retry_cause": _tag(cause)})
            for h, cause in held if cause]


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
        default_status=default_sensor_status(),
        description="Pending signed ledger repair requests -> a ledger_repair run.")
def ledger_repair_sensor(context: SensorEvaluationContext, store: StoreResource):
    with store.session() as st:
        return _pending_sensor_result(context, "ledger", pending_ledger_requests(st))


@sensor(job=receipt_repair, minimum_interval_seconds=30,
        default_status=default_sensor_status(),
        description="Pending receipt reconciliation records -> a receipt_repair run.")
def receipt_repair_sensor(context: SensorEvaluationContext, store: StoreResource):
    with store.session() as st:
        return _pending_sensor_result(context, "receipts", pending_receipt_records(st))
