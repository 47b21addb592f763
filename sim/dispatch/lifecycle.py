"""Actors' lives: spawning, stopping, crashes and respawns, death watch, and what
routing needs to know of each actor (its type, its session, whether it is online).

:class:`Lifecycle` is one room of the dispatcher (:class:`barnraise.sim.dispatch.core.Dispatcher`
puts the rooms together); it changes the endpoint tables that routing
(:mod:`barnraise.sim.dispatch.routing`) reads, under the dispatcher's topology lock, and it is
a base class of the dispatcher rather than an object it holds because routing reads
those tables on every message (see :mod:`barnraise.sim.dispatch.routing`). Starting and
stopping an actor's loop (``_start``, ``_stop``) is each mode's own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar, cast

from barnraise.sim.dispatch.routing import SYSTEM, Router, _encode_content, _encode_obj
from barnraise.sim.dispatch.values import Endpoint, Waiter
from barnraise.sim.messages import BROADCAST, Priority
from barnraise.sim.trace import FAULT

if TYPE_CHECKING:
    from barnraise.sim.dispatch.core import Dispatcher

__all__ = ["Lifecycle", "Lives"]

E = TypeVar("E", bound=Endpoint)


class Lives:
    """The rarely touched facts about actors' lives, in one attribute of the dispatcher
    (see the note on its class attributes): who watches whom, the crashed incarnations
    a respawn replaced, and which session each agent is a member of."""

    __slots__ = ("retired", "session_of", "watchers")

    def __init__(self) -> None:
        self.watchers: dict[str, list[str]] = {}  # watched -> who gets its terminated notice
        self.retired: list[Endpoint] = []  # crashed incarnations replaced by respawn()
        self.session_of: dict[str, str] = {}  # agent -> its session, for its error topic


class Lifecycle(Router):
    """Spawn, stop, crash, respawn and watch actors; who is of which type, in which
    session, online."""

    #: Called with an actor's name when it crashes (the supervision layer sets
    #: it); True means it will be brought back. Without one, or on False, the
    #: crashed actor stays stopped and its watchers are told.
    crash_handler: Callable[[str], bool] | None = None

    def agents_of_type(self, agent_type: str) -> list[str]:
        return list(self._by_type.get(agent_type, ()))

    def spawn(self, cls: type[E], name: str, /, *args: Any, **kwargs: Any) -> E:
        """Construct ``cls(*args, **kwargs)`` as the actor ``name``, start it, return it."""
        self._check_name(name)  # before anything is made
        return self.add(name, cls(*args, **kwargs))

    def _check_name(self, name: object) -> None:
        if not isinstance(name, str) or not name or name.startswith(("topic:", "type:")):
            raise ValueError(f"actor name must be a plain non-empty string, got {name!r}")
        if name in (BROADCAST, SYSTEM):
            raise ValueError(f"actor name {name!r} is reserved")
        if name in self._endpoints:
            raise ValueError(f"an actor called {name!r} already exists")

    def add(self, name: str, actor: E) -> E:
        """Start ``actor``, made by the caller (a supervisor setting its incarnation
        first, say), as ``name``; return it. ValueError as :meth:`spawn`."""
        self._check_name(name)
        actor.a2a_bind(cast("Dispatcher", self), name)
        with self._lock:
            self._list(name, actor)
        self._launch(actor)
        return actor

    def _list(self, name: str, actor: Endpoint) -> None:
        """Route ``name`` to ``actor`` (and list an agent by its type). Under ``_lock``."""
        self._endpoints[name] = actor
        if actor.agent_type is not None:
            self._agents[name] = actor
            self._by_type.setdefault(actor.agent_type, {})[name] = actor

    def _launch(self, actor: Endpoint) -> None:
        """Start a listed actor, and arm its crashes when a fault plan has them."""
        self._start(actor)
        if self.injector is not None and actor.agent_type is not None:
            self.injector.arm_crash(actor)

    def _start(self, actor: Endpoint) -> None:
        raise NotImplementedError

    @contextmanager
    def start_together(self) -> Iterator[None]:
        """Spawn a group of actors that start only once every one of them exists.

        In deterministic mode nothing runs until :meth:`run` or :meth:`step`, so
        this changes nothing. In realtime mode an actor starts the moment it is
        spawned, so a behaviour that talks to a peer spawned after it could find
        no such actor; inside this block starts are held and made, in spawn
        order, when the block ends. Mail sent to a held actor waits in its mailbox.
        """
        yield

    def stop_actor(self, name: str, reason: str = "stopped") -> None:
        """Stop one actor now, for good; mail still queued for it, and any later, is dead
        ``offline``. Whoever watches it (:meth:`watch`) gets its ``terminated`` notice."""
        actor = self.actor(name)
        if actor.stopped:
            return
        self._halt(actor)
        self.announce_terminated(name, reason)

    def _halt(self, actor: Endpoint) -> None:
        name = actor.name
        actor.stopped = True
        with self._lock:
            self._offline.add(name)
            self._agents.pop(name, None)
            if actor.agent_type is not None:
                self._by_type.get(actor.agent_type, {}).pop(name, None)
        self._stop(actor)

    def crash(self, name: str, reason: str = "crash", *, supervised: bool = False) -> None:
        """Crash actor ``name``: it stops at once and loses its mailbox and its memory.

        Its subscriptions go with it (a new incarnation subscribes again); its
        ``on_stop`` sees ``crashed`` set and says no goodbyes. Then
        :attr:`crash_handler` (a supervisor) decides whether it comes back
        (:meth:`respawn`); with no handler, or one that returns False, it is
        stopped for good and its watchers are told. ``supervised``: the caller is
        the supervisor and decides itself (an all-for-one restart crashes the
        rest of a group this way); the handler is not asked.
        """
        actor = self.actor(name)
        if actor.stopped:
            return
        actor.crashed = True
        self.trace.append(self.now, FAULT, name, name, "crash",
                          _encode_obj({"agent": name, "reason": reason}))
        self.drop_subscriptions(actor)
        self._halt(actor)
        if supervised:
            return
        handler = self.crash_handler
        if handler is None or not handler(name):
            self.announce_terminated(name, reason)

    def respawn(self, name: str, actor: Endpoint) -> None:
        """Put ``actor``, a fresh incarnation, in the place of the stopped actor ``name``.

        It gets the name, the routing and mail from now on; nothing of the old
        one's mailbox or memory. The supervision layer calls this.
        """
        old = self.actor(name)
        if not old.stopped:
            raise ValueError(f"{name!r} is running; only a stopped actor is replaced")
        actor.a2a_bind(cast("Dispatcher", self), name)
        with self._lock:
            self._lives.retired.append(old)
            self._offline.discard(name)
            self._list(name, actor)
        self._launch(actor)

    def watch(self, watcher: str, watched: str) -> None:
        """Have ``watcher`` told when ``watched`` stops for good: a ``status_update`` whose
        content is ``{"event": "terminated", "agent_id": watched, "reason": ...}``.

        An actor already stopped for good is reported at once. A crash that its
        supervisor repairs is not an end: watchers hear only of the last one.
        """
        self.actor(watcher)
        target = self.actor(watched)
        with self._lock:
            self._lives.watchers.setdefault(watched, []).append(watcher)
        if target.stopped and not getattr(target, "crashed", False):
            self.announce_terminated(watched, "stopped")

    def unwatch(self, watcher: str, watched: str) -> None:
        with self._lock:
            names = self._lives.watchers.get(watched, [])
            if watcher in names:
                names.remove(watcher)

    def announce_terminated(self, name: str, reason: str) -> None:
        """Tell ``name``'s watchers it has stopped for good (once; they are then forgotten)."""
        with self._lock:
            watchers = self._lives.watchers.pop(name, [])
        for watcher in watchers:
            endpoint = self._endpoints.get(watcher)
            if endpoint is not None and not endpoint.stopped:
                message = self.message(SYSTEM, watcher, "status_update",
                                       {"event": "terminated", "agent_id": name,
                                        "reason": reason}, priority=Priority.HIGH)
                self._route_one(endpoint, message, _encode_content(message.content))

    def _stop(self, actor: Endpoint) -> None:
        raise NotImplementedError

    def set_agent_type(self, name: str, agent_type: str | None) -> None:
        """Change the type an actor is routed by (``type:ROLE``, broadcasts)."""
        actor = self.actor(name)
        with self._lock:
            if actor.agent_type is not None:
                self._by_type.get(actor.agent_type, {}).pop(name, None)
            actor.agent_type = agent_type
            if agent_type is None:
                self._agents.pop(name, None)
            elif not actor.stopped:
                self._agents[name] = actor
                self._by_type.setdefault(agent_type, {})[name] = actor

    def set_session(self, name: str, session_id: str | None) -> None:
        """Say which session ``name`` is a member of (None: of none), so that its
        behaviour errors also go to that session's own ``session:<id>:errors`` topic."""
        with self._lock:
            if session_id is None:
                self._lives.session_of.pop(name, None)
            else:
                self._lives.session_of[name] = session_id

    def set_online(self, name: str, online: bool) -> None:
        """Mark an agent reachable or not (the registry does, on heartbeat loss)."""
        if online:
            if not self._endpoints[name].stopped:
                self._offline.discard(name)
        else:
            self._offline.add(name)

    def is_online(self, name: str) -> bool:
        return name in self._endpoints and name not in self._offline

    def waiters(self) -> list[Waiter]:
        """Every suspended behaviour that keeps the run alive, in spawn order."""
        out: list[Waiter] = []
        for actor in list(self._endpoints.values()):
            if not actor.stopped:
                out.extend(actor.waiters())
        return out

    def message_counts(self) -> tuple[int, int]:
        """(messages delivered, dead letters) so far: the two figures of
        :meth:`statistics` a frequent reader wants, without its walk over timers."""
        delivered = sum(a.delivered for a in [*self._endpoints.values(), *self._lives.retired])
        return delivered, sum(self._dead.values())
