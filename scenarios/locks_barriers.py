"""Mutual exclusion with a leased lock, then a barrier: at most one agent in the critical section.

``agents`` builders each make ``rounds`` passes through a critical section
guarded by the named lock ``critical``: ``a2a_lock_acquire`` with ``wait``
seconds to wait and a ``lease``, then hold it for a seeded time between
``hold_min`` and ``hold_max`` simulated seconds, note when they entered and left,
and release it (if it is still theirs); before each pass an agent thinks for a
seeded time of up to ``think`` seconds, so the seed decides who queues when.
Then they all meet at the barrier ``done``. Each agent's timeline is in its
outcome; the scenario computes from them how many agents were ever in the
critical section at once. A lease is a term renewed while its holder is live
(docs/reliability.md): a lease shorter than a hold is extended, term by term,
until the release, so exclusion holds whatever the lease; a holder that leaves or
is found offline loses the lock at once.

Parameters: agents, rounds, hold_min, hold_max, lease, wait, think.
Success: every acquisition granted, every release accepted, at most one agent
in the critical section at any time (max_concurrent 1), no lease expired, and
the barrier released every agent.

Resumed after a kill (``barnraise resume``, realtime): how far each agent had got
is in no service, so its next incarnation goes through its script again
(``_kit.Replay``): its calls are answered from the stored log and not made again,
up to the section it was in (or waiting for) at the kill, which the kill cut short
and which is done again, live, from its acquire on (the lock is free in the
restored world, or still its name's, and acquiring a lock one holds renews it; its
waiters and the barrier's arrivals were the stopped run's). A release the log
shows done or a barrier it shows released, whose answer the kill took, is answered
from that.
"""

from __future__ import annotations

from typing import Any

from barnraise.actors.agents.participant import Participant
from barnraise.actors.world import Simulation
from barnraise.scenarios import COUNT, WAIT, Bound, ParamError
from barnraise.scenarios._kit import (
    PATIENCE,
    Replay,
    calls_before,
    host_session,
    mark,
    max_concurrent,
    session_events,
    spawn,
)

NAME = "locks_barriers"
PARAMS: dict[str, Any] = {
    "agents": 3, "rounds": 2, "hold_min": 0.2, "hold_max": 1.0, "lease": 30.0, "wait": 60.0,
    "think": 0.5,
}
#: What each parameter may be, checked before the run (``barnraise scenarios locks_barriers``).
BOUNDS = {"agents": COUNT, "rounds": COUNT, "hold_min": WAIT, "hold_max": WAIT,
          "lease": Bound(above=0, high=86_400), "wait": WAIT, "think": WAIT}
LOCK, BARRIER = "critical", "done"
#: A realtime run resumes by running this script again on the restored world, each
#: agent replaying its stored calls up to the section the kill cut (see above).
RESUMABLE = True


async def contender(agent: Participant) -> None:
    """Acquire, hold for a seeded time, release; ``rounds`` times; then the barrier."""
    p = agent.params
    io = Replay(agent, p.get("before", ()))  # a resumed run: its calls before the kill
    outcome = agent.outcome
    outcome.update(sections=[], granted=0, refused=0, waited=0.0, waits=0, released=0,
                   release_refused=0)
    for _ in range(int(p["rounds"])):
        await io.sleep(float(p["think"]) * float(agent.rng.random()))
        got = await io.call("a2a_lock_acquire", lock_id=LOCK, wait=float(p["wait"]),
                            lease=float(p["lease"]), call_timeout=None)
        if not got.get("granted"):
            outcome["refused"] += 1
            mark(agent, "lock_refused", reason=got.get("reason"))
            continue
        entered = io.now
        outcome["granted"] += 1
        outcome["waited"] += float(got["waited"])
        outcome["waits"] += int(got["waited"] > 0)
        mark(agent, "enter", waited=got["waited"])
        hold = float(p["hold_min"]) + (float(p["hold_max"]) - float(p["hold_min"])) * float(
            agent.rng.random())
        await io.sleep(hold)
        outcome["sections"].append([entered, io.now])
        mark(agent, "leave", held=round(hold, 6))
        released = await io.call("a2a_lock_release", lock_id=LOCK)
        if released.get("success"):
            outcome["released"] += 1
        else:
            outcome["release_refused"] += 1  # the lease ran out: someone else has it now
    barrier = await io.call("a2a_barrier_enter", barrier_id=BARRIER,
                            expected_count=agent.crew, timeout=PATIENCE, call_timeout=None)
    outcome["barrier"] = bool(barrier.get("released"))
    mark(agent, "barrier", released=outcome["barrier"])


