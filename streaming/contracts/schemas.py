"""The published JSON Schemas of the input contracts, generated from the structs.

`schemas/contracts/<topic>.json` are committed; regenerate them after changing a struct with
`riskstream contracts schemas` (``--check`` exits 1 when a committed file differs). A test holds
the committed files equal to the generated ones."""

from __future__ import annotations

import os
from typing import Any

import orjson

from .core import contract_schema
from .topics import CONTRACTS

DEFAULT_DIR = os.path.join("schemas", "contracts")


def render(schema: dict[str, Any]) -> bytes:
    """The committed form: 2-space indent, sorted keys, trailing newline."""
    return orjson.dumps(schema, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"


def published() -> dict[str, dict[str, Any]]:
    """File name stem -> schema, for every registered topic contract."""
    return {topic: contract_schema(c) for topic, c in sorted(CONTRACTS.items())}


def write(out_dir: str = DEFAULT_DIR, check: bool = False) -> list[str]:
    """Write the schemas (or, with check, only compare). Returns the paths that differed."""
    stale = []
    for stem, schema in published().items():
        path = os.path.join(out_dir, f"{stem}.json")
        text = render(schema)
        try:
            with open(path, "rb") as fh:
                same = fh.read() == text
        except FileNotFoundError:
            same = False
        if same:
            continue
        stale.append(path)
        if not check:
            os.makedirs(out_dir, exist_ok=True)
            with open(path, "wb") as fh:
                fh.write(text)
    return stale
