"""The cyclic garbage collector's settings while a run processes records: one definition for
the worker's host loop, the writer process that commits its batches, and the benchmark that
drives an operator the way the host does."""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Final

from . import native

# Young-generation threshold, middle and old as CPython's own ratios would leave them. The
# collector counts tracked objects allocated less those freed, so in a run that count grows
# with the operator's state (a list or two per payment, per identity), not with the short-lived
# dicts and tuples of each record, which are freed before it looks. Every young collection then
# walks the state added since the last one, and every 20th walks a million of those again.
# Measured on a 1,000,000-event `ledger run` (docs/performance.md, twelfth round): at 50,000,
# 91 young and 4 middle collections took 3.5 s of the run; at 500,000, 5 young and none of the
# middle took 1.3 s. The writer process's own objects are each batch's rows, freed once it
# commits: with CPython's thresholds it ran 5,065 young collections in a 1,000,000-event
# `join run` (1.85 s of collections in all). The hot loop builds no reference cycles, so the
# garbage collected late is what a module or a library leaves, not a per-record amount.
RUN_THRESHOLDS = (500_000, 20, 50)

# `untrack_flat(row)` where the compiled core is in use, else None: takes a list out of the
# collector's sight unless an item of it is an object the collector could need to see
# (streaming/_collector.c says why that is safe). Most of what a young collection walks in a
# run is state that outlives its batch, and most of that state is small lists of ints and
# texts, which can be part of no reference cycle (docs/performance.md, thirty-sixth round).
# The rows the operators take out of sight, each made only of ints, texts and None:
#   an identity row of every operator (operators.identity: `remember`, `load`);
#   a payment of a ledger window (operators.ledger: `Window.add`);
#   a receipt scorer's entry (operators.receipts: `_insert`, `restore`; its encoded JSON is an
#   `orjson.Fragment`, which the collector never tracks).
# Without the compiled core they stay tracked: collections take longer, the answers are the
# same.
UNTRACK_FLAT: Final[Callable[[list], bool] | None] = native.hand_written(
    "streaming._collector", "untrack_flat")


@contextmanager
def run_collector() -> Iterator[None]:
    """Within the block: what exists at its start (the recording's index, the restored state,
    the imported modules) is out of the collector's sight (`gc.freeze`), and young objects are
    collected at RUN_THRESHOLDS. Both are undone at its end."""
    gc.freeze()
    saved = gc.get_threshold()
    gc.set_threshold(*RUN_THRESHOLDS)
    try:
        yield
    finally:
        gc.set_threshold(*saved)
        gc.unfreeze()
