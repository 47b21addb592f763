"""Timers: run a callback in an actor's context later, once or every so often, and
count the work that keeps a run alive.

:class:`Timers` is one room of the dispatcher (:class:`barnraise.sim.dispatch.core.Dispatcher`
puts the rooms together). It makes the :class:`~barnraise.sim.dispatch.values.Timer`; each mode
keeps its own queue of them (``_schedule``, ``cancel_timer``, ``add_live_work``): the
deterministic heap, or the realtime timer thread. A base class of the dispatcher
rather than an object it holds because actors set a timer for every sleep and
every request's deadline (``Dispatcher.call_later`` is on the hot path).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from barnraise.sim.dispatch.routing import Router
from barnraise.sim.dispatch.values import Endpoint, Timer
from barnraise.sim.messages import Priority

__all__ = ["Timers"]


class Timers(Router):
    """Timers in an actor's context; the count of work that keeps a run going."""

    def call_later(
        self, delay: float, target: Endpoint, callback: Callable[..., None], *args: Any,
        daemon: bool = False, priority: int = Priority.NORMAL,
    ) -> Timer:
        """Run ``callback(*args)`` in ``target``'s context after ``delay`` simulation seconds.

        A daemon timer does not keep a run alive: periodic upkeep (heartbeats)
        uses it so that "run until nothing is left" still ends.
        """
        if not delay >= 0:
            raise ValueError(f"delay must be >= 0, got {delay!r}")
        # self is always a Dispatcher (this room is only ever one of its bases).
        timer = Timer(self, target, callback, args,  # type: ignore[arg-type]
                      self.clock.now + delay, daemon, priority)
        self._schedule(timer)
        return timer

    def call_at(
        self, due: float, target: Endpoint, callback: Callable[..., None], *args: Any,
        daemon: bool = False, priority: int = Priority.NORMAL,
    ) -> Timer:
        """As :meth:`call_later`, at simulation time ``due`` (now, if that has passed)."""
        timer = Timer(self, target, callback, args,  # type: ignore[arg-type]
                      max(due, self.clock.now), daemon, priority)
        self._schedule(timer)
        return timer

    def call_every(
        self, interval: float, target: Endpoint, callback: Callable[[], None],
        *, daemon: bool = True,
    ) -> Callable[[], None]:
        """Run ``callback`` every ``interval`` seconds until the returned function is called."""
        if not interval > 0:
            raise ValueError(f"interval must be > 0, got {interval!r}")
        current: list[Timer] = []

        def tick() -> None:
            current[0] = self.call_later(interval, target, tick, daemon=daemon)
            callback()

        current.append(self.call_later(interval, target, tick, daemon=daemon))
        return lambda: current[0].cancel()

    def _schedule(self, timer: Timer) -> None:
        raise NotImplementedError

    def cancel_timer(self, timer: Timer) -> None:
        """Make sure ``timer`` does not fire (``Timer.cancel`` calls this)."""
        raise NotImplementedError

    def add_live_work(self, delta: int) -> None:
        """Count ``delta`` (+1 or -1) pieces of work that keep a run going.

        For waits that hold no entry of their own in the dispatcher: a
        request's timeout lives in its actor's deadline queue, so the actor
        counts the request here while it is unanswered. A run without ``until``
        does not end (and realtime idle is not reached) while any is counted.
        """
        raise NotImplementedError
