"""Bad input gets a clear refusal and changes nothing: the findings of an adversarial pass
(issue 11), each as a class of inputs rather than one example."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from barnraise.actors.region_args import tile_rows as _tile_rows
from barnraise.actors.regions import RegionManager
from barnraise.actors.world import Simulation
from barnraise.sim.tools import ToolError
from tests.helpers import box, session_crew

#: Every character str.isdigit() accepts that int() does not (superscripts, circled
#: digits, ...): they once reached int() inside the region manager.
FALSE_DIGITS = [chr(c) for c in range(sys.maxunicode + 1)
                if chr(c).isdigit() and not chr(c).isdecimal()]


@pytest.fixture
def simu() -> Iterator[Simulation]:
    with Simulation(seed=11) as s:
        yield s


def test_every_false_digit_is_an_unknown_tile_not_a_crash() -> None:
    assert len(FALSE_DIGITS) > 100 and "²" in FALSE_DIGITS
    for char in FALSE_DIGITS:
        with pytest.raises(ToolError) as refused:
            _tile_rows([[char, "code"]], "tiles", (1, 2))
        assert refused.value.code == "invalid_argument" and "unknown tile" in str(refused.value)
    # decimal digits of other scripts are digits to int(), but not tile codes here
    for char in ("\u0663", "\u0969", "\uff13"):  # Arabic-Indic, Devanagari, fullwidth 3
        with pytest.raises(ToolError):
            _tile_rows([[char]], "tiles", (1, 1))
    assert _tile_rows([["3", " 2 ", "code"]], "tiles", (1, 3)).tolist() == [[3, 2, 2]]


def test_a_bool_is_never_a_tile(simu: Simulation) -> None:
    c = session_crew(simu)
    assert c.a.region_claim(region=box(0, 0, 2))["success"]
    for tiles in ([[True, 1], [1, 1]], [[1, 1], [1, False]], [[True, True], [True, True]]):
        placed = c.a.builder_place_tiles(region=box(0, 0, 2), tiles=tiles)
        assert placed["error"] == "invalid_argument", placed
        assert placed["field"].startswith("tiles["), placed
        assert "True" in placed["message"] or "False" in placed["message"], placed
    assert c.a.builder_place_tiles(region=box(0, 0, 2), tiles=[[1, 1], [1, 1]])["success"]
    made = c.arch.call("session_create", session_name="bp", grid_size=2,
                       blueprint=[[True, 1], [1, 1]])
    assert made["error"] == "invalid_argument"


def test_a_bad_blueprint_is_refused_at_once_and_leaves_no_session(simu: Simulation) -> None:
    host = simu.client()
    for blueprint in ([["²", 1], [1, 1]], [[1, 1], [1, "①"]], [[1], [1, 1]]):
        made = host.call("session_create", session_name="bp", grid_size=2,
                         blueprint=blueprint)
        assert (made["error"], made["field"]) == ("invalid_argument", "blueprint"), made
    assert simu.now == 0.0  # answered, not timed out
    assert simu.sessions() == []
    assert simu.dispatcher.behaviour_errors == 0


def test_a_handler_that_raises_answers_internal_error_at_once(
        simu: Simulation, monkeypatch: pytest.MonkeyPatch) -> None:
    """The class behind the findings: a bug in a handler left its caller waiting for a
    reply that never came (60 simulated seconds, then no_reply), half the work done."""
    c = session_crew(simu)

    def broken(self: RegionManager, call: object) -> None:
        raise ValueError("a bug")

    monkeypatch.setattr(RegionManager, "tool_region_query", broken)
    monkeypatch.setattr(c.a._simulation.dispatcher.actor("regions"), "_tool_handlers", {})
    answer = c.a.region_query(region=box(0, 0, 3))
    assert answer["error"] == "internal_error" and "ValueError" in answer["message"]
    assert simu.now == 0.0
    assert simu.dispatcher.behaviour_errors == 1
    assert c.a.region_claim(region=box(0, 0, 3))["success"]  # the service goes on


# -- nothing crosses the boundary by reference -------------------------------------------------


def test_what_a_caller_gets_or_gives_is_its_own(simu: Simulation) -> None:
    c = session_crew(simu)
    assert c.a.region_claim(region=box(0, 0, 10))["success"]
    assert c.a.builder_place_tiles(region=box(0, 0, 4), tiles="code")["success"]
    # a checkpoint's include list was the coordinator's own: clearing it broke a rollback
    made = c.arch.build_checkpoint(checkpoint_name="base")
    made["include"].clear()
    assert c.a.builder_place_tiles(region=box(0, 0, 4), tiles="data")["success"]
    rolled = c.arch.build_rollback(checkpoint_id=made["checkpoint_id"])
    assert rolled["success"], rolled
    assert simu.view(c.sid).canvas[0, 0] == 2  # code again
    # capabilities read back and appended to were found by a2a_discover
    state = c.a.session_get_state(include=["agents"])
    for agent in state["state"]["agents"]:
        agent["capabilities"].append("root")
    assert c.a.a2a_discover(capability="root")["count"] == 0
    # a payload changed after task_delegate changed the stored task
    payload = {"steps": ["a", "b"]}
    task = c.arch.task_delegate(task_type="build", payload=payload)
    payload["steps"].append("c")
    payload["evil"] = True
    queued = c.a.task_get_queue()["tasks"]
    [mine] = [t for t in queued if t["task_id"] == task["task_id"]]
    assert mine["payload"] == {"steps": ["a", "b"]}


def test_arguments_changed_after_sending_change_nothing() -> None:
    with Simulation(seed=2, sign_messages=True) as simu:
        c = session_crew(simu)
        assert c.a.region_claim(region=box(0, 0, 2))["success"]
        rows = [["code", "code"], ["code", "code"]]
        pending = c.a.submit("builder_place_tiles", region=box(0, 0, 2), tiles=rows)
        rows[0][0] = "data"  # before the regions actor has it (deterministic: not yet run)
        assert pending.result()["success"]
        assert simu.view(c.sid).canvas[0, 0] == 2  # code, as signed and traced


def test_a_client_call_never_raises_for_what_it_is_given(simu: Simulation) -> None:
    np = pytest.importorskip("numpy")
    c = session_crew(simu)
    for bad in (np.int64(3), np.zeros(2), object(), {1: "a"}, "x" * 70_000):
        answer = c.a.call("task_delegate", task_type="build", payload={"v": bad})
        assert answer["success"] is False and answer["error"] == "invalid_argument", bad
    assert c.a.call("task_delegate", task_type="build", payload={"v": 3})["error"] == \
        "permission_denied"  # a builder may not delegate: the call did go through
    assert simu.dispatcher.behaviour_errors == 0


def test_a_behaviour_hears_that_its_message_cannot_be_sent() -> None:
    """``await agent.request(..., {"x": object()})`` raised in the actor, not in the
    behaviour: its ``except`` never ran and the run called itself quiescent."""
    from barnraise.actors.base import Agent
    from barnraise.sim.messages import MessageError

    heard: list[str] = []

    async def talker(agent: Agent) -> None:
        try:
            await agent.request("registry", "registry_query", {"x": object()})
        except MessageError as exc:
            heard.append(exc.field)
        answer = await agent.call("session_get_state", session_id="nope",
                                  include=[object()])
        heard.append(answer["error"])

    with Simulation(seed=1) as simu:
        simu.dispatcher.spawn(Agent, "talker", agent_type="builder", behaviours=[talker])
        simu.run()
        assert heard == ["content", "invalid_argument"]
        assert simu.dispatcher.behaviour_errors == 0


def test_session_state_events_never_scan_the_trace(
        simu: Simulation, monkeypatch: pytest.MonkeyPatch) -> None:
    c = session_crew(simu)
    for i in range(120):
        assert c.a.region_claim(region=box(i % 10 * 5, i // 10 * 5, 5), timeout=0)["success"]

    def no_scan(*args: object, **kwargs: object) -> None:
        raise AssertionError("session_get_state scanned the whole trace")

    monkeypatch.setattr(type(simu.dispatcher.trace), "records", no_scan)
    state = c.observer.session_get_state(include=["events"])
    events = state["state"]["events"]
    assert len(events) == 100  # the last hundred
    assert events[-1]["type"] == "region_claimed" and events[-1]["t"] == simu.now
    assert [e["type"] for e in events].count("region_claimed") == 100


def test_close_wakes_a_waiting_client_with_a_clear_failure() -> None:
    import threading
    import time

    simu = Simulation(seed=1, mode="realtime", time_scale=1.0)
    try:
        c = session_crew(simu)
        answers: list[dict[str, object]] = []
        waiter = threading.Thread(target=lambda: answers.append(c.a.a2a_barrier_enter(
            barrier_id="never", expected_count=2, timeout=3600)))
        waiter.start()
        deadline = time.monotonic() + 10
        while not c.a._actor.expected and time.monotonic() < deadline:  # the call is out
            time.sleep(0.005)
        assert c.a._actor.expected
    finally:
        started = time.monotonic()
        simu.close()
    waiter.join(10)
    assert not waiter.is_alive()
    assert time.monotonic() - started < 10  # woken, not timed out (30 s)
    [answer] = answers
    assert answer["error"] == "no_reply" and "closed" in str(answer["message"])
    late = c.b.region_query(region=box(0, 0, 1))
    assert late["error"] == "no_reply" and "closed" in late["message"]
