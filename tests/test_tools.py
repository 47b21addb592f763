"""The tool table and its argument validation."""

from __future__ import annotations

import pytest

from barnraise.sim.binding import BINDING_TOOLS, bound_session_after, prepare_call
from barnraise.sim.tools import TOOLS, ToolError
from barnraise.sim.validation import validate

PHASE_G = {"session_create", "session_join", "session_leave", "session_get_state",
           "region_claim", "region_release", "region_query", "task_delegate", "task_accept",
           "task_report", "task_get_queue", "build_checkpoint", "build_rollback"}


def test_the_table_has_every_tool_of_the_design() -> None:
    assert set(TOOLS) >= PHASE_G
    assert {"builder_place_tile", "builder_place_tiles", "builder_load_shader",
            "builder_assemble_cartridge", "blueprint_set", "build_test", "approval_respond",
            "a2a_send_message", "a2a_broadcast", "a2a_subscribe", "a2a_discover",
            "a2a_lock_acquire", "a2a_lock_release", "a2a_barrier_enter"} <= set(TOOLS)
    for tool in TOOLS.values():
        schema = tool.to_dict()["inputSchema"]
        assert schema["type"] == "object" and schema["additionalProperties"] is False


def test_defaults_are_filled_and_options_objects_appear() -> None:
    args = validate(TOOLS["session_create"], {"session_name": "S"})
    assert args["max_agents"] == 10 and args["grid_size"] == 1000
    assert args["coordination_mode"] == "coordinated"
    assert args["config"]["auto_assign_regions"] is False
    claim = validate(TOOLS["region_claim"], {
        "session_id": "s", "region": {"x": 1, "y": 2, "width": 3, "height": 4}})
    assert (claim["exclusive"], claim["timeout"], claim["purpose"]) == (True, 300, "")
    assert "region_overlaps" not in validate(TOOLS["a2a_discover"], {"session_id": "s"})


@pytest.mark.parametrize(
    ("tool", "args", "field"),
    [
        ("session_create", {}, "session_name"),
        ("session_create", {"session_name": ""}, "session_name"),
        ("session_create", {"session_name": "S", "grid_size": "big"}, "grid_size"),
        ("session_create", {"session_name": "S", "grid_size": True}, "grid_size"),
        ("session_create", {"session_name": "S", "max_agents": 0}, "max_agents"),
        ("session_create", {"session_name": "S", "coordination_mode": "chaos"},
         "coordination_mode"),
        ("session_create", {"session_name": "S", "config": {"privat": True}}, "config.privat"),
        ("session_create", {"session_name": "S", "colour": "red"}, "colour"),
        ("region_claim", {"session_id": "s"}, "region"),
        ("region_claim", {"session_id": "s", "region": {"x": 0, "y": 0, "width": 0,
                                                        "height": 1}}, "region.width"),
        ("region_claim", {"session_id": "s", "region": {"x": -1, "y": 0, "width": 1,
                                                        "height": 1}}, "region.x"),
        ("task_delegate", {"session_id": "s", "task_type": "dance"}, "task_type"),
        ("task_delegate", {"session_id": "s", "task_type": "build", "dependencies": [1]},
         "dependencies[0]"),
    ],
)
def test_invalid_arguments_name_the_field(tool: str, args: dict[str, object],
                                          field: str) -> None:
    with pytest.raises(ToolError) as info:
        validate(TOOLS[tool], args)
    assert info.value.code == "invalid_argument"
    assert info.value.extra["field"] == field
    assert str(info.value).startswith(field)


# -- session binding ---------------------------------------------------------------------


def test_prepare_call_fills_in_the_bound_session_only_where_it_belongs() -> None:
    args = {"region": {"x": 0, "y": 0, "width": 1, "height": 1}}
    prepared = prepare_call("region_claim", args, "session_1")
    assert isinstance(prepared, tuple)
    tool, sent = prepared
    assert tool is TOOLS["region_claim"]
    assert sent == {**args, "session_id": "session_1"} and "session_id" not in args  # a copy
    # an explicit session id wins; an unbound caller adds nothing
    assert prepare_call("region_claim", {"session_id": "other"}, "session_1")[1] == {
        "session_id": "other"}
    assert prepare_call("region_claim", args, None)[1] == args
    # session_create takes no session id, so a bound host creating another adds none
    assert prepare_call("session_create", {"session_name": "S"}, "session_1")[1] == {
        "session_name": "S"}


def test_prepare_call_answers_an_unknown_tool_listing_the_known_ones() -> None:
    failed = prepare_call("region_clam", {}, "session_1")
    assert isinstance(failed, dict)
    assert failed["success"] is False and failed["error"] == "unknown_tool"
    assert failed["message"].startswith("no tool 'region_clam'; known tools: ")
    assert all(name in failed["message"] for name in TOOLS)


@pytest.mark.parametrize(
    ("tool", "result", "bound", "after"),
    [
        ("session_join", {"success": True, "session_id": "s2"}, None, "s2"),
        ("session_join", {"success": True, "session_id": "s2"}, "s1", "s2"),
        ("session_create", {"success": True, "session_id": "s2"}, None, "s2"),
        ("session_create", {"success": True, "session_id": "s2"}, "s1", "s1"),  # a host
        ("session_leave", {"success": True}, "s1", None),
        ("session_join", {"success": False, "error": "session_full"}, "s1", "s1"),
        ("session_leave", {"success": False, "error": "not_a_member"}, "s1", "s1"),
        ("region_claim", {"success": True, "session_id": "s9"}, "s1", "s1"),
    ],
)
def test_bound_session_after_follows_create_join_and_leave(
    tool: str, result: dict[str, object], bound: str | None, after: str | None,
) -> None:
    assert bound_session_after(tool, result, bound) == after


def test_only_the_binding_tools_can_change_a_binding() -> None:
    # Agent.call awaits every other tool without asking bound_session_after: so none
    # of them may change a binding, whatever it answers.
    answered = {"success": True, "session_id": "s2"}
    for name in TOOLS:
        moved = any(bound_session_after(name, answered, bound) != bound
                    for bound in (None, "s1"))
        assert moved == (name in BINDING_TOOLS), name


def test_a_client_binds_and_answers_unknown_tools_by_the_shared_rule() -> None:
    from barnraise.actors.world import Simulation

    with Simulation(seed=1) as simu:
        host = simu.client()
        assert host.call("no_such_tool") == prepare_call("no_such_tool", {}, None)
        created = host.call("session_create", session_name="S", grid_size=8)
        assert host.session_id == created["session_id"]  # bound to what it created
        other = host.call("session_create", session_name="T", grid_size=8)
        assert host.session_id == created["session_id"]  # still there
        joined = host.call("session_join", session_id=other["session_id"], agent_name="H")
        assert joined["success"] and host.session_id == other["session_id"]
        assert host.call("region_query", region={"x": 0, "y": 0, "width": 2, "height": 2})[
            "success"]  # the session id came from the binding
        assert host.call("session_leave")["success"] and host.session_id is None
