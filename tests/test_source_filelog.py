"""The file log read streamed: the same records, order, arrivals and fingerprints as reading
each partition whole, in a window; line rules (\\n only, CRLF, BOM, unfinished last line);
partition names that spell a number two ways are refused."""

from __future__ import annotations

import hashlib
import os
import random

import orjson
import pytest

from streaming.sources import filelog
from streaming.sources.filelog import FileLog, SourceError, decode_partitions, merge_by_arrival
from streaming.sources.records import own_arrival, partition_frontier, raw_record
from streaming.timeutil import NEG_INF, US_PER_S, us_to_iso

BASE_US = 1_790_000_000 * US_PER_S
TOPICS = ["payments", "risk_signals"]


def _whole_file_reader(root: str, topics: list[str]):
    """The reference: every partition read whole, split on newlines, decoded at once."""
    tps, lines, objs, arrivals = [], {}, {}, {}
    for topic in topics:
        names = sorted(os.listdir(os.path.join(root, topic)))
        n = max(int(name[1:].split(".")[0]) for name in names) + 1
        for p in range(n):
            tp = (topic, p)
            tps.append(tp)
            path = os.path.join(root, topic, f"p{p}.jsonl")
            data = open(path, "rb").read() if os.path.exists(path) else b""
            lines[tp] = data.split(b"\n")[:-1]
    objs, arrivals, _ = decode_partitions(lines, {})
    return tps, lines, objs, arrivals


