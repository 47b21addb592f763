"""Seeded fault injection: messages dropped, duplicated, delayed, reordered; agents crashed.

A :class:`Faults` value is the plan (``Faults.parse("drop=0.05,duplicate=0.02,delay=0.5")``);
a dispatcher built with one routes every letter through a :class:`FaultInjector`,
which decides its fate with draws from the run's own seeded stream
(``seed_for(seed, "faults")``), so a deterministic run with faults repeats
exactly, failures included. Every injected fault is one ``fault`` record in the
trace (its type is the fault: ``drop``, ``duplicate``, ``delay``, ``reorder``,
``crash``), so the digest covers them. A crash is the dispatcher's
(:meth:`~barnraise.sim.dispatch.core.Dispatcher.crash`); whoever set ``crash_handler`` (the
supervisors of ``barnraise.actors.supervisor``) brings the agent back.

What is subject to faults: letters to or from an *agent* (an endpoint with an
``agent_type``). Letters between the services, and between a host's in-process
clients and the services, are not: they stand for calls inside one process,
and the services' own state (the coordinator's above all) is never lost.

A dispatcher without a plan never builds an injector: its routing methods are
the plain ones, and the hot path pays nothing (``benchmarks`` section
``faults`` measures it).
"""

from __future__ import annotations

import math
import threading
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Final

import msgspec
import numpy as np

from barnraise.sim.dispatch.values import DELIVERED
from barnraise.sim.messages import Metadata
from barnraise.sim.seeds import seed_for
from barnraise.sim.trace import FAULT

if TYPE_CHECKING:
    from barnraise.sim.dispatch.core import Dispatcher
    from barnraise.sim.dispatch.values import Endpoint, SendReport
    from barnraise.sim.messages import Message, Region

__all__ = ["FAULT_KINDS", "FaultInjector", "Faults", "FaultsError"]

#: The faults a plan may ask for, in the order they are drawn.
FAULT_KINDS: Final = ("drop", "duplicate", "delay", "reorder", "crash")

_encode: Final = msgspec.json.Encoder(order="sorted").encode


class FaultsError(ValueError):
    """A fault plan that names an unknown fault or a value out of range."""


#: Upper bounds: a probability is at most 1; a delay or a reorder window at most
#: an hour; a crash rate at most one per agent per simulated second.
_BOUNDS: Final = {"drop": 1.0, "duplicate": 1.0, "delay": 3600.0, "reorder": 1.0,
                  "crash": 1.0, "retry": 3600.0}


@dataclass(frozen=True, slots=True)
class Faults:
    """A fault plan. Every field defaults to no fault.

    ``drop``       chance that a letter is lost
    ``duplicate``  chance that a letter is delivered twice
    ``delay``      the largest extra delay, in simulated seconds; each letter is
                   held back by a uniform draw in [0, delay] (a sender's letters
                   to one recipient stay in order)
    ``reorder``    chance that a letter is held back until the sender's next letter
                   to the same recipient has gone (or ``max(delay, 0.01)`` passes)
    ``crash``      crashes per agent per simulated second (services never crash)
    ``retry``      not a fault: how long (simulated seconds) an agent's request waits
                   for its answer before it is sent again with the same
                   idempotency key (default 2)
    """

    drop: float = 0.0
    duplicate: float = 0.0
    delay: float = 0.0
    reorder: float = 0.0
    crash: float = 0.0
    retry: float = 2.0

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise FaultsError(f"faults: {f.name} must be a number, got {value!r}")
            if not math.isfinite(value) or not 0 <= value <= _BOUNDS[f.name]:
                raise FaultsError(f"faults: {f.name} must be from 0 to {_BOUNDS[f.name]:g}, "
                                  f"got {value!r}")
            object.__setattr__(self, f.name, float(value))
        if self.retry <= 0:
            raise FaultsError(f"faults: retry must be > 0, got {self.retry!r}")

    @property
    def active(self) -> bool:
        """True if the plan injects anything at all."""
        return any(getattr(self, kind) > 0 for kind in FAULT_KINDS)

    @property
    def messages(self) -> bool:
        """True if the plan touches letters (anything but crashes)."""
        return self.drop > 0 or self.duplicate > 0 or self.delay > 0 or self.reorder > 0

    def to_dict(self) -> dict[str, float]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def __str__(self) -> str:
        return ",".join(f"{k}={v:g}" for k, v in self.to_dict().items()
                        if k in FAULT_KINDS and v > 0) or "none"

    @classmethod
    def parse(cls, spec: str | Mapping[str, Any] | Faults | None) -> Faults | None:
        """A plan from ``"drop=0.05,delay=0.5"``, a dict, a plan, or None (no faults).

        FaultsError names an unknown fault (and the known ones) or a bad value.
        An empty spec, or one whose every fault is 0, is None.
        """
        if spec is None or isinstance(spec, Faults):
            return spec if spec is None or spec.active else None
        known = [f.name for f in fields(cls)]
        items: dict[str, Any] = {}
        if isinstance(spec, str):
            for part in spec.split(","):
                part = part.strip()
                if not part:
                    continue
                name, sep, text = part.partition("=")
                name = name.strip()
                if not sep:
                    raise FaultsError(f"faults: expected NAME=VALUE, got {part!r}")
                try:
                    items[name] = float(text)
                except ValueError:
                    raise FaultsError(f"faults: {name} must be a number, got {text.strip()!r}"
                                      ) from None
        elif isinstance(spec, Mapping):
            items = dict(spec)
        else:
            raise FaultsError(f"faults must be a string like 'drop=0.05,delay=0.5', a dict "
                              f"or None, got {type(spec).__name__}")
        unknown = sorted(str(k) for k in items if k not in known)
        if unknown:
            raise FaultsError(f"faults: unknown {', '.join(unknown)}; "
                              f"known: {', '.join(known)}")
        plan = cls(**items)
        return plan if plan.active else None


