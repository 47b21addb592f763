"""Routing, ordering, dead letters and the trace, mostly in deterministic mode."""

from __future__ import annotations

import os
import subprocess
import sys

import msgspec
import pytest

from barnraise.actors.base import Agent
from barnraise.sim.dispatch import DELIVERED, DROPPED, OFFLINE, Dispatcher, make_dispatcher
from barnraise.sim.events import Event, register
from barnraise.sim.messages import Message, MessageError, Priority, Region, encode, sign
from tests.conftest import new_dispatcher
from tests.helpers import Echo, Recorder, Service


# Events of the tests' own (the dispatcher publishes any registered Event).
@register
class ThingHappened(Event, frozen=True, kw_only=True, tag="thing_happened"):
    x: int


@register
class Said(Event, frozen=True, kw_only=True, tag="said"):
    what: str


@register
class SomethingHappened(Event, frozen=True, kw_only=True, tag="something_happened"):
    k: int


def send(d: Dispatcher, sender: str, to: str, **content: object) -> object:
    priority = int(content.pop("priority", Priority.NORMAL))  # type: ignore[call-overload]
    expires_in = content.pop("expires_in", None)
    return d.send(d.message(sender, to, "task_update", dict(content), priority=priority,
                            expires_in=expires_in))  # type: ignore[arg-type]


def test_same_instant_delivery_is_by_priority_then_arrival(det: Dispatcher) -> None:
    rec = det.spawn(Recorder, "rec")
    for tag, priority in [("low", 1), ("normal-1", 5), ("critical", 10), ("normal-2", 5),
                          ("high", 8)]:
        send(det, "outside", "rec", tag=tag, priority=priority)
    det.run()
    assert rec.contents("tag") == ["critical", "high", "normal-1", "normal-2", "low"]


def test_realtime_mailbox_serves_the_backlog_by_priority() -> None:
    import threading

    gate = threading.Event()
    order: list[str] = []

    class Slow(Agent):
        def handle_task_update(self, message: Message) -> None:
            if message.content["tag"] == "first":
                assert gate.wait(timeout=5)
            order.append(message.content["tag"])

    d = new_dispatcher("realtime")
    try:
        d.spawn(Slow, "slow")
        send(d, "outside", "slow", tag="first")
        # wait (bounded) until "first" is being handled, then queue a backlog
        for _ in range(500):
            if len(d.actor("slow").actor_inbox) == 0:
                break
            threading.Event().wait(0.01)
        for tag, priority in [("low", 1), ("normal", 5), ("critical", 10), ("high", 8)]:
            send(d, "outside", "slow", tag=tag, priority=priority)
        gate.set()
        assert d.wait_idle(timeout=10)  # type: ignore[attr-defined]
    finally:
        d.shutdown()
    assert order == ["first", "critical", "high", "normal", "low"]


def test_expired_messages_are_dropped_at_dequeue(det: Dispatcher) -> None:
    det.latency = 2.0  # type: ignore[attr-defined]
    rec = det.spawn(Recorder, "rec")
    send(det, "outside", "rec", tag="short", expires_in=1.0)
    send(det, "outside", "rec", tag="long", expires_in=5.0)
    det.run()
    assert rec.contents("tag") == ["long"]
    assert det.statistics().dead_letters == {"expired": 1}
    drops = list(det.trace.records("drop"))
    assert len(drops) == 1 and drops[0].content_obj()["reason"] == "expired"


def test_a_full_mailbox_dead_letters_and_tells_the_sender(det: Dispatcher) -> None:
    rec = det.spawn(Recorder, "rec", mailbox_capacity=2)
    sender = det.spawn(Recorder, "sender")
    reports = [sender.send("rec", "task_update", {"i": i}) for i in range(4)]
    assert [r.statuses["rec"] for r in reports] == [DELIVERED, DELIVERED, DROPPED, DROPPED]
    det.run()
    assert rec.contents("i") == [0, 1]
    assert det.statistics().dead_letters == {"mailbox_full": 2}
    errors = [m for m in sender.got if m.message_type == "error_report"]
    assert [e.content["error_code"] for e in errors] == ["mailbox_full", "mailbox_full"]
    assert errors[0].content["recipient"] == "rec"


def test_unknown_recipient_is_a_dead_letter_with_a_report(det: Dispatcher) -> None:
    report = send(det, "outside", "nobody", tag="x")
    assert report.statuses == {"nobody": DROPPED}  # type: ignore[attr-defined]
    assert det.statistics().dead_letters == {"unknown_recipient": 1}


