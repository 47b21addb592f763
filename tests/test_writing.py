"""docs/writing.md's examples run and print what it says, and the kit it shows is public."""

from __future__ import annotations

import pathlib

import pytest

from tests.snippets import run_document

WRITING = pathlib.Path(__file__).resolve().parent.parent / "docs" / "writing.md"


def test_the_guides_examples_run_and_print_what_it_shows(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    ran = run_document(WRITING, tmp_path)
    assert len(ran) == 3  # a first agent, the stripes scenario run, the buggy one
    assert {p.name for p in tmp_path.iterdir()} >= {"stripes.py", "buggy.py"}


def test_the_guide_keeps_a_place_for_message_types_of_ones_own() -> None:
    text = WRITING.read_text()
    for heading in ("## A first agent", "## A first scenario with agents of your own",
                    "## Message types of your own", "## When your code raises"):
        assert heading in text, heading


def test_the_kit_hands_on_the_participant_the_scenarios_use() -> None:
    import barnraise.kit
    from barnraise.actors.agents.participant import Behaviour, Participant

    assert barnraise.kit.Participant is Participant
    assert barnraise.kit.Behaviour is Behaviour
    assert {"host_session", "spawn", "Participant"} <= set(barnraise.kit.__all__)


def test_spawn_refuses_what_it_cannot_start_and_starts_nothing() -> None:
    from barnraise import Simulation
    from barnraise.kit import host_session, spawn

    async def fine(agent: object) -> None:
        return None

    def not_async(agent: object) -> None:
        return None

    with Simulation(seed=1) as simu:
        _, sid = host_session(simu, session_name="S", grid_size=4)
        actors = set(simu.dispatcher.actors)
        refusals = [
            (ValueError, "role must be one of architect, builder, observer, tester, "
                         "got 'buidler'", dict(role="buidler", behaviour=fine)),
            (TypeError, "behaviour must be an async def function", dict(behaviour=not_async)),
            (ValueError, "crew must be an int of at least 1", dict(crew=0)),
            (ValueError, "crew must be an int of at least 1", dict(crew=True)),
            (ValueError, "agent_id must be a non-empty string", dict(agent_id="")),
            (ValueError, "mailbox must be an int of at least 1", dict(mailbox=0)),
            (ValueError, "mailbox must be an int of at least 1", dict(mailbox="9")),
        ]
        for error, words, given in refusals:
            args = {"agent_id": "a-1", "role": "builder", "crew": 1, **given}
            with pytest.raises(error, match=words):
                spawn(simu, sid, args.pop("agent_id"), args.pop("role"), **args)
        with pytest.raises(LookupError, match="no session 'nope'"):
            spawn(simu, "nope", "a-1", "builder", crew=1, behaviour=fine)
        assert set(simu.dispatcher.actors) == actors  # nothing was started
        assert simu.view(sid).members == ()
        agent = spawn(simu, sid, "a-1", "architect", crew=1, behaviour=fine)
        simu.run()
        assert [m.agent_id for m in simu.view(sid).members] == ["a-1"]
        assert agent.role == "architect" and agent.outcome == {}
