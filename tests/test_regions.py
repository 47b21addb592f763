"""The regions service through clients: claims, writes, blueprint, tests, checkpoints."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import msgspec
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from barnraise.actors.region_args import tile_bytes as _tile_bytes
from barnraise.actors.region_args import tile_rows as _tile_rows
from barnraise.actors.regions import SEQUENTIAL_IDLE, RegionManager
from barnraise.actors.world import Client, Simulation
from barnraise.sim.canvas import Tile
from barnraise.sim.geometry import Rect
from barnraise.sim.messages import Message
from barnraise.sim.tools import ToolError
from tests.helpers import Crew, box, session_crew


@pytest.fixture
def simu() -> Iterator[Simulation]:
    with Simulation(seed=7) as s:
        yield s


def crew(simu: Simulation, grid: int = 100, mode: str = "coordinated",
         **options: Any) -> Crew:
    """An architect, builders A and B, a tester and an observer in one session."""
    return session_crew(simu, grid, mode, **options)


def regions(simu: Simulation) -> RegionManager:
    actor = simu.dispatcher.actor("regions")
    assert isinstance(actor, RegionManager)
    return actor


def events(client: Client, kind: str | None = None) -> list[dict[str, Any]]:
    got: list[Message] = client.messages()
    out = [dict(m.content) for m in got if "event" in m.content]
    return [e for e in out if kind is None or e["event"] == kind]


def failed(result: dict[str, Any], code: str) -> dict[str, Any]:
    assert result["success"] is False and result["error"] == code, result
    assert result["message"]
    return result


# -- region_claim ------------------------------------------------------------------------------


def test_a_claim_answers_with_its_lease_and_is_announced(simu: Simulation) -> None:
    c = crew(simu)
    assert c.observer.a2a_subscribe()["success"]
    simu.advance(5)
    claim = c.a.region_claim(region=box(0, 0, 10), purpose="kernel", timeout=60)
    assert claim["success"] and claim["claim_id"].startswith("claim_")
    assert claim["region"] == box(0, 0, 10) and claim["exclusive"] is True
    assert claim["expires_at"] == 65.0 and claim["conflicts"] == []
    forever = c.a.region_claim(region=box(20, 0, 5), exclusive=False, timeout=0)
    assert forever["success"] and forever["expires_at"] is None and not forever["exclusive"]
    claimed = events(c.observer, "region_claimed")
    assert [e["claim_id"] for e in claimed] == [claim["claim_id"], forever["claim_id"]]
    assert claimed[0]["agent_id"] == c.a.agent_id and claimed[0]["region"] == box(0, 0, 10)


def test_claim_arguments_are_validated_naming_the_field(simu: Simulation) -> None:
    c = crew(simu)
    bad = failed(c.a.region_claim(region=box(0, 0, 0)), "invalid_argument")
    assert bad["field"] == "region.width"
    assert failed(c.a.region_claim(region=box(0, 0, 5), exclusive="yes"),
                  "invalid_argument")["field"] == "exclusive"
    assert failed(c.a.region_claim(region=box(0, 0, 5), timeout=-1),
                  "invalid_argument")["field"] == "timeout"
    outside = failed(c.a.region_claim(region=box(95, 0, 10)), "out_of_bounds")
    assert outside["field"] == "region" and outside["grid_size"] == 100


def test_a_conflict_names_the_agents_and_suggests_a_free_region_that_then_succeeds(
    simu: Simulation,
) -> None:
    c = crew(simu)
    c.observer.a2a_subscribe(event_type="conflict_detected")
    assert c.a.region_claim(region=box(0, 0, 40))["success"]
    refused = failed(c.b.region_claim(region=box(20, 20, 40)), "region_conflict")
    assert refused["conflicting_agents"] == [{
        "agent_id": c.a.agent_id, "agent_name": "A", "overlapping_region": box(20, 20, 20)}]
    suggested = refused["suggestion_region"]
    assert suggested is not None and (suggested["width"], suggested["height"]) == (40, 40)
    assert f"({suggested['x']}, {suggested['y']})" in refused["suggestion"]
    assert c.b.region_query(region=suggested)["is_free"]
    # the nearest free placement: (20, 40) and (40, 20) are both 20 away; ties go to smaller y
    assert suggested == box(40, 20, 40)
    (event,) = events(c.observer)
    assert event["agent_id"] == c.b.agent_id and event["agents"] == [c.a.agent_id]
    assert event["overlapping_region"] == box(20, 20, 20)
    granted = c.b.region_claim(region=suggested)
    assert granted["success"] and granted["region"] == suggested
    state = c.arch.session_get_state(include=["regions"])["state"]
    assert len(state["regions"]) == 2
    assert regions(simu).worlds[c.sid].conflicts == 1


def test_conflict_rules_exclusive_shared_and_own(simu: Simulation) -> None:
    c = crew(simu)
    assert c.a.region_claim(region=box(0, 0, 10), exclusive=False)["success"]
    # shared over another agent's shared: fine
    assert c.b.region_claim(region=box(5, 5, 10), exclusive=False)["success"]
    # exclusive over another agent's shared: refused
    failed(c.b.region_claim(region=box(0, 0, 4)), "region_conflict")
    # an agent's own claims never conflict, whatever their kinds
    assert c.a.region_claim(region=box(0, 0, 4))["success"]
    assert c.a.region_claim(region=box(1, 1, 3))["success"]
    # shared over another agent's exclusive: refused
    failed(c.b.region_claim(region=box(1, 1, 2), exclusive=False), "region_conflict")
    assert c.arch.region_claim(region=box(50, 50, 10), exclusive=False)["success"]
    several = failed(c.b.region_claim(region=box(0, 0, 60)), "region_conflict")
    by_agent = {e["agent_id"]: e["overlapping_region"] for e in several["conflicting_agents"]}
    # one entry per agent: the bounding box of its overlaps with the request
    assert by_agent == {c.a.agent_id: box(0, 0, 10), c.arch.agent_id: box(50, 50, 10)}


def test_no_free_placement_gives_no_suggestion_region(simu: Simulation) -> None:
    c = crew(simu, grid=20)
    assert c.a.region_claim(region=box(0, 0, 20))["success"]
    refused = failed(c.b.region_claim(region=box(0, 0, 5)), "region_conflict")
    assert refused["suggestion_region"] is None and "No free" in refused["suggestion"]


# -- leases, release, transfer ----------------------------------------------------------------


def test_a_members_lease_is_renewed_each_term_as_simulated_time_passes(
        simu: Simulation) -> None:
    c = crew(simu)
    c.observer.a2a_subscribe(event_type="region_renewed")
    claim = c.a.region_claim(region=box(0, 0, 10), timeout=30)
    keep = c.a.region_claim(region=box(50, 0, 10), timeout=0)
    # a lease alone never keeps a run going: running to quiescence does not renew it
    simu.run()
    assert simu.now == 0.0 and claim["claim_id"] in regions(simu).worlds[c.sid].claims
    simu.advance(29.5)
    assert events(c.observer) == []
    simu.advance(1)
    (event,) = events(c.observer)
    assert event["claim_id"] == claim["claim_id"] and event["agent_id"] == c.a.agent_id
    assert (event["expires_at"], event["lease"]) == (60.0, 30.0)
    assert c.b.region_claim(region=box(0, 0, 10))["error"] == "region_conflict"
    simu.advance(1_000)
    assert sorted(regions(simu).worlds[c.sid].by_agent[c.a.agent_id]) == sorted(
        [claim["claim_id"], keep["claim_id"]])
    assert regions(simu).worlds[c.sid].claims[keep["claim_id"]].expires_at is None
    # once it leaves, its claims go with it (a gone holder keeps nothing)
    assert c.a.session_leave()["success"]
    assert c.b.region_claim(region=box(0, 0, 10))["success"]


def test_release_frees_the_region_and_cancels_the_lease(simu: Simulation) -> None:
    c = crew(simu)
    c.observer.a2a_subscribe(event_type="region_released")
    claim = c.a.region_claim(region=box(0, 0, 10), timeout=30)
    timer = regions(simu).worlds[c.sid].claims[claim["claim_id"]].timer
    assert timer is not None
    released = c.a.region_release(claim_id=claim["claim_id"])
    assert released == {"success": True, "claim_id": claim["claim_id"], "released": True,
                         "transferred_to": None}
    assert timer.cancelled
    (event,) = events(c.observer)
    assert event["reason"] == "released" and event["claim_id"] == claim["claim_id"]
    assert c.b.region_query(region=box(0, 0, 10))["is_free"]
    failed(c.a.region_release(claim_id=claim["claim_id"]), "claim_not_found")
    failed(c.a.region_release(claim_id="claim_nope"), "claim_not_found")
    simu.advance(60)
    assert events(c.observer) == []  # the cancelled lease never fired


def test_only_the_owner_or_an_architect_may_release(simu: Simulation) -> None:
    c = crew(simu)
    claim = c.a.region_claim(region=box(0, 0, 10))
    refused = failed(c.b.region_release(claim_id=claim["claim_id"]), "not_owner")
    assert refused["owner"] == c.a.agent_id
    assert c.arch.region_release(claim_id=claim["claim_id"])["released"]


def test_transfer_hands_the_claim_over(simu: Simulation) -> None:
    c = crew(simu)
    c.observer.a2a_subscribe()
    claim = c.a.region_claim(region=box(0, 0, 10), timeout=50)
    events(c.observer)
    failed(c.a.region_release(claim_id=claim["claim_id"], transfer_to="Nobody"),
           "invalid_argument")
    failed(c.a.region_release(claim_id=claim["claim_id"], transfer_to="A"), "invalid_argument")
    moved = c.a.region_release(claim_id=claim["claim_id"], transfer_to="B")  # by name
    assert moved["success"] and moved["transferred_to"] == c.b.agent_id
    assert [(e["event"], e.get("reason")) for e in events(c.observer)] == [
        ("region_released", "transferred"), ("region_claimed", None)]
    (view,) = c.b.region_query(region=box(0, 0, 10))["claims"]
    assert view["agent_id"] == c.b.agent_id and view["expires_at"] == 50.0  # same lease
    failed(c.a.region_release(claim_id=claim["claim_id"]), "not_owner")
    back = c.b.region_release(claim_id=claim["claim_id"], transfer_to=c.a.agent_id)  # by id
    assert back["transferred_to"] == c.a.agent_id


def test_a_transfer_that_would_overlap_another_agents_claim_is_refused(simu: Simulation) -> None:
    c = crew(simu)
    first = c.a.region_claim(region=box(0, 0, 10))
    assert c.a.region_claim(region=box(5, 5, 10))["success"]  # own claims may overlap
    refused = failed(c.a.region_release(claim_id=first["claim_id"], transfer_to="B"),
                     "region_conflict")
    assert refused["conflicting_agents"][0]["agent_id"] == c.a.agent_id
    assert regions(simu).worlds[c.sid].claims[first["claim_id"]].agent_id == c.a.agent_id


def test_leaving_releases_or_hands_over_every_claim(simu: Simulation) -> None:
    c = crew(simu)
    mine = [c.a.region_claim(region=box(10 * i, 0, 5))["claim_id"] for i in range(3)]
    left = c.a.session_leave(handoff_to="B")
    assert left["success"] and left["released_regions"] == mine
    assert left["transferred_to"] == c.b.agent_id
    world = regions(simu).worlds[c.sid]
    assert sorted(world.by_agent[c.b.agent_id]) == sorted(mine)
    gone = c.b.session_leave()
    assert gone["released_regions"] == mine and not world.claims


def test_query_lists_claims_and_splits_the_free_part_exactly(simu: Simulation) -> None:
    c = crew(simu)
    a1 = c.a.region_claim(region=box(2, 2, 6, 3), purpose="kernel")
    c.b.region_claim(region=box(10, 5, 4), exclusive=False, timeout=0)
    c.a.region_claim(region=box(40, 40, 5))  # outside the query
    area = box(0, 0, 20, 12)
    q = c.tester.region_query(region=area)
    assert q["success"] and q["is_free"] is False
    assert [v["agent_name"] for v in q["claims"]] == ["A", "B"]
    assert q["claims"][0] == {"claim_id": a1["claim_id"], "agent_id": c.a.agent_id,
                              "agent_name": "A", "bounds": box(2, 2, 6, 3),
                              "purpose": "kernel", "exclusive": True, "expires_at": 300.0}
    covered = np.zeros((12, 20), dtype=int)
    for r in q["free_subregions"]:
        covered[r["y"]:r["y"] + r["height"], r["x"]:r["x"] + r["width"]] += 1
    claimed = np.zeros((12, 20), dtype=bool)
    claimed[2:5, 2:8] = True
    claimed[5:9, 10:14] = True
    assert covered.max() == 1  # disjoint
    assert np.array_equal(covered == 1, ~claimed)  # exactly the free cells
    empty = c.tester.region_query(region=box(60, 0, 10))
    assert empty["is_free"] and empty["claims"] == [] and empty["free_subregions"] == [
        box(60, 0, 10)]
    failed(c.tester.region_query(region=box(95, 95, 10)), "out_of_bounds")


# -- writing ------------------------------------------------------------------------------------


def test_place_tile_and_tiles_write_the_canvas(simu: Simulation) -> None:
    c = crew(simu)
    c.a.region_claim(region=box(0, 0, 10))
    one = c.a.builder_place_tile(tile_type="system", x=3, y=4)
    assert one == {"success": True, "tiles_placed": 1, "lost_work": 0, "region": box(3, 4, 1)}
    fill = c.a.builder_place_tiles(region=box(0, 0, 2, 3), tiles="code")
    assert fill["tiles_placed"] == 6 and fill["region"] == box(0, 0, 2, 3)
    block = c.a.builder_place_tiles(region=box(5, 5, 3, 2),
                                    tiles=[["data", 4, "empty"], ["STORAGE", "7", 0]])
    assert block["tiles_placed"] == 4
    canvas = regions(simu).worlds[c.sid].canvas.tiles
    assert canvas[4, 3] == Tile.SYSTEM and (canvas[0:3, 0:2] == Tile.CODE).all()
    assert canvas[5:7, 5:8].tolist() == [[3, 4, 0], [7, 7, 0]]
    cleared = c.a.builder_place_tile(tile_type=0, x=3, y=4)
    assert cleared["tiles_placed"] == 0 and canvas[4, 3] == Tile.EMPTY
    progress = c.arch.session_get_state(include=["progress"])["state"]["progress"]
    assert progress["tiles_placed"] == 11


def test_bad_tiles_are_refused_naming_the_field(simu: Simulation) -> None:
    c = crew(simu)
    c.a.region_claim(region=box(0, 0, 10))
    assert failed(c.a.builder_place_tile(tile_type="lava", x=0, y=0),
                  "invalid_argument")["field"] == "tile_type"
    assert failed(c.a.builder_place_tile(tile_type=99, x=0, y=0),
                  "invalid_argument")["field"] == "tile_type"
    for tiles in ("lava", [["code", "code"]], [["code"], ["code", "code"]],
                  [["code", "lava"], ["code", "code"]], [[1.5, 1], [1, 1]], [[1, 1], "xy"]):
        bad = failed(c.a.builder_place_tiles(region=box(0, 0, 2), tiles=tiles),
                     "invalid_argument")
        # the schema names the cell when the cell is not a tile type at all
        assert bad["field"] == "tiles" or bad["field"].startswith("tiles["), tiles
    short = failed(c.a.builder_place_tiles(region=box(0, 0, 2), tiles=[["code"], ["code"]]),
                   "invalid_argument")
    assert "row 0" in short["message"]
    failed(c.a.builder_place_tile(tile_type="code", x=100, y=0), "out_of_bounds")
    failed(c.a.builder_place_tiles(region=box(99, 0, 2), tiles="code"), "out_of_bounds")
    assert not regions(simu).worlds[c.sid].canvas.tiles.any()  # nothing written


def test_coordinated_mode_refuses_writes_outside_the_writers_claims(simu: Simulation) -> None:
    c = crew(simu)
    c.a.region_claim(region=box(0, 0, 10))
    c.a.region_claim(region=box(10, 0, 10), exclusive=False)
    c.b.region_claim(region=box(30, 0, 10))
    refused = failed(c.a.builder_place_tile(tile_type="code", x=50, y=50), "write_refused")
    assert refused["region"] == box(50, 50, 1)
    across = c.a.builder_place_tiles(region=box(5, 0, 10, 2), tiles="code")  # two own claims
    assert across["success"] and across["tiles_placed"] == 20
    partly = failed(c.a.builder_place_tiles(region=box(15, 0, 10), tiles="code"),
                    "write_refused")
    assert partly["cells_outside"] == 50 and "15" in partly["message"]
    failed(c.a.builder_place_tile(tile_type="code", x=30, y=0), "write_refused")  # B's
    failed(c.a.builder_load_shader(region=box(40, 40, 5), shader_name="glow"), "write_refused")
    failed(c.a.builder_assemble_cartridge(region=box(40, 40, 5), name="c"), "write_refused")


def test_free_mode_writes_anywhere_and_counts_lost_work(simu: Simulation) -> None:
    c = crew(simu, mode="free")
    assert c.a.builder_place_tiles(region=box(0, 0, 10), tiles="code")["lost_work"] == 0
    again = c.a.builder_place_tiles(region=box(0, 0, 10), tiles="data")
    assert again["lost_work"] == 0  # overwriting one's own work is not lost work
    over = c.b.builder_place_tiles(region=box(5, 5, 10), tiles="system")
    assert over["success"] and over["lost_work"] == 25
    assert c.a.builder_place_tile(tile_type="code", x=6, y=6)["lost_work"] == 1
    state = regions(simu).op_state({"session_id": c.sid})
    assert state["lost_work"] == 26


def test_sequential_mode_lets_one_writer_at_a_time(simu: Simulation) -> None:
    c = crew(simu, mode="sequential")
    claim = c.a.region_claim(region=box(0, 0, 10))
    assert c.a.builder_place_tile(tile_type="code", x=50, y=50)["success"]  # no claim needed
    refused = failed(c.b.builder_place_tile(tile_type="code", x=80, y=80), "write_refused")
    assert refused["holder"] == c.a.agent_id and refused["holder_name"] == "A"
    assert "A holds the write token" in refused["message"]
    failed(c.b.builder_load_shader(region=box(80, 80, 2), shader_name="s"), "write_refused")
    simu.advance(SEQUENTIAL_IDLE - 1)
    assert c.a.builder_place_tile(tile_type="code", x=1, y=1)["success"]  # refreshes it
    simu.advance(SEQUENTIAL_IDLE - 1)
    failed(c.b.builder_place_tile(tile_type="code", x=80, y=80), "write_refused")
    c.a.region_release(claim_id=claim["claim_id"])  # A's claims are all gone: so is its token
    assert c.b.builder_place_tile(tile_type="code", x=80, y=80)["success"]
    failed(c.a.builder_place_tile(tile_type="code", x=1, y=1), "write_refused")
    simu.advance(SEQUENTIAL_IDLE)  # B idle for 30 s: the token is free again
    assert c.a.builder_place_tile(tile_type="code", x=1, y=1)["success"]
    c.a.session_leave()  # leaving drops it too
    assert c.b.builder_place_tile(tile_type="code", x=81, y=80)["success"]


# -- artifacts, blueprint, build_test ---------------------------------------------------------


def test_shaders_and_cartridges_are_recorded(simu: Simulation) -> None:
    c = crew(simu)
    c.a.region_claim(region=box(0, 0, 10))
    c.a.builder_place_tiles(region=box(0, 0, 3), tiles="cartridge")
    shader = c.a.builder_load_shader(region=box(0, 0, 5), shader_name="glow")
    assert shader["success"] and shader["shader_id"].startswith("shader_")
    assert shader["region"] == box(0, 0, 5)
    cart = c.a.builder_assemble_cartridge(region=box(0, 0, 10), name="boot")
    assert cart["success"] and cart["tiles"] == 9 and cart["region"] == box(0, 0, 10)
    made = regions(simu).artifacts.of(c.sid)
    assert made.shaders[shader["shader_id"]]["name"] == "glow"
    assert made.cartridges[cart["cartridge_id"]]["agent_id"] == c.a.agent_id
    progress = c.arch.session_get_state(include=["progress"])["state"]["progress"]
    assert (progress["shaders_loaded"], progress["cartridges_assembled"]) == (1, 1)
    assert failed(c.a.builder_load_shader(region=box(0, 0, 5), shader_name=""),
                  "invalid_argument")["field"] == "shader_name"


def small_blueprint() -> list[list[Any]]:
    plan: list[list[Any]] = [["empty"] * 10 for _ in range(10)]
    for x in range(4):
        plan[0][x] = "system"
        plan[1][x] = 2
    return plan


def test_blueprint_set_checks_the_shape(simu: Simulation) -> None:
    c = crew(simu, grid=10)
    done = c.arch.blueprint_set(blueprint=small_blueprint())
    assert done == {"success": True, "cells": 100, "nonempty": 8}
    assert "10 rows, got 9" in failed(c.arch.blueprint_set(blueprint=small_blueprint()[:9]),
                              "invalid_argument")["message"]
    ragged = small_blueprint()
    ragged[3] = ragged[3][:5]
    bad = failed(c.arch.blueprint_set(blueprint=ragged), "invalid_argument")
    assert bad["field"] == "blueprint" and "row 3" in bad["message"]
    wrong = small_blueprint()
    wrong[2][2] = "lava"
    assert failed(c.arch.blueprint_set(blueprint=wrong), "invalid_argument")["field"] == (
        "blueprint")
    failed(c.a.blueprint_set(blueprint=small_blueprint()), "permission_denied")
    bad_create = c.arch.session_create(session_name="X", grid_size=4, blueprint=[[1]])
    assert failed(bad_create, "invalid_argument")["field"] == "blueprint"
    good = simu.client().session_create(session_name="Y", grid_size=2,
                                        blueprint=[["code", 0], [0, "data"]])
    world = regions(simu).worlds[good["session_id"]]
    assert world.blueprint is not None and world.blueprint.tolist() == [[2, 0], [0, 3]]


def test_build_test_reports_defects_and_score(simu: Simulation) -> None:
    c = crew(simu, grid=10)
    failed(c.tester.build_test(region=box(0, 0, 10)), "no_blueprint")
    c.arch.blueprint_set(blueprint=small_blueprint())
    c.a.region_claim(region=box(0, 0, 10))
    c.a.builder_place_tiles(region=box(0, 0, 4, 1), tiles="system")  # row 0 right
    c.a.builder_place_tiles(region=box(0, 1, 2, 1), tiles="code")  # half of row 1
    c.a.builder_place_tile(tile_type="data", x=9, y=9)  # an extra tile
    result = c.tester.build_test(region=box(0, 0, 10))
    assert result["success"] and result["passed"] is False
    assert (result["matching"], result["total"], result["defect_count"]) == (6, 8, 3)
    assert result["score"] == 7.5
    assert result["defects"] == [
        {"x": 2, "y": 1, "expected": "code", "actual": "empty"},
        {"x": 3, "y": 1, "expected": "code", "actual": "empty"},
        {"x": 9, "y": 9, "expected": "empty", "actual": "data"}]
    capped = c.tester.build_test(region=box(0, 0, 10), max_defects=1)
    assert len(capped["defects"]) == 1 and capped["defect_count"] == 3
    good = c.tester.build_test(region=box(0, 0, 4, 1))
    assert good["passed"] and good["score"] == 10.0 and good["defects"] == []
    progress = c.arch.session_get_state(include=["progress"])["state"]["progress"]
    assert progress["completion_percent"] == 75.0
    failed(c.tester.build_test(region=box(5, 5, 10)), "out_of_bounds")


def test_roles_are_enforced(simu: Simulation) -> None:
    c = crew(simu)
    failed(c.tester.region_claim(region=box(0, 0, 5)), "permission_denied")
    failed(c.observer.builder_place_tile(tile_type="code", x=0, y=0), "permission_denied")
    failed(c.observer.builder_place_tiles(region=box(0, 0, 2), tiles="code"),
           "permission_denied")
    failed(c.a.build_test(region=box(0, 0, 5)), "permission_denied")
    assert c.observer.region_query(region=box(0, 0, 5))["success"]
    outsider = simu.client()
    failed(outsider.region_claim(session_id=c.sid, region=box(0, 0, 5)), "not_a_member")


# -- checkpoints and the other services' operations --------------------------------------------


def test_checkpoint_modify_rollback_restores_the_canvas_and_artifacts(
    simu: Simulation,
) -> None:
    c = crew(simu)
    c.a.region_claim(region=box(0, 0, 20))
    c.a.builder_place_tiles(region=box(0, 0, 10), tiles="code")  # 100 tiles
    c.a.builder_load_shader(region=box(0, 0, 5), shader_name="base")
    world = regions(simu).worlds[c.sid]
    before = world.canvas.snapshot()
    checkpoint = c.arch.build_checkpoint(checkpoint_name="pre")
    assert checkpoint["success"] and checkpoint["contents"] == {
        "tiles": 100, "shaders": 1, "cartridges": 0}
    c.a.builder_place_tiles(region=box(10, 0, 5, 6), tiles="data")  # 30 new cells
    c.a.builder_place_tiles(region=box(0, 0, 2, 1), tiles="system")  # 2 changed cells
    c.a.builder_load_shader(region=box(0, 0, 5), shader_name="glow")
    c.a.builder_assemble_cartridge(region=box(0, 0, 10), name="boot")
    claim_count = len(world.claims)
    rolled = c.arch.build_rollback(checkpoint_id=checkpoint["checkpoint_id"])
    assert rolled["success"]
    assert rolled["restored"] == {"tiles": 100, "shaders": 1, "cartridges": 0}
    assert rolled["lost"] == {"tiles": 32, "shaders": 1, "cartridges": 1}
    assert world.canvas.diff(before) == 0
    assert np.array_equal(world.canvas.writer, before.writer)
    assert len(world.claims) == claim_count  # claims are leases: not rolled back
    progress = c.arch.session_get_state(include=["progress"])["state"]["progress"]
    assert progress == {"tiles_placed": 100, "shaders_loaded": 1, "cartridges_assembled": 0,
                        "completion_percent": 0.0}
    failed(c.arch.build_rollback(checkpoint_id="ckpt_nope"), "checkpoint_not_found")
    with pytest.raises(ToolError, match="checkpoint"):
        regions(simu).handler("op_rollback")({"session_id": c.sid, "checkpoint_id": "ckpt_nope"})


def test_a_checkpoint_without_tiles_leaves_the_canvas_alone(simu: Simulation) -> None:
    c = crew(simu, mode="free")
    c.a.builder_place_tiles(region=box(0, 0, 10), tiles="code")
    saved = c.arch.build_checkpoint(include=["shaders"])
    assert saved["contents"] == {"tiles": 0, "shaders": 0, "cartridges": 0}
    c.a.builder_place_tiles(region=box(0, 0, 10), tiles="data")
    c.a.builder_load_shader(region=box(0, 0, 5), shader_name="glow")
    rolled = c.arch.build_rollback(checkpoint_id=saved["checkpoint_id"])
    assert rolled["lost"] == {"tiles": 0, "shaders": 1, "cartridges": 0}
    assert (regions(simu).worlds[c.sid].canvas.tiles[0:10, 0:10] == Tile.DATA).all()


def test_internal_operations_for_the_task_queue(simu: Simulation) -> None:
    c = crew(simu)
    manager = regions(simu)
    made = manager.op_claim_for({"session_id": c.sid, "agent_id": c.a.agent_id,
                                 "region": box(0, 0, 10), "purpose": "task_1"})
    assert made["success"] and made["exclusive"] and made["expires_at"] == 300.0
    with pytest.raises(ToolError) as refused:
        manager.op_claim_for({"session_id": c.sid, "agent_id": c.b.agent_id,
                              "region": box(5, 5, 10), "purpose": "task_2"})
    assert refused.value.code == "region_conflict"
    with pytest.raises(ToolError) as bad:
        manager.op_claim_for({"session_id": c.sid, "agent_id": c.b.agent_id,
                              "region": {"x": -1, "y": 0, "width": 1, "height": 1}})
    assert bad.value.code == "invalid_argument"
    assert manager.op_claims_of({"session_id": c.sid, "region": box(0, 0, 50)})["agents"] == [
        c.a.agent_id]
    assert manager.op_release({"session_id": c.sid, "claim_id": made["claim_id"]})["released"]
    with pytest.raises(ToolError, match="no claim"):
        manager.op_release({"session_id": c.sid, "claim_id": made["claim_id"]})
    with pytest.raises(ToolError) as missing:
        manager.op_state({"session_id": "session_nope"})
    assert missing.value.code == "session_not_found"


def test_discover_by_region_asks_for_the_claim_holders(simu: Simulation) -> None:
    c = crew(simu)
    c.a.region_claim(region=box(0, 0, 10))
    c.b.region_claim(region=box(50, 50, 10))
    found = c.arch.a2a_discover(region_overlaps=box(5, 5, 10))
    assert [a["agent_id"] for a in found["agents"]] == [c.a.agent_id]


def test_builders_get_auto_assigned_regions_nearest_the_origin(simu: Simulation) -> None:
    arch = simu.client()
    sid = arch.session_create(session_name="Auto", grid_size=50,
                              config={"auto_assign_regions": True,
                                      "auto_region_size": 25})["session_id"]
    assigned = []
    for i in range(5):
        joined = simu.client().session_join(session_id=sid, agent_name=f"B{i}")
        assigned.append(joined["assigned_region"])
    assert [a["region"] for a in assigned[:4]] == [box(0, 0, 25), box(25, 0, 25),
                                                   box(0, 25, 25), box(25, 25, 25)]
    assert assigned[0]["purpose"] == "auto-assigned" and assigned[4] is None
    tiny = simu.client()
    sid2 = tiny.session_create(session_name="Tiny", grid_size=8,
                               config={"auto_assign_regions": True})["session_id"]
    joined = tiny.session_join(session_id=sid2, agent_name="Only")
    assert joined["assigned_region"]["region"] == box(0, 0, 8)  # capped at the grid


def test_a_closed_session_is_dropped_with_its_leases(simu: Simulation) -> None:
    c = crew(simu)
    claim = c.a.region_claim(region=box(0, 0, 10), timeout=30)
    manager = regions(simu)
    timer = manager.worlds[c.sid].claims[claim["claim_id"]].timer
    assert timer is not None
    manager.op_session_closed({"session_id": c.sid})
    assert c.sid not in manager.worlds and c.sid not in manager.sessions
    assert timer.cancelled
    failed(c.a.region_query(region=box(0, 0, 5)), "session_not_found")


def test_a_closed_session_leaves_nothing_in_the_manager_s_rooms(simu: Simulation) -> None:
    c = crew(simu)
    c.a.region_claim(region=box(0, 0, 10))
    assert c.a.builder_load_shader(region=box(0, 0, 5), shader_name="glow")["success"]
    assert c.arch.build_checkpoint(include=["tiles", "shaders"])["success"]
    manager = regions(simu)
    assert len(manager.checkpoints.kept(c.sid)) == 1
    assert len(manager.artifacts.of(c.sid).shaders) == 1
    assert manager.handler("tool_builder_load_shader").__self__ is manager.artifacts
    assert manager.handler("op_checkpoint").__self__ is manager.checkpoints
    manager.handler("op_session_closed")({"session_id": c.sid})
    assert manager.checkpoints.kept(c.sid) == {}
    with pytest.raises(KeyError):
        manager.artifacts.of(c.sid)
    failed(c.a.builder_load_shader(region=box(0, 0, 5), shader_name="glow"),
           "session_not_found")


def test_an_answer_too_large_to_send_becomes_a_failure(simu: Simulation) -> None:
    c = crew(simu, grid=200)
    for i in range(400):
        c.a.region_claim(region=box(i % 20 * 10, i // 20 * 10, 5), timeout=0)
    too_big = failed(c.a.region_query(region=box(0, 0, 200)), "invalid_argument")
    assert "too large" in too_big["message"]


# -- realtime ------------------------------------------------------------------------------------


def test_claim_conflict_and_release_in_realtime() -> None:
    with Simulation(seed=1, mode="realtime", time_scale=50.0) as simu:
        c = crew(simu)
        claim = c.a.region_claim(region=box(0, 0, 30))
        assert claim["success"]
        refused = failed(c.b.region_claim(region=box(10, 10, 30)), "region_conflict")
        assert refused["conflicting_agents"][0]["agent_id"] == c.a.agent_id
        assert c.b.region_claim(region=refused["suggestion_region"])["success"]
        assert c.a.region_release(claim_id=claim["claim_id"])["released"]
        assert c.b.region_claim(region=box(0, 0, 10))["success"]


# -- property: exclusive claims of different agents never overlap ---------------------------------

_GRID = 12
_step = st.one_of(
    st.tuples(st.just("claim"), st.integers(0, 2), st.integers(0, _GRID - 1),
              st.integers(0, _GRID - 1), st.integers(1, 6), st.integers(1, 6), st.booleans(),
              st.sampled_from([0, 5, 20])),
    st.tuples(st.just("release"), st.integers(0, 2), st.integers(0, 30),
              st.sampled_from([None, 0, 1, 2])),
    st.tuples(st.just("advance"), st.sampled_from([1.0, 5.0, 12.0])),
)


def _check_invariants(manager: RegionManager, sid: str) -> None:
    world = manager.worlds[sid]
    claims = list(world.claims.values())
    for i, one in enumerate(claims):
        for other in claims[i + 1:]:
            if one.agent_id != other.agent_id and one.rect.overlaps(other.rect):
                assert not (one.exclusive or other.exclusive), (one, other)
    occupied = np.zeros((_GRID, _GRID), dtype=bool)
    exclusive = np.zeros((_GRID, _GRID), dtype=bool)
    for claim in claims:
        occupied[claim.rect.slices()] = True
        if claim.exclusive:
            exclusive[claim.rect.slices()] = True
    # the incrementally kept masks equal masks painted from scratch
    assert np.array_equal(world.index.occupied, occupied)
    assert np.array_equal(world.index.exclusive, exclusive)
    assert sum(len(mine) for mine in world.by_agent.values()) == len(claims)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_step, min_size=1, max_size=25))
def test_exclusive_claims_of_different_agents_never_overlap(steps: list[tuple[Any, ...]],
                                                            ) -> None:
    with Simulation(seed=3) as simu:
        owner = simu.client()
        sid = owner.session_create(session_name="P", grid_size=_GRID)["session_id"]
        agents = [simu.client() for _ in range(3)]
        for i, agent in enumerate(agents):
            assert agent.session_join(session_id=sid, agent_name=f"P{i}")["success"]
        manager = regions(simu)
        issued: list[str] = []
        for step in steps:
            if step[0] == "claim":
                _, who, x, y, w, h, exclusive, timeout = step
                rect = Rect(x, y, min(w, _GRID - x), min(h, _GRID - y))
                result = agents[who].region_claim(region=rect.to_dict(), exclusive=exclusive,
                                                  timeout=timeout)
                if result["success"]:
                    issued.append(result["claim_id"])
                else:
                    assert result["error"] == "region_conflict"
                    spot = result["suggestion_region"]
                    if spot is not None:  # free of whatever could refuse it
                        there = agents[who].region_query(region=spot)["claims"]
                        assert not any(v["exclusive"] or exclusive for v in there)
            elif step[0] == "release" and issued:
                _, who, pick, to = step
                target = None if to is None or to == who else agents[to].agent_id
                result = agents[who].region_release(claim_id=issued[pick % len(issued)],
                                                    transfer_to=target)
                assert result["success"] or result["error"] in (
                    "claim_not_found", "not_owner", "region_conflict")
            elif step[0] == "advance":
                simu.advance(step[1])
            _check_invariants(manager, sid)


@pytest.mark.parametrize(("rows", "fault"), [
    ([[8, 1]], "unknown tile 8"), ([[-1, 1]], "unknown tile -1"),
    ([[256, 1]], "unknown tile 256"), ([["x", 1]], "unknown tile 'x'"),
    ([[2**70, 1]], "got object"), ([[True, True]], "got bool"), ([[1.0, 2]], "got float64"),
])
def test_tile_rows_packed_as_bytes_refuse_what_numpy_refused(rows: Any, fault: str) -> None:
    """Rows of valid int codes are packed by bytes(); whatever that refuses or lets
    through wrongly (a code past 7, rows all of bools) is named as before."""
    with pytest.raises(ToolError) as refused:
        _tile_bytes(rows, "tiles", (1, 2))
    assert refused.value.code == "invalid_argument" and fault in str(refused.value)


def test_tile_rows_of_codes_and_names_pack_row_major() -> None:
    assert _tile_bytes([[1, 2, 3], [0, 7, 4]], "tiles", (2, 3)) == bytes([1, 2, 3, 0, 7, 4])
    assert _tile_bytes([["code", 2], [np.int64(7), 0]], "tiles", (2, 2)) == bytes([2, 2, 7, 0])
    grid = _tile_rows([[1, 2], [3, 4]], "blueprint", (2, 2))
    assert grid.dtype == np.uint8 and grid.tolist() == [[1, 2], [3, 4]]


# -- results answered without a copy ---------------------------------------------------------


def _containers(value: Any) -> list[Any]:
    """Every dict and list in ``value``, itself included."""
    found: list[Any] = []
    todo = [value]
    while todo:
        item = todo.pop()
        if isinstance(item, dict):
            found.append(item)
            todo.extend(item.values())
        elif isinstance(item, list):
            found.append(item)
            todo.extend(item)
    return found


def _plain(value: Any) -> bool:
    """JSON data made of exactly dict, list, str, int, float, bool and None."""
    if type(value) is dict:
        return all(type(k) is str and _plain(v) for k, v in value.items())
    if type(value) is list:
        return all(_plain(v) for v in value)
    return value is None or type(value) in (str, int, float, bool)


def _watch_answers(monkeypatch: pytest.MonkeyPatch, faults: str | None = None,
                   ) -> tuple[list[tuple[str, dict[str, Any], Any]], list[Any]]:
    """Run a small kernel_build; every (tool, result, content sent) of a fresh answer, and
    every other content the run sent, published or kept (events, messages, task records,
    artifacts)."""
    from barnraise.actors.service import SessionService
    from barnraise.actors.taskqueue import TaskQueue
    from barnraise.runner import run
    from barnraise.sim.dispatch.core import Dispatcher
    from barnraise.sim.events import Event

    answered: list[tuple[str, dict[str, Any], Any]] = []
    elsewhere: list[Any] = []
    replying: list[Any] = []
    services: list[SessionService] = []
    real_answer, real_reply = SessionService._answer, SessionService.reply
    real_post, real_message, real_emit = Dispatcher.post, Dispatcher.message, Dispatcher.emit

    def answer(self: SessionService, request: Message, result: dict[str, Any],
               fresh: bool = False) -> None:
        if self not in services:
            services.append(self)
        replying.clear()
        real_answer(self, request, result, fresh)
        if fresh and replying:  # (a request without a correlation id gets no answer)
            what = request.content.get("tool") or request.content.get("op")
            answered.append((str(what), result, replying[0]))

    def reply(self: SessionService, request: Message, message_type: str,
              content: dict[str, Any] | None = None, **options: Any) -> Any:
        replying.append(content)
        return real_reply(self, request, message_type, content, **options)

    def post(self: Dispatcher, sender: str, to: str, message_type: str, content: Any,
             *rest: Any, **options: Any) -> Any:
        elsewhere.append(content)
        return real_post(self, sender, to, message_type, content, *rest, **options)

    def message(self: Dispatcher, sender: str, to: str, message_type: str,
                content: Any = None, **options: Any) -> Any:
        elsewhere.append(content)
        return real_message(self, sender, to, message_type, content, **options)

    def emit(self: Dispatcher, source: str, topic: str, event: Event, **options: Any) -> None:
        elsewhere.append(msgspec.structs.asdict(event))  # the very values the emitter gave
        real_emit(self, source, topic, event, **options)

    monkeypatch.setattr(SessionService, "_answer", answer)
    monkeypatch.setattr(SessionService, "reply", reply)
    monkeypatch.setattr(Dispatcher, "post", post)
    monkeypatch.setattr(Dispatcher, "message", message)
    monkeypatch.setattr(Dispatcher, "emit", emit)
    outcome = run("kernel_build", record=False, grid_size=60, block=15, error_rate=0.01,
                  faults=faults)
    assert outcome.success, outcome
    for service in services:  # what the services keep
        if isinstance(service, RegionManager):
            for sid in service.worlds:
                made = service.artifacts.of(sid)
                elsewhere += [made.shaders, made.cartridges]
        elif isinstance(service, TaskQueue):
            for state in service.by_session.values():  # (records are slotted dataclasses)
                elsewhere += [[getattr(r, f.name) for f in dataclasses.fields(r)]
                              for r in state.records.values()]
    return answered, elsewhere


def test_fresh_results_are_plain_data_that_nothing_else_holds(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The tools a service answers without a copy (fresh_results) give plain JSON data,
    sent as it is, none of whose dicts and lists is in any other message, event or the
    services' state: what the copy made sure of for every other answer."""
    answered, elsewhere = _watch_answers(monkeypatch)
    tools = {tool for tool, _, _ in answered}
    assert {"builder_place_tiles", "builder_place_tile", "build_test", "builder_load_shader",
            "builder_assemble_cartridge", "_claim_for", "task_delegate", "task_accept"} <= tools
    seen: dict[int, int] = {}
    for content in elsewhere:
        for item in _containers(content):
            seen[id(item)] = seen.get(id(item), 0) + 1
    for tool, result, sent in answered:
        assert sent is result, tool  # not copied
        assert _plain(result), (tool, result)
        for item in _containers(result):
            # once: in its own answer, which post saw (the objects are all kept alive)
            assert seen.get(id(item)) == 1, (tool, result, item)


