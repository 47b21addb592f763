"""The dispatcher: its rooms put together, and what a run of either mode answers.

:class:`Dispatcher` is the base of both modes (``barnraise.sim.dispatch.deterministic``,
``barnraise.sim.dispatch.realtime``). It is made of three rooms, each a module of its own:

* :mod:`barnraise.sim.dispatch.routing` (:class:`~barnraise.sim.dispatch.routing.Router`): messages,
  routing, topics, domain events, dead letters and the one delivery step both
  schedulers call (:meth:`~barnraise.sim.dispatch.routing.Router.deliver`);
* :mod:`barnraise.sim.dispatch.lifecycle` (:class:`~barnraise.sim.dispatch.lifecycle.Lifecycle`):
  spawn,
  stop, crash, respawn and death watch;
* :mod:`barnraise.sim.dispatch.timers` (:class:`~barnraise.sim.dispatch.timers.Timers`): timers and
  the
  work that keeps a run alive.

Here: the state the rooms share (made once, in :meth:`Dispatcher.__init__`), the
options both modes take, and running, statistics and durability. The rooms are base
classes rather than held objects because the hot path reads their shared state on
every message (see :mod:`barnraise.sim.dispatch.routing`).

Actors are anything that satisfies :class:`~barnraise.sim.dispatch.values.Endpoint`;
this package never imports ``actors``.
"""

from __future__ import annotations

import functools
import itertools
import secrets
import threading
from collections import Counter, deque
from collections.abc import Callable, Mapping
from typing import Any, TypedDict

import numpy as np

from barnraise.sim.dispatch.faults import FaultInjector, Faults
from barnraise.sim.dispatch.lifecycle import Lifecycle, Lives
from barnraise.sim.dispatch.routing import ERRORS_TOPIC, SYSTEM, Router, answers
from barnraise.sim.dispatch.timers import Timers
from barnraise.sim.dispatch.values import RunReport, Statistics
from barnraise.sim.messages import DEFAULT_MAX_CONTENT_BYTES
from barnraise.sim.trace import Trace

__all__ = ["ERRORS_TOPIC", "SYSTEM", "Dispatcher", "DispatcherOptions", "answers"]


class DispatcherOptions(TypedDict, total=False):
    """The options both dispatchers take (keyword arguments of :class:`Dispatcher`)."""

    mailbox_capacity: int
    sign_messages: bool
    secret: bytes | None
    max_content_bytes: int
    trace: bool
    dead_letter_log: int
    faults: Faults | str | Mapping[str, Any] | None


class Dispatcher(Lifecycle, Timers):
    """Routing, actors' lives and timers (the rooms), shared by both modes."""

    # Class-level defaults, set on an instance only when in use: past 30 instance
    # attributes CPython gives an object a dict of its own, and every attribute read on
    # the delivery path gets slower (measured: 4-5% of a request/reply round trip).
    # The fault plan and the crash handler are the rooms' own (Router, Lifecycle).
    #: Called with the caller's name before an agent's tool call is answered
    #: (``make_durable``): a store's commit, so that acknowledged means durable
    #: (None: nothing to do).
    durable: Callable[[str], None] | None = None

    def __init__(
        self,
        seed: int = 0,
        *,
        mailbox_capacity: int = 1000,
        sign_messages: bool = False,
        secret: bytes | None = None,
        max_content_bytes: int = DEFAULT_MAX_CONTENT_BYTES,
        trace: bool = True,
        dead_letter_log: int = 10_000,
        faults: Faults | str | Mapping[str, Any] | None = None,
    ) -> None:
        if type(seed) is not int or seed < 0:
            raise ValueError(f"seed must be a non-negative int, got {seed!r}")
        if mailbox_capacity < 1:
            raise ValueError(f"mailbox_capacity must be at least 1, got {mailbox_capacity}")
        self.seed = seed
        self.mailbox_capacity = mailbox_capacity
        self.sign_messages = sign_messages
        root = np.random.SeedSequence(seed)
        # The key that signs messages: given, or from the operating system. It was once
        # drawn from the seed, so anyone who knew the seed could sign as any agent; no
        # signature is in the trace, so the digest does not depend on it.
        self.secret = secret if secret is not None else secrets.token_bytes(32)
        self.max_content_bytes = max_content_bytes
        self.trace = Trace(enabled=trace)
        self._id_prefix = f"m{root.generate_state(1, np.uint32)[0]:08x}-"
        self._ids = itertools.count(1)
        self._endpoints = {}
        self._agents = {}  # non-service endpoints, spawn order
        self._by_type = {}
        self._topics = {}
        # topic -> (its subscriptions, their endpoints) when none has a filter (_publish)
        self._plain = {}
        self._subs_by_id = {}
        self._offline = set()
        self._lives = Lives()
        self._lock = threading.Lock()  # guards topology changes, never delivery
        self._dead = Counter()
        self.dead_letters = deque(maxlen=dead_letter_log)
        self.dead_details = Counter()
        self.behaviour_errors = 0
        self.failures = []
        #: True while a realtime run is held (``RealtimeDispatcher.pause``): actors keep
        #: the letters they take instead of handling them. Never set in deterministic
        #: mode, whose loop a ``Gate`` holds instead.
        self.holding = False
        #: The fault plan in force (None: no faults, and routing is the plain one).
        plan = Faults.parse(faults)
        if plan is not None:
            self.faults = plan
            self.injector = FaultInjector(self, plan, self._route_one)
            if plan.messages:
                # Instance attributes shadow the methods: a dispatcher without a
                # plan keeps the plain ones and pays nothing for this.
                self._route_one = self.injector.route  # type: ignore[method-assign]
                self._route_batch = functools.partial(  # type: ignore[method-assign]
                    Router._route_batch, self)
                self.post = self.injector.post  # type: ignore[method-assign]

    def run(self, until: float | None = None, *, max_steps: int | None = None) -> RunReport:
        raise NotImplementedError

    def shutdown(self, timeout: float = 5.0) -> None:
        raise NotImplementedError

    def statistics(self) -> Statistics:
        raise NotImplementedError

    def make_durable(self, caller: str) -> None:
        """About to answer ``caller``: commit what the run has recorded, when a store
        keeps it and its policy says so (see barnraise.sim.store)."""
        durable = self.durable
        if durable is not None:
            durable(caller)

    @property
    def trace_digest(self) -> str:
        return self.trace.digest

    def __enter__(self) -> Dispatcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
