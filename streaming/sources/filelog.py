"""File log source: `DIR/<topic>/p<N>.jsonl`, offset = 0-based line number.

Recorded replay merges all topic-partitions by arrival time (ties: topic, partition, offset)
while keeping each partition in offset order, so a recording always replays in the same order.
The worker clock is the arrival time of the record being read (source time).

Lines: a record is the bytes before a `\\n` (a `\\r` right before it is dropped, so CRLF files
read the same; a lone `\\r` inside a line is part of the line). A last line without its `\\n`
is still being written: it is not a record yet and the next run reads it once it is finished.
A UTF-8 byte order mark at the start of a file is not part of the first record. Partition files
are named `p0.jsonl`, `p1.jsonl`, ... exactly; any other spelling of a number (`p01.jsonl`) is
refused, because two names could then mean one partition.

Memory: opening a log scans each partition once for line ends (keeping one byte position every
`MARK_EVERY` lines); reading decodes a window of `READ_AHEAD` lines per partition at a time. A
run holds the window and the arrival times of the records handed out since the last `ack`, not
the recording."""

from __future__ import annotations

import hashlib
import os
import re
from array import array
from bisect import bisect_left, bisect_right
from collections import deque
from itertools import islice
from operator import attrgetter
from typing import Any, BinaryIO
from collections.abc import Callable, Iterator

from ..timeutil import NEG_INF
# Shared by every source; re-exported so callers name one module for the file log.
from .raw import vouched_run
from .records import (DEFAULT_MAX_ARRIVAL_JUMP_US, JUMP_LOOKAHEAD, TP,  # noqa: F401
                      PartitionBuffer, RawRecord, SourceError, SourceFault, arrival_jump,
                      arrival_suspect, claims_future,
                      decode_partitions, jump_fault, merge_by_arrival, own_arrival, own_arrivals,
                      partition_frontier, suspect_jump, trailing_jump, wall_clock_us)

MARK_EVERY = 4096  # lines between kept byte positions of a partition file
READ_AHEAD = 1024  # lines decoded at a time per partition
_CHUNK = 1 << 20
# Arrival times kept for records handed out but not yet acknowledged, per partition; beyond
# this the oldest are dropped (a caller that never acknowledges still runs in bounded memory).
_MAX_TAKEN = 1 << 18
# A record's merge arrival, the key the merge orders by.
_MERGE_ARRIVAL = attrgetter("arrival_us")

_PART_RE = re.compile(r"^p(\d+)\.jsonl$")
_CANONICAL_PART_RE = re.compile(r"^p(0|[1-9]\d*)\.jsonl$")
_BOM = b"\xef\xbb\xbf"


def _scan_lines(path: str) -> tuple[int, array]:
    """Count the complete (newline-terminated) lines of a file and keep the byte position of
    every MARK_EVERY-th line start. A trailing line without its newline is not counted."""
    marks = array("q", [0])
    count = 0
    base = 0
    next_mark = MARK_EVERY
    with open(path, "rb") as fh:
        while True:
            chunk = fh.read(_CHUNK)
            if not chunk:
                break
            pos = 0
            have = chunk.count(b"\n")  # newlines in chunk[pos:], counted once per chunk
            need = next_mark - count
            while have >= need:
                pos = _after_newlines(chunk, pos, need, have)
                count += need
                have -= need
                marks.append(base + pos)
                next_mark += MARK_EVERY
                need = MARK_EVERY
            count += have
            base += len(chunk)
    return count, marks


