"""Participant: an agent that is a member of a session and plays one role."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping
from typing import Any, Final

from barnraise.actors.base import Agent
from barnraise.actors.effects import Behaviour as Task
from barnraise.actors.effects import Receive
from barnraise.sim.events import TaskResultRead, body_of
from barnraise.sim.messages import Message

__all__ = ["FINISHED", "RESULT_READ", "Behaviour", "Participant", "accept_next",
           "kept_of_join", "my_delegations", "my_ready_tasks", "results_read", "start_next",
           "wait_for"]

Behaviour = Callable[["Participant"], Coroutine[Any, Any, Any]]

#: Task statuses after which a task's result is in its record for good.
FINISHED = frozenset({"completed", "failed", "cancelled"})
#: Simulated seconds between a role agent's heartbeats unless told otherwise: the registry
#: marks it offline after three missed (15 s), and the coordinator then expires it from
#: its session unless its supervisor brings it back (actors/coordinator.py).
HEARTBEAT: Final = 5.0
#: The event a restarted delegator's reading of a finished task's result leaves in the
#: trace (see :func:`results_read`).
RESULT_READ = TaskResultRead.kind


class Participant(Agent):
    """Joins ``session_id`` as ``agent_name`` / ``role``, then runs ``behaviour``.

    A scenario starts one with :func:`barnraise.kit.spawn`. ``crew`` is how many
    non-observer participants the scenario starts: each waits at the session barrier
    ``ready`` until all have joined, so no one delegates to a member that has not joined
    yet (in realtime mode they start concurrently). Observers may not use barriers; they
    start watching at once. ``params`` are the behaviour's inputs; ``outcome`` is where it
    reports.

    What a behaviour (``async def b(agent: Participant)``) may use: ``agent.name``,
    ``agent.role``, ``agent.session_id`` (the session it joined), ``agent.params``,
    ``agent.outcome``, ``agent.now`` (simulated seconds), ``agent.rng`` (its own seeded
    stream); the awaitables ``agent.call(tool, **args)`` (a session tool: the result is a
    dict with ``success``, and ``error`` and ``message`` when it failed),
    ``agent.sleep(seconds)``, ``agent.receive(...)``, ``agent.request(to, type,
    content)``; and ``agent.send(to, type, content)``. docs/agents.md has the rest.
    """

    def __init__(
        self,
        *,
        session_id: str,
        agent_name: str,
        role: str,
        behaviour: Behaviour,
        crew: int = 1,
        params: dict[str, Any] | None = None,
        capabilities: tuple[str, ...] = (),
        invite_token: str | None = None,
        regroup: bool = False,
        **options: Any,
    ) -> None:
        if role in ("observer", "architect"):
            # an observer hears every event of the session, an architect every
            # task_completed one and every result: a burst of them (a thousand
            # agents joining or finishing) must not overflow the mailbox, nor the
            # stash that keeps what arrives while the behaviour awaits something else
            options.setdefault("mailbox_capacity", 1_000_000)
            options.setdefault("stash_limit", 1_000_000)
        # Every role agent heartbeats (a daemon timer: it keeps no run alive), so a
        # vanished one is noticed and its work goes to another; None turns it off.
        options.setdefault("heartbeat_interval", HEARTBEAT)
        super().__init__(agent_type=role, capabilities=capabilities, **options)
        self.target_session = session_id
        self.agent_name = agent_name
        self.role = role
        self.behaviour = behaviour
        self.crew = crew
        self.params: dict[str, Any] = dict(params or {})
        self.invite_token = invite_token
        #: A resumed run (``Simulation.restore``): the crew restarts together, so its
        #: first incarnation there waits for the others at the ``resumed`` barrier.
        self.regroup = regroup
        self.outcome: dict[str, Any] = {}
        #: The answer to its ``session_join`` (see :func:`kept_of_join`).
        self.joined: dict[str, Any] = {}
        #: Tasks assigned before they were ready, by id, until they are unblocked.
        self.parked_tasks: dict[str, dict[str, Any]] = {}
        #: After a restart: ready tasks read from the task queue, taken before new mail.
        self.resumed_tasks: list[dict[str, Any]] = []

    #: A behaviour error crashes a role agent, for its supervisor to restart (with
    #: backoff, within limits); the error is reported first, as any is.
    crash_on_error = True

    #: Takes the messages that no behaviour waits for and no handler serves, before
    #: they are kept for ``receive``; returns whether it took the message (then it is
    #: not kept). A class default: an agent without one has no extra attribute.
    tap: Callable[[Message], bool] | None = None

    #: The behaviour that joins and then runs :attr:`behaviour` (set on start).
    life: Task | None = None

    def on_start(self) -> None:
        super().on_start()
        self.life = self.start_behaviour(_resume if self.resuming else _life, name=self.role)

    def behaviour_name(self, task: Task) -> str:
        """An error in its life is its behaviour's: named by the function (``builder``,
        or one's own), not by the role the life was started under."""
        if task is self.life:
            return str(getattr(self.behaviour, "__name__", None) or task.name)
        return super().behaviour_name(task)

    def handle_message(self, message: Message) -> None:
        tap = self.tap
        if tap is None or not tap(message):
            super().handle_message(message)


