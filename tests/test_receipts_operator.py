"""The receipt scorer as a pure state machine: cutoffs, duplicates, allowed delay, live
rescoring with predecessor links, snapshot/restore."""

from __future__ import annotations

import orjson
import pytest

from streaming.models.registry import INITIAL_ARTIFACT, Model
from streaming.operators.base import DUPLICATE, ROUTED, Emit
from streaming.operators.receipts import ReceiptScorer
from streaming.timeutil import POS_INF, parse_utc_us

from .receiptsutil import at, rcpt, record

MODEL = Model.from_artifact(INITIAL_ARTIFACT)


def wm(minute):
    return parse_utc_us(at(minute))


def feed(op, objs, out=None):
    out = Emit() if out is None else out
    for i, o in enumerate(objs):
        op.on_record(record(o, 0, i), out)
    return out


def by_key(out):
    return {f.fact_key: f for f in out.facts}


def test_features_read_the_merchant_window_up_to_the_exclusive_cutoff():
    op = ReceiptScorer(MODEL)
    out = feed(op, [rcpt("a", "m1", 0, cents=100), rcpt("b", "m1", 3, cents=200),
                    rcpt("c", "m1", 6.9, cents=400), rcpt("d", "m1", 7, cents=800),
                    rcpt("d2", "m1", 7, cents=1600), rcpt("e", "m1", 10, cents=50),
                    rcpt("x", "m2", 5, cents=9999)])
    assert out.facts == []  # nothing is scored before the watermark reaches it
    op.on_watermark("receipts", wm(7), out)
    got = by_key(out)
    assert sorted(got) == ["a|1", "b|1", "c|1", "d2|1", "d|1", "x|1"]
    d = got["d|1"].payload
    # [0, 7): a, b, c; not d2 (same instant) and not m2's receipt.
    assert (d["feature_count_7m"], d["feature_amount_7m"]) == (3, 700)
    assert (got["d2|1"].payload["feature_count_7m"], got["d2|1"].payload["feature_amount_7m"]) \
        == (3, 700)
    assert d["state_cutoff"] == at(7) and d["watermark"] == at(7)
    assert (got["a|1"].payload["feature_count_7m"], got["x|1"].payload["feature_count_7m"]) \
        == (0, 0)
    op.on_watermark("receipts", wm(12), out)
    e = by_key(out)["e|1"].payload
    # [3, 10): b, c, d, d2 (a at 0 is outside).
    assert (e["feature_count_7m"], e["feature_amount_7m"]) == (4, 3000)
    assert e["model_revision"] == MODEL.revision


def test_duplicate_upload_adds_nothing_and_conflict_is_quarantined():
    op = ReceiptScorer(MODEL)
    out = feed(op, [rcpt("a", "m1", 1, cents=500), rcpt("a", "m1", 1, upload=9, cents=500),
                    rcpt("a", "m1", 1, upload=9.5, cents=501), rcpt("b", "m1", 4)])
    assert [d for _, d in out.disposed()].count(DUPLICATE) == 1
    assert [(q.offset, q.reason) for q in out.quarantine] == [(2, "conflicting_duplicate")]
    op.on_watermark("receipts", wm(5), out)
    b = by_key(out)["b|1"].payload
    assert (b["feature_count_7m"], b["feature_amount_7m"]) == (1, 500)
    assert sorted(by_key(out)) == ["a|1", "b|1"]
    out2 = feed(op, [rcpt("a", "m1", 1, upload=30, cents=500)])
    assert out2.facts == [] and [d for _, d in out2.disposed()] == [DUPLICATE]


