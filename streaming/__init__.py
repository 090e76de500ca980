"""riskstream streaming worker: contracts, sources, watermarks, keyed state, operators,
checkpoints, the append-only fact sink, replay/repair queues and metrics.

Nothing in this package imports Dagster at module level (tests enforce it)."""

__version__ = "0.1.0"