def test_under_a_fault_plan_every_answer_is_a_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    """A service that keeps its answers (to answer a repeat the same) never hands the
    caller the one it keeps."""
    answered, _ = _watch_answers(monkeypatch, faults="duplicate=0.05")
    assert answered
    for tool, result, sent in answered:
        assert sent is not result and sent == result, tool


def test_a_caller_changing_a_fresh_answer_changes_nothing_in_the_service(
        simu: Simulation) -> None:
    c = crew(simu)
    assert c.observer.a2a_subscribe()["success"]
    claim = c.a.region_claim(region=box(0, 0, 10), timeout=0)
    claim["region"]["x"] = 50
    claim["conflicts"].append("mine")
    wrote = c.a.builder_place_tiles(region=box(0, 0, 2), tiles=[[1, 2], [3, 4]])
    wrote["region"]["width"] = 99
    assert c.a.region_query(region=box(0, 0, 10))["claims"][0]["bounds"] == box(0, 0, 10)
    claimed = events(c.observer, "region_claimed")
    assert claimed[0]["region"] == box(0, 0, 10)
    again = c.a.builder_place_tiles(region=box(0, 0, 2), tiles=[[1, 2], [3, 4]])
    assert again["region"] == box(0, 0, 2) and again["tiles_placed"] == 4
    state = c.arch.session_get_state(include=["events"])
    recent = [e for e in state["state"]["events"] if e["type"] == "region_claimed"]
    assert recent[0]["region"] == box(0, 0, 10)


