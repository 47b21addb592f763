"""One delivery path, the deadline queue that times waits out, and typed spawn.

Every way of driving a run (``run()``, ``step()``, ``run_until()``, and the
realtime actor threads) goes through ``Dispatcher.deliver``: dead letters come
out the same. A wait's timeout lives in its actor's deadline queue and counts
as live work while it is unanswered.
"""

from __future__ import annotations

import pathlib
import threading
from typing import Any

import pytest

from barnraise.actors.base import Agent, WaitTimeout
from barnraise.sim.dispatch import Dispatcher, make_dispatcher
from barnraise.sim.messages import Message
from tests.conftest import new_dispatcher
from tests.helpers import Echo, Recorder, mypy_says

ROOT = pathlib.Path(__file__).resolve().parents[1]

DRIVES = ("run", "step", "run_until", "realtime")


class Gated(Recorder):
    """Holds its thread in the handler of a ``gate`` message until told to go on."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.inside = threading.Event()
        self.go_on = threading.Event()

    def handle_status_update(self, message: Message) -> None:
        self.inside.set()
        assert self.go_on.wait(timeout=10)


def _send(d: Dispatcher, to: str, tag: str, expires_in: float | None = None) -> None:
    d.send(d.message("outside", to, "task_update", {"tag": tag}, expires_in=expires_in))


def _drive(d: Dispatcher, how: str) -> None:
    if how == "run":
        d.run()
    elif how == "step":
        while d.step():  # type: ignore[attr-defined]
            pass
    elif how == "run_until":
        assert d.run_until(lambda: False) is False  # type: ignore[attr-defined]
    else:
        assert d.wait_idle(timeout=10)  # type: ignore[attr-defined]


@pytest.mark.parametrize("how", DRIVES)
def test_expiry_offline_and_full_mailbox_dead_letters_are_the_same_however_a_run_is_driven(
    how: str,
) -> None:
    d = new_dispatcher("realtime" if how == "realtime" else "deterministic")
    try:
        with d.start_together():  # realtime: nothing is handled until every letter is queued
            rec = d.spawn(Recorder, "rec", mailbox_capacity=2)
            gone = d.spawn(Gated, "gone")
            _send(d, "rec", "stale", expires_in=0.0)  # expires the moment it is sent
            _send(d, "rec", "fresh")
            _send(d, "rec", "overflow")  # the third letter for a mailbox of two
            d.send(d.message("outside", "gone", "status_update", {"tag": "gate"}))
            _send(d, "gone", "late")
        if how == "realtime":
            # "late" waits behind the gate; the actor stops before it is handled
            assert gone.inside.wait(timeout=10)
            d.stop_actor("gone")
            gone.go_on.set()
        else:
            gone.go_on.set()
            d.stop_actor("gone")  # before anything is delivered: both letters die offline
        _drive(d, how)
        drops = sorted(r.content_obj()["reason"] for r in d.trace.records("drop"))
    finally:
        d.shutdown()
    assert rec.contents("tag") == ["fresh"]
    assert "late" not in gone.contents("tag")
    dead = dict(d.statistics().dead_letters)
    offline = dead.pop("offline")
    assert dead == {"expired": 1, "mailbox_full": 1}
    # deterministic: the gate letter dies offline too; realtime: it was handled
    assert offline == (1 if how == "realtime" else 2)
    assert drops == sorted(["expired", "mailbox_full"] + ["offline"] * offline)


# -- the deadline queue ------------------------------------------------------------------------


class Silent(Agent):
    """Takes every request and never answers."""

    def handle_task_assignment(self, message: Message) -> None:
        pass


def test_a_request_that_times_out_raises_at_exactly_its_deadline(det: Dispatcher) -> None:
    seen: list[tuple[str, float]] = []

    async def ask(agent: Agent) -> None:
        await agent.sleep(2.5)
        try:
            await agent.request("silent", "task_assignment", {}, timeout=7.25)
        except WaitTimeout as exc:
            seen.append((str(exc), agent.now))

    det.spawn(Silent, "silent")
    det.spawn(Agent, "asker", behaviours=(ask,))
    report = det.run()
    assert report.reason == "quiescent" and report.now == 9.75
    assert len(seen) == 1 and seen[0][1] == 9.75
    assert "a reply from silent to task_assignment" in seen[0][0]


def test_waits_with_different_timeouts_time_out_in_deadline_order(det: Dispatcher) -> None:
    seen: list[tuple[str, float]] = []

    async def wait_for(agent: Agent, tag: str, timeout: float) -> None:
        try:
            await agent.receive(message_type="heartbeat", timeout=timeout)
        except WaitTimeout:
            seen.append((tag, agent.now))

    agent = det.spawn(Agent, "waiter")
    agent.start_behaviour(wait_for, "long", 5.0)
    agent.start_behaviour(wait_for, "short", 2.0)  # earlier than the sweeper already set
    agent.start_behaviour(wait_for, "long-too", 5.0)
    det.run()
    assert seen == [("short", 2.0), ("long", 5.0), ("long-too", 5.0)]


def test_an_answered_request_no_longer_keeps_the_run_alive(det: Dispatcher) -> None:
    async def ask(agent: Agent) -> None:
        for i in range(3):
            reply = await agent.request("echo", "task_assignment", {"i": i}, timeout=60.0)
            assert reply.content == {"i": i}
        await agent.sleep(1.0)

    det.spawn(Echo, "echo")
    det.spawn(Agent, "asker", behaviours=(ask,))
    report = det.run()
    # the run ends with the last real event (t=1), not at the timeouts' t=60
    assert (report.reason, report.now) == ("quiescent", 1.0)
    assert det.waiters() == []


def test_a_pending_request_is_live_work_and_is_named_while_it_waits(det: Dispatcher) -> None:
    outcome: list[str] = []

    async def ask(agent: Agent) -> None:
        try:
            await agent.request("silent", "task_assignment", {}, timeout=30.0)
        except WaitTimeout:
            outcome.append("timed out")

    det.spawn(Silent, "silent")
    det.spawn(Agent, "asker", behaviours=(ask,))
    # Only a daemon sweeper is queued, yet the run does not stop at t=0: the
    # unanswered request keeps it going, and it is named while it waits.
    assert det.run_until(lambda: False, deadline=10.0) is False  # type: ignore[attr-defined]
    waiting = det.waiters()
    assert [(w.agent, w.behaviour) for w in waiting] == [("asker", "ask")]
    assert "a reply from silent to task_assignment" in waiting[0].waits_for
    report = det.run()
    assert (report.reason, report.now, outcome) == ("quiescent", 30.0, ["timed out"])


def test_a_request_without_a_timeout_ends_in_a_deadlock_report_naming_it(
    det: Dispatcher,
) -> None:
    async def ask(agent: Agent) -> None:
        await agent.request("silent", "task_assignment", {}, timeout=None)

    async def wait(agent: Agent) -> None:
        await agent.request("silent", "task_assignment", {}, timeout=100.0)

    det.spawn(Silent, "silent")
    det.spawn(Agent, "patient", behaviours=(ask,))
    det.spawn(Agent, "timed", behaviours=(wait,))
    report = det.run()
    # the timed request kept the run going until it timed out; then only the
    # untimed one was left, and the report names it
    assert report.reason == "deadlock" and report.now == 100.0
    assert len(report.waiters) == 1
    assert report.waiters[0].agent == "patient"
    assert "a reply from silent to task_assignment" in report.waiters[0].waits_for


def test_stopping_an_actor_releases_the_live_work_of_its_requests(det: Dispatcher) -> None:
    async def ask(agent: Agent) -> None:
        await agent.request("silent", "task_assignment", {}, timeout=500.0)

    det.spawn(Silent, "silent")
    det.spawn(Agent, "asker", behaviours=(ask,))
    det.run(until=1.0)
    det.stop_actor("asker")
    report = det.run()
    assert (report.reason, report.now) == ("quiescent", 1.0)


def test_realtime_idle_waits_for_a_pending_request_and_not_for_an_answered_one() -> None:
    d = new_dispatcher("realtime")
    done = threading.Event()
    outcome: list[str] = []

    async def ask(agent: Agent) -> None:
        reply = await agent.request("echo", "task_assignment", {"n": 1})
        outcome.append(str(reply.content["n"]))
        try:
            await agent.request("silent", "task_assignment", {}, timeout=5.0)  # 0.1 s wall
        except WaitTimeout:
            outcome.append("timed out")
        done.set()

    try:
        with d.start_together():
            d.spawn(Echo, "echo")
            d.spawn(Silent, "silent")
            d.spawn(Agent, "asker", behaviours=(ask,))
        # idle only once the second request has timed out: never in between
        assert d.wait_idle(timeout=10)  # type: ignore[attr-defined]
        assert done.is_set() and outcome == ["1", "timed out"]
        assert d.in_flight() == 0  # type: ignore[attr-defined]
    finally:
        d.shutdown()


# -- typed spawn ---------------------------------------------------------------------------------


def test_spawn_returns_the_class_it_was_given_to_static_tools(tmp_path: pathlib.Path) -> None:
    snippet = tmp_path / "uses_spawn.py"
    snippet.write_text(
        "from barnraise.actors.registry import Registry\n"
        "from barnraise.sim.dispatch import make_dispatcher\n"
        "d = make_dispatcher()\n"
        "registry = d.spawn(Registry, 'registry')\n"
        "reveal_type(registry)\n"
        "registry.records\n"
        "registry.no_such_attribute\n"
    )
    out, _, _ = mypy_says(snippet)
    assert 'Revealed type is "barnraise.actors.registry.Registry"' in out, out
    assert '"Registry" has no attribute "no_such_attribute"' in out, out
    # the one error is the missing attribute: .records type-checks
    assert out.count("error:") == 1, out


def test_a_deterministic_run_and_its_digest_repeat_with_the_new_path() -> None:
    def once() -> tuple[str, float]:
        d = make_dispatcher("deterministic", seed=3)

        async def ask(agent: Agent) -> None:
            for i in range(5):
                await agent.request("echo", "task_assignment", {"i": i})
                await agent.sleep(0.5)

        d.spawn(Echo, "echo")
        d.spawn(Agent, "asker", behaviours=(ask,))
        report = d.run()
        return d.trace_digest, report.now

    assert once() == once()
