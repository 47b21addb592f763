"""Every hot-path copy marked "inlined" is pinned to its original: each test runs the copy
and the original on the same inputs and fails when they differ (issue 24 item 4).

The copies live where a call would cost on every message (see the comment at each);
the original stays the one readers and other callers use. When a test here fails, the
original changed: change the copy the same way (or drop the copy, if a benchmark shows
the call costs nothing). The last test keeps this list whole: a new "inlined" comment
in the files it scans needs a test here.
"""

from __future__ import annotations

import functools
import pathlib
import re
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest

from barnraise.actors.actor import A2AActor
from barnraise.actors.effects import PENDING, Behaviour, Effect, Receive, Request, Sleep, ToolCall
from barnraise.actors.errors import DeliveryError, RequestError
from barnraise.actors.service import SessionService
from barnraise.actors.world import Simulation
from barnraise.sim.dispatch import DeterministicDispatcher
from barnraise.sim.dispatch.values import Timer, region_of
from barnraise.sim.events import AgentJoined, Event, RegionClaimed, body_of
from barnraise.sim.messages import Message, MessageError, Priority, verify
from barnraise.sim.tools import SERVICES
from tests.helpers import Service

ROOT = pathlib.Path(__file__).resolve().parents[1]


class Asker(A2AActor):
    """An actor that keeps what its behaviours resumed with, and its status letters."""

    agent_type = "asker"

    def __init__(self) -> None:
        super().__init__()
        self.outcomes: list[tuple[Any, BaseException | None]] = []
        self.letters: list[Message] = []

    def handle_status_update(self, message: Message) -> None:
        self.letters.append(message)


@pytest.fixture
def dispatcher() -> Iterator[DeterministicDispatcher]:
    d = DeterministicDispatcher(seed=3)
    yield d
    d.shutdown()


# -- Router.emit: message(), inlined ------------------------------------------------------


@pytest.mark.parametrize("signed", [False, True])
@pytest.mark.parametrize("region", [None, {"x": 1, "y": 2, "width": 3, "height": 4}])
def test_emit_builds_the_message_that_message_builds(region: dict[str, int] | None,
                                                     signed: bool) -> None:
    d = DeterministicDispatcher(seed=5, sign_messages=signed)
    try:
        asker = d.spawn(Asker, "asker")
        event: Event = AgentJoined(session_id="s1", agent_id="asker", name="asker",
                                   role="builder")
        if region is not None:
            event = RegionClaimed(session_id="s1", agent_id="asker", claim_id="c1",
                                  region=region, exclusive=True, expires_at=None)
        d.subscribe(asker, "session:s1")
        d.subscribe(asker, f"session:s1:{event.kind}")
        d.emit("coordinator", "session:s1", event, priority=Priority.HIGH)
        d.run()
        assert [m.to_agent for m in asker.letters] == [
            "topic:session:s1", f"topic:session:s1:{event.kind}"]
        for letter in asker.letters:
            expected = d.message("coordinator", letter.to_agent, "status_update",
                                 body_of(event), priority=Priority.HIGH,
                                 region=None if region is None else region_of(region))
            if signed:
                expected = d.seal(expected)
                verify(letter, d.secret)
            else:
                assert letter.signature is None
            # Two ids of one counter (the signature signs the id): all else is the same.
            assert letter.message_id.startswith(d._id_prefix)
            assert expected.message_id.startswith(d._id_prefix)
            same = {"message_id": "m", "signature": None}
            assert (msgspec.structs.replace(letter, **same)
                    == msgspec.structs.replace(expected, **same))
    finally:
        d.shutdown()


# -- DeterministicDispatcher: _push, inlined (direct sends and timers) --------------------


def _queue(d: DeterministicDispatcher) -> tuple[list[tuple[float, int]],
                                                dict[tuple[float, int], list[Any]]]:
    return sorted(d._keys), {key: list(bucket) for key, bucket in d._buckets.items()}


