"""What every source shares: the raw record, decoding a line and its arrival time, the
arrival-jump rule, and the deterministic merge by arrival (with the in-memory partition buffer
a snapshot source fills). One definition, so a recording replays in the same order from the
file log and from NATS JetStream."""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable, Iterator
from typing import Any, Final

import msgspec

from .. import native
from ..timeutil import NEG_INF, US_PER_HOUR, TimeFormatError, parse_utc_us, us_to_iso
from .raw import RawRecord, json_object

TP = tuple[str, int]

# A record whose arrival time is more than this beyond its partition's latest arrival, and that
# neither its partition's later records nor the other partitions confirm, is a clock fault of
# the producer (`arrival_time_jump`): it is quarantined and moves no clock.
DEFAULT_MAX_ARRIVAL_JUMP_US = US_PER_HOUR
ARRIVAL_JUMP = "arrival_time_jump"  # the quarantine reason of such a record
JUMP_LOOKAHEAD = 16  # later records read to tell an arrival jump from a resumed partition


class SourceError(RuntimeError):
    pass


def object_arrival(obj: object, arrival_field: str) -> int | None:
    """The arrival rule on a decoded line (`json_object`): the `arrival_field` of a JSON
    object, when it is a time `parse_utc_us` accepts; None (unusable) for anything else."""
    if not isinstance(obj, dict):
        return None
    try:
        return parse_utc_us(obj.get(arrival_field))
    except TimeFormatError:
        return None


# Lines longer than this may nest deeper than orjson's limit (1024 levels need 2050 bytes),
# which msgspec's skipping does not count alike (`py_plain_lines`).
_DEEP_LINE = 2048
# Every digit as "0", "E" as "e" and "+" as "0", so that one search finds an exponent of three
# or more digits: a number beyond a double has one, or 210 integer digits or more
# (10**(209 + 99) < 1.7976931348623157e308 < 10**(210 + 99)).
_NUMBER_SHAPE = bytes.maketrans(b"123456789E+", b"000000000e0")
_BIG_EXPONENT = b"e000"
_LONG_DIGITS = b"0" * 210


def py_plain_lines(lines: list[bytes]) -> bool:
    """None of the lines can hold what msgspec skips more leniently than orjson decodes:
    invalid UTF-8 (an ASCII line has none), a number beyond a double (orjson refuses it), or
    nesting past orjson's limit (only a long line nests that deep). Asked of a whole block at
    once, the lines joined by a newline (which no number or exponent spans): one pass over the
    bytes instead of a few calls per line. (`find`, not `in`: `in` on bytes first tries the
    needle as an integer and builds an error message each time.)

    Where the compiled core is in use, its C twin (`streaming/_texts.c`, `plain_lines`) reads
    each byte once instead: the join, the translated copy and the searches took about a third
    of a second per 1,000,000 lines (docs/performance.md, thirty-first round)."""
    if not lines:
        return True
    longest = max(map(len, lines))
    if longest > _DEEP_LINE:
        return False
    block = b"\n".join(lines)
    if not block.isascii():
        return False
    shape = block.translate(_NUMBER_SHAPE)
    return (shape.find(_BIG_EXPONENT) < 0
            and (longest < len(_LONG_DIGITS) or shape.find(_LONG_DIGITS) < 0))


# Decided once, when the package's build is (streaming.native.select runs before this import).
_PLAIN_LINES: Final[Callable[[list[bytes]], bool]] = (
    native.hand_written("streaming._texts", "plain_lines") or py_plain_lines)


# The microseconds of a list of arrival texts in one call, when each is a canonical UTC
# spelling of an instant that exists (else None: `parse_utc_us` reads them one at a time), where
# the compiled core is in use; None otherwise.
_UTC_US_TEXTS: Final[Callable[[list[Any]], list[int] | None] | None] = native.hand_written(
    "streaming._texts", "utc_us_texts")


def _arrival_decoder(arrival_field: str) -> msgspec.json.Decoder:
    """msgspec's decoder of a one-field struct holding `arrival_field` (any JSON value; the
    line's other fields are skipped without being built)."""
    decoder = _ARRIVAL_DECODERS.get(arrival_field)
    if decoder is None:
        struct = msgspec.defstruct("ArrivalOnly", [("value", Any, None)],
                                   rename={"value": arrival_field})
        decoder = _ARRIVAL_DECODERS[arrival_field] = msgspec.json.Decoder(struct)
    return decoder


