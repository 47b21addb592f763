"""Shared state, events and role permissions, with one builder allowed to delegate by policy.

An observer joins first and subscribes to the session's events. Then the crew
joins: an architect, the builder ``foreman`` and ``builders - 1`` other builders,
and a tester. Every member reads ``session_get_state`` and notes whether it sees
every member. Members try what their role forbids: a builder and the tester
``task_delegate``, the observer ``builder_place_tile`` and ``region_claim``, the
foreman ``build_checkpoint``. The policy (the ``SIMULATION`` dict passes it to the
Simulation) adds one rule: the agent ``foreman`` may ``task_delegate``. Once the
architect has subscribed to ``task_completed`` events it tells the foreman to go;
the foreman delegates a review task to the tester, who accepts it and completes it.
Each member first waits a seeded moment.

Parameters: builders (the foreman included).
Success: every forbidden call was refused with permission_denied (and nothing
was written: no tile placed, no claim made); every member's state showed every
member; the observer received the session's events, the foreman's task among
them; the architect's filtered subscription received that task's completion;
the foreman's delegation succeeded and the tester completed the task.

Resumed after a kill (``barnraise resume``, realtime), each member is told what it
was answered before the kill (the forbidden calls it had tried are not tried again,
their refusals count), the observer and the architect what events had reached
them, and the review task is taken from the task queue: the foreman does not
delegate it again, nor wait for a result the queue holds; the tester knows it did it.
"""

from __future__ import annotations

from typing import Any

from barnraise.actors.agents.participant import (
    FINISHED,
    Participant,
    accept_next,
    my_delegations,
    results_read,
)
from barnraise.actors.base import WaitTimeout
from barnraise.actors.world import Simulation
from barnraise.scenarios import COUNT, ParamError
from barnraise.scenarios._kit import answered_before, deliveries, host_session, mark, spawn

NAME = "permissions"
PARAMS: dict[str, Any] = {"builders": 2}
#: What each parameter may be, checked before the run (``barnraise scenarios permissions``).
BOUNDS = {"builders": COUNT}
#: A realtime run resumes by running this script again on the restored world: what a
#: member was answered and told before the kill is read from the stored log and
#: handed to its next incarnation, the review task from the task queue (see above).
RESUMABLE = True
FOREMAN = "foreman"
# The one rule on top of the role matrix: this builder (by id or name) may delegate.
SIMULATION: dict[str, Any] = {
    "policy": [{"agent": FOREMAN, "tool": "task_delegate", "allow": True}],
}
ARCHITECT, TESTER, OBSERVER = "architect-1", "tester-1", "observer-1"

#: What each kind of member tries that its role does not allow.
FORBIDDEN: dict[str, list[tuple[str, dict[str, Any]]]] = {
    "builder": [("task_delegate", {"target_agent_id": TESTER, "task_type": "review",
                                   "description": "not mine to give"})],
    "tester": [("task_delegate", {"target_agent_id": TESTER, "task_type": "test"})],
    "observer": [("builder_place_tile", {"tile_type": "code", "x": 1, "y": 1}),
                 ("region_claim", {"region": {"x": 0, "y": 0, "width": 4, "height": 4}})],
    "foreman": [("build_checkpoint", {"checkpoint_name": "not mine to take"})],
}


async def _pause(agent: Participant) -> None:
    await agent.sleep(float(agent.params["jitter"]) * float(agent.rng.random()))


async def _look(agent: Participant) -> None:
    """Read the shared state; note which members it shows."""
    state = await agent.call("session_get_state", include=["agents"])
    seen = sorted(a["agent_id"] for a in state.get("state", {}).get("agents", []))
    agent.outcome["sees"] = seen
    mark(agent, "state read", agents=len(seen))


async def _try_forbidden(agent: Participant, kind: str) -> None:
    # what it tried before a kill, with the answers it got (a resumed run's params)
    tried = agent.outcome.setdefault("forbidden", list(agent.params.get("tried", ())))
    for tool, args in FORBIDDEN[kind]:
        if any(t["tool"] == tool for t in tried):
            continue
        answer = await agent.call(tool, **args)
        tried.append({"agent": agent.agent_name, "tool": tool,
                      "success": bool(answer.get("success")), "error": answer.get("error")})
        mark(agent, "tried", tool=tool, error=answer.get("error"))


def _is_event(message: Any) -> bool:
    return message.from_agent != "registry" and "event" in message.content