def test_a_direct_send_is_queued_as_push_queues_it() -> None:
    inlined, original = (DeterministicDispatcher(seed=1, latency=0.25) for _ in range(2))
    try:
        for d in (inlined, original):
            d.spawn(Service, "svc")
        for t, priority in [(0.0, Priority.NORMAL), (0.0, Priority.HIGH), (1.5, Priority.LOW),
                            (1.5, Priority.NORMAL), (1.5, Priority.NORMAL)]:
            encoded = b'{"n":1}'
            for d in (inlined, original):
                d.clock.now = t
            message = inlined.message("x", "svc", "task_update", {"n": 1}, priority=priority)
            endpoint = inlined.actor("svc")
            assert inlined._route_one(endpoint, message, encoded) == "delivered"
            original._push(original.clock.now + original.latency, -message.priority,
                           ("svc", message, encoded))
        assert _queue(inlined) == _queue(original)
    finally:
        inlined.shutdown()
        original.shutdown()


def test_a_timer_is_queued_as_push_queues_it() -> None:
    inlined, original = (DeterministicDispatcher(seed=1) for _ in range(2))
    try:
        svc = inlined.spawn(Service, "svc")
        original.spawn(Service, "svc")
        for due, priority, daemon in [(2.0, Priority.NORMAL, False), (2.0, Priority.HIGH, True),
                                      (0.5, Priority.LOW, False), (2.0, Priority.NORMAL, False)]:
            timer = Timer(inlined, svc, print, (), due, daemon, priority)
            inlined._schedule(timer)
            original._push(due, -priority, (svc, timer, None))
            if not daemon:
                original._live += 1  # what _schedule counts besides the push
        assert _queue(inlined) == _queue(original)
        assert inlined._live == original._live
    finally:
        inlined.shutdown()
        original.shutdown()


# -- A2AActor.a2a_timer: Timer.run, inlined ------------------------------------------------


@pytest.mark.parametrize("args", [(), (1,), ("a", None, 3.5)])
def test_a2a_timer_runs_a_timer_as_timer_run_does(dispatcher: DeterministicDispatcher,
                                                  args: tuple[Any, ...]) -> None:
    asker = dispatcher.spawn(Asker, "asker")
    calls: list[tuple[str, tuple[Any, ...]]] = []
    inlined = Timer(dispatcher, asker, lambda *a: calls.append(("inlined", a)), args, 1.0,
                    False, Priority.NORMAL)
    original = Timer(dispatcher, asker, lambda *a: calls.append(("original", a)), args, 1.0,
                     False, Priority.NORMAL)
    asker.a2a_timer(inlined)
    original.run()
    assert calls == [("inlined", args), ("original", args)]
    assert inlined.args == original.args == ()


# -- A2AActor.a2a_receive: Request.outcome, ToolCall.outcome and resume(), inlined --------

#: Answers a waiting request may get: (message type, content).
ANSWERS = [
    ("task_result", {"ok": True, "n": 2}),
    ("coordination_response", {"success": False, "error": "denied"}),
    ("error_report", {"error_code": "mailbox_full", "detail": "full"}),
    ("task_result", {}),
]


def _waiting(d: DeterministicDispatcher, effect: Request) -> tuple[Asker, Any]:
    """An Asker whose behaviour waits on ``effect`` (sent to "svc", which never answers)."""
    asker = d.spawn(Asker, "asker")
    d.spawn(Service, "svc")

    async def ask(actor: Asker) -> None:
        try:
            actor.outcomes.append((await effect, None))
        except Exception as exc:
            actor.outcomes.append((None, exc))

    task = asker.start_behaviour(ask)
    assert d.run_until(lambda: task.waiting is effect)
    return asker, task


def _seen(outcomes: list[tuple[Any, BaseException | None]]) -> list[Any]:
    """What the behaviour got, comparably: an error as its type and its message."""
    return [(value, None if error is None else (type(error), getattr(error, "message", None)))
            for value, error in outcomes]


@pytest.mark.parametrize("tool", [False, True])
@pytest.mark.parametrize(("message_type", "content"), ANSWERS)
def test_a_reply_resumes_a_request_as_outcome_and_resume_do(
        message_type: str, content: dict[str, Any], tool: bool) -> None:
    runs = []
    for path in ("inlined", "original"):
        d = DeterministicDispatcher(seed=2)
        try:
            effect = (ToolCall("task_accept", "svc", {"task_id": "t"}, 30.0) if tool
                      else Request("svc", "task_assignment", {"n": 1}, Priority.NORMAL, None,
                                   30.0))
            asker, task = _waiting(d, effect)
            live_before = d._live
            assert effect.held and asker.awaits(effect.correlation_id)
            reply = d.message("svc", "asker", message_type, dict(content),
                              correlation_id=effect.correlation_id)
            if path == "inlined":
                asker.a2a_receive(reply)
            else:
                asker.forget_reply(effect.correlation_id)
                value, error = type(effect).outcome(effect, reply)
                asker.resume(task, effect, value, error)
            runs.append((_seen(asker.outcomes), task.done, task.waiting, effect.held,
                         live_before - d._live, asker.awaits(effect.correlation_id)))
        finally:
            d.shutdown()
    assert runs[0] == runs[1]
    outcomes, done, waiting, held, released, awaits = runs[0]
    assert (done, waiting, held, released, awaits) == (True, None, False, 1, False)
    value, error = outcomes[0]
    if tool:
        assert value == content and error is None
    elif message_type == "error_report":
        assert value is None and error[0] is RequestError
    else:
        assert value.content == content and error is None