_ARRIVAL_DECODERS: dict[str, msgspec.json.Decoder] = {}


def own_arrivals(lines: list[bytes], arrival_field: str) -> list[tuple[bytes, int | None]]:
    """`(line, own arrival)` of each line (None: unusable): exactly
    `object_arrival(json_object(line), arrival_field)`, without building the line's object in
    the common case.

    msgspec reads the one field and skips the rest. Its skipping is laxer than orjson's full
    decode (`py_plain_lines`), so a line with a usable arrival is trusted only when its block, or
    else the line itself, is plain; any other, and any line msgspec refuses, goes through the
    full decode. A line msgspec reads with a value that is not a usable time is unusable
    either way: orjson gives the same value (duplicate keys: both keep the last) or refuses
    the line."""
    decoder = _arrival_decoder(arrival_field)
    decode = decoder.decode
    parse = parse_utc_us
    plain_lines = _PLAIN_LINES
    plain = plain_lines(lines)
    if plain:
        owns = _block_arrivals(decoder, lines)
        if owns is not None:
            return list(zip(lines, owns, strict=True))
    out: list[tuple[bytes, int | None]] = []
    add = out.append
    for line in lines:
        try:
            value = decode(line).value
        except Exception:  # noqa: BLE001 - any refusal (malformed, not an object, too deep)
            add((line, object_arrival(json_object(line), arrival_field)))
            continue
        if type(value) is not str:
            add((line, None))
            continue
        try:
            own = parse(value)
        except TimeFormatError:
            add((line, None))
            continue
        if plain or plain_lines([line]):
            add((line, own))
        else:
            add((line, object_arrival(json_object(line), arrival_field)))
    return out


def _block_arrivals(decoder: msgspec.json.Decoder, lines: list[bytes]) -> list[int] | None:
    """Every line's own arrival from one msgspec call over the block (`decode_lines`), when
    each line holds one JSON object whose arrival is a usable time; None for a block with
    any other line, which the caller reads line by line. The per-line loop's calls cost
    about a quarter of the file log's reading (docs/performance.md, thirty-fifth round).

    `decode_lines` skips a blank line and gives two values for a line holding two, so the
    count of values names each line's own only when no line is blank: with none, every line
    gives at least one value, and as many values as lines is one each.

    The arrival texts are read in one C call where the compiled core is in use
    (`_UTC_US_TEXTS`): one `parse_utc_us` call per text was a third of this function's time
    (docs/performance.md, thirty-seventh round)."""
    if not lines or not all(lines) or any(map(bytes.isspace, lines)):
        return None
    try:
        found = decoder.decode_lines(b"\n".join(lines))
    except Exception:  # noqa: BLE001 - any refusal: the lines are read one at a time
        return None
    if len(found) != len(lines):
        return None
    values = [f.value for f in found]
    fast = _UTC_US_TEXTS
    if fast is not None:
        owns = fast(values)
        if owns is not None:
            return owns
    if set(map(type, values)) != {str}:
        return None
    try:
        return list(map(parse_utc_us, values))
    except TimeFormatError:
        return None


# Lines whose own arrivals `arrival_column` reads in one `own_arrivals` call: one decoder call
# per block, and a line that sends its block to the line-by-line path costs only its block.
ARRIVAL_BLOCK: Final = 1024


def arrival_column(lines: list[bytes], arrival_field: str,
                   block: int = ARRIVAL_BLOCK) -> list[int | None]:
    """Each line's own arrival (`own_arrival`), read in blocks of `block` lines. Read a
    line at a time, they took about three fifths of the time a 40,000-record JetStream
    snapshot took to open (docs/performance.md, forty-fourth round)."""
    out: list[int | None] = []
    for i in range(0, len(lines), block):
        out.extend(own for _, own in own_arrivals(lines[i:i + block], arrival_field))
    return out


def own_arrival(line: bytes, arrival_field: str) -> int | None:
    """One line's own arrival time (`own_arrivals`; None: unusable)."""
    return own_arrivals([line], arrival_field)[0][1]


