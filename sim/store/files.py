"""A store file: whether it is one, what run it holds, and who holds it.

:func:`check_store` reads a path (with ``mode=ro``, nothing written, and the
``-wal``/``-shm`` files its own open made removed: :func:`reading`) and raises
:class:`StoreError` naming what is wrong: a path that is not a regular file (a
directory, a FIFO: refused from its stat, never opened), an empty file, a file that is
not SQLite, a damaged or truncated database, one of a newer schema, a database that is
not a barnraise store, a run row that is not what barnraise writes (:func:`_run_info`),
a log that is not whole and in order (:func:`_check_log`, which ``replay`` and
``resume`` share through this function), a store another live process holds (an
``flock`` held for the writer's whole life, which the kernel drops when that process
dies however it dies: :func:`locked_by_other`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import sqlite3
import stat
import threading
from collections.abc import Generator
from typing import Any, Final

import msgspec

from barnraise.sim.store.migrations import SCHEMA_VERSION

__all__ = ["RunInfo", "StoreError", "check_store", "locked_by_other", "reading"]

_HEADER: Final = b"SQLite format 3\x00"


class StoreError(Exception):
    """A path that cannot be used as a store, and why (one line)."""


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
def reading(path: str) -> Generator[sqlite3.Connection, None, None]:
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
#: first one's open made the -wal and -shm files). See :func:`reading`.
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


def locked_by_other(path: str) -> bool:
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
    if writing and locked_by_other(name):
        raise StoreError(f"store {name!r} is held by another live run")
    try:
        with reading(name) as db:
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

