"""The live view's model: what a running Simulation looks like, as frames and deltas.

A :class:`Watcher` follows one session of a :class:`~barnraise.actors.world.Simulation`
(the oldest, once there is one) without taking part in it:

* it hears every domain event through :meth:`barnraise.sim.trace.Trace.listen` (a cheap
  append on the thread that records it; the trace is unchanged);
* a pump thread reads the world ``rate`` times a wall second through the read
  API (:meth:`Simulation.view`): in deterministic mode at the run gate, between
  two steps (:meth:`barnraise.sim.dispatch.Gate.call`), so the picture is one moment of the
  run; directly when no run is passing the gate (before the scenario starts
  the loop, after it ends) or in realtime mode, where each service builds its
  part on its own thread;
* each read becomes a **delta** against the one before: the canvas rectangles
  that changed (:func:`changed_rectangles`: per band of rows, the touching
  changed squares as one rectangle; tile codes as base64 bytes), claims added
  and removed, the agent rows that changed, the task board when a task moved,
  the new events, one point of the time series; :meth:`Watcher.frame` is the
  whole picture, which a page gets on connecting.

In deterministic mode it also holds the run's :class:`~barnraise.sim.dispatch.Gate`, so
the page's controls pause, step (by domain event or simulated second) and pace
the run (:meth:`Watcher.control`). In realtime mode they pause and resume the
run (``RealtimeDispatcher.pause``: the clock stops, timers and letters wait),
change its time scale, and step it: let go, then held again once the clock has
moved by the step or the n-th event is heard (within a few milliseconds).

Listeners (:meth:`Watcher.subscribe`) get each delta as a dict on the pump
thread; the server encodes it once and queues it per connection.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

from barnraise.actors.world import Simulation
from barnraise.plots import STATUS_COLOURS, TILE_COLOURS, TILE_NAMES
from barnraise.sim.clock import MAX_TIME_SCALE, MIN_TIME_SCALE, check_time_scale
from barnraise.sim.dispatch import DeterministicDispatcher, Gate, GateClosed, RealtimeDispatcher
from barnraise.sim.metrics import FINAL, INTERVAL, Sample
from barnraise.sim.views import WorldView

__all__ = ["CHART_FIGURES", "Watcher", "changed_rectangles", "chart_point", "chart_series",
           "picture", "rect_payload"]

log = logging.getLogger("barnraise.view")

#: Events kept for a page that connects (the log's backlog).
LOG_SIZE: Final = 2000
#: At most this many events go out in one delta; the rest are counted as skipped.
EVENTS_PER_DELTA: Final = 400
#: Points of the time series kept for a page that connects.
SERIES_SIZE: Final = 600
#: Ready tasks listed on the task board.
FRONTIER_SIZE: Final = 40
#: Cells a side of the squares a canvas delta is cut in (see :func:`changed_rectangles`).
TILE: Final = 32
#: The share of the wall clock the view's own reading may take: after a read that cost
#: C seconds of CPU, the next waits at least C / BUDGET (a big world is read less often).
BUDGET: Final = 0.025
#: Wall seconds a realtime step by events waits for them before it holds the run anyway.
STEP_TIMEOUT: Final = 60.0
#: Wall seconds between two reads of every task (they move the board only).
TASK_READ_PERIOD: Final = 1.0
_DONE: Final = frozenset({"completed", "failed", "cancelled"})
_TASK_EVENTS: Final = frozenset({
    "task_created", "task_accepted", "task_completed", "task_failed", "task_cancelled",
    "task_requeued", "task_blocked", "task_unblocked", "task_dependencies_added",
    "approval_requested", "approval_resolved", "rollback"})
_SPEEDS: Final = (f"a number of simulated seconds per wall second from {MIN_TIME_SCALE:g} "
                  f"to {MAX_TIME_SCALE:g}, or null for flat out")


def changed_rectangles(old: NDArray[np.uint8] | None, new: NDArray[np.uint8], *,
                       tile: int = TILE) -> list[tuple[int, int, int, int]]:
    """``(x, y, width, height)`` rectangles that cover every cell where ``new`` differs
    from ``old``, and little else.

    The canvas is cut into bands of ``tile`` rows; in each band, the changed
    ``tile``-wide columns that touch make one rectangle, shrunk to the rows and
    columns that changed in it. Every rectangle's edges hold a change; a band
    with no change sends nothing. With no ``old`` (or another shape) the whole
    canvas is one rectangle; an unchanged canvas gives none.
    """
    if old is None or old.shape != new.shape:
        return [(0, 0, int(new.shape[1]), int(new.shape[0]))] if new.size else []
    height, width = new.shape
    diff = old != new
    rows_changed = diff.any(axis=1)
    if not rows_changed.any():
        return []
    out: list[tuple[int, int, int, int]] = []
    for y0 in np.flatnonzero(np.add.reduceat(rows_changed, np.arange(0, height, tile))).tolist():
        top = y0 * tile
        band = diff[top:top + tile]
        cols = band.any(axis=0)
        blocks = np.add.reduceat(cols, np.arange(0, width, tile)) > 0
        changed = np.flatnonzero(blocks)
        # runs of touching changed blocks
        splits = np.flatnonzero(np.diff(changed) > 1)
        for first, last in zip(np.concatenate(([0], splits + 1)).tolist(),
                               np.concatenate((splits, [changed.size - 1])).tolist(),
                               strict=True):
            left, right = int(changed[first]) * tile, min(width, (int(changed[last]) + 1) * tile)
            part = band[:, left:right]
            ys = np.flatnonzero(part.any(axis=1))
            xs = np.flatnonzero(part.any(axis=0))
            out.append((left + int(xs[0]), top + int(ys[0]), int(xs[-1] - xs[0]) + 1,
                        int(ys[-1] - ys[0]) + 1))
    return out


def rect_payload(canvas: NDArray[np.uint8], rect: tuple[int, int, int, int]) -> dict[str, Any]:
    """A rectangle ``(x, y, w, h)`` of ``canvas`` as the page takes it (base64 tile codes)."""
    x, y, w, h = rect
    block = np.ascontiguousarray(canvas[y:y + h, x:x + w], dtype=np.uint8)
    return {"x": x, "y": y, "w": w, "h": h,
            "data": base64.b64encode(block.tobytes()).decode("ascii")}


def picture(*, seq: int, t: float, session_id: str | None, canvas: NDArray[np.uint8] | None,
            claims: list[dict[str, Any]], agents: list[dict[str, Any]],
            board: dict[str, Any] | None, progress: float | None,
            events: list[dict[str, Any]], series: list[dict[str, Any]],
            status: dict[str, Any], rate: float) -> dict[str, Any]:
    """The whole picture a page draws (a frame): the one function a live run's frame
    (:meth:`Watcher.frame`) and a stored run's (``barnraise.view.stored``) are made by.
    ``status``: the page's state, mode, speed, controls, steps and events seen."""
    grid = None if canvas is None else [int(canvas.shape[0]), int(canvas.shape[1])]
    return {
        "seq": seq, "t": t, "session_id": session_id, "grid": grid,
        "canvas": [] if grid is None or canvas is None
        else [rect_payload(canvas, (0, 0, grid[1], grid[0]))],
        "claims": claims, "agents": agents, "board": board, "progress": progress,
        "events": events, "series": series, "palette": list(TILE_COLOURS),
        "tile_names": list(TILE_NAMES), "status_colours": STATUS_COLOURS, "rate": rate,
        **status}


