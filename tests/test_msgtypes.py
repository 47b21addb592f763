"""Message types of one's own: delivered to ``handle_<type>`` or a behaviour's receive,
checked against a schema when one is declared, sent to several recipients at once, and,
when nothing takes them, dead letters whose reason the author sees."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import msgspec
import pytest

import barnraise
from barnraise.actors.base import Agent
from barnraise.cli import summary_lines
from barnraise.sim.dispatch import Dispatcher
from barnraise.sim.messages import Message, MessageError, message_type
from tests.conftest import new_dispatcher


class _Tally(msgspec.Struct, forbid_unknown_fields=True):
    count: int


message_type("test_tally", schema=_Tally)


class Counter(Agent):
    """Serves ``ping`` (a type of its own) and ``test_tally`` (one with a schema)."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.pings: list[tuple[str, int]] = []
        self.tallies: list[int] = []

    def handle_ping(self, message: Message) -> None:
        self.pings.append((message.from_agent, message.content["n"]))
        if message.correlation_id is not None:
            self.reply(message, "pong", {"n": message.content["n"] + 1})

    def handle_test_tally(self, message: Message) -> None:
        self.tallies.append(message.content["count"])


def _drops(d: Dispatcher) -> list[dict[str, Any]]:
    return [{"type": r.type, "to": r.recipient, **json.loads(r.content)}
            for r in d.trace.records() if r.kind == "drop"]


def test_a_type_of_ones_own_reaches_its_handler_and_its_reply_the_request(mode: str) -> None:
    answers: list[int] = []

    async def ask(agent: Agent) -> None:
        agent.send("counter", "ping", {"n": 1})
        reply = await agent.request("counter", "ping", {"n": 10}, timeout=30)
        answers.append(reply.content["n"])
        assert reply.message_type == "pong"

    d = new_dispatcher(mode)
    try:
        counter = d.spawn(Counter, "counter")
        d.spawn(Agent, "asker", behaviours=(ask,))
        assert d.run().reason == "quiescent"
        assert counter.pings == [("asker", 1), ("asker", 10)]
        assert answers == [11]
        delivered = [(r.type, r.recipient) for r in d.trace.records() if r.kind == "deliver"]
        assert ("ping", "counter") in delivered and ("pong", "asker") in delivered
        assert d.statistics().dead_letters == {}
    finally:
        d.shutdown(timeout=5)


def test_a_behaviour_receives_a_type_of_its_own_and_a_built_in_agents_type(
        det: Dispatcher) -> None:
    got: list[tuple[str, Any]] = []

    async def listen(agent: Agent) -> None:
        for kind in ("build_done", "notification"):
            message = await agent.receive(message_type=kind, timeout=30)
            got.append((message.message_type, message.content))

    async def tell(agent: Agent) -> None:
        await agent.sleep(1)
        agent.send("listener", "notification", {"k": 2})
        agent.send("listener", "build_done", {"k": 1})

    det.spawn(Agent, "listener", behaviours=(listen,))
    det.spawn(Agent, "teller", behaviours=(tell,))
    assert det.run().reason == "quiescent"
    assert got == [("build_done", {"k": 1}), ("notification", {"k": 2})]
    assert det.statistics().dead_letters == {}


def test_a_send_to_a_list_is_one_letter_per_recipient_in_order(det: Dispatcher) -> None:
    counters = [det.spawn(Counter, f"c{i}") for i in range(3)]
    sender = det.spawn(Agent, "sender")
    reports = sender.send(["c2", "c0", "c1"], "ping", {"n": 5})
    assert [r.delivered for r in reports] == [["c2"], ["c0"], ["c1"]]
    assert len({r.message_id for r in reports}) == 3
    det.run()
    assert [c.pings for c in counters] == [[("sender", 5)]] * 3
    letters = [r for r in det.trace.records() if r.kind == "deliver" and r.type == "ping"]
    assert [r.recipient for r in letters] == ["c2", "c0", "c1"]


@pytest.mark.parametrize(("to", "problem"), [
    ([], "non-empty list"),
    (["c0", ""], "to[1]: expected an agent id"),
    (["c0", 7], "to[1]: expected an agent id"),
    (["c0", "broadcast"], "to[1]: 'broadcast' is a group address"),
    (["topic:news"], "to[0]: 'topic:news' is a group address"),
    (["c0", "c1", "c0"], "to[2]: 'c0' is named twice"),
    ({"c0"}, "non-empty list of agent ids"),
])
def test_a_bad_list_of_recipients_is_refused_whole(det: Dispatcher, to: Any,
                                                   problem: str) -> None:
    det.spawn(Counter, "c0")
    det.spawn(Counter, "c1")
    sender = det.spawn(Agent, "sender")
    det.run()
    before = len(list(det.trace.records()))
    sent = det.statistics().delivered
    with pytest.raises(ValueError, match=problem.replace("[", r"\[").replace("]", r"\]")):
        sender.send(to, "ping", {"n": 1})
    assert len(list(det.trace.records())) == before and det.statistics().delivered == sent