def arrival_suspect(own: int | None, prev: int, max_jump_us: int | None) -> bool:
    """An arrival the partition does not vouch for: more than `max_jump_us` past the
    partition's latest arrival `prev`, or the partition's first."""
    return (max_jump_us is not None and own is not None
            and (prev <= NEG_INF or own - prev > max_jump_us))


def arrival_jump(own: int | None, prev: int, next_owns: list[int | None],
                 max_jump_us: int | None) -> str | None:
    """Why a record's arrival time is a producer clock fault, judged by its own partition, or
    None.

    A jump is a suspect arrival (`arrival_suspect`) that the partition does not follow: one of
    its next JUMP_LOOKAHEAD records (`next_owns`, their own arrivals) arrives more than the
    bound earlier again. A partition that goes on from the new time resumed after a quiet
    spell. A record that nothing follows yet is judged by `trailing_jump`."""
    if not arrival_suspect(own, prev, max_jump_us):
        return None
    assert own is not None and max_jump_us is not None
    for nxt in next_owns:
        if nxt is not None and own - nxt > max_jump_us:
            return f"a later record of the partition arrives at {us_to_iso(nxt)}"
    return None


def claims_future(own: int, now_us: int, max_jump_us: int) -> bool:
    """An arrival more than the bound after `now_us` (when the source is read or polled):
    nothing arrives before it is read, so only the other partitions can vouch for it."""
    return own - now_us > max_jump_us


def suspect_jump(own: int | None, prev: int, next_owns: list[int | None],
                 others: Callable[[], int], max_jump_us: int | None, now_us: int
                 ) -> str | None:
    """Why a record that later records of its partition follow is a producer clock fault, or
    None: a suspect its partition does not follow (`arrival_jump`); or a suspect that claims
    to arrive in the future, which its own partition's later records cannot confirm (a
    cluster of far-future records would confirm itself), judged like a partition's last
    record (`trailing_jump`; `others` gives the other partitions' frontier)."""
    why = arrival_jump(own, prev, next_owns, max_jump_us)
    if why is not None or not arrival_suspect(own, prev, max_jump_us):
        return why
    assert own is not None and max_jump_us is not None
    if not claims_future(own, now_us, max_jump_us):
        return None
    return trailing_jump(own, prev, others(), max_jump_us, now_us)


def partition_frontier(prev: int, last_own: int | None) -> int:
    """The latest arrival a partition claims, given the merge arrival `prev` before its last
    record and that record's own arrival: its records the partition itself contradicts
    (judged jumps) do not count; its last record, which nothing contradicts, does."""
    return prev if last_own is None else max(prev, last_own)


def wall_clock_us() -> int:
    """Now, in µs since the epoch: no record can have arrived later (`trailing_jump`)."""
    return time.time_ns() // 1000


def trailing_jump(own: int | None, prev: int, others: int, max_jump_us: int | None,
                  now_us: int) -> str | None:
    """Why the last record of a partition (nothing follows it yet) is a producer clock fault,
    or None.

    Its partition cannot confirm it. It is a jump when it claims to have arrived in the future
    (more than the bound after `now_us`, when the source is read: nothing arrives before it
    is read) and no other partition confirms it either (`others`, the latest of the other
    partitions' frontiers, `partition_frontier`, is more than the bound earlier). A partition
    that resumes after a quiet spell arrived in the past and is read as it is; a record from
    the far future is not, unless the rest of the source has moved there too."""
    if not arrival_suspect(own, prev, max_jump_us):
        return None
    assert own is not None and max_jump_us is not None
    if not claims_future(own, now_us, max_jump_us):
        return None
    ref = max(prev, others)
    if ref <= NEG_INF or own - ref <= max_jump_us:
        return None
    latest = (f"the other partitions' latest arrival is {us_to_iso(others)}" if others > NEG_INF
              else "no other partition holds a record")
    return (f"it claims to arrive in the future (after the source was read) and nothing "
            f"confirms it (no later record of the partition; {latest})")


def jump_fault(own: int, prev: int, why: str, arrival_field: str,
               max_jump_us: int) -> tuple[str, str]:
    since = f"latest arrival {us_to_iso(prev)}" if prev > NEG_INF else "first record"
    return (ARRIVAL_JUMP,
            f"{arrival_field} {us_to_iso(own)} is more than {max_jump_us // 1_000_000}s ahead of "
            f"the partition ({since}) and {why}; it moves no clock")


