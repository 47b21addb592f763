"""What :func:`sim.rebuild.world_at` does not fold: the task graph's edges and the run's figures.

A store's snapshots keep each task's status and assignee, not its type or what it
depends on, and no figure of the run (tiles placed, conflicts, messages); the live
view's task board (the DAG's frontier) and chart need both. :class:`LogIndex` is
one pass over a stored run's whole log that keeps them in a form any time can be
answered from:

* **the task graph**: a task's dependencies are in the ``task_delegate`` call the
  ``tasks`` service took (its ``args.dependencies``), and its id and type in the
  ``task_created`` event that service records while handling that call. The
  service handles one letter at a time on its thread, and the delivery record
  comes before anything the handler records, so the first ``task_created`` from
  ``tasks`` after a ``task_delegate`` delivery (and before its next delivery) is
  that call's task. ``task_dependencies_added`` events add edges; the session
  state's checkpoints and rollbacks (``_checkpoint``/``_rollback`` from a service
  to ``tasks``) keep and put back the graph as the service does. :meth:`LogIndex.graph`
  replays these few operations up to a record.
* **the figures** the live view's chart plots (``Watcher``'s series point):
  ``tiles_placed`` and ``lost_work`` from the answers ``regions`` gave each tile
  write (:attr:`sim.rebuild.Pairing.placed`, the log's one pairing of calls and answers;
  a ``_rollback`` of the tiles restores ``tiles_placed`` as the service does),
  ``conflicts`` (``conflict_detected`` events), ``messages_delivered`` and
  ``messages_dropped`` (``deliver`` and ``drop`` records: the dispatcher counts
  one for each), ``completion`` (the canvas against the last blueprint set on
  ``regions``, by its ``_blueprint`` operation or the ``blueprint_set`` tool, as
  the service computes it), and the claims and task counts of the
  folded world. :meth:`LogIndex.point` makes one point from a folded world; given a
  visitor, the pass also folds the world forward as :func:`~sim.rebuild.world_at`
  does, and the visitor reads it between records (``StoredRun.samples()`` feeds the
  metrics collector so: the run's series, which the view's chart draws).

**Mailbox depths are not here**: a letter is logged when it is handled (or
dropped), never when it is sent, so how many letters wait in a mailbox at a given
time cannot be known from the log.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

import msgspec
import numpy as np
from numpy.typing import NDArray

from sim.canvas import completion_percent, parse_tile
from sim.log import CALL, RESUMED, decode
from sim.ops import BLUEPRINT, CHECKPOINT, PREFIX, ROLLBACK, SESSION
from sim.rebuild import Pairing, World, WorldFold
from sim.store import StoredLog
from sim.tools import SERVICES
from sim.trace import DELIVER, DROP, EVENT, TraceRecord

__all__ = ["FRONTIER_SIZE", "LogIndex", "TaskShape", "board"]

#: Ready tasks listed on the board (as the live Watcher lists them).
FRONTIER_SIZE: Final = 40
_DONE: Final = frozenset({"completed", "failed", "cancelled"})
#: In the canonical JSON of a request that names an operation (:mod:`sim.ops`).
_ANY_OP: Final = b'"op":"' + PREFIX.encode()


@dataclass(frozen=True)
class TaskShape:
    """What the log says of a task besides its status: its type, its dependencies and
    its place in the order the tasks were made."""

    type: str | None
    dependencies: tuple[str, ...]
    order: int


@dataclass
class _Timeline:
    """A figure's value after each record that changed it: (seq, value) in order."""

    seqs: list[int] = field(default_factory=list)
    values: list[int] = field(default_factory=list)

    def set(self, seq: int, value: int) -> None:
        self.seqs.append(seq)
        self.values.append(value)

    def at(self, upto: int) -> int:
        """The value after records ``0 .. upto - 1`` (0 before any change)."""
        i = bisect.bisect_left(self.seqs, upto)
        return self.values[i - 1] if i else 0


