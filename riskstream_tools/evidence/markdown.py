"""Markdown pieces shared by the evidence packets."""

from __future__ import annotations


def table(headers: list[str], rows: list[list]) -> list[str]:
    def cell(v):
        return "" if v is None else str(v).replace("|", "\\|")
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    out += ["| " + " | ".join(cell(v) for v in r) + " |" for r in rows]
    return out + [""]


def verdict(v) -> str:
    """A check's verdict: holds, FAILS, or n/a when the check did not apply."""
    return "n/a" if v is None else ("holds" if v else "FAILS")
