"""The realtime dispatcher: scaled time, expiry, full mailboxes, per-actor seeds."""

from __future__ import annotations

import threading
import time
from typing import Any

import msgspec
import numpy as np
import pytest

from barnraise.actors.base import Agent
from barnraise.sim.clock import VirtualClock, WallClock
from barnraise.sim.dispatch import DELIVERED, DROPPED, Dispatcher, RealtimeDispatcher, seed_for
from barnraise.sim.messages import Message
from tests.conftest import new_dispatcher
from tests.helpers import Recorder

# Wall seconds any single wait in this file may take before the test fails.
WAIT = 5.0


def realtime(**options: Any) -> RealtimeDispatcher:
    d = new_dispatcher("realtime", **options)
    assert isinstance(d, RealtimeDispatcher)
    return d


class Gate(Agent):
    """Records the ``tag`` of each task_update; a ``block`` tag holds its thread at a gate."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.entered = threading.Event()
        self.gate = threading.Event()
        self.seen: list[Any] = []
        self.other: list[Message] = []  # anything that is not a task_update

    def handle_message(self, message: Message) -> None:
        self.other.append(message)

    def handle_task_update(self, message: Message) -> None:
        self.seen.append(message.content.get("tag"))
        if message.content.get("tag") == "block":
            self.entered.set()
            if not self.gate.wait(timeout=WAIT):
                raise AssertionError("the test never opened the gate")


def block(d: Dispatcher, gate: Gate) -> None:
    """Send ``gate`` a blocking letter and wait (bounded) until its handler holds it."""
    assert d.send(d.message("outside", gate.name, "task_update", {"tag": "block"})).ok
    assert gate.entered.wait(timeout=WAIT), "the blocking letter was never handled"


# -- time_scale ---------------------------------------------------------------------------


def test_a_large_time_scale_runs_simulated_sleeps_faster_than_the_wall_clock() -> None:
    seen: dict[str, float] = {}

    async def nap(agent: Agent) -> None:
        # Each simulated reading is bracketed by wall readings, so the scale can be
        # checked exactly, however the threads are scheduled.
        seen["outer_before"] = time.monotonic()
        seen["sim_before"] = agent.now
        seen["inner_before"] = time.monotonic()
        await agent.sleep(5.0)
        seen["inner_after"] = time.monotonic()
        seen["sim_after"] = agent.now
        seen["outer_after"] = time.monotonic()

    d = realtime(time_scale=50.0)
    try:
        start = time.monotonic()
        d.spawn(Agent, "napper", behaviours=(nap,))
        report = d.run()
        elapsed = time.monotonic() - start
        assert report.reason == "quiescent", report.describe()
        assert d.now >= 5.0 and report.now >= 5.0
        assert seen["sim_after"] - seen["sim_before"] >= 5.0  # the sleep never ends early
        assert elapsed >= 5.0 / 50.0  # ... and took its scaled wall time
        assert elapsed < 2.5  # far below the 5 s it would take at time_scale 1
        # 50 simulated seconds per wall second
        simulated = seen["sim_after"] - seen["sim_before"]
        assert simulated <= 50.0 * (seen["outer_after"] - seen["outer_before"]) + 1e-6
        assert simulated >= 50.0 * (seen["inner_after"] - seen["inner_before"]) - 1e-6
        assert d.statistics().behaviour_errors == 0
    finally:
        d.shutdown()


def test_clock_to_wall_divides_by_the_time_scale() -> None:
    fast = WallClock(50.0)
    assert fast.to_wall(5.0) == pytest.approx(0.1)
    assert fast.to_wall(0.0) == 0.0
    assert fast.to_wall(-3.0) == 0.0  # a due time already past waits no wall time
    assert WallClock(0.5).to_wall(1.0) == pytest.approx(2.0)  # slower than the wall clock
    assert WallClock().to_wall(2.5) == pytest.approx(2.5)
    assert VirtualClock().to_wall(1000.0) == 0.0
    for bad in (0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="time_scale"):
            WallClock(bad)
    d = realtime(time_scale=20.0)
    try:
        assert isinstance(d.clock, WallClock) and d.clock.time_scale == 20.0
        assert d.clock.to_wall(10.0) == pytest.approx(0.5)
    finally:
        d.shutdown()


# -- expiry -------------------------------------------------------------------------------


def test_a_message_already_past_its_expiry_is_dropped_at_dequeue() -> None:
    d = realtime()
    try:
        gate = d.spawn(Gate, "gate")
        stale = d.message("outside", "gate", "task_update", {"tag": "stale"})
        stale = msgspec.structs.replace(stale, expires_at=stale.timestamp - 1.0)
        # expires_in=0: the message expires the instant it is made, so by any dequeue
        now_or_never = d.message("outside", "gate", "task_update", {"tag": "now"},
                                 expires_in=0.0)
        fresh = d.message("outside", "gate", "task_update", {"tag": "fresh"},
                          expires_in=10_000.0)
        reports = [d.send(m) for m in (stale, now_or_never, fresh)]
        # Expiry is checked at dequeue, not at send: all three were accepted.
        assert [r.statuses for r in reports] == [{"gate": DELIVERED}] * 3
        assert d.wait_idle(timeout=WAIT)
    finally:
        d.shutdown()
    assert gate.seen == ["fresh"]
    assert d.statistics().dead_letters == {"expired": 2}
    drops = [r.content_obj() for r in d.trace.records("drop")]
    assert drops == [
        {"reason": "expired", "message_id": stale.message_id},
        {"reason": "expired", "message_id": now_or_never.message_id},
    ]
    assert [m.message_id for reason, m in d.dead_letters] == [
        stale.message_id, now_or_never.message_id]


def test_a_message_that_expires_while_queued_is_dropped_and_never_handled() -> None:
    d = realtime()
    try:
        gate = d.spawn(Gate, "gate")
        block(d, gate)  # the gate's thread is busy: what follows waits in the mailbox
        short = d.message("outside", "gate", "task_update", {"tag": "short"}, expires_in=1.0)
        long = d.message("outside", "gate", "task_update", {"tag": "long"}, expires_in=10_000.0)
        assert d.send(short).ok and d.send(long).ok
        assert short.expires_at is not None
        d.run(until=short.expires_at + 0.5)  # let the short one's deadline pass, queued
        assert gate.seen == ["block"] and len(gate.actor_inbox) == 2
        gate.gate.set()
        assert d.wait_idle(timeout=WAIT)
    finally:
        gate.gate.set()
        d.shutdown()
    assert gate.seen == ["block", "long"]
    assert d.statistics().dead_letters == {"expired": 1}
    [drop] = list(d.trace.records("drop"))
    assert (drop.recipient, drop.type) == ("gate", "task_update")
    assert drop.content_obj() == {"reason": "expired", "message_id": short.message_id}
    delivered = [r.content_obj()["tag"] for r in d.trace.records("deliver")]
    assert delivered == ["block", "long"]


# -- mailbox_full -------------------------------------------------------------------------


def test_a_full_realtime_mailbox_dead_letters_and_tells_the_sender() -> None:
    d = realtime()
    try:
        gate = d.spawn(Gate, "gate", mailbox_capacity=2)
        sender = d.spawn(Recorder, "sender")
        block(d, gate)  # the blocking letter has left the mailbox: two places are free
        reports = [sender.send("gate", "task_update", {"tag": i}) for i in range(4)]
        assert [r.statuses["gate"] for r in reports] == [DELIVERED, DELIVERED, DROPPED, DROPPED]
        assert len(gate.actor_inbox) == 2
        gate.gate.set()
        assert d.wait_idle(timeout=WAIT)
    finally:
        gate.gate.set()
        d.shutdown()
    assert gate.seen == ["block", 0, 1]
    assert d.statistics().dead_letters == {"mailbox_full": 2}
    errors = [m for m in sender.got if m.message_type == "error_report"]
    assert [e.content["error_code"] for e in errors] == ["mailbox_full", "mailbox_full"]
    assert {e.content["recipient"] for e in errors} == {"gate"}
    assert [e.content["message_id"] for e in errors] == [r.message_id for r in reports[2:]]
    assert {e.from_agent for e in errors} == {"system"}
    assert [m for m in sender.got if m.message_type != "error_report"] == []


def test_an_error_report_to_a_full_sender_is_not_reported_again() -> None:
    d = realtime()
    try:
        gate = d.spawn(Gate, "gate", mailbox_capacity=1)
        sender = d.spawn(Gate, "sender", mailbox_capacity=1)
        block(d, gate)
        block(d, sender)  # the sender's thread is held too: its mailbox fills
        first = sender.send("gate", "task_update", {"tag": "fits"})
        second = sender.send("gate", "task_update", {"tag": "refused"})  # report fills sender
        third = sender.send("gate", "task_update", {"tag": "refused too"})  # report refused
        assert [first.ok, second.ok, third.ok] == [True, False, False]
        gate.gate.set()
        sender.gate.set()
        assert d.wait_idle(timeout=WAIT)
    finally:
        gate.gate.set()
        sender.gate.set()
        d.shutdown()
    assert gate.seen == ["block", "fits"]
    # two refused letters, and one error report that found the sender's mailbox full
    assert d.statistics().dead_letters == {"mailbox_full": 3}
    kinds = [(reason, m.message_type, m.to_agent) for reason, m in d.dead_letters]
    assert kinds == [("mailbox_full", "task_update", "gate"),
                     ("mailbox_full", "task_update", "gate"),
                     ("mailbox_full", "error_report", "sender")]
    # the one report that got through is about the second letter
    assert [(m.message_type, m.content["message_id"]) for m in sender.other] == [
        ("error_report", second.message_id)]


# -- per-actor seeds ----------------------------------------------------------------------

NAMES = ("alpha", "beta", "gamma")


def _draws_in_behaviours(mode: str, seed: int, order: tuple[str, ...]) -> dict[str, list[int]]:
    """Each agent, spawned in ``order``, draws from its own rng inside its behaviour."""
    got: dict[str, list[int]] = {}

    async def draw(agent: Agent) -> None:
        got[agent.name] = [int(x) for x in agent.rng.integers(0, 2**31, 6)]

    d = new_dispatcher(mode, seed)
    try:
        with d.start_together():
            for name in order:
                d.spawn(Agent, name, behaviours=(draw,))
        report = d.run()
        assert report.reason == "quiescent", report.describe()
    finally:
        d.shutdown()
    return got


def test_an_actors_rng_depends_on_seed_and_name_only() -> None:
    reference = {
        name: [int(x) for x in np.random.default_rng(seed_for(11, name)).integers(0, 2**31, 6)]
        for name in NAMES
    }
    runs = [
        _draws_in_behaviours("deterministic", 11, NAMES),
        _draws_in_behaviours("deterministic", 11, NAMES[::-1]),
        _draws_in_behaviours("realtime", 11, NAMES),
        _draws_in_behaviours("realtime", 11, ("gamma", "alpha", "beta")),
    ]
    for run in runs:
        assert run == reference
    # another name, another stream; another seed, another stream for every name
    assert len({tuple(v) for v in reference.values()}) == len(NAMES)
    other_seed = _draws_in_behaviours("realtime", 12, NAMES)
    assert set(other_seed) == set(NAMES)
    for name in NAMES:
        assert other_seed[name] != reference[name]


def test_the_rng_is_the_same_whether_spawned_alone_or_among_others() -> None:
    lone = new_dispatcher("realtime", 5)
    crowd = new_dispatcher("deterministic", 5)
    try:
        solo = lone.spawn(Agent, "worker")
        for i in range(20):
            crowd.spawn(Agent, f"filler-{i}")
        member = crowd.spawn(Agent, "worker")
        other = crowd.spawn(Agent, "worker-2")
        a, b, c = (x.rng.random(8) for x in (solo, member, other))
        assert np.array_equal(a, b)
        assert not np.array_equal(a, c)
        # the stream goes on from where it was, rather than restarting on each access
        assert not np.array_equal(solo.rng.random(8), a)
    finally:
        lone.shutdown()
        crowd.shutdown()


def test_a_realtime_run_report_counts_letters_not_steps_it_never_takes() -> None:
    d = realtime()
    try:
        gate = d.spawn(Gate, "gate")
        for tag in ("a", "b", "c"):
            d.send(d.message("outside", "gate", "task_update", {"tag": tag}))
        report = d.run()
    finally:
        d.shutdown()
    assert gate.seen == ["a", "b", "c"]
    assert report.reason == "quiescent" and report.steps is None
    assert report.delivered == d.statistics().delivered == 3
    assert report.describe() == (
        f"run ended: quiescent at t={report.now:g} after 3 letters delivered")
