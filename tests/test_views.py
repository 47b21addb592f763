"""The read API: Simulation.view() returns frozen values equal to what the tools report."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator
from typing import Any

import msgspec
import numpy as np
import pytest

from barnraise.actors.regions import RegionManager
from barnraise.actors.world import Simulation
from barnraise.sim.canvas import Tile
from barnraise.sim.geometry import Rect
from barnraise.sim.views import WorldView
from tests.conftest import REALTIME_OPTIONS
from tests.helpers import Crew, box, session_crew

GRID = 24


@pytest.fixture
def simu(mode: str) -> Iterator[Simulation]:
    options = REALTIME_OPTIONS if mode == "realtime" else {}
    with Simulation(seed=5, mode=mode, **options) as s:
        yield s


def built(simu: Simulation) -> tuple[Crew, dict[str, Any]]:
    """A session with members, claims, writes, a blueprint, artifacts, tasks, a checkpoint
    and a lock; what the calls answered, for comparing with the view."""
    plan = np.zeros((GRID, GRID), dtype=np.uint8)
    plan[:4, :8] = Tile.CODE
    plan[4:8, :8] = Tile.DATA
    crew = session_crew(simu, GRID, blueprint=plan.tolist())
    got: dict[str, Any] = {"plan": plan}
    got["claim_a"] = crew.a.region_claim(region=box(0, 0, 8, 4), purpose="top")
    got["claim_b"] = crew.b.region_claim(region=box(0, 4, 8, 4), exclusive=False, timeout=0)
    assert got["claim_a"]["success"] and got["claim_b"]["success"]
    wrote = [crew.a.builder_place_tiles(region=box(0, 0, 8, 4), tiles="code"),
             crew.b.builder_place_tiles(region=box(0, 4, 8, 2), tiles="data")]
    got["tiles_placed"] = sum(w["tiles_placed"] for w in wrote)
    got["shader"] = crew.a.builder_load_shader(region=box(0, 0, 8, 4), shader_name="s1")
    got["cartridge"] = crew.a.builder_assemble_cartridge(region=box(0, 0, 8, 4), name="c1")
    first = crew.arch.task_delegate(target_agent_id="A", task_type="build",
                                    region=box(0, 0, 8, 4), payload={"nested": {"n": [1]}})
    second = crew.arch.task_delegate(target_agent_id="any", task_type="test",
                                     dependencies=[first["task_id"]], priority="high")
    assert first["success"] and second["success"]
    got["tasks"] = (first["task_id"], second["task_id"])
    got["checkpoint"] = crew.arch.build_checkpoint(checkpoint_name="half")
    got["lock"] = crew.b.a2a_lock_acquire(lock_id="paint", lease=0)
    assert got["checkpoint"]["success"] and got["lock"]["granted"]
    simu.run()
    return crew, got


def test_the_view_equals_what_the_tools_report(simu: Simulation) -> None:
    crew, got = built(simu)
    view = simu.view(crew.sid, completion=True)
    assert isinstance(view, WorldView) and view.session_id == crew.sid

    state = crew.arch.session_get_state(include=["agents", "progress"])["state"]
    assert [(m.agent_id, m.name, m.role, m.color, list(m.capabilities), m.joined_at)
            for m in view.members] == [
        (a["agent_id"], a["name"], a["role"], a["color"], a["capabilities"], a["joined_at"])
        for a in state["agents"]]
    assert view.session.session_name == "S" and view.session.grid_size == GRID
    assert view.session.coordination_mode == "coordinated" and not view.session.private

    query = crew.arch.region_query(region=box(0, 0, GRID, GRID))
    assert [(c.claim_id, c.agent_id, c.region.to_dict(), c.purpose, c.exclusive, c.expires_at)
            for c in view.claims] == [
        (c["claim_id"], c["agent_id"], c["bounds"], c["purpose"], c["exclusive"],
         c["expires_at"]) for c in query["claims"]]
    assert [c.claim_id for c in view.claims] == [got["claim_a"]["claim_id"],
                                                 got["claim_b"]["claim_id"]]
    assert view.claims_of(crew.b.agent_id)[0].exclusive is False

    queue = crew.arch.task_get_queue(filter={"status": "all"})
    assert sorted(t.task_id for t in view.tasks) == sorted(t["task_id"] for t in queue["tasks"])
    for reported in queue["tasks"]:
        task = view.task(reported["task_id"])
        assert task is not None
        mine = msgspec.json.decode(msgspec.json.encode(task))  # Rect and tuples as JSON
        assert {k: mine[k] for k in reported} == reported
    first, second = (view.task(t) for t in got["tasks"])
    assert first is not None and second is not None
    assert first.dependents == (second.task_id,) and second.dependencies == (first.task_id,)
    assert first.region == Rect(0, 0, 8, 4) and not second.ready
    assert view.task_counts() == {"pending": 2}  # the second waits for the first

    expected = np.zeros((GRID, GRID), dtype=np.uint8)
    expected[:4, :8] = Tile.CODE
    expected[4:6, :8] = Tile.DATA
    assert view.canvas is not None and np.array_equal(view.canvas, expected)
    assert view.has_blueprint and view.blueprint is not None
    assert np.array_equal(view.blueprint, got["plan"])

    assert view.progress.tiles_placed == got["tiles_placed"] == state["progress"]["tiles_placed"]
    assert view.progress.completion_percent == state["progress"]["completion_percent"] == 75.0
    assert (view.progress.shaders_loaded, view.progress.cartridges_assembled) == (1, 1)
    assert view.shaders[0].artifact_id == got["shader"]["shader_id"]
    assert view.cartridges[0].artifact_id == got["cartridge"]["cartridge_id"]
    assert view.cartridges[0].tiles == got["cartridge"]["tiles"] == 32

    (checkpoint,) = view.checkpoints
    assert checkpoint.checkpoint_id == got["checkpoint"]["checkpoint_id"]
    assert checkpoint.name == "half" and checkpoint.contents == got["checkpoint"]["contents"]
    assert checkpoint.tiles_placed == got["tiles_placed"]
    tiles = checkpoint.tiles()
    assert tiles is not None and np.array_equal(tiles, expected)

    (lock,) = view.locks
    assert (lock.lock_id, lock.holder, lock.expires_at) == ("paint", crew.b.agent_id, None)
    assert view.barriers == ()


def test_the_view_is_frozen_and_a_snapshot(simu: Simulation) -> None:
    crew, _ = built(simu)
    view = simu.view(crew.sid)
    assert view.canvas is not None and view.blueprint is not None
    with pytest.raises(ValueError, match="read-only"):
        view.canvas[0, 0] = 1
    with pytest.raises(ValueError, match="read-only"):
        view.blueprint[0, 0] = 1
    with pytest.raises(AttributeError):
        view.claims[0].purpose = "mine now"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        view.progress = view.progress  # type: ignore[misc]
    # copies all the way down: changing what the view holds changes nothing in the world
    view.session.config["private"] = True
    task = view.tasks[0]
    task.payload["nested"]["n"].append(2)
    again = simu.view(crew.sid)
    assert again.session.config["private"] is False
    assert again.task(task.task_id).payload == {"nested": {"n": [1]}}  # type: ignore[union-attr]
    # and the world changing does not change a view taken before
    before = view.canvas.copy()
    assert crew.a.builder_place_tiles(region=box(0, 0, 2, 2), tiles="network")["success"]
    simu.run()
    assert np.array_equal(view.canvas, before)
    now = simu.view(crew.sid, canvas=True)
    assert now.canvas is not None and int(now.canvas[0, 0]) == Tile.NETWORK
    assert now.progress.tiles_placed == view.progress.tiles_placed + 4


def test_what_is_computed_only_when_asked(simu: Simulation) -> None:
    crew, _ = built(simu)
    light = simu.view(crew.sid, canvas=False)
    assert light.canvas is None and light.blueprint is None and light.has_blueprint
    assert light.progress.completion_percent is None
    assert simu.view(crew.sid, completion=True).progress.completion_percent == 75.0


def test_sessions_default_and_unknown_sessions(simu: Simulation) -> None:
    with pytest.raises(LookupError, match="no session"):
        simu.view()
    assert simu.sessions() == []
    one = session_crew(simu, 8, name="One")
    two = session_crew(simu, 8, name="Two")
    assert simu.sessions() == [one.sid, two.sid]
    assert simu.view().session_id == one.sid
    assert simu.view(two.sid).session.session_name == "Two"
    with pytest.raises(LookupError, match="session_nope"):
        simu.view("session_nope")


def test_a_barrier_waiter_shows(simu: Simulation) -> None:
    crew = session_crew(simu, 8)
    waiting = crew.a.submit("a2a_barrier_enter", barrier_id="meet", expected_count=2,
                            timeout=1000)
    simu.settle()
    (barrier,) = simu.view(crew.sid).barriers
    assert (barrier.barrier_id, barrier.generation, barrier.expected_count) == ("meet", 1, 2)
    assert barrier.arrived == (crew.a.agent_id,) and barrier.expected_agents is None
    assert crew.b.a2a_barrier_enter(barrier_id="meet", expected_count=2)["released"]
    assert waiting.result()["released"]
    assert simu.view(crew.sid).barriers == ()


def _spy(actor: RegionManager, seen: list[str],
         gate: threading.Event | None = None) -> None:
    """Wrap the actor's view_of to record the thread that runs it (and hold it at a gate)."""
    original: Callable[..., Any] = actor.view_of

    @functools.wraps(original)
    def view_of(*args: Any, **kwargs: Any) -> Any:
        seen.append(threading.current_thread().name)
        if gate is not None:
            gate.wait(10)
        return original(*args, **kwargs)

    actor.view_of = view_of  # type: ignore[method-assign]