def test_content_errors_raise_at_send_and_queue_nothing(det: Dispatcher) -> None:
    det.spawn(Recorder, "rec")
    with pytest.raises(MessageError) as info:
        det.send(det.message("outside", "rec", "task_update", {"x": object()}))
    assert info.value.field == "content"
    small = make_dispatcher("deterministic", max_content_bytes=50)
    small.spawn(Recorder, "rec")
    with pytest.raises(MessageError, match="over the limit of 50"):
        small.send(small.message("outside", "rec", "task_update", {"x": "y" * 100}))
    assert small.statistics().queued == 0


def test_signed_mode_drops_tampered_and_unsigned_messages() -> None:
    d = make_dispatcher("deterministic", seed=1, sign_messages=True)
    rec = d.spawn(Recorder, "rec")
    sender = d.spawn(Recorder, "sender")
    assert sender.send("rec", "task_update", {"ok": True}).ok
    good = d.seal(d.message("sender", "rec", "task_update", {"amount": 1}))
    tampered = msgspec.structs.replace(good, content={"amount": 1000})
    assert d.send(tampered).statuses == {"rec": DROPPED}
    assert d.send(d.message("sender", "rec", "task_update", {})).statuses == {"rec": DROPPED}
    d.run()
    assert rec.contents("ok") == [True]
    assert d.statistics().dead_letters == {"bad_signature": 2}


def test_signed_mode_signs_the_dispatchers_own_mail() -> None:
    """With signing on, the events and error reports the dispatcher publishes itself are
    signed like any actor's letter: their subscribers hear them and nothing is dropped."""
    d = make_dispatcher("deterministic", seed=1, sign_messages=True)
    rec = d.spawn(Recorder, "rec")
    d.subscribe(rec, "news")
    d.subscribe(rec, "errors")
    d.emit("svc", "news", ThingHappened(x=1))
    d.report_error("svc", "handler", RuntimeError("boom"))
    d.run()
    got = sorted((m.message_type, m.content.get("x", m.content.get("detail"))) for m in rec.got)
    assert got == [("error_report", "boom"), ("status_update", 1)]
    assert d.statistics().dead_letters == {}


def test_wire_messages_must_be_signed_with_the_session_secret(det: Dispatcher) -> None:
    rec = det.spawn(Recorder, "rec")
    message = det.message("remote", "rec", "task_update", {"n": 1})
    assert det.receive_wire(encode(message, det.secret)) is not None
    assert det.receive_wire(encode(message)) is None  # unsigned
    assert det.receive_wire(encode(message, b"wrong secret")) is None
    assert det.receive_wire(b'{"message_id": 3}') is None
    det.run()
    assert rec.contents("n") == [1]
    assert det.statistics().dead_letters == {"bad_signature": 2, "invalid": 1}


def test_direct_broadcast_type_and_topic_routing(dispatcher: Dispatcher) -> None:
    d = dispatcher
    a = d.spawn(Recorder, "a", agent_type="builder")
    b = d.spawn(Recorder, "b", agent_type="builder")
    c = d.spawn(Recorder, "c", agent_type="tester")
    svc = d.spawn(Service, "svc")
    d.subscribe(c, "progress")
    d.subscribe(a, "progress", {"region": {"x": 0, "y": 0, "width": 10, "height": 10}})
    d.run()

    assert a.send("b", "task_update", {"route": "direct"}).statuses == {"b": DELIVERED}
    everyone = a.send("broadcast", "task_update", {"route": "broadcast"})
    assert everyone.statuses == {"b": DELIVERED, "c": DELIVERED}  # not the sender, no services
    builders = c.send("type:builder", "task_update", {"route": "type"})
    assert builders.statuses == {"a": DELIVERED, "b": DELIVERED}
    near = b.send("topic:progress", "task_update", {"route": "near"}, region=Region(5, 5, 2, 2))
    far = b.send("topic:progress", "task_update", {"route": "far"}, region=Region(50, 5, 2, 2))
    assert near.statuses == {"c": DELIVERED, "a": DELIVERED}
    assert far.statuses == {"c": DELIVERED}
    d.run()
    assert a.contents("route") == ["type", "near"]
    assert b.contents("route") == ["direct", "broadcast", "type"]
    assert c.contents("route") == ["broadcast", "near", "far"]
    assert svc.got == []


