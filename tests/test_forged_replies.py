"""Answers only from whom they were asked (issue 23, finding 1), in-process.

A reply is taken by correlation id *and* sender: the letter must come from the
actor the request went to (or be the dispatcher's own ``error_report`` about
it). A third party's letter carrying the right correlation id answers nothing;
it is a dead letter ``forged_reply``, counted and traced, and the real answer
still arrives. Both dispatchers, agents' effects and Clients alike.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from typing import Any

import msgspec
import pytest

from barnraise.actors.base import Agent
from barnraise.actors.client import ClientActor
from barnraise.actors.errors import RequestError
from barnraise.actors.world import Simulation
from barnraise.sim.dispatch import Dispatcher
from barnraise.sim.dispatch.core import SYSTEM
from barnraise.sim.messages import Message
from barnraise.sim.trace import DROP
from tests.helpers import Service


class SlowEcho(Agent):
    """Answers a task_assignment after 5 simulated seconds, with the same content."""

    def handle_task_assignment(self, message: Message) -> None:
        self.asked_with = message.metadata.correlation_id
        self.call_later(5.0, lambda: self.reply(message, "task_result",
                                                {"from": "echo", **message.content}))


def _until(simu: Simulation, done: Callable[[], bool], timeout: float = 10.0) -> bool:
    """Deterministic: deliver what is due now, then look. Realtime: look until ``done``
    or ``timeout`` wall seconds (the letter is handled on the client's own thread)."""
    simu.settle()
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            return False
        threading.Event().wait(0.005)
    return True


def _forged_drops(d: Dispatcher) -> list[dict[str, Any]]:
    return [msgspec.json.decode(r.content) for r in d.trace.records(DROP)
            if b"forged_reply" in r.content]


def test_a_third_agent_cannot_answer_a_waiting_agents_request(dispatcher: Dispatcher) -> None:
    got: list[dict[str, Any]] = []
    seen: list[str] = []

    async def ask(agent: Agent) -> None:
        reply = await agent.request("echo", "task_assignment", {"n": 1}, timeout=30.0)
        got.append({"from": reply.from_agent, **reply.content})

    async def forge(agent: Agent) -> None:
        await agent.sleep(1.0)
        waiting = list(dispatcher.actor("asker")._replies)  # type: ignore[attr-defined]
        seen.extend(waiting)
        for cid in waiting:  # the very id the asker waits on, not a guess
            agent.send("asker", "task_result", {"FORGED_BY": agent.name}, correlation_id=cid)

    dispatcher.spawn(SlowEcho, "echo")
    dispatcher.spawn(Agent, "asker", behaviours=(ask,))
    dispatcher.spawn(Agent, "mallory", behaviours=(forge,))
    report = dispatcher.run()
    assert report.reason == "quiescent", report.describe()
    assert len(seen) == 1  # the forger had the right id while the asker waited
    assert got == [{"from": "echo", "n": 1}]  # the real answer, and only it
    assert dispatcher.statistics().dead_letters == {"forged_reply": 1}
    drops = _forged_drops(dispatcher)
    assert [d["reason"] for d in drops] == ["forged_reply"]
    record = next(r for r in dispatcher.trace.records(DROP) if b"forged_reply" in r.content)
    assert (record.sender, record.recipient) == ("mallory", "asker")


def test_the_dispatchers_own_error_report_still_answers(det: Dispatcher) -> None:
    """``system`` reports a bounced request (``mailbox_full``) to its sender with the
    request's correlation id: that is no forgery, and the request fails with it."""
    failures: list[str] = []

    async def ask(agent: Agent) -> None:
        try:
            await agent.request("silent", "task_assignment", {}, timeout=30.0)
        except RequestError as exc:
            failures.append(exc.code)

    async def bounce(agent: Agent) -> None:
        await agent.sleep(1.0)
        for cid in list(det.actor("asker")._replies):  # type: ignore[attr-defined]
            det.send(det.message(SYSTEM, "asker", "error_report",
                                 {"error_code": "mailbox_full"}, correlation_id=cid))

    det.spawn(Service, "silent")  # keeps every letter, answers none
    det.spawn(Agent, "asker", behaviours=(ask,))
    det.spawn(Agent, "ops", behaviours=(bounce,))
    det.run()
    assert failures == ["mailbox_full"]
    assert "forged_reply" not in det.statistics().dead_letters
    assert det.now == 1.0  # answered by the report, not timed out


@pytest.mark.parametrize("to", ["broadcast", "topic:news", "type:builder"])
def test_a_request_to_a_group_is_refused_before_anything_is_sent(det: Dispatcher,
                                                                 to: str) -> None:
    errors: list[str] = []

    async def ask(agent: Agent) -> None:
        try:
            await agent.request(to, "task_assignment", {})
        except ValueError as exc:
            errors.append(str(exc))

    det.spawn(Agent, "asker", behaviours=(ask,))
    det.spawn(SlowEcho, "echo")
    before = det.message_counts()
    det.run()
    assert len(errors) == 1 and repr(to) in errors[0] and "not a group" in errors[0]
    assert det.message_counts() == before  # nothing was sent, nothing dead


@pytest.mark.parametrize("mode", ["deterministic", "realtime"])
def test_a_member_cannot_answer_another_clients_call(mode: str) -> None:
    """The attack of finding 1, in-process: Bob waits at a barrier; Mallory, a member,
    sends him a ``coordination_response`` with his call's own correlation id."""
    options: dict[str, Any] = {"time_scale": 50.0} if mode == "realtime" else {}
    with Simulation(seed=3, mode=mode, **options) as simu:
        host = simu.client("host")
        sid = host.call("session_create", session_name="forge", grid_size=12)["session_id"]
        bob, carl, mallory = (simu.client(n) for n in ("bob", "carl", "mallory"))
        for c in (bob, carl, mallory):
            assert c.call("session_join", session_id=sid, agent_name=c.agent_id,
                          role="builder")["success"]
        pending = bob.submit("a2a_barrier_enter", barrier_id="b", expected_count=2,
                             timeout=60)
        cid = pending._correlation_id
        d = simu.dispatcher
        forged = d.message("mallory", "bob", "coordination_response",
                           {"success": True, "released": True, "FORGED_BY": "mallory"},
                           correlation_id=cid)
        assert d.send(d.seal(forged)).ok  # delivered to bob's mailbox ...
        assert _until(simu, lambda: d.statistics().dead_letters.get("forged_reply") == 1)
        assert pending.poll() is None  # ... and it answered nothing
        assert carl.call("a2a_barrier_enter", barrier_id="b", expected_count=2,
                         timeout=60)["success"]
        result = pending.result(timeout=60)
        assert result["success"] and "FORGED_BY" not in result, result
        assert d.statistics().dead_letters.get("forged_reply") == 1
        if mode == "deterministic":
            drops = [r for r in d.trace.records(DROP) if b"forged_reply" in r.content]
            assert [(r.sender, r.recipient) for r in drops] == [("mallory", "bob")]


def test_a_request_to_a_remote_agent_carries_a_random_correlation_id(det: Dispatcher) -> None:
    """Its id crosses the process with the letter: a token, not the seeded counter; the
    remote agent answers with it, and only its answer is taken."""
    got: list[tuple[str, dict[str, Any]]] = []

    async def ask(agent: Agent) -> None:
        for peer in ("remote-1", "local"):
            reply = await agent.request(peer, "task_assignment", {"to": peer}, timeout=30.0)
            got.append((reply.from_agent, dict(reply.content)))

    remote = det.spawn(ClientActor, "remote-1")
    remote.remote = True
    det.spawn(SlowEcho, "local")
    det.spawn(Agent, "asker", behaviours=(ask,))
    det.run(until=1.0)
    assert got == []  # the remote agent has not answered yet
    [letter] = remote.inbox
    cid = letter.metadata.correlation_id
    assert cid is not None and re.fullmatch(r"[A-Za-z0-9_-]{32}", cid), cid
    counter = det.next_id().rsplit("-", 1)[0]
    assert counter not in cid
    det.send(det.message("mallory", "asker", "task_result", {"FORGED_BY": "mallory"},
                         correlation_id=cid))
    det.send(det.message("remote-1", "asker", "task_result", {"from": "remote"},
                         correlation_id=cid))
    det.run()
    assert got[0] == ("remote-1", {"from": "remote"})
    assert got[1][0] == "local"
    assert det.statistics().dead_letters.get("forged_reply") == 1
    # The request to the in-process agent kept the seeded id (what the digests pin).
    assert det.actor("local").asked_with.startswith(counter + "-")  # type: ignore[attr-defined]


def test_a_call_its_service_never_took_is_no_longer_expected() -> None:
    """A call whose letter the service did not accept (here: the service is stopped)
    answers ``no_reply`` at once and leaves no awaited id behind it: nothing could
    answer it, so nothing may."""
    with Simulation(seed=3) as simu:
        client = simu.client("carol")
        assert client.session_create(session_name="S")["success"]
        before = dict(client._actor.expected)
        simu.dispatcher.stop_actor("coordinator")
        got = client.session_get_state()
        assert got["success"] is False and got["error"] == "no_reply", got
        assert client._actor.expected == before == {}