def test_each_part_is_built_in_its_owners_context(simu: Simulation, mode: str) -> None:
    crew = session_crew(simu, 8)
    regions = simu.dispatcher.actor("regions")
    assert isinstance(regions, RegionManager)
    seen: list[str] = []
    _spy(regions, seen)
    simu.view(crew.sid)
    if mode == "deterministic":  # the dispatcher runs every handler on this thread
        assert seen == [threading.current_thread().name]
    else:  # pykka names an actor's thread after its class
        assert len(seen) == 1 and seen[0].startswith(f"{RegionManager.__name__}-")


def test_the_view_leaves_the_trace_alone(simu: Simulation) -> None:
    crew, _ = built(simu)
    records, digest = len(simu.dispatcher.trace), simu.dispatcher.trace_digest
    simu.view(crew.sid, completion=True)
    simu.sessions()
    assert (len(simu.dispatcher.trace), simu.dispatcher.trace_digest) == (records, digest)


def test_a_realtime_part_that_does_not_come_is_a_timeout() -> None:
    with Simulation(seed=5, mode="realtime", **REALTIME_OPTIONS) as simu:
        crew = session_crew(simu, 8)
        regions = simu.dispatcher.actor("regions")
        assert isinstance(regions, RegionManager)
        gate = threading.Event()
        _spy(regions, [], gate)
        try:
            with pytest.raises(TimeoutError, match="regions did not answer view_of"):
                simu.view(crew.sid, timeout=0.05)
        finally:
            gate.set()
        # released, it answers again
        _spy(regions, [])
        assert simu.view(crew.sid, timeout=10).session_id == crew.sid


def test_a_closed_simulation_can_still_be_viewed(simu: Simulation) -> None:
    # Once an actor's thread has ended nothing changes its state, so it is read directly.
    crew = session_crew(simu, 8)
    assert crew.a.region_claim(region=box(0, 0, 2, 2))["success"]
    simu.close()
    view = simu.view(crew.sid)
    assert simu.sessions() == [crew.sid]
    assert len(view.members) == 5 and [c.agent_id for c in view.claims] == [crew.a.agent_id]