def test_subscription_filters_by_sender_type_and_unsubscribe(det: Dispatcher) -> None:
    watcher = det.spawn(Recorder, "watcher")
    builder = det.spawn(Recorder, "builder", agent_type="builder")
    tester = det.spawn(Recorder, "tester", agent_type="tester")
    sid = watcher.subscribe("news", {"agent_type": "builder"})
    builder.publish("news", "status_update", {"who": "builder"})
    tester.publish("news", "status_update", {"who": "tester"})
    det.run()
    assert watcher.contents("who") == ["builder"]
    assert watcher.unsubscribe(sid)
    assert not watcher.unsubscribe(sid)
    assert builder.publish("news", "status_update", {"who": "again"}).statuses == {}
    with pytest.raises(ValueError, match="unknown key"):
        watcher.subscribe("news", {"colour": "red"})


def test_a_topics_subscribers_are_read_afresh_after_every_change(dispatcher: Dispatcher) -> None:
    # An unfiltered topic keeps its subscribers' endpoints between publications; every
    # change to its subscriptions (one more, a filtered one, one gone, a crash) shows.
    d = dispatcher
    one = d.spawn(Recorder, "one", agent_type="builder")
    two = d.spawn(Recorder, "two", agent_type="tester")
    three = d.spawn(Recorder, "three", agent_type="tester")
    sid_one = one.subscribe("news")

    def settle() -> None:
        if d.mode == "deterministic":
            d.run()
        else:
            assert d.wait_idle(timeout=10)  # type: ignore[attr-defined]

    for what in ("a", "b"):
        d.emit("host", "news", Said(what=what))
    sid_two = two.subscribe("news")
    d.emit("host", "news", Said(what="c"))
    three.subscribe("news", {"agent_type": "builder"})  # a filter: the event's sender is no agent
    d.emit("host", "news", Said(what="d"))
    assert one.unsubscribe(sid_one)
    d.emit("host", "news", Said(what="e"))
    settle()
    d.crash("two")
    d.emit("host", "news", Said(what="f"))
    assert two.unsubscribe(sid_two) is False  # the crash took it
    settle()
    assert one.contents("what") == ["a", "b", "c", "d"]
    assert two.contents("what") == ["c", "d", "e"]
    assert three.contents("what") == []


def test_stopped_agents_are_reported_offline(det: Dispatcher) -> None:
    det.spawn(Recorder, "gone")
    det.spawn(Recorder, "here")
    det.stop_actor("gone")
    report = send(det, "outside", "broadcast", tag="x")
    assert report.statuses == {"here": DELIVERED}  # type: ignore[attr-defined]
    direct = send(det, "outside", "gone", tag="x")
    assert direct.statuses == {"gone": OFFLINE}  # type: ignore[attr-defined]
    assert det.statistics().dead_letters == {"offline": 1}


def test_request_and_reply_by_correlation_id(dispatcher: Dispatcher) -> None:
    got: list[object] = []

    async def ask(agent: Agent) -> None:
        for n in range(3):
            reply = await agent.request("echo", "task_assignment", {"n": n})
            got.append((reply.message_type, reply.content["n"], reply.from_agent))

    dispatcher.spawn(Echo, "echo")
    dispatcher.spawn(Agent, "asker", behaviours=(ask,))
    report = dispatcher.run()
    assert report.reason == "quiescent", report.describe()
    assert got == [("task_result", n, "echo") for n in range(3)]


def test_deadlock_report_names_both_waiters() -> None:
    async def wait_for_peer(agent: Agent) -> None:
        peer = "right" if agent.name == "left" else "left"
        await agent.request(peer, "coordination_request", {"need": "your reply"}, timeout=None)

    d = make_dispatcher("deterministic", seed=3)
    d.spawn(Agent, "left", behaviours=(wait_for_peer,))
    d.spawn(Agent, "right", behaviours=(wait_for_peer,))
    report = d.run()
    assert report.reason == "deadlock"
    assert [(w.agent, w.behaviour) for w in report.waiters] == [
        ("left", "wait_for_peer"), ("right", "wait_for_peer")]
    assert "a reply from right to coordination_request" in report.waiters[0].waits_for
    assert "left/wait_for_peer waits for a reply from right" in report.describe()
    assert report.describe().startswith(
        f"run ended: deadlock at t={report.now:g} after {report.steps} steps\n")
    events = [r for r in d.trace.records("event") if r.type == "deadlock"]
    assert len(events) == 1