def test_beyond_allowed_delay_is_queued_within_tolerance_is_scored_and_rescores():
    op = ReceiptScorer(MODEL)
    out = feed(op, [rcpt("a", "m1", 16, cents=300), rcpt("b", "m1", 19, cents=300)])
    op.on_watermark("receipts", wm(20), out)
    assert sorted(by_key(out)) == ["a|1", "b|1"]
    late = Emit()
    # 5.1 min below the watermark: beyond the 5-minute tolerance.
    feed(op, [rcpt("old", "m1", 14.9, upload=22, cents=700),
              # 4.5 min below: within tolerance, scored live at once.
              rcpt("tol", "m1", 15.5, upload=22, cents=1000)], late)
    assert [(q.event_id, q.reason) for q in late.queue] == [("old", "beyond_allowed_delay")]
    assert late.queue[0].watermark_at_arrival == wm(20)
    assert ("old", ROUTED) in late.disposed()
    got = by_key(late)
    assert "old|1" not in got
    tol = got["tol|1"].payload
    # The queued receipt is history (it occurred): tol at 15.5 reads [8.5, 15.5) = old.
    assert (tol["feature_count_7m"], tol["feature_amount_7m"]) == (1, 700)
    # a (16) and b (19) are in (15.5, 22.5]: both change, both get revision 2.
    assert got["a|2"].predecessor_key == "a|1" and got["b|2"].predecessor_key == "b|1"
    assert got["a|2"].status == "rescored"
    assert got["a|2"].payload["feature_amount_7m"] == 1700  # old + tol
    assert got["b|2"].payload["feature_amount_7m"] == 2000  # old + tol + a
    assert op.counters["late_within_tolerance"] == 1 and op.counters["beyond_allowed_delay"] == 1


def test_decisions_are_scored_by_the_model_pinned_when_they_are_made():
    # The scorer keeps the pinned model's scorer beside it: a pin, and a restore, must reach
    # the next decision.
    other = Model.from_artifact({**INITIAL_ARTIFACT,
                                 "intercept": INITIAL_ARTIFACT["intercept"] + 1.5})
    assert other.revision != MODEL.revision
    op = ReceiptScorer(MODEL)
    out = feed(op, [rcpt("a", "m1", 1, cents=500)])
    op.on_watermark("receipts", wm(1), out)
    op.pin(other, 2)
    feed(op, [rcpt("b", "m1", 2, cents=700)], out)
    op.on_watermark("receipts", wm(2), out)
    restored = ReceiptScorer(MODEL)
    restored.restore(orjson.loads(orjson.dumps(op.snapshot())))
    after = feed(restored, [rcpt("c", "m1", 3, cents=900)])
    restored.on_watermark("receipts", wm(3), after)
    got = {**by_key(out), **by_key(after)}
    assert sorted(got) == ["a|1", "b|1", "c|1"]
    for rid, model, features in (("a", MODEL, (0, 0, 500)), ("b", other, (1, 500, 700)),
                                 ("c", other, (2, 1200, 900))):
        p = got[f"{rid}|1"].payload
        assert p["model_revision"] == model.revision
        assert (p["feature_count_7m"], p["feature_amount_7m"], p["amount_cents"]) == features
        assert (p["score"], p["decision"]) == model.scorer.score_receipt(*features)
    assert MODEL.scorer.score_receipt(1, 500, 700) != other.scorer.score_receipt(1, 500, 700)


def test_payload_hash_ignores_the_watermark_but_not_the_features():
    a, b = ReceiptScorer(MODEL), ReceiptScorer(MODEL)
    oa, ob = feed(a, [rcpt("r", "m1", 1)]), feed(b, [rcpt("r", "m1", 1)])
    a.on_watermark("receipts", wm(1), oa)
    b.on_watermark("receipts", wm(3), ob)
    assert oa.facts[0].payload["watermark"] != ob.facts[0].payload["watermark"]
    assert oa.facts[0].payload_hash == ob.facts[0].payload_hash