def test_a_fresh_result_that_is_not_json_data_is_still_an_internal_error(
        simu: Simulation, monkeypatch: pytest.MonkeyPatch) -> None:
    """Not copied, it is refused by the encoding instead: the caller hears what the copy
    made of it (internal_error, counted), not that it was too large."""
    c = crew(simu)
    assert c.a.region_claim(region=box(0, 0, 10))["success"]
    monkeypatch.setattr(RegionManager, "_write",
                        lambda *_: {"success": True, "tiles_placed": np.int64(4)})
    errors = simu.dispatcher.behaviour_errors
    failed(c.a.builder_place_tiles(region=box(0, 0, 2), tiles=[[1, 2], [3, 4]]),
           "internal_error")
    assert simu.dispatcher.behaviour_errors == errors + 1


def test_a_new_policy_is_asked_again_by_the_service(simu: Simulation) -> None:
    """The service keeps the policy's answers per tool, role and agent; putting another
    Policy in place forgets them."""
    from barnraise.sim.policy import Policy

    c = crew(simu)
    assert c.a.region_claim(region=box(0, 0, 10))["success"]
    assert c.a.builder_place_tile(tile_type=1, x=0, y=0)["success"]
    manager = regions(simu)
    manager.policy = Policy.load([{"agent": c.a.agent_id, "tool": "builder_place_tile",
                                   "allow": False}])
    failed(c.a.builder_place_tile(tile_type=1, x=1, y=0), "permission_denied")
    assert c.b.region_claim(region=box(20, 20, 5))["success"]  # other rules as they were
    manager.policy = Policy()
    assert c.a.builder_place_tile(tile_type=1, x=1, y=0)["success"]


