"""Agent: a participant actor, registered, typed, optionally heartbeating, calling tools.

An :class:`Agent` registers with the registry when it starts and unregisters
when it stops, may heartbeat, starts its behaviours, and calls session tools
(:meth:`Agent.call`) as requests to the service that owns each tool.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine, Generator, Mapping
from typing import Any, Final

from barnraise.actors.actor import A2AActor
from barnraise.actors.effects import DEFAULT_TIMEOUT, Done, Effect, ToolCall
from barnraise.sim.binding import BINDING_TOOLS, TAKES_SESSION, bound_session_after, prepare_call
from barnraise.sim.messages import Priority, Region
from barnraise.sim.tools import TOOLS

__all__ = ["MIN_WALL_HEARTBEAT", "Agent"]

#: Realtime mode: wall seconds between two heartbeats, at the least. At a high time scale
#: 5 simulated seconds are a few wall microseconds, and a crew's heartbeats would flood
#: the registry; the registry's offline floor (``registry.MIN_WALL_SILENCE``, 1 s) is
#: more than three of these.
MIN_WALL_HEARTBEAT: Final = 0.25


class _Bind:
    """Awaits a tool call, then binds the agent as :func:`barnraise.sim.binding.bound_session_after`
    says."""

    __slots__ = ("agent", "call", "tool")

    def __init__(self, agent: Agent, tool: str, call: ToolCall) -> None:
        self.agent = agent
        self.tool = tool
        self.call = call

    def __await__(self) -> Generator[Effect, Any, dict[str, Any]]:
        result: dict[str, Any] = yield from self.call.__await__()
        agent = self.agent
        agent.session_id = bound_session_after(self.tool, result, agent.session_id)
        return result


class Agent(A2AActor):
    """A participant: registered with the registry, typed, optionally heartbeating.

    ``behaviours`` are started when the agent starts. With a
    ``heartbeat_interval`` the agent sends a heartbeat to the registry that often.
    """

    agent_type: str | None = "agent"

    def __init__(
        self,
        *,
        agent_type: str | None = None,
        capabilities: tuple[str, ...] | list[str] = (),
        region: Region | None = None,
        behaviours: tuple[Callable[..., Coroutine[Any, Any, Any]], ...] = (),
        heartbeat_interval: float | None = None,
        registry: str = "registry",
        mailbox_capacity: int | None = None,
        stash_limit: int = 1000,
    ) -> None:
        super().__init__(mailbox_capacity=mailbox_capacity, stash_limit=stash_limit)
        if agent_type is not None:
            self.agent_type = agent_type
        self.capabilities = tuple(capabilities)
        self.region = region
        self._initial_behaviours = behaviours
        self.heartbeat_interval = heartbeat_interval
        self.registry = registry
        self._stop_heartbeat: Callable[[], None] | None = None
        self.session_id: str | None = None  # the session this agent joined, if any

    def on_start(self) -> None:
        dispatcher = self.dispatcher
        scale = getattr(dispatcher.clock, "time_scale", None)  # realtime mode only
        if self.heartbeat_interval and scale:
            self.heartbeat_interval = max(self.heartbeat_interval, MIN_WALL_HEARTBEAT * scale)
        if self.registry in dispatcher.actors:
            content: dict[str, Any] = {
                "op": "register", "agent_type": self.agent_type,
                "capabilities": list(self.capabilities),
            }
            if self.region is not None:
                r = self.region
                content["region"] = {"x": r.x, "y": r.y, "width": r.width, "height": r.height}
            if self.heartbeat_interval:
                content["heartbeat_interval"] = self.heartbeat_interval
            self.send(self.registry, "registry_query", content)
            if self.heartbeat_interval:
                self._stop_heartbeat = dispatcher.call_every(
                    self.heartbeat_interval, self, self.heartbeat
                )
        for fn in self._initial_behaviours:
            self.start_behaviour(fn)

    def call(self, tool: str, /, *, call_timeout: float | None = DEFAULT_TIMEOUT,
             **args: Any) -> Awaitable[dict[str, Any]]:
        """Call a session tool (``barnraise.sim.tools.TOOLS``); resumes with its result dict.

        Like a client, and by the same rule (:func:`barnraise.sim.binding.prepare_call`), the
        agent is bound to the session it creates or joins and may then omit
        ``session_id``. An unknown tool resumes at once with the same
        ``unknown_tool`` failure a client gets; a call with no answer in ``call_timeout``
        simulated seconds raises WaitTimeout (tools' own ``timeout`` arguments,
        a barrier's say, pass through untouched).
        """
        return self._call(tool, args, call_timeout)

    def _call(self, tool: str, args: Mapping[str, Any],
              call_timeout: float | None) -> Awaitable[dict[str, Any]]:
        prepared = prepare_call(tool, args, self.session_id)
        if isinstance(prepared, dict):
            return Done(prepared)
        spec, sent = prepared
        call = ToolCall(tool, spec.service, sent, call_timeout)
        # Only a tool that can bind (create, join, leave) is awaited through _Bind: any
        # other leaves the binding as it was, and its caller resumes one layer sooner.
        return _Bind(self, tool, call) if tool in BINDING_TOOLS else call

    def call_fresh(self, tool: str, args: dict[str, Any], /, *,
                   call_timeout: float | None = DEFAULT_TIMEOUT) -> Awaitable[dict[str, Any]]:
        """:meth:`call` with ``args`` given as a dict that the caller made for this call
        alone, of plain JSON data (dicts with string keys, lists, strings, numbers,
        booleans, None), and hands over: it is sent as it is, not copied (``call``
        copies every list in its arguments, so that a caller that changes one afterwards
        changes nothing in the world: for a builder's row, made for the call and never
        touched again, that copy cost ~7,000 instructions a row). ``session_id`` is
        filled in as ``call`` does. Data that is not JSON is refused when the call is
        sent, as ``invalid_argument``; an unknown tool, or one that binds, goes through
        ``call``.
        """
        spec = TOOLS.get(tool)
        if spec is None or tool in BINDING_TOOLS:  # as call() does, args given as a dict
            return self._call(tool, args, call_timeout)
        session_id = self.session_id
        if session_id is not None and "session_id" not in args and tool in TAKES_SESSION:
            args["session_id"] = session_id
        return ToolCall(tool, spec.service, args, call_timeout)

    def heartbeat(self) -> None:
        self.send(self.registry, "heartbeat", {}, priority=Priority.LOW)

    def pause_heartbeats(self) -> None:
        """Stop heartbeating (as a hung agent would) without leaving."""
        if self._stop_heartbeat is not None:
            self._stop_heartbeat()
            self._stop_heartbeat = None

    def set_status(self, status: str) -> None:
        self.send(self.registry, "registry_query", {"op": "set_status", "status": status})

    @property
    def resuming(self) -> bool:
        """The resume hook: True when this agent starts again after a crash.

        A supervisor (``barnraise.actors.supervisor``) builds a fresh agent from the same
        arguments and sets ``incarnation``; the agent then registers again, and
        its behaviours must rebuild what they know from the world's state (the
        task queue, the canvas), never from memory: it has none. A durable store
        that resumes a run sets ``incarnation`` the same way.
        """
        return self.incarnation > 0

    def on_stop(self) -> None:
        self.pause_heartbeats()
        if self.crashed:
            return  # a crash says no goodbyes: the registry hears of it otherwise
        if self.registry in self.dispatcher.actors:
            self.send(self.registry, "registry_query", {"op": "unregister"})
