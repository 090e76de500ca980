"""Registers every table module on the shared metadata before `create_all` runs.

Pipelines that need tables of their own define them in `tables_<pipeline>.py` with
`from .schema import metadata` and add one import line here."""

from . import schema  # noqa: F401
from . import tables_receipts  # noqa: F401
from . import tables_ledger  # noqa: F401
from . import tables_generations  # noqa: F401
from . import tables_gates  # noqa: F401
from . import tables_lease  # noqa: F401
