"""A store read: :class:`StoredLog`, its run row, log, snapshots and delegations as stored.

Every read goes through a read-only connection that leaves the folder as it found it
(:func:`barnraise.sim.store.files.reading`), so a reader may read a store a live run is writing.
:class:`barnraise.actors.stored.run.StoredRun` (what ``barnraise.open_run`` returns) adds what folds
of
the log show.
"""

from __future__ import annotations

import contextlib
import json
import numbers
import os
import sqlite3
import zlib
from collections.abc import Generator, Iterable
from typing import Any, Final

import msgspec

from barnraise.sim.metrics import Reported
from barnraise.sim.reporters import check_reporters
from barnraise.sim.store.divergence import Divergence, first_difference
from barnraise.sim.store.files import (
    RunInfo,
    StoreError,
    check_store,
    locked_by_other,
    reading,
)
from barnraise.sim.trace import Trace, TraceRecord

__all__ = ["StoredLog", "read_snapshot"]


#: The most bytes one record's content may unpack to. The writer packs only what the run
#: sent, far below this; a store whose record unpacks to more was not written by barnraise
#: (a few megabytes packed can unpack to gigabytes) and is refused at that record.
MAX_RECORD_BYTES: Final = 256 * 1024 * 1024


def _unpack(seq: Any, content: bytes) -> bytes:
    unpacker = zlib.decompressobj()
    try:
        data = unpacker.decompress(content, MAX_RECORD_BYTES + 1)
    except zlib.error as exc:
        raise StoreError(f"record {seq}: its packed content does not unpack ({exc})") from None
    if len(data) > MAX_RECORD_BYTES or unpacker.unconsumed_tail:
        raise StoreError(f"record {seq}: its packed content unpacks to more than "
                         f"{MAX_RECORD_BYTES:,} bytes; barnraise writes no such record")
    return data


def _stored(view: Any) -> None:
    """What a stored reporter's name stands for when it is checked: it is not called."""


def _record(row: Any) -> TraceRecord:
    content = bytes(row[6])
    return TraceRecord(row[0], row[1], row[2], row[3], row[4], row[5],
                       _unpack(row[0], content) if row[7] else content)


_COLUMNS: Final = "seq, t, kind, sender, recipient, type, content, packed"


def read_snapshot(blob: bytes) -> Any:
    """A snapshot's world as it was given to the store."""
    return msgspec.msgpack.decode(zlib.decompress(blob))


def _filters(start: int | None, upto: int | None, types: Iterable[str] | None
             ) -> tuple[str, list[Any]]:
    """The WHERE clause and its arguments for the log's records from seq ``start``, before
    seq ``upto``, of ``types``; ValueError naming the argument at fault (checked before
    anything is read: a string for ``types`` would be taken letter by letter)."""
    where: list[str] = ["1"]
    args: list[Any] = []
    for name, seq, test in (("start", start, "seq >= ?"), ("upto", upto, "seq < ?")):
        if seq is None:
            continue
        if isinstance(seq, bool) or not isinstance(seq, numbers.Integral):
            raise ValueError(f"{name} must be a record's seq (an int), got {seq!r}")
        where.append(test)
        args.append(int(seq))
    if types is not None:
        if isinstance(types, (str, bytes)):
            raise ValueError(f"types must be a collection of record types, not one string "
                             f"({types!r}): say types=[{types!r}]")
        given = set(types)
        if not all(isinstance(t, str) for t in given):
            raise ValueError("types must be record types (strings), got "
                             f"{sorted(map(repr, given))}")
        wanted = sorted(given)
        where.append(f"type IN ({', '.join('?' * len(wanted))})")
        args += wanted
    return " AND ".join(where), args


