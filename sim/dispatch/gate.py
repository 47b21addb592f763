"""The run gate: pause, step and pace a deterministic run from another thread.

A :class:`Gate` sits in the deterministic loop, in front of every entry (a
delivery, a fan-out or a timer), where the world is between two steps. A viewer
drives it from its own thread:

* :meth:`Gate.pause` and :meth:`Gate.resume`: the loop stops in front of the
  next entry and waits there (virtual time stands still) until resumed;
* :meth:`Gate.step_events`: from a pause, let entries through until ``n`` more
  domain events have been recorded, then pause again; :meth:`Gate.step_time`:
  until the next entry would be past ``now + seconds``;
* :meth:`Gate.set_speed`: pace virtual time against the wall clock (simulated
  seconds per wall second; None: as fast as the machine goes);
* :meth:`Gate.call`: run a function on the loop's thread between two steps
  (a consistent read of the world while it runs or while it is paused).

The gate changes what runs *when* on the wall clock and nothing else: the order
of entries, virtual time and the trace are those of the same run without it
(``tests/test_gate.py`` compares digests). With every door open (running, no
pacing, nothing to call) the loop pays one attribute check per entry.

Every wait is bounded: a paused loop wakes every :data:`POLL` wall seconds to
look for work, and :meth:`Gate.close` (the viewer going away) opens it for good.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Final, TypeVar

__all__ = ["POLL", "Gate", "GateAborted", "GateClosed"]

#: Wall seconds a waiting loop sleeps at most before it looks again.
POLL: Final = 0.05

T = TypeVar("T")


class GateClosed(RuntimeError):
    """The gate was closed while a call waited for the loop."""


class GateAborted(RuntimeError):
    """Raised in the run's thread by a gate that was told to end the run
    (:meth:`Gate.abort`): the run stops where it stands."""


class _Job:
    __slots__ = ("done", "error", "fn", "result")

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.fn = fn
        self.done = threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.result = self.fn()
        except BaseException as exc:  # handed to the caller, never raised into the run
            self.error = exc
        finally:
            self.done.set()


class Gate:
    """Pause, step and pace a deterministic loop (see the module doc).

    ``paused``: start closed (the first entry waits for :meth:`resume` or a
    step). ``speed``: simulated seconds per wall second (None: unpaced).
    """

    def __init__(self, *, paused: bool = False, speed: float | None = None) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._paused = paused
        self._closed = False
        self._aborted = False
        self._holding = False
        self._speed: float | None = None
        self._anchor: tuple[float, float] | None = None  # (virtual t, wall) pacing starts at
        self._step_until: float | None = None
        self._step_events = 0
        self._jobs: deque[_Job] = deque()
        #: Domain events seen (:meth:`on_event`); what :meth:`step_events` counts.
        self.events = 0
        #: The virtual time of the entry last let through (or waited at).
        self.at = 0.0
        #: True when the loop may pass without calling :meth:`wait` (the fast path).
        self.open = True
        self.set_speed(speed)

    # -- the viewer's side -----------------------------------------------------------------

    @property
    def paused(self) -> bool:
        """True while the loop is held (also between the steps of a step)."""
        with self._cond:
            return self._paused and self._step_until is None and self._step_events == 0

    @property
    def speed(self) -> float | None:
        return self._speed

    def pause(self) -> None:
        with self._cond:
            self._paused = True
            self._step_until = None
            self._step_events = 0
            self._reopen()

    def resume(self) -> None:
        with self._cond:
            self._paused = False
            self._step_until = None
            self._step_events = 0
            self._anchor = None
            self._reopen()

    def step_events(self, n: int = 1) -> None:
        """Let the run go until ``n`` more domain events are recorded, then hold it."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"step_events needs a whole number >= 1, got {n!r}")
        with self._cond:
            self._paused = True
            self._step_until = None
            self._step_events = n
            self._reopen()

    def step_time(self, seconds: float = 1.0) -> None:
        """Let the run go until the next entry would be past ``at + seconds``, then hold it."""
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) \
                or not seconds > 0 or seconds == float("inf"):
            raise ValueError(f"step_time needs a number of seconds > 0, got {seconds!r}")
        with self._cond:
            self._paused = True
            self._step_events = 0
            self._step_until = self.at + float(seconds)
            self._reopen()

    def set_speed(self, speed: float | None) -> None:
        """Simulated seconds per wall second; None runs as fast as the machine goes."""
        if speed is not None and (isinstance(speed, bool) or not isinstance(speed, (int, float))
                                  or not 0 < speed < float("inf")):
            raise ValueError(f"speed must be a number > 0 or None, got {speed!r}")
        with self._cond:
            self._speed = None if speed is None else float(speed)
            self._anchor = None
            self._reopen()

    def call(self, fn: Callable[[], T], timeout: float) -> T:
        """``fn()`` run on the loop's thread between two steps; its result or its exception.

        TimeoutError when no loop came by within ``timeout`` wall seconds (no
        thread is running the dispatcher); GateClosed if the gate closed first.
        """
        job = _Job(fn)
        with self._cond:
            if self._closed:
                raise GateClosed("the gate is closed")
            self._jobs.append(job)
            self.open = False
            self._cond.notify_all()
        if not job.done.wait(timeout):
            with self._cond:
                try:
                    self._jobs.remove(job)
                except ValueError:  # taken meanwhile: it runs now, wait for it
                    pass
                else:
                    self._reopen()
                    raise TimeoutError(f"no run passed the gate within {timeout:g} s")
            if not job.done.wait(timeout):
                raise TimeoutError(f"a call at the gate took longer than {timeout:g} s")
        if job.error is not None:
            raise job.error
        return job.result  # type: ignore[no-any-return]

    def wait_held(self, timeout: float) -> bool:
        """Wait until the loop stands held at the gate (paused, no step under way) or the
        gate closes; False when ``timeout`` wall seconds pass first (a step still running,
        or no loop at the gate)."""
        with self._cond:
            return self._cond.wait_for(lambda: self._holding or self._closed, timeout)

    def abort(self) -> None:
        """End the run: the loop raises :class:`GateAborted` at its next entry (a re-execution
        nobody wants any more stops rather than running to its end)."""
        with self._cond:
            self._aborted = True
            self.open = False
            self._cond.notify_all()

    def close(self) -> None:
        """Open the gate for good (the viewer left): the run goes on unpaced."""
        with self._cond:
            self._closed = True
            self._paused = False
            self._speed = None
            jobs, self._jobs = list(self._jobs), deque()
            self.open = True
            self._cond.notify_all()
        for job in jobs:
            job.error = GateClosed("the gate closed before the run came by")
            job.done.set()

    def on_event(self, *_args: Any) -> None:
        """A trace listener: count domain events (a step by events ends on one)."""
        self.events += 1
        if self._step_events:
            with self._cond:
                if self._step_events:
                    self._step_events -= 1
                    if not self._step_events:
                        self._reopen()

    # -- the loop's side -------------------------------------------------------------------

    def _reopen(self) -> None:
        """Recompute the fast-path flag (holding the lock) and wake a waiting loop, which
        says again whether it holds (so :meth:`wait_held` never sees a stale hold)."""
        self._holding = False
        self.open = self._closed or (not self._paused and self._speed is None
                                     and not self._jobs and not self._aborted)
        self._cond.notify_all()

    def wait(self, t: float) -> None:
        """Called by the loop in front of an entry at virtual time ``t`` when not ``open``:
        run queued calls, then return when the entry may go."""
        cond = self._cond
        with cond:
            self.at = max(self.at, t) if self._step_until is None else self.at
            while True:
                if self._aborted and not self._closed:
                    self._holding = False
                    raise GateAborted("the run was ended at its gate")
                while self._jobs:
                    job = self._jobs.popleft()
                    cond.release()
                    try:
                        job.run()
                    finally:
                        cond.acquire()
                if self._closed:
                    self._holding = False
                    self._reopen()
                    return
                if self._paused:
                    if self._step_events:
                        break
                    if self._step_until is not None:
                        if t <= self._step_until:
                            break
                        self.at = self._step_until
                        self._step_until = None
                    if not self._holding:
                        self._holding = True
                        cond.notify_all()  # for wait_held
                    cond.wait(POLL)
                    continue
                if self._speed is not None:
                    wall = time.monotonic()
                    if self._anchor is None:
                        self._anchor = (t, wall)
                    due = self._anchor[1] + (t - self._anchor[0]) / self._speed
                    if due > wall:
                        cond.wait(min(POLL, due - wall))
                        continue
                break
            self._holding = False
            self.at = max(self.at, t)
            self._reopen()
