"""The published JSON Schemas are generated from the contract structs: the committed files equal
the generated ones, and they state the bounds the decoder enforces."""

from __future__ import annotations

import os
import re

import orjson

from streaming.contracts import CONTRACTS, MAX_ABS_CENTS, MAX_ID_LENGTH, MAX_REVISION
from click.testing import CliRunner

from streaming.cli.main import cli
from streaming.contracts.schemas import published, render, write

ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "schemas",
                    "contracts")


def test_committed_schemas_equal_the_generated_ones():
    shipped = sorted(f[:-5] for f in os.listdir(ROOT) if f.endswith(".json"))
    assert shipped == sorted(CONTRACTS)
    for stem, schema in published().items():
        with open(os.path.join(ROOT, f"{stem}.json"), "rb") as fh:
            assert fh.read() == render(schema), \
                f"{stem}.json is stale: run `riskstream contracts schemas`"
    assert write(ROOT, check=True) == []


def test_write_regenerates_into_a_directory_and_check_reports_drift(tmp_path):
    out = str(tmp_path / "schemas")
    assert len(write(out)) == len(CONTRACTS)
    assert write(out, check=True) == []
    path = os.path.join(out, "payments.json")
    with open(path, "ab") as fh:
        fh.write(b" ")
    assert write(out, check=True) == [path]


def test_schemas_state_the_bounds():
    s = published()
    pay = s["payments"]["properties"]
    assert pay["revision"]["minimum"] == 1 and pay["revision"]["maximum"] == MAX_REVISION
    assert (pay["amount_cents"]["minimum"], pay["amount_cents"]["maximum"]) == \
        (-MAX_ABS_CENTS, MAX_ABS_CENTS)
    assert pay["payment_id"]["maxLength"] == MAX_ID_LENGTH
    pattern = re.compile(pay["payment_id"]["pattern"])
    assert pattern.search("pay-0001") and not pattern.search("a|b")
    assert not pattern.search("a\u001fb") and not pattern.search("a\u0000")
    assert pay["event_time"]["format"] == "date-time"
    score = s["risk_signals"]["properties"]["score"]
    assert (score["type"], score["minimum"], score["maximum"]) == ("number", 0.0, 1.0)
    cats = s["merchant_categories"]
    assert "effective_to" not in cats["required"]
    assert {"type": "null"} in cats["properties"]["effective_to"]["anyOf"]
    assert s["receipts"]["required"] == ["receipt_id", "store_id", "merchant_id",
                                         "amount_cents", "occurred_at", "uploaded_at"]
    for schema in s.values():
        assert orjson.loads(render(schema)) == schema
        assert "schema_version" not in schema["required"]


def test_cli_writes_then_checks(tmp_path):
    out = str(tmp_path / "s")
    runner = CliRunner()
    first = runner.invoke(cli, ["contracts", "schemas", "--out", out])
    assert first.exit_code == 0 and first.output.count("wrote ") == len(CONTRACTS)
    assert runner.invoke(cli, ["contracts", "schemas", "--out", out, "--check"]).exit_code == 0
    os.remove(os.path.join(out, "receipts.json"))
    stale = runner.invoke(cli, ["contracts", "schemas", "--out", out, "--check"])
    assert stale.exit_code == 1 and "receipts.json" in stale.output
