"""The receipt-scorer pipeline: contract, watermark delay, operator factory and host hooks.

Pinning order at start: the checkpoint's pin (restored with the operator); else the store's
latest pin (a run that crashed before its first checkpoint); else the registry's `current`
pointer, recorded as the initial pin before anything is scored. An explicit re-pin
(`receipts rescore --model`) writes a newer pin row, which a restored scorer adopts."""

from __future__ import annotations

from ..contracts import RECEIPT
from ..host.settings import PipelineSpec, RunSettings
from ..models.pins import latest_pin, record_pin
from ..models.registry import FEATURE_SCHEMA, Registry
from ..operators.receipts import (KIND, LATENESS_US, PIPELINE, RETENTION_US, STATE_SCHEMA,
                                  WINDOW_US, ReceiptScorer)
from ..store import schema as S
from ..store.ops import Store, current_with_payload, loads


def make_operator(settings: RunSettings) -> ReceiptScorer:
    op = ReceiptScorer()
    # Where to pin from when neither the checkpoint nor the store holds a pin (host concern).
    op.model_dir = settings.extra.get("model_dir")
    return op


def prepare(op: ReceiptScorer, store: Store) -> None:
    pinned = latest_pin(store, PIPELINE)
    if op.model is None:
        if pinned is None:
            model = Registry(op.model_dir).current()
            op.pin(model, record_pin(store, model, "initial_pin", None, PIPELINE))
        else:
            op.pin(pinned[1], pinned[0])
    elif pinned is not None and pinned[0] > op.pin_seq:
        op.pin(pinned[1], pinned[0])  # an explicit re-pin made while the scorer was stopped
    # Decisions written outside the live path (batch_seq NULL: reconciliation, re-pinning)
    # continue revision chains the checkpointed state does not know yet.
    if op.entries:
        v = S.current_view.c
        for r in store.rows(current_with_payload().where(
                v.pipeline == PIPELINE, v.kind == KIND, v.batch_seq.is_(None))):
            op.adopt_decision(r["logical_key"], loads(r["payload"]))


def reference_versions(op: ReceiptScorer) -> dict:
    return {"model_revision": op.model.revision if op.model else None,
            "model_pin_seq": op.pin_seq, "feature_schema": FEATURE_SCHEMA,
            "state_schema": STATE_SCHEMA, "window_us": WINDOW_US, "lateness_us": LATENESS_US,
            "tolerance_us": op.tolerance, "retention_us": RETENTION_US}


SPEC = PipelineSpec(
    name=PIPELINE,
    contracts={"receipts": RECEIPT},
    lateness_us={"receipts": LATENESS_US},
    make_operator=make_operator,
    prepare=prepare,
    reference_versions=reference_versions,
)