def _after_newlines(chunk: bytes, pos: int, need: int, have: int) -> int:
    """The position just after the `need`-th newline at or after `pos`, where `chunk[pos:]`
    holds `have` >= `need` of them.

    Found from a guess at the lines' average length over the rest of the chunk, then stepped
    to the exact newline one search at a time. Lines of a log are of similar lengths, so the
    guess lands a few lines off; finding all `need` newlines one by one was a search per line
    of the file (docs/performance.md, thirty-sixth round)."""
    guess = pos + (len(chunk) - pos) * need // have
    got = chunk.count(b"\n", pos, guess)  # newlines in [pos, guess)
    while got < need:  # short: the next newlines after the guess
        guess = chunk.find(b"\n", guess) + 1
        got += 1
    if got == need and chunk[guess - 1] == 10:  # the guess is just past the need-th
        return guess
    # Past it (or on no newline): the need-th is the (got - need + 1)-th from the guess back.
    at = guess
    for _ in range(got - need + 1):
        at = chunk.rfind(b"\n", pos, at)
    return at + 1


def _record_bytes(raw: bytes, offset: int) -> bytes:
    """A line as read (with its newline) -> the record's bytes."""
    return _record_lines([raw], offset)[0]


def _record_lines(raws: list[bytes], offset: int) -> list[bytes]:
    """Lines as read (with their newlines), the first at `offset` -> the records' bytes."""
    lines = [raw[:-1] for raw in raws]
    # One search of the block for a carriage return rather than a test of every line.
    if b"\r" in b"".join(lines):
        for i, line in enumerate(lines):
            if line.endswith(b"\r"):
                lines[i] = line[:-1]
    if offset == 0 and lines and lines[0].startswith(_BOM):
        lines[0] = lines[0][len(_BOM):]
    return lines


class _Reader:
    """A forward position in a partition file: the next line's offset, the running arrival
    before it, and lines of look-ahead with their own arrivals (read to judge an arrival jump). A
    `self_judged` reader judges the partition by its own records only (what it claims,
    `records.partition_frontier`): far-future suspects are not put to the other partitions."""

    __slots__ = ("fh", "off", "prev", "ahead", "self_judged")

    def __init__(self, fh: BinaryIO, off: int, prev: int, self_judged: bool = False):
        self.fh, self.off, self.prev = fh, off, prev
        self.self_judged = self_judged
        self.ahead: deque[tuple[bytes, int | None]] = deque()


