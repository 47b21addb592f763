"""The writer of one run's store: the log, snapshots, delegations and commit digests.

**Acknowledged means durable.** :meth:`Store.commit` writes every record not yet
written in one transaction (a group commit). The services call it, through
``Dispatcher.make_durable``, before they send the answer of an agent's tool
call: the answer reaches its caller only once everything the call changed is
committed.

**Resume.** :meth:`Store.resume` opens an interrupted store for appending: a
re-execution's first records are checked against the stored ones
(:class:`barnraise.sim.store.divergence.ResumeCheck`), and records past the stored end are
appended.

**Snapshots.** Every ``snapshot_every`` records (a parameter of :meth:`Store.create`
and :meth:`Store.resume`; :data:`SNAPSHOT_EVERY` unless given) the world is kept,
when a snapshotter is set. The crash tests kill a run in the middle of a transaction
from outside the library (``tests/crashing.py``); nothing here knows of them.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sqlite3
import threading
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import msgspec

from barnraise.sim.events import status_after
from barnraise.sim.log import decode
from barnraise.sim.metrics import Reported
from barnraise.sim.record import DELEGATION_EVENTS
from barnraise.sim.store.divergence import Divergence, ResumeCheck
from barnraise.sim.store.files import RunInfo, StoreError, check_store
from barnraise.sim.store.migrations import fresh_image, migrate
from barnraise.sim.trace import DELIVER, EVENT, Trace, TraceRecord

__all__ = ["GROUP_RECORDS", "GROUP_SECONDS", "PACK_OVER", "SNAPSHOT_EVERY", "Store"]

#: Records between two snapshots (deterministic mode), unless a store is given its own.
SNAPSHOT_EVERY: Final = 10_000
#: Group commit for answers to in-process agents: at most this many wall seconds or
#: records between two commits (answers to outside participants commit at once). 10 ms,
#: not 5: once the run itself got a quarter faster (2026-11-26), a commit every 5 ms put
#: kernel_build's durable CPU ratio at 1.42; every 10 ms, 1.32 (a commit costs ~0.3 ms).
GROUP_SECONDS: Final = 0.010
GROUP_RECORDS: Final = 2000
#: A record content longer than this is kept zlib-compressed (``packed`` = 1).
PACK_OVER: Final = 4096


def _interval(snapshot_every: Any) -> int:
    """``snapshot_every`` if it is a positive int; ValueError naming it otherwise."""
    if type(snapshot_every) is not int or snapshot_every < 1:
        raise ValueError("snapshot_every must be a positive int (records between two "
                         f"snapshots), got {snapshot_every!r}")
    return snapshot_every


def _write_image(name: str, fd: int, image: bytes) -> None:
    """Put a new store's first bytes in the file ``fd`` (just created, locked) and sync
    them: from here on the file is a whole store, a power cut included."""
    try:
        if os.fstat(fd).st_size:
            raise StoreError(f"store {name!r} appeared while this run was creating it; "
                             "run again (with --overwrite to replace it)")
        view = memoryview(image)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    except BaseException as exc:
        os.close(fd)
        if isinstance(exc, StoreError):
            raise
        with contextlib.suppress(OSError):  # the file was new, and is no store: remove it
            os.unlink(name)
        if isinstance(exc, OSError):
            raise StoreError(f"store {name!r}: cannot write it ({exc.strerror or exc})"
                             ) from None
        raise


class Store:
    """The writer of one run's store (one per process; see the module docstring)."""

    def __init__(self, path: str, db: sqlite3.Connection, lock_fd: int, written: int,
                 expected: int) -> None:
        self.path = path
        self._db = db
        self._lock_fd = lock_fd
        self._lock = threading.Lock()
        self._trace: Trace | None = None
        #: Records of the trace already written (or checked against the stored log).
        self.written = written
        #: Stored records a resumed run must reproduce before it appends.
        self.expected = expected
        #: The first record where a resumed run differed from the log (then nothing more
        #: is written).
        self.divergence: Divergence | None = None
        #: A realtime resume's trace starts after the stored log: its record i is stored
        #: as seq ``offset + i`` (see :meth:`continue_after`).
        self.offset = 0
        #: ``time.perf_counter()`` when a resumed run reached live state: a deterministic
        #: one when its last stored record was reproduced (set by :meth:`commit`), a
        #: realtime one when its world was restored (set by the runner). None before.
        self.live_at: float | None = None
        #: Keep the trace digest of every commit (a deterministic run: one thread writes
        #: the trace, so its incremental hash can follow the commits).
        self.keep_digests = False
        #: A resumed run's records checked against the stored log.
        self._resume_check = ResumeCheck(db)
        #: Records between two snapshots (taken when a snapshotter is set); set by
        #: :meth:`create` and :meth:`resume`.
        self.snapshot_every = SNAPSHOT_EVERY
        self._since_snapshot = 0
        self.snapshotter: Callable[[], Any] | None = None
        self.commits = 0
        self.snapshots = 0
        #: Agents outside the process's crew (a Simulation's clients): an answer to one
        #: waits for its commit; answers to in-process agents are group-committed.
        self.outside: set[str] = set()
        self.group_seconds = GROUP_SECONDS
        self.group_records = GROUP_RECORDS
        self._last_commit = time.perf_counter()
        self.closed = False

    # -- opening -----------------------------------------------------------------------

    @classmethod
    def create(cls, path: str | os.PathLike[str], *, seed: int, mode: str,
               scenario: str | None = None, params: dict[str, Any] | None = None,
               options: dict[str, Any] | None = None, version: str = "",
               overwrite: bool = False, script_sha256: str | None = None,
               snapshot_every: int = SNAPSHOT_EVERY) -> Store:
        """A new store at ``path`` for a run about to start.

        ``snapshot_every``: records between two snapshots of the world (a positive int;
        ValueError otherwise, before anything is opened).

        ``script_sha256``: the run's scenario is a file (``scenario`` its path), and this
        is the SHA-256 of what was loaded from it (see docs/store.md, "Which code runs").

        An existing store is refused (StoreError) unless ``overwrite``: one that
        holds a finished or interrupted run, or one a live run holds (always).
        A file that is not a store is refused even with ``overwrite``.
        """
        name = os.fspath(path)
        _interval(snapshot_every)
        info = check_store(name, must_exist=False, writing=True)
        if info is not None and not overwrite:
            what = "a finished run" if info.status == "finished" else "an unfinished run " \
                "(barnraise resume continues it)"
            raise StoreError(f"store {name!r} already holds {what}; pass --overwrite "
                             "(overwrite=True) to replace it")
        now = time.time()
        row = (scenario, json.dumps(params or {}, sort_keys=True), seed, mode, version,
               json.dumps(options or {}, sort_keys=True), now, now, script_sha256)
        if info is None:
            store = cls._open(name, image=fresh_image(row))
        else:
            store = cls._open(name)
            with store._db as db:
                for table in ("run", "events", "snapshots", "delegations", "digests",
                              "reporters", "reported"):
                    db.execute(f"DELETE FROM {table}")
                db.execute("INSERT INTO run VALUES (1, ?, ?, ?, ?, ?, ?, 'running', NULL, NULL, "
                           "?, ?, ?)", row)
        store.keep_digests = mode == "deterministic"
        store.snapshot_every = snapshot_every
        return store

    @classmethod
    def resume(cls, path: str | os.PathLike[str], info: RunInfo | None = None, *,
               snapshot_every: int = SNAPSHOT_EVERY) -> tuple[Store, RunInfo]:
        """The store of an interrupted run, opened to be re-executed and continued.

        ``info``: what :func:`check_store` said of it a moment ago (the caller checked it
        already; the lock is taken and tested here in any case). ``snapshot_every``: as
        for :meth:`create`."""
        name = os.fspath(path)
        _interval(snapshot_every)
        if info is None:
            info = check_store(name, writing=True)
        assert info is not None
        if info.status == "finished":
            raise StoreError(f"store {name!r} holds a finished run: nothing to resume "
                             "(barnraise replay checks it)")
        store = cls._open(name)
        db = store._db
        count = db.execute("SELECT max(seq) + 1 FROM events").fetchone()[0] or 0
        store.expected = count
        if count == 0:  # nothing to reproduce: live from the start
            store.live_at = time.perf_counter()
        store.keep_digests = info.mode == "deterministic"
        store.snapshot_every = snapshot_every
        if store.keep_digests:
            store._resume_check.expect(db.execute(
                "SELECT seq, digest FROM digests WHERE seq <= ? ORDER BY seq", (count,)))
        return store, info

    def continue_after(self) -> None:
        """A realtime resume: nothing is re-executed, the new trace's records go after the
        stored ones (seq numbers on from the log's end)."""
        self.offset, self.expected = self.expected, 0

    @classmethod
    def _open(cls, name: str, image: bytes | None = None) -> Store:
        """Open ``name`` for writing and hold its lock; ``image``: the file is new (there
        was none), and these are its first bytes (:func:`fresh_image`)."""
        try:
            fd = os.open(name, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise StoreError(f"store {name!r}: cannot open it for writing "
                             f"({exc.strerror or exc})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise StoreError(f"store {name!r} is held by another live run") from None
        if image is not None:
            # A new store: any -wal, -shm or -journal file beside it is a stale one of
            # a deleted store of the same name, and SQLite would replay its frames into
            # this one (a mixed, broken log). Nobody holds it: the lock is the file's.
            for stale in ("-wal", "-shm", "-journal"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(name + stale)
            _write_image(name, fd, image)
        try:
            db = sqlite3.connect(name, check_same_thread=False, isolation_level=None,
                                 timeout=5.0)
            if image is None:
                db.execute("PRAGMA journal_mode = WAL")
            db.execute("PRAGMA synchronous = NORMAL")
            if image is None:
                migrate(db)
            elif db.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                raise sqlite3.DatabaseError("the new store did not open in WAL mode")
        except sqlite3.DatabaseError as exc:
            os.close(fd)
            raise StoreError(f"store {name!r} cannot be opened for writing ({exc})") from None
        db.isolation_level = "DEFERRED"
        return cls(name, db, fd, 0, 0)

    # -- writing -----------------------------------------------------------------------

    def attach(self, trace: Trace) -> None:
        """Keep ``trace``'s records in the store from now on (from its first record)."""
        self._trace = trace

    def acknowledge(self, caller: str) -> None:
        """About to answer ``caller``'s tool call: commit now if the caller is outside
        (:attr:`outside`) or the group is due (``group_seconds`` since the last commit,
        or ``group_records`` records waiting; while a resumed run is still checked
        against the stored log, ``group_records`` only)."""
        trace = self._trace
        if trace is None:
            return
        if caller in self.outside or len(trace) - self.written >= self.group_records:
            self.commit(whole=False)
        elif len(trace) <= self.expected:
            # A resumed run still reproducing the stored log: everything its crew has
            # heard is already committed (to be checked), so the check waits for a
            # bigger group.
            return
        elif time.perf_counter() - self._last_commit >= self.group_seconds:
            self.commit(whole=False)

    def commit(self, *, whole: bool = True) -> None:
        """Write every record the trace gained since the last commit, in one transaction.

        In a resumed run the records the log already holds are checked instead
        (:meth:`_check`); with ``whole`` false the check may stop at the end of the
        last stored commit it reached, and the records after it wait for the next
        commit. A snapshot is taken (when a snapshotter is set) every
        ``snapshot_every`` records.
        """
        trace = self._trace
        if trace is None or self.closed:
            return
        with self._lock:
            start, end = self.written, len(trace)
            if end <= start or self.divergence is not None:
                return
            if start < self.expected:
                stored_end = min(end, self.expected)
                checked, self.divergence = self._resume_check.check(
                    trace, start, stored_end, whole or end >= self.expected)
                if self.divergence is not None:
                    return
                self._since_snapshot += checked - start
                if checked < stored_end:  # stopped at a stored commit's end; the rest waits
                    self.written = checked
                    return
                start = checked
                if start >= self.expected:  # every stored record reproduced: live from here
                    self.live_at = time.perf_counter()
            if start < end:
                raws = trace.shown_from(start, end)
                first = start + self.offset
                db = self._db
                with db:
                    db.executemany("INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?, ?)", [
                        (seq, t, kind, sender, recipient, type_, content, 0)
                        if len(content) <= PACK_OVER else
                        (seq, t, kind, sender, recipient, type_, zlib.compress(content, 1), 1)
                        for seq, (t, kind, sender, recipient, type_, content)
                        in enumerate(raws, first)])
                    self._delegations(db, [
                        TraceRecord(seq, *raw) for seq, raw in enumerate(raws, first)
                        if (raw[1] == EVENT and raw[4] in DELEGATION_EVENTS)
                        or (raw[4] == "task_result" and raw[1] == DELIVER)])
                    if self.keep_digests:
                        db.execute("INSERT INTO digests VALUES (?, ?)",
                                   (end + self.offset, trace.digest_at(end)))
                    self._since_snapshot += end - start
                    if self.snapshotter is not None and \
                            self._since_snapshot >= self.snapshot_every:
                        self._snapshot(db, end + self.offset, raws[-1][0])
                self.commits += 1
            self.written = end
            self._last_commit = time.perf_counter()

    def _snapshot(self, db: sqlite3.Connection, seq: int, t: float) -> None:
        """Keep the world as it is after record ``seq - 1`` (recorded at time ``t``)."""
        assert self.snapshotter is not None
        world = self.snapshotter()
        if world is None:
            return
        blob = zlib.compress(msgspec.msgpack.encode(world), 1)
        db.execute("INSERT OR REPLACE INTO snapshots VALUES (?, ?, ?)", (seq, t, blob))
        self.snapshots += 1
        self._since_snapshot = 0

    @staticmethod
    def _delegations(db: sqlite3.Connection, records: list[TraceRecord]) -> None:
        """Keep the delegations table up to date with ``records`` (the task events, and the
        ``task_result`` letters delivered to delegators, or the results a restarted
        delegator read from the queue instead: ``delivered_at``, the first of them)."""
        for r in records:
            body = decode(r.content)
            task = body.get("task_id")
            if r.kind == DELIVER or r.type == "task_result_read":  # it reached its delegator
                db.execute("UPDATE delegations SET delivered_at = ? WHERE task_id = ? AND "
                           "delivered_at IS NULL", (r.t, task))
            elif r.type == "task_created":
                db.execute("INSERT OR IGNORE INTO delegations VALUES (?, ?, ?, ?, ?, ?, NULL, ?, "
                           "NULL)", (task, body.get("session_id"), body.get("delegated_by"),
                                     body.get("assigned_to"), body.get("type"),
                                     status_after(body), r.seq))
            elif r.type == "task_accepted":
                db.execute("UPDATE delegations SET status = ?, delegatee = ? WHERE task_id = ?",
                           (status_after(body), body.get("agent_id"), task))
            else:
                status = status_after(body)
                db.execute("UPDATE delegations SET status = ?, result = ? WHERE task_id = ?",
                           (status, json.dumps(body, sort_keys=True), task))

    def snapshot_now(self) -> None:
        """Commit, then take a snapshot of the world as it is now."""
        self.commit()
        if self.snapshotter is None or self._trace is None or self.divergence is not None:
            return
        with self._lock:
            last = self._trace.shown_from(max(0, self.written - 1), self.written)
            with self._db as db:
                self._snapshot(db, self.written + self.offset, last[-1][0] if last else 0.0)

    def finish(self, summary: Mapping[str, Any], trace_digest: str, world: Any = None, *,
               reporters: Sequence[str] = (), agent_reporters: Sequence[str] = (),
               reported: Sequence[Reported] = ()) -> None:
        """Mark the run finished, with its summary (after a last commit) and, when given,
        a last snapshot of its ``world``, and the names and values of its own reporters
        (:class:`barnraise.sim.metrics.Reported`), in the same transaction."""
        self.commit()
        with self._lock, self._db as db:
            if reporters or agent_reporters:
                # A resumed run recorded every sample again: its values replace the old.
                db.execute("DELETE FROM reporters")
                db.execute("DELETE FROM reported")
                db.executemany("INSERT INTO reporters VALUES (?, ?, ?)", [
                    (i, kind, name) for i, (kind, name) in enumerate(
                        [("model", n) for n in reporters]
                        + [("agent", n) for n in agent_reporters])])
                db.executemany("INSERT INTO reported VALUES (?, ?, ?, ?, ?)", [
                    (r.sample, r.t, r.session_id, r.agent_id,
                     msgspec.msgpack.encode(r.values)) for r in reported])
            if world is not None:
                blob = zlib.compress(msgspec.msgpack.encode(world), 1)
                t = summary.get("virtual_time", 0.0)
                db.execute("INSERT OR REPLACE INTO snapshots VALUES (?, ?, ?)",
                           (self.written + self.offset, t, blob))
                self.snapshots += 1
            db.execute("UPDATE run SET status = 'finished', summary = ?, trace_digest = ?, "
                       "updated_at = ? WHERE id = 1",
                       (json.dumps(summary, sort_keys=True), trace_digest, time.time()))

    def close(self) -> None:
        """Commit what is left and let go of the file (a run not finished stays
        ``running`` in the file, which readers see as interrupted)."""
        if self.closed:
            return
        self.commit()
        with self._lock:
            self.closed = True
            self._db.close()
            os.close(self._lock_fd)

