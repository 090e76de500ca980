"""NATS JetStream, followed: the snapshot source plus a live tail.

At open the source reads the stream as `NatsSource` does (everything each owned subject holds,
so journal replay and fingerprints work by offset), then keeps one connection open in a thread
of its own (`nats_tail.LiveTail`, the client protocol spoken by `nats_wire`) with one pull
consumer per owned subject, started at the stream sequence after the last message of that
subject it already holds. Delivered messages wait in an in-memory inbox until the worker polls
them; polling appends them to the per-subject buffers, so a polled record has an offset (its
index in the subject) like any other and the journal can name it.

Positions never come from the broker: the worker resumes from its checkpoint and journal (per
subject offsets, mapped to stream sequences here), and the tail's pull consumers are
ephemeral.

Scale-out: `owned` limits the subjects read to the worker's partitions; the others stay empty
(their watermarks are set idle by the host). The assignment is part of the source identity,
so a checkpoint taken under one assignment is refused under another."""

from __future__ import annotations

import collections
import itertools
import threading

from ..timeutil import NEG_INF
from .filelog import TP, RawRecord, SourceError
from .nats import NatsSource
from .nats_tail import BrokerHealth, LiveTail
from .records import (DEFAULT_MAX_ARRIVAL_JUMP_US, JUMP_LOOKAHEAD, SourceFault, arrival_column,
                      arrival_jump, arrival_suspect, jump_fault, partition_frontier,
                      trailing_jump, wall_clock_us)


