"""Locks and barriers through the client: the coordination service's contract."""

from __future__ import annotations

import threading
from typing import Any

from pytest import approx

from barnraise.actors.world import Client, Simulation


def session_of(simu: Simulation, *names: str, role: str = "builder") -> tuple[list[Client], str]:
    """A session with one client per name, all joined (the first creates it)."""
    clients = [simu.client() for _ in names]
    created = clients[0].call("session_create", session_name="S", grid_size=100)
    assert created["success"], created
    sid = created["session_id"]
    for client, name in zip(clients, names, strict=True):
        joined = client.call("session_join", session_id=sid, agent_name=name, role=role)
        assert joined["success"], joined
    return clients, sid


def events_of(simu: Simulation, sid: str, event_type: str) -> list[dict[str, Any]]:
    topic = f"session:{sid}:events"
    return [r.content_obj() for r in simu.dispatcher.trace.records("event")
            if r.recipient == topic and r.type == event_type]


# -- barriers -------------------------------------------------------------------------------

def test_a_barrier_releases_three_agents_together() -> None:
    with Simulation(seed=7) as simu:
        clients, sid = session_of(simu, "A", "B", "C")
        pending = [c.submit("a2a_barrier_enter", barrier_id="phase-1", expected_count=3)
                   for c in clients]
        results = [p.result() for p in pending]
        ids = [c.agent_id for c in clients]
        assert all(r["success"] and r["released"] for r in results), results
        assert all(r["arrived"] == ids for r in results)
        assert all(r["missing_count"] == 0 and "missing" not in r for r in results)
        assert {r["generation"] for r in results} == {1}
        released = events_of(simu, sid, "barrier_released")
        assert [e["arrived"] for e in released] == [ids]


def test_a_barrier_by_names_waits_for_exactly_those_agents() -> None:
    with Simulation(seed=7) as simu:
        (a, b, c), _ = session_of(simu, "A", "B", "C")
        first = a.submit("a2a_barrier_enter", barrier_id="b", expected_agents=["A", "C"])
        simu.advance(5)
        # B is a member but not expected; its own barrier call is refused.
        wrong = b.call("a2a_barrier_enter", barrier_id="b", expected_agents=["A", "C"])
        assert wrong["error"] == "invalid_argument" and wrong["field"] == "expected_agents"
        second = c.call("a2a_barrier_enter", barrier_id="b", expected_agents=[c.agent_id, "A"])
        answer = first.result()
        assert answer["released"] and second["released"]
        assert answer["arrived"] == second["arrived"] == [a.agent_id, c.agent_id]
        assert answer["missing"] == [] and answer["waited"] == approx(5.0)
        assert second["waited"] == approx(0.0)


def test_a_barrier_timeout_names_who_is_missing_and_the_others_keep_waiting() -> None:
    with Simulation(seed=7) as simu:
        (a, b, c), _ = session_of(simu, "A", "B", "C")
        everyone = ["A", "B", "C"]
        short = a.submit("a2a_barrier_enter", barrier_id="b", expected_agents=everyone,
                         timeout=10)
        long = b.submit("a2a_barrier_enter", barrier_id="b", expected_agents=everyone,
                        timeout=100)
        timed_out = short.result()
        assert timed_out["success"] and not timed_out["released"]
        assert timed_out["reason"] == "timeout" and timed_out["waited"] == approx(10.0)
        assert timed_out["arrived"] == [a.agent_id, b.agent_id]
        assert timed_out["missing"] == [c.agent_id] and timed_out["missing_count"] == 1
        # A left the barrier; B keeps waiting, and the barrier releases once A is back.
        later = c.submit("a2a_barrier_enter", barrier_id="b", expected_agents=everyone)
        back = a.call("a2a_barrier_enter", barrier_id="b", expected_agents=everyone)
        assert back["released"] and back["arrived"] == [b.agent_id, c.agent_id, a.agent_id]
        assert long.result()["released"] and later.result()["released"]


def test_a_barrier_can_be_used_again_after_it_releases() -> None:
    with Simulation(seed=7) as simu:
        (a, b), sid = session_of(simu, "A", "B")
        for generation in (1, 2):
            first = a.submit("a2a_barrier_enter", barrier_id="round", expected_count=2)
            second = b.submit("a2a_barrier_enter", barrier_id="round", expected_count=2)
            assert first.result()["released"] and second.result()["released"]
            assert first.result()["generation"] == generation
        # A new generation may expect something else.
        solo = a.call("a2a_barrier_enter", barrier_id="round", expected_count=1)
        assert solo["released"] and solo["generation"] == 3 and solo["arrived"] == [a.agent_id]
        assert len(events_of(simu, sid, "barrier_released")) == 3