async def watcher(agent: Participant) -> None:
    """Subscribe, wait until every member has joined, look, try to write, then record."""
    expected = int(agent.params["members"])
    record: list[str] = list(agent.params.get("heard", ()))  # before a kill
    agent.outcome.update(events=len(record), record=record)
    await agent.call("a2a_subscribe")
    state = await agent.call("session_get_state", include=["agents"])
    joined = {a["agent_id"] for a in state["state"]["agents"]}
    # Under a fault plan an agent_joined event may be lost (events are not sent again):
    # with none come for 4 * retry seconds, or another event come first (the crew's
    # barrier is released once all have joined), the state says who has joined.
    faults = agent.dispatcher.faults
    poll = None if faults is None else 4 * faults.retry
    while len(joined) < expected:
        try:
            message = await agent.receive(_is_event, daemon=True, timeout=poll,
                                          description="members joining")
        except WaitTimeout:
            message = None
        if message is not None:
            record.append(message.content["event"])
            if message.content["event"] == "agent_joined":
                joined.add(message.content["agent_id"])
                continue
        if poll is not None:
            state = await agent.call("session_get_state", include=["agents"])
            joined |= {a["agent_id"] for a in state.get("state", {}).get("agents", [])}
    await _pause(agent)
    await _look(agent)
    await _try_forbidden(agent, "observer")
    while True:
        message = await agent.receive(_is_event, daemon=True, description="the next event")
        record.append(message.content["event"])
        agent.outcome["events"] = len(record)


async def _review_task(agent: Participant, **match: str) -> dict[str, Any] | None:
    """After a restart: the review task, if the foreman had delegated it (the task queue)."""
    queue = await agent.call("task_get_queue", filter={"status": "all"})
    found = next((t for t in queue.get("tasks", ()) if t["type"] == "review"
                  and all(t.get(k) == v for k, v in match.items())), None)
    if found is not None:
        results_read(agent, [found])  # the foreman's own review, finished: its result
    return found


async def lead(agent: Participant) -> None:
    """The architect: subscribe to completions, let the foreman go, hear the completion."""
    await _pause(agent)
    await _look(agent)
    await agent.call("a2a_subscribe", event_type="task_completed")
    heard = agent.params.get("heard")  # the task_completed event that came before a kill
    if heard is not None:
        agent.outcome["heard_completed"] = heard
        return
    review = await _review_task(agent, delegated_by=FOREMAN) if agent.resuming else None
    if review is None:
        await agent.call("a2a_send_message", to_agent=FOREMAN, content={"event": "go"})
    elif review["status"] in FINISHED:
        # finished before the kill, its event never delivered: there is nothing to hear
        mark(agent, "missed task_completed", task_id=review["task_id"])
        return
    message = await agent.receive(lambda m: m.content.get("event") == "task_completed",
                                  timeout=600.0, description="a task_completed event")
    agent.outcome["heard_completed"] = message.content.get("task_id")
    mark(agent, "heard task_completed", task_id=message.content.get("task_id"))


async def member(agent: Participant) -> None:
    """A builder (the foreman or not): look, try what is forbidden; the foreman delegates."""
    await _pause(agent)
    await _look(agent)
    if agent.agent_name != FOREMAN:
        await _try_forbidden(agent, "builder")
        return
    await _try_forbidden(agent, "foreman")
    earlier = [t for t in await my_delegations(agent) if t["type"] == "review"] \
        if agent.resuming else []
    if earlier:  # delegated before a kill: taken back, not delegated again
        task = earlier[0]
        agent.outcome["delegated"] = {"success": True, "task_id": task["task_id"],
                                      "error": None}
        mark(agent, "taken back", task_id=task["task_id"], status=task["status"])
        if task["status"] in FINISHED:
            agent.outcome["result"] = task["status"]
            return
    else:
        await agent.receive(lambda m: m.content.get("event") == "go", timeout=600.0,
                            description="the architect's go")
        delegated = await agent.call("task_delegate", target_agent_id=TESTER,
                                     task_type="review", description="review the plan")
        agent.outcome["delegated"] = {k: delegated.get(k) for k in ("success", "task_id",
                                                                    "error")}
        mark(agent, "delegated", task_id=delegated.get("task_id"))
        if not delegated.get("success"):
            return
    result = await agent.receive(lambda m: m.message_type == "task_result",
                                 timeout=600.0, description="the review's result")
    agent.outcome["result"] = result.content.get("status")


