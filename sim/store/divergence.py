"""A re-execution checked against a stored log: where it first differs, if anywhere.

A resumed deterministic run is re-executed and its first records are checked against
the stored ones (:class:`ResumeCheck`). The check goes by the ``digests`` rows: the
re-execution's digest at each stored commit's end must equal the stored one (equal
digests over equal-length prefixes mean equal records); only the records of a commit
whose digest differs, or that no digest covers (an older store), are compared row by
row (:func:`first_difference`), to name the first that differs (a
:class:`Divergence`). ``replay`` compares a whole log the same way.
"""

from __future__ import annotations

import itertools
import sqlite3
import zlib
from collections import deque
from collections.abc import Iterable

import msgspec

from barnraise.sim.trace import Trace, TraceRecord

__all__ = ["Divergence", "ResumeCheck", "first_difference"]


class Divergence(msgspec.Struct, frozen=True):
    """The first record where a re-execution differs from the stored log."""

    seq: int
    stored: TraceRecord | None
    got: TraceRecord | None

    def describe(self) -> str:
        def show(r: TraceRecord | None) -> str:
            if r is None:
                return "nothing"
            return (f"{r.kind} {r.type} {r.sender}->{r.recipient} at t={r.t:g} "
                    f"{r.content[:120].decode(errors='replace')}")
        return f"record {self.seq} differs: stored {show(self.stored)}; got {show(self.got)}"


def first_difference(db: sqlite3.Connection, trace: Trace, start: int, end: int
                      ) -> Divergence | None:
    """The first of the stored records ``start`` to ``end - 1`` that the trace does not
    have as it is (a record the trace lacks counts), or None.

    The rows come back as the trace keeps its records (plain tuples, the few packed
    contents unpacked), so that the two lists compare in C; only a difference is
    looked for record by record.
    """
    unpack = zlib.decompress
    stored = [row[:6] if not row[6] else (*row[:5], unpack(row[5])) for row in db.execute(
        "SELECT t, kind, sender, recipient, type, content, packed FROM events "
        "WHERE seq >= ? AND seq < ? ORDER BY seq", (start, end))]
    got = trace.shown_from(start, start + len(stored))
    if stored == got:
        return None
    for seq, (old, new) in enumerate(itertools.zip_longest(stored, got), start):
        if old != new:
            return Divergence(seq, None if old is None else TraceRecord(seq, *old),
                              None if new is None else TraceRecord(seq, *new))
    return None  # pragma: no cover - the lists differ, so some pair does


class ResumeCheck:
    """The check of a resumed run's records against the stored log of ``db``, a stored
    commit at a time (its digests, in order: :meth:`expect`)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db
        #: The stored commit ends and digests still to check, in order.
        self._digests: deque[tuple[int, str]] = deque()

    def expect(self, digests: Iterable[tuple[int, str]]) -> None:
        """The stored commits' (end, digest) pairs, in order of their ends."""
        self._digests.extend(digests)

    def check(self, trace: Trace, start: int, end: int, whole: bool
              ) -> tuple[int, Divergence | None]:
        """Check the trace's records ``start`` to ``end - 1`` against the stored ones.
        Returns where the check got to (``end`` when ``whole``, else possibly the end of
        the last stored commit before it) and the first record that differs, or None.

        A stored commit's digest is compared with the trace's digest at the same record
        (equal digests: equal records up to there); a commit whose digest differs is
        then compared row by row, to find its first record that differs, and so are
        records that no stored digest covers (a store older than the digests, or the
        trace's hash already past them).
        """
        db = self._db
        digests = self._digests
        checked = start
        while digests and digests[0][0] <= end:
            seq, digest = digests.popleft()
            if seq <= checked:
                continue
            if trace.digested > seq:  # the hash has gone past it: rows, then
                break
            if trace.digest_at(seq) != digest:
                # The rows decide (equal rows under a stored digest that differs: the
                # digest row is what is wrong, and the log is reproduced).
                divergence = first_difference(db, trace, checked, seq)
                if divergence is not None:
                    return checked, divergence
            checked = seq
        if whole and checked < end:
            return end, first_difference(db, trace, checked, end)
        return checked, None