def test_content_that_fails_its_schema_is_refused_at_send_time_naming_the_field(
        det: Dispatcher) -> None:
    errors: list[MessageError] = []

    async def tally(agent: Agent) -> None:
        agent.send("counter", "test_tally", {"count": 3})
        for bad in ({"count": "three"}, {"count": 1, "extra": True}, {}):
            try:
                agent.send(["counter", "other"], "test_tally", bad)
            except MessageError as exc:
                errors.append(exc)

    counter = det.spawn(Counter, "counter")
    other = det.spawn(Counter, "other")
    det.spawn(Agent, "tallier", behaviours=(tally,))
    det.run()
    assert counter.tallies == [3] and other.tallies == []
    assert [e.field for e in errors] == ["content.count", "content.extra", "content.count"]
    assert "Expected `int`, got `str`" in str(errors[0]) and "test_tally" in str(errors[0])


def test_a_schema_check_that_raises_anything_refuses_the_letter(det: Dispatcher) -> None:
    """A check written as ``content["n"]`` raises KeyError on ``{}``: the letter is
    refused with a MessageError naming the type, nothing escapes and nothing is sent."""
    def needs_n(content: dict[str, Any]) -> None:
        content["n"]

    message_type("test_needs_n", schema=needs_n)
    sender = det.spawn(Agent, "sender")
    det.spawn(Counter, "counter")
    with pytest.raises(MessageError, match=r"test_needs_n.*its check raised KeyError: 'n'"):
        sender.send("counter", "test_needs_n", {})
    assert det.statistics().delivered == 0


def test_a_module_loaded_again_declares_its_schema_again(tmp_path: Path) -> None:
    """A scenario file runs once per load (a sweep, a notebook running it twice): its
    Struct is a new class each time, of the same module and name, and replaces the old;
    another module's schema for the same name is still refused."""
    source = textwrap.dedent("""
        import msgspec
        from barnraise.kit import message_type

        class Hop(msgspec.Struct):
            n: int

        message_type("test_hop", schema=Hop)
    """)
    first: dict[str, Any] = {"__name__": "user_scenario_hops"}
    again: dict[str, Any] = {"__name__": "user_scenario_hops"}
    exec(compile(source, str(tmp_path / "hops.py"), "exec"), first)
    exec(compile(source, str(tmp_path / "hops.py"), "exec"), again)
    assert first["Hop"] is not again["Hop"]
    from barnraise.sim.messages import schema_of
    assert schema_of("test_hop") is again["Hop"]
    with pytest.raises(ValueError, match="'test_hop' already has the schema"):
        exec(compile(source, str(tmp_path / "other.py"), "exec"), {"__name__": "elsewhere"})
    assert schema_of("test_hop") is again["Hop"]


def test_a_letter_no_handler_takes_is_a_dead_letter_with_its_reason(mode: str) -> None:
    async def chatter(agent: Agent) -> None:
        agent.send("idle", "ping", {"n": 1})            # no handler, no behaviour: dead
        agent.send("idle", "message", {"n": 2})         # handle_message is no handler
        agent.send("idle", "data_share", {"n": 3})      # an agents' type: dead too
        agent.send("idle", "status_update", {"n": 4})   # the runtime's: kept, as always
        agent.send("counter", "ping", {"n": 5})         # served

    d = new_dispatcher(mode)
    try:
        d.spawn(Agent, "idle")
        counter = d.spawn(Counter, "counter")
        d.spawn(Agent, "chatter", behaviours=(chatter,))
        d.run()
        assert counter.pings == [("chatter", 5)]
        assert dict(d.statistics().dead_letters) == {"no_handler": 3}
        reasons = {r["type"]: r["detail"] for r in _drops(d)}
        assert reasons == {t: f"no handler for {t!r} on idle (no handle_{t} and no "
                              "behaviour running)" for t in ("ping", "message", "data_share")}
        assert sum(d.dead_details.values()) == 3
        assert [m.message_type for m in d.actor("idle")._stash] == ["status_update"]
    finally:
        d.shutdown(timeout=5)


