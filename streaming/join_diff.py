"""The pair diff of the interval join, defined once: two sets of pair rows (the published rows
and a candidate, or the published view before and after a publication) compared by logical pair
(payment, signal, rule version).

added: logical pairs only in `after`; retired: only in `before`; revised: in both with another
pair id (a revision of the payment or the signal changed). The dbt model `diff_pair_keys` states
the same rule in SQL for the warehouse; a test holds the two equal on the seed."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

Row = dict[str, Any]

CHANGES = ("added", "retired", "revised")


def logical_pair(row: Row) -> tuple[str, str, str]:
    return row["payment_id"], row["signal_id"], row["rule_version"]


def diff_pairs(before: Sequence[Row], after: Sequence[Row]) -> dict[str, list[tuple[Any, Any]]]:
    """Per change, sorted by logical pair: (before row, after row); the side a change lacks
    is None (added has no before row, retired no after row)."""
    b = {logical_pair(r): r for r in before}
    a = {logical_pair(r): r for r in after}
    return {"added": [(None, a[k]) for k in sorted(set(a) - set(b))],
            "retired": [(b[k], None) for k in sorted(set(b) - set(a))],
            "revised": [(b[k], a[k]) for k in sorted(set(a) & set(b))
                        if a[k]["pair_id"] != b[k]["pair_id"]]}