class NatsFollowSource(NatsSource):
    """A NATS source that keeps consuming after open. `owned` is the set of topic-partitions
    this worker reads (None: all); `assignment` is "I/N"."""

    def __init__(self, location: str, topics: list[str],
                 arrival_field: dict[str, str] | None = None,
                 owned: set[TP] | None = None, assignment: str = "0/1",
                 max_arrival_jump_us: int | None = DEFAULT_MAX_ARRIVAL_JUMP_US,
                 hold_trailing: bool = True):
        self.owned = owned
        self._hold = hold_trailing
        # Per subject: delivered records whose arrival jumps ahead and that nothing has
        # confirmed yet (`_judge_held`), with everything delivered after them, in order.
        self._held: dict[TP, collections.deque] = {}
        self.assignment = assignment
        self._inbox: collections.deque = collections.deque()
        self._wakeup = threading.Event()
        # Per subject: stream sequence of the last message queued (event-loop thread only),
        # messages the server still holds beyond it, and the JetStream timestamp (ns since the
        # epoch) of every live record by offset, kept until its batch is committed.
        self._queued_seq: dict[TP, int] = {}
        self._server_pending: dict[TP, int] = {}
        self._stamps: dict[TP, dict[int, int]] = {}
        self.health = BrokerHealth()
        self._tail: LiveTail | None = None
        super().__init__(location, topics, arrival_field, max_arrival_jump_us)
        self._start_tail()

    def _hold_trailing(self) -> bool:
        return self._hold

    def owns(self, tp: TP) -> bool:
        return self.owned is None or tp in self.owned

    # -- the live tail -------------------------------------------------------------------------
    def _start_tail(self) -> None:
        loc = self.location
        starts: dict[TP, tuple[str, int]] = {}
        for tp in self.tps():
            if not self.owns(tp):
                continue
            seqs = self._seqs[tp]
            start = seqs[-1] + 1 if seqs else 1
            self._queued_seq[tp] = start - 1
            self._server_pending[tp] = 0
            self._stamps[tp] = {}
            starts[tp] = (loc.subject(*tp), start)
        try:
            self._tail = LiveTail(loc.server, loc.server_address, loc.timeout_s, loc.stream,
                                  starts, self._on_message, self._wakeup.set, self.health)
        except SourceError as exc:
            raise SourceError(f"cannot follow stream {loc.stream!r} at "
                              f"{loc.server_address}: {exc}") from None
        self._tail.start()

    def _on_message(self, tp: TP, seq: int, pending: int, stamp: int, data: bytes) -> None:
        """A delivery, in the tail's thread: queued for the next poll (the tail wakes a
        waiting poll once per read, not once per message)."""
        if seq <= self._queued_seq[tp]:
            return  # already queued
        self._queued_seq[tp] = seq
        self._server_pending[tp] = pending
        self._inbox.append((tp, seq, data, stamp))

    def poll(self, max_records: int, timeout_s: float) -> list[RawRecord]:
        """Up to `max_records` records delivered since the last poll (a few more when held
        records are released), waiting up to `timeout_s` for the first. Each gets the next
        offset of its subject."""
        if not self._inbox and timeout_s > 0:
            self._wakeup.wait(timeout_s)
        self._wakeup.clear()
        out: list[RawRecord] = []
        inbox = self._inbox
        held = self._held
        while inbox and len(out) < max_records:
            # The next deliveries' own arrivals read together (one decoder call per arrival
            # field, not one per line); those this poll does not reach go back, in order.
            chunk = [inbox.popleft() for _ in range(min(len(inbox), max_records - len(out)))]
            owns = self._own_arrivals(chunk)
            for k, (tp, seq, data, stamp) in enumerate(chunk):
                if len(out) >= max_records:
                    inbox.extendleft(reversed(chunk[k:]))
                    break
                own = owns[k]
                item = (seq, data, stamp, own)
                waiting = held.get(tp)
                if waiting is None and self._unconfirmed(tp, own):
                    waiting = held[tp] = collections.deque()
                if waiting is not None:
                    waiting.append(item)
                    out.extend(self._judge_held(tp))
                else:
                    out.append(self._append(tp, item, None))
        # Records of other subjects may have confirmed a held one.
        while held:
            released = [r for tp in list(held) for r in self._judge_held(tp)]
            if not released:
                break
            out.extend(released)
        if inbox:
            self._wakeup.set()
        return out

    def _own_arrivals(self, chunk: list[tuple]) -> list[int | None]:
        """The own arrival (`own_arrival`) of each delivery `(tp, seq, data, stamp)`."""
        fields = self._arrival_field
        by_field: dict[str, list[int]] = {}
        for k, item in enumerate(chunk):
            by_field.setdefault(fields.get(item[0][0], "arrival_time"), []).append(k)
        owns: list[int | None] = [None] * len(chunk)
        for field_name, at in by_field.items():
            got = arrival_column([chunk[k][2] for k in at], field_name)
            for k, own in zip(at, got, strict=True):
                owns[k] = own
        return owns

    def _prev(self, tp: TP) -> int:
        arrivals = self._arrivals[tp]
        return arrivals[-1] if arrivals else NEG_INF

    def _others_frontier(self, tp: TP) -> int:
        """The latest arrival the other subjects claim (`records.partition_frontier`): their
        buffered records and their held ones, so subjects that resume together after a common
        quiet spell confirm each other."""
        latest = NEG_INF
        for q, arrivals in self._arrivals.items():
            if q == tp:
                continue
            held = self._held.get(q, ())
            owns = [h[3] for h in held if h[3] is not None]
            latest = max(latest, partition_frontier(arrivals[-1] if arrivals else NEG_INF,
                                                    max(owns) if owns else None))
        return latest

    def _unconfirmed(self, tp: TP, own: int | None) -> bool:
        """A delivered record whose arrival nothing vouches for yet: it is held back."""
        if not self._hold:
            return False
        prev = self._prev(tp)
        if not arrival_suspect(own, prev, self.max_arrival_jump_us):
            # Nearly every record: `trailing_jump` would say no before it used the other
            # subjects' frontier, which costs a pass over every subject.
            return False
        return trailing_jump(own, prev, self._others_frontier(tp), self.max_arrival_jump_us,
                             wall_clock_us()) is not None

    def _judge_held(self, tp: TP) -> list[RawRecord]:
        """Release the held records of tp that can be judged now, in order: the first one is a
        jump once a later record of the subject arrives more than the bound earlier (one of
        the next JUMP_LOOKAHEAD unless it claims the future), and is read as it is once the
        next JUMP_LOOKAHEAD go on from its time (unless it claims the future), or another
        subject, or the wall clock, reaches within the bound of it (the rule of a recording's
        records, `records.suspect_jump`, applied as the evidence is delivered). Until then it
        holds back everything after it."""
        held = self._held[tp]
        bound = self.max_arrival_jump_us
        field_name = self._arrival_field.get(tp[0], "arrival_time")
        out: list[RawRecord] = []
        while held:
            own = held[0][3]
            prev = self._prev(tp)
            fault = None
            if arrival_suspect(own, prev, bound):
                assert own is not None and bound is not None
                later = [h[3] for h in itertools.islice(held, 1, 1 + JUMP_LOOKAHEAD)]
                why = arrival_jump(own, prev, later, bound)
                if why is not None:
                    fault = jump_fault(own, prev, why, field_name, bound)
                elif trailing_jump(own, prev, self._others_frontier(tp), bound,
                                   wall_clock_us()):
                    # It claims the future and no other subject confirms it: its own
                    # subject's later records cannot (a cluster would confirm itself), but
                    # any of them arriving earlier again contradicts it.
                    why = arrival_jump(own, prev, [h[3] for h in itertools.islice(held, 1, None)],
                                       bound)
                    if why is None:
                        break
                    fault = jump_fault(own, prev, why, field_name, bound)
            out.append(self._append(tp, held.popleft(), fault))
        if not held:
            del self._held[tp]
        return out

    def _append(self, tp: TP, item: tuple, fault: tuple[str, str] | None) -> RawRecord:
        seq, data, stamp, own = item
        seqs = self._seqs[tp]
        if seqs and seq <= seqs[-1]:
            raise SourceError(f"{self.location.subject(*tp)}: stream sequence {seq} delivered "
                              f"after {seqs[-1]}")
        lines, faults, arrivals = self._lines[tp], self._faults[tp], self._arrivals[tp]
        prev = self._prev(tp)
        # The same rule as `decode_partitions`: a missing arrival, or a jump, keeps its
        # predecessor's.
        arr = prev if fault is not None or own is None else max(own, prev)
        offset = len(lines)
        lines.append(data)
        seqs.append(seq)
        faults.append(SourceFault(*fault) if fault is not None else None)
        arrivals.append(arr)
        if stamp:
            self._stamps[tp][offset] = stamp
        return RawRecord(tp[0], tp[1], offset, data, arr, fault)

    def take_stamps(self, ranges: dict[str, list[int]] | dict) -> list[int]:
        """JetStream timestamps (ns) of the live records in `ranges` ("topic:p" -> [lo, hi]),
        forgotten once taken (their batch is committed)."""
        out: list[int] = []
        for tps, (lo, hi) in ranges.items():
            topic, part = tps.rsplit(":", 1)
            stamps = self._stamps.get((topic, int(part)))
            if not stamps:
                continue
            for off in range(lo, hi + 1):
                s = stamps.pop(off, None)
                if s is not None:
                    out.append(s)
        return out

    def lag(self, positions: dict[TP, int]) -> dict[str, int]:
        """Pending messages per owned partition: held by the server beyond the last delivered
        one, waiting in the inbox, and buffered but not yet consumed."""
        waiting: dict[TP, int] = collections.Counter(item[0] for item in list(self._inbox))
        out = {}
        for tp in self.tps():
            if not self.owns(tp):
                continue
            buffered = len(self._lines[tp]) - positions.get(tp, 0)
            out[f"{tp[0]}:{tp[1]}"] = (self._server_pending.get(tp, 0) + waiting.get(tp, 0)
                                       + max(0, buffered) + len(self._held.get(tp, ())))
        return out

    def caught_up(self, tp: TP, offset: int, clock_us: int) -> bool:
        """Live: caught up when nothing of tp waits in the inbox or at the server and the
        buffered records after `offset` arrived after `clock_us`."""
        if self._server_pending.get(tp, 0) > 0:
            return False
        if tp in self._held or any(item[0] == tp for item in list(self._inbox)):
            return False
        return super().caught_up(tp, offset, clock_us)

    # -- identity --------------------------------------------------------------------------
    def identity(self) -> dict:
        return {**super().identity(), "assignment": self.assignment}

    def restore_refusal(self, saved: dict) -> str | None:
        reason = super().restore_refusal(saved)
        if reason:
            return reason
        was = saved.get("assignment", "0/1")
        if was != self.assignment:
            return (f"the checkpoint was taken by worker {was}, this worker is "
                    f"{self.assignment}: a changed assignment needs re-keying "
                    f"(docs/deployment.md)")
        return None

    def close(self) -> None:
        tail, self._tail = self._tail, None
        if tail is not None:
            tail.close()
