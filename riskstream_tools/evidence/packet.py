"""Where an evidence packet lands: evidence.json with everything, evidence.md as the page a
reviewer reads (the index and the commands point to both by these names)."""

from __future__ import annotations

import os
from collections.abc import Callable

import orjson


def write_packet(out: str, evidence: dict, render: Callable[[dict], str]) -> None:
    """Write `evidence` to OUT/evidence.json and `render(evidence)` to OUT/evidence.md."""
    with open(os.path.join(out, "evidence.json"), "wb") as fh:
        fh.write(orjson.dumps(evidence, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS))
    with open(os.path.join(out, "evidence.md"), "w", encoding="utf-8") as fh:
        fh.write(render(evidence))
