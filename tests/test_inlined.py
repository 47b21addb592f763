"""Every hot-path copy marked "inlined" is pinned to its original: each test runs the copy
and the original on the same inputs and fails when they differ (issue 24 item 4).

The copies live where a call would cost on every message (see the comment at each);
the original stays the one readers and other callers use. When a test here fails, the
original changed: change the copy the same way (or drop the copy, if a benchmark shows
the call costs nothing). The last test keeps this list whole: a new "inlined" comment
in the files it scans needs a test here.
"""

from __future__ import annotations

import pathlib
import re
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest

from actors.actor import A2AActor
from actors.effects import Request, ToolCall
from actors.errors import RequestError
from sim.dispatch import DeterministicDispatcher
from sim.dispatch.values import Timer, region_of
from sim.events import AgentJoined, Event, RegionClaimed, body_of
from sim.messages import Message, Priority, verify
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


# -- the list is whole ---------------------------------------------------------------------

#: The files whose "inlined" copies this module pins, and the copies in each (the
#: original each comment names).
PINNED = {
    "sim/dispatch/routing.py": ["message()"],
    "sim/dispatch/deterministic.py": ["_push", "_push"],
    "actors/actor.py": ["Timer.run", "ToolCall.outcome", "Request.outcome", "resume()"],
}


def test_every_inlined_copy_in_these_files_is_pinned_here() -> None:
    for path, originals in PINNED.items():
        text = (ROOT / path).read_text(encoding="utf-8")
        found = re.findall(r"#\s*(?:\w[\w ]*, )?([\w.]+(?:\(\))?),? inlined", text)
        assert found == originals, (
            f"{path}: its inlined copies are {found}; each needs a test in "
            "tests/test_inlined.py that fails when it and its original differ")