def test_a_letter_kept_for_a_receive_that_never_came_is_dead_at_the_run_end(
        tmp_path: Path, mode: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Through the runner: counted, in the summary's reasons, and printed like the other
    warnings; a run without such letters keeps its summary as it was."""
    path = tmp_path / "own_types.py"
    path.write_text(textwrap.dedent('''
        """Agents of one's own: a waiter that waits for the wrong type."""
        from barnraise.actors.base import Agent

        PARAMS = {}

        async def wait_for_go(agent):
            try:
                await agent.receive(message_type="go", timeout=5)
            except Exception:
                pass
            await agent.sleep(10)  # still running when the letters come

        async def send_ping(agent):
            await agent.sleep(6)
            agent.send(["builder-3", "builder-4"], "ping", {"n": 1})

        def run(simu):
            for name in ("builder-3", "builder-4"):
                simu.dispatcher.spawn(Agent, name, behaviours=(wait_for_go,))
            simu.dispatcher.spawn(Agent, "pinger", behaviours=(send_ping,))
            return {}

        def check(summary):
            return True
    '''))
    result = barnraise.run(str(path), seed=0, mode=mode)
    summary = result.summary
    assert summary["dead_letters"] == {"no_handler": 2}
    assert summary["dead_letter_details"] == {
        f"no handler for 'ping' on builder-{n} (no handle_ping and no receive took it)": 1
        for n in (3, 4)}
    lines = summary_lines(summary)
    assert "  dead letter: no handler for 'ping' on builder-3 (no handle_ping and no " \
        "receive took it)" in lines
    assert any("2 dead letters (2 no_handler)" in line for line in lines)
    drops = [r for r in result.trace.records() if r.kind == "drop"]
    assert [(r.type, r.recipient) for r in drops] == [("ping", "builder-3"),
                                                      ("ping", "builder-4")]
    if mode == "deterministic":
        from barnraise.cli import main

        assert main(["run", str(path)]) == 0
        printed = capsys.readouterr().out
        assert "dead letter: no handler for 'ping' on builder-4 (no handle_ping and no " \
            "receive took it)" in printed
        plain = barnraise.run("locks_barriers", seed=0).summary
        assert plain["dead_letter_details"] == {}
        assert not any(line.startswith("  dead letter") for line in summary_lines(plain))


def test_the_example_in_docs_agents_runs_as_it_says(capsys: pytest.CaptureFixture[str]) -> None:
    text = (Path(__file__).parent.parent / "docs" / "agents.md").read_text()
    section = text.split("## Message types of your own", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    code = code.replace('message_type("ping"', 'message_type("test_docs_ping"').replace(
        '"ping"', '"test_docs_ping"').replace("handle_ping", "handle_test_docs_ping")
    exec(compile(code, "docs/agents.md", "exec"), {})
    shown = capsys.readouterr().out
    assert shown.strip() == str({
        f"no handler for 'notification' on pong-{n} (no handle_notification and no "
        "behaviour running)": 1 for n in (1, 2)})


def test_the_send_tool_takes_a_list_of_members_and_refuses_a_bad_one_whole() -> None:
    from barnraise import Simulation

    with Simulation(seed=3, mode="deterministic") as simu:
        made = simu.client().session_create(session_name="talk", grid_size=20)
        sid = made["session_id"]
        members = {}
        for name in ("Ann", "Bob", "Cy"):
            member = simu.client()
            assert member.session_join(session_id=sid, agent_name=name)["success"]
            members[name] = member
        ann, bob, cy = members["Ann"], members["Bob"], members["Cy"]
        sent = ann.a2a_send_message(to_agent=["Cy", bob.agent_id], message_type="ping",
                                    content={"n": 1})
        assert sent["success"], sent
        assert sent["to_agent"] == [cy.agent_id, bob.agent_id]
        assert sent["statuses"] == {cy.agent_id: "delivered", bob.agent_id: "delivered"}
        assert len(set(sent["message_ids"])) == 2
        simu.settle()
        for member in (bob, cy):
            [got] = [m for m in member.messages() if m.message_type == "ping"]
            assert (got.from_agent, got.to_agent, got.content) == (
                ann.agent_id, member.agent_id, {"n": 1})
        one = ann.a2a_send_message(to_agent="Bob", message_type="task_request")
        assert one["to_agent"] == bob.agent_id and one["status"] == "delivered"
        def pings() -> int:
            return sum(1 for r in simu.dispatcher.trace.records() if r.type == "ping")

        before = pings()
        for bad, field in [([], "to_agent"), (["Bob", "nobody"], "to_agent[1]"),
                           (["Bob", bob.agent_id], "to_agent[1]"), (["Bob", 3], "to_agent[1]")]:
            refused = ann.a2a_send_message(to_agent=bad,  # type: ignore[typeddict-item]
                                           message_type="ping")
            assert refused["error"] == "invalid_argument", refused
            assert refused["field"] == field, refused
        simu.settle()
        assert pings() == before  # nothing went


def test_a_request_nobody_can_take_fails_at_once_with_the_reason(mode: str) -> None:
    """The README's first agent with a type its Pong has no handler for: the request
    raises RequestError naming the reason at once, instead of waiting out its timeout."""
    from barnraise.actors.errors import RequestError

    failures: list[tuple[float, str]] = []

    async def ask(agent: Agent) -> None:
        try:
            await agent.request("idle", "ping", {"ball": 0}, timeout=30)
        except RequestError as exc:
            failures.append((agent.now, str(exc)))

    d = new_dispatcher(mode)
    try:
        d.spawn(Agent, "idle")
        d.spawn(Agent, "asker", behaviours=(ask,))
        d.run()
        [(when, text)] = failures
        assert when < 1.0  # not the request's 30 s timeout
        assert text == ("system answered with no_handler: no handler for 'ping' on idle "
                        "(no handle_ping and no behaviour running)")
        assert dict(d.statistics().dead_letters) == {"no_handler": 1}
    finally:
        d.shutdown(timeout=5)
