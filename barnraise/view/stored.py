"""Scrubbing a stored run: the live view's page over a durable store (``barnraise view PATH``).

Two sources answer the page as a :class:`~barnraise.view.watch.Watcher` does
(``frame``, ``subscribe``, ``control``); the page's time slider sends ``{"action":
"seek", "value": T}`` and the answer makes the server send a fresh frame.

* :class:`ReplaySource`, for a deterministic run of a scenario: the run is
  re-executed from its seed and parameters under a run gate held at its first
  step, and a seek lets it go to simulated time T (every entry at or before T)
  and holds it there; the frame is then a Watcher's read of that world, exact at
  any time: canvas, claims, agents with their status and current task, the task
  board and its frontier, the events up to T. Seeking back starts a fresh
  re-execution (a seek costs at most what the run cost). The re-execution is
  checked against the stored log record by record as it goes; a difference is
  shown on the page, and the scrubber falls back to the snapshots.
* :class:`StoredSource`, for the rest (a realtime run, a run driven by hand): the
  world at T folded from the last snapshot before it and the log
  (:func:`barnraise.actors.stored.rebuild.world_at`: canvas, claims, members, task statuses), the
  domain events logged up to T, and what a second pass over the log gives
  (:class:`barnraise.actors.stored.index.LogIndex`): the task board's frontier, the chart's
  point at T and the completion. Mailbox depths are sent as unknown (None): the log
  records a letter when it is handled, never when it is sent.

Both draw the chart from the run's series: the interval and final samples of
``StoredRun.samples()`` (the frame ``open_run(path).timeseries()`` holds, for a
deterministic run the one ``RunResult.timeseries()`` held) before T, then the point
at T. Both frames are made by :func:`barnraise.view.watch.picture`, as a live one is.
"""

from __future__ import annotations

import itertools
import math
import os
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from barnraise.actors.stored.index import board as task_board
from barnraise.actors.stored.rebuild import pair_writes, world_at
from barnraise.actors.stored.run import StoredRun, is_time
from barnraise.sim.dispatch import GateAborted
from barnraise.sim.metrics import DEFAULT_INTERVAL
from barnraise.sim.store import StoreError
from barnraise.sim.trace import EVENT
from barnraise.view.watch import chart_series, picture

if TYPE_CHECKING:
    from barnraise.actors.world import Simulation
    from barnraise.gateway.operator import Operator
    from barnraise.runner import Request
    from barnraise.view.watch import Watcher

__all__ = ["CHART_POINTS", "ReplaySource", "StoredServer", "StoredSource", "chart_interval",
           "open_source", "serve_stored"]

#: Wall seconds a seek may take to re-execute the run up to its time.
SEEK_TIMEOUT: Final = 300.0

#: Events sent with a frame (the last ones up to the chosen time).
LOG_SIZE = 2000
#: Why a folded store's agents show no mailbox depth.
MAILBOXES_UNKNOWN: Final = ("mailbox depths unknown: the log records a letter when it is "
                            "handled, not when it is sent")


class _Scrubber:
    """What both sources share: a chosen time (``at``, within 0 .. ``end``) that the
    page's ``seek`` sets, and no deltas (a page of a stored run gets frames only)."""

    mode = "stored"
    at: float
    end: float
    _at_lock: threading.Lock

    def subscribe(self, listener: Callable[[dict[str, Any]], None]) -> Callable[[], None]:
        """A stored run sends no deltas: a page gets frames only."""
        return lambda: None

    def control(self, action: str, value: Any = None) -> dict[str, Any]:
        """``seek`` to simulated time ``value`` (the page then gets a fresh frame)."""
        refused = _refuse_seek(action, value)
        if refused is not None:
            return refused
        with self._at_lock:  # never the fold's lock: a seek is answered while one runs
            self.at = min(max(0.0, float(value)), self.end)
            at = self.at
        return {"success": True, "frame": True, "resync": True, "at": at}


#: The most interval points of a stored run's chart: a run longer than this many of the
#: recorder's default intervals is charted at a wider one (its ``.timeseries(interval=)``
#: at :func:`chart_interval`), so the fold and every frame stay small.
CHART_POINTS: Final = 2_000


def chart_interval(end: float) -> float:
    """The interval a stored run of ``end`` simulated seconds is charted at: the
    recorder's default, or ``end / CHART_POINTS`` when that is wider."""
    return max(DEFAULT_INTERVAL, end / CHART_POINTS)


