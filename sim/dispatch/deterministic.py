"""The deterministic scheduler: one thread, virtual time, a reproducible order.

Entries (deliveries, fan-outs, timers) leave in ``(time, -priority, seq)``
order and every handler runs on the thread that calls
:meth:`DeterministicDispatcher.run`; the virtual clock jumps to each entry's
time. Same seed, same trace digest.
"""

from __future__ import annotations

import contextlib
import gc
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from heapq import heappop, heappush
from typing import Any, Unpack

from barnraise.sim.clock import VirtualClock
from barnraise.sim.dispatch.core import SYSTEM, Dispatcher, DispatcherOptions
from barnraise.sim.dispatch.gate import Gate
from barnraise.sim.dispatch.values import (
    DELIVERED,
    DROPPED,
    OFFLINE,
    Endpoint,
    RunReport,
    SendReport,
    Statistics,
    Timer,
)
from barnraise.sim.messages import Message

__all__ = ["LOOP_GC_THRESHOLD", "DeterministicDispatcher", "DeterministicOptions"]

#: The cyclic collector's first threshold while the loop runs (Python's default is
#: 700). Every delivery allocates a few short-lived containers (the message, its
#: content, the trace record, a coroutine step's values), nearly all freed by their
#: reference counts; at 700 the collector ran a young collection every few hundred
#: deliveries and a full one (the whole heap, the trace included) every ~70,000
#: allocations. A full kernel_build (100,000 records) runs about 4% faster at 10,000
#: (``python -m benchmarks --only runtime``, ``loop_collector``; docs/benchmarks.md);
#: the cost is at most that many more young objects alive between collections.
LOOP_GC_THRESHOLD = 10_000


@contextlib.contextmanager
def _fewer_collections() -> Iterator[None]:
    """Raise the collector's first threshold to :data:`LOOP_GC_THRESHOLD` for the block,
    unless the program has set one as high or higher (or turned collection off), and
    put the program's own back after it."""
    before = gc.get_threshold()
    if not before[0] or before[0] >= LOOP_GC_THRESHOLD:
        yield
        return
    gc.set_threshold(LOOP_GC_THRESHOLD, *before[1:])
    try:
        yield
    finally:
        if gc.get_threshold()[0] == LOOP_GC_THRESHOLD:  # nobody changed it meanwhile
            gc.set_threshold(*before)


class DeterministicOptions(DispatcherOptions, total=False):
    """:class:`DeterministicDispatcher`'s options: both modes' and its own."""

    latency: float