async def reviewer(agent: Participant) -> None:
    """The tester: look, try to delegate, then accept and complete the review it is given."""
    await _pause(agent)
    await _look(agent)
    await _try_forbidden(agent, "tester")
    done = await _review_task(agent, assigned_to=agent.name, status="completed") \
        if agent.resuming else None
    if done is not None:  # reviewed before a kill
        agent.outcome["reviewed"] = done["task_id"]
        return

    async def take(a: Participant, task: dict[str, Any]) -> dict[str, Any]:
        return await a.call("task_accept", task_id=task["task_id"])

    task, accepted = await accept_next(agent, frozenset({"review"}), take)
    if accepted.get("success"):
        await agent.call("task_report", task_id=task["task_id"], status="completed",
                         result={"reviewed": True})
        agent.outcome["reviewed"] = task["task_id"]


def _before_kill(simu: Simulation, agent_id: str) -> dict[str, Any]:
    """A resumed run: what ``agent_id`` had been answered and told before the kill, from
    the stored log (its forbidden calls; the events that reached a subscriber); {} else."""
    if simu.restored is None:
        return {}
    forbidden = {tool for tries in FORBIDDEN.values() for tool, _ in tries}
    tried = [{"agent": agent_id, "tool": tool, "success": bool(answer.get("success")),
              "error": answer.get("error")}
             for tool, _, answer in answered_before(simu, agent_id) if tool in forbidden]
    events = [d["content"] for d in deliveries(simu, agent_id, "status_update")
              if d["seq"] < simu.restored.seq and d["from"] != "registry"
              and "event" in d["content"]]
    out: dict[str, Any] = {"tried": tried}
    if agent_id == OBSERVER:
        out["heard"] = [e["event"] for e in events]
    elif agent_id == ARCHITECT:
        completed = [e["task_id"] for e in events if e["event"] == "task_completed"]
        if completed:
            out["heard"] = completed[0]
    return out


def run(simu: Simulation, *, builders: int) -> dict[str, Any]:
    if builders < 1:
        raise ParamError(f"builders must be at least 1 (the foreman), got {builders}")
    names = [FOREMAN, *[f"builder-{i + 1}" for i in range(builders - 1)]]
    crew = 2 + len(names)  # the architect, the builders and the tester
    members = crew + 1
    _, sid = host_session(simu, session_name="Permissions", grid_size=32, max_agents=members)
    jitter = 1.0
    observer = spawn(simu, sid, OBSERVER, "observer", crew=crew, behaviour=watcher,
                     members=members, jitter=jitter, **_before_kill(simu, OBSERVER))
    simu.run()  # the observer is subscribed before anyone else joins
    agents = [spawn(simu, sid, ARCHITECT, "architect", crew=crew, behaviour=lead,
                    jitter=jitter, **_before_kill(simu, ARCHITECT))]
    agents += [spawn(simu, sid, name, "builder", crew=crew, behaviour=member, jitter=jitter,
                     **_before_kill(simu, name))
               for name in names]
    agents.append(spawn(simu, sid, TESTER, "tester", crew=crew, behaviour=reviewer,
                        jitter=jitter, **_before_kill(simu, TESTER)))
    simu.run()
    everyone = [observer, *agents]
    ids = sorted(a.name for a in everyone)
    tried = [t for a in everyone for t in a.outcome.get("forbidden", [])]
    foreman = agents[1]
    task_id = (foreman.outcome.get("delegated") or {}).get("task_id")
    record: list[str] = observer.outcome.get("record", [])
    return {
        "session_id": sid,
        "members": len(everyone),
        "visible_states": sum(1 for a in everyone if a.outcome.get("sees") == ids),
        "forbidden_calls": len(tried),
        "denials": sum(1 for t in tried if t["error"] == "permission_denied"),
        "denied": sorted({f"{t['agent']}:{t['tool']}" for t in tried
                          if t["error"] == "permission_denied"}),
        "events_received": len(record),
        "event_types": sorted(set(record)),
        "foreman_delegated": bool((foreman.outcome.get("delegated") or {}).get("success")),
        "foreman_result": foreman.outcome.get("result"),
        "reviewed": task_id is not None and agents[-1].outcome.get("reviewed") == task_id,
        "subscriber_heard": task_id is not None
        and agents[0].outcome.get("heard_completed") == task_id,
    }


def check(summary: dict[str, Any]) -> bool:
    m = summary["metrics"]
    return bool(m["forbidden_calls"] > 0 and m["denials"] == m["forbidden_calls"]
                and summary["tiles_placed"] == 0 and m["visible_states"] == m["members"]
                and {"agent_joined", "task_created", "task_completed"} <= set(m["event_types"])
                and m["foreman_delegated"] and m["foreman_result"] == "completed"
                and m["reviewed"] and m["subscriber_heard"]
                and summary["tasks_completed"] == 1 and summary["behaviour_errors"] == 0)
