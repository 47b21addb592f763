"""Agent behaviours: coroutines driven by their actor under either dispatcher."""

from __future__ import annotations

from typing import Any

import pytest

from barnraise.actors.base import Agent, DeliveryError, RequestError, WaitTimeout
from barnraise.sim.dispatch import Dispatcher
from barnraise.sim.messages import Message
from tests.helpers import Echo, Recorder


def run(d: Dispatcher) -> str:
    return d.run().reason


def test_sleep_advances_simulation_time(det: Dispatcher) -> None:
    times: list[float] = []

    async def sleeper(agent: Agent) -> None:
        for seconds in (1.0, 2.5, 0.0):
            await agent.sleep(seconds)
            times.append(agent.now)

    det.spawn(Agent, "a", behaviours=(sleeper,))
    assert run(det) == "quiescent"
    assert times == [1.0, 3.5, 3.5]


def test_many_behaviours_in_one_agent_interleave(det: Dispatcher) -> None:
    log: list[tuple[str, float]] = []

    def ticker(name: str, period: float) -> Any:
        async def tick(agent: Agent) -> None:
            for _ in range(3):
                await agent.sleep(period)
                log.append((name, agent.now))
        tick.__name__ = name
        return tick

    agent = det.spawn(Agent, "a", behaviours=(ticker("fast", 1.0), ticker("slow", 1.5)))
    run(det)
    # at t=3 both wake; slow's timer was set first (at 1.5, fast's at 2.0), so it goes first
    assert log == [("fast", 1.0), ("slow", 1.5), ("fast", 2.0), ("slow", 3.0), ("fast", 3.0),
                   ("slow", 4.5)]
    assert all(b.done for b in agent.behaviours)


def test_receive_with_conditions_takes_matching_mail_and_stashes_the_rest(
    dispatcher: Dispatcher,
) -> None:
    got: list[Any] = []

    async def waiter(agent: Agent) -> None:
        first = await agent.receive(from_agent="b", timeout=30)
        got.append(first.content["n"])
        second = await agent.receive(lambda m: m.content.get("n") == 1, timeout=30)
        got.append(second.content["n"])

    a = dispatcher.spawn(Agent, "a", behaviours=(waiter,))
    b = dispatcher.spawn(Agent, "b")
    c = dispatcher.spawn(Agent, "c")
    c.send("a", "status_update", {"n": 1})
    b.send("a", "status_update", {"n": 2})
    assert run(dispatcher) == "quiescent"
    assert got == [2, 1]
    assert not a._stash  # the stashed one was taken by the second receive


def test_timeouts_raise_inside_the_behaviour(det: Dispatcher) -> None:
    outcomes: list[str] = []

    async def impatient(agent: Agent) -> None:
        try:
            await agent.receive(message_type="task_result", timeout=5.0)
        except WaitTimeout as exc:
            outcomes.append(f"receive timed out at {agent.now}: {exc}")
        try:
            await agent.request("sink", "task_assignment", {}, timeout=2.0)
        except WaitTimeout:
            outcomes.append(f"request timed out at {agent.now}")

    det.spawn(Recorder, "sink")  # never answers
    det.spawn(Agent, "a", behaviours=(impatient,))
    assert run(det) == "quiescent"
    assert outcomes[0].startswith("receive timed out at 5.0: timed out waiting for a message")
    assert outcomes[1] == "request timed out at 7.0"


def test_a_reply_in_time_cancels_the_timeout_and_time_does_not_run_on(det: Dispatcher) -> None:
    async def ask(agent: Agent) -> None:
        await agent.request("echo", "task_assignment", {}, timeout=100.0)

    det.spawn(Echo, "echo")
    det.spawn(Agent, "a", behaviours=(ask,))
    report = det.run()
    assert (report.reason, report.now) == ("quiescent", 0.0)