def _end_of(run: StoredRun, snapshots: Sequence[tuple[int, float]]) -> float:
    """The last record's time, or the last snapshot's (a finished run's is its summary's
    virtual_time, rounded), whichever is later: the slider reaches both. StoreError for
    a time that is not a finite number >= 0 (barnraise writes none)."""
    last = run.last()
    times = [(f"record {last.seq}", last.t)] if last is not None else []
    times += [(f"the snapshot at record {seq}", t) for seq, t in snapshots]
    for what, t in times:
        if not is_time(t):
            raise StoreError(f"{what}: time {t!r} is not a finite simulated time >= 0")
    return float(max([0.0, *(t for _, t in times)]))


class StoredSource(_Scrubber):
    """What the view's page shows of a stored run at a chosen simulated time, folded
    from its snapshots and log (:func:`barnraise.actors.stored.rebuild.world_at`)."""

    def __init__(self, run: StoredRun) -> None:
        self.run = run
        self.snapshots = run.snapshots()
        # one pass over the log: which tile writes succeeded (every fold needs it)
        self.pairing = pair_writes(run.records())
        self.events = run.entries(kind=EVENT)
        self.end = _end_of(run, self.snapshots)
        self.at = self.end
        # a second pass: the task graph's edges and the chart's figures (actors/stored/index.py),
        # and the run's samples (the chart's points) from the same pass
        metrics, self.index = run.fold_samples(chart_interval(self.end), pairing=self.pairing)
        self.samples = metrics.samples
        self._seq = itertools.count(1)
        self._at_lock = threading.Lock()

    def frame(self) -> dict[str, Any]:
        """The whole picture at the chosen time."""
        with self._at_lock:
            at = self.at
        folded = world_at(self.run, at, pairing=self.pairing)
        world = folded.state()
        summary = self.run.summary or {}
        sid = summary.get("session_id")
        if sid not in world:
            sid = next(iter(world), None)
        part = world.get(sid) if sid is not None else None
        tiles = None
        claims: list[dict[str, Any]] = []
        agents: list[dict[str, Any]] = []
        board = None
        progress = None
        series: list[dict[str, Any]] = []
        notes = list(folded.notes)
        if part is not None:
            colour = part.get("colours", {})
            tasks = part.get("tasks", {})
            working: dict[str, str] = {}
            for k, v in tasks.items():  # an agent's first task, as the live board says
                if v[0] in ("in_progress", "awaiting_approval") and v[1]:
                    working.setdefault(v[1], k)
            agents = [{"id": m[0], "name": m[1], "role": m[2],
                       "color": colour.get(m[0], "#888888"),
                       "status": "working" if m[0] in working else "idle",
                       "task": working.get(m[0]), "mailbox": None}
                      for m in part.get("members", [])]
            claims = [{"id": c[0], "agent": c[1], "color": colour.get(c[1], "#FF0000"),
                       "x": c[2]["x"], "y": c[2]["y"], "w": c[2]["width"],
                       "h": c[2]["height"], "exclusive": True} for c in part.get("claims", [])]
            board, unknown = task_board(tasks, self.index.graph(str(sid), folded.seq))
            if unknown:
                notes.append(f"{len(unknown)} unfinished tasks are left out of the frontier: "
                             "the log does not say what they depend on")
            if part.get("canvas") is not None:
                tiles = np.frombuffer(part["canvas"], dtype=np.uint8).reshape(part["shape"])
            point = self.index.point(folded, str(sid))
            if self.index.has_blueprint(str(sid), folded.seq):
                progress = point["completion"]
            series = [*chart_series(self.samples, str(sid), at), point]
        events = [{"n": i + 1, "t": float(e["time"]), "type": e["type"], "from": e["sender"],
                   "body": e["content"]} for i, e in enumerate(self.events)
                  if float(e["time"]) <= at][-LOG_SIZE:]
        status = {"state": "stored", "mode": "stored", "speed": None, "controls": False,
                  "steps": False, "events_seen": len(self.events)}
        frame = picture(seq=next(self._seq), t=at, session_id=sid, canvas=tiles,
                        claims=claims, agents=agents, board=board, progress=progress,
                        events=events, series=series, status=status, rate=0)
        frame["scrub"] = {"start": 0.0, "end": self.end, "at": at, "shown": at,
                          "folded": "from the start" if folded.start is None
                          else f"from the snapshot at {folded.start[1]:.2f} s",
                          "notes": notes, "mailboxes": MAILBOXES_UNKNOWN,
                          "snapshots": [t for _, t in self.snapshots]}
        return frame