def test_snapshot_restore_continues_exactly():
    objs = [rcpt(f"r{i}", f"m{i % 3}", i * 0.7, upload=i * 0.7 + (i % 4) * 0.4,
                 cents=100 + 37 * i) for i in range(60)]
    objs += [rcpt("r5", "m2", 5 * 0.7, upload=40, cents=100 + 37 * 5)]  # a replay
    objs.sort(key=lambda o: o["uploaded_at"])

    def drive(op, items, out):
        for i, o in items:
            op.on_record(record(o, 0, i), out)
            op.on_watermark("receipts", parse_utc_us(o["occurred_at"]) - 2 * 60_000_000, out)

    whole = ReceiptScorer(MODEL)
    w_out = Emit()
    drive(whole, list(enumerate(objs)), w_out)
    whole.on_end_of_stream(w_out)

    first = ReceiptScorer(MODEL)
    out = Emit()
    drive(first, list(enumerate(objs))[:30], out)
    snap = orjson.loads(orjson.dumps(first.snapshot()))
    second = ReceiptScorer()
    second.restore(snap)
    assert second.model.revision == MODEL.revision
    drive(second, list(enumerate(objs))[30:], out)
    second.on_end_of_stream(out)
    assert [(f.fact_key, f.payload_hash) for f in out.facts] == \
        [(f.fact_key, f.payload_hash) for f in w_out.facts]
    assert len({f.logical_key for f in w_out.facts}) == 60
    assert second.wm == POS_INF and second.entries == {}
    # The counters too, those kept as machine ints beside the map included: through the
    # snapshot, the restore and the metrics.
    assert second.counters == whole.counters
    assert (whole.counters["accepted"], whole.counters["duplicates"],
            whole.counters["scored"]) == (60, 1, 60)
    assert snap["counters"]["accepted"] == 30
    # Evicted before the snapshot and after the restore, every entry by the end.
    assert 0 < snap["counters"]["evicted"] < 30 and whole.counters["evicted"] == 60
    metrics = second.state_metrics()
    assert (metrics["accepted"], metrics["scored"], metrics["evicted"]) == (60, 60, 60)


def test_live_decisions_are_hashed_with_their_batch_over_their_documents_without_the_watermark():
    from streaming.hashing import digest
    from streaming.operators.base import HASH_LATER
    from streaming.operators.receipts import decision_fact
    from streaming.store.ops import fact_rows

    op = ReceiptScorer(MODEL)
    out = feed(op, [rcpt(f"r{i}", f"m{i % 2}", i * 0.5, cents=100 + i) for i in range(9)])
    op.on_watermark("receipts", wm(3), out)
    assert sorted(f.fact_key for f in out.facts) == [f"r{i}|1" for i in range(7)]
    # Left for the batch: its rows hash them together.
    assert all(f.hash_taken == HASH_LATER and f.hash_text for f in out.facts)
    rows = fact_rows(out.facts)
    for f, row in zip(out.facts, rows, strict=True):
        assert f.hash_taken != HASH_LATER and f.hash_text is None
        business = {k: v for k, v in f.payload.items() if k != "watermark"}
        assert f.hash_taken == row[4] == digest(
            orjson.dumps(business, option=orjson.OPT_SORT_KEYS))
        assert row[5] == f.payload_json  # the stored text carries the watermark
    # The same fact as the builder's, hashing at once (what repairs and re-pins build).
    p = out.facts[3].payload
    now = decision_fact(
        receipt_id=p["receipt_id"], merchant_id=p["merchant_id"], store_id=p["store_id"],
        occurred_us=parse_utc_us(p["occurred_at"]), amount_cents=p["amount_cents"],
        scoring_revision=1, scorer=MODEL.scorer, count=p["feature_count_7m"],
        amount_7m=p["feature_amount_7m"], watermark_us=wm(3), status="live", origin="live",
        reason="watermark_passed_occurrence")
    assert now == out.facts[3] and now.payload_hash == out.facts[3].payload_hash