class FaultInjector:
    """Decides each letter's fate under a plan; owned by one dispatcher.

    ``route`` replaces the dispatcher's ``_route_one`` while a plan is in force;
    ``plain`` is the original. Draws come from one stream, a fixed number per
    letter, so a run's faults depend only on its seed and what it sends.
    """

    #: Resends of one request at most; the gap doubles from ``Faults.retry`` up to
    #: four times it, so a request with no timeout of its own still ends.
    MAX_RESENDS: Final = 200

    def __init__(self, dispatcher: Dispatcher, faults: Faults,
                 plain: Callable[[Endpoint, Message, bytes], str]) -> None:
        self.dispatcher = dispatcher
        self.faults = faults
        self.plain = plain
        self.plain_post = dispatcher.post
        self.rng = np.random.default_rng(seed_for(dispatcher.seed, "faults"))
        self.counts: Counter[str] = Counter()
        #: Crashed agents brought back (the supervision layer counts them here).
        self.restarts = 0
        # (sender, recipient) -> the simulated time its last letter is due, so that
        # delays keep one sender's letters to one recipient in order
        self._due: dict[tuple[str, str], float] = {}
        # (sender, recipient) -> a letter held back to go after the next one
        self._held: dict[tuple[str, str], tuple[Endpoint, Message, bytes]] = {}
        self._crash_streams: dict[str, np.random.Generator] = {}
        self._lock = threading.RLock()  # realtime: routes come from every thread

    def subject(self, endpoint: Endpoint, message: Message) -> bool:
        """Is this letter on the network (to or from an agent)? See the module docstring."""
        if endpoint.agent_type is not None:
            return True
        sender = self.dispatcher._endpoints.get(message.from_agent)
        return sender is not None and sender.agent_type is not None

    def record(self, kind: str, message: Message, recipient: str, **extra: Any) -> None:
        self.counts[kind] += 1
        d = self.dispatcher
        d.trace.append(d.now, FAULT, message.from_agent, recipient, kind,
                       _encode({"message_id": message.message_id,
                                "type": message.message_type, **extra}))

    def route(self, endpoint: Endpoint, message: Message, encoded: bytes) -> str:
        if not self.subject(endpoint, message):
            return self.plain(endpoint, message, encoded)
        plan = self.faults
        name = endpoint.name
        key = (message.from_agent, name)
        with self._lock:
            drop, dup, reorder, delay = self.rng.random(4)
            if drop < plan.drop:
                self.record("drop", message, name)
                return DELIVERED  # the sender cannot tell: that is the point
            copies = 2 if dup < plan.duplicate else 1
            if copies == 2:
                self.record("duplicate", message, name)
            held = self._held.pop(key, None)
            if reorder < plan.reorder and held is None:
                self.record("reorder", message, name)
                self._held[key] = (endpoint, message, encoded)
                window = max(plan.delay, 0.01)
                self.dispatcher.call_later(window, endpoint, self._release, key, message)
                return DELIVERED
            extra = float(delay) * plan.delay
            now = self.dispatcher.now
            due = max(now + extra, self._due.get(key, now))
            self._due[key] = due
        status = DELIVERED
        for _ in range(copies):
            status = self._send_at(due, endpoint, message, encoded, extra)
        if held is not None:
            self._send_at(due, *held, 0.0)
        return status

    def _send_at(self, due: float, endpoint: Endpoint, message: Message, encoded: bytes,
                 extra: float) -> str:
        d = self.dispatcher
        if due <= d.now:
            return self.plain(endpoint, message, encoded)
        if extra > 0:
            self.record("delay", message, endpoint.name, seconds=round(due - d.now, 9))
        d.call_at(due, endpoint, self._deliver_late, endpoint, message, encoded,
                  priority=message.priority)
        return DELIVERED

    def _deliver_late(self, endpoint: Endpoint, message: Message, encoded: bytes) -> None:
        self.plain(endpoint, message, encoded)

    def _release(self, key: tuple[str, str], message: Message) -> None:
        with self._lock:
            held = self._held.get(key)
            if held is None or held[1] is not message:
                return  # already gone behind a later letter
            del self._held[key]
        self.plain(*held)

    # -- retries ------------------------------------------------------------------------

    def post(self, sender: str, to: str, message_type: str, content: dict[str, Any] | None,
             priority: int, metadata: Metadata | None, region: Region | None = None,
             ) -> SendReport:
        """``Dispatcher.post`` under a plan that touches letters: an agent's request
        (``metadata`` None) is sent again until it is answered.

        Every ``retry`` simulated seconds (the gap doubling up to four times that),
        while the agent still awaits the answer (``Endpoint.awaits``), a copy goes
        out with the first one's correlation id: its idempotency key, by which the
        services answer it once (``barnraise.actors.service.SessionService``). The timer keeps
        the run going while the request is unanswered, as its lost letter would
        have; a crashed sender's requests are not sent again.
        """
        report = self.plain_post(sender, to, message_type, content, priority, metadata, region)
        if metadata is None and report.reached:
            endpoint = self.dispatcher._endpoints.get(sender)
            if endpoint is not None and endpoint.agent_type is not None:
                # A copy: what is sent again is what was sent, whatever the caller does next.
                copy = msgspec.json.decode(_encode(content or {}))
                self._retry_later(endpoint, report.message_id, to, message_type, copy,
                                  priority, region, self.faults.retry, 0)
        return report

    def retry_unanswered(self, endpoint: Endpoint, correlation_id: str, to: str,
                         message_type: str, content: dict[str, Any], priority: int) -> None:
        """Send a request already sent (with ``correlation_id``) again, as :meth:`post` does
        an agent's, while ``endpoint`` awaits its answer: how a host's client that joins or
        has joined a session (a member, so on the network) has its calls retried."""
        copy = msgspec.json.decode(_encode(content))
        self._retry_later(endpoint, correlation_id, to, message_type, copy, priority, None,
                          self.faults.retry, 0)

    def _retry_later(self, endpoint: Endpoint, correlation_id: str, to: str, message_type: str,
                     content: dict[str, Any], priority: int, region: Region | None,
                     gap: float, resends: int) -> None:
        if resends < self.MAX_RESENDS:
            self.dispatcher.call_later(gap, endpoint, self._resend, endpoint, correlation_id, to,
                                       message_type, content, priority, region, gap, resends)

    def _resend(self, endpoint: Endpoint, correlation_id: str, to: str, message_type: str,
                content: dict[str, Any], priority: int, region: Region | None, gap: float,
                resends: int) -> None:
        if endpoint.stopped or not endpoint.awaits(correlation_id):
            return  # answered, timed out, or its sender crashed
        self.plain_post(endpoint.name, to, message_type, content, priority,
                        Metadata(region, (), correlation_id))
        self._retry_later(endpoint, correlation_id, to, message_type, content, priority, region,
                          min(2 * gap, 4 * self.faults.retry), resends + 1)

    # -- crashes -------------------------------------------------------------------------

    def arm_crash(self, endpoint: Endpoint) -> None:
        """Set ``endpoint``'s next crash (an agent's), if the plan crashes agents.

        Crash times are a Poisson process of rate ``crash`` per agent, drawn from
        a stream of the agent's own (``faults:crash:NAME``), so adding an agent does
        not move the others' crashes; a restarted agent goes on with the same stream.
        """
        rate = self.faults.crash
        if rate <= 0:
            return
        name = endpoint.name
        with self._lock:
            rng = self._crash_streams.get(name)
            if rng is None:
                rng = self._crash_streams[name] = np.random.default_rng(
                    seed_for(self.dispatcher.seed, f"faults:crash:{name}"))
            wait = float(rng.exponential(1.0 / rate))
        # A daemon timer: a crash to come keeps no run going.
        self.dispatcher.call_later(wait, endpoint, self._crash, endpoint, daemon=True)

    def _crash(self, endpoint: Endpoint) -> None:
        d = self.dispatcher
        if endpoint.stopped or d._endpoints.get(endpoint.name) is not endpoint:
            return
        with self._lock:
            self.counts["crash"] += 1
        d.crash(endpoint.name, "injected")

    def summary(self) -> dict[str, int]:
        """What was injected, by kind (every kind present, 0 if none)."""
        with self._lock:
            return {kind: self.counts.get(kind, 0) for kind in FAULT_KINDS}