class DeterministicDispatcher(Dispatcher):
    """One thread, virtual time, entries ordered by ``(time, -priority, seq)``.

    The order is kept by a heap of ``(time, -priority)`` keys, each with a FIFO
    bucket: entries with the same key leave in arrival (``seq``) order, which
    is exactly the order one big heap would give, at O(1) per entry instead of
    O(log n) tuple comparisons. ``latency`` (simulation seconds, default 0) is
    added to every delivery.
    """

    mode = "deterministic"

    def __init__(self, seed: int = 0, *, latency: float = 0.0,
                 **options: Unpack[DispatcherOptions]) -> None:
        super().__init__(seed, **options)
        if not latency >= 0:
            raise ValueError(f"latency must be >= 0, got {latency!r}")
        self.clock: VirtualClock = VirtualClock()
        self.latency = latency
        self._keys: list[tuple[float, int]] = []
        # Bucket entries: (target, item, encoded). For a message, target is the
        # recipient's *name* (or a tuple of names for one fan-out): a tuple of
        # strings, an untracked message and bytes is untracked by the cyclic GC
        # after one pass, where an endpoint object would keep every queued entry
        # in every full collection (a quarter of the time at 200,000 queued).
        # For a timer, target is the endpoint, item the Timer and encoded None.
        # A bucket emptied by the loop stays until the loop finds it empty at the
        # head of the heap: a handler answering at the same instant and priority
        # (a request's reply) then reuses it, with no heap push or pop.
        self._buckets: dict[tuple[float, int], deque[tuple[Any, Any, Any]]] = {}
        # Work that keeps a run going: queued messages, non-daemon timers, and
        # what actors count through add_live_work (unanswered requests).
        self._live = 0
        self._steps = 0
        #: The run gate a viewer pauses, steps and paces the loop with (None: none).
        self.gate: Gate | None = None
        #: Simulated seconds past which nothing runs (None: no limit): every ``run`` and
        #: ``run_until`` stops at it as at its own ``until`` or deadline (a sweep's
        #: ``max_time``). Nothing past it is dropped; it stays queued.
        self.horizon: float | None = None

    def attach_gate(self, gate: Gate) -> Callable[[], None]:
        """Put ``gate`` in front of every entry (see :mod:`barnraise.sim.dispatch.gate`); returns
        the function that takes it away again (and opens it)."""
        if self.gate is not None:
            raise RuntimeError("this dispatcher already has a gate")
        self.gate = gate
        stop_listening = self.trace.listen(gate.on_event)

        def detach() -> None:
            stop_listening()
            if self.gate is gate:
                self.gate = None
            gate.close()

        return detach

    @property
    def now(self) -> float:
        return self.clock.now

    def _push(self, t: float, negprio: int, entry: tuple[Any, Any, Any]) -> None:
        key = (t, negprio)
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = deque()
            heappush(self._keys, key)
        bucket.append(entry)

    def _start(self, actor: Endpoint) -> None:
        actor.on_start()

    def _stop(self, actor: Endpoint) -> None:
        try:
            actor.on_stop()
        except Exception as exc:  # an on_stop bug must not stop the world
            self.report_error(actor.name, "on_stop", exc)
        actor.a2a_stopped()

    def _route_one(self, endpoint: Endpoint, message: Message, encoded: bytes) -> str:
        offline = self._offline
        if offline and endpoint.name in offline:
            self.dead_letter(message, "offline", endpoint.name)
            return OFFLINE
        if endpoint.pending >= endpoint.capacity:
            self.dead_letter(message, "mailbox_full", endpoint.name)
            return DROPPED
        endpoint.pending += 1
        self._live += 1
        # _push, inlined: this is every direct send's path.
        key = (self.clock.now + self.latency, -message.priority)
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = deque()
            heappush(self._keys, key)
        bucket.append((endpoint.name, message, encoded))
        return DELIVERED

    def _route_batch(
        self, message: Message, encoded: bytes, targets: Sequence[Endpoint],
    ) -> SendReport:
        # One entry for the whole fan-out; _deliver_batch keeps it equivalent to
        # one entry per recipient with consecutive seqs.
        statuses: dict[str, str] = {}
        accepted: list[str] = []
        offline = self._offline
        for endpoint in targets:
            name = endpoint.name
            if name in offline:
                self.dead_letter(message, "offline", name)
                statuses[name] = OFFLINE
            elif endpoint.pending >= endpoint.capacity:
                self.dead_letter(message, "mailbox_full", name)
                statuses[name] = DROPPED
            else:
                endpoint.pending += 1
                accepted.append(name)
                statuses[name] = DELIVERED
        if accepted:
            self._live += len(accepted)
            self._push(self.clock.now + self.latency, -message.priority,
                       (tuple(accepted), message, encoded))
        return SendReport(message.message_id, statuses)

    def _schedule(self, timer: Timer) -> None:
        if not timer.daemon:
            self._live += 1
        # _push, inlined: every timer (a sleep, a sweep, a lease) comes this way.
        key = (timer.due, -timer.priority)
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = deque()
            heappush(self._keys, key)
        bucket.append((timer.target, timer, None))

    def cancel_timer(self, timer: Timer) -> None:
        if not timer.cancelled:
            timer.cancelled = True
            if not timer.fired and not timer.daemon:
                self._live -= 1

    def add_live_work(self, delta: int) -> None:
        self._live += delta

    def _head(self) -> tuple[float, int] | None:
        """The key of the next entry, dropping emptied buckets; None when none is left."""
        keys, buckets = self._keys, self._buckets
        while keys:
            key = keys[0]
            if buckets[key]:
                return key
            heappop(keys)
            del buckets[key]
        return None

    def step(self) -> bool:
        """Process the next entry (a delivery, a fan-out or a timer). False if none (or
        none before the :attr:`horizon`)."""
        head = self._head()
        if head is None or (self.horizon is not None and head[0] > self.horizon):
            return False
        self.run(max_steps=1, _any=True)
        return True

    def run_until(self, done: Callable[[], bool], deadline: float | None = None) -> bool:
        """Process entries until ``done()`` holds; False if it cannot any more.

        Without a deadline it cannot once nothing live is left (only daemon
        upkeep remains). With one, everything due by the deadline runs, daemon
        upkeep included, and the clock then stands at the deadline.
        """
        with _fewer_collections():
            return self._run_until(done, deadline)

    def _run_until(self, done: Callable[[], bool], deadline: float | None) -> bool:
        horizon = self.horizon
        if horizon is not None:
            deadline = horizon if deadline is None else min(deadline, horizon)
        while not done():
            head = self._head()
            if deadline is None:
                if head is None or self._live <= 0:
                    return False
            elif head is None or head[0] > deadline:
                self.clock.now = max(self.clock.now, deadline)
                return done()
            self.run(max_steps=1, _any=True)
        return True

    def run(
        self, until: float | None = None, *, max_steps: int | None = None, _any: bool = False,
    ) -> RunReport:
        """Process entries in order.

        Without ``until``: until nothing live is left, only daemon timers
        (``quiescent``, or ``deadlock`` if behaviours still wait). With
        ``until``: until the clock would pass it; the clock then stands at
        ``until``. Every message goes through :meth:`Dispatcher.deliver`.
        """
        if until is not None and until < self.clock.now:
            raise ValueError(f"until={until} is before now={self.clock.now}")
        horizon = self.horizon
        if horizon is not None and (until is None or until > horizon):
            until = max(horizon, self.clock.now)
        if _any:  # one step of run_until's, which has seen to the collector
            return self._run(until, max_steps, _any)
        with _fewer_collections():
            return self._run(until, max_steps, _any)

    def _run(self, until: float | None, max_steps: int | None, _any: bool) -> RunReport:
        keys = self._keys
        buckets = self._buckets
        clock = self.clock
        endpoints = self._endpoints
        deliver = self.deliver
        limit = max_steps if max_steps is not None else -1
        steps = 0
        gate = self.gate
        # The hot loop: one iteration per entry.
        while keys:
            key = keys[0]
            bucket = buckets[key]
            if not bucket:
                heappop(keys)
                del buckets[key]
                continue
            t = key[0]
            if until is None:
                if self._live <= 0 and not _any:
                    break
            elif t > until:
                break
            if steps == limit:
                self._steps += steps
                return RunReport("max_steps", clock.now, steps)
            if gate is not None and not gate.open:
                gate.wait(t)  # held, paced or asked to run a read; the entry stays put
            target, item, encoded = bucket.popleft()
            steps += 1
            if encoded is None:
                # A timer fires here and nowhere else in this mode (every sleep, sweep
                # and lease comes this way, so it is no method of its own).
                if item.cancelled:
                    continue
                clock.now = t
                item.fired = True
                if not item.daemon:
                    self._live -= 1
                if target.stopped:
                    continue
                try:
                    target.a2a_timer(item)
                except Exception as exc:
                    self.report_error(target.name, "timer", exc)
                continue
            clock.now = t
            if type(target) is tuple:
                self._deliver_batch(key, target, item, encoded)
                continue
            target = endpoints[target]
            self._live -= 1
            target.pending -= 1
            deliver(target, item, encoded, t)
        self._steps += steps
        if _any:
            return RunReport("max_steps", clock.now, steps)
        if until is not None:
            clock.now = max(clock.now, until)
        # With `until`, daemon upkeep (heartbeats, lease checks) may still wake a
        # waiter later, so only an empty queue is a verdict; without it, a run
        # ends as soon as only daemon timers remain.
        waiting = tuple(self.waiters()) if until is None or self._head() is None else ()
        if waiting:
            self.trace.event(clock.now, SYSTEM, SYSTEM, "deadlock",
                             {"waiters": [str(w) for w in waiting]})
            return RunReport("deadlock", clock.now, steps, waiting)
        return RunReport("quiescent" if until is None else "until", clock.now, steps)

    def _deliver_batch(
        self, key: tuple[float, int], targets: tuple[str, ...], message: Message, encoded: bytes,
    ) -> None:
        keys = self._keys
        endpoints = self._endpoints
        deliver = self.deliver
        t = key[0]
        for i, name in enumerate(targets):
            if i and keys and keys[0] < key:
                # A handler just sent something more urgent for this instant: it
                # goes first, as it would with one entry per recipient. The rest
                # of the fan-out goes back to the front of its bucket.
                bucket = self._buckets.get(key)
                if bucket is None:
                    bucket = self._buckets[key] = deque()
                    heappush(keys, key)
                bucket.appendleft((targets[i:], message, encoded))
                return
            target = endpoints[name]
            self._live -= 1
            target.pending -= 1
            deliver(target, message, encoded, t)

    def statistics(self) -> Statistics:
        pending_timers = sum(
            1 for bucket in self._buckets.values() for entry in bucket
            if entry[2] is None and not entry[1].cancelled
        )
        endpoints = list(self._endpoints.values())
        return Statistics(
            mode=self.mode, now=self.clock.now, actors=len(endpoints),
            delivered=sum(a.delivered for a in [*endpoints, *self._lives.retired]),
            queued=sum(a.pending for a in endpoints),
            dead_letters=dict(self._dead),
            behaviour_errors=self.behaviour_errors, pending_timers=pending_timers,
            trace_records=len(self.trace),
        )

    def shutdown(self, timeout: float = 5.0) -> None:
        for name in list(self._endpoints):
            self.stop_actor(name)
