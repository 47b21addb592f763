"""Recording a Simulation's metrics while it runs, without taking part in it.

:class:`Recorder` feeds a :class:`barnraise.sim.metrics.MetricsCollector` from a
:class:`~barnraise.actors.world.Simulation`:

* **events**: a :meth:`barnraise.sim.trace.Trace.listen` listener hears every domain event
  as the service that emits it records it (on that service's thread in realtime
  mode); the collector moves its counters and writes an event sample;
* **intervals**: every ``interval`` simulated seconds it reads each open
  session through the read API (``Simulation.view``, with the completion
  percentage; with the canvas only when keeping frames) and the dispatcher's
  counters (messages delivered and dropped, the deepest mailbox). In
  deterministic mode a daemon timer on the dispatcher does it, after everything
  else due at that instant (its priority, :data:`TICK_PRIORITY`, is below any
  letter's or timer's), so a sample at ``t`` shows the world after every record
  at or before ``t``: the fold of a stored log (``StoredRun.timeseries()``) takes
  its samples at the same place. It re-arms only while other work is queued, so
  it never keeps a run alive. In realtime mode a thread does it every ``interval / time_scale`` wall
  seconds, and the read API asks each owner on its own thread.

What a caller may rely on: the recorder sends no message and receives none, and
adds nothing to the trace, so a deterministic run has the same trace digest with
or without it (``tests/test_metrics.py`` checks every shipped scenario). A
sample that fails (a view timing out in realtime mode, say) is noted in
``Metrics.errors`` and skipped, never raised into the run. :meth:`finish` takes
the final sample and stops everything it started.
"""

from __future__ import annotations

import math
import threading
from typing import TYPE_CHECKING, Any, Final

from barnraise.sim.dispatch import DeterministicDispatcher, Statistics, Timer
from barnraise.sim.metrics import DEFAULT_INTERVAL, TICK_PRIORITY, Metrics, MetricsCollector
from barnraise.sim.reporters import ReporterSampler

if TYPE_CHECKING:
    from barnraise.actors.world import Simulation

__all__ = ["DEFAULT_INTERVAL", "Recorder"]

#: Largest frame side (cells) one may ask for.
MAX_FRAME_SIZE: Final = 4096


class _Tick:
    """The target of the recorder's timer: not an actor, never spawned, never messaged."""

    name = "recorder"
    stopped = False

    def a2a_timer(self, timer: Timer) -> None:
        if not timer.cancelled:
            timer.run()


