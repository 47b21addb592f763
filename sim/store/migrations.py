"""A store's schema and how an older one is brought up to it.

The schema's version is ``PRAGMA user_version``; :data:`MIGRATIONS` holds every step
from an empty database to :data:`SCHEMA_VERSION`, and :func:`migrate` applies the
steps a store lacks, all in one transaction, writing each to the ``migrations``
table. A new store is written as one image (:func:`fresh_image`: the schema and the
run row, already in WAL mode).
"""

from __future__ import annotations

import sqlite3
import time
from typing import Any, Final

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "fresh_image", "migrate"]

SCHEMA_VERSION: Final = 5

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
    5: ("reporters and reported: the names of a run's own reporters and the values they "
        "gave at each sample, kept as written (outside the log and its digest), so that a "
        "stored run's time series has their columns without calling them again", (
            "CREATE TABLE reporters (position INTEGER PRIMARY KEY, kind TEXT NOT NULL, "
            "name TEXT NOT NULL)",
            "CREATE TABLE reported (sample INTEGER NOT NULL, t REAL NOT NULL, "
            "session_id TEXT NOT NULL, agent_id TEXT, data BLOB NOT NULL)",
        )),
}


def migrate(db: sqlite3.Connection) -> None:
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


def fresh_image(run: tuple[Any, ...]) -> bytes:
    """The bytes of a new store holding ``run`` (the run row's values after its id): the
    schema, every migration and the row, built in memory and marked as a WAL database.

    Written to the new file in one go (and one fsync), it spares the file the
    rollback-journal transaction that switching a new database to WAL costs (four
    syncs) and one transaction per table: creating a store was a third of the cost
    of storing a short run.
    """
    mem = sqlite3.connect(":memory:", isolation_level=None)
    try:
        migrate(mem)
        mem.execute("INSERT INTO run VALUES (1, ?, ?, ?, ?, ?, ?, 'running', NULL, NULL, ?, ?, ?)",
                    run)
        image = bytearray(mem.serialize())
    finally:
        mem.close()
    # The file format's read and write versions (bytes 18 and 19): 2 is a WAL database,
    # which is what PRAGMA journal_mode = WAL would write there.
    image[18:20] = b"\x02\x02"
    return bytes(image)

