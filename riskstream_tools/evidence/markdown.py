"""Markdown pieces shared by the evidence packets."""

from __future__ import annotations

from collections.abc import Sequence


def table(headers: list[str], rows: list[list]) -> list[str]:
    def cell(v):
        return "" if v is None else str(v).replace("|", "\\|")
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    out += ["| " + " | ".join(cell(v) for v in r) + " |" for r in rows]
    return out + [""]


def verdict(v) -> str:
    """A check's verdict: holds, FAILS, or n/a when the check did not apply."""
    return "n/a" if v is None else ("holds" if v else "FAILS")


def overall_verdict(all_hold: bool) -> str:
    """The packet's verdict over all its checks."""
    return "all checks hold" if all_hold else "SOME CHECKS FAIL"


def checks_and_runs(ev: dict, run_counts: Sequence[str] = ()) -> list[str]:
    """The opening every packet's evidence.md shares: the checks table, the overall verdict,
    and one line naming each run with its records, batches and facts written (then the counts
    named in `run_counts`, e.g. "checkpoints")."""
    def run(name: str, v: dict) -> str:
        more = "".join(f", {v[c]} {c}" for c in run_counts)
        return (f"{name}: {v['records']} records in {v['batches']} batches, "
                f"{v['facts_written']} facts{more}")
    lines = ["## Checks", ""]
    lines += table(["check", "verdict"], [[k, verdict(v)] for k, v in ev["checks"].items()])
    lines += [f"Overall: **{overall_verdict(ev['all_hold'])}**.", "",
              "Runs: " + "; ".join(run(k, v) for k, v in ev["packet"]["runs"].items()) + ".", ""]
    return lines