@dataclass
class _Figures:
    """One session's figures as the pass goes, and their timelines."""

    tiles_placed: int = 0
    lost_work: int = 0
    conflicts: int = 0
    #: Tiles each writer placed (summing to tiles_placed), as regions counts them.
    by_agent: dict[str, int] = field(default_factory=dict)
    #: id -> (tiles_placed, by_agent) when a checkpoint of the tiles was taken.
    checkpoints: dict[str, tuple[int, dict[str, int]]] = field(default_factory=dict)
    placed: _Timeline = field(default_factory=_Timeline)
    lost: _Timeline = field(default_factory=_Timeline)
    conflict: _Timeline = field(default_factory=_Timeline)
    #: (seq, blueprint) of every blueprint set on regions, in order.
    blueprints: list[tuple[int, NDArray[np.uint8]]] = field(default_factory=list)


def _blueprint(value: Any) -> NDArray[np.uint8] | None:
    """Rows of tile types as codes; None for anything the service would refuse."""
    if not isinstance(value, list) or not value or not all(
            isinstance(row, list) and len(row) == len(value) for row in value):
        return None
    try:
        if all(type(v) is int for row in value for v in row):
            arr = np.array(value, dtype=np.int64)
            if int(arr.min()) < 0 or int(arr.max()) > 255:
                return None
            return arr.astype(np.uint8)
        return np.array([[int(parse_tile(v)) for v in row] for row in value], dtype=np.uint8)
    except (ValueError, TypeError, KeyError):
        return None