def test_requests_fail_fast_when_undeliverable_and_on_error_replies(det: Dispatcher) -> None:
    seen: list[str] = []

    class Grumpy(Agent):
        def handle_task_assignment(self, message: Message) -> None:
            self.reply_error(message, "permission_denied", "not today")

    async def ask(agent: Agent) -> None:
        try:
            await agent.request("nobody", "task_assignment", {})
        except DeliveryError as exc:
            seen.append(f"delivery: {exc.report.statuses}")
        try:
            await agent.request("grumpy", "task_assignment", {})
        except RequestError as exc:
            seen.append(f"error: {exc.code}")

    det.spawn(Grumpy, "grumpy")
    det.spawn(Agent, "a", behaviours=(ask,))
    run(det)
    assert seen == ["delivery: {'nobody': 'dropped'}", "error: permission_denied"]


def test_a_failing_behaviour_is_reported_and_the_run_goes_on(dispatcher: Dispatcher) -> None:
    done: list[str] = []

    async def broken(agent: Agent) -> None:
        await agent.sleep(1.0)
        raise RuntimeError("wrench in the works")

    async def healthy(agent: Agent) -> None:
        await agent.sleep(2.0)
        done.append("healthy")

    errors = dispatcher.spawn(Recorder, "errors-watcher")
    errors.subscribe("errors")
    agent = dispatcher.spawn(Agent, "a", behaviours=(broken, healthy))
    assert run(dispatcher) == "quiescent"
    assert done == ["healthy"]
    failed = next(b for b in agent.behaviours if b.name == "broken")
    assert isinstance(failed.error, RuntimeError)
    assert dispatcher.statistics().behaviour_errors == 1
    [report] = errors.got
    assert report.message_type == "error_report"
    assert report.content == {"agent": "a", "where": "broken", "error": "RuntimeError",
                              "detail": "wrench in the works"}
    assert [r.type for r in dispatcher.trace.records("error")] == ["exception"]


def test_a_failing_handler_is_reported_and_the_actor_lives_on(det: Dispatcher) -> None:
    class Fragile(Recorder):
        def handle_task_update(self, message: Message) -> None:
            if message.content.get("boom"):
                raise ValueError("bad input")
            self.got.append(message)

    fragile = det.spawn(Fragile, "f")
    fragile.send("f", "task_update", {"boom": True})
    fragile.send("f", "task_update", {"ok": 1})
    run(det)
    assert fragile.contents("ok") == [1]
    assert det.statistics().behaviour_errors == 1


def test_awaiting_something_foreign_is_a_clear_error(det: Dispatcher) -> None:
    import asyncio

    caught: list[str] = []

    async def confused(agent: Agent) -> None:
        try:
            await asyncio.sleep(0)
        except TypeError as exc:
            caught.append(str(exc))

    det.spawn(Agent, "a", behaviours=(confused,))
    run(det)
    assert len(caught) == 1 and "may await only their actor's effects" in caught[0]


def test_bad_wait_arguments_are_named(det: Dispatcher) -> None:
    agent = det.spawn(Agent, "a")
    with pytest.raises(ValueError, match="seconds"):
        agent.sleep(-1)
    with pytest.raises(ValueError, match="timeout"):
        agent.receive(timeout=-2)


def test_daemon_receive_is_not_a_deadlock(det: Dispatcher) -> None:
    async def server(agent: Agent) -> None:
        while True:
            message = await agent.receive(message_type="task_assignment", daemon=True)
            agent.reply(message, "task_result", {"ok": True})

    det.spawn(Agent, "server", behaviours=(server,))
    assert det.run().reason == "quiescent"


def test_a_behaviour_never_run_before_its_actor_stops_is_closed(det: Dispatcher) -> None:
    """Started, then stopped before its first step ran: the coroutine is closed with the
    actor, so the collector has no unawaited coroutine to warn about later (the suite
    turns that warning into an error in whichever test it lands)."""
    import gc
    import warnings

    async def never(agent: Agent) -> None:  # pragma: no cover - it must not run
        raise AssertionError("ran")

    actor = det.spawn(Agent, "a")
    task = actor.start_behaviour(never)
    det.stop_actor("a")
    assert task.coro.cr_frame is None  # closed
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        del task
        gc.collect()
