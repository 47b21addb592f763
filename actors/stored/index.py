"""What :func:`~barnraise.actors.stored.rebuild.world_at` does not fold: the task graph's edges and
the run's figures.

A store's snapshots keep each task's status and assignee, not its type or what it
depends on, and no figure of the run (tiles placed, conflicts, messages); the live
view's task board (the DAG's frontier) and chart need both. :class:`LogIndex` is
one pass over a stored run's whole log that keeps them in a form any time can be
answered from:

Each service folds its own part (the task queue's graph,
:func:`barnraise.actors.taskqueue_log.graph`;
regions' figures, :class:`barnraise.actors.regions_log.Figures`); this pass drives them:

* **the task graph**: a task's dependencies are in the ``task_delegate`` call the
  ``tasks`` service took (its ``args.dependencies``), and its id and type in the
  ``task_created`` event that service records while handling that call. The
  service handles one letter at a time on its thread, and the delivery record
  comes before anything the handler records, so the first ``task_created`` from
  ``tasks`` after a ``task_delegate`` delivery (and before its next delivery) is
  that call's task. ``task_dependencies_added`` events add edges; the session
  state's checkpoints and rollbacks (:data:`~barnraise.actors.service.CHECKPOINT` and
  :data:`~barnraise.actors.service.ROLLBACK` from a service to ``tasks``) keep and put back the
  graph as the service does. :meth:`LogIndex.graph` replays these few operations up to a record.
* **the figures** the live view's chart plots (``Watcher``'s series point):
  ``tiles_placed`` and ``lost_work`` from the answers ``regions`` gave each tile
  write (:attr:`barnraise.actors.stored.rebuild.Pairing.placed`, the log's one pairing of calls and
  answers; a rollback of the tiles restores ``tiles_placed`` as the service does),
  ``conflicts`` (``conflict_detected`` events), ``messages_delivered`` and
  ``messages_dropped`` (``deliver`` and ``drop`` records: the dispatcher counts
  one for each), ``completion`` (the canvas against the last blueprint set on
  ``regions``, by its :data:`~barnraise.actors.regions.BLUEPRINT` operation or the ``blueprint_set``
  tool, as
  the service computes it), and the claims and task counts of the
  folded world. :meth:`LogIndex.point` makes one point from a folded world; given a
  visitor, the pass also folds the world forward as
  :func:`~barnraise.actors.stored.rebuild.world_at`
  does, and the visitor reads it between records (``StoredRun.samples()`` feeds the
  metrics collector so: the run's series, which the view's chart draws).

**Mailbox depths are not here**: a letter is logged when it is handled (or
dropped), never when it is sent, so how many letters wait in a mailbox at a given
time cannot be known from the log.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from typing import Any, Final

from barnraise.actors import regions_log, taskqueue_log
from barnraise.actors.regions_log import Figures
from barnraise.actors.service import SESSION
from barnraise.actors.stored.rebuild import MALFORMED, Pairing, World, WorldFold, malformed
from barnraise.actors.taskqueue_log import GraphOps, TaskShape
from barnraise.sim.canvas import completion_percent
from barnraise.sim.log import CALL, RESUMED, decode
from barnraise.sim.store import StoredLog
from barnraise.sim.tools import SERVICES
from barnraise.sim.trace import DELIVER, DROP, EVENT, TraceRecord

__all__ = ["FRONTIER_SIZE", "LogIndex", "TaskShape", "board"]

#: Ready tasks listed on the board (as the live Watcher lists them).
FRONTIER_SIZE: Final = 40
_DONE: Final = frozenset({"completed", "failed", "cancelled"})


class LogIndex:
    """One pass over ``run``'s log: the task graph's operations and the figures' timelines
    (see the module doc). ``pairing`` is :func:`barnraise.actors.stored.rebuild.pair_writes` of the
    same log.

    With ``visit``, the same pass folds the world forward as
    :func:`~barnraise.actors.stored.rebuild.world_at`
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
        self.graph_ops: GraphOps = {}
        #: By session: regions' figures.
        self.figures: dict[str, Figures] = {}
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
                try:
                    if r.kind == DELIVER:
                        self._delivered.append(r.seq)
                        if r.recipient == "tasks":
                            delegate = taskqueue_log.graph_letter(self.graph_ops, r)
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
                except MALFORMED as exc:
                    raise malformed(r, exc) from exc
        finally:
            records.close()
        if visit is not None:
            visit(self, None)

    # -- the pass ------------------------------------------------------------------------------

    def _to_regions(self, r: TraceRecord, answers: dict[int, tuple[int, int]]) -> None:
        """A call to regions: a write that succeeded (regions' figures), the coordinator's
        session made (regions' copy), or another letter regions' figures read."""
        if r.seq in answers:
            content = decode(r.content)
            sid = (content.get("args") or {}).get("session_id")
            if isinstance(sid, str):
                self.figures.setdefault(sid, Figures()).write(r.seq, *answers[r.seq], r.sender)
            return
        if not regions_log.may_concern_figures(r.content):
            return
        content = decode(r.content)
        if not isinstance(content, dict) or ("op" in content and r.sender not in SERVICES):
            return  # (an operation from an agent is refused: it changed nothing)
        if content.get("op") == SESSION and isinstance(content.get("session"), dict):
            sid = content["session"].get("session_id")
            if isinstance(sid, str) and sid not in self.sessions:
                self.sessions.append(sid)
        else:
            regions_log.figures_letter(self.figures, r, content)

    def _event(self, r: TraceRecord, delegate: tuple[str, tuple[str, ...]] | None,
               orders: dict[str, int]) -> None:
        body = decode(r.content)
        if not isinstance(body, dict) or not isinstance(body.get("session_id"), str):
            return
        sid = body["session_id"]
        if r.type == "conflict_detected":
            self.figures.setdefault(sid, Figures()).conflicted(r.seq)
        else:
            taskqueue_log.graph_event(self.graph_ops, self.notes, r, sid, body, delegate,
                                      orders)

    # -- answers at a time ---------------------------------------------------------------------

    def graph(self, session_id: str, upto: int) -> dict[str, TaskShape | None]:
        """Every task of ``session_id`` after records ``0 .. upto - 1``: its shape, or None
        when the log does not say what it depends on."""
        return taskqueue_log.graph(self.graph_ops.get(session_id, ()), upto)

    def counts(self, upto: int) -> tuple[int, int]:
        """(messages delivered, dead letters) after records ``0 .. upto - 1``."""
        return (bisect.bisect_left(self._delivered, upto),
                bisect.bisect_left(self._dropped, upto))

    def point(self, world: World, session_id: str) -> dict[str, Any]:
        """The chart's point of ``session_id`` in the folded ``world`` (the Watcher's
        series point, from the log)."""
        upto = world.seq
        part = world.sessions.get(session_id)
        f = self.figures.get(session_id, Figures())
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

    def figures_now(self, session_id: str) -> Figures:
        """``session_id``'s figures as far as the pass has gone (for ``visit``)."""
        return self.figures.get(session_id) or Figures()

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