def test_barrier_arguments_are_checked() -> None:
    with Simulation(seed=7) as simu:
        (a, b), _ = session_of(simu, "A", "B")
        neither = a.call("a2a_barrier_enter", barrier_id="b")
        assert neither["error"] == "invalid_argument" and neither["field"] == "expected_count"
        both = a.call("a2a_barrier_enter", barrier_id="b", expected_count=2,
                      expected_agents=["A", "B"])
        assert both["error"] == "invalid_argument" and both["field"] == "expected_agents"
        stranger = a.call("a2a_barrier_enter", barrier_id="b", expected_agents=["A", "Zed"])
        assert stranger["error"] == "invalid_argument" and "Zed" in stranger["message"]
        waiting = a.submit("a2a_barrier_enter", barrier_id="b", expected_count=3, timeout=50)
        twice = a.call("a2a_barrier_enter", barrier_id="b", expected_count=3)
        assert twice["error"] == "invalid_argument" and twice["field"] == "barrier_id"
        other = b.call("a2a_barrier_enter", barrier_id="b", expected_count=2)
        assert other["error"] == "invalid_argument" and other["expected_count"] == 3
        assert not waiting.result()["released"]
        # timeout 0 does not wait: answered at once unless it completes the barrier.
        probe = a.call("a2a_barrier_enter", barrier_id="p", expected_count=2, timeout=0)
        assert not probe["released"] and probe["waited"] == 0.0 and probe["missing_count"] == 1
        alone = b.call("a2a_barrier_enter", barrier_id="p", expected_count=2, timeout=0)
        assert not alone["released"] and alone["arrived"] == [b.agent_id]


# -- locks ----------------------------------------------------------------------------------

def test_a_free_lock_is_granted_and_a_held_one_refused_with_its_holder() -> None:
    with Simulation(seed=7) as simu:
        (a, b), sid = session_of(simu, "A", "B")
        got = a.call("a2a_lock_acquire", lock_id="L", lease=30)
        assert got["success"] and got["granted"] and got["holder"] == a.agent_id
        assert got["expires_at"] == simu.now + 30 and got["waited"] == approx(0.0)
        refused = b.call("a2a_lock_acquire", lock_id="L")
        assert refused["success"] and not refused["granted"]
        assert refused["holder"] == a.agent_id and refused["reason"] == "held"
        assert [e["holder"] for e in events_of(simu, sid, "lock_granted")] == [a.agent_id]


def test_a_waiter_gets_the_lock_when_the_holder_releases_it() -> None:
    with Simulation(seed=7) as simu:
        (a, b, c), _ = session_of(simu, "A", "B", "C")
        held = a.call("a2a_lock_acquire", lock_id="L", lease=0)
        assert held["granted"] and held["expires_at"] is None  # until released
        b_wait = b.submit("a2a_lock_acquire", lock_id="L", wait=100)
        c_wait = c.submit("a2a_lock_acquire", lock_id="L", wait=100)
        simu.advance(7)
        released = a.call("a2a_lock_release", lock_id="L")
        assert released == {"success": True, "released": True, "lock_id": "L",
                             "next_holder": b.agent_id}
        got = b_wait.result()
        assert got["granted"] and got["holder"] == b.agent_id and got["waited"] == approx(7.0)
        # FIFO: C is next once B lets go.
        assert b.call("a2a_lock_release", lock_id="L")["next_holder"] == c.agent_id
        assert c_wait.result()["granted"]


def test_a_wait_for_a_lock_times_out() -> None:
    with Simulation(seed=7) as simu:
        (a, b), _ = session_of(simu, "A", "B")
        a.call("a2a_lock_acquire", lock_id="L", lease=0)
        start = simu.now
        refused = b.call("a2a_lock_acquire", lock_id="L", wait=20)
        assert not refused["granted"] and refused["reason"] == "timeout"
        assert refused["waited"] == approx(20.0) and simu.now == approx(start + 20)
        assert a.call("a2a_lock_release", lock_id="L")["next_holder"] is None


def test_a_live_holders_lease_is_renewed_and_the_lock_passes_on_when_it_lets_go() -> None:
    with Simulation(seed=7) as simu:
        (a, b), sid = session_of(simu, "A", "B")
        a.call("a2a_lock_acquire", lock_id="L", lease=10)
        waiting = b.submit("a2a_lock_acquire", lock_id="L", wait=60, lease=5)
        simu.advance(35)
        assert waiting.poll() is None
        grants = events_of(simu, sid, "lock_granted")
        assert [(g["holder"], g["expires_at"]) for g in grants] == [
            (a.agent_id, 10.0), (a.agent_id, 20.0), (a.agent_id, 30.0), (a.agent_id, 40.0)]
        assert events_of(simu, sid, "lock_expired") == []
        assert a.call("a2a_lock_release", lock_id="L")["next_holder"] == b.agent_id
        got = waiting.result()
        assert got["granted"] and got["holder"] == b.agent_id and got["waited"] == approx(35.0)


