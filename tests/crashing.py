"""The crash tests' kill switch, kept out of the library.

``python -m tests.crashing WHERE:N ARGS...`` runs ``barnraise ARGS...`` in this process
and kills it (SIGKILL) in the middle of one transaction of its store, after the
transaction's rows are written and before it commits (at its ``COMMIT``, which SQLite's
trace callback shows before running it):

* ``record:N``: the transaction that writes record N of the log;
* ``commit:N``: the N-th transaction that writes records (a group commit);
* ``snapshot:N``: the transaction that writes the N-th snapshot.

Used by tests/test_store.py and tests/test_restore.py (and by benchmarks/store_bench.py,
from a checkout) to crash at a seeded moment. :func:`command` is the argv to run.
"""

from __future__ import annotations

import os
import pathlib
import re
import signal
import sqlite3
import sys
from typing import Any

from barnraise.cli import main
from barnraise.sim.store import Store

__all__ = ["KillSwitch", "command", "install"]

#: The checkout's root: ``python -m tests.crashing`` runs from there.
ROOT = pathlib.Path(__file__).resolve().parents[1]
_MOMENT = re.compile(r"(record|commit|snapshot):([0-9]+)")
_EVENTS = "INSERT INTO events VALUES ("
_SNAPSHOT = "INSERT OR REPLACE INTO snapshots VALUES ("


def command(moment: str, *args: str) -> list[str]:
    """The argv that runs ``barnraise ARGS...`` killed at ``moment`` (``WHERE:N``; "": not
    killed)."""
    if not moment:
        return [sys.executable, "-m", "barnraise.cli", *args]
    return [sys.executable, "-m", "tests.crashing", moment, *args]


class KillSwitch:
    """A store connection's trace callback that kills the process at ``moment``."""

    def __init__(self, moment: str, kill: Any = None) -> None:
        found = _MOMENT.fullmatch(moment)
        if found is None:
            raise ValueError(f"a crash moment is record:N, commit:N or snapshot:N, "
                             f"got {moment!r}")
        self.where, self.n = found[1], int(found[2])
        self.kill = kill if kill is not None else (
            lambda: os.kill(os.getpid(), signal.SIGKILL))
        self.commits = 0
        self.snapshots = 0
        self._begun()

    def _begun(self) -> None:
        self.first: int | None = None  # the records the open transaction writes
        self.last: int | None = None
        self.snapshot = False  # it writes a snapshot

    def __call__(self, sql: str) -> None:
        if sql.startswith(_EVENTS):
            seq = int(sql[len(_EVENTS):sql.index(",", len(_EVENTS))])
            if self.first is None:
                self.first = seq
            self.last = seq
        elif sql.startswith(_SNAPSHOT):
            self.snapshots += 1
            self.snapshot = True
        elif sql.startswith(("BEGIN", "ROLLBACK")):
            self._begun()
        elif sql == "COMMIT":
            hit = self.where == "snapshot" and self.snapshot and self.snapshots == self.n
            if self.first is not None and self.last is not None:
                self.commits += 1
                hit = hit or (self.where == "commit" and self.commits == self.n) or (
                    self.where == "record" and self.first <= self.n <= self.last)
            self._begun()
            if hit:
                self.kill()


def install(moment: str) -> None:
    """Every store this process opens for writing gets a :class:`KillSwitch` at ``moment``
    (one switch for them all: counts run on across the stores)."""
    switch = KillSwitch(moment)
    opened = Store._open.__func__  # type: ignore[attr-defined]

    def _open(cls: type[Store], name: str, image: bytes | None = None) -> Store:
        store: Store = opened(cls, name, image)
        db: sqlite3.Connection = store._db
        db.set_trace_callback(switch)
        return store

    Store._open = classmethod(_open)  # type: ignore[method-assign, assignment]


if __name__ == "__main__":
    install(sys.argv[1])
    sys.exit(main(sys.argv[2:]))
