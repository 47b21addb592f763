"""The tool table and its argument validation."""

from __future__ import annotations

import pytest

from sim.tools import TOOLS, ToolError, validate

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
