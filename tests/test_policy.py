"""The policy: the design notes' matrix, most-specific-wins rules, default deny."""

from __future__ import annotations

import pathlib

import pytest

from barnraise.sim.policy import DEFAULT_MATRIX, Policy, PolicyError


def test_the_default_matrix_of_the_design_notes() -> None:
    p = Policy()
    assert p.decide("task_delegate", role="architect")
    assert not p.decide("build_test", role="architect")  # everything but build_test
    for tool in ("region_claim", "region_release", "builder_place_tile", "builder_load_shader",
                 "task_accept", "task_report"):
        assert p.decide(tool, role="builder"), tool
    assert not p.decide("task_delegate", role="builder")  # builders cannot delegate
    assert p.decide("build_test", role="tester")
    assert not p.decide("region_claim", role="tester")
    assert p.decide("session_get_state", role="observer")
    for tool in ("builder_place_tile", "region_claim", "task_accept", "a2a_broadcast"):
        assert not p.decide(tool, role="observer"), tool  # observers cannot write


def test_anything_unmatched_is_denied() -> None:
    assert not Policy().decide("region_claim", role="janitor")
    assert not Policy(defaults=False).decide("session_get_state", role="architect")
    assert Policy(defaults=False).decide("session_join", role="anyone")  # membership tools


def test_most_specific_rule_wins() -> None:
    p = Policy.load({"rules": [
        {"role": "builder", "tool": "task_*", "allow": True},       # role x pattern
        {"agent": "Builder-7", "tool": "task_delegate", "allow": True},  # agent x exact
        {"role": "*", "tool": "a2a_broadcast", "allow": False},      # anyone x exact
        {"agent": "Loud-1", "tool": "*", "allow": True},             # agent x any
    ]})
    # the default matrix has no builder x task_delegate rule, so the role x pattern
    # rule is the most specific match
    assert p.decide("task_delegate", role="builder")
    # an agent rule beats every role rule, whatever its tool
    assert p.decide("task_delegate", role="builder", agent_id="Builder-7")
    # role:* x exact deny is less specific than role:builder x exact allow (the default)
    assert p.decide("a2a_broadcast", role="builder")
    assert not p.decide("a2a_broadcast", role="janitor")
    # agent x * beats role x exact
    assert p.decide("build_test", role="architect", agent_id="Loud-1")


def test_a_tie_goes_to_deny() -> None:
    p = Policy.load([{"role": "tester", "tool": "build_test", "allow": False}])
    assert not p.decide("build_test", role="tester")  # ties the default allow; deny wins


def test_rules_from_yaml_and_json_files(tmp_path: pathlib.Path) -> None:
    yml = tmp_path / "policy.yaml"
    yml.write_text("rules:\n  - {role: observer, tool: builder_place_tile, allow: true}\n")
    assert Policy.load(yml).decide("builder_place_tile", role="observer")
    js = tmp_path / "policy.json"
    js.write_text('[{"agent": "X", "tool": "*", "effect": "deny"}]')
    assert not Policy.load(js).decide("session_get_state", role="architect", agent_id="X")


@pytest.mark.parametrize(
    ("source", "needle"),
    [
        ([{"tool": "x", "allow": True}], "needs an agent or a role"),
        ([{"role": "builder", "agent": "a", "tool": "x", "allow": True}], "not both"),
        ([{"role": "builder", "tool": "", "allow": True}], "rules[0].tool"),
        ([{"role": "builder", "tool": "x"}], "needs allow"),
        ([{"role": "builder", "tool": "x", "allow": "yes"}], "rules[0].allow"),
        ([{"role": "builder", "tool": "x", "allow": True, "colour": 1}], "unknown key"),
        ({"rulez": []}, "unknown key"),
        (42, "expected a list"),
        ("/nonexistent/policy.yaml", "No such file"),
    ],
)
def test_bad_rules_are_named(source: object, needle: str) -> None:
    with pytest.raises(PolicyError) as info:
        Policy.load(source)
    assert needle in str(info.value)


def test_every_matrix_tool_exists() -> None:
    from barnraise.sim.tools import TOOLS

    for tools in DEFAULT_MATRIX.values():
        assert tools <= set(TOOLS)
