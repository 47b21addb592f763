"""Joins that hold (issue 23, finding 4): a call that answers failure changed nothing, and
answers stay under the message limit by construction.

Before: a join's result carried the whole session's state, so past about 440 members
it answered ``invalid_argument: the result is too large to send`` while the member
stayed (a retry answered ``name_taken``), and every member's ``session_get_state``
failed the same way.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import msgspec
import pytest

from barnraise.actors.coordinator import JOIN_STATE_LIMIT
from barnraise.actors.service import fit_prefix
from barnraise.actors.world import Client, Simulation
from barnraise.sim.tools import MAX_CAPABILITIES, MAX_NAME, STATE_PAGE_DEFAULT, STATE_PAGE_MAX
from tests.helpers import box


@pytest.fixture
def simu() -> Iterator[Simulation]:
    with Simulation(seed=3) as s:
        yield s


def _session(simu: Simulation, **options: Any) -> tuple[Client, str]:
    host = simu.client("host")
    created = host.session_create(session_name="Big", grid_size=400, max_agents=2000,
                                  **options)
    assert created["success"], created
    return host, created["session_id"]


def _crew(simu: Simulation, sid: str, n: int, prefix: str = "m") -> list[Client]:
    crew = []
    for i in range(n):
        client = simu.client(f"{prefix}{i}")
        joined = client.session_join(session_id=sid, agent_name=f"{prefix.upper()}{i}")
        assert joined["success"], joined
        crew.append(client)
    return crew


def _size(result: dict[str, Any]) -> int:
    return len(msgspec.json.encode(result))


def test_every_join_past_the_old_limit_answers_success_and_each_member_is_one_join(
        simu: Simulation) -> None:
    _, sid = _session(simu)
    crew = []
    for i in range(520):
        client = simu.client(f"m{i}")
        joined = client.session_join(session_id=sid, agent_name=f"M{i}")
        assert joined["success"], (i, joined)  # before: invalid_argument past ~440
        state = joined["session_state"]
        assert all(len(state[k]) <= JOIN_STATE_LIMIT
                   for k in ("agents", "claimed_regions", "pending_tasks"))
        assert state.get("truncated", False) is (i + 1 > JOIN_STATE_LIMIT)
        crew.append(client)
    assert len(simu.view(sid, canvas=False).members) == 520
    last = crew[-1].session_get_state()
    assert last["success"], last  # before: too large, for every member
    # a page of at most 500, cut shorter to fit 64 KB beside the last 100 events
    shown = len(last["state"]["agents"])
    assert 0 < shown <= STATE_PAGE_DEFAULT and last["next_cursor"] == str(shown)
    names = [a["name"] for a in last["state"]["agents"]]
    cursor = last["next_cursor"]
    while cursor is not None:
        page = crew[-1].session_get_state(include=["agents"], cursor=cursor)
        names += [a["name"] for a in page["state"]["agents"]]
        cursor = page.get("next_cursor")
    assert names == [f"M{i}" for i in range(520)]


def test_a_join_state_is_the_first_members_and_says_when_it_is_cut(simu: Simulation) -> None:
    _, sid = _session(simu)
    crew = _crew(simu, sid, 3)
    for k, client in enumerate(crew):
        assert client.region_claim(region=box(10 * k, 0, 5))["success"]
    joined = simu.client("late").session_join(session_id=sid, agent_name="Late")
    state = joined["session_state"]
    assert "truncated" not in state  # below the cap: the shape as it always was
    assert [a["name"] for a in state["agents"]] == ["M0", "M1", "M2", "Late"]
    assert [a["regions_claimed"] for a in state["agents"]] == [1, 1, 1, 0]
    assert [c["agent_id"] for c in state["claimed_regions"]] == ["m0", "m1", "m2"]


def test_a_join_answer_is_cut_to_fit_the_message_limit() -> None:
    """Members with long capability lists: a hundred of them would not fit 16 KB."""
    with Simulation(seed=3, max_content_bytes=16 * 1024) as simu:
        _, sid = _session(simu)
        caps = [f"capability-{k:03d}" for k in range(12)]
        for i in range(60):
            joined = simu.client(f"m{i}").session_join(session_id=sid, agent_name=f"M{i}",
                                                       capabilities=caps)
            assert joined["success"], (i, joined)
            assert _size(joined) <= 16 * 1024
        state = joined["session_state"]
        assert state["truncated"] is True and 0 < len(state["agents"]) < 60
        assert len(simu.view(sid, canvas=False).members) == 60


def test_session_get_state_pages_agents_and_regions_with_a_cursor(simu: Simulation) -> None:
    _, sid = _session(simu)
    crew = _crew(simu, sid, 23)
    for k, client in enumerate(crew[:17]):
        assert client.region_claim(region=box(10 * k, 0, 5))["success"]
    whole = crew[0].session_get_state(include=["agents", "regions"])
    assert "next_cursor" not in whole and len(whole["state"]["agents"]) == 23
    agents: list[str] = []
    claims: list[str] = []
    cursor = None
    pages = 0
    while True:
        page = crew[0].session_get_state(include=["agents", "regions"], limit=5,
                                         **({} if cursor is None else {"cursor": cursor}))
        assert page["success"], page
        assert len(page["state"]["agents"]) <= 5 and len(page["state"]["regions"]) <= 5
        agents += [a["agent_id"] for a in page["state"]["agents"]]
        claims += [c["claim_id"] for c in page["state"]["regions"]]
        pages += 1
        cursor = page.get("next_cursor")
        if cursor is None:
            break
    assert pages == 5
    assert agents == [a["agent_id"] for a in whole["state"]["agents"]]
    assert claims == [c["claim_id"] for c in whole["state"]["regions"]]


def test_session_get_state_cuts_a_page_to_fit_the_message_limit() -> None:
    with Simulation(seed=3, max_content_bytes=16 * 1024) as simu:
        _, sid = _session(simu)
        crew = _crew(simu, sid, 150)
        seen: list[str] = []
        cursor = None
        while True:
            page = crew[0].session_get_state(
                include=["agents"], limit=STATE_PAGE_MAX,
                **({} if cursor is None else {"cursor": cursor}))
            assert page["success"], page
            assert _size(page) <= 16 * 1024
            seen += [a["name"] for a in page["state"]["agents"]]
            cursor = page.get("next_cursor")
            if cursor is None:
                break
        assert seen == [f"M{i}" for i in range(150)]


@pytest.mark.parametrize(("args", "field"), [
    ({"limit": STATE_PAGE_MAX + 1}, "limit"), ({"limit": 0}, "limit"),
    ({"cursor": "abc"}, "cursor"), ({"cursor": "-1"}, "cursor"),
    ({"cursor": "\uff11\uff12"}, "cursor"),  # full-width digits
    ({"cursor": "9" * 40}, "cursor"),
])
def test_a_bad_limit_or_cursor_is_refused_naming_it(simu: Simulation, args: dict[str, Any],
                                                    field: str) -> None:
    _, sid = _session(simu)
    (member,) = _crew(simu, sid, 1)
    refused = member.session_get_state(**args)
    assert refused["error"] == "invalid_argument" and refused["field"] == field, refused


def test_a_cursor_past_the_end_is_an_empty_last_page(simu: Simulation) -> None:
    _, sid = _session(simu)
    (member,) = _crew(simu, sid, 1)
    page = member.session_get_state(include=["agents", "regions"], cursor="50")
    assert page["state"] == {"agents": [], "regions": []} and "next_cursor" not in page


def test_a_broadcast_too_large_to_list_answers_success_cut_not_failure() -> None:
    """It was sent: answering "too large" would say a call that took effect failed."""
    with Simulation(seed=3, max_content_bytes=8 * 1024) as simu:
        _, sid = _session(simu)
        crew = _crew(simu, sid, 400)
        sent = crew[0].a2a_broadcast(content={"hello": 1})
        assert sent["success"] and sent["truncated"] is True, sent
        assert 0 < len(sent["recipients"]) < 399
        assert _size(sent) <= 8 * 1024
        assert len(crew[-1].messages()) == 1  # the last member got it all the same


def test_conflict_storm_with_a_thousand_agents_passes_its_check() -> None:
    """The load target's smaller half (the 10,000-agent run is in ``python -m benchmarks``):
    before, every join answered "too large" and no claim was ever attempted."""
    import barnraise

    result = barnraise.run("conflict_storm", seed=0, agents=1000, grid=1024,
                           claims_per_agent=5)
    metrics = result.summary["metrics"]
    assert result.success, metrics
    assert metrics["granted"] == 5000 and metrics["agents_with_claim"] == 1000


def test_a_join_that_cannot_answer_leaves_no_member_and_no_claim(
        simu: Simulation, monkeypatch: pytest.MonkeyPatch) -> None:
    """A join that fails after letting the member in (here a bug in building its answer)
    takes it all back: no member, no auto-assigned region, the name free again."""
    from barnraise.actors.coordinator import Coordinator

    _, sid = _session(simu, config={"auto_assign_regions": True, "auto_region_size": 10})
    (first,) = _crew(simu, sid, 1)
    before = simu.view(sid, canvas=False)
    assert len(before.claims) == 1  # the first member's region

    async def broken(*_: Any, **__: Any) -> dict[str, Any]:
        raise RuntimeError("cannot build the state")

    monkeypatch.setattr(Coordinator, "_state_of", broken)
    late = simu.client("late")
    failed = late.session_join(session_id=sid, agent_name="Late")
    assert failed["error"] == "internal_error", failed
    after = simu.view(sid, canvas=False)
    assert after.members == before.members and after.claims == before.claims
    assert late.session_get_state(session_id=sid)["error"] == "not_a_member"
    monkeypatch.undo()
    again = late.session_join(session_id=sid, agent_name="Late")  # before: name_taken
    assert again["success"], again
    assert again["assigned_region"] is not None
    left = [e for e in first.session_get_state(include=["events"])["state"]["events"]
            if e["type"] == "agent_left"]
    assert left[-1]["reason"] == "join_failed"


def test_a_page_whose_first_item_cannot_fit_is_refused_not_an_endless_cursor() -> None:
    """A member whose capabilities fill a reply on their own: a page starting at it
    cannot move on, so it is refused (a read: nothing changed) rather than answered with
    a next_cursor equal to its own cursor."""
    with Simulation(seed=3, max_content_bytes=16 * 1024) as simu:
        _, sid = _session(simu)
        (first,) = _crew(simu, sid, 1)
        big = simu.client("big")
        assert big.session_join(session_id=sid, agent_name="Big",
                                capabilities=["c" * 250] * 60)["success"]
        page = first.session_get_state(include=["agents"])
        assert [a["name"] for a in page["state"]["agents"]] == ["M0"]
        assert page["next_cursor"] == "1"
        refused = first.session_get_state(include=["agents"], cursor="1")
        assert refused["error"] == "invalid_argument" and refused["field"] == "cursor"


# -- a2a_discover pages as session_get_state does ------------------------------------------


def test_a2a_discover_of_a_crowd_answers_success_a_page_at_a_time(simu: Simulation) -> None:
    """Before: a2a_discover listed every match in one answer, and about 240 members with
    capabilities answered "too large"."""
    _, sid = _session(simu)
    crew = []
    for i in range(600):
        client = simu.client(f"m{i}")
        joined = client.session_join(session_id=sid, agent_name=f"M{i}",
                                     capabilities=[f"skill-{i}-{'x' * 60}", "kernel"])
        assert joined["success"], (i, joined)
        crew.append(client)
    first = crew[0].a2a_discover(capability="kernel")
    assert first["success"], first  # before: invalid_argument, the result too large
    shown = first["count"]
    assert 0 < shown == len(first["agents"]) <= STATE_PAGE_DEFAULT
    assert first["next_cursor"] == str(shown)
    assert _size(first) <= simu.dispatcher.max_content_bytes
    names = [a["name"] for a in first["agents"]]
    cursor = first["next_cursor"]
    while cursor is not None:
        page = crew[0].a2a_discover(capability="kernel", limit=STATE_PAGE_MAX, cursor=cursor)
        assert page["success"] and page["count"] == len(page["agents"]), page
        names += [a["name"] for a in page["agents"]]
        cursor = page.get("next_cursor")
    assert names == [f"M{i}" for i in range(600)]
    # The filters apply before the page: a page of matches, and its cursor counts matches.
    one = crew[0].a2a_discover(capability=f"skill-7-{'x' * 60}", limit=1)
    assert [a["name"] for a in one["agents"]] == ["M7"] and "next_cursor" not in one
    small = crew[0].a2a_discover(agent_type="builder", limit=250)
    assert small["count"] == 250 and small["next_cursor"] == "250"


def test_a2a_discover_below_a_page_keeps_its_shape(simu: Simulation) -> None:
    _, sid = _session(simu)
    crew = _crew(simu, sid, 3)
    found = crew[0].a2a_discover()
    assert set(found) == {"success", "agents", "count"} and found["count"] == 3
    assert crew[0].a2a_discover(limit=3) == found
    page = crew[0].a2a_discover(limit=2)
    assert [a["name"] for a in page["agents"]] == ["M0", "M1"] and page["next_cursor"] == "2"
    rest = crew[0].a2a_discover(limit=2, cursor="2")
    assert [a["name"] for a in rest["agents"]] == ["M2"] and "next_cursor" not in rest
    assert crew[0].a2a_discover(cursor="50") == {"success": True, "agents": [], "count": 0}
    for args, field in (({"limit": 0}, "limit"), ({"limit": STATE_PAGE_MAX + 1}, "limit"),
                        ({"cursor": "abc"}, "cursor"), ({"cursor": "\uff11"}, "cursor")):
        refused = crew[0].a2a_discover(**args)
        assert refused["error"] == "invalid_argument" and refused["field"] == field, refused


def test_fit_prefix_cuts_where_the_items_one_by_one_would() -> None:
    """A list that fits whole is measured with one encoding; the cut is the same as the
    item-by-item count's, at every budget around the list's own length."""
    def one_by_one(items: list[Any], budget: int, used: int = 0) -> int:
        for i, item in enumerate(items):
            used += len(msgspec.json.encode(item)) + 1
            if used > budget:
                return i
        return len(items)

    items: list[Any] = [{"agent_id": f"a{i}", "region": [i, i * 2, 8, 8]} for i in range(12)]
    whole = len(msgspec.json.encode(items))
    for budget in range(whole - 40, whole + 3):
        for used in (0, 7):
            assert fit_prefix(items, budget, used) == one_by_one(items, budget, used), \
                (budget, used)
    assert fit_prefix(items, whole) == len(items) and fit_prefix([], 0) == 0
    assert fit_prefix(items, 10) == 0


def test_every_member_fits_a_discover_page_so_paging_passes_everyone(simu: Simulation) -> None:
    """A member's name and capabilities are bounded so its entry fits one reply: a
    member listing 62 KB of capabilities once stopped every later page (its cursor
    answered "does not fit one reply")."""
    _, sid = _session(simu)
    joiner = simu.client("j")
    before = joiner.session_get_state(session_id=sid)
    for args, field in (({"agent_name": "n" * (MAX_NAME + 1)}, "agent_name"),
                        ({"agent_name": "C", "capabilities": ["c" * (MAX_NAME + 1)]},
                         "capabilities[0]"),
                        ({"agent_name": "C", "capabilities": ["c"] * (MAX_CAPABILITIES + 1)},
                         "capabilities")):
        refused = joiner.session_join(session_id=sid, **args)
        assert refused["error"] == "invalid_argument" and refused["field"] == field, refused
    assert joiner.session_get_state(session_id=sid) == before  # refused: nothing changed
    crew = []
    for i in range(5):  # the largest entry a member can have, five times: past one reply
        client = simu.client(f"big{i}")
        joined = client.session_join(session_id=sid, agent_name=f"{i}" * MAX_NAME,
                                     capabilities=[f"{i}{n:03d}" * (MAX_NAME // 4)
                                                   for n in range(MAX_CAPABILITIES)])
        assert joined["success"], joined
        crew.append(client)
    names, cursor, pages = [], None, 0
    while True:
        page = crew[0].a2a_discover(**({"cursor": cursor} if cursor else {}))
        assert page["success"], page
        names += [a["name"] for a in page["agents"]]
        pages += 1
        cursor = page.get("next_cursor")
        if cursor is None:
            break
    assert names == [f"{i}" * MAX_NAME for i in range(5)] and pages >= 2


async def _idle(_agent: Any) -> None:
    return None


def test_a_participant_keeps_its_join_answer_without_the_first_look() -> None:
    """The crew's members keep what their join answered but the ``session_state`` page
    (kept, a crew of 10,000 held 2 million lists and dicts that every full collection
    walked); the answer on the wire, in the trace, still carries it."""
    from barnraise.actors.agents.participant import kept_of_join
    from barnraise.scenarios._kit import host_session, spawn

    with Simulation(seed=0) as simu:
        _, sid = host_session(simu, session_name="Lean", grid_size=64, max_agents=5)
        crew = [spawn(simu, sid, f"agent-{i + 1}", "builder", crew=5, behaviour=_idle)
                for i in range(5)]
        simu.run()
        for agent in crew:
            assert agent.joined["success"] and agent.joined["session_id"] == sid
            assert agent.joined["agent_id"] == agent.name and agent.joined["role"] == "builder"
            assert "session_state" not in agent.joined
        answers = [r.content_obj() for r in simu.dispatcher.trace.records()
                   if r.type == "coordination_response"
                   and "session_state" in r.content_obj().get("result", r.content_obj())]
        assert len(answers) == 5  # every join's answer carried its first look
    failed = {"success": False, "error": "session_full", "message": "full"}
    assert kept_of_join(failed) is failed