class LogIndex:
    """One pass over ``run``'s log: the task graph's operations and the figures' timelines
    (see the module doc). ``pairing`` is :func:`sim.rebuild.pair_writes` of the same log.

    With ``visit``, the same pass folds the world forward as :func:`~sim.rebuild.world_at`
    does (it drives that module's fold), and ``visit`` is called with the index and each
    record before the pass takes the record in (and with None at the end), while
    :attr:`fold` and :meth:`figures_now` hold the world and figures after the records
    before it: ``StoredRun.samples()`` samples the run there.
    """

    def __init__(self, run: StoredLog, pairing: Pairing, *,
                 visit: Callable[[LogIndex, TraceRecord | None], None] | None = None) -> None:
        self.run = run
        self.pairing = pairing
        answers = pairing.placed
        #: By session: the graph's operations, (seq, op, data), in log order.
        self.graph_ops: dict[str, list[tuple[int, str, Any]]] = {}
        self.figures: dict[str, _Figures] = {}
        #: What the index could not pair (a task_created with no task_delegate before it).
        self.notes: list[str] = []
        #: Every session the log opens on regions, in order.
        self.sessions: list[str] = []
        self._delivered: list[int] = []  # seqs of the deliver and drop records, rising
        self._dropped: list[int] = []
        fold = WorldFold({}, pairing) if visit is not None else None
        #: The world as the pass has folded it so far (with ``visit``; else None).
        self.fold = fold
        delegate: tuple[str, tuple[str, ...]] | None = None  # (session, dependencies)
        orders: dict[str, int] = {}
        records = run.records()
        try:
            for r in records:
                if visit is not None:
                    visit(self, r)
                if r.kind == DELIVER:
                    self._delivered.append(r.seq)
                    if r.recipient == "tasks":
                        delegate = self._to_tasks(r)
                    elif r.recipient == "regions" and r.type == CALL:
                        self._to_regions(r, answers)
                elif r.kind == DROP:
                    self._dropped.append(r.seq)
                elif r.kind == EVENT:
                    self._event(r, delegate, orders)
                    if r.type in ("task_created", RESUMED):  # (a stopped run's call
                        delegate = None  # may have made no task before the stop)
                if fold is not None:
                    fold.apply(r)
        finally:
            records.close()
        if visit is not None:
            visit(self, None)

    # -- the pass ------------------------------------------------------------------------------

    def _to_tasks(self, r: TraceRecord) -> tuple[str, tuple[str, ...]] | None:
        """A letter the tasks service takes: a task_delegate call (its session and
        dependencies), or a checkpoint or rollback of the session state."""
        if r.type != CALL:
            return None
        try:
            content = decode(r.content)
        except msgspec.DecodeError:
            return None
        if not isinstance(content, dict):
            return None
        if content.get("tool") == "task_delegate":
            args = content.get("args") or {}
            deps = args.get("dependencies") or []
            if isinstance(args.get("session_id"), str) and isinstance(deps, list):
                return (args["session_id"], tuple(dict.fromkeys(str(d) for d in deps)))
        elif content.get("op") in (CHECKPOINT, ROLLBACK) and r.sender in SERVICES:
            sid = content.get("session_id")
            if isinstance(sid, str):
                self.graph_ops.setdefault(sid, []).append(
                    (r.seq, str(content["op"]), str(content.get("checkpoint_id"))))
        return None

    def _to_regions(self, r: TraceRecord, answers: dict[int, tuple[int, int]]) -> None:
        if r.seq in answers:
            content = decode(r.content)
            sid = (content.get("args") or {}).get("session_id")
            if isinstance(sid, str):
                f = self.figures.setdefault(sid, _Figures())
                placed, lost = answers[r.seq]
                f.tiles_placed += placed
                f.lost_work += lost
                if placed:
                    f.by_agent[r.sender] = f.by_agent.get(r.sender, 0) + placed
                f.placed.set(r.seq, f.tiles_placed)
                f.lost.set(r.seq, f.lost_work)
            return
        if _ANY_OP not in r.content and b"blueprint" not in r.content:
            return
        content = decode(r.content)
        if not isinstance(content, dict):
            return
        op, tool = content.get("op"), content.get("tool")
        if op == SESSION and isinstance(content.get("session"), dict):
            sid = content["session"].get("session_id")
            if isinstance(sid, str) and sid not in self.sessions:
                self.sessions.append(sid)
        elif op == BLUEPRINT or tool == "blueprint_set":
            where = content if op == BLUEPRINT else (content.get("args") or {})
            sid, plan = where.get("session_id"), _blueprint(where.get("blueprint"))
            if isinstance(sid, str) and plan is not None:
                self.figures.setdefault(sid, _Figures()).blueprints.append((r.seq, plan))
        elif op in (CHECKPOINT, ROLLBACK) and r.sender in SERVICES:
            sid = content.get("session_id")
            if not isinstance(sid, str):
                return
            f = self.figures.setdefault(sid, _Figures())
            cid = str(content.get("checkpoint_id"))
            if op == CHECKPOINT:
                # Only a checkpoint of the tiles keeps (and a rollback to it puts back) the
                # count, as regions does; one of the session state alone leaves it be.
                if "tiles" in (content.get("include") or ()):
                    f.checkpoints[cid] = (f.tiles_placed, dict(f.by_agent))
            elif cid in f.checkpoints:
                f.tiles_placed, kept = f.checkpoints[cid]
                f.by_agent = dict(kept)
                f.placed.set(r.seq, f.tiles_placed)

    def _event(self, r: TraceRecord, delegate: tuple[str, tuple[str, ...]] | None,
               orders: dict[str, int]) -> None:
        body = decode(r.content)
        if not isinstance(body, dict) or not isinstance(body.get("session_id"), str):
            return
        sid = body["session_id"]
        if r.type == "conflict_detected":
            f = self.figures.setdefault(sid, _Figures())
            f.conflicts += 1
            f.conflict.set(r.seq, f.conflicts)
        elif r.type == "task_created" and r.sender == "tasks":
            tid = str(body.get("task_id"))
            order = orders[sid] = orders.get(sid, 0) + 1
            if delegate is None or delegate[0] != sid:
                self.notes.append(f"task {tid} (t={r.t:g}): no task_delegate call found "
                                  "before it; its dependencies are not known")
                deps = None
            else:
                deps = delegate[1]
            self.graph_ops.setdefault(sid, []).append(
                (r.seq, "create", (tid, body.get("type"), deps, order)))
        elif r.type == "task_dependencies_added" and isinstance(body.get("added"), list):
            self.graph_ops.setdefault(sid, []).append(
                (r.seq, "add", (str(body.get("task_id")), [str(d) for d in body["added"]])))

    # -- answers at a time ---------------------------------------------------------------------

    def graph(self, session_id: str, upto: int) -> dict[str, TaskShape | None]:
        """Every task of ``session_id`` after records ``0 .. upto - 1``: its shape, or None
        when the log does not say what it depends on."""
        tasks: dict[str, TaskShape | None] = {}
        kept: dict[str, dict[str, TaskShape | None]] = {}
        for seq, op, data in self.graph_ops.get(session_id, ()):
            if seq >= upto:
                break
            if op == "create":
                tid, kind, deps, order = data
                tasks[tid] = None if deps is None else TaskShape(
                    None if kind is None else str(kind), deps, order)
            elif op == "add":
                tid, added = data
                shape = tasks.get(tid)
                if shape is not None:
                    more = tuple(d for d in added if d not in shape.dependencies)
                    tasks[tid] = TaskShape(shape.type, shape.dependencies + more, shape.order)
            elif op == CHECKPOINT:
                kept[data] = dict(tasks)
            elif op == ROLLBACK and data in kept:
                tasks = dict(kept[data])
        return tasks

    def counts(self, upto: int) -> tuple[int, int]:
        """(messages delivered, dead letters) after records ``0 .. upto - 1``."""
        return (bisect.bisect_left(self._delivered, upto),
                bisect.bisect_left(self._dropped, upto))

    def point(self, world: World, session_id: str) -> dict[str, Any]:
        """The chart's point of ``session_id`` in the folded ``world`` (the Watcher's
        series point, from the log)."""
        upto = world.seq
        part = world.sessions.get(session_id)
        f = self.figures.get(session_id, _Figures())
        plans = [plan for seq, plan in f.blueprints if seq < upto]
        canvas = None if part is None else part.canvas
        statuses: dict[str, int] = {}
        for task in ([] if part is None else part.tasks.values()):
            status = "awaiting_approval" if task[2] else task[0]
            statuses[status] = statuses.get(status, 0) + 1
        delivered, dropped = self.counts(upto)
        return {"t": round(world.at, 6),
                "completion": completion_percent(canvas, plans[-1] if plans else None),
                "tiles_placed": f.placed.at(upto), "conflicts": f.conflict.at(upto),
                "lost_work": f.lost.at(upto), "claims": 0 if part is None else len(part.claims),
                "tasks_completed": statuses.get("completed", 0),
                "tasks_failed": statuses.get("failed", 0),
                "messages_delivered": delivered, "messages_dropped": dropped}

    def figures_now(self, session_id: str) -> _Figures:
        """``session_id``'s figures as far as the pass has gone (for ``visit``)."""
        return self.figures.get(session_id) or _Figures()

    def has_blueprint(self, session_id: str, upto: int) -> bool:
        f = self.figures.get(session_id)
        return f is not None and any(seq < upto for seq, _ in f.blueprints)



