"""docs/join.md states the seed's pair counts; they are measured here, so the page cannot drift
from what the seed run gives."""

from __future__ import annotations

import re
from pathlib import Path

from streaming.cli.join import pair_rows
from streaming.store.ops import Store
from tests.orchestration_helpers import live_seed

DOC = Path(__file__).resolve().parents[1] / "docs" / "join.md"


def test_join_doc_states_the_seed_counts(seed_dir, tmp_path):
    url = f"sqlite:///{tmp_path}/ops.sqlite"
    live_seed(seed_dir[0], url)
    store = Store(url)
    try:
        current = pair_rows(store, False)
        every = pair_rows(store, True)
    finally:
        store.dispose()
    retired = [r for r in every if r["status"] == "retired"]
    text = " ".join(DOC.read_text().split())
    m = re.search(r"([\d,]+) pair publications, (\d+) of them retired .*? leaving ([\d,]+) "
                  r"current pairs: `join pairs` lists ([\d,]+) rows, `join pairs --all` ([\d,]+)",
                  text)
    assert m, "the seed counts sentence is missing from docs/join.md"
    num = lambda s: int(s.replace(",", ""))  # noqa: E731
    assert (num(m[1]), num(m[2]), num(m[3]), num(m[4]), num(m[5])) == (
        len(every), len(retired), len(current), len(current), len(every))
    assert {(r["payment_id"], r["signal_id"]) for r in retired} == {
        ("pay-rev-pay", "risk-rev"), ("pay-rev-sig", "risk-rev")}