#: The figures of a chart point, besides its time ``t`` (``static/chart.js`` draws some).
CHART_FIGURES: Final = ("completion", "tiles_placed", "conflicts", "lost_work", "claims",
                        "tasks_completed", "tasks_failed", "messages_delivered",
                        "messages_dropped")


def chart_point(t: float, completion: float | None, tiles_placed: int | None,
                conflicts: int, lost_work: int | None, claims: int,
                tasks_completed: int | None, tasks_failed: int | None,
                messages_delivered: int | None, messages_dropped: int | None
                ) -> dict[str, Any]:
    """One point of the page's chart (:data:`CHART_FIGURES` and ``t``)."""
    return {"t": round(t, 6), "completion": completion, "tiles_placed": tiles_placed,
            "conflicts": conflicts, "lost_work": lost_work, "claims": claims,
            "tasks_completed": tasks_completed, "tasks_failed": tasks_failed,
            "messages_delivered": messages_delivered, "messages_dropped": messages_dropped}


def chart_series(samples: list[Sample], session_id: str | None, before: float
                 ) -> list[dict[str, Any]]:
    """The chart's points of a recorded run: its interval and final samples
    (:class:`barnraise.sim.metrics.Sample`, what ``timeseries()`` holds) of ``session_id``, those
    before simulated time ``before``, in order. A stored run's page draws these
    (``StoredRun.samples()``), and the point of the time it shows after them."""
    return [chart_point(s.t, s.completion_percent, s.tiles_placed, s.conflicts, s.lost_work,
                        s.claims_active, s.tasks_completed, s.tasks_failed,
                        s.messages_delivered, s.messages_dropped)
            for s in samples
            if s.session_id == session_id and s.trigger in (INTERVAL, FINAL)
            and round(s.t, 6) < round(before, 6)]