def test_realtime_watchdog_reports_the_same_deadlock() -> None:
    async def wait_for_peer(agent: Agent) -> None:
        peer = "right" if agent.name == "left" else "left"
        await agent.request(peer, "coordination_request", {}, timeout=None)

    d = new_dispatcher("realtime")
    try:
        # Each behaviour names a peer spawned beside it: start them together so
        # neither can speak before the other exists (realtime actors start at spawn).
        with d.start_together():
            d.spawn(Agent, "left", behaviours=(wait_for_peer,))
            d.spawn(Agent, "right", behaviours=(wait_for_peer,))
        report = d.run()
    finally:
        d.shutdown()
    assert report.reason == "deadlock"
    assert sorted(w.agent for w in report.waiters) == ["left", "right"]


def test_start_together_holds_realtime_starts_until_the_group_exists() -> None:
    async def wait_for_peer(agent: Agent) -> None:
        await agent.request("late", "coordination_request", {}, timeout=None)

    d = new_dispatcher("realtime")
    try:
        with d.start_together():
            with d.start_together():  # nested: the outer block holds them all
                early = d.spawn(Agent, "early", behaviours=(wait_for_peer,))
            assert early.behaviours == []  # on_start has not run: nothing was sent
            d.spawn(Agent, "late")
            held = d.spawn(Agent, "held")
            d.stop_actor("held")  # stopping a held actor never starts it
        report = d.run()
    finally:
        d.shutdown()
    assert held.actor_stopped.is_set()
    assert report.reason == "deadlock"
    assert [w.agent for w in report.waiters] == ["early"]
    assert "a reply from late" in report.waiters[0].waits_for
    assert d.statistics().dead_letters == {}


def test_run_until_and_step(det: Dispatcher) -> None:
    rec = det.spawn(Recorder, "rec")
    det.latency = 1.0  # type: ignore[attr-defined]
    send(det, "outside", "rec", tag="a")
    report = det.run(until=0.5)
    assert (report.reason, det.now, rec.got) == ("until", 0.5, [])
    with pytest.raises(ValueError, match="before now"):
        det.run(until=0.1)
    assert det.step() is True  # type: ignore[attr-defined]
    assert rec.contents("tag") == ["a"] and det.now == 1.0
    assert det.step() is False  # type: ignore[attr-defined]


def test_the_loop_raises_the_collector_threshold_while_it_runs_and_puts_it_back() -> None:
    """While the deterministic loop runs (run and run_until alike) the collector's first
    threshold is LOOP_GC_THRESHOLD; afterwards the program's own is back. A program that
    chose a higher threshold, or turned collection off, keeps its choice."""
    import gc

    from barnraise.sim.dispatch.deterministic import LOOP_GC_THRESHOLD

    seen: list[int] = []

    class Probe(Recorder):
        def handle_message(self, message: Message) -> None:
            seen.append(gc.get_threshold()[0])

    before = gc.get_threshold()
    try:
        for threshold in (700, LOOP_GC_THRESHOLD * 2, 0):
            gc.set_threshold(threshold, *before[1:])
            det = new_dispatcher("deterministic")
            det.spawn(Probe, "probe")
            send(det, "outside", "probe", i=1)
            det.run()
            send(det, "outside", "probe", i=2)
            assert det.run_until(lambda: len(seen) % 2 == 0)  # type: ignore[attr-defined]
            expected = LOOP_GC_THRESHOLD if threshold == 700 else threshold
            assert seen[-2:] == [expected, expected]
            assert gc.get_threshold()[0] == threshold
            det.shutdown()
    finally:
        gc.set_threshold(*before)


def test_max_steps_stops_early(det: Dispatcher) -> None:
    rec = det.spawn(Recorder, "rec")
    for i in range(5):
        send(det, "outside", "rec", i=i)
    assert det.run(max_steps=2).reason == "max_steps"
    assert rec.contents("i") == [0, 1]
    assert det.run().reason == "quiescent"
    assert rec.contents("i") == [0, 1, 2, 3, 4]