class Recorder:
    """Records ``simu``'s metrics from now until :meth:`finish`.

    ``interval``: simulated seconds between interval samples (a number > 0).
    ``frame_size``: keep a canvas frame per session at every interval sample,
    downsampled to at most this many cells a side (0: no frames; at most
    :data:`MAX_FRAME_SIZE`). ``check`` (deterministic mode): read every task at
    every interval sample and compare the counts the events moved with them
    (``Metrics.drift``); otherwise tasks are read only at the end and after a
    rollback. ``reporters``: the run's own reporters (:mod:`barnraise.sim.reporters`),
    called at every interval and final sample with full views (canvas and tasks); a
    failure of one is kept in its :attr:`~ReporterSampler.failure`, not raised here.
    ValueError for a bad value, before anything starts.
    """

    def __init__(self, simu: Simulation, *, interval: float = DEFAULT_INTERVAL,
                 frame_size: int = 0, check: bool = False,
                 reporters: ReporterSampler | None = None) -> None:
        if isinstance(interval, bool) or not isinstance(interval, (int, float)) \
                or not math.isfinite(interval) or interval <= 0:
            raise ValueError(f"interval must be a finite number of seconds > 0, got {interval!r}")
        if isinstance(frame_size, bool) or not isinstance(frame_size, int) \
                or not 0 <= frame_size <= MAX_FRAME_SIZE:
            raise ValueError(f"frame_size must be an integer from 0 to {MAX_FRAME_SIZE}, "
                             f"got {frame_size!r}")
        self.simu = simu
        self.interval = float(interval)
        self.frame_size = frame_size
        self.check = bool(check)
        self.reporters = reporters if reporters else None
        dispatcher = simu.dispatcher
        self._deterministic = isinstance(dispatcher, DeterministicDispatcher)
        self.collector = MetricsCollector(self.interval, resync=self._deterministic,
                                          check=self._deterministic)
        self._finished: Metrics | None = None
        self._stop_listening = dispatcher.trace.listen(self.collector.on_event)
        self._timer: Timer | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        if self._deterministic:
            self._timer = dispatcher.call_later(self.interval, _Tick(), self._tick,  # type: ignore[arg-type]
                                                daemon=True, priority=TICK_PRIORITY)
        else:
            self._thread = threading.Thread(target=self._loop, name="barnraise-recorder",
                                            daemon=True)
            self._thread.start()

    # -- sampling --------------------------------------------------------------------------

    def _tick(self) -> None:
        dispatcher = self.simu.dispatcher
        self._timer = None
        stats = self.sample()
        if stats is None:
            stats = dispatcher.statistics()
        # Our own entry has left the queue: re-arm only if something else is in it,
        # so an otherwise empty queue stays empty (the run's verdict is unchanged).
        if not self._stop.is_set() and (stats.queued > 0 or stats.pending_timers > 0):
            self._timer = dispatcher.call_later(self.interval, _Tick(), self._tick,  # type: ignore[arg-type]
                                                daemon=True, priority=TICK_PRIORITY)

    def _loop(self) -> None:
        dispatcher = self.simu.dispatcher
        clock = dispatcher.clock
        regions = dispatcher.actor("regions")
        # The wall interval is read each time: a viewer may change the time scale.
        while not self._stop.wait(max(0.001, clock.to_wall(self.interval))):
            if regions.stopped:
                return  # the simulation was closed without finish(): nothing moves any more
            if dispatcher.holding:
                continue  # a held run's clock stands still: nothing new to sample
            self.sample()

    def sample(self, *, final: bool = False) -> Statistics | None:
        """Take an interval sample now (or the final one); errors are noted, not raised.

        Returns the dispatcher's statistics it read (None if the sample failed).
        """
        simu = self.simu
        collector = self.collector
        try:
            views = []
            read = []
            for session_id in simu.sessions():
                # Reading every task is most of a sample's cost; the events keep the
                # counts, so tasks are read only when they cannot (or to check them).
                tasks = final or self.check or collector.needs_tasks(session_id)
                # The run's own reporters see the whole view; the collector still takes
                # the task counts from the events unless ``tasks`` (its rows stay the
                # ones a run without reporters records).
                whole = self.reporters is not None
                try:
                    views.append(simu.view(session_id, canvas=whole or self.frame_size > 0,
                                           completion=True, tasks=whole or tasks))
                except LookupError:
                    continue  # closed meanwhile
                read.append(tasks)
            stats = simu.dispatcher.statistics()
            now = simu.now  # once: a realtime clock moves between two reads
            number, agents = collector.sample(
                now, views, delivered=stats.delivered,
                dropped=sum(stats.dead_letters.values()), mailbox=self._deepest(),
                final=final, frame_size=self.frame_size, tasks_read=read)
            if self.reporters is not None:
                self.reporters.sample(number, now, views, agents)
            return stats
        except Exception as exc:  # a failed sample must not stop the run
            collector.note_error(f"t={simu.now:g}: {type(exc).__name__}: {exc}")
            return None

    def _deepest(self) -> tuple[int, str | None]:
        """The most letters waiting in one mailbox, and whose (the runtime's counters)."""
        depth, who = 0, None
        for name, actor in list(self.simu.dispatcher.actors.items()):
            waiting = actor.pending if self._deterministic else _inbox_size(actor)
            if waiting > depth:
                depth, who = waiting, str(name)
        return depth, who

    # -- the end ---------------------------------------------------------------------------

    def finish(self) -> Metrics:
        """Take the final sample, stop the timer or thread and the listener; what was recorded.

        Calling it again returns the same Metrics.
        """
        if self._finished is not None:
            return self._finished
        self._stop.set()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._thread is not None:
            self._thread.join(timeout=30.0)
        self.sample(final=True)
        self._stop_listening()
        result = self.collector.result()
        if self.reporters is not None:
            result.reporters = tuple(self.reporters.reporters)
            result.agent_reporters = tuple(self.reporters.agent_reporters)
            result.reported = list(self.reporters.rows)
        self._finished = result
        return self._finished


def _inbox_size(actor: Any) -> int:
    try:
        return len(actor.actor_inbox)
    except TypeError:
        return 0
