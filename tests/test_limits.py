"""Numbers have finite bounds and sessions have a cost limit: a bad number is refused
by name before anything happens, and nothing one call asks for is unbounded."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import pytest

from barnraise.actors.world import Simulation
from barnraise.sim.tools import MAX_WAIT, TOOLS, ToolError, WorldLimits
from barnraise.sim.validation import validate
from tests.helpers import box, session_crew


def _numeric_fields(schema: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    for key, sub in schema.get("properties", {}).items():
        where = f"{path}{key}"
        kinds = sub.get("type")
        kinds = kinds if isinstance(kinds, list) else [kinds]
        if "number" in kinds or ("integer" in kinds and "string" not in kinds):
            yield where, sub
        if "properties" in sub:
            yield from _numeric_fields(sub, where + ".")


NUMERIC = [(name, field, sub) for name, tool in TOOLS.items()
           for field, sub in _numeric_fields(tool.input_schema)]


def test_every_number_in_the_tool_table_has_finite_bounds() -> None:
    assert len(NUMERIC) > 15
    for name, field, sub in NUMERIC:
        assert math.isfinite(sub["minimum"]) and math.isfinite(sub["maximum"]), (name, field)


def _args_with(tool_name: str, field: str, value: Any) -> dict[str, Any]:
    """Valid arguments for ``tool_name`` (required ones filled), ``field`` set to ``value``."""
    samples: dict[str, Any] = {"session_id": "session_x", "region": box(0, 0, 2),
                               "session_name": "s", "agent_name": "a", "task_id": "t",
                               "claim_id": "c", "lock_id": "l", "barrier_id": "b",
                               "tile_type": "code", "x": 0, "y": 0, "tiles": "code",
                               "status": "completed", "to_agent": "a", "role": "builder",
                               "message_type": "status_update", "content": {},
                               "approved": True, "checkpoint_id": "k", "blueprint": [[1]],
                               "dependencies": [], "shader_name": "s", "cartridge_name": "c",
                               "task_type": "build", "test_type": "unit",
                               "name": "n", "source": "s", "components": []}
    schema = TOOLS[tool_name].input_schema
    args = {key: samples[key] for key in schema.get("required", ()) if key in samples}
    target, *rest = field.split(".")
    if rest:
        base = args.get(target, box(0, 0, 2) if target.startswith("region") else {})
        args[target] = {**base, rest[0]: value}
    else:
        args[target] = value
    return args


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, 10**400, -(10**400),
                                   1e300])
def test_nan_infinity_and_huge_numbers_are_refused_by_name(value: Any) -> None:
    for name, field, _ in NUMERIC:
        with pytest.raises(ToolError) as refused:
            validate(TOOLS[name], _args_with(name, field, value))
        assert refused.value.code == "invalid_argument", (name, field)
        assert refused.value.extra.get("field") == field, (name, field, refused.value)
        assert len(str(refused.value)) < 300  # a 400-digit number is not repeated


@pytest.fixture
def simu() -> Iterator[Simulation]:
    with Simulation(seed=3) as s:
        yield s


def test_bad_numbers_through_a_client_change_nothing(simu: Simulation) -> None:
    c = session_crew(simu)
    before = simu.sessions()
    for value in (math.nan, math.inf, 10**400):
        made = c.arch.call("session_create", session_name="x", max_agents=value)
        assert (made["error"], made["field"]) == ("invalid_argument", "max_agents")
        claim = c.a.region_claim(region=box(0, 0, 5), timeout=value)
        assert (claim["error"], claim["field"]) == ("invalid_argument", "timeout")
        task = c.arch.task_delegate(task_type="build", deadline=value)
        assert (task["error"], task["field"]) == ("invalid_argument", "deadline")
        lock = c.a.a2a_lock_acquire(lock_id="l", wait=value)
        assert (lock["error"], lock["field"]) == ("invalid_argument", "wait")
        barrier = c.a.a2a_barrier_enter(barrier_id="b", expected_count=2, timeout=value)
        assert (barrier["error"], barrier["field"]) == ("invalid_argument", "timeout")
    assert simu.sessions() == before  # no orphan session
    view = simu.view(c.sid, canvas=False)
    assert view.tasks == () and view.claims == ()
    assert simu.dispatcher.behaviour_errors == 0


def test_the_longest_wait_still_ends_a_deterministic_run(simu: Simulation) -> None:
    c = session_crew(simu)
    assert c.a.a2a_lock_acquire(lock_id="l", lease=MAX_WAIT * 10)["granted"]
    waiting = c.b.submit("a2a_lock_acquire", lock_id="l", wait=MAX_WAIT)
    simu.run()
    assert waiting.answered()
    answer = waiting.result(0)
    assert answer["granted"] is False, answer
    assert simu.now == pytest.approx(MAX_WAIT, abs=1.0)


def test_checkpoint_interval_too_short_is_refused_before_the_session_exists(
        simu: Simulation) -> None:
    host = simu.client()
    for interval in (1e-300, 1e-6, 0.5):
        made = host.call("session_create", session_name="busy",
                         config={"checkpoint_interval": interval})
        assert (made["error"], made["field"]) == ("invalid_argument",
                                                  "config.checkpoint_interval"), made
    assert simu.sessions() == []
    ok = host.call("session_create", session_name="calm", config={"checkpoint_interval": 5})
    assert ok["success"]
    simu.advance(60)  # twelve checkpoints, and it returns


def test_canvas_sizes_are_limited_by_the_host() -> None:
    limits = WorldLimits(max_grid_size=100, max_total_cells=15_000, max_sessions=3)
    with Simulation(seed=1, limits=limits) as simu:
        host = simu.client()
        big = host.call("session_create", session_name="big", grid_size=101)
        assert (big["error"], big["field"]) == ("invalid_argument", "grid_size")
        assert "at most 100" in big["message"]
        assert host.call("session_create", session_name="a", grid_size=100)["success"]
        full = host.call("session_create", session_name="b", grid_size=80)
        assert full["error"] == "invalid_argument" and "15,000" in full["message"]
        assert host.call("session_create", session_name="c", grid_size=50)["success"]
        assert host.call("session_create", session_name="d", grid_size=10)["success"]
        too_many = host.call("session_create", session_name="e", grid_size=1)
        assert too_many["error"] == "invalid_argument" and "3 sessions" in too_many["message"]
        assert len(simu.sessions()) == 3
    with pytest.raises(ValueError, match="max_grid_size"):
        WorldLimits(max_grid_size=0)
    with pytest.raises(ValueError, match="min_checkpoint_interval"):
        WorldLimits(min_checkpoint_interval=math.nan)
    with Simulation(seed=1) as simu:  # the default host allows 4,096 a side
        refused = simu.client().call("session_create", session_name="huge", grid_size=10_000)
        assert refused["error"] == "invalid_argument" and "4096" in refused["message"]


def test_every_tools_fast_validator_can_be_used() -> None:
    """msgspec wants an int's bounds as ints: a float bound (1e9) made the fast path
    raise TypeError on every call of such a tool, and each fell back to the hand
    checker (for a blueprint, a Python pass over every cell)."""
    import msgspec

    from barnraise.sim.validation import _struct

    for name, tool in TOOLS.items():
        struct = _struct("Args", tool.input_schema)
        with pytest.raises(msgspec.ValidationError):  # a missing field, never a TypeError
            msgspec.convert({"no_such_argument": 1, **{k: None for k in
                                                       tool.input_schema.get("required", ())}},
                            struct)
        assert name
    created = msgspec.convert({"session_name": "s", "config": {"checkpoint_interval": 5}},
                              _struct("Args", TOOLS["session_create"].input_schema))
    assert created.config.checkpoint_interval == 5  # type: ignore[attr-defined]
