"""The validated record every contract decodes to, and the error a defective one raises: a
module of their own so that the compiled decoder (canonical.py) and the contracts share them."""

from __future__ import annotations

from typing import Any

import msgspec


class Record(msgspec.Struct, gc=False):
    """A validated input record with its source position. (A C struct: built once per record
    on the hot path, cheaper than a dataclass; holds no reference cycles, so no GC tracking.)"""

    topic: str
    partition: int
    offset: int
    id: str
    revision: int
    key: str
    event_us: int
    arrival_us: int
    payload: dict[str, Any]  # canonical business fields (times as canonical ISO strings)
    payload_hash: str  # blake2b-128 of the canonical JSON (payload_json, encoded)
    size: int  # bytes of the source line, used for state-bytes accounting
    times: dict[str, Any] = msgspec.field(default_factory=dict)  # every time field, µs (or None)
    # The canonical JSON the hash was taken over, as text (what the archive stores). Text, not
    # the bytes the encoder returned: those keep a 4 KiB block each, a batch's records 20 MiB
    # of blocks touched once and freed together (docs/performance.md, twentieth round).
    payload_json: str | None = None

    @property
    def payload_bytes(self) -> bytes | None:
        return None if self.payload_json is None else self.payload_json.encode()


class InvalidRecord(Exception):
    """Bad input: carries a specific, stable reason code and a human detail."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail
