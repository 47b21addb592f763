"""Simulation: a dispatcher with a session world in it, and clients to drive it.

::

    from barnraise import Simulation
    with Simulation(seed=7, mode="deterministic") as simu:
        arch = simu.client()
        s = arch.call("session_create", session_name="Linux Kernel Build", grid_size=200)
        arch.call("session_join", session_id=s["session_id"], agent_name="Architect-1",
                  role="architect")
        arch.region_claim(region={"x": 0, "y": 0, "width": 50, "height": 50})

A client is an outside participant with its own mailbox. ``call`` sends a tool
request to the service that owns the tool and returns the result dict; in
deterministic mode the call runs the simulation until the answer arrives, in
realtime mode it waits for it (bounded). After ``session_create`` or
``session_join`` the client is bound to that session and may omit
``session_id`` (the rule is :func:`barnraise.sim.binding.prepare_call` and
:func:`barnraise.sim.binding.bound_session_after`). Every result has ``success``; failures
carry ``error`` and ``message`` and are never raised.

``simu.view(session_id)`` reads a session's world as frozen values (a
:class:`barnraise.sim.views.WorldView`: members, claims, tasks, canvas, progress, ...), each
part built by the service that owns it, in that service's own context; see
:meth:`Simulation.view` for what a caller may rely on in each mode.
"""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import pykka
from pykka.messages import ProxyCall

from barnraise.actors.base import A2AActor
from barnraise.actors.client import ClientActor, InlineClientActor
from barnraise.actors.coordination import CoordinationService
from barnraise.actors.coordinator import Coordinator
from barnraise.actors.regions import RegionManager
from barnraise.actors.registry import Registry
from barnraise.actors.stored.image import Image
from barnraise.actors.supervisor import ROOT, Supervisor
from barnraise.actors.taskqueue import TaskQueue
from barnraise.sim.binding import bound_session_after, prepare_call
from barnraise.sim.dispatch import (
    DeterministicDispatcher,
    Dispatcher,
    Faults,
    RealtimeDispatcher,
    make_dispatcher,
)
from barnraise.sim.dispatch.core import SYSTEM
from barnraise.sim.log import RESUMED
from barnraise.sim.messages import DEFAULT_MAX_CONTENT_BYTES, Message, MessageError, Priority
from barnraise.sim.policy import DEFAULT_MATRIX, Policy
from barnraise.sim.store import Store
from barnraise.sim.tokens import random_id
from barnraise.sim.tool_methods import ToolMethods
from barnraise.sim.tools import TOOLS, Tool, WorldLimits, fail
from barnraise.sim.views import TasksPart, WorldView

__all__ = ["Client", "Simulation"]

#: Wall seconds a realtime client waits for an answer before giving up.
REALTIME_CALL_TIMEOUT = 30.0

T = TypeVar("T")


class Client(ToolMethods):
    """An outside participant: tool calls in, results and messages out.

    A method per tool and ``call`` come typed from :class:`barnraise.sim.tool_methods.ToolMethods`;
    :meth:`call_any` takes any name.
    """

    def __init__(self, simulation: Simulation, actor: ClientActor) -> None:
        self._simulation = simulation
        self._actor = actor
        self.session_id: str | None = None
        self.agent_id: str = actor.name

    def __repr__(self) -> str:
        return f"<Client {self.agent_id} session={self.session_id}>"

    def call_any(self, name: str, args: Mapping[str, Any], /) -> dict[str, Any]:
        """Call tool ``name`` with ``args``; wait for and return its result dict.

        The untyped way in, for code that has the tool's name as data; ``call`` and
        the methods named after the tools (:class:`barnraise.sim.tool_methods.ToolMethods`)
        are the typed ones and come here.
        """
        return self.submit_any(name, args).result()

    def submit(self, name: str, /, **args: Any) -> PendingCall:
        """Send a tool call and return at once; ``.result()`` waits for the answer.

        For calls that wait on others (a barrier, a lock), so that one thread
        can drive several clients in deterministic mode.
        """
        return self.submit_any(name, args)

    def submit_any(self, name: str, args: Mapping[str, Any], /) -> PendingCall:
        """:meth:`submit` with the arguments as one mapping (copied, never kept)."""
        if self._simulation.closed:
            return PendingCall.done(fail("no_reply", f"{name}: the simulation is closed"))
        prepared = prepare_call(name, args, self.session_id)
        if isinstance(prepared, dict):
            return PendingCall.done(prepared)
        tool, args = prepared
        dispatcher = self._simulation.dispatcher
        # A remote agent's ids cross the process: random, so they tell nothing of the
        # counter (and no other call's id); in-process ones stay seeded (the digests).
        actor = self._actor
        correlation_id = (random_id() if actor.remote
                          else dispatcher.next_id())
        actor.expect(correlation_id, tool.service)
        message = dispatcher.message(
            self.agent_id, tool.service, "coordination_request", {"tool": name, "args": args},
            priority=Priority.HIGH, correlation_id=correlation_id,
        )
        try:
            report = dispatcher.send(dispatcher.seal(message))
        except MessageError as exc:  # over the content limit: a failure, not a raise
            self._actor.forget(correlation_id)
            return PendingCall.done(fail("invalid_argument", f"arguments: {exc.problem}"))
        if not report.ok:
            self._actor.forget(correlation_id)  # no answer can come: expect none
            return PendingCall.done(fail("no_reply", f"{tool.service} did not accept the call: "
                                         f"{report.statuses}"))
        injector = dispatcher.injector
        if injector is not None and (actor.agent_type is not None or name == "session_join"):
            # A member's letters (a join's answer too) may be lost: sent again till answered.
            injector.retry_unanswered(actor, correlation_id, tool.service,
                                      "coordination_request", message.content,
                                      Priority.HIGH)
        return PendingCall(self, tool, correlation_id)

    # -- mail --------------------------------------------------------------------------

    def receive(self, timeout: float = 0.0) -> Message | None:
        """The next message delivered to this client, waiting up to ``timeout`` seconds.

        Deterministic mode: simulation seconds (the simulation runs meanwhile).
        Realtime mode: simulation seconds too, waited as wall time / time_scale.
        """
        actor = self._actor
        simulation = self._simulation
        simulation.settle()
        if not actor.inbox:
            simulation._wait(lambda: bool(actor.inbox), timeout, actor.arrived)
        with actor.arrived:
            return actor.inbox.popleft() if actor.inbox else None

    def messages(self) -> list[Message]:
        """Everything delivered so far and not yet read, in delivery order.

        In deterministic mode the current instant settles first: whatever is due
        now (the other consequences of the call that just returned) is delivered;
        no time passes.
        """
        self._simulation.settle()
        actor = self._actor
        if not actor.inbox:  # nothing yet (one look, no lock: what arrives next is next)
            return []
        with actor.arrived:
            out = list(actor.inbox)
            actor.inbox.clear()
        return out

    def on_arrival(self, callback: Callable[[], None] | None) -> None:
        """Call ``callback`` whenever a reply or a message reaches this client.

        It runs on the delivering thread in realtime mode (keep it short: hand
        the news to your own loop), inline in deterministic mode. ``None``
        removes it. For drivers that cannot block on :meth:`receive`.
        """
        self._actor.listener = callback



class PendingCall:
    """A tool call on its way; ``result()`` waits for the answer."""

    def __init__(self, client: Client | None, tool: Tool | None, correlation_id: str) -> None:
        self._client = client
        self._tool = tool
        self._correlation_id = correlation_id
        self._result: dict[str, Any] | None = None

    @classmethod
    def done(cls, result: dict[str, Any]) -> PendingCall:
        pending = cls(None, None, "")
        pending._result = result
        return pending

    @property
    def known(self) -> dict[str, Any] | None:
        """The result if it is already here without a look at the mailbox (a call refused
        before it was sent, or one already read); None otherwise. Takes no lock."""
        return self._result

    def poll(self) -> dict[str, Any] | None:
        """The answer if it is here, else None; never waits (one look under the lock)."""
        if self._result is not None:
            return self._result
        assert self._client is not None and self._tool is not None
        reply = self._client._actor.take_reply(self._correlation_id)
        if reply is None:
            return None
        self._result = dict(reply.content)
        client = self._client
        client.session_id = bound_session_after(self._tool.name, self._result, client.session_id)
        return self._result

    def answered(self) -> bool:
        """True once the answer is here, so :meth:`result` returns without waiting."""
        if self._result is not None:
            return True
        assert self._client is not None
        actor = self._client._actor
        with actor.arrived:
            return self._correlation_id in actor.replies

    def result(self, timeout: float | None = None) -> dict[str, Any]:
        """The answer. ``timeout`` in simulation seconds (None: as long as it takes)."""
        if self._result is not None:
            return self._result
        assert self._client is not None and self._tool is not None
        actor = self._client._actor
        cid = self._correlation_id
        arrived = self._client._simulation._wait(lambda: cid in actor.replies, timeout,
                                                 actor.arrived)
        reply = actor.take_reply(cid) if arrived else None
        if reply is None:
            actor.give_up(cid)
            if self._client._simulation.closed:
                return fail("no_reply", f"no answer to {self._tool.name}: the simulation "
                            "was closed")
            return fail("no_reply", f"no answer to {self._tool.name} "
                        + ("in time" if timeout is not None else "(the run went idle)"))
        self._result = dict(reply.content)
        client = self._client
        client.session_id = bound_session_after(self._tool.name, self._result, client.session_id)
        return self._result


