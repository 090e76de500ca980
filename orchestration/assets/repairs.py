"""The ledger's signed repair requests and the receipts' reconciliation records, repaired through
the worker-side repair functions (the same ones the CLI runs). They write the operational store
only, in their own transactions, so they stay outside the warehouse pool."""

from dagster import AssetExecutionContext, Failure, MaterializeResult, MetadataValue, asset

from streaming.repairs.ledger import RepairKeyMissing, run_ledger_repairs
from streaming.repairs.receipts import RepairRefused, run_receipt_reconciliation

from ..resources import StoreResource


@asset(group_name="repairs", description="Verify and apply every pending signed ledger repair "
                                          "request (corrected revisions with predecessor links).")
def ledger_repairs(context: AssetExecutionContext, store: StoreResource):
    try:
        with store.session() as st:
            summary = run_ledger_repairs(st)
    except RepairKeyMissing as exc:
        raise Failure(description=str(exc)) from exc
    context.log.info(f"ledger repairs: {summary}")
    if summary["blocked"]:
        raise Failure(description=f"no repair applied: {summary['blocked']}")
    return MaterializeResult(metadata={
        "still_held": summary["still_held"],
        "pending": summary["pending"], "repaired": len(summary["repaired"]),
        "held": MetadataValue.json(summary["held"]),
        "published": MetadataValue.json(summary["published"]),
        "waiting": len(summary["waiting"]), "key": summary["key"]})


@asset(group_name="repairs", description="Score the pending receipt reconciliation records and "
                                          "rescore the decisions they change.")
def receipt_reconciliation(context: AssetExecutionContext, store: StoreResource):
    try:
        with store.session() as st:
            summary = run_receipt_reconciliation(st)
    except RepairRefused as exc:
        raise Failure(description=str(exc)) from exc
    context.log.info(f"receipt reconciliation: {summary}")
    return MaterializeResult(metadata={
        "records": summary["records"], "repaired": len(summary["repaired"]),
        "rescored": len(summary["rescored"]), "duplicates": len(summary["duplicates"]),
        "held": MetadataValue.json(summary["held"]),
        "model_revision": summary["model_revision"]})
