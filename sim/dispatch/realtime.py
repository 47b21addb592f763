"""The realtime scheduler: every actor on its own pykka thread, wall time scaled.

Each message is offered straight into the recipient's mailbox; the actor's
thread takes it out and runs the same delivery step as the deterministic loop
(:meth:`~barnraise.sim.dispatch.core.Dispatcher.deliver`). One timer thread serves every
timer and sleep. Time is wall time times ``time_scale``.

An actor whose mailbox is ``inline`` (a gateway's Client: ``barnraise.actors.client.InlineMailbox``)
has its letters handed over through the mailbox's ``accept`` on the sending thread
instead: no hop through a thread of its own for a reply to an outside caller.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from heapq import heapify, heappop, heappush
from typing import Unpack

from barnraise.sim.clock import WallClock
from barnraise.sim.dispatch.core import SYSTEM, Dispatcher, DispatcherOptions
from barnraise.sim.dispatch.values import (
    DELIVERED,
    DROPPED,
    OFFLINE,
    WAKE,
    Endpoint,
    RunReport,
    Statistics,
    Timer,
)
from barnraise.sim.messages import Message

__all__ = ["RealtimeDispatcher", "RealtimeOptions"]


class _Tally:
    """A count many threads add to without a lock (``add``); ``read`` takes one.

    ``next()`` on an ``itertools.count`` is atomic in CPython; reading it
    advances it too, so reads are counted and subtracted.
    """

    __slots__ = ("_count", "_lock", "_reads", "add")

    def __init__(self) -> None:
        self._count = itertools.count()
        self.add = self._count.__next__
        self._reads = 0
        self._lock = threading.Lock()

    def read(self) -> int:
        with self._lock:
            value = next(self._count) - self._reads
            self._reads += 1
        return value


class _TimerThread:
    """The realtime dispatcher's one thread for every timer and sleep."""

    def __init__(self, dispatcher: RealtimeDispatcher) -> None:
        self._dispatcher = dispatcher
        self._heap: list[tuple[float, int, Timer]] = []
        self._seq = itertools.count()
        self._cond = threading.Condition(threading.Lock())
        self._closed = False
        self._held = False  # hold(): fire nothing until release()
        self.live = 0  # non-daemon timers scheduled and not yet fired or cancelled
        self._thread = threading.Thread(target=self._loop, name="barnraise-timers", daemon=True)
        self._thread.start()

    def schedule(self, timer: Timer, wall_delay: float) -> None:
        with self._cond:
            if not timer.daemon:
                self.live += 1
            heappush(self._heap, (time.monotonic() + wall_delay, next(self._seq), timer))
            self._cond.notify()

    def cancel(self, timer: Timer) -> None:
        with self._cond:
            if not timer.cancelled:
                timer.cancelled = True
                if not timer.fired and not timer.daemon:
                    self.live -= 1

    def fired(self, timer: Timer) -> None:
        with self._cond:
            timer.fired = True
            if not timer.cancelled and not timer.daemon:
                self.live -= 1

    def hold(self) -> None:
        """Fire no timer until :meth:`release` (the clock is frozen meanwhile)."""
        with self._cond:
            self._held = True

    def release(self, clock: WallClock) -> None:
        """Fire again, each timer at its simulated due time on ``clock`` as it now runs
        (after a hold, or a change of scale)."""
        with self._cond:
            self._held = False
            wall, now = time.monotonic(), clock.now
            self._heap = [(wall + clock.to_wall(t.due - now), seq, t) for _, seq, t in self._heap]
            heapify(self._heap)
            self._cond.notify()

    def pending(self) -> int:
        with self._cond:
            return sum(1 for _, _, t in self._heap if not t.cancelled)

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._closed and (
                    self._held or not self._heap or self._heap[0][0] > time.monotonic()
                ):
                    wait = self._heap[0][0] - time.monotonic() if self._heap else 1.0
                    self._cond.wait(timeout=max(0.0, min(wait, 1.0)))
                if self._closed:
                    return
                _, _, timer = heappop(self._heap)
            if not timer.cancelled:
                self._dispatcher._fire(timer)

    def close(self, timeout: float) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join(timeout)


class RealtimeOptions(DispatcherOptions, total=False):
    """:class:`RealtimeDispatcher`'s options: both modes' and its own."""

    time_scale: float
    idle_timeout: float