class _Snapshot:
    """One read of the world, turned into the page's terms."""

    __slots__ = ("agents", "board", "canvas", "claims", "completion", "point", "seq",
                 "session_id", "t")

    def __init__(self, seq: int, t: float, session_id: str | None,
                 canvas: NDArray[np.uint8] | None, claims: dict[str, dict[str, Any]],
                 agents: dict[str, dict[str, Any]], board: dict[str, Any] | None,
                 completion: float | None, point: dict[str, Any]) -> None:
        self.seq = seq
        self.t = t
        self.session_id = session_id
        self.canvas = canvas
        self.claims = claims
        self.agents = agents
        self.board = board
        self.completion = completion
        self.point = point


class Watcher:
    """Follows a Simulation for a live view (see the module doc).

    ``rate``: world reads (and so deltas) per wall second, at most; fewer when a
    read costs more than :data:`BUDGET` of the time between two. ``paused``: the
    run is held from the start until :meth:`control` ``start`` (deterministic: at
    its first step, by the gate; realtime: ``RealtimeDispatcher.pause``).
    ``speed``: simulated seconds per wall second (deterministic: pacing, None for
    as fast as it goes; realtime: the time scale, None to leave it).
    """

    def __init__(self, simu: Simulation, *, rate: float = 10.0, paused: bool = False,
                 speed: float | None = None, lazy: bool = False) -> None:
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0 < rate <= 100:
            raise ValueError(f"rate must be a number of updates per second in (0, 100], "
                             f"got {rate!r}")
        if speed is not None:
            speed = check_time_scale(speed, "speed")
        self.simu = simu
        self.rate = float(rate)
        self.lazy = lazy
        self.mode = simu.mode
        dispatcher = simu.dispatcher
        self.gate: Gate | None = None
        self._realtime: RealtimeDispatcher | None = None
        self._detach: Callable[[], None] | None = None
        if isinstance(dispatcher, DeterministicDispatcher):
            self.gate = Gate(paused=paused, speed=speed)
            self._detach = dispatcher.attach_gate(self.gate)
        elif isinstance(dispatcher, RealtimeDispatcher):
            self._realtime = dispatcher
            if speed is not None:
                dispatcher.set_time_scale(speed)
            if paused:
                dispatcher.pause()
        self._events: deque[tuple[float, str, str, Any]] = deque()
        # (number, event) as heard; made into the page's entries only when sent (a big run
        # records thousands of events a second, and a delta carries the last few hundred)
        self._log: deque[tuple[int, tuple[float, str, str, Any]]] = deque(maxlen=LOG_SIZE)
        self._series: deque[dict[str, Any]] = deque(maxlen=SERIES_SIZE)
        self._event_count = 0
        self._tasks_moved = True
        self._tasks_read_at = -1.0
        self._blueprint: NDArray[np.uint8] | None = None
        self._board: dict[str, Any] | None = None
        self._current_tasks: dict[str, str] = {}
        self._gone: set[str] = set()
        self._lock = threading.Lock()  # guards _current, the log and the series
        self._current: _Snapshot | None = None
        self._told: tuple[Any, ...] = ()  # the status the last delta carried
        self._seq = itertools.count(1)
        self._listeners: tuple[Callable[[dict[str, Any]], None], ...] = ()
        self.finished = False
        #: Reads of the world taken so far (:meth:`wait_reads` waits for more).
        self.reads = 0
        #: The seq of the last delta the listeners were given (0: none yet).
        self.told_seq = 0
        self._read_done = threading.Condition()
        self.errors: list[str] = []
        self._stop_listening = dispatcher.trace.listen(self._on_event)
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._read_cost = 0.0
        self._ticking = threading.Lock()
        self._step: threading.Event | None = None  # a realtime step under way
        self._thread = threading.Thread(target=self._pump, name="barnraise-view", daemon=True)
        self._thread.start()

    # -- what the run tells us -------------------------------------------------------------

    def _on_event(self, t: float, sender: str, topic: str, event_type: str, body: Any) -> None:
        # On the recording thread: keep it to an append (deque.append is atomic).
        self._events.append((t, sender, event_type, body))

    # -- the pump --------------------------------------------------------------------------

    def _pump(self) -> None:
        period = 1.0 / self.rate
        while not self._stop.is_set():
            started = time.monotonic()
            cpu = time.thread_time()
            self._read_cost = 0.0
            try:
                self.tick()
            except Exception as exc:  # a failed read is noted, never raised into the run
                self._note(f"{type(exc).__name__}: {exc}")
            # What this read cost: the pump's own CPU and the read on the run's thread.
            cost = time.thread_time() - cpu + self._read_cost
            wait = max(period, cost / BUDGET) - (time.monotonic() - started)
            self._wake.wait(max(0.005, wait))
            self._wake.clear()

    def _note(self, error: str) -> None:
        if len(self.errors) < 100:
            self.errors.append(error)
        log.debug("view: %s", error)

    def _read(self, session_id: str, tasks: bool) -> tuple[WorldView, tuple[int, int]]:
        simu = self.simu

        def read() -> tuple[WorldView, tuple[int, int]]:
            started = time.thread_time()
            try:
                # the message counts with the world, at the same step (and on the run's
                # thread in deterministic mode: its actor table is not read while it moves)
                return (simu.view(session_id, canvas=True, completion=True, tasks=tasks),
                        simu.dispatcher.message_counts())
            finally:
                self._read_cost += time.thread_time() - started

        gate = self.gate
        if gate is not None and not self.finished:
            try:
                return gate.call(read, timeout=0.2)
            except (TimeoutError, GateClosed):
                pass  # no run is passing the gate: nothing moves, read it here
        return read()

    def _session(self) -> str | None:
        current = self._current
        if current is not None and current.session_id is not None:
            return current.session_id
        sessions = self.simu.sessions()
        return sessions[0] if sessions else None

    def tick(self) -> dict[str, Any] | None:
        """Read the world once, make the delta, tell the listeners; the delta (None: no session,
        or nothing moved). One tick at a time (the pump's, or the last one at the end)."""
        with self._ticking:
            return self._tick()

    def read_now(self) -> None:
        """Read the world now, every task included, even when ``lazy`` with nobody
        listening (a scrubber that wants the picture at the time it stepped to)."""
        with self._ticking:
            self._tasks_moved = True
            self._tasks_read_at = -TASK_READ_PERIOD
            self._tick(force=True)

    def _tick(self, force: bool = False) -> dict[str, Any] | None:
        # "finished" is told only by a read that began after the run ended.
        final = self.finished
        events = []
        while self._events:
            events.append(self._events.popleft())
        entries = self._number(events)
        session_id = None
        if force or not (self.lazy and not self._listeners) or self.finished:
            session_id = self._session()
        if session_id is None:  # nothing to read yet: the events and the status only
            with self._lock:
                self._log.extend(entries)
            skipped = max(0, len(entries) - EVENTS_PER_DELTA)
            bare = {"seq": next(self._seq), "base": None, "t": self.simu.now,
                    "session_id": None, **self._status(final), "grid": None, "canvas": [],
                    "claims_added": [], "claims_removed": [], "agents": [],
                    "agents_removed": [], "mailboxes": {},
                    "events": _entries(entries[skipped:]),
                    "events_skipped": skipped, "progress": None, "point": None}
            status = (bare["state"], bare["speed"], bare["controls"])
            if entries or status != self._told:
                self._told = status
                self._notify(bare)
            return None
        wall = time.monotonic()
        want_tasks = self._tasks_moved and (wall - self._tasks_read_at >= TASK_READ_PERIOD
                                            or self.finished)
        try:
            view, counts = self._read(session_id, want_tasks)
        except LookupError:
            return None
        with self._read_done:
            self.reads += 1
            self._read_done.notify_all()
        if want_tasks:
            self._tasks_moved = False
            self._tasks_read_at = wall
        snapshot = self._snapshot(view, want_tasks, counts)
        with self._lock:
            before = self._current
            self._log.extend(entries)
            self._series.append(snapshot.point)
        delta = self._delta(before, snapshot, entries, final)
        status = (delta["state"], delta["speed"], delta["controls"])
        if before is not None and _quiet(delta, before) and status == self._told:
            # Nothing moved: the pages hear nothing, and what they have (``before``)
            # stays the base of the next delta. (Made current, this snapshot's seq was
            # the next delta's base, which no page had: every page saw a gap and asked
            # for the whole picture again, a megabyte for a big world.)
            return None
        with self._lock:
            self._current = snapshot
        self._told = status
        self.told_seq = snapshot.seq
        self._notify(delta)
        return delta

    def _notify(self, delta: dict[str, Any]) -> None:
        self.told_seq = delta["seq"]
        for listener in self._listeners:
            try:
                listener(delta)
            except Exception as exc:
                self._note(f"listener: {type(exc).__name__}: {exc}")

    def _number(self, events: list[tuple[float, str, str, Any]]
                ) -> list[tuple[int, tuple[float, str, str, Any]]]:
        """Number the events heard and note what they change (agents gone, tasks moved)."""
        first = self._event_count + 1
        self._event_count += len(events)
        for _t, _sender, event_type, body in events:
            if event_type in _TASK_EVENTS:
                self._tasks_moved = True
            elif event_type in ("agent_left", "agent_expired", "agent_offline") and isinstance(
                    body, dict):
                self._gone.add(str(body.get("agent_id")))
            elif event_type == "agent_joined" and isinstance(body, dict):
                self._gone.discard(str(body.get("agent_id")))
        return list(zip(range(first, first + len(events)), events, strict=True))

    def _snapshot(self, view: WorldView, tasks_read: bool,
                  message_counts: tuple[int, int]) -> _Snapshot:
        members = {m.agent_id: m for m in view.members}
        claims = {c.claim_id: {
            "id": c.claim_id, "agent": c.agent_id,
            "color": members[c.agent_id].color if c.agent_id in members else "#FF0000",
            "x": c.region.x, "y": c.region.y, "w": c.region.width, "h": c.region.height,
            "exclusive": c.exclusive} for c in view.claims}
        if tasks_read:
            self._board, self._current_tasks = _board(view)
        if self._blueprint is None and view.blueprint is not None:
            self._blueprint = view.blueprint
        actors = self.simu.dispatcher.actors
        agents = {}
        for m in view.members:
            task = self._current_tasks.get(m.agent_id)
            status = "left" if m.agent_id in self._gone else ("working" if task else "idle")
            agents[m.agent_id] = {"id": m.agent_id, "name": m.name, "role": m.role,
                                  "color": m.color, "status": status, "task": task,
                                  "mailbox": _mailbox(actors.get(m.agent_id), self.mode)}
        counts = (self._board or {}).get("counts", {})
        progress = view.progress
        point = chart_point(view.at, progress.completion_percent, progress.tiles_placed,
                            progress.conflicts, progress.lost_work, len(claims),
                            counts.get("completed", 0), counts.get("failed", 0),
                            message_counts[0], message_counts[1])
        canvas = None if view.canvas is None else np.asarray(view.canvas, dtype=np.uint8)
        completion = progress.completion_percent if view.has_blueprint else None
        return _Snapshot(next(self._seq), view.at, view.session_id, canvas, claims, agents,
                         self._board, completion, point)

    def _status(self, finished: bool | None = None) -> dict[str, Any]:
        finished = self.finished if finished is None else finished
        gate, realtime = self.gate, self._realtime
        paused = (gate.paused if gate is not None
                  else realtime is not None and realtime.holding)
        speed = (gate.speed if gate is not None
                 else None if realtime is None else realtime.clock.time_scale)
        return {"state": "finished" if finished else "paused" if paused else "running",
                "mode": self.mode, "speed": speed,
                "controls": (gate is not None or realtime is not None) and not finished,
                "steps": (gate is not None or realtime is not None) and not finished,
                "events_seen": self._event_count}

    def _delta(self, before: _Snapshot | None, now: _Snapshot,
               entries: list[tuple[int, tuple[float, str, str, Any]]], final: bool
               ) -> dict[str, Any]:
        canvas_parts: list[dict[str, Any]] = []
        if now.canvas is not None:
            old = None if before is None else before.canvas
            canvas_parts = [rect_payload(now.canvas, r)
                            for r in changed_rectangles(old, now.canvas)]
        old_claims = {} if before is None else before.claims
        old_agents = {} if before is None else before.agents
        skipped = max(0, len(entries) - EVENTS_PER_DELTA)
        delta: dict[str, Any] = {
            "seq": now.seq, "base": None if before is None else before.seq, "t": now.t,
            "session_id": now.session_id, **self._status(final),
            "grid": None if now.canvas is None else list(now.canvas.shape),
            "canvas": canvas_parts,
            "claims_added": [c for k, c in now.claims.items() if old_claims.get(k) != c],
            "claims_removed": [k for k in old_claims if k not in now.claims],
            "agents": [a for k, a in now.agents.items() if _row_changed(old_agents.get(k), a)],
            "agents_removed": [k for k in old_agents if k not in now.agents],
            # Mailbox depths move at every read for a busy crew: sent apart as {id: depth}
            # for the agents whose depth alone changed, not as a thousand whole rows.
            "mailboxes": {k: a["mailbox"] for k, a in now.agents.items()
                          if k in old_agents and old_agents[k]["mailbox"] != a["mailbox"]
                          and not _row_changed(old_agents[k], a)},
            "events": _entries(entries[skipped:]), "events_skipped": skipped,
            "progress": now.completion, "point": now.point,
        }
        if before is None or now.board is not before.board:
            delta["board"] = now.board
        return delta

    # -- what a page asks for --------------------------------------------------------------

    def frame(self) -> dict[str, Any]:
        """The whole picture as of the last read: what a page draws on connecting."""
        with self._lock:
            now = self._current
            log_entries = _entries(list(self._log))
            series = list(self._series)
        if now is None:
            return picture(seq=0, t=self.simu.now, session_id=None, canvas=None, claims=[],
                           agents=[], board=None, progress=None, events=log_entries,
                           series=series, status=self._status(), rate=self.rate)
        return picture(seq=now.seq, t=now.t, session_id=now.session_id, canvas=now.canvas,
                       claims=list(now.claims.values()), agents=list(now.agents.values()),
                       board=now.board, progress=now.completion, events=log_entries,
                       series=series, status=self._status(), rate=self.rate)

    def wait_reads(self, count: int, timeout: float) -> bool:
        """Wait until :attr:`reads` reaches ``count`` (False if ``timeout`` wall seconds pass)."""
        with self._read_done:
            return self._read_done.wait_for(lambda: self.reads >= count, timeout)

    def subscribe(self, listener: Callable[[dict[str, Any]], None]) -> Callable[[], None]:
        """Call ``listener(delta)`` on the pump thread for every delta; returns the unsubscriber."""
        self._listeners = (*self._listeners, listener)

        def stop() -> None:
            self._listeners = tuple(x for x in self._listeners if x is not listener)

        return stop

    def control(self, action: str, value: Any = None) -> dict[str, Any]:
        """Drive the run: ``start`` (or ``resume``), ``pause``, ``step_event`` (value: how
        many events, default 1), ``step_time`` (value: simulated seconds, default 1),
        ``speed`` (value: simulated seconds per wall second, from
        :data:`~barnraise.sim.clock.MIN_TIME_SCALE` to :data:`~barnraise.sim.clock.MAX_TIME_SCALE`;
        null:
        flat out, deterministic mode only).

        Returns ``{"success": True, **status}`` or ``{"success": False, "error",
        "message"}`` naming what is wrong; never raises.
        """
        gate = self.gate
        if self.finished:
            return {"success": False, "error": "finished", "message": "the run has ended"}
        if gate is None:
            return self._realtime_control(action, value)
        try:
            if action in ("start", "resume"):
                gate.resume()
            elif action == "pause":
                gate.pause()
            elif action == "step_event":
                gate.step_events(1 if value is None else value)
            elif action == "step_time":
                gate.step_time(1.0 if value is None else value)
            elif action == "speed":
                gate.set_speed(None if value is None else check_time_scale(value, "speed"))
            else:
                return {"success": False, "error": "unknown_action",
                        "message": f"unknown action {action!r}; actions: start, pause, "
                                   "step_event, step_time, speed"}
        except ValueError as exc:
            text = str(exc) if action != "speed" else f"speed: {_SPEEDS}, got {value!r}"
            return {"success": False, "error": "invalid_value", "message": text}
        self._wake.set()
        return {"success": True, **self._status()}

    def _realtime_control(self, action: str, value: Any) -> dict[str, Any]:
        realtime = self._realtime
        if realtime is None:
            return {"success": False, "error": "no_controls",
                    "message": f"this {self.mode} run has no controls"}
        if action in ("start", "resume"):
            self._cancel_step()
            realtime.resume()
        elif action == "pause":
            self._cancel_step()
            realtime.pause()
        elif action == "step_event":
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or value < 1):
                return {"success": False, "error": "invalid_value",
                        "message": f"step_event needs a whole number >= 1, got {value!r}"}
            self._realtime_step(events=1 if value is None else value)
        elif action == "step_time":
            if value is not None and (isinstance(value, bool)
                                      or not isinstance(value, (int, float))
                                      or not 0 < value < float("inf")):
                return {"success": False, "error": "invalid_value",
                        "message": f"step_time needs a number of seconds > 0, got {value!r}"}
            self._realtime_step(seconds=1.0 if value is None else float(value))
        elif action == "speed":
            try:
                scale = check_time_scale(value, "speed")
            except ValueError as exc:
                return {"success": False, "error": "invalid_value",
                        "message": f"a realtime run's {exc}"}
            realtime.set_time_scale(scale)
        else:
            return {"success": False, "error": "unknown_action",
                    "message": f"unknown action {action!r}; actions: start, pause, "
                               "step_event, step_time, speed"}
        self._wake.set()
        return {"success": True, **self._status()}

    def _cancel_step(self) -> None:
        step = self._step
        if step is not None:
            step.set()
            self._step = None

    def _realtime_step(self, *, seconds: float | None = None, events: int | None = None) -> None:
        """Let a realtime run go for ``seconds`` of simulated time or until ``events`` more
        domain events are recorded, then hold it (a thread of its own does the holding).

        A realtime run has no single next step: every actor goes on its own thread. So
        the hold comes when the clock reaches its mark (the run is let go at ``now``
        and held again when ``now`` passes ``now + seconds``, within a few
        milliseconds of wall time) or when the n-th event is heard (polled every
        5 ms, so a busy run may record a few more), and handlers already running
        finish, as for any pause. The step waits at most
        :data:`STEP_TIMEOUT` wall seconds for its events, then holds the run anyway.
        """
        realtime = self._realtime
        assert realtime is not None
        self._cancel_step()
        cancel = self._step = threading.Event()
        goal = self._event_count + len(self._events) + (events or 0)
        mark = realtime.clock.now + (seconds or 0.0)

        def counted() -> bool:
            return self._event_count + len(self._events) >= goal

        def hold() -> None:
            if events is not None:
                deadline = time.monotonic() + STEP_TIMEOUT
                while not counted() and time.monotonic() < deadline:
                    if cancel.wait(0.005):
                        break
            else:
                while not cancel.is_set():
                    left = (mark - realtime.clock.now) / realtime.clock.time_scale
                    if left <= 0:
                        break
                    cancel.wait(min(left, 0.05))
            if not cancel.is_set() and self._step is cancel:
                realtime.pause()
                self._step = None
                self._wake.set()

        realtime.resume()
        threading.Thread(target=hold, name="barnraise-view-step", daemon=True).start()

    # -- the end ---------------------------------------------------------------------------

    def ended(self) -> None:
        """The run is over: take the last read (the final canvas), keep serving it."""
        self.finished = True
        self._cancel_step()
        if self.gate is not None:
            self.gate.close()
        if self._realtime is not None:
            self._realtime.resume()
        with contextlib.suppress(Exception):
            self._tasks_moved = True
            self.tick()

    def close(self, timeout: float = 5.0) -> None:
        """Stop the pump and the listener; open the gate for good."""
        self._cancel_step()
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout)
        self._stop_listening()
        if self._detach is not None:
            self._detach()
            self._detach = None
        if self._realtime is not None:
            self._realtime.resume()  # a viewer that goes away leaves no run held


