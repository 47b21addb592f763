"""The world of a stored run at any simulated time, folded from its log.

A store keeps snapshots now and then (every 10,000 records in deterministic mode,
once at the end of a realtime run) and the whole trace in between. :func:`world_at`
starts from the last snapshot at or before the chosen time (or from nothing) and
folds the records after it, in order, up to that time:

* **the canvas**: every tile write an agent sent the ``regions`` service
  (``builder_place_tile``, ``builder_place_tiles``) that succeeded, applied when
  the service handled it; a write succeeded when its answer says so, the answer
  paired with its call by :func:`barnraise.sim.log.paired` in a first pass over the log
  (:func:`pair_writes`). A checkpoint of the tiles (the coordinator's
  :data:`~barnraise.actors.service.CHECKPOINT` to ``regions``) keeps a copy; a rollback to it
  (:data:`~barnraise.actors.service.ROLLBACK`) puts it back;
* **members, claims, tasks**: from the domain events (``agent_joined`` and
  ``agent_left``; ``region_claimed``, ``region_renewed`` and ``region_released``; the task
  events and
  approvals: a task requeued because its member left is anyone's again), with each
  member's colour given as the coordinator gives it (by the order of joining); a
  checkpoint of the session state (the coordinator's checkpoint to ``tasks``)
  keeps the tasks, and its rollback puts every one of them back (the task service
  does so with no event per task).

Each service folds its own part, beside it: the coordinator's sessions and members
(:func:`barnraise.actors.coordinator_log.world_op`,
:func:`~barnraise.actors.coordinator_log.world_event`),
regions' canvas, checkpoints of the tiles and claims
(:func:`barnraise.actors.regions_log.world_letter`,
:func:`~barnraise.actors.regions_log.world_event`, and
which writes succeeded, :func:`~barnraise.actors.regions_log.placed_of`), the task queue's
statuses and checkpoints (:func:`barnraise.actors.taskqueue_log.world_letter`,
:func:`~barnraise.actors.taskqueue_log.world_event`); :class:`WorldFold` routes each record to them.

The result has the shape of ``Simulation.world_state()`` (what a snapshot keeps),
plus the members' colours. What the fold cannot know is said in
:attr:`World.notes` rather than guessed: a rollback to a checkpoint taken before
the snapshot it started from, a run under a fault plan (a dropped or doubled
letter breaks the pairing of calls and answers). The live view's scrubber uses it
for stores it cannot re-execute (realtime runs), and ``tests/test_rebuild.py``
checks it against the stores' own snapshots, against a re-execution, and against
the world in memory after every call of random sessions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Set
from dataclasses import dataclass, field
from typing import Any, Final

import msgspec
import numpy as np

from barnraise.actors import coordinator_log, regions_log, taskqueue_log
from barnraise.actors.regions_log import is_write, placed_of
from barnraise.actors.stored.image import WorldSession
from barnraise.sim.log import ANSWER, CALL, RESUMED, Calls, decode, is_answer, is_call
from barnraise.sim.store import StoredLog, StoreError
from barnraise.sim.tools import SERVICES
from barnraise.sim.trace import DELIVER, EVENT, TraceRecord
from barnraise.sim.views import member_colour

__all__ = ["MALFORMED", "Pairing", "World", "WorldFold", "WorldSession", "fold_records",
           "malformed", "pair_writes", "world_at"]

_AWAITING: Final = "awaiting_approval"
#: Each service's part of the world, by the event types it reads.
_EVENTS: Final[dict[str, Callable[[WorldSession, str, dict[str, Any]], None]]] = {
    kind: module.world_event for module in (coordinator_log, regions_log, taskqueue_log)
    for kind in module.WORLD_EVENTS}


@dataclass
class World:
    """The world folded up to :attr:`at` (see the module doc)."""

    at: float
    #: Records folded: the world is the one after records ``0 .. seq - 1``.
    seq: int
    #: (seq, time) of the snapshot the fold started from, or None (from nothing).
    start: tuple[int, float] | None
    sessions: dict[str, WorldSession]
    notes: list[str] = field(default_factory=list)

    def state(self) -> dict[str, Any]:
        """By session id: what a snapshot keeps (``Simulation.world_state()``'s shape),
        with ``colours`` (agent id -> colour) besides."""
        out: dict[str, Any] = {}
        for sid, s in self.sessions.items():
            canvas = s.canvas
            out[sid] = {
                "canvas": None if canvas is None else canvas.tobytes(),
                "shape": None if canvas is None else list(canvas.shape),
                "members": sorted([aid, m[0], m[1]] for aid, m in s.members.items()),
                "claims": sorted([cid, c[0], dict(c[1]), c[2]] for cid, c in s.claims.items()),
                "tasks": {tid: [_AWAITING if t[2] else t[0], t[1]]
                          for tid, t in s.tasks.items()},
                "checkpoints": list(s.checkpoints),  # in the order they were taken
                "colours": {aid: m[2] for aid, m in s.members.items()},
            }
        return out


@dataclass
class Pairing:
    """Which tile writes succeeded, from one pass over the whole log (:func:`pair_writes`)."""

    #: By the seq of every write request to ``regions`` whose answer said ``success``:
    #: (tiles_placed, lost_work) of that answer.
    placed: dict[int, tuple[int, int]]
    unanswered: int
    #: By session: (seq, agent id) of every agent_joined, in order. The coordinator colours
    #: the n-th join with the n-th colour; a snapshot keeps no colours, so a fold that
    #: starts from one looks them up here.
    joins: dict[str, list[tuple[int, str]]] = field(default_factory=dict)

    @property
    def succeeded(self) -> Set[int]:
        """The seq of every write request to ``regions`` whose answer said ``success``."""
        return self.placed.keys()


def pair_writes(records: Iterable[TraceRecord]) -> Pairing:
    """Pair each agent's calls to ``regions`` with the answers it got, by the log's one
    pairing (:mod:`barnraise.sim.log`: its rules and :class:`~barnraise.sim.log.Calls`; each
    service's calls
    wait apart, so regions' alone are queued here), and keep the writes that succeeded,
    with what their answers counted."""
    placed: dict[int, tuple[int, int]] = {}
    joins: dict[str, list[tuple[int, str]]] = {}
    calls: Calls[TraceRecord] = Calls()
    for r in records:
        kind = r.kind
        if kind == DELIVER:
            rtype = r.type
            if rtype == CALL:
                if r.recipient == "regions" and is_call(kind, rtype, r.sender, "regions"):
                    calls.call("regions", r.sender, r)
            elif rtype == ANSWER and r.sender == "regions" \
                    and is_answer(kind, rtype, "regions", r.recipient):
                call = calls.answer("regions", r.recipient)
                if call is not None:
                    answer = placed_of(r.content)
                    if answer is not None and answer.success is True \
                            and is_write(call.content):
                        placed[call.seq] = (answer.tiles_placed, answer.lost_work)
        elif kind == EVENT:
            if r.type == RESUMED:
                calls.clear()
            elif r.type == "agent_joined":
                content = decode(r.content)
                if isinstance(content, dict):
                    joins.setdefault(str(content.get("session_id")), []).append(
                        (r.seq, str(content.get("agent_id"))))
    return Pairing(placed, calls.unanswered(), joins)


def _from_snapshot(world: dict[str, Any], seq: int, pairing: Pairing) -> dict[str, WorldSession]:
    sessions: dict[str, WorldSession] = {}
    for sid, part in world.items():
        s = sessions[sid] = WorldSession()
        if part.get("canvas") is not None:
            s.canvas = np.frombuffer(part["canvas"], dtype=np.uint8).reshape(
                part["shape"]).copy()
        joined = [agent for at, agent in pairing.joins.get(sid, ()) if at < seq]
        index = {agent: i for i, agent in enumerate(joined)}  # the last join of each
        for aid, name, role in part.get("members", []):
            s.members[aid] = (name, role, member_colour(index.get(aid, len(joined))))
        s.joined = len(joined)
        for claim in part.get("claims", []):
            s.claims[claim[0]] = (claim[1], claim[2], claim[3] if len(claim) > 3 else None)
        for tid, (status, assigned) in part.get("tasks", {}).items():
            awaiting = status == _AWAITING
            s.tasks[tid] = ["pending" if awaiting else status, assigned, awaiting]
        for cid in part.get("checkpoints", []):
            s.checkpoints[cid] = None
            s.unknown.add(cid)  # taken before the snapshot: what it kept is not known
    return sessions


class WorldFold:
    """The fold of the world record by record (:meth:`apply`), from ``sessions`` (from a
    snapshot, or none) with the writes ``pairing`` says succeeded."""

    def __init__(self, sessions: dict[str, WorldSession], pairing: Pairing) -> None:
        self.sessions = sessions
        self.pairing = pairing
        self.notes: list[str] = []

    def session(self, sid: Any) -> WorldSession | None:
        return self.sessions.get(sid) if isinstance(sid, str) else None

    def apply(self, r: TraceRecord) -> None:
        # Only the services' own events and operations move the world: an agent may emit an
        # event of a world type, or send a service an operation (which it refuses), and
        # neither changed the live world.
        if r.kind == EVENT:
            if r.sender in SERVICES:
                self.event(r)
        elif r.kind == DELIVER and r.type == "coordination_request":
            if r.recipient == "regions":
                self.to_regions(r)
            elif r.recipient == "tasks" and r.sender in SERVICES:
                self.to_tasks(r)

    def to_tasks(self, r: TraceRecord) -> None:
        """A letter from a service to the task queue: its part of the world."""
        taskqueue_log.world_letter(self.sessions, r, decode(r.content), self.notes)

    def to_regions(self, r: TraceRecord) -> None:
        """A letter to regions: the coordinator's operations (regions' copy) to the
        coordinator's part of the world, the rest to regions' part."""
        content = decode(r.content)
        if not isinstance(content, dict):
            return
        op = content.get("op")
        if op is not None and r.sender not in SERVICES:
            return
        if op in coordinator_log.OPS:
            made = coordinator_log.world_op(self.sessions, op, content)
            if made is not None:
                regions_log.world_session(made, content["session"])
        else:
            regions_log.world_letter(self.sessions, r, content, self.pairing.placed,
                                     self.notes)

    def event(self, r: TraceRecord) -> None:
        part = _EVENTS.get(r.type)
        if part is None:
            return
        body = decode(r.content)
        if not isinstance(body, dict):
            return
        s = self.session(body.get("session_id"))
        if s is None:
            return
        part(s, r.type, body)


#: What a fold raises on a record that barnraise never writes (a key missing, a value of
#: the wrong type, content that is not JSON): :func:`malformed` names the record instead.
MALFORMED: Final = (KeyError, TypeError, ValueError, IndexError, AttributeError,
                    msgspec.DecodeError)


def malformed(r: TraceRecord, exc: Exception) -> StoreError:
    """The error for record ``r``, which a fold could not read (``exc``)."""
    return StoreError(f"record {r.seq} ({r.kind} {r.type!r} from {r.sender!r}) is not what "
                      f"barnraise writes: {type(exc).__name__}: {exc}")


def world_at(run: StoredLog, at: float | None = None, *, upto: int | None = None,
             pairing: Pairing | None = None) -> World:
    """The world of ``run`` after every record at or before simulated time ``at`` (None:
    the end), and before record ``upto`` when given (the world after records
    ``0 .. upto - 1``: a prefix of the log, which a time cannot name when many records
    share it). ``pairing``: :func:`pair_writes` of the run's whole log, when the caller
    folds the same run many times (a scrubber)."""
    if pairing is None:
        pairing = pair_writes(run.records())
    start = None
    sessions: dict[str, WorldSession] = {}
    for seq, t in reversed(run.snapshots()):
        if (at is None or t <= at) and (upto is None or seq <= upto):
            world = run.snapshot(seq=seq)
            if world:
                start = (seq, t)
                sessions = _from_snapshot(world, seq, pairing)
            break
    fold = WorldFold(sessions, pairing)
    if run.info is not None and run.info.options.get("faults"):
        fold.notes.append("the run had a fault plan: a dropped or doubled letter can pair "
                          "a tile write with another call's answer")
    seq = start[0] if start is not None else 0
    records = run.records(seq)
    try:
        for r in records:
            if (at is not None and r.t > at) or (upto is not None and r.seq >= upto):
                break
            try:
                fold.apply(r)
            except MALFORMED as exc:
                raise malformed(r, exc) from exc
            seq = r.seq + 1
    finally:
        records.close()  # its connection to the file
    return World(at if at is not None else _last_time(run), seq, start, fold.sessions,
                 fold.notes)


def fold_records(records: Iterable[TraceRecord], at: float | None = None) -> World:
    """The world after every record at or before simulated time ``at`` (None: the end)
    of a log held in memory (a live run's trace, ``RunResult.canvas(at=)``), folded from
    nothing by the fold :func:`world_at` drives over a store's log."""
    log = list(records)
    fold = WorldFold({}, pair_writes(log))
    seq = 0
    for r in log:
        if at is not None and r.t > at:
            break
        fold.apply(r)
        seq = r.seq + 1
    end = at if at is not None else (log[-1].t if log else 0.0)
    return World(end, seq, None, fold.sessions, fold.notes)


def _last_time(run: StoredLog) -> float:
    last = run.last()
    return 0.0 if last is None else last.t

