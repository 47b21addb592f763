"""Every shipped scenario: its success check in both modes, and reproducible traces."""

from __future__ import annotations

import pytest

from barnraise.loading import list_scenarios
from barnraise.runner import run
from tests.conftest import MODES

SCENARIOS = [name for name, _ in list_scenarios()]


def test_every_scenario_has_a_docstring_line() -> None:
    assert "kernel_build" in SCENARIOS
    assert all(line for _, line in list_scenarios())


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", SCENARIOS)
def test_scenario_passes_its_success_check(name: str, mode: str) -> None:
    result = run(name, seed=5, mode=mode)
    summary = result.summary
    assert result.success, {k: summary[k] for k in ("run_end", "waiting", "metrics",
                                                    "completion_percent", "behaviour_errors")}
    assert summary["behaviour_errors"] == 0


@pytest.mark.parametrize("name", SCENARIOS)
def test_same_seed_same_digest_other_seed_other_digest(name: str) -> None:
    first = run(name, seed=21).trace_digest
    assert run(name, seed=21).trace_digest == first
    assert run(name, seed=22).trace_digest != first


def test_kernel_build_reaches_100_percent_with_repairs() -> None:
    result = run("kernel_build", seed=7, error_rate=0.01)
    metrics = result.summary["metrics"]
    assert result.summary["completion_percent"] == 100.0
    assert metrics["repairs"] > 0 and metrics["wrong_tiles"] == metrics["defects_found"]
    assert result.canvas() is not None and result.canvas().any()


def test_kernel_build_without_errors_needs_no_repairs() -> None:
    metrics = run("kernel_build", seed=7, error_rate=0.0).summary["metrics"]
    assert metrics["repairs"] == 0 and metrics["done"]


def test_kernel_build_repairs_as_many_as_its_blocks_need() -> None:
    """989 blocks of four tiles at a 30% error rate need 1200 repairs: the old fixed cap
    of 1000 stopped the build undone, and nothing said so."""
    result = run("kernel_build", seed=0, grid_size=70, block=2, testers=1, error_rate=0.3)
    metrics = result.summary["metrics"]
    assert metrics["blocks"] == 989 and metrics["max_repairs"] == 9890
    assert metrics["repairs"] > 1000 and metrics["done"] and not metrics["gave_up"]
    assert result.success


def test_kernel_build_says_when_the_architect_gives_up_at_its_cap() -> None:
    from barnraise.scenarios import kernel_build

    result = run("kernel_build", seed=0, grid_size=40, block=10, error_rate=0.2,
                 max_repairs=3)
    metrics = result.summary["metrics"]
    assert metrics["gave_up"] and metrics["max_repairs"] == 3
    assert metrics["repairs"] <= 3 and not metrics["done"] and not result.success
    lines = kernel_build.describe(result.summary)
    assert any(line.startswith("warning: the architect gave up") and "max_repairs" in line
               for line in lines), lines


def test_kernel_build_mailboxes_follow_the_grid() -> None:
    """1280 tests dealt to one tester: its default mailbox of 1000 dropped 280 of them."""
    from barnraise.scenarios.kernel_build import mail_room

    result = run("kernel_build", seed=0, grid_size=80, block=2, testers=1, error_rate=0.0)
    assert result.summary["metrics"]["blocks"] == 1280
    assert result.summary["messages_dropped"] == 0, result.summary["dead_letters"]
    assert result.success
    assert mail_room(16, 2) == 1000 and mail_room(2500, 2) == 5000


def test_reporting_progress_changes_nothing_in_the_trace() -> None:
    seen: list[float] = []
    quiet = run("kernel_build", seed=3).trace_digest
    loud = run("kernel_build", seed=3, progress=seen.append)
    assert loud.trace_digest == quiet
    assert seen and seen[-1] == 1.0 and seen == sorted(seen)


@pytest.mark.parametrize("mode", MODES)
def test_kernel_build_strategies_all_finish_and_sequential_takes_longest(mode: str) -> None:
    made = {s: run("kernel_build", seed=11, mode=mode, strategy=s, error_rate=0.01).summary
            for s in ("parallel", "sequential", "cluster")}
    for strategy, summary in made.items():
        m = summary["metrics"]
        assert summary["success"] and summary["run_end"] == "quiescent", strategy
        assert m["repairs"] > 0 and m["tests_passed"] == m["blocks"], strategy
        # the architect followed the build through task_completed events
        assert 0 < m["progress_events"] <= summary["tasks_completed"], strategy
        # every block's build and passing test completed before the architect was done
        assert m["progress_events"] >= m["blocks"], strategy
    assert made["sequential"]["metrics"]["makespan"] > made["parallel"]["metrics"]["makespan"]
    assert made["parallel"]["metrics"]["iterations"] is None


def test_the_cluster_strategy_refines_drafts_with_a_critic() -> None:
    # sloppy drafts: the critic sends every one back at least once before approving
    result = run("kernel_build", seed=11, strategy="cluster", error_rate=0.4)
    m = result.summary["metrics"]
    assert result.success and len(m["iterations"]) == m["blocks"]
    assert all(n >= 2 for n in m["iterations"]) and m["first_review_approval_rate"] == 0.0
    assert m["reviews"] == sum(m["iterations"])
    # careful drafts pass the first review
    careful = run("kernel_build", seed=11, strategy="cluster", error_rate=0.0).summary["metrics"]
    assert careful["iterations"] == [1] * careful["blocks"]
    assert careful["first_review_approval_rate"] == 1.0 and careful["repairs"] == 0