def kept_of_join(joined: dict[str, Any]) -> dict[str, Any]:
    """What a participant keeps of its ``session_join`` answer: all of it but the
    ``session_state`` first look, which is stale as soon as anyone else acts (the
    state is read when needed: ``session_get_state``). Kept, it was about 200 lists
    and dicts per member (a page of 100 agents, each with its capabilities list), so a
    crew of 10,000 held 2 million objects that every full collection walked: 7 full
    collections took 1.5 of the 12.4 CPU seconds of that crew's joins
    (docs/benchmarks.md, conflict_storm)."""
    if "session_state" not in joined:
        return joined
    return {k: v for k, v in joined.items() if k != "session_state"}


async def _resume(agent: Participant) -> None:
    """A member restarted after a crash: it is still a member (a crash is not a leave),
    so it binds to its session and runs its behaviour again, which rebuilds from the
    world's state (``Agent.resuming``). One that crashed before it had joined joins."""
    args: dict[str, Any] = {"session_id": agent.target_session, "agent_name": agent.agent_name,
                            "role": agent.role, "capabilities": list(agent.capabilities)}
    if agent.invite_token is not None:
        args["invite_token"] = agent.invite_token
    joined = kept_of_join(await agent.call("session_join", **args))
    if not joined.get("success") and joined.get("error") != "name_taken":
        agent.outcome = {"error": joined.get("error"), "message": joined.get("message")}
        return
    agent.session_id = agent.target_session
    agent.joined = joined if joined.get("success") else {
        "success": True, "session_id": agent.target_session, "resumed": True}
    if agent.regroup and agent.incarnation == 1 and agent.crew > 1 \
            and agent.role != "observer":
        # The whole crew of a resumed run starts again at once: as at the start, no one
        # goes on (delegates to a member, say) before every one is back in the session.
        ready = await agent.call("a2a_barrier_enter", barrier_id="resumed",
                                 expected_count=agent.crew, timeout=600, call_timeout=None)
        if not ready.get("released"):
            agent.outcome = {"error": "crew_incomplete", "ready": ready}
            return
    elif not agent.regroup and agent.crew > 1 and agent.role != "observer" \
            and not await _past_the_start(agent):
        agent.outcome = {"error": "crew_incomplete"}
        return
    # Its tasks in progress went back to pending when it crashed; they, and any
    # assigned meanwhile, are its to do (accept_next takes these first).
    agent.resumed_tasks.extend(await my_ready_tasks(agent))
    await agent.behaviour(agent)


async def my_ready_tasks(agent: Participant) -> list[dict[str, Any]]:
    """The tasks assigned to ``agent`` that are ready to start, from the task queue."""
    queue = await agent.call("task_get_queue", filter={"assigned_to": agent.name,
                                                       "status": "pending"})
    return list(queue.get("tasks", ()))


async def my_delegations(agent: Agent) -> list[dict[str, Any]]:
    """The tasks ``agent`` delegated, whatever their status, oldest first, from the task
    queue: what a delegator restarted after a crash (``Agent.resuming``) made before it.

    A finished one carries its result (``status``, ``result``, ``message``), so a
    result the crash kept from its delegator is read here, never asked for again.
    """
    queue = await agent.call("task_get_queue", filter={"status": "all"})
    if queue.get("truncated"):
        raise RuntimeError(f"{agent.name}: the task queue is too long to read in one reply")
    mine = [t for t in queue.get("tasks", ()) if t.get("delegated_by") == agent.name]
    results_read(agent, mine)
    return sorted(mine, key=lambda t: (t["created_at"], t["task_id"]))


def results_read(agent: Agent, tasks: Iterable[Mapping[str, Any]]) -> None:
    """``agent``, restarted after a crash (``Agent.resuming``), has read ``tasks`` from the
    task queue: each finished one it delegated has reached it with its result, as its
    ``task_result`` letter would have (a letter to the stopped incarnation died with it,
    and the queue sends none again). Each is traced once per incarnation as a
    ``task_result_read`` event, which a store counts as the result's delivery
    (``delegations.delivered_at``) when no letter had come. Nothing for an agent that
    is not resuming: its results come as letters."""
    if not agent.resuming:
        return
    seen: set[str] = agent.__dict__.setdefault("_results_read", set())
    sid = agent.session_id
    topic = f"session:{sid}:events" if sid is not None else agent.name
    for task in tasks:
        task_id = str(task.get("task_id"))
        if task.get("delegated_by") != agent.name or task.get("status") not in FINISHED \
                or task_id in seen:
            continue
        seen.add(task_id)
        event = TaskResultRead(session_id=sid, task_id=task_id, delegated_by=agent.name,
                               status=str(task.get("status")))
        agent.dispatcher.trace.event(agent.now, agent.name, topic, RESULT_READ, body_of(event))