# -- barnraise.actors.effects: Effect.__init__, Request.arm and Dispatcher.call_later, inlined
# ------

TIMEOUTS = [None, 0.0, 2.5, -1.0, float("nan")]


def _made(make: Any) -> Any:
    """What a constructor makes of its arguments: the Effect fields it sets, or the
    error it raises (its type and words)."""
    try:
        effect = make()
    except ValueError as exc:
        return ValueError, str(exc)
    return effect.timeout, effect.daemon, effect.held


@pytest.mark.parametrize("timeout", TIMEOUTS)
def test_request_and_receive_set_what_effect_init_sets(timeout: float | None) -> None:
    def original(daemon: bool = False) -> Any:
        return _made(lambda: Effect(timeout, daemon))

    assert _made(lambda: Request("svc", "task_assignment", {}, 5, None, timeout)) == original()
    assert _made(lambda: ToolCall("task_accept", "svc", {}, timeout)) == original()
    for daemon in (False, True):
        assert (_made(lambda d=daemon: Receive(lambda m: True, "any", timeout, d))
                == original(daemon))


@pytest.mark.parametrize("seconds", [0.0, 1.0, 1e6])
def test_sleep_sets_what_effect_init_sets_without_a_timeout(seconds: float) -> None:
    assert _made(lambda: Sleep(seconds)) == _made(lambda: Effect(None))


def _timers(d: DeterministicDispatcher, task: Behaviour) -> list[tuple[Any, ...]]:
    """The queued timers, comparable across two dispatchers: the callback as its
    function and whether it is bound to the target, the behaviour as whether it is
    ``task``."""
    return [(key, target.name, timer.callback.__func__, timer.callback.__self__ is target,
             timer.args[0] is task, timer.args[1:], timer.due, timer.daemon, timer.priority,
             timer.cancelled) for key, bucket in sorted(d._buckets.items())
            for target, timer, _ in bucket]


@pytest.mark.parametrize("seconds", [0.0, 0.5, 30.0])
def test_a_sleep_schedules_the_timer_call_later_schedules(seconds: float) -> None:
    runs = []
    for path in ("inlined", "original"):
        d = DeterministicDispatcher(seed=4)
        try:
            asker = d.spawn(Asker, "asker")
            d.clock.now = 7.0
            task = Behaviour("b", _never())
            if path == "inlined":
                assert Sleep(seconds).arm(asker, task) is PENDING
            else:
                d.call_later(seconds, asker, asker._advance, task, None, None)
            runs.append((_timers(d, task), d._live))
            task.coro.close()
        finally:
            d.shutdown()
    assert runs[0] == runs[1]
    assert [entry[2:6] for entry in runs[0][0]] == [(A2AActor._advance, True, True,
                                                     (None, None))]


async def _never() -> None:
    """A coroutine that is never run (a Behaviour needs one)."""


#: The recipients a request may be sent to, and the content it carries: one reached,
#: one unknown, one whose content is not JSON.
ARMS = [("svc", {"n": 1}), ("nobody", {"n": 1}), ("svc", {"n": {1, 2}})]


