"""The published JSON Schemas of the input contracts, generated from the structs.

`schemas/contracts/<topic>.json` are committed; regenerate them after changing a struct with
`python -m streaming.contracts.schemas` (``--check`` exits 1 when a committed file differs).
A test holds the committed files equal to the generated ones."""

from __future__ import annotations

import argparse
import os
import sys

import msgspec
import orjson

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
DEFAULT_DIR = os.path.join("schemas", "contracts")


def contract_schema(contract) -> dict:
    """One topic's JSON Schema: the struct's schema, titled by topic, without msgspec's $defs."""
    generated = msgspec.json.schema(contract.struct)
    body = generated["$defs"][contract.struct.__name__]
    return {
        "$schema": SCHEMA_DIALECT,
        "title": contract.topic,
        "description": contract.description,
        "type": "object",
        "required": list(body.get("required", [])),
        "properties": body["properties"],
    }


def render(schema: dict) -> bytes:
    """The committed form: 2-space indent, sorted keys, trailing newline."""
    return orjson.dumps(schema, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"


def published() -> dict[str, dict]:
    """File name stem -> schema, for every registered topic contract."""
    from .topics import CONTRACTS
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=DEFAULT_DIR, help="directory (default %(default)s)")
    ap.add_argument("--check", action="store_true", help="exit 1 if a committed file differs")
    args = ap.parse_args(argv)
    stale = write(args.out, args.check)
    for path in stale:
        print(f"{'out of date' if args.check else 'wrote'}: {path}")
    return 1 if (args.check and stale) else 0


if __name__ == "__main__":
    sys.exit(main())