def _generate(root, rng: random.Random, partitions: dict[str, int], per_part: int) -> None:
    for topic, n in partitions.items():
        os.makedirs(os.path.join(root, topic), exist_ok=True)
        for p in range(n):
            if p == n - 1 and n > 2:
                continue  # a missing partition file counts as an empty partition
            t = BASE_US
            out = []
            for i in range(rng.randint(per_part // 2, per_part)):
                t += rng.choice((0, 0, 1, 5, 30)) * US_PER_S
                kind = rng.random()
                if kind < 0.03:
                    out.append(b"{not json")
                elif kind < 0.05:
                    out.append(orjson.dumps({"id": i}))  # no arrival: keeps its predecessor's
                elif kind < 0.07:
                    early = us_to_iso(t - 600 * US_PER_S)  # out of order: merged at the max
                    out.append(orjson.dumps({"id": i, "arrival_time": early}))
                elif kind < 0.08:
                    far = us_to_iso(t + 30 * 86400 * US_PER_S)
                    out.append(orjson.dumps({"id": i, "arrival_time": far}))
                else:
                    out.append(orjson.dumps({"id": i, "arrival_time": us_to_iso(t),
                                             "pad": "x" * rng.randint(0, 200)}))
            with open(os.path.join(root, topic, f"p{p}.jsonl"), "wb") as fh:
                fh.write(b"".join(line + b"\n" for line in out))


def _key(r):
    return (r.topic, r.partition, r.offset, r.line, r.arrival_us, r.fault,
            r.obj if not isinstance(r.obj, Exception) else "error")


@pytest.fixture
def small_windows(monkeypatch):
    """Tiny marks and windows so a small log crosses every boundary many times."""
    monkeypatch.setattr(filelog, "MARK_EVERY", 7)
    monkeypatch.setattr(filelog, "READ_AHEAD", 5)
    monkeypatch.setattr(filelog, "_MAX_TAKEN", 16)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_streamed_reader_equals_whole_file_reader(tmp_path, small_windows, seed):
    rng = random.Random(seed)
    _generate(tmp_path, rng, {"payments": 4, "risk_signals": 3}, 120)
    tps, lines, objs, arrivals = _whole_file_reader(str(tmp_path), TOPICS)
    want = [_key(r) for r in merge_by_arrival(tps, {}, lines, objs, arrivals)]
    assert any(r[5] for r in want)  # the generated log holds arrival-time jumps
    log = FileLog(str(tmp_path), TOPICS)
    assert log.tps() == tps
    assert [_key(r) for r in log.merged({})] == want
    # From arbitrary positions (a restore), with acks in between as the worker sends them.
    for _ in range(5):
        pos = {tp: rng.randint(0, len(lines[tp])) for tp in tps}
        ref = [_key(r) for r in merge_by_arrival(tps, pos, lines, objs, arrivals)]
        log = FileLog(str(tmp_path), TOPICS)
        got = []
        for i, r in enumerate(log.merged(pos)):
            got.append(_key(r))
            if i % 13 == 12:
                log.ack({f"{r.topic}:{r.partition}": (r.offset, r.offset)})
        assert got == ref
    # Random access, arrivals and fingerprints agree with the whole file.
    log = FileLog(str(tmp_path), TOPICS)
    for tp in tps:
        assert log.end_offset(tp) == len(lines[tp])
        path = os.path.join(str(tmp_path), tp[0], f"p{tp[1]}.jsonl")
        data = open(path, "rb").read() if os.path.exists(path) else b""
        offsets = list(range(len(lines[tp]) + 1))
        rng.shuffle(offsets)
        for off in offsets[:40] + sorted(offsets[:40]):
            assert log.next_arrival(tp, off) == (arrivals[tp][off] if off < len(lines[tp])
                                                 else None)
            prefix = b"".join(line + b"\n" for line in lines[tp][:off])
            assert log.fingerprint(tp, off) == hashlib.sha256(prefix).hexdigest()
            assert data.startswith(prefix)
            if off < len(lines[tp]):
                assert _key(log.read_at(tp, off)) == _key(
                    raw_record(tp[0], tp[1], off, lines[tp][off], objs[tp][off],
                                 arrivals[tp][off]))
        assert log.fingerprint(tp, len(lines[tp]) + 1) == "beyond-end"


def test_memory_holds_a_window_not_the_recording(tmp_path):
    rng = random.Random(7)
    _generate(tmp_path, rng, {"payments": 2, "risk_signals": 1}, 6000)
    log = FileLog(str(tmp_path), TOPICS)
    peak = 0
    for i, r in enumerate(log.merged({})):
        if i % 500 == 0:
            log.ack({f"{r.topic}:{r.partition}": (0, r.offset)})
            held = sum(len(p.win) + len(p.taken) for p in log._parts.values())
            peak = max(peak, held)
    assert i > 6000
    assert peak <= 3 * (filelog.READ_AHEAD + 500 * 3)


def _write(path, data: bytes):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as fh:
        fh.write(data)


def _rec(i, second):
    return orjson.dumps({"id": i, "arrival_time": us_to_iso(BASE_US + second * US_PER_S)})


def test_lone_carriage_return_does_not_split_a_line_and_crlf_reads_as_lf(tmp_path):
    root = str(tmp_path)
    _write(f"{root}/payments/p0.jsonl",
           _rec(0, 0) + b"\r\n" + b'{"id": 1,\r "a": 2}\n' + _rec(2, 2) + b"\n")
    log = FileLog(root, ["payments"])
    recs = list(log.merged({}))
    assert [r.offset for r in recs] == [0, 1, 2]
    assert recs[0].obj["id"] == 0 and recs[2].obj["id"] == 2
    assert recs[1].line == b'{"id": 1,\r "a": 2}'
    # A bare \r inside a string is not JSON: one quarantined record, offsets = line numbers.
    _write(f"{root}/payments/p0.jsonl",
           _rec(0, 0) + b"\r" + _rec(1, 1) + b"\n" + _rec(2, 2) + b"\n")
    recs = list(FileLog(root, ["payments"]).merged({}))
    assert [r.offset for r in recs] == [0, 1]
    assert isinstance(recs[0].obj, Exception) and recs[1].obj["id"] == 2


def test_byte_order_mark_keeps_the_first_record(tmp_path):
    root = str(tmp_path)
    data = b"\xef\xbb\xbf" + _rec(0, 0) + b"\n" + _rec(1, 1) + b"\n"
    _write(f"{root}/payments/p0.jsonl", data)
    log = FileLog(root, ["payments"])
    recs = list(log.merged({}))
    assert [r.obj["id"] for r in recs] == [0, 1]
    assert log.fingerprint(("payments", 0), 1) == \
        hashlib.sha256(b"\xef\xbb\xbf" + _rec(0, 0) + b"\n").hexdigest()


def test_unfinished_last_line_is_not_a_record_yet(tmp_path):
    root = str(tmp_path)
    path = f"{root}/payments/p0.jsonl"
    whole = _rec(0, 0) + b"\n" + _rec(1, 1) + b"\n"
    _write(path, whole + _rec(2, 2)[:9])
    log = FileLog(root, ["payments"])
    assert log.end_offset(("payments", 0)) == 2
    assert [r.offset for r in log.merged({})] == [0, 1]
    fp = log.fingerprint(("payments", 0), 2)
    _write(path, whole + _rec(2, 2) + b"\n")
    log = FileLog(root, ["payments"])
    assert log.fingerprint(("payments", 0), 2) == fp
    assert [r.obj["id"] for r in log.merged({("payments", 0): 2})] == [2]


@pytest.mark.parametrize("seed", range(6))
def test_line_count_and_marks_equal_a_plain_count_of_the_bytes(tmp_path, monkeypatch, seed):
    # `_scan_lines` steps from a guess at the lines' length to each mark; the marks must be
    # those of counting every newline, for lines of any length (empty, a few bytes, longer
    # than a read), carriage returns, and files with or without a last newline, read in
    # pieces of any size.
    rng = random.Random(seed)
    for trial in range(40):
        every = rng.choice([1, 2, 3, 7, 64])
        monkeypatch.setattr(filelog, "MARK_EVERY", every)
        monkeypatch.setattr(filelog, "_CHUNK", rng.choice([1, 5, 64, 1000, 1 << 20]))
        lines = []
        for _ in range(rng.randint(0, 400)):
            k = rng.random()
            n = (0 if k < 0.1 else rng.randint(1, 5) if k < 0.3 else rng.randint(100, 300)
                 if k < 0.95 else rng.randint(1000, 5000))
            lines.append(b"x" * n + (b"\r" if rng.random() < 0.1 else b""))
        data = b"\n".join(lines) + (b"\n" if rng.random() < 0.7 else b"")
        path = tmp_path / f"p{trial}.jsonl"
        path.write_bytes(data)
        starts = [i + 1 for i, b in enumerate(data) if b == 10]  # after each newline
        count, marks = filelog._scan_lines(str(path))
        assert count == data.count(b"\n")
        assert list(marks) == [0, *starts[every - 1::every]], (seed, trial)


@pytest.mark.parametrize("name", ["p01.jsonl", "p00.jsonl", "p007.jsonl"])
def test_ambiguous_partition_name_is_refused(tmp_path, name):
    root = str(tmp_path)
    _write(f"{root}/payments/p0.jsonl", _rec(0, 0) + b"\n")
    _write(f"{root}/payments/{name}", _rec(1, 1) + b"\n")
    with pytest.raises(SourceError, match=r"ambiguous name.*without leading zeros"):
        FileLog(root, ["payments"])


def test_arrival_jump_keeps_the_partition_clock(tmp_path):
    root = str(tmp_path)
    far = orjson.dumps({"id": 9, "arrival_time": "9999-12-31T23:59:00+00:00"})
    resumed = b"".join(_rec(100 + i, 7200 + i) + b"\n" for i in range(20))
    _write(f"{root}/payments/p0.jsonl", _rec(0, 0) + b"\n" + far + b"\n" + _rec(2, 60) + b"\n")
    _write(f"{root}/payments/p1.jsonl", far + b"\n" + _rec(3, 10) + b"\n" + resumed)
    _write(f"{root}/payments/p2.jsonl", _rec(5, 20) + b"\n" + far + b"\n" + far + b"\n"
           + _rec(6, 80) + b"\n" + _rec(7, 8000) + b"\n")
    recs = list(FileLog(root, ["payments"]).merged({}))
    faults = {(r.partition, r.offset): r.fault for r in recs if r.fault}
    # Followed by an earlier arrival: a jump, also as a partition's first record and twice in a
    # row. Two hours after its predecessor with the partition going on from there: a resume.
    # p2's last line, 8,000 s after its predecessor with nothing after it: p1 arrives within the
    # bound of it (its resumed records), so the clock moved there: it is read.
    assert set(faults) == {(0, 1), (1, 0), (2, 1), (2, 2)}
    assert all(f[0] == "arrival_time_jump" and "9999-12-31T23:59:00" in f[1]
               and "later record of the partition" in f[1] for f in faults.values())
    arrivals = {(r.partition, r.offset): r.arrival_us for r in recs}
    assert arrivals[(0, 1)] == BASE_US
    assert arrivals[(1, 2)] == BASE_US + 7200 * US_PER_S
    assert arrivals[(2, 2)] == BASE_US + 20 * US_PER_S
    assert arrivals[(2, 4)] == BASE_US + 8000 * US_PER_S
    assert max(arrivals.values()) == BASE_US + 8000 * US_PER_S
    # The check can be turned off.
    recs = list(FileLog(root, ["payments"], max_arrival_jump_us=None).merged({}))
    assert all(r.fault is None for r in recs)


def test_arrival_jump_as_a_partitions_last_record_is_judged_by_the_other_partitions(tmp_path):
    root = str(tmp_path)
    far = orjson.dumps({"id": 9, "arrival_time": "9999-12-31T23:59:00+00:00"})
    # p0 ends in a far-future record; p1 ends in a record two hours after its predecessor
    # while p2 flows on (a resume the other partitions confirm); p3 holds one record.
    _write(f"{root}/payments/p0.jsonl", _rec(0, 0) + b"\n" + _rec(1, 30) + b"\n" + far + b"\n")
    _write(f"{root}/payments/p1.jsonl", _rec(2, 10) + b"\n" + _rec(3, 7300) + b"\n")
    _write(f"{root}/payments/p2.jsonl",
           b"".join(_rec(10 + i, 600 * i) + b"\n" for i in range(13)))
    _write(f"{root}/risk_signals/p0.jsonl", _rec(30, 50) + b"\n")
    recs = list(FileLog(root, TOPICS).merged({}))
    faults = {(r.topic, r.partition, r.offset): r.fault for r in recs if r.fault}
    assert set(faults) == {("payments", 0, 2)}
    (reason, detail), = faults.values()
    assert reason == "arrival_time_jump" and "9999-12-31T23:59:00" in detail
    assert "nothing confirms it" in detail and "2026" in detail  # the others' latest arrival
    arrivals = {(r.topic, r.partition, r.offset): r.arrival_us for r in recs}
    assert arrivals[("payments", 0, 2)] == BASE_US + 30 * US_PER_S  # merged at its predecessor's
    assert arrivals[("payments", 1, 1)] == BASE_US + 7300 * US_PER_S
    assert max(arrivals.values()) == BASE_US + 7300 * US_PER_S
    # Read from a position (a restore) and through random access: the same judgement; the
    # newest arrival the source reports leaves the jump out.
    log = FileLog(root, TOPICS)
    assert log.newest_arrival() == BASE_US + 7300 * US_PER_S
    assert log.read_at(("payments", 0), 2).fault == faults[("payments", 0, 2)]
    assert log.next_arrival(("payments", 0), 2) == BASE_US + 30 * US_PER_S
    # A record of another partition contradicted by its own partition confirms nothing.
    _write(f"{root}/payments/p1.jsonl", _rec(2, 10) + b"\n" + far + b"\n" + _rec(3, 20) + b"\n")
    recs = list(FileLog(root, TOPICS).merged({}))
    assert {(r.partition, r.offset) for r in recs if r.fault} == {(0, 2), (1, 1)}
    # Two partitions whose last records agree on the new time confirm each other (two
    # partitions resuming together after a common quiet spell).
    _write(f"{root}/payments/p1.jsonl", _rec(2, 10) + b"\n" + far + b"\n")
    recs = list(FileLog(root, TOPICS).merged({}))
    assert not any(r.fault for r in recs)
    # A source whose only record cannot be compared with anything: it is read as it is.
    only = tmp_path / "only"
    _write(f"{only}/payments/p0.jsonl", far + b"\n")
    _write(f"{only}/risk_signals/p0.jsonl", b"")
    assert [r.fault for r in FileLog(str(only), TOPICS).merged({})] == [None]


def _faults(recs) -> dict:
    return {(r.topic, r.partition, r.offset): r.fault for r in recs if r.fault}


@pytest.mark.parametrize("n", [2, 3])
def test_far_future_records_at_a_partitions_end_do_not_confirm_each_other(tmp_path, n):
    root = str(tmp_path)
    far = orjson.dumps({"id": 9, "arrival_time": "9999-12-31T23:59:00+00:00"})
    _write(f"{root}/payments/p0.jsonl",
           _rec(0, 0) + b"\n" + _rec(1, 30) + b"\n" + (far + b"\n") * n)
    _write(f"{root}/payments/p1.jsonl", _rec(2, 10) + b"\n" + _rec(3, 7300) + b"\n")
    _write(f"{root}/risk_signals/p0.jsonl", _rec(30, 50) + b"\n")
    log = FileLog(root, TOPICS)
    recs = list(log.merged({}))
    faults = _faults(recs)
    # Each claims to arrive in the future, so its own partition cannot vouch for it; no other
    # partition comes near it: all are jumps, merged at the pre-jump arrival.
    assert set(faults) == {("payments", 0, 2 + i) for i in range(n)}
    assert all(f[0] == "arrival_time_jump" and "9999-12-31T23:59:00" in f[1]
               and "nothing confirms it" in f[1] for f in faults.values())
    arrivals = {(r.topic, r.partition, r.offset): r.arrival_us for r in recs}
    assert all(arrivals[("payments", 0, 2 + i)] == BASE_US + 30 * US_PER_S for i in range(n))
    assert max(arrivals.values()) == BASE_US + 7300 * US_PER_S
    assert log.newest_arrival() == BASE_US + 7300 * US_PER_S
    # Random access (a journal replay) and the in-memory decoding: the same judgement.
    assert all(FileLog(root, TOPICS).read_at(("payments", 0), 2 + i).fault
               == faults[("payments", 0, 2 + i)] for i in range(n))
    _, _, objs, _ = _whole_file_reader(root, TOPICS)
    assert {(tp[0], tp[1], off) for tp, os_ in objs.items() for off, o in enumerate(os_)
            if type(o).__name__ == "SourceFault"} == set(faults)
    # Followed by a record back in 2026: the same decisions (the partition contradicts them).
    with open(f"{root}/payments/p0.jsonl", "ab") as fh:
        fh.write(_rec(4, 60) + b"\n")
    assert set(_faults(FileLog(root, TOPICS).merged({}))) == set(faults)
    # Another partition reaching the same far-future time confirms them all.
    _write(f"{root}/payments/p0.jsonl",
           _rec(0, 0) + b"\n" + _rec(1, 30) + b"\n" + (far + b"\n") * n)
    _write(f"{root}/payments/p1.jsonl", _rec(2, 10) + b"\n" + far + b"\n")
    assert _faults(FileLog(root, TOPICS).merged({})) == {}


def test_future_dated_recording_and_resumes_in_the_past_are_read_as_they_are(tmp_path,
                                                                             monkeypatch):
    root = str(tmp_path)
    future_us = BASE_US + 5 * 365 * 86400 * US_PER_S  # years after any wall clock of the run

    def rec(i, second):
        return orjson.dumps({"id": i, "arrival_time": us_to_iso(future_us + second * US_PER_S)})
    # A whole recording from the future whose partitions confirm each other, p0 resuming
    # after a two-hour quiet spell that p1 shares.
    _write(f"{root}/payments/p0.jsonl", b"".join(rec(i, 60 * i) + b"\n" for i in range(5))
           + b"".join(rec(10 + i, 7500 + i) + b"\n" for i in range(20)))
    _write(f"{root}/payments/p1.jsonl", b"".join(rec(40 + i, 400 * i) + b"\n" for i in range(25)))
    _write(f"{root}/risk_signals/p0.jsonl", rec(90, 30) + b"\n")
    # p0's resume claims the future; p1's last line, read at open, vouches for it, so no
    # partition is read whole for its frontier.
    read_whole = []
    monkeypatch.setattr(filelog._Partition, "frontier",
                        lambda part: read_whole.append(part.tp) or NEG_INF)
    log = FileLog(root, TOPICS)
    assert _faults(log.merged({})) == {}
    assert log.newest_arrival() == future_us + 9600 * US_PER_S
    assert read_whole == []
    monkeypatch.undo()
    # A partition resuming in the past after 85 minutes of quiet, nothing else moving: read.
    root2 = str(tmp_path / "past")
    _write(f"{root2}/payments/p0.jsonl", _rec(0, 0) + b"\n"
           + b"".join(_rec(1 + i, 5100 + i) + b"\n" for i in range(3)))
    _write(f"{root2}/risk_signals/p0.jsonl", _rec(30, 10) + b"\n")
    assert _faults(FileLog(root2, TOPICS).merged({})) == {}


# -- through the worker -------------------------------------------------------------------


def _seed_copy(seed_dir, tmp_path):
    import shutil
    copy = tmp_path / "src"
    shutil.copytree(seed_dir[0], copy)
    return copy


def test_line_finished_after_a_run_is_consumed_by_the_next(seed_dir, tmp_path, store_url):
    from .joinutil import pair_set, pay, run_join
    copy = _seed_copy(seed_dir, tmp_path)
    p0 = copy / "payments" / "p0.jsonl"
    full = orjson.dumps(pay("pay-late-line", "merchant-01", 170)) + b"\n"
    whole = p0.read_bytes()
    p0.write_bytes(whole + full[:25])
    first = run_join(str(copy), store_url)
    assert first.records == 470
    p0.write_bytes(whole + full)
    second = run_join(str(copy), store_url, end_of_stream=True)
    assert second.records == 1
    from streaming.store.ops import Store
    store = Store(store_url)
    try:
        at = whole.count(b"\n")
        assert not [q for q in store.quarantine_rows("join")
                    if (q["topic"], q["partition"], q["offset"]) == ("payments", 0, at)]
        assert all(r["closes"] for r in store.accounting("join"))
    finally:
        store.dispose()
    ref = f"sqlite:///{tmp_path}/ref.sqlite"
    run_join(str(copy), ref, end_of_stream=True)
    assert pair_set(store_url) == pair_set(ref)


def test_bom_and_lone_carriage_return_keep_offsets(seed_dir, tmp_path, sqlite_url, seed_whole):
    from sqlalchemy import select

    from streaming.store import schema as S
    from streaming.store.ops import Store

    from .joinutil import pair_set, run_join
    copy = _seed_copy(seed_dir, tmp_path)
    p1 = copy / "payments" / "p1.jsonl"
    lines = p1.read_bytes().split(b"\n")[:-1]
    # A BOM before the first record and a \r inside line 3 (between two JSON tokens).
    first_id = orjson.loads(lines[0])["payment_id"]
    lines[3] = lines[3].replace(b',"revision"', b',\r"revision"', 1)
    assert b"\r" in lines[3]
    p1.write_bytes(b"\xef\xbb\xbf" + b"\n".join(lines) + b"\n")
    res = run_join(str(copy), sqlite_url, end_of_stream=True)
    assert res.records == 470
    store = Store(sqlite_url)
    a = S.archive.c
    rows = store.rows(select(a.offset, a.event_id).where(a.topic == "payments", a.partition == 1))
    store.dispose()
    by_off = {r["offset"]: r["event_id"] for r in rows}
    assert by_off[0] == first_id
    assert by_off[3] == orjson.loads(lines[3])["payment_id"]
    assert pair_set(sqlite_url) == pair_set(seed_whole)


def test_ambiguous_partition_name_exits_with_a_clear_message(seed_dir, tmp_path, sqlite_url):
    import subprocess
    import sys
    copy = _seed_copy(seed_dir, tmp_path)
    os.rename(copy / "payments" / "p1.jsonl", copy / "payments" / "p01.jsonl")
    proc = subprocess.run([sys.executable, "-m", "streaming.cli.main", "join", "run", "--source",
                           str(copy), "--store", sqlite_url, "--quiet"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 5
    assert "Traceback" not in proc.stderr
    assert "p01.jsonl" in proc.stderr and "rename it to p1.jsonl" in proc.stderr


def _frontier_line_by_line(part) -> int:
    """A partition's frontier read one line at a time through the self-judged reader's
    `_next`: the definition the block-wise `frontier` must give."""
    if part.count == 0:
        return NEG_INF
    r = filelog._Reader(open(part._file(), "rb"), 0, NEG_INF, self_judged=True)
    try:
        while r.off < part.count - 1:
            part._next(r)
        if r.ahead:
            own = r.ahead[0][1]
        else:
            line = filelog._record_bytes(r.fh.readline(), part.count - 1)
            own = own_arrival(line, part.arrival_field)
    finally:
        r.fh.close()
    return partition_frontier(r.prev, own)


@pytest.mark.parametrize("seed", range(6))
def test_frontier_read_in_blocks_equals_the_line_by_line_reading(tmp_path, monkeypatch, seed):
    # Blocks of 5 lines: the 16-line look-ahead of a suspect spans several of them.
    monkeypatch.setattr(filelog, "READ_AHEAD", 5)
    root = str(tmp_path)
    _generate(root, random.Random(seed), {"payments": 3, "risk_signals": 2}, 300)
    far = orjson.dumps({"id": 9, "arrival_time": "9999-12-31T23:59:00+00:00"})
    # A BOM and CRLF; far-future records the partition contradicts (a jump, twice in a row),
    # a line without an arrival and one that is not JSON, then a two-hour resume that the
    # partition follows.
    _write(f"{root}/payments/p9.jsonl",
           b"\xef\xbb\xbf" + _rec(0, 0) + b"\r\n" + far + b"\n" + far + b"\n" + _rec(1, 5)
           + b"\n" + b'{"id": 2}\n{not json\n'
           + b"".join(_rec(10 + i, 7200 + i) + b"\n" for i in range(20)))
    log = FileLog(root, TOPICS)
    for tp, part in log._parts.items():
        assert part.frontier() == _frontier_line_by_line(part), tp
    # The jumps are left out of p9's frontier, the resume is in it.
    assert log._parts[("payments", 9)].frontier() == BASE_US + 7219 * US_PER_S


@pytest.mark.parametrize("windows", ["small", "default"])
def test_merge_by_runs_keeps_the_tuple_order_on_equal_arrivals(tmp_path, monkeypatch, windows):
    # Many records share an arrival across topics and partitions, some have none (merged at
    # their predecessor's), and partitions end at different points: the runs the merge takes
    # must come out as (arrival, topic, partition, offset) orders them.
    if windows == "small":
        monkeypatch.setattr(filelog, "MARK_EVERY", 7)
        monkeypatch.setattr(filelog, "READ_AHEAD", 5)
        monkeypatch.setattr(filelog, "_MAX_TAKEN", 16)
    rng = random.Random(7)
    for topic, n in (("payments", 3), ("risk_signals", 2)):
        os.makedirs(tmp_path / topic)
        for p in range(n):
            t, out = BASE_US, []
            for i in range(rng.randint(300, 3000)):
                t += rng.choice((0, 0, 0, 1)) * US_PER_S
                out.append(orjson.dumps({"id": i}) if rng.random() < 0.1 else
                           orjson.dumps({"id": i, "arrival_time": us_to_iso(t)}))
            (tmp_path / topic / f"p{p}.jsonl").write_bytes(b"".join(x + b"\n" for x in out))
    tps, lines, objs, arrivals = _whole_file_reader(str(tmp_path), TOPICS)
    want = [_key(r) for r in merge_by_arrival(tps, {}, lines, objs, arrivals)]
    assert len({k[4] for k in want}) < len(want) // 2  # ties are the common case here
    log = FileLog(str(tmp_path), TOPICS)
    got = []
    for r in log.merged({}):
        got.append(_key(r))
        # What the host asks while a run is being handed out: the arrival of the record
        # after the one it holds, which the run may already have taken from the window.
        tp = (r.topic, r.partition)
        nxt = r.offset + 1
        assert log.next_arrival(tp, nxt) == (arrivals[tp][nxt] if nxt < len(lines[tp])
                                             else None)
    assert got == want