def board(tasks: dict[str, list[Any]], shapes: dict[str, TaskShape | None]
          ) -> tuple[dict[str, Any], list[str]]:
    """The task board the live view shows (counts by status, the DAG's frontier: tasks not
    finished and not blocked whose dependencies have all completed, in the order they
    were made, the first :data:`FRONTIER_SIZE`) from a folded session's tasks
    (``World.state()``'s ``{id: [status, assignee]}``) and their shapes; and the tasks
    left out of the frontier because their dependencies are not known."""
    counts: dict[str, int] = {}
    status = {tid: t[0] for tid, t in tasks.items()}
    frontier: list[tuple[int, str]] = []
    unknown: list[str] = []
    for tid, (state, _assigned) in tasks.items():
        counts[state] = counts.get(state, 0) + 1
        if state in _DONE or state == "blocked":
            continue
        shape = shapes.get(tid)
        if shape is None:
            unknown.append(tid)
        elif all(status.get(d) == "completed" for d in shape.dependencies):
            frontier.append((shape.order, tid))
    frontier.sort()
    ready = []
    for _order, tid in frontier[:FRONTIER_SIZE]:
        shape = shapes[tid]
        assert shape is not None
        ready.append({"id": tid, "type": shape.type, "status": tasks[tid][0],
                      "assigned_to": tasks[tid][1], "deps": len(shape.dependencies)})
    return ({"counts": counts, "total": len(tasks), "frontier": ready,
             "frontier_size": len(frontier)}, unknown)
