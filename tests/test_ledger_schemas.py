"""The shipped consumer contract: schemas/ledger/*.json are generated from the contracts and the
output declaration, and validate real records and facts."""

from __future__ import annotations

import os

import orjson

from riskstream_tools.workloads.ledger_seed import at, payment, version
from streaming.pipelines.ledger import all_schemas

ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "schemas",
                    "ledger")


def test_shipped_schemas_match_the_contracts():
    want = all_schemas()
    shipped = {f[:-5] for f in os.listdir(ROOT) if f.endswith(".json")}
    assert shipped == set(want)
    for stem, schema in want.items():
        with open(os.path.join(ROOT, f"{stem}.json"), "rb") as fh:
            assert orjson.loads(fh.read()) == schema, f"{stem}.json is stale: run " \
                                                       f"`riskstream ledger schemas`"


def test_schemas_state_policy_and_required_fields():
    s = all_schemas()
    assert s["source.payments"]["required"] == ["payment_id", "revision", "merchant_id",
                                                "account_id", "amount_cents", "event_time",
                                                "arrival_time"]
    cats = s["source.merchant_categories"]
    assert "effective_to" not in cats["required"]
    assert cats["properties"]["high_risk"]["type"] == "boolean"
    window = s["output.ledger_window"]
    assert {"account_id", "event_hour", "revision", "total_cents", "payment_count",
            "risk_count", "status"} <= set(window["required"])
    assert "Watermark delay 5m, retention 1h00m, maximum backlog age 15m" in \
        window["description"]


def _check(schema: dict, obj: dict) -> list[str]:
    """Minimal structural check: required fields present, declared JSON types respected."""
    errors = [f"missing {f}" for f in schema["required"] if f not in obj]
    types = {"string": str, "integer": int, "boolean": bool, "object": dict, "null": type(None)}
    for name, spec in schema["properties"].items():
        if name not in obj or "type" not in spec:
            continue
        allowed = spec["type"] if isinstance(spec["type"], list) else [spec["type"]]
        if not any(isinstance(obj[name], types[t]) for t in allowed):
            errors.append(f"{name}: {obj[name]!r} is not {allowed}")
    return errors


def test_generated_records_satisfy_source_schemas():
    s = all_schemas()
    p = payment("pay-1", "acct-1", "m-1", at(10), at(10, 1), 100)
    v = version("v-1", "m-1", "grocery", False, at(0), None, at(7))
    assert _check(s["source.payments"], p) == []
    assert _check(s["source.merchant_categories"], v) == []
    assert _check(s["source.payments"], {**p, "amount_cents": "1.00"}) == \
        ["amount_cents: '1.00' is not ['integer']"]