class StoredLog:
    """A read-only view of a store: its run row, log, snapshots and delegations as stored.
    :class:`barnraise.actors.stored.run.StoredRun` (what ``barnraise.open_run`` returns) adds what
    folds
    of the log show."""

    def __init__(self, path: str | os.PathLike[str], info: RunInfo | None = None) -> None:
        """``info``: what :func:`check_store` said of ``path`` a moment ago, which spares
        checking the file again (its quick_check reads every page: 20-30 ms at
        100,000 records, which a realtime resume paid twice)."""
        self.path = os.fspath(path)
        self.info = check_store(self.path) if info is None else info
        assert self.info is not None

    def _db(self) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        return reading(self.path)

    @property
    def status(self) -> str:
        """``finished``, ``running`` (a live process holds it) or ``interrupted``."""
        info = check_store(self.path)
        assert info is not None
        if info.status == "finished":
            return "finished"
        return "running" if locked_by_other(self.path) else "interrupted"

    @property
    def summary(self) -> dict[str, Any] | None:
        info = check_store(self.path)
        assert info is not None
        return info.summary if info.status == "finished" else None

    def reported(self) -> tuple[tuple[str, ...], tuple[str, ...], list[Reported]]:
        """The run's own reporters' names, agent reporters' names, and the values they gave
        (:class:`barnraise.sim.metrics.Reported`), as the finished run kept them; empty for
        a run without any, an unfinished one, or a store from before schema 5."""
        with self._db() as db:
            tables = {r[0] for r in db.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'")}
            if "reported" not in tables:
                return (), (), []
            try:
                names = db.execute("SELECT kind, name FROM reporters "
                                   "ORDER BY position").fetchall()
                rows = db.execute("SELECT sample, t, session_id, agent_id, data FROM reported "
                                  "ORDER BY rowid").fetchall()
            except sqlite3.OperationalError as exc:  # a table or a column is missing
                raise StoreError(f"store {self.path!r}: its reporters are not kept as "
                                 f"barnraise keeps them ({exc})") from None
        model, agent = self._reporter_names(names)
        try:
            out = [Reported(int(sample), float(t), str(sid), None if aid is None else str(aid),
                            tuple(msgspec.msgpack.decode(data, type=list[int | float | str])))
                   for sample, t, sid, aid, data in rows]
        except (msgspec.DecodeError, msgspec.ValidationError, TypeError, ValueError) as exc:
            raise StoreError(f"store {self.path!r}: a reporter's values are not what "
                             f"barnraise writes ({exc})") from None
        for r in out:
            wanted = len(agent if r.agent_id is not None else model)
            if len(r.values) != wanted:
                raise StoreError(f"store {self.path!r}: sample {r.sample} holds "
                                 f"{len(r.values)} reporter values, not {wanted}")
        return model, agent, out

    def _reporter_names(self, names: list[tuple[Any, Any]]
                        ) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The model and agent reporters' names, checked as a run's are before it runs
        (:func:`~barnraise.sim.reporters.check_reporters`: no built-in column's name, none
        twice): StoreError naming the store and the name."""
        kinds: dict[str, list[str]] = {"model": [], "agent": []}
        for kind, name in names:
            if kind not in kinds:
                raise StoreError(f"store {self.path!r}: reporter {name!r} is of kind "
                                 f"{kind!r}, not model or agent")
            if name in kinds[kind]:
                raise StoreError(f"store {self.path!r}: the {kind} reporter {name!r} is "
                                 "named twice")
            kinds[kind].append(name)
        try:
            check_reporters(dict.fromkeys(kinds["model"], _stored),
                            dict.fromkeys(kinds["agent"], _stored))
        except ValueError as exc:
            raise StoreError(f"store {self.path!r}: {exc}") from None
        return tuple(kinds["model"]), tuple(kinds["agent"])

    def records(self, start: int = 0, *, types: Iterable[str] | None = None,
                kind: str | None = None) -> Generator[TraceRecord, None, None]:
        """The log's raw trace records from seq ``start`` on, in order; with ``types``,
        only the records of those types, with ``kind`` only those of that kind (``event``
        for the domain events); both filtered in SQL, so a record left out is never
        decoded. ValueError for a ``kind`` that is not a string."""
        where, args = _filters(start, None, types)
        if kind is not None:
            if not isinstance(kind, str):
                raise ValueError(f"kind must be a record kind (a string), got {kind!r}")
            where += " AND kind = ?"
            args.append(kind)
        return (_record(row) for row in self._select(where, args))

    def count(self, kind: str) -> int:
        """How many of the log's records are of ``kind`` (``deliver``, ``drop``...),
        counted in SQL: no record is decoded."""
        with self._db() as db:
            row = db.execute("SELECT COUNT(*) FROM events WHERE kind = ?", (kind,)).fetchone()
        return int(row[0])

    def rows(self, *, types: Iterable[str] | None = None, upto: int | None = None
             ) -> Generator[tuple[int, float, str, str, str, str, bytes, int], None, None]:
        """The log's rows as stored, in order: (seq, t, kind, sender, recipient, type,
        content, packed), a content ``packed`` being zlib-compressed. With ``types``,
        only the records of those types; with ``upto``, only those before that seq
        (both filtered in SQL). For a reader that goes through a whole log and makes
        no record object of most rows (``barnraise.actors.stored.resume.image_of``)."""
        where, args = _filters(None, upto, types)
        return self._select(where, args)

    def _select(self, where: str, args: list[Any]) -> Generator[Any, None, None]:
        with self._db() as db:
            yield from db.execute(f"SELECT {_COLUMNS} FROM events WHERE {where} ORDER BY seq",
                                  args)

    def last(self) -> TraceRecord | None:
        """The log's last record (None: an empty log)."""
        with self._db() as db:
            row = db.execute(f"SELECT {_COLUMNS} FROM events ORDER BY seq DESC LIMIT 1"
                             ).fetchone()
        return None if row is None else _record(row)

    def entries(self, type: str | None = None, kind: str | None = None
                ) -> list[dict[str, Any]]:
        """The log as dicts (seq, time, kind, sender, recipient, type, content); only the
        records of ``type`` and of ``kind`` (``event`` for the domain events) when given.
        The filters are applied in SQL, so a record left out is never decoded."""
        where, args = ["1"], []
        if type is not None:
            where.append("type = ?")
            args.append(type)
        if kind is not None:
            where.append("kind = ?")
            args.append(kind)
        with self._db() as db:
            rows = db.execute(f"SELECT {_COLUMNS} FROM events WHERE {' AND '.join(where)} "
                              "ORDER BY seq", args).fetchall()
        out = []
        for row in rows:
            r = _record(row)
            out.append({"seq": r.seq, "time": r.t, "kind": r.kind, "sender": r.sender,
                        "recipient": r.recipient, "type": r.type, "content": r.content_obj()})
        return out

    def snapshots(self) -> list[tuple[int, float]]:
        """(seq, time) of every snapshot: the world after records 0..seq-1."""
        with self._db() as db:
            return [(r[0], r[1]) for r in db.execute("SELECT seq, t FROM snapshots ORDER BY seq")]

    def snapshot(self, seq: int | None = None, at: float | None = None) -> Any:
        """The world of the snapshot at record ``seq`` exactly, or the last one taken at or
        before simulated time ``at``, or the last one; None when there is none."""
        with self._db() as db:
            if seq is not None:
                row = db.execute("SELECT data FROM snapshots WHERE seq = ?", (seq,)).fetchone()
            elif at is not None:
                row = db.execute("SELECT data FROM snapshots WHERE t <= ? ORDER BY seq DESC "
                                 "LIMIT 1", (at,)).fetchone()
            else:
                row = db.execute("SELECT data FROM snapshots ORDER BY seq DESC LIMIT 1"
                                 ).fetchone()
        return None if row is None else read_snapshot(bytes(row[0]))

    def delegation_rows(self) -> list[dict[str, Any]]:
        """One dict per task the run delegated: task_id, session_id, delegator,
        delegatee, type, status, result (the last task event's body), delivered_at (when
        its ``task_result`` letter reached the delegator, or, for a result the stopped run
        had not delivered, when the resumed delegator read it from the task queue; None
        if neither happened: still open, or a delegator outside the run)."""
        with self._db() as db:
            cursor = db.execute("SELECT task_id, session_id, delegator, delegatee, type, status, "
                                "result, delivered_at FROM delegations ORDER BY created_seq")
            names = [d[0] for d in cursor.description]
            rows = [dict(zip(names, row, strict=True)) for row in cursor]
        for row in rows:
            row["result"] = None if row["result"] is None else json.loads(row["result"])
        return rows

    def compare(self, trace: Trace) -> Divergence | None:
        """The first record where ``trace`` differs from the stored log (None: it
        reproduces it); for a finished run, a trace longer than the log differs too."""
        with self._db() as db:
            count = db.execute("SELECT count(*) FROM events").fetchone()[0]
            divergence = first_difference(db, trace, 0, count)
        if divergence is None and self.info is not None and \
                self.info.status == "finished" and len(trace) > count:
            divergence = Divergence(count, None, TraceRecord(count, *trace.shown_from(
                count, count + 1)[0]))
        return divergence

    def digest(self) -> str:
        """The trace digest of the stored log (equal to the run's ``trace_digest``)."""
        trace = Trace()
        for r in self.records():
            trace.add_record((r.t, r.kind, r.sender, r.recipient, r.type, r.content))
        return trace.digest
