"""riskstream streaming worker: contracts, sources, watermarks, keyed state, operators,
checkpoints, the append-only fact sink, replay/repair queues and metrics.

Nothing in this package imports Dagster at module level (tests enforce it)."""

__version__ = "0.1.0"

# Whether the compiled core (streaming.native) or its Python sources load in this process:
# decided here, before any of its modules is imported.
from . import native as _native  # noqa: E402

_native.select()