def _decode_one_partition(lines: list[bytes], arrival_field: str, max_jump_us: int | None,
                          now_us: int, others: int | None = None
                          ) -> tuple[list[SourceFault | None], list[int], int | None, bool]:
    """One partition: the source's faults (None: none), merge arrivals, and the own arrival
    of its last record when that is a suspect only the other partitions can judge (merged,
    until then, at its predecessor's arrival), and whether a suspect claims the future
    (`claims_future`, `now_us` when the source is read). With `others` (the other
    partitions' frontier) such suspects are judged by them (`suspect_jump`); without it the
    partition is judged by itself (what it claims, `partition_frontier`)."""
    owns = arrival_column(lines, arrival_field)
    arrivals: list[int] = []
    faults: list[SourceFault | None] = []
    prev = NEG_INF
    trailing = None
    future = False
    last = len(owns) - 1

    def others_frontier() -> int:
        assert others is not None  # asked only when the other partitions judge
        return others

    for i, own in enumerate(owns):
        if i == last and arrival_suspect(own, prev, max_jump_us):
            trailing = own
            faults.append(None)
            arrivals.append(prev)
            break
        nxt = owns[i + 1:i + 1 + JUMP_LOOKAHEAD]
        if others is None:
            why = arrival_jump(own, prev, nxt, max_jump_us)
            if (why is None and own is not None and max_jump_us is not None
                    and arrival_suspect(own, prev, max_jump_us)
                    and claims_future(own, now_us, max_jump_us)):
                future = True
        else:
            why = suspect_jump(own, prev, nxt, others_frontier, max_jump_us, now_us)
        if why is not None:
            # a jump is only found between two known arrival times under a set bound
            assert own is not None and max_jump_us is not None
            faults.append(SourceFault(*jump_fault(own, prev, why, arrival_field, max_jump_us)))
        else:
            faults.append(None)
            if own is not None and own > prev:
                prev = own
        arrivals.append(prev)
    return faults, arrivals, trailing, future


def decode_partitions(lines: dict[TP, list[bytes]], arrival_fields: dict[str, str],
                      max_jump_us: int | None = DEFAULT_MAX_ARRIVAL_JUMP_US,
                      hold_trailing: bool = False, now_us: int | None = None
                      ) -> tuple[dict[TP, list[SourceFault | None]], dict[TP, list[int]],
                                 dict[TP, int]]:
    """Decode every partition of a source: per partition the source's fault of each record
    (a `SourceFault`, or None) and the arrival times used to merge partitions. Shared by every
    source so they replay in the same order. A line without a usable arrival time, or with an
    arrival jump, keeps its predecessor's arrival: it is consumed right after it.

    A partition's last record that is a suspect is judged against the other partitions'
    frontiers (`trailing_jump`). With `hold_trailing` (a live source, where more
    records will come) an unconfirmed one is not judged yet: it is returned in the third
    value (partition -> its own arrival) and left to the caller to hold back. `now_us`: when
    the source is read (default: the wall clock)."""
    now = wall_clock_us() if now_us is None else now_us
    faults: dict[TP, list[SourceFault | None]] = {}
    arrivals: dict[TP, list[int]] = {}
    pending: dict[TP, int] = {}
    future: list[TP] = []  # partitions with a far-future suspect they do not contradict
    for tp, part_lines in lines.items():
        o, a, trailing, fut = _decode_one_partition(
            part_lines, arrival_fields.get(tp[0], "arrival_time"), max_jump_us, now)
        faults[tp], arrivals[tp] = o, a
        if trailing is not None:
            pending[tp] = trailing
        if fut:
            future.append(tp)
    # Frontiers (each partition judged by itself) before any record is judged by the others,
    # so the decisions do not depend on the order partitions are visited in.
    frontiers = {tp: partition_frontier(a[-1] if a else NEG_INF, pending.get(tp))
                 for tp, a in arrivals.items()}
    for tp in future:
        # Decoded again, the other partitions judging its far-future suspects
        # (`suspect_jump`): its own later records cannot confirm them.
        others = max((f for q, f in frontiers.items() if q != tp), default=NEG_INF)
        o, a, trailing, _ = _decode_one_partition(
            lines[tp], arrival_fields.get(tp[0], "arrival_time"), max_jump_us, now, others)
        faults[tp], arrivals[tp] = o, a
        pending.pop(tp, None)
        if trailing is not None:
            pending[tp] = trailing
    held: dict[TP, int] = {}
    for tp, own in pending.items():
        prev = arrivals[tp][-1]
        others = max((f for q, f in frontiers.items() if q != tp), default=NEG_INF)
        why = trailing_jump(own, prev, others, max_jump_us, now)
        if why is None:
            arrivals[tp][-1] = max(prev, own)
        elif hold_trailing:
            held[tp] = own
        else:
            assert max_jump_us is not None  # a suspect needs a bound
            field = arrival_fields.get(tp[0], "arrival_time")
            faults[tp][-1] = SourceFault(*jump_fault(own, prev, why, field, max_jump_us))
    return faults, arrivals, held