class Simulation:
    """The session world on one dispatcher: registry, the four services, clients."""

    def __init__(
        self,
        seed: int = 0,
        mode: str = "deterministic",
        *,
        policy: Policy | Mapping[str, Any] | list[Any] | str | None = None,
        time_scale: float | None = None,
        idle_timeout: float | None = None,
        latency: float | None = None,
        mailbox_capacity: int = 1000,
        sign_messages: bool = False,
        secret: bytes | None = None,
        max_content_bytes: int = DEFAULT_MAX_CONTENT_BYTES,
        trace: bool = True,
        limits: WorldLimits | None = None,
        faults: Faults | str | Mapping[str, Any] | None = None,
        store: str | os.PathLike[str] | Store | None = None,
    ) -> None:
        """A session world on a ``mode`` dispatcher seeded with ``seed``.

        ``limits``: what sessions may cost on this host (canvas sizes, session
        count; :class:`barnraise.sim.tools.WorldLimits`, whose defaults apply when None).
        ``faults`` is a fault plan (:class:`barnraise.sim.dispatch.Faults`, or its text
        ``"drop=0.05,duplicate=0.02,delay=0.5,crash=0.001"`` or a dict): letters
        to and from agents are dropped, duplicated, delayed and reordered, and
        agents crash, all drawn from ``seed`` (docs/reliability.md).
        FaultsError (a ValueError) for an unknown fault or a value out of range.

        ``time_scale`` and ``idle_timeout`` apply to realtime mode, ``latency`` to
        deterministic mode (see the dispatchers); giving one to the other mode is
        a ValueError. The rest go to the dispatcher as they are.

        ``store``: keep the run durable in a SQLite store (:mod:`barnraise.sim.store`): a path
        for a new store (an existing store is refused, StoreError), or a
        :class:`~barnraise.sim.store.Store` the caller opened (the runner, for a resume).
        In-memory only when None.
        """
        options: dict[str, Any] = {
            "mailbox_capacity": mailbox_capacity, "sign_messages": sign_messages,
            "secret": secret, "max_content_bytes": max_content_bytes, "trace": trace,
            "faults": faults}
        for name, value, applies in (("time_scale", time_scale, "realtime"),
                                     ("idle_timeout", idle_timeout, "realtime"),
                                     ("latency", latency, "deterministic")):
            if value is not None:
                if mode != applies:
                    raise ValueError(f"{name} applies to {applies} mode only")
                options[name] = value
        self.policy = Policy.load(policy)
        self.dispatcher: Dispatcher = make_dispatcher(mode, seed, **options)
        self.mode = mode
        self.seed = seed
        self._client_ids = itertools.count(1)
        d = self.dispatcher
        d.spawn(Registry, "registry")
        self._regions: RegionManager = d.spawn(RegionManager, "regions", policy=self.policy)
        self._tasks: TaskQueue = d.spawn(TaskQueue, "tasks", policy=self.policy)
        self._coordination: CoordinationService = d.spawn(
            CoordinationService, "coordination", policy=self.policy)
        self._coordinator: Coordinator = d.spawn(Coordinator, "coordinator", policy=self.policy,
                                                 limits=limits)
        #: The top supervisor: agents started with ``simu.supervisor.start_child`` are
        #: restarted when they crash (actors/supervisor.py; scenario crews are).
        self.supervisor: Supervisor = d.spawn(Supervisor, ROOT)
        self.supervisor.install()
        self.clients: list[Client] = []
        #: True once :meth:`close` has begun: no call is answered after it.
        self.closed = False
        #: Called with a fraction 0..1 when a scenario reports progress (CLI bar).
        self.progress: Callable[[float], None] | None = None
        #: The durable store of the run (None: in memory only).
        self.store: Store | None = None
        self._owns_store = False
        if store is not None:
            if not isinstance(store, Store):
                store = Store.create(store, seed=seed, mode=mode)
                self._owns_store = True
            self.store = store
            store.attach(d.trace)
            if mode == "deterministic":
                store.snapshotter = self.world_state
            d.durable = store.acknowledge
        #: The image a resumed realtime run started from (:meth:`restore`), else None.
        self.restored: Image | None = None
        #: Seats a scenario's sessions keep for agents from outside, beyond its own crew
        #: (``barnraise serve --scenario`` sets it, so that outsiders can join a live crew).
        self.guest_seats = 0

    def __enter__(self) -> Simulation:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if exc_type is not None:
            # A run that raised is not finished: its store stays readable as interrupted.
            self._owns_store = False
        self.close()

    def close(self) -> None:
        """Stop every actor. Clients still waiting for an answer are woken and get
        ``no_reply`` saying so (rather than waiting out their timeout); later calls too."""
        self.closed = True
        # Actors first: in realtime mode they would go on adding records while the store
        # was being finished, and its digest would miss them.
        self.dispatcher.shutdown()
        store = self.store
        if store is not None and not store.closed:
            if self._owns_store:
                store.finish({"virtual_time": self.now}, self.dispatcher.trace_digest)
            store.close()
        for client in list(self.clients):
            with client._actor.arrived:
                client._actor.arrived.notify_all()

    @property
    def now(self) -> float:
        return self.dispatcher.now

    @property
    def tools(self) -> list[dict[str, Any]]:
        """Every tool with its JSON input schema."""
        return [tool.to_dict() for tool in TOOLS.values()]

    def client(self, name: str | None = None, *, inline: bool = False,
               remote: bool = False) -> Client:
        """A new outside participant; ``name`` is its agent id (made up if omitted).

        ``remote``: it stands for an agent outside the process (the gateway's), so the
        ids it is given (its calls' correlation ids, its subscriptions) are random
        tokens from the OS CSPRNG (:func:`barnraise.sim.tokens.random_id`) rather than the seeded
        counter.

        ``inline``: what reaches the client is recorded on the thread that sends it
        (realtime mode; :class:`barnraise.actors.client.InlineClientActor`) rather than on the
        client actor's own thread: one thread hop less a call, for a driver that
        hears of arrivals through :meth:`Client.on_arrival` (the gateway's event
        loop) or waits in :meth:`Client.call` alike. Off by default: the sender
        then runs the client's listener, so that must stay short.
        """
        agent_id = name or f"agent-{next(self._client_ids)}"
        actor = self.dispatcher.spawn(InlineClientActor if inline else ClientActor, agent_id)
        if remote:
            actor.remote = True
        if self.store is not None:
            self.store.outside.add(agent_id)
        client = Client(self, actor)
        self.clients.append(client)
        return client

    def release(self, client: Client) -> None:
        """Stop ``client``'s actor (its thread, in realtime mode) and forget it.

        For hosts that make clients on demand (the gateway makes one per remote
        agent): one that never became a member must not hold a thread for ever.
        Mail still on its way to it is dead ``offline``; its name is not reused.
        """
        self.dispatcher.stop_actor(client.agent_id)
        if client in self.clients:
            self.clients.remove(client)

    def expire(self, agent_id: str, reason: str = "expired") -> None:
        """``agent_id`` is gone: it leaves every session it is a member of (claims released,
        tasks in progress back to the queue, its subscriptions there ended, an
        ``agent_expired`` event with ``reason``), as the coordinator does for an agent
        whose heartbeats stopped. The gateway calls it for a remote agent not heard
        from for its time to live. Returns at once: a letter from ``system`` to the
        coordinator (ahead of the ``terminated`` notice of a Client released after it)."""
        d = self.dispatcher
        d.send(d.seal(d.message(SYSTEM, "coordinator", "status_update",
                                {"event": "expire", "agent_id": agent_id, "reason": reason},
                                priority=Priority.HIGH)))

    # -- reading the world -----------------------------------------------------------------

    def sessions(self) -> list[str]:
        """The ids of the open sessions, oldest first."""
        return list(self._in_context(self._coordinator, self._coordinator.session_ids))

    def grant(self, session_id: str, agent_id: str, role: str) -> None:
        """Let agent ``agent_id`` join ``session_id`` as ``role``, a role the session grants
        rather than opens (architect by default; ``session_create(granted_roles=...)``).

        The host's own code holds every session's keys: this is the owner's
        ``session_grant`` without a message, so it leaves the trace as it was.
        ValueError for an unknown role, LookupError for an unknown session.
        """
        if role not in DEFAULT_MATRIX:
            raise ValueError(f"role must be one of {sorted(DEFAULT_MATRIX)}, got {role!r}")
        try:
            self._in_context(self._coordinator, self._coordinator.grant, session_id, agent_id,
                             role)
        except KeyError:
            raise LookupError(f"no session {session_id!r}") from None

    def view(self, session_id: str | None = None, *, canvas: bool = True,
             completion: bool = False, tasks: bool = True,
             timeout: float | None = None) -> WorldView:
        """A frozen :class:`~barnraise.sim.views.WorldView` of session ``session_id`` (default: the
        oldest open session).

        ``canvas``: copy the tile layer and the blueprint (else both are None);
        ``tasks``: build the task part (one struct per task; else ``tasks`` is an
        empty tuple: not read, for a reader that counts tasks from their events);
        ``completion``: compute ``progress.completion_percent`` (a pass over the
        whole canvas; else None). LookupError when there is no such session (or
        no session at all).

        Each service builds its own part in its own actor context, so reading is
        safe while the run goes on: in deterministic mode (one thread) the view
        is the world between two steps; in realtime mode each part is a pykka
        call run on its owner's thread after the letters already in its mailbox,
        so each part is consistent in itself and parts may be a few letters
        apart. ``timeout`` bounds each realtime part (wall seconds, default
        :data:`REALTIME_CALL_TIMEOUT`); TimeoutError names the part that did not
        come. Do not call it from inside an actor in realtime mode: an actor
        asking itself waits out the timeout.
        """
        at = self.now
        coordinator = self._coordinator
        if session_id is None:
            open_sessions = self._in_context(coordinator, coordinator.session_ids, timeout=timeout)
            if not open_sessions:
                raise LookupError("no session to view: none has been created (or all closed)")
            session_id = open_sessions[0]
        session = self._in_context(coordinator, coordinator.view_of, session_id,
                                   timeout=timeout)
        regions = self._in_context(self._regions, self._regions.view_of, session_id,
                                   canvas=canvas, completion=completion, timeout=timeout)
        task_part = (self._in_context(self._tasks, self._tasks.view_of, session_id, timeout=timeout)
                 if tasks else TasksPart(tasks=()))
        coordination = self._in_context(self._coordination, self._coordination.view_of,
                                        session_id, timeout=timeout)
        return WorldView.assemble(at, session, regions, task_part, coordination)

    def world_state(self, views: Mapping[str, WorldView] | None = None) -> dict[str, Any]:
        """Every open session's world as plain data (what a store's snapshot keeps):
        canvas bytes, members, claims, task statuses and checkpoints, by session id.
        ``views``: views with their canvas taken a moment ago, by session id, to use
        instead of taking them again (nothing may have happened since)."""
        out: dict[str, Any] = {}
        for sid in self.sessions():
            view = views.get(sid) if views is not None else None
            if view is None or view.canvas is None:
                view = self.view(sid, canvas=True)
            canvas = view.canvas
            out[sid] = {
                "canvas": None if canvas is None else canvas.tobytes(),
                "shape": None if canvas is None else list(canvas.shape),
                "members": sorted([m.agent_id, m.name, m.role] for m in view.members),
                "claims": sorted([c.claim_id, c.agent_id, c.region.to_dict(), c.expires_at]
                                 for c in view.claims),
                "tasks": {t.task_id: [t.status, t.assigned_to] for t in view.tasks},
                "checkpoints": [c.checkpoint_id for c in view.checkpoints],
            }
        return out

    def restore(self, image: Image, *, crash_crew: bool = True) -> None:
        """Continue the stopped realtime run whose world ``image`` is
        (:mod:`barnraise.actors.stored.resume`).

        The clock goes on from the image's time; every service takes its share of
        every session (on its own thread, the run held meanwhile); every agent the
        stopped run had is treated as crashed, as a supervisor treats one: its tasks
        in progress go back to pending (``task_requeued``, reason ``resumed``) with
        their claims released, to be done again, once. Agents started from here on
        under this Simulation's supervisor are their names' next incarnations
        (``Agent.resuming``), which rebuild from the world's state (``crash_crew``
        False leaves the tasks as the image has them: for tests). Call it before any
        agent starts. In deterministic mode it does the same (the tests use it
        to restore many images cheaply), though ``barnraise resume`` re-executes a
        deterministic run instead. ValueError: a Simulation that has sessions already,
        or an image whose :meth:`~barnraise.actors.stored.resume.Image.unsupported` says why it
        cannot be
        resumed.
        """
        d = self.dispatcher
        problem = image.unsupported()
        if problem is not None:
            raise ValueError(f"this run cannot be resumed from its log: {problem}")
        if self.sessions():
            raise ValueError("restore puts a stopped run's world into a Simulation that has "
                             "none yet; this one has sessions")
        held = d if isinstance(d, RealtimeDispatcher) else None
        if held is not None:
            held.pause()
        try:
            d.clock.jump_to(image.at)
            # The log's mark between the stopped run and this one: a call the stopped
            # run never answered is answered by no one (sim/log.py).
            d.trace.event(image.at, SYSTEM, SYSTEM, RESUMED,
                          {"after_seq": image.seq, "at": image.at})
            for service in (self._coordinator, self._regions, self._tasks,
                            self._coordination):
                # No id of the stopped run is drawn again, sessions restored or not.
                self._in_context(service, service.resume_ids, image.serials)
                for session in image.sessions.values():
                    self._in_context(service, service.restore, session, image.serials)
        finally:
            if held is not None:
                held.resume()
        self.restored = image
        self.supervisor.resumed = True
        crew = sorted({aid for s in image.sessions.values() for aid in s.members})
        if crew and crash_crew:
            crashed = {"op": "_agent_crashed", "agent_ids": crew, "reason": "resumed"}
            d.send(d.seal(d.message(ROOT, "tasks", "coordination_request", crashed,
                                    priority=Priority.HIGH)))

    def _in_context(self, actor: A2AActor, method: Callable[..., T], *args: Any,
                    timeout: float | None = None, **kwargs: Any) -> T:
        """``method(*args, **kwargs)`` run where ``actor`` runs its handlers.

        Deterministic mode: here (the dispatcher runs handlers on this thread,
        between steps). Realtime mode: on the actor's own thread, through a pykka
        ``ProxyCall`` that waits behind the letters already queued; it is not an
        A2A message, so it is neither traced nor counted as work in flight. An
        actor whose thread has ended changes no more and is read here.
        """
        if isinstance(self.dispatcher, DeterministicDispatcher) or actor.actor_stopped.is_set():
            return method(*args, **kwargs)
        wait = REALTIME_CALL_TIMEOUT if timeout is None else timeout
        call = ProxyCall(attr_path=(method.__name__,), args=args, kwargs=kwargs)
        try:
            result: T = actor.actor_ref.ask(call, block=True, timeout=wait)
        except pykka.Timeout:
            raise TimeoutError(f"{actor.name} did not answer {method.__name__} within "
                               f"{wait:g} wall seconds") from None
        except pykka.ActorDeadError:
            # Stopped meanwhile: once its thread is done, its state is still.
            if not actor.actor_stopped.wait(wait):
                raise TimeoutError(f"{actor.name} is stopping and did not finish within "
                                   f"{wait:g} wall seconds") from None
            return method(*args, **kwargs)
        return result

    def drop_unread(self) -> int:
        """The run has ended: every letter of an agents' type (one's own, or
        ``task_request``, ``task_response``, ``notification``, ``data_share``) still kept
        for a ``receive`` that never took it becomes a dead letter ``no_handler``, with
        the reason in words (:meth:`barnraise.actors.actor.A2AActor.drop_unread`); returns
        how many. The runner calls it once the run is over; letters of the runtime's
        vocabulary stay kept."""
        dropped = 0
        for actor in list(self.dispatcher.actors.values()):
            if isinstance(actor, A2AActor) and actor._stash:
                dropped += self._in_context(actor, actor.drop_unread)
        return dropped

    def advance(self, seconds: float) -> None:
        """Let ``seconds`` of simulation time pass: timers fire, leases expire."""
        if not seconds >= 0:
            raise ValueError(f"seconds must be >= 0, got {seconds!r}")
        self.dispatcher.run(until=self.now + seconds)

    def report_progress(self, fraction: float) -> None:
        """Scenarios call this as they go; a progress bar may be listening."""
        if self.progress is not None:
            self.progress(min(1.0, max(0.0, fraction)))

    def settle(self) -> None:
        """Deterministic mode: deliver everything due at the current instant."""
        d = self.dispatcher
        if isinstance(d, DeterministicDispatcher):
            d.run_until(lambda: False, deadline=d.now)

    def run(self, until: float | None = None, *,
            progress_of: Callable[[], float] | None = None) -> Any:
        """Run the simulation (see ``Dispatcher.run``).

        With ``progress_of`` (a 0..1 estimate) and someone listening (``progress``),
        the run reports as it goes: deterministic mode runs in chunks of steps,
        which moves neither the clock nor the trace; realtime mode polls.
        """
        d = self.dispatcher
        if progress_of is None or self.progress is None:
            return d.run(until=until)
        if isinstance(d, DeterministicDispatcher):
            while True:
                report = d.run(until=until, max_steps=20_000)
                self.report_progress(progress_of())
                if report.reason != "max_steps":
                    return report
        assert isinstance(d, RealtimeDispatcher)
        if until is None:
            while not d.wait_idle(timeout=0.25):
                self.report_progress(progress_of())
        report = d.run(until=until)
        self.report_progress(progress_of())
        return report

    def _wait(self, done: Callable[[], bool], timeout: float | None,
              arrived: threading.Condition) -> bool:
        d = self.dispatcher
        if isinstance(d, DeterministicDispatcher):
            deadline = None if timeout is None else d.now + timeout
            return d.run_until(done, deadline)
        assert isinstance(d, RealtimeDispatcher)
        wall = REALTIME_CALL_TIMEOUT if timeout is None else d.clock.to_wall(timeout)
        # Counted on the dispatcher's active wall clock: time the run spends held
        # (RealtimeDispatcher.pause) does not run a wait out.
        end = d.active_wall() + wall
        with arrived:  # the client actor notifies it on every arrival, close() once more
            while not done():
                left = end - d.active_wall()
                if left <= 0 or self.closed:
                    return False
                arrived.wait(min(left, 0.5) if d.holding else left)
        return True