def test_merchant_series_stay_sorted_with_equal_times_late_receipts_and_eviction():
    # Receipts on whole minutes (many equal times), out of ID and time order, some late, with
    # the watermark advancing and evicting: every merchant's entries stay sorted by (time, id),
    # the parallel time and amount series match them, and each scored feature equals a count
    # and sum over the entries in [t - 7 min, t).
    import random

    from streaming.operators.receipts import AMOUNT, ID, MERCHANT, T, WINDOW_US
    rng = random.Random(3)
    op = ReceiptScorer(MODEL)
    out = Emit()
    for i in range(900):
        minute = i // 12 + rng.choice([0, 0, 0, -1, -4, -6, 2])
        o = rcpt(f"r{rng.randint(0, 10**6):07d}-{i}", rng.choice(["m1", "m2"]), max(minute, 0),
                 upload=i // 12 + 0.5, cents=rng.randint(1, 900))
        op.on_record(record(o, 0, i), out)
        if i % 12 == 11:
            before = len(out.facts)
            op.on_watermark("receipts", wm(i // 12 - 2), out)
            for f in out.facts[before:]:
                t = parse_utc_us(f.payload["occurred_at"])
                window = [e for e in op.live_entries(f.payload["merchant_id"])
                          if t - WINDOW_US <= e[T] < t]
                assert (f.payload["feature_count_7m"], f.payload["feature_amount_7m"]) == \
                    (len(window), sum(e[AMOUNT] for e in window))
        for m, w in op.windows.items():
            lst = w.entries
            assert [(e[T], e[ID]) for e in lst] == sorted((e[T], e[ID]) for e in lst)
            assert w.times == [e[T] for e in lst]
            assert w.amounts == [e[AMOUNT] for e in lst]
            assert all(e[MERCHANT] == m for e in lst)
            # What state holds: the entries not evicted, each still findable by its ID.
            assert all(op.entries[e[ID]] is e for e in op.live_entries(m))
            assert all(e[ID] not in op.entries for e in lst[:len(lst) - len(op.live_entries(m))])
    assert op.counters["evicted"] > 300 and op.counters["scored"] > 300
    assert op.counters["late_within_tolerance"] > 50


def test_every_entry_keeps_its_checkpoint_json_as_its_fields_change():
    """Each entry keeps its checkpoint JSON beside its fields (ENCODED), written again by
    whatever writes them: scoring, live rescoring, a reconciliation record kept as history, a
    decision adopted from outside the live path, a restore. Only a pending entry has none. A
    snapshot holding those encodings is the bytes of one holding the fields."""
    import random

    from streaming.operators.receipts import ENCODED, HISTORY, ID, MERCHANT, PENDING, REV, STATE

    def kept_as_written(op):
        seen = {PENDING: 0, HISTORY: 0, "rescored": 0}
        for m in op.windows:
            for e in op.live_entries(m):
                assert e[MERCHANT] == m, e
                if e[ENCODED] is None:
                    assert e[STATE] == PENDING, e
                    seen[PENDING] += 1
                    continue
                assert orjson.dumps(e[ENCODED]) == orjson.dumps([*e[:ENCODED], m]), e
                seen[HISTORY] += e[STATE] == HISTORY
                seen["rescored"] += e[REV] > 1
        # The checkpoint's rows are every entry's fields and merchant, by receipt ID.
        fields = {**op.snapshot(), "entries": {rid: [*e[:ENCODED], e[MERCHANT]]
                                               for rid, e in op.entries.items()}}
        assert orjson.dumps(op.snapshot()) == orjson.dumps(fields)
        assert sorted(op.entries) == sorted(e[ID] for m in op.windows
                                            for e in op.live_entries(m))
        return seen

    rng = random.Random(11)
    op = ReceiptScorer(MODEL)
    out = Emit()
    totals = {PENDING: 0, HISTORY: 0, "rescored": 0}
    for i in range(600):
        minute = i // 12 + rng.choice([0, 0, 0, 1, -1, -4, -9])
        o = rcpt(f"r{i:04d}", rng.choice(["m1", "m2"]), max(minute, 0), upload=i // 12 + 0.5,
                 cents=rng.randint(1, 900))
        op.on_record(record(o, 0, i), out)
        if i % 12 == 11:
            op.on_watermark("receipts", wm(i // 12 - 1), out)
            scored = [e for e in op.entries.values() if e[ENCODED] is not None
                      and e[STATE] != HISTORY]
            if scored:
                e = rng.choice(scored)
                assert op.adopt_decision(e[ID], {"scoring_revision": e[REV] + 5,
                                                 "feature_count_7m": 99,
                                                 "feature_amount_7m": 12345,
                                                 "model_revision": "reconciled"})
            for k, v in kept_as_written(op).items():
                totals[k] += v
        if i == 300:
            restored = ReceiptScorer()
            restored.restore(orjson.loads(orjson.dumps(op.snapshot())))
            assert orjson.dumps(restored.snapshot()) == orjson.dumps(op.snapshot())
            assert all(e[ENCODED] is not None for e in restored.entries.values())
            op = restored
    assert all(v > 0 for v in totals.values()), totals  # every kind of entry was checked


def test_checkpointed_identities_follow_the_index_across_forgetting_and_reuploads():
    """The identities a snapshot carries are kept from one snapshot to the next: they must be
    the index's rows, in its order, whatever was forgotten (past the dedup horizon) or
    remembered again (an ID re-uploaded after it was forgotten) in between."""
    import random
    rnd = random.Random(5)
    op = ReceiptScorer(MODEL)
    out = Emit()
    minute, offset = 0.0, 0
    for step in range(60):
        for _ in range(rnd.randint(0, 30)):
            minute += rnd.choice([0.5, 7.0, 90.0])
            rid = f"r-{rnd.randint(0, 120)}"  # IDs come back, some after being forgotten
            op.on_record(record(rcpt(rid, f"m-{rnd.randint(0, 4)}", minute,
                                     cents=rnd.randint(1, 9000)), 0, offset), out)
            offset += 1
        op.on_watermark("receipts", wm(minute - 2), out)
        if rnd.random() < 0.5:
            snap = op.snapshot()
            assert list(snap["ids"].items()) == list(op.ids.rows.items()), step
            again = ReceiptScorer(MODEL)
            again.restore(orjson.loads(orjson.dumps(snap)))
            assert orjson.dumps(again.snapshot()) == orjson.dumps(snap)
            # A checkpoint of the earlier layout (rows without their revision) restores to
            # the same state ...
            earlier = orjson.loads(orjson.dumps(snap))
            # ... and so does a delta chain that mixes both (an earlier full checkpoint with
            # later deltas applied over it): every other row in the earlier layout.
            earlier["ids"] = {k: [h, t] if i % 2 else [r, h, t]
                              for i, (k, (r, h, t)) in enumerate(earlier["ids"].items())}
            old = ReceiptScorer(MODEL)
            old.restore(earlier)
            assert orjson.dumps(old.snapshot()) == orjson.dumps(snap)
    assert op.counters["evicted"] > 0 and len(op.ids) < offset  # identities were forgotten


@pytest.mark.parametrize("layout", ["entries", "listed"])
def test_pending_receipts_at_one_time_score_in_id_order_before_and_after_a_restore(layout):
    # Pending receipts are kept as one heap entry per occurrence time with the IDs at that
    # time beside it: equal times score in receipt-ID order, whatever order they came in. The
    # checkpoint holds them as the entries whose state is PENDING; before the fifty-eighth
    # round it listed them as [occurred_us, receipt_id] in scoring order, and such a
    # checkpoint restores the same.
    from streaming.operators.receipts import PENDING, STATE, T
    objs = [rcpt("r-c", "m1", 3), rcpt("r-a", "m1", 3), rcpt("r-b", "m2", 3),
            rcpt("r-z", "m1", 1), rcpt("r-y", "m1", 5)]
    op = ReceiptScorer(MODEL)
    feed(op, objs)
    snap = orjson.loads(orjson.dumps(op.snapshot()))
    assert "pending" not in snap
    assert sorted([row[T], rid] for rid, row in snap["entries"].items()
                  if row[STATE] == PENDING) == \
        [[wm(1), "r-z"], [wm(3), "r-a"], [wm(3), "r-b"], [wm(3), "r-c"], [wm(5), "r-y"]]
    if layout == "listed":
        snap["pending"] = [[wm(1), "r-z"], [wm(3), "r-a"], [wm(3), "r-b"], [wm(3), "r-c"],
                           [wm(5), "r-y"]]
    assert op.state_metrics()["pending"] == 5
    restored = ReceiptScorer()
    restored.restore(snap)
    assert restored.pending.pairs() == op.pending.pairs()
    for scorer in (op, restored):
        out = Emit()
        scorer.on_watermark("receipts", wm(4), out)
        assert [f.fact_key for f in out.facts] == ["r-z|1", "r-a|1", "r-b|1", "r-c|1"]
        assert scorer.state_metrics()["pending"] == 1
        scorer.on_end_of_stream(out)
        assert [f.fact_key for f in out.facts][-1] == "r-y|1"
        # The facts carry their JSON only; the payload is read back from it, run field too.
        assert out.facts[0].payload_dict is None
        assert out.facts[0].payload["watermark"] == at(4)


def test_the_peak_is_the_most_receipts_ever_held_and_their_bytes_then_across_a_restore():
    """`peak` holds the largest count of entries state held after any receipt, and the bytes
    held at that moment; a restored scorer goes on from the checkpointed peak, however little
    it holds by then."""
    import random

    rng = random.Random(7)
    op = ReceiptScorer(MODEL)
    out = Emit()
    most, bytes_then = 0, 0

    def receive(i, minute):
        nonlocal most, bytes_then
        o = rcpt(f"r{i:04d}", rng.choice(["m1", "m2", "m3"]), minute, cents=100 + i)
        op.on_record(record(o, 0, i), out)
        if len(op.entries) > most:
            most, bytes_then = len(op.entries), op.held.bytes

    for i in range(240):  # state rises and falls as the watermark evicts
        receive(i, i / 10 + rng.choice([0, -1, 2]))
        if i % 20 == 19:
            op.on_watermark("receipts", wm(i / 10 - rng.choice([2, 14, 30])), out)
    op.on_watermark("receipts", wm(60), out)  # everything scored and evicted
    assert len(op.entries) == 0 and op.peak == {"records": most, "bytes": bytes_then}
    again = ReceiptScorer()
    again.restore(orjson.loads(orjson.dumps(op.snapshot())))
    assert again.peak == op.peak
    op = again
    for i in range(240, 300):  # fewer than the peak held after the restore
        receive(i, 60 + (i - 240) / 10)
    assert 0 < len(op.entries) < most
    assert op.peak == {"records": most, "bytes": bytes_then}


def test_every_decision_carries_the_watermark_it_was_made_at():
    """The scorer keeps its last decision's watermark tail: each decision, scored by a
    watermark step, live when late, rescored, or at the end of the stream, still carries the
    watermark of its moment, across a restore to an earlier checkpoint."""
    import random

    from streaming.timeutil import us_to_iso

    rng = random.Random(11)
    op = ReceiptScorer(MODEL)
    out = Emit()
    seen = set()
    snap = None
    for i in range(400):
        if i == 250:  # back to an earlier checkpoint: its watermark is below the last one used
            again = ReceiptScorer()
            again.restore(snap)
            op = again
        before = len(out.facts)
        if i % 9 == 8:
            op.on_watermark("receipts", wm(i / 20 + rng.choice([0, 0.5])), out)
        else:
            late = rng.choice([0, 0, 0, -3])  # some late receipts are scored (and rescore) live
            o = rcpt(f"r{i:04d}", rng.choice(["m1", "m2"]), i / 20 + late, cents=100 + i)
            op.on_record(record(o, 0, i), out)
        for f in out.facts[before:]:
            assert orjson.loads(f.payload_json)["watermark"] == us_to_iso(op.wm), f.fact_key
            seen.add(f.payload["status"])
        if i == 120:
            snap = orjson.loads(orjson.dumps(op.snapshot()))
    feed(op, [rcpt(f"later-{k}", "m1", 40 + k) for k in range(3)], out)  # waiting at the end
    before = len(out.facts)
    op.on_end_of_stream(out)
    assert len(out.facts) - before == 3
    assert all(orjson.loads(f.payload_json)["watermark"] == us_to_iso(POS_INF)
               for f in out.facts[before:])
    assert seen == {"live", "rescored"}