class SourceFault:
    """Why the source judged a record unusable (in-memory sources keep one per record, or
    None, in lists; `RawRecord.fault` is filled from it)."""

    __slots__ = ("reason", "detail")

    def __init__(self, reason: str, detail: str):
        self.reason, self.detail = reason, detail


def raw_record(topic: str, part: int, off: int, line: bytes, fault: SourceFault | None,
               arr: int) -> RawRecord:
    if fault is not None:
        return RawRecord(topic, part, off, line, arr, (fault.reason, fault.detail))
    return RawRecord(topic, part, off, line, arr)


def merge_by_arrival(tps: list[TP], positions: dict[TP, int], lines: dict[TP, list[bytes]],
                     faults: dict[TP, list[SourceFault | None]], arrivals: dict[TP, list[int]]
                     ) -> Iterator[RawRecord]:
    """Records of every partition from `positions` on, merged by (arrival, topic, partition,
    offset); each partition stays in offset order."""
    heap: list[tuple[int, str, int, int]] = []
    for tp in tps:
        off = positions.get(tp, 0)
        if off < len(arrivals.get(tp, ())):
            heap.append((arrivals[tp][off], tp[0], tp[1], off))
    heapq.heapify(heap)
    while heap:
        arr, topic, part, off = heapq.heappop(heap)
        tp = (topic, part)
        yield raw_record(topic, part, off, lines[tp][off], faults[tp][off], arr)
        nxt = off + 1
        if nxt < len(arrivals[tp]):
            heapq.heappush(heap, (arrivals[tp][nxt], topic, part, nxt))


class PartitionBuffer:
    """What an in-memory source holds: per topic-partition lines, the source's faults and
    arrival times, offset-addressed, merged by arrival. Subclasses fill `topics`,
    `partition_counts`, `_lines`, `_faults` and `_arrivals`."""

    topics: list[str]
    partition_counts: dict[str, int]
    _lines: dict[TP, list[bytes]]
    _faults: dict[TP, list[SourceFault | None]]
    _arrivals: dict[TP, list[int]]

    def tps(self) -> list[TP]:
        return [(t, p) for t in self.topics for p in range(self.partition_counts[t])]

    def owns(self, tp: TP) -> bool:
        """Whether this source reads the partition (one that scales out reads a share)."""
        return True

    def end_offset(self, tp: TP) -> int:
        return len(self._lines.get(tp, ()))

    def total_records(self) -> int:
        return sum(len(v) for v in self._lines.values())

    def read_at(self, tp: TP, offset: int) -> RawRecord:
        return raw_record(tp[0], tp[1], offset, self._lines[tp][offset],
                          self._faults[tp][offset], self._arrivals[tp][offset])

    def next_arrival(self, tp: TP, offset: int) -> int | None:
        arr = self._arrivals.get(tp, ())
        return arr[offset] if offset < len(arr) else None

    def caught_up(self, tp: TP, offset: int, clock_us: int) -> bool:
        """Nothing is pending at the log for tp at source time clock_us (the buffer holds
        everything the log had when it was opened)."""
        nxt = self.next_arrival(tp, offset)
        return nxt is None or nxt > clock_us

    def merged(self, positions: dict[TP, int]) -> Iterator[RawRecord]:
        """All records from `positions` on, merged by (arrival, topic, partition, offset)."""
        return merge_by_arrival(self.tps(), positions, self._lines, self._faults, self._arrivals)