def _entries(numbered: list[tuple[int, tuple[float, str, str, Any]]]) -> list[dict[str, Any]]:
    """The page's log entries of numbered events (their body without the session id)."""
    out = []
    for n, (t, sender, event_type, body) in numbered:
        if isinstance(body, dict):
            body = {k: v for k, v in body.items() if k not in ("session_id", "event")}
        out.append({"n": n, "t": round(t, 6), "type": event_type, "from": sender,
                    "body": body})
    return out


def _row_changed(old: dict[str, Any] | None, new: dict[str, Any]) -> bool:
    """True when an agent's row changed in more than its mailbox depth (or is new)."""
    if old is None:
        return True
    return any(old.get(key) != value for key, value in new.items() if key != "mailbox")


def _quiet(delta: dict[str, Any], before: _Snapshot) -> bool:
    return (not delta["canvas"] and not delta["claims_added"] and not delta["claims_removed"]
            and not delta["agents"] and not delta["agents_removed"] and not delta["events"]
            and not delta["mailboxes"] and "board" not in delta and delta["t"] == before.t)


def _mailbox(actor: Any, mode: str) -> int:
    if actor is None:
        return 0
    try:
        return int(actor.pending) if mode == "deterministic" else len(actor.actor_inbox)
    except (TypeError, AttributeError):
        return 0


def _board(view: WorldView) -> tuple[dict[str, Any], dict[str, str]]:
    """The task board (counts by status, the ready frontier) and each agent's current task."""
    counts: dict[str, int] = {}
    status = {t.task_id: t.status for t in view.tasks}
    current: dict[str, str] = {}
    frontier = []
    for task in view.tasks:
        counts[task.status] = counts.get(task.status, 0) + 1
        if task.status in ("in_progress", "awaiting_approval") and task.assigned_to:
            current.setdefault(task.assigned_to, task.task_id)
        if task.status not in _DONE and task.status != "blocked" and all(
                status.get(d) == "completed" for d in task.dependencies):
            frontier.append(task)
    ready = [{"id": t.task_id, "type": t.type, "status": t.status,
              "assigned_to": t.assigned_to, "deps": len(t.dependencies)}
             for t in frontier[:FRONTIER_SIZE]]
    return ({"counts": counts, "total": len(view.tasks), "frontier": ready,
             "frontier_size": len(frontier)}, current)