def _before_kill(simu: Simulation, sid: str, agent_id: str) -> list[dict[str, Any]]:
    """A resumed run: ``agent_id``'s lock and ``done`` barrier calls before the kill, less
    the sections a kill cut (acquired, or asked for, and never released), which were
    or are to be done again."""
    image = simu.restored
    assert image is not None
    calls = [c for c in calls_before(simu, agent_id)
             if c["tool"] in ("a2a_lock_acquire", "a2a_lock_release")
             or (c["tool"] == "a2a_barrier_enter" and c["args"].get("barrier_id") == BARRIER)]
    events = [e for e in session_events(simu, sid, "lock_released", "barrier_released")
              if e["seq"] < image.seq]
    for call in calls:
        if call["answer"] is not None:
            continue
        end = call["until"] if call["until"] is not None else image.seq
        if call["tool"] == "a2a_lock_release":
            done = [e for e in events if e["event"] == "lock_released"
                    and call["seq"] < e["seq"] < end and e["holder"] == agent_id]
            if done:
                call.update(answered=done[0]["t"], answer={
                    "success": True, "released": True, "lock_id": LOCK,
                    "next_holder": done[0].get("next_holder")})
        elif call["tool"] == "a2a_barrier_enter":
            # released if the log shows it: its event, or another agent's answer
            released = [e["t"] for e in events if e["event"] == "barrier_released"
                        and call["seq"] < e["seq"] < end
                        and e["barrier_id"] == BARRIER and agent_id in e["arrived"]]
            released += [c["answered"] for other in _crew(simu, sid) if other != agent_id
                         for c in calls_before(simu, other)
                         if c["tool"] == "a2a_barrier_enter" and c["answer"] is not None
                         and c["seq"] < end and c["answered"] >= call["asked"]
                         and c["args"].get("barrier_id") == BARRIER
                         and c["answer"].get("released")
                         and agent_id in c["answer"].get("arrived", ())]
            if released:
                call.update(answered=min(released), answer={
                    "success": True, "released": True, "barrier_id": BARRIER})
    # a section a kill cut (no answered release before the next acquire): done again
    kept: list[dict[str, Any]] = []
    for i, call in enumerate(calls):
        if call["tool"] == "a2a_lock_acquire":
            after = next((c for c in calls[i + 1:] if c["tool"] != "a2a_lock_release"
                          or c["answer"] is not None), None)
            if after is None or after["tool"] != "a2a_lock_release":
                continue
        elif call["tool"] == "a2a_lock_release" and call["answer"] is None:
            continue
        kept.append(call)
    return kept


def _crew(simu: Simulation, sid: str) -> list[str]:
    image = simu.restored
    assert image is not None
    return list(image.sessions[sid].members) if sid in image.sessions else []


def run(simu: Simulation, *, agents: int, rounds: int, hold_min: float, hold_max: float,
        lease: float, wait: float, think: float) -> dict[str, Any]:
    if agents < 1 or rounds < 1 or not 0 <= hold_min <= hold_max:
        raise ParamError("need agents >= 1, rounds >= 1 and 0 <= hold_min <= hold_max")
    _, sid = host_session(simu, session_name="Locks and Barriers", grid_size=16,
                          max_agents=agents)
    crew = [spawn(simu, sid, f"builder-{i + 1}", "builder", crew=agents, behaviour=contender,
                  rounds=rounds, hold_min=hold_min, hold_max=hold_max, lease=lease, wait=wait,
                  think=think, **({"before": _before_kill(simu, sid, f"builder-{i + 1}")}
                                  if simu.restored is not None else {}))
            for i in range(agents)]
    simu.run()
    sections = [tuple(s) for a in crew for s in a.outcome.get("sections", [])]
    granted = session_events(simu, sid, "lock_granted")
    return {
        "session_id": sid,
        "acquisitions": sum(a.outcome.get("granted", 0) for a in crew),
        "refusals": sum(a.outcome.get("refused", 0) for a in crew),
        "max_concurrent": max_concurrent((float(s), float(e)) for s, e in sections),
        "waits": sum(a.outcome.get("waits", 0) for a in crew),
        "total_wait": round(sum(a.outcome.get("waited", 0.0) for a in crew), 6),
        "releases": sum(a.outcome.get("released", 0) for a in crew),
        "release_refused": sum(a.outcome.get("release_refused", 0) for a in crew),
        "lease_expired": len(session_events(simu, sid, "lock_expired")),
        "holders": [e["holder"] for e in granted if e["lock_id"] == LOCK],
        "barrier_released": sum(1 for a in crew if a.outcome.get("barrier")),
        "expected": agents * rounds,
        "agents": agents,
    }


def check(summary: dict[str, Any]) -> bool:
    m = summary["metrics"]
    return bool(m["acquisitions"] == m["expected"] == m["releases"] and m["refusals"] == 0
                and m["max_concurrent"] == 1 and m["lease_expired"] == 0
                and m["release_refused"] == 0 and m["barrier_released"] == m["agents"]
                and summary["behaviour_errors"] == 0)
