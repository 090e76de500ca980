"""The join benchmark workload (`generate_bulk`): IDs in draw order by default, in event-time
order with `ordered_ids`, over the same events."""

from __future__ import annotations

import os

import orjson

from riskstream_tools.workloads.join_seed import generate_bulk

EVENTS = 2_000


def _read(root) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for topic in ("payments", "risk_signals"):
        for p in range(4):
            path = os.path.join(root, topic, f"p{p}.jsonl")
            with open(path, "rb") as fh:
                out.setdefault(topic, []).extend(orjson.loads(line) for line in fh)
    return out


def _number(rec: dict) -> int:
    return int((rec.get("payment_id") or rec["signal_id"]).split("-")[1])


def _event(rec: dict) -> tuple:
    """A record without its names (the ID and the account the payment's ID decides)."""
    return tuple(sorted((k, v) for k, v in rec.items()
                        if k not in ("payment_id", "signal_id", "account_id")))


def test_ordered_ids_number_the_same_events_in_event_time_order(tmp_path):
    generate_bulk(5, tmp_path / "drawn", EVENTS, merchants=20, hot_share=0.2)
    generate_bulk(5, tmp_path / "ordered", EVENTS, merchants=20, hot_share=0.2,
                  ordered_ids=True)
    drawn, ordered = _read(tmp_path / "drawn"), _read(tmp_path / "ordered")
    for topic in ("payments", "risk_signals"):
        assert len(drawn[topic]) == len(ordered[topic]) == EVENTS // 2
        assert sorted(map(_event, drawn[topic])) == sorted(map(_event, ordered[topic]))
    every_drawn = drawn["payments"] + drawn["risk_signals"]
    every_ordered = ordered["payments"] + ordered["risk_signals"]
    # One numbering over both topics, each number once.
    assert sorted(map(_number, every_drawn)) == list(range(EVENTS))
    assert sorted(map(_number, every_ordered)) == list(range(EVENTS))
    # By default the numbers follow the draw (payments even, signals odd), not the times.
    assert {_number(r) % 2 for r in drawn["payments"]} == {0}
    by_number = [r["event_time"] for r in sorted(every_drawn, key=_number)]
    assert by_number != sorted(by_number)
    # Ordered: numbering by ID is numbering by event time.
    by_number = [r["event_time"] for r in sorted(every_ordered, key=_number)]
    assert by_number == sorted(by_number)