def _refuse_seek(action: str, value: Any) -> dict[str, Any] | None:
    """The refusal of a control a stored run does not take (None: a good seek)."""
    if action != "seek":
        return {"success": False, "error": "unknown_action",
                "message": f"a stored run answers seek only, not {action!r}"}
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value):
        return {"success": False, "error": "invalid_value",
                "message": f"seek needs a simulated time, got {value!r}"}
    return None


class _Replay:
    """One re-execution of a stored deterministic run, held at its gate by a Watcher."""

    def __init__(self, request: Request) -> None:
        from barnraise.runner import run_request
        from barnraise.view.watch import Watcher

        self.simu: Simulation | None = None
        self.watcher: Watcher | None = None
        self.ready = threading.Event()
        self.done = threading.Event()
        self.error: str | None = None

        def watch(simu: Simulation) -> Callable[[], None]:
            self.simu = simu
            self.watcher = Watcher(simu, paused=True, rate=1.0, lazy=True)
            self.ready.set()
            return self.watcher.ended

        def go() -> None:
            try:
                run_request(request, record=False, watch=watch)
            except GateAborted:
                pass
            except Exception as exc:  # shown on the page; the server goes on
                self.error = f"the re-execution failed: {type(exc).__name__}: {exc}"
            finally:
                self.ready.set()
                self.done.set()

        self.thread = threading.Thread(target=go, name="barnraise-scrub", daemon=True)
        self.thread.start()

    @property
    def at(self) -> float:
        """The simulated time the re-execution stands at."""
        watcher = self.watcher
        if watcher is None or watcher.gate is None:
            return 0.0
        return watcher.gate.at

    def go_to(self, t: float, timeout: float) -> None:
        """Let the run go through every entry at or before ``t``, then hold it there."""
        if not self.ready.wait(timeout):
            raise TimeoutError(f"the re-execution did not start within {timeout:g} s")
        watcher = self.watcher
        if self.done.is_set() or watcher is None or watcher.gate is None:
            return
        gate = watcher.gate
        if not gate.wait_held(timeout):
            raise TimeoutError(f"the re-execution did not reach its gate within {timeout:g} s")
        if t > gate.at:
            gate.step_time(t - gate.at)
            if not gate.wait_held(timeout) and not self.done.is_set():
                raise TimeoutError(f"re-executing to t={t:g} took longer than {timeout:g} s")

    def stop(self) -> None:
        watcher = self.watcher
        if watcher is not None and watcher.gate is not None:
            watcher.gate.abort()
        self.thread.join(10.0)
        if watcher is not None:
            watcher.close()


class ReplaySource(_Scrubber):
    """A stored deterministic run, scrubbed by re-executing it (see the module doc)."""

    def __init__(self, run: StoredRun, *, timeout: float = SEEK_TIMEOUT,
                 script: str | os.PathLike[str] | None = None) -> None:
        """``script``: the scenario file of a run made from one. The code a seek re-executes
        is chosen here, once, as ``barnraise replay`` chooses it
        (:func:`barnraise.runner.stored_request`): StoreError, before anything runs, for a
        scenario the installed package does not have, a file not named, or not the same."""
        from barnraise.runner import stored_request

        if run.info is None or run.info.mode != "deterministic" or run.info.scenario is None:
            raise StoreError(f"store {run.path!r} does not hold a deterministic run of a "
                             "scenario: it cannot be re-executed")
        self.request = stored_request(run.info, run.path, script)
        self.run = run
        self.timeout = timeout
        self.snapshots = run.snapshots()
        self._stored: StoredSource | None = None  # made when first needed (a fallback)
        last = run.last()
        self.end = _end_of(run, self.snapshots)
        self.records = last.seq + 1 if last is not None else 0
        self.at = self.end
        self._at_lock = threading.Lock()
        self._lock = threading.Lock()  # one re-execution or fold at a time
        self._replay: _Replay | None = None
        #: The run's samples, folded from the log (the chart's points before a seek's time).
        self.samples = run.samples(chart_interval(self.end)).samples
        self._checked = 0
        self._seq = itertools.count(1)  # frame numbers, rising across re-executions
        #: Why the re-execution is not shown (it differs from the log, it failed), or None.
        self.problem: str | None = None

    def frame(self) -> dict[str, Any]:
        """The whole picture at the chosen time (re-executing up to it when needed)."""
        with self._at_lock:
            at = self.at
        with self._lock:
            if self.problem is None:
                try:
                    picture = self._replayed(at)
                except (TimeoutError, StoreError) as exc:
                    self.problem = str(exc)
                else:
                    if picture is not None:
                        return picture
        if self._stored is None:
            self._stored = StoredSource(self.run)
        self._stored.at = at
        frame = self._stored.frame()
        frame["seq"] = next(self._seq)
        frame["scrub"]["problem"] = self.problem
        return frame

    def _replayed(self, at: float) -> dict[str, Any] | None:
        replay = self._replay
        if replay is None or at < replay.at or (replay.done.is_set() and at < self.end):
            if replay is not None:
                replay.stop()
            replay = self._replay = _Replay(self.request)
            self._checked = 0
        replay.go_to(at, self.timeout)
        if replay.error is not None:
            self.problem = replay.error
            return None
        watcher, simu = replay.watcher, replay.simu
        if watcher is None or simu is None:
            self.problem = "the re-execution ended before its first step"
            return None
        self._check(simu)
        if self.problem is not None:
            return None
        watcher.read_now()
        frame = watcher.frame()
        # The chart: the run's samples before now, then the point of this read.
        frame["series"] = [*chart_series(self.samples, frame["session_id"], at),
                           *frame["series"][-1:]]
        frame.update({
            "seq": next(self._seq), "t": at, "state": "stored", "mode": "stored",
            "speed": None, "controls": False, "steps": False,
            "scrub": {"start": 0.0, "end": self.end, "at": at, "shown": at,
                      "exact": True, "snapshots": [t for _, t in self.snapshots]}})
        return frame

    def _check(self, simu: Simulation) -> None:
        """Compare the records the re-execution made since the last check with the log."""
        trace = simu.dispatcher.trace
        end = min(len(trace), self.records)
        if end <= self._checked:
            return
        stored = self.run.records(self._checked)
        try:
            for got, old in zip(trace.records_from(self._checked, end), stored, strict=False):
                if got != old:
                    self.problem = (f"the re-execution differs from the stored log at "
                                    f"record {old.seq} ({old.type} at t={old.t:g}): "
                                    "showing the fold of the log")
                    return
        finally:
            stored.close()
        self._checked = end

    def close(self) -> None:
        with self._lock:
            if self._replay is not None:
                self._replay.stop()
                self._replay = None


