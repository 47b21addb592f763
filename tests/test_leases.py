"""Leases that live as long as their holder (issue 27, item 3).

A claim's ``timeout`` and a lock's ``lease`` are terms: when one runs out, a holder that
is still a member (with an actor in the run) gets another term; a holder that stopped
lost its claims and locks when it stopped being a member (the registry's offline limit,
a crash with no restart, the gateway's agent TTL: ``Simulation.expire``, which the hub
calls); a lease whose holder is gone some
other way (a resumed run's stopped agents) lapses at its term's end. All in
deterministic mode, on simulated time and the trace.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from barnraise.actors.base import Agent
from barnraise.actors.registry import Registry
from barnraise.actors.stored.resume import fold
from barnraise.actors.world import Simulation
from tests.helpers import Crew, box, session_crew
from tests.test_restore import restored


@pytest.fixture
def simu() -> Iterator[Simulation]:
    with Simulation(seed=7) as s:
        yield s


def _events(simu: Simulation, *kinds: str) -> list[tuple[float, str, dict[str, Any]]]:
    """(time, type, body) of every domain event of ``kinds`` in the trace, in order."""
    return [(r.t, r.type, r.content_obj()) for r in simu.dispatcher.trace.records("event")
            if r.type in kinds and r.recipient.endswith(":events")
            and r.recipient.startswith("session:")]


def _holder(simu: Simulation, sid: str, seen: dict[str, Any]) -> Agent:
    """A heartbeating agent (every 2 s) that joins ``sid``, claims with the default lease
    (300 s) and takes lock ``door`` with the default lease (60 s), then idles."""
    async def join_claim_lock(agent: Agent) -> None:
        await agent.call("session_join", session_id=sid, agent_name="H", role="builder")
        seen["claim"] = await agent.call("region_claim", region=box(0, 0, 8))
        seen["lock"] = await agent.call("a2a_lock_acquire", lock_id="door")

    return simu.dispatcher.spawn(Agent, "h", heartbeat_interval=2.0,
                                 behaviours=(join_claim_lock,))


def _crew(simu: Simulation) -> Crew:
    return session_crew(simu, 64)


def test_a_live_holder_keeps_its_claim_and_lock_for_many_default_leases(
        simu: Simulation) -> None:
    c = _crew(simu)
    seen: dict[str, Any] = {}
    _holder(simu, c.sid, seen)
    simu.advance(1000.0)
    claim, lock = seen["claim"], seen["lock"]
    assert claim["success"] and lock["granted"], seen
    t0 = lock["expires_at"] - 60.0
    assert claim["expires_at"] == pytest.approx(t0 + 300.0)
    # one renewal per term, none per heartbeat; nothing lapsed
    renewals = _events(simu, "region_renewed", "region_released")
    assert [(round(t - t0, 6), kind, e["expires_at"] - t) for t, kind, e in renewals] == [
        (300.0, "region_renewed", 300.0), (600.0, "region_renewed", 300.0),
        (900.0, "region_renewed", 300.0)]
    grants = _events(simu, "lock_granted", "lock_expired", "lock_released")
    assert [kind for _, kind, _ in grants] == ["lock_granted"] * 17
    assert [round(t - t0, 6) for t, _, _ in grants] == [60.0 * k for k in range(17)]
    # the other builder still cannot have the region nor the lock
    assert c.a.region_claim(region=box(0, 0, 8))["error"] == "region_conflict"
    assert c.a.a2a_lock_acquire(lock_id="door")["holder"] == "h"


@pytest.mark.parametrize("how", ["hang", "crash", "ttl"])
def test_a_holder_that_stops_loses_its_leases_when_it_stops_being_a_member(
        simu: Simulation, how: str) -> None:
    c = _crew(simu)
    seen: dict[str, Any] = {}
    holder = _holder(simu, c.sid, seen)
    simu.advance(100.0)
    assert seen["claim"]["success"] and seen["lock"]["granted"]
    stopped_at = simu.now
    if how == "hang":  # alive but silent: the registry's offline limit decides
        holder.pause_heartbeats()
    elif how == "crash":  # crashed, and no supervisor brings it back
        simu.dispatcher.crash("h", "gone")
    else:  # what the gateway's hub does to a remote agent past its agent TTL
        simu.expire("h", "ttl")
    simu.advance(50.0)
    released = _events(simu, "region_released", "lock_released", "lock_expired")
    assert [(kind, e.get("reason")) for _, kind, e in released] == [
        ("region_released", "left"), ("lock_released", "member_left")]
    ends = {t for t, _, _ in released}
    assert len(ends) == 1
    (end,) = ends
    if how == "hang":
        registry = simu.dispatcher.actor("registry")
        assert isinstance(registry, Registry)
        offline = [r.t for r in simu.dispatcher.trace.records("event")
                   if r.type == "agent_offline" and r.recipient == "registry:events"]
        assert len(offline) == 1
        limit = registry.missed_limit * 2.0
        last_beat = stopped_at - stopped_at % 2.0
        # marked offline at its first look past the limit, and the leases end right then
        assert last_beat + limit < offline[0] <= last_beat + limit + registry.check_interval
        assert offline[0] <= end < offline[0] + 0.1
    else:
        assert stopped_at <= end < stopped_at + 0.1
    # before the terms running then were out: no lease length had to guess
    last_grant = max(t for t, _, _ in _events(simu, "lock_granted"))
    assert end < last_grant + 60.0 and end < seen["claim"]["expires_at"]
    assert c.a.region_claim(region=box(0, 0, 8))["success"]
    assert c.a.a2a_lock_acquire(lock_id="door")["granted"]


# -- region_renew and a2a_lock_renew ----------------------------------------------------------

def test_the_holder_renews_a_claim_and_a_lock_for_a_new_term(simu: Simulation) -> None:
    c = _crew(simu)
    claim = c.a.region_claim(region=box(0, 0, 8), timeout=30)
    c.a.a2a_lock_acquire(lock_id="L", lease=20)
    simu.advance(10.0)
    same = c.a.region_renew(claim_id=claim["claim_id"])
    assert same == {"success": True, "claim_id": claim["claim_id"],
                    "expires_at": simu.now + 30, "timeout": 30.0}
    longer = c.a.region_renew(claim_id=claim["claim_id"], timeout=100)
    assert longer["expires_at"] == simu.now + 100 and longer["timeout"] == 100.0
    forever = c.a.region_claim(region=box(30, 0, 4), timeout=0)
    assert c.a.region_renew(claim_id=forever["claim_id"])["timeout"] == 300.0  # now a lease
    c.a.region_release(claim_id=forever["claim_id"])
    lock = c.a.a2a_lock_renew(lock_id="L")
    assert lock == {"success": True, "lock_id": "L", "holder": c.a.agent_id,
                    "expires_at": simu.now + 20, "lease": 20.0}
    assert c.a.a2a_lock_renew(lock_id="L", lease=0)["expires_at"] is None  # until released
    renewed = _events(simu, "region_renewed")
    assert [(e["claim_id"], e["expires_at"], e["lease"]) for _, _, e in renewed] == [
        (claim["claim_id"], simu.now + 30, 30.0), (claim["claim_id"], simu.now + 100, 100.0),
        (forever["claim_id"], simu.now + 300, 300.0)]
    # a term of 100 s now: the next renewal comes then, by that term
    simu.advance(100.5)
    assert [e["lease"] for _, _, e in _events(simu, "region_renewed")] == [
        30.0, 100.0, 300.0, 100.0]


def test_a_renewal_by_anyone_but_the_holder_is_refused_and_changes_nothing(
        simu: Simulation) -> None:
    c = _crew(simu)
    claim = c.a.region_claim(region=box(0, 0, 8), timeout=30)
    c.a.a2a_lock_acquire(lock_id="L", lease=20)
    simu.advance(5.0)
    before = len(list(simu.dispatcher.trace.records("event")))
    wrong = c.b.region_renew(claim_id=claim["claim_id"], timeout=500)
    assert wrong["success"] is False and wrong["error"] == "not_owner"
    assert wrong["owner"] == c.a.agent_id and "only its holder" in wrong["message"]
    gone = c.b.region_renew(claim_id="claim_nope")
    assert gone["error"] == "claim_not_found" and gone["field"] == "claim_id"
    zero = c.a.region_renew(claim_id=claim["claim_id"], timeout=0)
    assert zero["error"] == "invalid_argument" and zero["field"] == "timeout"
    lock = c.b.a2a_lock_renew(lock_id="L", lease=500)
    assert lock["error"] == "lock_not_held" and lock["holder"] == c.a.agent_id
    assert c.b.a2a_lock_renew(lock_id="free")["holder"] is None
    assert len(list(simu.dispatcher.trace.records("event"))) == before
    held = simu._regions.worlds[c.sid].claims[claim["claim_id"]]
    assert (held.agent_id, held.expires_at, held.lease) == (c.a.agent_id, 30.0 + held.claimed_at,
                                                            30.0)
    assert simu._coordination._state[c.sid].locks["L"].expires_at == claim["expires_at"] - 10


# -- stored runs: the same leases folded, and restored -------------------------------------------

def _leases(simu: Simulation, sid: str) -> dict[str, Any]:
    claims = simu._regions.worlds[sid].claims
    locks = simu._coordination._state[sid].locks
    return {"claims": {cid: (k.agent_id, k.expires_at, k.lease) for cid, k in claims.items()},
            "locks": {lid: (k.holder, k.expires_at, k.lease) for lid, k in locks.items()}}


def test_a_resume_restores_lease_ends_and_terms_and_a_gone_holders_lapse() -> None:
    with Simulation(seed=7) as simu:
        c = _crew(simu)
        claim = c.a.region_claim(region=box(0, 0, 8), timeout=30)
        c.b.region_claim(region=box(20, 0, 8), timeout=40)
        c.a.region_release(claim_id=claim["claim_id"], transfer_to="B")  # keeps its term
        c.a.a2a_lock_acquire(lock_id="L", lease=20)
        simu.advance(65.0)
        c.b.region_renew(claim_id=claim["claim_id"], timeout=50)
        simu.advance(1.0)
        live = _leases(simu, c.sid)
        records = list(simu.dispatcher.trace.records())
    assert sorted(v[2] for v in live["claims"].values()) == [40.0, 50.0]
    assert live["locks"]["L"][2] == 20.0
    image = fold(records)
    back, _ = restored(image, mode="deterministic")
    with back:
        assert _leases(back, c.sid) == live
        # the stopped run's members have no actor here: each lease lapses at its end
        ends = sorted(v[1] for v in [*live["claims"].values(), *live["locks"].values()])
        back.advance(ends[-1] - back.now + 0.5)
        lapsed = _events(back, "region_released", "lock_expired", "region_renewed",
                         "lock_granted")
        assert sorted((t, kind) for t, kind, _ in lapsed) == sorted(
            [(v[1], "region_released") for v in live["claims"].values()]
            + [(live["locks"]["L"][1], "lock_expired")])
        assert {e.get("reason") for _, kind, e in lapsed if kind == "region_released"} == {
            "expired"}


def test_a_stored_run_folds_renewals_and_lapses_as_the_world_had_them(tmp_path: Path) -> None:
    """The world read from the store (``world_at``) holds each claim with the lease end
    the live world had, after renewals by term and by ``region_renew``, and a hand-over."""
    from barnraise import open_run
    from barnraise.actors.stored.rebuild import world_at
    from tests.test_rebuild import _plain, _same

    path = tmp_path / "leases.db"
    with Simulation(seed=3, store=path) as simu:
        c = _crew(simu)
        kept = c.a.region_claim(region=box(0, 0, 8), timeout=30)
        handed = c.a.region_claim(region=box(20, 0, 8), timeout=25)
        c.a.a2a_lock_acquire(lock_id="L", lease=20)
        simu.advance(40.0)
        assert c.a.region_release(claim_id=handed["claim_id"], transfer_to="B")["success"]
        assert c.a.region_renew(claim_id=kept["claim_id"], timeout=45)["success"]
        simu.advance(30.0)
        world = simu.world_state()
        assert simu.store is not None
        simu.store.commit()
        folded = world_at(open_run(path))
        assert folded.notes == []
        _same(folded.state(), _plain(world))
    # kept: 30, renewed by term at 30, by region_renew (45) at 40; handed: 25, renewed at
    # 25, handed to B at 40 with its end, renewed for B (a live member) at 50
    ends = {cid: (holder, end) for cid, holder, _, end in world[c.sid]["claims"]}
    assert ends == {kept["claim_id"]: (c.a.agent_id, 85.0),
                    handed["claim_id"]: (c.b.agent_id, 75.0)}