@pytest.mark.parametrize(("to", "args"), ARMS)
def test_a_tool_call_arms_as_request_arm_does_with_its_failures_as_results(
        to: str, args: dict[str, Any]) -> None:
    runs = []
    for path in ("inlined", "original"):
        d = DeterministicDispatcher(seed=6)
        try:
            asker = d.spawn(Asker, "asker")
            d.spawn(Service, "svc")
            call = ToolCall("task_accept", to, dict(args), 5.0)
            task = Behaviour("b", _never())
            arm = call.arm if path == "inlined" else functools.partial(Request.arm, call)
            outcome = arm(asker, task)
            d.run()
            got = d.actor("svc").got  # type: ignore[attr-defined]
            runs.append((outcome, call.correlation_id, call.content,
                         [(m.message_id, m.from_agent, m.message_type, m.priority, m.content,
                           m.metadata) for m in got]))
            task.coro.close()
        finally:
            d.shutdown()
    inlined, original = runs
    assert inlined[1:] == original[1:]  # the same letter sent, the same id, content let go
    if inlined[0] is PENDING or original[0] is PENDING:
        assert inlined[0] is original[0] is PENDING
        return
    # A failure: Request.arm's error, ToolCall.arm's result dict saying the same.
    (result, none), (value, error) = inlined[0], original[0]
    assert none is None and value is None and result["success"] is False
    expected = {DeliveryError: "no_reply", MessageError: "invalid_argument"}[type(error)]
    assert result["error"] == expected


# -- barnraise.actors.service: A2AActor.emit and Dispatcher.make_durable, inlined
# ---------------------


def test_emit_event_records_and_publishes_what_a2aactor_emit_does() -> None:
    events = [AgentJoined(session_id="s1", agent_id="a1", name="ann", role="builder"),
              RegionClaimed(session_id="s2", agent_id="a2", claim_id="c", exclusive=False,
                            region={"x": 0, "y": 0, "width": 2, "height": 2},
                            expires_at=3.0)]
    runs = []
    for path in ("inlined", "original"):
        d = DeterministicDispatcher(seed=8)
        try:
            actor = d.spawn(Asker, "coordinator")
            listener = d.spawn(Asker, "listener")
            for sid in ("s1", "s2"):
                d.subscribe(listener, f"session:{sid}:events")
            for event in events:
                if path == "inlined":
                    SessionService.emit_event(actor, event)  # type: ignore[arg-type]
                else:
                    actor.emit(f"session:{event.session_id}:events", event)
            d.run()
            runs.append((d.trace.digest, len(d.trace),
                         [(m.to_agent, m.priority, m.content, m.metadata)
                          for m in listener.letters]))
        finally:
            d.shutdown()
    assert runs[0] == runs[1]
    assert len(runs[0][2]) == 2


def test_an_answer_is_made_durable_as_make_durable_does_for_members_only() -> None:
    for caller in ("ann", "tasks"):
        inlined: list[str] = []
        original: list[str] = []
        with Simulation(seed=1) as simu:
            d = simu.dispatcher
            coordinator = d.actor("coordinator")
            request = d.message(caller, "coordinator", "coordination_request", {},
                                correlation_id="c-1")
            d.durable = inlined.append
            coordinator._answer(request, {"success": True})  # type: ignore[attr-defined]
            d.durable = original.append
            d.make_durable(caller)
            d.durable = None
        if caller in SERVICES:  # a service's own call is no caller's acknowledgement
            assert (inlined, original) == ([], [caller])
        else:
            assert inlined == original == [caller]


# -- the list is whole ---------------------------------------------------------------------

#: Every file of sim/, actors/ and barnraise/ with "inlined" copies, and the copies in
#: each (the original each comment names), in the file's order.
PINNED = {
    "sim/dispatch/routing.py": ["message()"],
    "sim/dispatch/deterministic.py": ["_push", "_push"],
    "actors/actor.py": ["Timer.run", "ToolCall.outcome", "Request.outcome", "resume()"],
    "actors/effects.py": ["Effect.__init__", "Request.arm", "Effect.__init__",
                          "Dispatcher.call_later", "Effect.__init__"],
    "actors/service.py": ["Dispatcher.make_durable", "A2AActor.emit"],
}


def test_every_inlined_copy_in_these_files_is_pinned_here() -> None:
    seen = {}
    for package in ("sim", "actors", "barnraise"):
        for path in sorted((ROOT / package).rglob("*.py")):
            text = path.read_text(encoding="utf-8")
            found = re.findall(r"([A-Za-z_][\w.]*(?:\(\))?),? inlined\b", text)
            if found:
                seen[str(path.relative_to(ROOT))] = found
    assert seen == PINNED, (
        "the inlined copies are now these; each needs a test in tests/test_inlined.py "
        f"that fails when it and its original differ, and a line in PINNED: {seen}")