class RealtimeDispatcher(Dispatcher):
    """Every actor on its own pykka thread; wall time scaled by ``time_scale``.

    ``idle_timeout`` (wall seconds) is how long the system must stay idle
    before :meth:`run` without ``until`` calls it quiescent (or deadlocked).
    """

    mode = "realtime"

    def __init__(
        self, seed: int = 0, *, time_scale: float = 1.0, idle_timeout: float = 0.1,
        **options: Unpack[DispatcherOptions],
    ) -> None:
        super().__init__(seed, **options)
        self.clock: WallClock = WallClock(time_scale)
        self.idle_timeout = idle_timeout
        self._timers = _TimerThread(self)
        self._closed = False
        # Counts every letter offered that idle detection waits for (see in_flight).
        self._offered = _Tally()
        # Work counted by add_live_work (unanswered requests): what was held
        # and what was released, each a lock-free tally (see in_flight).
        self._held_work = _Tally()
        self._released_work = _Tally()
        # Starts held by start_together(): only the opening thread's spawns are
        # held; the lock keeps a stop or spawn elsewhere from racing the release.
        self._held: list[Endpoint] | None = None
        self._held_by: int | None = None
        self._held_lock = threading.Lock()
        # pause(): wall time spent held so far, and since when it is held now.
        self._hold_lock = threading.Lock()
        self._held_total = 0.0
        self._held_since: float | None = None

    @property
    def now(self) -> float:
        return self.clock.now

    def _start(self, actor: Endpoint) -> None:
        with self._held_lock:
            if self._held is not None and self._held_by == threading.get_ident():
                self._held.append(actor)
                return
        import pykka  # the realtime mode is the only place that starts threads

        pykka.ActorRegistry.register(actor.actor_ref)  # type: ignore[attr-defined]
        actor._start_actor_loop()  # type: ignore[attr-defined]

    @contextmanager
    def start_together(self) -> Iterator[None]:
        with self._held_lock:
            if self._held is not None:
                if self._held_by != threading.get_ident():
                    raise RuntimeError("start_together() is already open on another thread")
                nested = True  # the outer block starts them all
            else:
                nested = False
                self._held, self._held_by = [], threading.get_ident()
        if nested:
            yield
            return
        try:
            yield
        finally:
            with self._held_lock:
                held, self._held, self._held_by = self._held or [], None, None
            for actor in held:
                if not actor.stopped:
                    self._start(actor)
                else:  # stopped while held: it never runs, so it is stopped now
                    actor.actor_stopped.set()  # type: ignore[attr-defined]

    # -- holding the whole run (a viewer's pause) --------------------------------------

    def pause(self) -> None:
        """Hold the run: the clock stops, no timer fires, and every actor keeps the
        letters it takes out of its mailbox (in order) instead of handling them. Calls
        on an actor's own thread (``Simulation.view``) are still answered. A handler
        already running finishes; what it sends waits too."""
        with self._hold_lock:
            if self.holding:
                return
            self.clock.freeze()
            self._timers.hold()
            self.holding = True
            self._held_since = time.monotonic()

    def resume(self) -> None:
        """Let a held run go on from where it stopped."""
        with self._hold_lock:
            if not self.holding:
                return
            self.clock.thaw()
            self._timers.release(self.clock)
            self.holding = False
            if self._held_since is not None:
                self._held_total += time.monotonic() - self._held_since
                self._held_since = None
            for actor in list(self._endpoints.values()):  # wake those waiting on a mailbox
                if not actor.stopped:
                    actor.actor_inbox.offer(WAKE, 10, bounded=False)

    def set_time_scale(self, time_scale: float) -> None:
        """Run at ``time_scale`` simulated seconds per wall second from now on; pending
        timers keep their simulated due times."""
        with self._hold_lock:
            self.clock.set_scale(time_scale)
            if not self.holding:
                self._timers.release(self.clock)

    def active_wall(self) -> float:
        """Wall seconds (``time.monotonic`` scale) with the time spent held left out:
        what a wall-clock timeout should count, so a pause does not run one out."""
        now = time.monotonic()
        since = self._held_since
        return now - self._held_total - (now - since if since is not None else 0.0)

    def _stop(self, actor: Endpoint) -> None:
        with self._held_lock:
            if self._held is not None and actor in self._held:  # never started: no thread
                self._held.remove(actor)
                actor.actor_stopped.set()  # type: ignore[attr-defined]
                return
        actor.actor_ref.stop(block=False)  # type: ignore[attr-defined]

    def _route_one(self, endpoint: Endpoint, message: Message, encoded: bytes) -> str:
        name = endpoint.name
        if name in self._offline:
            self.dead_letter(message, "offline", name)
            return OFFLINE
        inbox = endpoint.actor_inbox
        if inbox.inline:
            # Handled on this thread (a gateway's Client): counted offered first, so that
            # in_flight never sees it handled before it was offered.
            self._offered.add()
            inbox.accept((message, encoded))
            return DELIVERED
        if not inbox.offer((message, encoded), message.priority):
            self.dead_letter(message, "mailbox_full", name)
            return DROPPED
        self._offered.add()
        return DELIVERED

    def _schedule(self, timer: Timer) -> None:
        self._timers.schedule(timer, self.clock.to_wall(timer.due - self.clock.now))

    def cancel_timer(self, timer: Timer) -> None:
        self._timers.cancel(timer)

    def add_live_work(self, delta: int) -> None:
        add = self._held_work.add if delta > 0 else self._released_work.add
        for _ in range(abs(delta)):
            add()

    def _fire(self, timer: Timer) -> None:
        target = timer.target
        if not target.stopped:
            inbox = target.actor_inbox
            if inbox.inline:
                if not timer.daemon:
                    self._offered.add()
                inbox.accept(timer)
            else:
                inbox.offer(timer, timer.priority, bounded=False)
                if not timer.daemon:
                    self._offered.add()
        # Count the timer done only after its letter is in a mailbox, so the
        # idle check never sees a moment with neither.
        self._timers.fired(timer)

    def in_flight(self) -> int:
        """Letters offered and not yet handled, live timers and live work: 0 means truly idle.

        Daemon timers (and their letters) are left out, as in deterministic
        mode; live work is what actors hold through :meth:`add_live_work`
        (unanswered requests). The reads go handled -> released -> timers ->
        held -> offered, so every race makes the figure larger, never smaller:
        a handled letter was offered before it was handled, a timer letter is
        offered before its timer stops being live, work is held before it is
        released, and a handler's sends, timers and holds and releases happen
        before it counts as handled. (A request that times out is released
        only after its behaviour has taken its next step, so whatever that step
        sends is offered first.) Zero is therefore never a false idle.
        """
        handled = 0
        for actor in [*self._endpoints.values(), *self._lives.retired]:
            handled += actor.handled
        released = self._released_work.read()
        live = self._timers.live
        held = self._held_work.read()
        offered = self._offered.read()
        return offered - handled + live + held - released

    def wait_idle(self, timeout: float = 30.0, *, settle: float | None = None) -> bool:
        """Block until nothing is in flight, and has stayed so for ``settle`` wall seconds.

        ``settle`` defaults to ``idle_timeout``. False if ``timeout`` passes first.
        """
        settle = self.idle_timeout if settle is None else settle
        deadline = time.monotonic() + timeout
        idle_since: float | None = None
        while True:
            wall = time.monotonic()
            if self.in_flight() > 0:
                idle_since = None
            elif idle_since is None:
                idle_since = wall
            if idle_since is not None and wall - idle_since >= settle:
                return True
            if wall >= deadline:
                return False
            time.sleep(0.002)

    def run(self, until: float | None = None, *, max_steps: int | None = None) -> RunReport:
        """Wait until simulation time ``until``, or without it until idle.

        Idle means no letter in flight and no live timer for ``idle_timeout``
        wall seconds; then the reason is ``quiescent`` or ``deadlock``.
        """
        poll = 0.005
        if until is not None:
            while self.clock.now < until:
                time.sleep(min(poll, max(0.0, self.clock.to_wall(until - self.clock.now))))
            return RunReport("until", self.clock.now, None, delivered=self._delivered())
        if max_steps is not None:
            raise ValueError("max_steps applies to the deterministic dispatcher only")
        while not self.wait_idle(timeout=3600.0):
            pass
        waiting = tuple(self.waiters())
        if waiting:
            self.trace.event(self.clock.now, SYSTEM, SYSTEM, "deadlock",
                             {"waiters": [str(w) for w in waiting]})
            return RunReport("deadlock", self.clock.now, None, waiting,
                             delivered=self._delivered())
        return RunReport("quiescent", self.clock.now, None, delivered=self._delivered())

    def _delivered(self) -> int:
        """Letters handled so far by every actor, the retired ones too."""
        return sum(a.delivered for a in [*self._endpoints.values(), *self._lives.retired])

    def statistics(self) -> Statistics:
        actors = list(self._endpoints.values())
        return Statistics(
            mode=self.mode, now=self.clock.now, actors=len(actors),
            delivered=self._delivered(),
            queued=sum(len(a.actor_inbox) for a in actors), dead_letters=dict(self._dead),
            behaviour_errors=self.behaviour_errors, pending_timers=self._timers.pending(),
            trace_records=len(self.trace),
        )

    def shutdown(self, timeout: float = 5.0) -> None:
        """Stop every actor (after its queued mail) and the timer thread; bounded wait."""
        if self._closed:
            return
        self.resume()  # a held run is let go first: the letters its actors kept are handled
        self._closed = True
        for name in list(self._endpoints):
            self.stop_actor(name)
        deadline = time.monotonic() + timeout
        for actor in [*self._endpoints.values(), *self._lives.retired]:
            actor.actor_stopped.wait(max(0.0, deadline - time.monotonic()))  # type: ignore[attr-defined]
        self._timers.close(max(0.0, deadline - time.monotonic()))