class _Partition:
    """One partition file read forward through a window. `peek(off)` is cheap for offsets in
    the window or right after it; any other offset repositions the reader (resuming from the
    nearest line mark whose running arrival is known)."""

    def __init__(self, tp: TP, path: str | None, arrival_field: str, max_jump_us: int | None,
                 others_frontier: Callable[[TP, int], int], opened_us: int):
        self.tp = tp
        self.opened_us = opened_us  # when the log was opened: no line arrived later
        # The latest arrival the other partitions vouch for, given the arrival it judges:
        # judges this partition's records that claim the future (`trailing_jump`).
        self.others_frontier = others_frontier
        self.path = path
        self.arrival_field = arrival_field
        self.max_jump_us = max_jump_us
        if path is None:
            self.count, self.marks = 0, array("q", [0])
        else:
            self.count, self.marks = _scan_lines(path)
        # Running arrival before line k*MARK_EVERY, learnt as a reader passes the mark.
        self.mark_prev: dict[int, int] = {0: NEG_INF}
        self._reader: _Reader | None = None
        self.win: deque[RawRecord] = deque()  # decoded records [win_base, reader.off)
        self.win_base = 0
        # Arrival times of records handed out since the last ack: offsets [taken_base, ...).
        self.taken = array("q")
        self.taken_base = 0
        self._fp: tuple[int, Any] = (0, hashlib.sha256())  # (byte end hashed, running hash)
        # The own arrival of the last line as the log was opened (None: it has none), read by
        # `tail_arrivals`: the partition's frontier is never earlier.
        self.last_own: int | None = None

    # -- reading --------------------------------------------------------------------------
    def close(self) -> None:
        if self._reader is not None:
            self._reader.fh.close()
            self._reader = None

    def tail_arrivals(self) -> list[int]:
        """Own arrival times of the partition's last JUMP_LOOKAHEAD + 1 lines, in order (lines
        without one left out)."""
        if self.count == 0:
            return []
        start = max(0, self.count - 1 - JUMP_LOOKAHEAD)
        owns = []
        with open(self._file(), "rb") as fh:
            fh.seek(self._byte_start(start))
            for off in range(start, self.count):
                own = own_arrival(_record_bytes(fh.readline(), off), self.arrival_field)
                if own is not None:
                    owns.append(own)
        self.last_own = own
        return owns

    def frontier(self) -> int:
        """The latest arrival this partition claims (`records.partition_frontier`): its
        records judged by the partition itself (the self-judged rule of `_next`: the other
        partitions' frontiers judge this one's far-future records), up to the last line, which
        is not judged.

        One pass over the file in blocks, each decoded by `own_arrivals` as `_fill` decodes
        the window: the first suspect arrival in a log asks for every partition's frontier,
        and reading them line by line through `_next` took 2.4 s of a 1,000,000-event run
        (docs/performance.md, fourteenth round)."""
        if self.count == 0:
            return NEG_INF
        owns = self._own_arrivals()
        # The next JUMP_LOOKAHEAD lines' own arrivals after the line being judged.
        ahead = deque(islice(owns, JUMP_LOOKAHEAD + 1))
        jump = self.max_jump_us
        prev = NEG_INF
        last = self.count - 1
        for off in range(last):
            own = ahead.popleft()
            for nxt in islice(owns, 1):
                ahead.append(nxt)
            if not (jump is None or own is None or (prev > NEG_INF and own - prev <= jump)):
                later = list(islice(ahead, min(JUMP_LOOKAHEAD, last - off)))
                if arrival_jump(own, prev, later, jump) is not None:
                    continue  # a jump the partition does not follow: not its frontier
            if own is not None and own > prev:
                prev = own
        return partition_frontier(prev, ahead.popleft())

    def _own_arrivals(self) -> Iterator[int | None]:
        """Each line's own arrival (`records.own_arrival`), read and decoded in blocks."""
        with open(self._file(), "rb") as fh:
            at = 0
            while at < self.count:
                raws = list(islice(fh, min(READ_AHEAD, self.count - at)))
                if not raws:
                    return
                for _, own in own_arrivals(_record_lines(raws, at), self.arrival_field):
                    yield own
                at += len(raws)

    def _open_at(self, off: int) -> _Reader:
        """A reader positioned at line `off` with the running arrival known there."""
        k = off // MARK_EVERY
        while k not in self.mark_prev:
            k -= 1
        fh = open(self._file(), "rb")
        fh.seek(self.marks[k])
        r = _Reader(fh, k * MARK_EVERY, self.mark_prev[k])
        while r.off < off:
            self._next(r)
        return r

    def _file(self) -> str:
        """The partition's file (only partitions with lines are read)."""
        assert self.path is not None, f"{self.tp} has no file to read"
        return self.path

    def _next(self, r: _Reader) -> tuple[bytes, int, tuple[str, str] | None]:
        """Decode the reader's line: (bytes, merge arrival, source fault)."""
        off = r.off
        if off % MARK_EVERY == 0 and not r.self_judged:
            self.mark_prev.setdefault(off // MARK_EVERY, r.prev)
        field = self.arrival_field
        if r.ahead:
            line, own = r.ahead.popleft()
        else:
            line = _record_bytes(r.fh.readline(), off)
            own = own_arrival(line, field)
        prev = r.prev
        fault = None
        jump = self.max_jump_us
        # `arrival_suspect`, inline: it is asked of every record.
        if jump is None or own is None or (prev > NEG_INF and own - prev <= jump):
            pass
        elif off == self.count - 1:
            # Nothing follows it: the other partitions judge it, when it claims the future
            # (the frontiers read every other partition once; a past arrival needs none).
            why = (trailing_jump(own, prev, self.others_frontier(self.tp, own), jump,
                                 self.opened_us)
                   if claims_future(own, self.opened_us, jump) else None)
            if why is not None:
                fault = jump_fault(own, prev, why, field, jump)
        else:
            want = min(JUMP_LOOKAHEAD, self.count - off - 1)
            while len(r.ahead) < want:
                at = off + 1 + len(r.ahead)
                nline = _record_bytes(r.fh.readline(), at)
                r.ahead.append((nline, own_arrival(nline, field)))
            later = [x[1] for x in r.ahead]
            if r.self_judged:
                why = arrival_jump(own, prev, later, jump)
            else:
                why = suspect_jump(own, prev, later,
                                   lambda: self.others_frontier(self.tp, own),
                                   jump, self.opened_us)
            if why is not None:
                fault = jump_fault(own, prev, why, field, jump)
        if fault is None and own is not None and own > prev:
            prev = own
        r.prev = prev
        r.off = off + 1
        return line, prev, fault

    def _fill(self) -> None:
        """Decode the next READ_AHEAD lines (at most up to the counted end) into the window.

        In bulk: the lines not read ahead yet are read and decoded as one block into the
        reader's look-ahead; a record whose arrival its partition vouches for (no arrival, or
        within the bound of the partition's latest) is taken from there as it is, and only a
        suspect goes through `_next`, which reads further ahead to judge it."""
        r = self._reader
        assert r is not None and not r.self_judged  # peek() opens the reader before it fills
        topic, part = self.tp
        off = r.off
        end = min(self.count, off + READ_AHEAD)
        ahead = r.ahead
        need = end - off - len(ahead)
        if need > 0:
            at = off + len(ahead)
            ahead.extend(own_arrivals(_record_lines(list(islice(r.fh, need)), at),
                                      self.arrival_field))
        win = self.win
        jump = self.max_jump_us
        prev = r.prev
        while True:
            off, prev = vouched_run(topic, part, off, end, ahead, prev, jump, win,
                                    self.mark_prev, MARK_EVERY)
            if off >= end:
                break
            # A suspect: `_next` reads further ahead to judge it.
            r.off, r.prev = off, prev
            line, prev, fault = self._next(r)
            win.append(RawRecord(topic, part, off, line, prev, fault))
            off += 1
        r.off, r.prev = off, prev

    def peek(self, off: int) -> RawRecord | None:
        """The record at `off` (None past the end), leaving the window in place when it can."""
        if off >= self.count or off < 0:
            return None
        r = self._reader
        if r is None or not (self.win_base <= off < r.off):
            if r is None or off != r.off:
                self.close()
                self._reader = self._open_at(off)
                self.win.clear()
                self.win_base = off
            elif r.off - self.win_base >= READ_AHEAD * 4:
                self.win.clear()
                self.win_base = r.off
            self._fill()
        return self.win[off - self.win_base]

    def take(self, off: int) -> RawRecord:
        """Hand out the record at `off`: drop the window before it, remember its arrival."""
        rec = self.peek(off)
        assert rec is not None, f"{self.tp} has no record at offset {off}"
        self._drop_before(off)
        self._handed_out(off, [rec.arrival_us])
        return rec

    def take_run(self, off: int, upto: int) -> list[RawRecord]:
        """Hand out the records [off, upto), all in the window (the merge's case: `off` is the
        window's first record): as `take` of each, in one step."""
        win = self.win
        assert self.win_base == off and upto - off <= len(win), (self.tp, off, upto)
        pop = win.popleft
        recs = [pop() for _ in range(upto - off)]
        self.win_base = upto
        self._handed_out(off, [rec.arrival_us for rec in recs])
        return recs

    def buffered(self, off: int) -> tuple[deque[RawRecord], bool] | None:
        """The window from `off` on, the records before it dropped, and whether the partition
        has lines beyond it (not decoded yet); None past the end. A window shorter than half
        a read-ahead is filled further first, so the merge takes runs of records, not single
        ones."""
        if self.peek(off) is None:
            return None
        self._drop_before(off)
        win = self.win
        r = self._reader
        assert r is not None  # peek opened it
        if len(win) < READ_AHEAD // 2 and r.off < self.count:
            self._fill()
        return win, r.off < self.count

    def _drop_before(self, off: int) -> None:
        """Drop the window's records before `off` (which `peek` has put in the window)."""
        win = self.win
        while self.win_base < off:
            win.popleft()
            self.win_base += 1

    def _handed_out(self, off: int, arrivals: list[int]) -> None:
        """Remember the arrival times of the records handed out from `off` on (`arrival` reads
        them back until they are acknowledged); at most about _MAX_TAKEN of them, the newest."""
        taken = self.taken
        if off != self.taken_base + len(taken):
            del taken[:]
            self.taken_base = off
        elif len(taken) + len(arrivals) > _MAX_TAKEN:
            drop = min(len(taken), len(taken) + len(arrivals) - _MAX_TAKEN // 2)
            del taken[:drop]
            self.taken_base += drop
        taken.extend(arrivals)

    def arrival(self, off: int) -> int | None:
        if off >= self.count:
            return None
        if self.taken_base <= off < self.taken_base + len(self.taken):
            return self.taken[off - self.taken_base]
        r = self._reader
        if r is not None and self.win_base <= off < r.off:
            return self.win[off - self.win_base].arrival_us
        if r is None or off == r.off:
            rec = self.peek(off)
            assert rec is not None, f"{self.tp} has no record at offset {off}"
            return rec.arrival_us
        # Anywhere else: decode there with a reader of its own.
        other = self._open_at(off)
        try:
            return self._next(other)[1]
        finally:
            other.fh.close()

    def release(self, upto: int) -> None:
        """Records before `upto` are committed: forget their arrival times."""
        drop = min(len(self.taken), upto - self.taken_base)
        if drop > 0:
            del self.taken[:drop]
            self.taken_base += drop

    # -- positions ------------------------------------------------------------------------
    def _byte_start(self, off: int) -> int:
        """Byte position where line `off` starts (its predecessor's end)."""
        k = min(off // MARK_EVERY, len(self.marks) - 1)
        pos = self.marks[k]
        left = off - k * MARK_EVERY
        if left == 0:
            return pos
        with open(self._file(), "rb") as fh:
            fh.seek(pos)
            for _ in range(left):
                pos += len(fh.readline())
        return pos

    def fingerprint(self, upto: int) -> str:
        """Hash of the bytes before line `upto`: appending keeps it, rewriting breaks it."""
        if upto == 0:
            return hashlib.sha256(b"").hexdigest()
        if upto > self.count:
            return "beyond-end"
        end = self._byte_start(upto)
        done, h = self._fp
        if end < done:
            done, h = 0, hashlib.sha256()
        h = h.copy()
        with open(self._file(), "rb") as fh:
            fh.seek(done)
            while done < end:
                chunk = fh.read(min(_CHUNK, end - done))
                if not chunk:
                    return "beyond-end"
                h.update(chunk)
                done += len(chunk)
        self._fp = (end, h)
        return h.copy().hexdigest()


class FileLog:
    kind = "filelog"

    def __init__(self, root: str, topics: list[str], arrival_field: dict[str, str] | None = None,
                 max_arrival_jump_us: int | None = DEFAULT_MAX_ARRIVAL_JUMP_US,
                 owns: Callable[[TP], bool] | None = None):
        """`owns`: the partitions this worker reads (`--worker I/N`); the others are counted
        but read as empty, so positions, watermarks and checkpoints keep the log's layout."""
        self.root = root
        self._owns = owns
        self.topics = list(topics)
        self._arrival_field = arrival_field or {}
        self.max_arrival_jump_us = max_arrival_jump_us
        self.partition_counts: dict[str, int] = {}
        self._parts: dict[TP, _Partition] = {}
        self.opened_us = wall_clock_us()
        if not os.path.isdir(root):
            raise SourceError(f"source directory {root!r} does not exist")
        for topic in self.topics:
            parts = partition_files(root, topic)
            n = max(parts) + 1
            self.partition_counts[topic] = n
            field = self._arrival_field.get(topic, "arrival_time")
            for p in range(n):
                path = parts.get(p) if self.owns((topic, p)) else None
                self._parts[(topic, p)] = _Partition((topic, p), path, field,
                                                     max_arrival_jump_us, self._others_frontier,
                                                     self.opened_us)
        self._frontiers: dict[TP, int] | None = None
        self._head = self._newest_claim(max_arrival_jump_us)

    def _newest_claim(self, bound: int | None) -> int | None:
        """The newest arrival the partitions' ends claim (a metric: how far behind the source
        a run is), read from their last lines only: a line that jumps more than the bound past
        the lines before it into the future counts only when another partition's end reaches
        within the bound of it, as the arrival-jump rule judges it (docs/sources.md)."""
        tails = {tp: part.tail_arrivals() for tp, part in self._parts.items()}
        heads: list[int] = []
        for tp, owns in tails.items():
            others = max((max(o) for q, o in tails.items() if q != tp and o), default=NEG_INF)
            prev = NEG_INF
            for own in owns:
                if (bound is not None and arrival_suspect(own, prev, bound)
                        and claims_future(own, self.opened_us, bound)):
                    ref = max(prev, others)
                    if ref > NEG_INF and own - ref > bound:
                        continue  # judged a jump: it claims nothing
                prev = max(prev, own)
            if prev > NEG_INF:
                heads.append(prev)
        return max(heads) if heads else None

    def _others_frontier(self, tp: TP, own: int) -> int:
        """The latest frontier of every partition but `tp`, as the log was opened (computed
        once, when a record first needs it), to judge the arrival `own` by (`trailing_jump`).

        A partition's frontier is never earlier than its last line's own arrival, which the
        log read when it was opened. When one of those already reaches within the bound of
        `own`, it is returned instead: the verdict is the same (no jump), and no partition is
        read whole for it. A recording dated after the wall clock asks at its first quiet
        spell, and that pass over every file was 4% of a 1,000,000-event join run's worker
        (docs/performance.md, twenty-sixth round)."""
        bound = self.max_arrival_jump_us
        if self._frontiers is None and bound is not None:
            vouched = max((p.last_own for q, p in self._parts.items()
                           if q != tp and p.last_own is not None), default=NEG_INF)
            if vouched > NEG_INF and own - vouched <= bound:
                return vouched
        if self._frontiers is None:
            self._frontiers = {q: part.frontier() for q, part in self._parts.items()}
        return max((f for q, f in self._frontiers.items() if q != tp), default=NEG_INF)

    def close(self) -> None:
        for part in self._parts.values():
            part.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: nothing left to release
            pass

    def tps(self) -> list[TP]:
        return [(t, p) for t in self.topics for p in range(self.partition_counts[t])]

    def owns(self, tp: TP) -> bool:
        return self._owns is None or self._owns(tp)

    def newest_arrival(self) -> int | None:
        """The newest arrival among the partitions' last records."""
        return self._head

    def end_offset(self, tp: TP) -> int:
        part = self._parts.get(tp)
        return part.count if part is not None else 0

    def total_records(self) -> int:
        return sum(p.count for p in self._parts.values())

    def read_at(self, tp: TP, offset: int) -> RawRecord:
        part = self._parts[tp]
        if not 0 <= offset < part.count:
            raise IndexError(f"{tp[0]}:{tp[1]} has no offset {offset} (it holds {part.count})")
        return part.take(offset)

    def next_arrival(self, tp: TP, offset: int) -> int | None:
        part = self._parts.get(tp)
        return part.arrival(offset) if part is not None else None

    def caught_up(self, tp: TP, offset: int, clock_us: int) -> bool:
        """Nothing is pending at the log for tp at source time clock_us (as of opening)."""
        nxt = self.next_arrival(tp, offset)
        return nxt is None or nxt > clock_us

    def merged(self, positions: dict[TP, int]) -> Iterator[RawRecord]:
        """All records from `positions` on, merged by (arrival, topic, partition, offset);
        each partition stays in offset order.

        A run at a time rather than a record at a time: each partition's window is in merge
        order already (its merge arrival never falls), so once every partition has a window
        decoded, every record up to the earliest window end among the partitions with lines
        still to decode is known to come before anything not decoded yet. Those records are
        taken from each window in one step and put in order by one stable sort on the
        arrival: the runs go in (topic, partition) order and each keeps its offsets, so equal
        arrivals come out as the tuple order has them. A record at a time, the heap step and
        `take` cost about 1 µs a record in interpreted code (docs/performance.md,
        thirty-fifth round)."""
        parts = [(tp, self._parts[tp]) for tp in sorted(self.tps())]
        offs = {tp: positions.get(tp, 0) for tp, _ in parts}
        while True:
            live: list[tuple[TP, _Partition, deque[RawRecord]]] = []
            # The earliest (last decoded arrival, partition) among the partitions with lines
            # still to decode: nothing after it can come before it.
            bound: tuple[int, TP] | None = None
            for tp, p in parts:
                got = p.buffered(offs[tp])
                if got is None:
                    continue
                win, more = got
                live.append((tp, p, win))
                if more:
                    last = (win[-1].arrival_us, tp)
                    if bound is None or last < bound:
                        bound = last
            if not live:
                return
            run: list[RawRecord] = []
            for tp, p, win in live:
                if bound is None or tp == bound[1]:
                    k = len(win)  # the bound's own window is taken whole: the merge moves on
                elif tp < bound[1]:  # equal arrivals: this partition's come first
                    k = bisect_right(win, bound[0], key=_MERGE_ARRIVAL)
                else:
                    k = bisect_left(win, bound[0], key=_MERGE_ARRIVAL)
                if k:
                    off = offs[tp]
                    run.extend(p.take_run(off, off + k))
                    offs[tp] = off + k
            if len(live) > 1:
                run.sort(key=_MERGE_ARRIVAL)
            yield from run

    # -- positions -----------------------------------------------------------------------
    def fingerprint(self, tp: TP, upto: int) -> str:
        """Hash of the partition's bytes before `upto`: appending keeps it, rewriting breaks it."""
        if upto == 0:
            return hashlib.sha256(b"").hexdigest()
        return self._parts[tp].fingerprint(upto)

    def identity(self) -> dict:
        return {"kind": self.kind, "root": os.path.abspath(self.root),
                "partitions": dict(self.partition_counts)}

    def ack(self, ranges: dict[str, tuple[int, int]]) -> None:
        """The file log keeps no consumer state (positions live in the store's checkpoints);
        acknowledged records' arrival times are released from memory."""
        for tps, (_, last) in ranges.items():
            topic, _, part = tps.rpartition(":")
            p = self._parts.get((topic, int(part)))
            if p is not None:
                p.release(last + 1)


def partition_files(root: str, topic: str) -> dict[int, str]:
    """Partition number -> file of a topic; refuses names that spell a number two ways."""
    tdir = os.path.join(root, topic)
    parts: dict[int, str] = {}
    if os.path.isdir(tdir):
        for name in sorted(os.listdir(tdir)):
            m = _PART_RE.match(name)
            if not m:
                continue
            if not _CANONICAL_PART_RE.match(name):
                raise SourceError(
                    f"partition file {os.path.join(tdir, name)!r} has an ambiguous name: "
                    f"partitions are named p0.jsonl, p1.jsonl, ... without leading zeros; "
                    f"rename it to p{int(m.group(1))}.jsonl")
            parts[int(m.group(1))] = os.path.join(tdir, name)
    if not parts:
        raise SourceError(f"topic {topic!r} has no partitions under {tdir!r} "
                          f"(expected files named p0.jsonl, p1.jsonl, ...)")
    return parts