def test_the_holder_renews_its_lease() -> None:
    with Simulation(seed=7) as simu:
        (a, b), _ = session_of(simu, "A", "B")
        a.call("a2a_lock_acquire", lock_id="L", lease=10)
        simu.advance(8)
        renewed = a.call("a2a_lock_acquire", lock_id="L", lease=10)
        assert renewed["granted"] and renewed["renewed"]
        assert renewed["expires_at"] == simu.now + 10
        simu.advance(5)  # past the first lease's end, inside the renewed one
        assert b.call("a2a_lock_acquire", lock_id="L")["holder"] == a.agent_id
        # A lease is upkeep, not work: it does not keep a run going to its end.
        simu.run()
        assert simu.now < renewed["expires_at"]


def test_only_the_holder_may_release() -> None:
    with Simulation(seed=7) as simu:
        (a, b), _ = session_of(simu, "A", "B")
        assert b.call("a2a_lock_release", lock_id="L")["error"] == "lock_not_held"
        a.call("a2a_lock_acquire", lock_id="L")
        wrong = b.call("a2a_lock_release", lock_id="L")
        assert wrong["error"] == "lock_not_held" and wrong["holder"] == a.agent_id


def test_an_observer_may_not_lock_or_wait() -> None:
    with Simulation(seed=7) as simu:
        (obs,), _ = session_of(simu, "Watcher", role="observer")
        for tool, args in (("a2a_lock_acquire", {"lock_id": "L"}),
                           ("a2a_lock_release", {"lock_id": "L"}),
                           ("a2a_barrier_enter", {"barrier_id": "b", "expected_count": 1})):
            assert obs.call_any(tool, args)["error"] == "permission_denied"


# -- membership -----------------------------------------------------------------------------

def test_leaving_passes_held_locks_on_and_ends_waits() -> None:
    with Simulation(seed=7) as simu:
        (a, b, c), sid = session_of(simu, "A", "B", "C")
        a.call("a2a_lock_acquire", lock_id="L", lease=0)
        b_lock = b.submit("a2a_lock_acquire", lock_id="L", wait=100)
        a_barrier = a.submit("a2a_barrier_enter", barrier_id="b",
                             expected_agents=["A", "B", "C"])
        c_barrier = c.submit("a2a_barrier_enter", barrier_id="b",
                             expected_agents=["A", "B", "C"])
        simu.advance(1)
        assert a.call("session_leave")["success"]
        got = b_lock.result()
        assert got["granted"] and got["holder"] == b.agent_id
        left = a_barrier.result()
        assert not left["released"] and left["reason"] == "member_left"
        released = events_of(simu, sid, "lock_released")
        assert released[-1]["reason"] == "member_left"
        # A is struck from the barrier's expected agents: B's arrival releases C.
        last = b.call("a2a_barrier_enter", barrier_id="b", expected_agents=["B", "C"])
        assert last["released"] and c_barrier.result()["arrived"] == [c.agent_id, b.agent_id]


def test_closing_a_session_answers_the_calls_still_waiting() -> None:
    with Simulation(seed=7) as simu:
        (a, b), sid = session_of(simu, "A", "B")
        a.call("a2a_lock_acquire", lock_id="L", lease=0)
        lock_wait = b.submit("a2a_lock_acquire", lock_id="L", wait=100)
        barrier_wait = a.submit("a2a_barrier_enter", barrier_id="b", expected_count=2)
        simu.advance(1)
        d = simu.dispatcher
        d.send(d.seal(d.message("coordinator", "coordination", "coordination_request",
                                {"op": "_session_closed", "session_id": sid})))
        for pending in (lock_wait, barrier_wait):
            assert pending.result()["error"] == "session_not_found"
        assert a.call("a2a_lock_release", lock_id="L")["error"] == "session_not_found"


# -- realtime ---------------------------------------------------------------------------------

def test_a_barrier_releases_three_agents_in_realtime() -> None:
    with Simulation(seed=1, mode="realtime", time_scale=50.0) as simu:
        clients, _ = session_of(simu, "A", "B", "C")
        results: dict[str, dict[str, Any]] = {}

        def enter(client: Client) -> None:
            results[client.agent_id] = client.call("a2a_barrier_enter", barrier_id="phase-1",
                                                   expected_count=3, timeout=60)

        threads = [threading.Thread(target=enter, args=(c,)) for c in clients]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=10)
        assert len(results) == 3
        answers = list(results.values())
        assert all(r["success"] and r["released"] for r in answers), answers
        assert sorted(answers[0]["arrived"]) == sorted(c.agent_id for c in clients)
        assert all(r["arrived"] == answers[0]["arrived"] for r in answers)