def test_a_more_urgent_message_cuts_into_a_fanout_as_separate_sends_would(det: Dispatcher) -> None:
    log: list[str] = []

    class Sub(Agent):
        def on_start(self) -> None:
            self.subscribe("t")

        def handle_status_update(self, message: Message) -> None:
            log.append(f"{self.name}:{message.content['n']}")
            if self.name == "s0":
                self.send("s2", "task_update", {"n": "urgent"}, priority=Priority.CRITICAL)

        def handle_task_update(self, message: Message) -> None:
            log.append(f"{self.name}:{message.content['n']}")

    for i in range(3):
        det.spawn(Sub, f"s{i}")
    det.send(det.message("pub", "topic:t", "status_update", {"n": 1}))
    det.run()
    assert log == ["s0:1", "s2:urgent", "s1:1", "s2:1"]


def test_trace_records_every_delivery_drop_and_event(det: Dispatcher) -> None:
    det.spawn(Recorder, "rec")
    send(det, "outside", "rec", tag="a")
    send(det, "outside", "nobody", tag="b")
    det.emit("outside", "news", SomethingHappened(k=1))
    det.run()
    kinds = [(r.kind, r.sender, r.recipient, r.type) for r in det.trace.records()]
    assert kinds == [
        ("drop", "outside", "nobody", "task_update"),
        ("event", "outside", "news", "something_happened"),
        ("deliver", "outside", "rec", "task_update"),
    ]
    lines = list(det.trace.to_jsonl())
    assert len(lines) == 3 and lines[0].startswith(b"[0,")


def _scripted_run(seed: int) -> str:
    import random

    async def chatter(agent: Agent) -> None:
        for _ in range(5):
            peer = f"agent-{int(agent.rng.integers(0, 4))}"
            await agent.sleep(float(agent.rng.random()))
            agent.send(peer, "status_update", {"from": agent.name, "x": float(agent.rng.random())})

    del random
    d = make_dispatcher("deterministic", seed)
    for i in range(4):
        d.spawn(Recorder, f"agent-{i}", behaviours=(chatter,))
    d.run()
    return d.trace_digest


def test_same_seed_same_digest_different_seed_different_digest() -> None:
    assert _scripted_run(11) == _scripted_run(11)
    assert _scripted_run(11) != _scripted_run(12)


def test_digest_is_the_same_in_a_fresh_process_with_another_hash_seed() -> None:
    code = "from tests.test_dispatch import _scripted_run; print(_scripted_run(11))"
    digests = set()
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, check=True, timeout=60, cwd=os.getcwd())
        digests.add(out.stdout.strip())
    assert digests == {_scripted_run(11)}


def test_message_ids_and_timestamps_come_from_seed_and_virtual_clock() -> None:
    a = make_dispatcher("deterministic", 5)
    b = make_dispatcher("deterministic", 5)
    c = make_dispatcher("deterministic", 6)
    ma, mb, mc = (d.message("x", "y", "heartbeat") for d in (a, b, c))
    assert ma.message_id == mb.message_id != mc.message_id
    assert ma.timestamp == 0.0


def test_statistics_snapshot(det: Dispatcher) -> None:
    det.spawn(Recorder, "rec")
    send(det, "outside", "rec")
    stats = det.statistics()
    assert (stats.mode, stats.actors, stats.queued, stats.delivered) == ("deterministic", 1, 1, 0)
    det.run()
    stats = det.statistics()
    assert (stats.queued, stats.delivered, stats.trace_records) == (0, 1, 1)


def test_bad_construction_arguments_are_named() -> None:
    with pytest.raises(ValueError, match="mode"):
        make_dispatcher("warp-speed")
    with pytest.raises(ValueError, match="seed"):
        make_dispatcher("deterministic", -1)
    with pytest.raises(ValueError, match="time_scale"):
        make_dispatcher("realtime", time_scale=0)
    d = make_dispatcher("deterministic")
    d.spawn(Recorder, "x")
    with pytest.raises(ValueError, match="already exists"):
        d.spawn(Recorder, "x")
    with pytest.raises(ValueError, match="reserved"):
        d.spawn(Recorder, "broadcast")
    with pytest.raises(ValueError, match="plain"):
        d.spawn(Recorder, "topic:x")
    with pytest.raises(KeyError, match="nobody"):
        d.actor("nobody")


def test_sign_helper_is_used_by_seal() -> None:
    d = make_dispatcher("deterministic", sign_messages=True, secret=b"k")
    m = d.message("a", "b", "heartbeat")
    assert d.seal(m) == sign(m, b"k")
