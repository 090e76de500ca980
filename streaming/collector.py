"""The cyclic garbage collector's settings while a run processes records: one definition for
the worker's host loop, the writer process that commits its batches, and the benchmark that
drives an operator the way the host does."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

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
