"""The run trace: one record per delivery, drop, domain event and error.

A record is ``(seq, t, kind, sender, recipient, type, content)`` where
``content`` is canonical JSON bytes and ``seq`` is the record's place in the
trace (0, 1, ...). Records are kept as plain tuples without their ``seq``
because appending one is on the delivery hot path; :meth:`Trace.records`
turns them into :class:`TraceRecord` values on demand.

:attr:`Trace.digest` is the SHA-256 over the canonical JSON line of every
record, in order. In deterministic mode it is a function of the seed and the
scenario only: it contains no wall-clock figure and no ``hash()`` of a string.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Iterator
from typing import Any, Final, NamedTuple

import msgspec

__all__ = ["DELIVER", "DROP", "ERROR", "EVENT", "Trace", "TraceRecord"]

DELIVER: Final = "deliver"
DROP: Final = "drop"
EVENT: Final = "event"
ERROR: Final = "error"

_encoder: Final = msgspec.json.Encoder(order="sorted")


class TraceRecord(NamedTuple):
    """One thing that happened in a run."""

    seq: int
    t: float
    kind: str
    sender: str
    recipient: str
    type: str
    content: bytes

    def to_json(self) -> bytes:
        """The canonical line this record contributes to the digest."""
        return _encoder.encode(
            (self.seq, self.t, self.kind, self.sender, self.recipient, self.type,
             msgspec.Raw(self.content))
        )

    def content_obj(self) -> Any:
        return msgspec.json.decode(self.content)


class Trace:
    """An append-only list of records shared by every actor of one dispatcher.

    ``append``, ``deliver`` and ``add_record`` are safe to call from any thread: a record's
    ``seq`` is its index, and ``list.append`` is atomic in CPython. In realtime
    mode records are therefore in a valid global order, though not a
    reproducible one.
    """

    __slots__ = ("_digest", "_digested", "_records", "add_record", "enabled")

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self._records: list[tuple[float, str, str, str, str, bytes]] = []
        #: Append one record ``(t, kind, sender, recipient, type, content)`` as it
        #: is, whether or not the trace is enabled (the caller checks ``enabled``).
        #: The delivery step uses it: a bound ``list.append`` runs in C, where a
        #: method would cost a Python call per delivery.
        self.add_record = self._records.append
        self._digest = hashlib.sha256()
        self._digested = 0

    def append(
        self, t: float, kind: str, sender: str, recipient: str, type_: str, content: bytes
    ) -> None:
        """Record one thing of any ``kind`` (when the trace is enabled)."""
        if self.enabled:
            self._records.append((t, kind, sender, recipient, type_, content))

    def deliver(self, t: float, sender: str, recipient: str, type_: str, content: bytes) -> None:
        """Record one delivery (when enabled)."""
        if self.enabled:
            self._records.append((t, DELIVER, sender, recipient, type_, content))

    def event(self, t: float, sender: str, recipient: str, type_: str, content: Any) -> None:
        """Record a domain event whose content is any JSON value."""
        if self.enabled:
            self.append(t, EVENT, sender, recipient, type_, _encoder.encode(content))

    def __len__(self) -> int:
        return len(self._records)

    def records(self, kind: str | None = None) -> Iterator[TraceRecord]:
        for seq, raw in enumerate(list(self._records)):
            if kind is None or raw[1] == kind:
                yield TraceRecord(seq, *raw)

    @property
    def digest(self) -> str:
        """SHA-256 (hex) over every record so far; incremental, so cheap to ask often."""
        records = self._records
        end = len(records)
        update = self._digest.update
        for seq, raw in enumerate(itertools.islice(records, self._digested, end),
                                  self._digested):
            update(TraceRecord(seq, *raw).to_json())
            update(b"\n")
        self._digested = end
        return self._digest.hexdigest()

    def to_jsonl(self) -> Iterator[bytes]:
        """Each record as a JSON line (the file format of ``--out DIR``)."""
        for record in self.records():
            yield record.to_json() + b"\n"