def wait_for(match: Callable[[Message], bool], description: str, *,
             timeout: float | None = None, daemon: bool = False) -> Awaitable[Message]:
    """What ``agent.receive(match, timeout=..., daemon=..., description=...)`` returns, for
    the waits that happen once per message: the observer's (one per event), the
    architect's and every worker's. ``receive`` wraps even a lone predicate in a
    closure that runs ``all()`` over a generator on every message it tests; built
    directly, the wait and its one test cost a third (0.36 against 1.04 us)."""
    return Receive(match, description, timeout, daemon)


async def _past_the_start(agent: Participant) -> bool:
    """A member its supervisor restarted in a live run: is the crew past the ``ready``
    barrier of the start? One that crashed before its arrival there was recorded
    arrives now (the crew waits for it); one whose first incarnation is still counted
    there, or whose crew was released, goes on. A look with a zero timeout tells which
    (its answer's generation is past the first once the start's barrier was released);
    False when the crew never gathered."""
    look = await agent.call("a2a_barrier_enter", barrier_id="ready",
                            expected_count=agent.crew, timeout=0)
    if look.get("released") or look.get("generation", 1) > 1 \
            or "already waiting" in str(look.get("message", "")):
        return True
    ready = await agent.call("a2a_barrier_enter", barrier_id="ready",
                             expected_count=agent.crew, timeout=600, call_timeout=None)
    return bool(ready.get("released")) or ready.get("generation", 1) > 1


def _task_to_do(m: Message) -> bool:
    return m.message_type == "task_assignment" or m.content.get("event") == "task_unblocked"


async def _life(agent: Participant) -> None:
    args: dict[str, Any] = {"session_id": agent.target_session, "agent_name": agent.agent_name,
                            "role": agent.role, "capabilities": list(agent.capabilities)}
    if agent.invite_token is not None:
        args["invite_token"] = agent.invite_token
    agent.joined = kept_of_join(await agent.call("session_join", **args))
    if not agent.joined.get("success"):
        agent.outcome = {"error": agent.joined.get("error"), "message": agent.joined.get("message")}
        return
    if agent.crew > 1 and agent.role != "observer":
        ready = await agent.call("a2a_barrier_enter", barrier_id="ready",
                                 expected_count=agent.crew, timeout=600, call_timeout=None)
        if not ready.get("released"):
            agent.outcome = {"error": "crew_incomplete", "ready": ready}
            return
    await agent.behaviour(agent)


Accept = Callable[["Participant", dict[str, Any]], Coroutine[Any, Any, dict[str, Any]]]


async def accept_next(agent: Participant, types: frozenset[str],
                      accept: Accept) -> tuple[dict[str, Any], dict[str, Any]]:
    """Wait for a task of one of ``types`` assigned to ``agent`` and accept it.

    A task assigned before it is ready (its dependencies unfinished) is kept
    until the task queue tells its assignee it is unblocked, then accepted. Returns the task and the
    accept result (which may be a failure other than "not ready yet").
    """
    parked = agent.parked_tasks
    while True:
        if agent.resumed_tasks:
            task = agent.resumed_tasks.pop(0)
            if task.get("type") not in types:
                continue
        else:
            # Under faults an assignment or an unblocking may be lost; the task queue
            # then sends each ready task's assignment again until it is accepted, and
            # a second copy of one already accepted is refused (invalid_transition).
            message = await wait_for(_task_to_do, "a task to do", daemon=True)
            content = message.content
            if message.message_type == "task_assignment":
                task = content
                if task.get("type") not in types:
                    continue
            else:
                key = str(content.get("task_id"))
                if key in parked:
                    task = parked.pop(key)
                elif agent.resuming:
                    # Parked by the incarnation before a crash: the record is in the queue.
                    agent.resumed_tasks.extend(await my_ready_tasks(agent))
                    continue
                else:
                    continue
        result = await accept(agent, task)
        if result.get("error") == "invalid_transition":
            parked[task["task_id"]] = task
            continue
        return task, result


async def start_next(agent: Participant, types: frozenset[str], accept: Accept) -> dict[str, Any]:
    """The next task of ``types`` that ``agent`` accepted; one it could not start
    (its region stayed claimed, say) is reported blocked, and the wait goes on."""
    while True:
        task, accepted = await accept_next(agent, types, accept)
        if accepted.get("success"):
            return task
        await agent.call("task_report", task_id=task["task_id"], status="blocked",
                         message=f"could not start: {accepted.get('error')}")
