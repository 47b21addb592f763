"""The durable store of one run: a SQLite file holding its log, snapshots and delegations.

One file per run, on the standard library's :mod:`sqlite3`, in WAL mode with
``synchronous=NORMAL`` (see docs/store.md for what that promises). Tables:

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

One concern a module:

* :mod:`barnraise.sim.store.migrations`: the schema (:data:`SCHEMA_VERSION`) and the steps
  that bring an older store up to it;
* :mod:`barnraise.sim.store.files`: whether a path is a store and what run it holds
  (:func:`check_store`, :class:`RunInfo`, :class:`StoreError`), read-only opening,
  the writer's lock;
* :mod:`barnraise.sim.store.divergence`: a re-execution checked against a stored log
  (:class:`Divergence`, the resume check);
* :mod:`barnraise.sim.store.writer`: :class:`Store`, the writer (group commit, snapshots,
  the delegations table, resume);
* :mod:`barnraise.sim.store.reader`: :class:`StoredLog`, the store read as stored.

Every public name is importable from :mod:`barnraise.sim.store` itself.
"""

from __future__ import annotations

from barnraise.sim.store.divergence import Divergence
from barnraise.sim.store.files import RunInfo, StoreError, check_store
from barnraise.sim.store.migrations import MIGRATIONS, SCHEMA_VERSION
from barnraise.sim.store.reader import StoredLog, read_snapshot
from barnraise.sim.store.writer import GROUP_RECORDS, GROUP_SECONDS, SNAPSHOT_EVERY, Store

__all__ = ["GROUP_RECORDS", "GROUP_SECONDS", "MIGRATIONS", "SCHEMA_VERSION", "SNAPSHOT_EVERY",
           "Divergence", "RunInfo", "Store", "StoreError", "StoredLog", "check_store",
           "read_snapshot"]