def open_source(run: StoredRun, *, script: str | os.PathLike[str] | None = None
                ) -> ReplaySource | StoredSource:
    """The scrubber for ``run``: by re-execution when it can be re-executed (``script``: its
    scenario file, see :class:`ReplaySource`), else by folding its log."""
    info = run.info
    if info is not None and info.mode == "deterministic" and info.scenario is not None:
        return ReplaySource(run, script=script)
    if script is not None:
        raise StoreError(f"store {run.path!r} holds no deterministic run of a scenario: "
                         "--script does not apply (its log is folded, nothing re-executed)")
    return StoredSource(run)


class StoredServer:
    """A stored run's page on a gateway server (an empty world: it takes no agents)."""

    def __init__(self, run: StoredRun, *, host: str = "127.0.0.1", port: int = 8765,
                 script: str | os.PathLike[str] | None = None,
                 allowed_hosts: Sequence[str] = (), operator: Operator | None = None) -> None:
        """``allowed_hosts``: ``Host`` values served besides the bound address
        (``--allow-host``; :class:`ValueError` for a malformed one). ``operator``: who may
        seek (default: a run-local view's, any loopback page)."""
        from barnraise.actors.world import Simulation
        from barnraise.gateway.hosting import HostedWorld
        from barnraise.gateway.server import Gateway, GatewayServer
        from barnraise.view.server import ViewSurface

        self.source = open_source(run, script=script)
        self._simulation = Simulation(seed=0)
        try:
            gateway = Gateway(HostedWorld(simulation=self._simulation), agents=False,
                              allowed_hosts=allowed_hosts)
            if operator is not None:
                gateway.operator = operator
            ViewSurface(self.source, gateway)
            self.server = GatewayServer(gateway, host, port)
        except BaseException:
            self._simulation.close()
            raise

    def close(self) -> None:
        self.server.stop()
        if isinstance(self.source, ReplaySource):
            self.source.close()
        self._simulation.close()


def serve_stored(run: StoredRun, *, host: str = "127.0.0.1", port: int = 8765,
                 script: str | os.PathLike[str] | None = None,
                 allowed_hosts: Sequence[str] = ()) -> int:
    """Serve the page of a stored run until SIGINT/SIGTERM; print its URL once; exit 0."""
    served = StoredServer(run, host=host, port=port, script=script,
                          allowed_hosts=allowed_hosts)
    try:
        served.server.run(on_ready=lambda url: print(f"{url}/", flush=True))
    finally:
        if isinstance(served.source, ReplaySource):
            served.source.close()
        served._simulation.close()
    return 0
