"""The durable store of one run: a SQLite file holding its log, snapshots and delegations.

One file per run, on the standard library's :mod:`sqlite3`, in WAL mode with
``synchronous=NORMAL`` (see docs/store.md for what that promises). The schema's
version is ``PRAGMA user_version``; :data:`MIGRATIONS` brings an older store up to
:data:`SCHEMA_VERSION` (in one transaction) and the ``migrations`` table says which
steps ran. A new store is written as one image (:func:`_fresh_image`: schema and run
row, already in WAL mode) and synced once. Tables:

* ``run``: one row (scenario, params, seed, mode, barnraise version, status,
  summary and trace digest once finished);
* ``events``: the append-only log, one row per trace record, ``seq`` being the
  record's place in the trace (deliveries with their content, so every tool call
  and its answer, domain events, drops and errors);
* ``snapshots``: every ``snapshot_every`` records (deterministic mode), a
  zlib-compressed msgpack of the world (canvas bytes, members, claims, tasks);
* ``delegations``: one row per task, kept from the task events (delegator,
  delegatee, status, result, when the result was delivered);
* ``digests`` (deterministic mode): after each commit, the number of records then
  in the log and the trace digest over them (SHA-256, as ``trace_digest``).

**Acknowledged means durable.** :meth:`Store.commit` writes every record not yet
written in one transaction (a group commit). The services call it, through
``Dispatcher.make_durable``, before they send the answer of an agent's tool
call: the answer reaches its caller only once everything the call changed is
committed.

**Resume.** :meth:`Store.resume` opens an interrupted store for appending: a
re-execution's first records are checked against the stored ones, every record,
and records past the stored end are appended. The check goes by the ``digests``
rows: the re-execution's digest at each stored commit's end must equal the stored
one (equal digests over equal-length prefixes mean equal records); only the records
of a commit whose digest differs, or that no digest covers (an older store), are
compared row by row, to name the first that differs (:attr:`Store.divergence`).

**Snapshots.** ``BARNRAISE_STORE_SNAPSHOT_EVERY=N`` takes a snapshot every N records
instead of :data:`SNAPSHOT_EVERY`. (The crash tests kill a run in the middle of a
transaction from outside the library: ``tests/crashing.py``.)

**Bad input.** :func:`check_store` reads a path (with ``mode=ro``, nothing
written, and the ``-wal``/``-shm`` files its own open made removed: :func:`_reading`)
and raises :class:`StoreError` naming what is wrong: a path that is not a regular
file (a directory, a FIFO: refused from its stat, never opened), an empty file, a
file that is not SQLite, a damaged or truncated database, one of a newer schema, a
database that is not a barnraise store, a run row that is not what barnraise writes
(:func:`_run_info`), a log that is not whole and in order (:func:`_check_log`, which
``replay`` and ``resume`` share through this function), a store another live
process holds (an ``flock`` held for the writer's whole life, which the kernel
drops when that process dies however it dies).
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import json
import numbers
import os
import re
import sqlite3
import stat
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable, Generator, Iterable, Mapping
from typing import Any, Final

import msgspec

from sim.events import status_after
from sim.log import decode
from sim.record import DELEGATION_EVENTS
from sim.trace import DELIVER, EVENT, Trace, TraceRecord

__all__ = ["SCHEMA_VERSION", "Divergence", "RunInfo", "Store", "StoreError", "StoredLog",
           "check_store", "read_snapshot"]

SCHEMA_VERSION: Final = 4
#: Records between two snapshots (deterministic mode).
SNAPSHOT_EVERY: Final = 10_000
#: Group commit for answers to in-process agents: at most this many wall seconds or
#: records between two commits (answers to outside participants commit at once). 10 ms,
#: not 5: once the run itself got a quarter faster (2026-11-26), a commit every 5 ms put
#: kernel_build's durable CPU ratio at 1.42; every 10 ms, 1.32 (a commit costs ~0.3 ms).
GROUP_SECONDS: Final = 0.010
GROUP_RECORDS: Final = 2000
#: A record content longer than this is kept zlib-compressed (``packed`` = 1).
PACK_OVER: Final = 4096
_HEADER: Final = b"SQLite format 3\x00"
#: ASCII digits (``str.isdigit`` takes superscripts, which ``int()`` refuses).
_DIGITS: Final = re.compile(r"[0-9]+")

#: version -> (what it does, its statements), applied in order from user_version + 1.
MIGRATIONS: Final[dict[int, tuple[str, tuple[str, ...]]]] = {
    1: ("the first schema: run, events, snapshots, delegations", (
        "CREATE TABLE IF NOT EXISTS migrations (version INTEGER PRIMARY KEY, "
        "description TEXT NOT NULL, applied_at REAL NOT NULL)",
        "CREATE TABLE run (id INTEGER PRIMARY KEY CHECK (id = 1), scenario TEXT, "
        "params TEXT NOT NULL, seed INTEGER NOT NULL, mode TEXT NOT NULL, "
        "version TEXT NOT NULL, options TEXT NOT NULL, status TEXT NOT NULL, "
        "summary TEXT, trace_digest TEXT, created_at REAL NOT NULL, updated_at REAL NOT NULL)",
        "CREATE TABLE events (seq INTEGER PRIMARY KEY, t REAL NOT NULL, kind TEXT NOT NULL, "
        "sender TEXT NOT NULL, recipient TEXT NOT NULL, type TEXT NOT NULL, "
        "content BLOB NOT NULL, packed INTEGER NOT NULL DEFAULT 0)",
        "CREATE INDEX events_type ON events (type)",
        "CREATE TABLE snapshots (seq INTEGER PRIMARY KEY, t REAL NOT NULL, "
        "data BLOB NOT NULL)",
        "CREATE TABLE delegations (task_id TEXT PRIMARY KEY, session_id TEXT, "
        "delegator TEXT, delegatee TEXT, type TEXT, status TEXT NOT NULL, result TEXT, "
        "created_seq INTEGER NOT NULL, delivered_at REAL)",
    )),
    2: ("no index on events(type): nothing reads the log through it, and every record "
        "paid an insert into it", (
            "DROP INDEX IF EXISTS events_type",
        )),
    3: ("digests: the trace digest at the end of every commit of a deterministic run, so "
        "that a resume checks its re-execution a digest per commit, not row by row", (
            "CREATE TABLE digests (seq INTEGER PRIMARY KEY, digest TEXT NOT NULL)",
        )),
    4: ("run.script_sha256: the SHA-256 of the scenario file a run was made from, so that "
        "resume, replay and view run that file again only when the user names it and it "
        "is the same file", (
            "ALTER TABLE run ADD COLUMN script_sha256 TEXT",
        )),
}


class StoreError(Exception):
    """A path that cannot be used as a store, and why (one line)."""


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


class RunInfo(msgspec.Struct, frozen=True):
    scenario: str | None
    params: dict[str, Any]
    seed: int
    mode: str
    version: str
    options: dict[str, Any]
    status: str
    summary: dict[str, Any] | None
    trace_digest: str | None
    #: The SHA-256 (hex) of the scenario file the run was made from; None for a run of an
    #: installed scenario, of no scenario, or made before schema 4 kept it.
    script_sha256: str | None = None
    #: The store's schema version when it was read (before any migration).
    schema: int = SCHEMA_VERSION


def _ro(path: str) -> sqlite3.Connection:
    uri = "file:" + os.path.abspath(path).replace("?", "%3f").replace("#", "%23") + "?mode=ro"
    return sqlite3.connect(uri, uri=True, timeout=5.0)


@contextlib.contextmanager
def _reading(path: str) -> Generator[sqlite3.Connection, None, None]:
    """A read-only connection to the store at ``path`` that leaves the folder as it found it.

    Opening a WAL database read-only makes SQLite create its ``-wal`` and ``-shm`` files
    when they are missing, and a read-only connection cannot checkpoint, so it never
    removes them: every check left two files beside the store. When this open made them
    (neither was there before) and no live writer holds the store (its flock), they are
    removed once the connection is closed; the ``-wal`` must be empty (a reader writes
    nothing to it). A live writer's are its own and stay. Readers of one path in this
    process (the view's threads) are counted: the last to close removes what the first
    one's open made, so none has them removed from under its open connection.
    """
    key = os.path.abspath(path)
    with _READERS_LOCK:
        count, made = _READERS.get(key, (0, False))
        if count == 0:
            made = not (os.path.exists(path + "-wal") or os.path.exists(path + "-shm"))
        _READERS[key] = (count + 1, made)
    try:
        db = _ro(path)
    except BaseException:
        _reader_done(key, path)
        raise
    try:
        yield db
    finally:
        db.close()
        _reader_done(key, path)


#: Open read-only connections by store path in this process: (how many, whether the
#: first one's open made the -wal and -shm files). See :func:`_reading`.
_READERS: dict[str, tuple[int, bool]] = {}
_READERS_LOCK = threading.Lock()


def _reader_done(key: str, path: str) -> None:
    with _READERS_LOCK:
        count, made = _READERS.pop(key)
        if count > 1:
            _READERS[key] = (count - 1, made)
        elif made:
            _remove_reader_files(path)


def _remove_reader_files(path: str) -> None:
    """Remove the ``-wal`` (empty) and ``-shm`` a reader's open made beside ``path``, unless
    a live writer holds it (then they are the writer's)."""
    try:
        if os.path.getsize(path + "-wal") != 0:
            return
    except OSError:
        pass
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return  # a live writer holds it: its files
        try:
            for extra in ("-wal", "-shm"):
                with contextlib.suppress(OSError):  # gone already, or not ours to remove
                    if extra == "-wal" and os.path.getsize(path + extra) != 0:
                        continue
                    os.unlink(path + extra)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _locked_by_other(path: str) -> bool:
    """True when a live writer holds ``path`` (its flock); probes without writing."""
    fd = os.open(path, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def check_store(path: str | os.PathLike[str], *, must_exist: bool = True,
                writing: bool = False) -> RunInfo | None:
    """What the store at ``path`` holds (None when there is no file and ``must_exist`` is
    false); StoreError names what is wrong. Reads only, with ``mode=ro``.

    ``writing``: the caller means to write, so a store another live process
    holds is an error (a reader may read one).
    """
    name = os.fspath(path)
    try:
        mode = os.stat(name).st_mode
    except FileNotFoundError:
        if must_exist:
            raise StoreError(f"store {name!r}: no such file") from None
        return None
    except OSError as exc:
        raise StoreError(f"store {name!r}: cannot read it ({exc.strerror or exc})") from None
    if stat.S_ISDIR(mode):
        raise StoreError(f"store {name!r} is a directory, not a barnraise store file")
    if not stat.S_ISREG(mode):
        # A FIFO would block the open below until someone writes to it; a device is
        # no store either. Refused from its stat, without opening it.
        raise StoreError(f"store {name!r} is not a regular file (a FIFO, socket or device), "
                         "not a barnraise store")
    try:
        # O_NONBLOCK: should the path have become a FIFO since the stat, the open does
        # not wait for a writer (and the read finds no SQLite header).
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as handle:
            head = handle.read(len(_HEADER))
    except OSError as exc:
        raise StoreError(f"store {name!r}: cannot read it ({exc.strerror or exc})") from None
    if not head:
        raise StoreError(f"store {name!r} is an empty file, not a barnraise store")
    if head != _HEADER:
        raise StoreError(f"store {name!r} is not a barnraise store (not an SQLite database)")
    if writing and _locked_by_other(name):
        raise StoreError(f"store {name!r} is held by another live run")
    try:
        with _reading(name) as db:
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise StoreError(f"store {name!r} has schema version {version}, newer than "
                                 f"this barnraise reads ({SCHEMA_VERSION}); upgrade barnraise")
            # Read through a memory map: the check reads every page, a third faster so
            # (the file is as it is now; nothing here writes or truncates it).
            db.execute("PRAGMA mmap_size = 1073741824")
            check = db.execute("PRAGMA quick_check").fetchone()[0]
            if check != "ok":
                raise StoreError(f"store {name!r} is damaged ({check})")
            tables = {r[0] for r in db.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'")}
            if version < 1 or not {"run", "events"} <= tables:
                raise StoreError(f"store {name!r} is an SQLite database but not a barnraise "
                                 "store")
            info = _run_info(db, name, version)
            _check_log(db, name, "digests" in tables)
            return info
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"store {name!r} is damaged or truncated ({exc})") from None


def _run_info(db: sqlite3.Connection, name: str, version: int = SCHEMA_VERSION) -> RunInfo:
    """The run row, every field checked: StoreError names the first that is not what a
    barnraise store holds (a row edited by hand, say)."""
    sha = "script_sha256" if version >= 4 else "NULL"
    row = db.execute("SELECT scenario, params, seed, mode, version, options, status, summary, "
                     f"trace_digest, {sha} FROM run WHERE id = 1").fetchone()
    if row is None:
        raise StoreError(f"store {name!r} holds no run")
    scenario, params, seed, mode, made_by, options, status, summary, digest, script = row

    def bad(field: str, what: str) -> StoreError:
        return StoreError(f"store {name!r}: its run.{field} is {what}, not what barnraise "
                          "writes there")

    def obj(field: str, text: Any, optional: bool = False) -> dict[str, Any] | None:
        if text is None and optional:
            return None
        if not isinstance(text, str):
            raise bad(field, f"not JSON text ({type(text).__name__})")
        try:
            value = json.loads(text)
        except ValueError:
            raise bad(field, f"not JSON ({text[:40]!r})") from None
        if not isinstance(value, dict):
            raise bad(field, f"not a JSON object ({text[:40]!r})")
        return value

    if scenario is not None and (not isinstance(scenario, str) or not scenario):
        raise bad("scenario", repr(scenario)[:60])
    if type(seed) is not int or seed < 0:
        raise bad("seed", repr(seed)[:60])
    if mode not in ("deterministic", "realtime"):
        raise bad("mode", repr(mode)[:60])
    if status not in ("running", "finished"):
        raise bad("status", repr(status)[:60])
    if not isinstance(made_by, str):
        raise bad("version", repr(made_by)[:60])
    if digest is not None and not isinstance(digest, str):
        raise bad("trace_digest", repr(digest)[:60])
    if script is not None and (not isinstance(script, str) or
                               not re.fullmatch(r"[0-9a-f]{64}", script)):
        raise bad("script_sha256", repr(script)[:60])
    checked_params = obj("params", params)
    checked_options = obj("options", options)
    assert checked_params is not None and checked_options is not None
    return RunInfo(scenario, checked_params, seed, mode, made_by, checked_options, status,
                   obj("summary", summary, optional=True), digest, script, version)


def _check_log(db: sqlite3.Connection, name: str, digests: bool) -> None:
    """Refuse a log that is not whole and in order: its records must be seq 0, 1, ... with
    no gap, and no commit digest (nor snapshot) may stand past its last record. Both
    ``replay`` and ``resume`` read a store through :func:`check_store`, so they agree on
    what it holds; a resume appends nothing to a log this refuses.

    One statement, so one read transaction: a live writer's commit between two reads
    cannot make a whole log look broken. ``seq`` is the primary key: min and max are
    a look-up each, the count one pass over the key."""
    past = "(SELECT max(seq) FROM digests)" if digests else "NULL"
    count, first, last, digest_end, snapshot_end = db.execute(
        f"SELECT (SELECT count(*) FROM events), (SELECT min(seq) FROM events), "
        f"(SELECT max(seq) FROM events), {past}, (SELECT max(seq) FROM snapshots)"
    ).fetchone()
    if count and (first != 0 or last != count - 1):
        raise StoreError(f"store {name!r}: its log is not whole and in order ({count:,} "
                         f"records numbered {first} to {last}; a log is numbered from 0 "
                         "without gaps)")
    for what, end in (("commit digest", digest_end), ("snapshot", snapshot_end)):
        if end is not None and end > count:
            raise StoreError(f"store {name!r}: a {what} stands at record {end}, past the "
                             f"log's end ({count:,} records): records were removed")


def _migrate(db: sqlite3.Connection) -> None:
    """Bring ``db`` (in autocommit mode) up to :data:`SCHEMA_VERSION`, every step of it in
    one transaction: a crash leaves the old version or the new one, never half of it."""
    version = db.execute("PRAGMA user_version").fetchone()[0]
    if version >= SCHEMA_VERSION:
        return
    db.execute("BEGIN IMMEDIATE")
    try:
        for step in range(version + 1, SCHEMA_VERSION + 1):
            description, statements = MIGRATIONS[step]
            for statement in statements:
                db.execute(statement)
            db.execute("INSERT INTO migrations VALUES (?, ?, ?)", (step, description, time.time()))
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def _fresh_image(run: tuple[Any, ...]) -> bytes:
    """The bytes of a new store holding ``run`` (the run row's values after its id): the
    schema, every migration and the row, built in memory and marked as a WAL database.

    Written to the new file in one go (and one fsync), it spares the file the
    rollback-journal transaction that switching a new database to WAL costs (four
    syncs) and one transaction per table: creating a store was a third of the cost
    of storing a short run.
    """
    mem = sqlite3.connect(":memory:", isolation_level=None)
    try:
        _migrate(mem)
        mem.execute("INSERT INTO run VALUES (1, ?, ?, ?, ?, ?, ?, 'running', NULL, NULL, ?, ?, ?)",
                    run)
        image = bytearray(mem.serialize())
    finally:
        mem.close()
    # The file format's read and write versions (bytes 18 and 19): 2 is a WAL database,
    # which is what PRAGMA journal_mode = WAL would write there.
    image[18:20] = b"\x02\x02"
    return bytes(image)


def _record(row: Any) -> TraceRecord:
    content = bytes(row[6])
    return TraceRecord(row[0], row[1], row[2], row[3], row[4], row[5],
                       zlib.decompress(content) if row[7] else content)


_COLUMNS: Final = "seq, t, kind, sender, recipient, type, content, packed"


def _first_difference(db: sqlite3.Connection, trace: Trace, start: int, end: int
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


def read_snapshot(blob: bytes) -> Any:
    """A snapshot's world as it was given to the store."""
    return msgspec.msgpack.decode(zlib.decompress(blob))


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
        #: A resumed run's stored commit ends and digests still to check, in order.
        self._stored_digests: deque[tuple[int, str]] = deque()
        every = os.environ.get("BARNRAISE_STORE_SNAPSHOT_EVERY", "")
        self.snapshot_every = int(every) if _DIGITS.fullmatch(every) and int(every) > 0 \
            else SNAPSHOT_EVERY
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
               overwrite: bool = False, script_sha256: str | None = None) -> Store:
        """A new store at ``path`` for a run about to start.

        ``script_sha256``: the run's scenario is a file (``scenario`` its path), and this
        is the SHA-256 of what was loaded from it (see docs/store.md, "Which code runs").

        An existing store is refused (StoreError) unless ``overwrite``: one that
        holds a finished or interrupted run, or one a live run holds (always).
        A file that is not a store is refused even with ``overwrite``.
        """
        name = os.fspath(path)
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
            store = cls._open(name, image=_fresh_image(row))
        else:
            store = cls._open(name)
            with store._db as db:
                for table in ("run", "events", "snapshots", "delegations", "digests"):
                    db.execute(f"DELETE FROM {table}")
                db.execute("INSERT INTO run VALUES (1, ?, ?, ?, ?, ?, ?, 'running', NULL, NULL, "
                           "?, ?, ?)", row)
        store.keep_digests = mode == "deterministic"
        return store

    @classmethod
    def resume(cls, path: str | os.PathLike[str], info: RunInfo | None = None
               ) -> tuple[Store, RunInfo]:
        """The store of an interrupted run, opened to be re-executed and continued.

        ``info``: what :func:`check_store` said of it a moment ago (the caller checked it
        already; the lock is taken and tested here in any case)."""
        name = os.fspath(path)
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
        if store.keep_digests:
            store._stored_digests.extend(db.execute(
                "SELECT seq, digest FROM digests WHERE seq <= ? ORDER BY seq", (count,)))
        return store, info

    def continue_after(self) -> None:
        """A realtime resume: nothing is re-executed, the new trace's records go after the
        stored ones (seq numbers on from the log's end)."""
        self.offset, self.expected = self.expected, 0

    @classmethod
    def _open(cls, name: str, image: bytes | None = None) -> Store:
        """Open ``name`` for writing and hold its lock; ``image``: the file is new (there
        was none), and these are its first bytes (:func:`_fresh_image`)."""
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
                _migrate(db)
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
                checked = self._check(trace, start, stored_end, whole or end >= self.expected)
                if self.divergence is not None:
                    return
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

    def _check(self, trace: Trace, start: int, end: int, whole: bool) -> int:
        """Check the trace's records ``start`` to ``end - 1`` against the stored ones; the
        first that differs becomes :attr:`divergence`. Returns where the check got to:
        ``end`` when ``whole``, else possibly the end of the last stored commit before it.

        A stored commit's digest is compared with the trace's digest at the same record
        (equal digests: equal records up to there); a commit whose digest differs is
        then compared row by row, to find its first record that differs, and so are
        records that no stored digest covers (a store older than the digests, or the
        trace's hash already past them).
        """
        db = self._db
        digests = self._stored_digests
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
                self.divergence = _first_difference(db, trace, checked, seq)
                if self.divergence is not None:
                    return checked
            checked = seq
        if whole and checked < end:
            self.divergence = _first_difference(db, trace, checked, end)
            checked = end
        if self.divergence is None:
            self._since_snapshot += checked - start
        return checked

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

    def finish(self, summary: Mapping[str, Any], trace_digest: str, world: Any = None) -> None:
        """Mark the run finished, with its summary (after a last commit) and, when given,
        a last snapshot of its ``world``."""
        self.commit()
        with self._lock, self._db as db:
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
    :class:`actors.stored.run.StoredRun` (what ``barnraise.open_run`` returns) adds what folds
    of the log show."""

    def __init__(self, path: str | os.PathLike[str], info: RunInfo | None = None) -> None:
        """``info``: what :func:`check_store` said of ``path`` a moment ago, which spares
        checking the file again (its quick_check reads every page: 20-30 ms at
        100,000 records, which a realtime resume paid twice)."""
        self.path = os.fspath(path)
        self.info = check_store(self.path) if info is None else info
        assert self.info is not None

    def _db(self) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        return _reading(self.path)

    @property
    def status(self) -> str:
        """``finished``, ``running`` (a live process holds it) or ``interrupted``."""
        info = check_store(self.path)
        assert info is not None
        if info.status == "finished":
            return "finished"
        return "running" if _locked_by_other(self.path) else "interrupted"

    @property
    def summary(self) -> dict[str, Any] | None:
        info = check_store(self.path)
        assert info is not None
        return info.summary if info.status == "finished" else None

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

    def rows(self, *, types: Iterable[str] | None = None, upto: int | None = None
             ) -> Generator[tuple[int, float, str, str, str, str, bytes, int], None, None]:
        """The log's rows as stored, in order: (seq, t, kind, sender, recipient, type,
        content, packed), a content ``packed`` being zlib-compressed. With ``types``,
        only the records of those types; with ``upto``, only those before that seq
        (both filtered in SQL). For a reader that goes through a whole log and makes
        no record object of most rows (``actors.stored.resume.image_of``)."""
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
            divergence = _first_difference(db, trace, 0, count)
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