def test_claim_index_lookups_match_a_pass_over_every_claim() -> None:
    """The buckets keep each claim's bounds beside it: after adds and removes (claims
    across bucket edges, overlapping ones, whole-grid ones), ``overlapping`` is exactly
    the claims sharing a cell with the rectangle, oldest first, ``at`` holds every claim
    on the cell, and the masks are the claims' union."""
    from barnraise.actors.regions import ClaimIndex, _Claim

    rng = np.random.default_rng(4)
    index = ClaimIndex(100)
    live: dict[str, _Claim] = {}
    for serial in range(400):
        if live and rng.random() < 0.4:
            gone = live.pop(sorted(live)[int(rng.integers(len(live)))])
            index.remove(gone)
        else:
            x, y = (int(v) for v in rng.integers(0, 95, size=2))
            big = serial % 50 == 0  # now and then one across most of the grid
            w = int(rng.integers(1, 100 - x + 1)) if big else int(rng.integers(1, 41))
            h = int(rng.integers(1, 100 - y + 1)) if big else int(rng.integers(1, 41))
            w, h = min(w, 100 - x), min(h, 100 - y)
            claim = _Claim(f"c{serial}", serial, f"a{serial % 7}", Rect(x, y, w, h), "",
                           bool(rng.random() < 0.7), 0.0, None)
            live[claim.claim_id] = claim
            index.add(claim)
        x, y = (int(v) for v in rng.integers(0, 99, size=2))
        probe = Rect(x, y, int(rng.integers(1, 100 - x + 1)), int(rng.integers(1, 100 - y + 1)))
        expected = sorted((c for c in live.values() if c.rect.overlaps(probe)),
                          key=lambda c: c.serial)
        assert index.overlapping(probe) == expected
        covering = {c.claim_id for c in live.values() if c.rect.contains(Rect(x, y, 1, 1))}
        assert covering <= {c.claim_id for c in index.at(x, y)}
    occupied = np.zeros((100, 100), dtype=bool)
    exclusive = np.zeros((100, 100), dtype=bool)
    for c in live.values():
        occupied[c.rect.slices()] = True
        exclusive[c.rect.slices()] |= c.exclusive
    assert np.array_equal(index.occupied, occupied)
    assert np.array_equal(index.exclusive, exclusive)
