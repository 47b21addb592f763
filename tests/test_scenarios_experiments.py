"""The experiment scenarios: their figures, final state and parameters; the benchmark code.

Every scenario's success check in both modes, and its reproducibility, are
tested for all scenarios in tests/test_scenarios.py; here each one's figures are
checked against what its parameters imply (deterministic mode: exact).
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest

from barnraise.outputs import RunResult
from barnraise.runner import run
from barnraise.scenarios import conflict_storm, mode_comparison, parallel_speedup
from barnraise.scenarios._kit import overlapping_pairs
from benchmarks import scenarios_bench


def _run(name: str, seed: int = 3, **params: Any) -> RunResult:
    result = run(name, seed=seed, **params)
    assert result.summary["behaviour_errors"] == 0
    assert result.summary["run_end"] == "quiescent"
    return result


# -- conflict_storm ---------------------------------------------------------------------------


def test_conflict_storm_figures_agree_with_the_regions_actor() -> None:
    result = _run("conflict_storm")
    s, m = result.summary, result.summary["metrics"]
    agents, per_agent = s["params"]["agents"], s["params"]["claims_per_agent"]
    assert result.success
    assert m["attempted"] == m["granted"] + m["refused"] > m["granted"] > 0
    assert m["granted"] + m["abandoned"] == agents * per_agent
    assert m["conflict_rate"] == round(m["refused"] / m["attempted"], 4)
    assert s["conflicts"] == m["refused"] > 0  # the server counted what the agents saw
    assert 0 <= m["latency_mean"] <= m["latency_p95"] <= m["latency_max"]
    # each agent keeps its last claim: the end state has them, none overlapping
    assert len(result.claims) == m["final_claims"] == agents
    assert overlapping_pairs([c["bounds"] for c in result.claims]) == []
    assert m["writes_ok"] == m["granted"] and m["writes_refused"] == 0
    # every granted claim was filled: the canvas shows each kept claim's tile
    assert result.canvas() is not None
    for claim in result.claims:
        b = claim["bounds"]
        block = result.canvas()[b["y"]:b["y"] + b["height"], b["x"]:b["x"] + b["width"]]
        assert block.all() and len(np.unique(block)) == 1


def test_conflict_rate_rises_with_claim_size() -> None:
    def rate(size: int) -> float:
        return float(np.mean([_run("conflict_storm", seed=seed, claim_size=size)
                              .summary["metrics"]["conflict_rate"] for seed in (1, 2)]))

    small, medium, large = rate(4), rate(8), rate(20)
    assert small < medium < large


def test_patience_zero_takes_the_suggestion_at_once() -> None:
    eager = _run("conflict_storm", patience=0).summary["metrics"]
    stubborn = _run("conflict_storm", patience=100).summary["metrics"]
    assert eager["refused"] > 0 and eager["latency_max"] == 0.0 and eager["abandoned"] == 0
    assert stubborn["latency_mean"] > 0.0
    assert stubborn["refused"] / stubborn["granted"] > eager["refused"] / eager["granted"]


def test_sequential_mode_refuses_writes_of_all_but_the_token_holder() -> None:
    free = _run("conflict_storm", coordination_mode="free").summary["metrics"]
    sequential = _run("conflict_storm", coordination_mode="sequential").summary["metrics"]
    assert free["writes_refused"] == 0
    assert sequential["writes_refused"] > 0
    assert sequential["writes_ok"] + sequential["writes_refused"] == sequential["granted"]


def test_overlaps_during_detects_claims_held_over_each_other() -> None:
    a = {"x": 0, "y": 0, "width": 4, "height": 4}
    b = {"x": 2, "y": 2, "width": 4, "height": 4}
    far = {"x": 10, "y": 10, "width": 4, "height": 4}
    assert conflict_storm.overlaps_during([[0.0, 1.0, a], [1.0, None, b]]) == 0
    assert conflict_storm.overlaps_during([[0.0, 1.5, a], [1.0, 2.0, b], [0.5, None, far]]) == 1
    assert conflict_storm.overlaps_during([[0.0, None, a], [5.0, None, b]]) == 1


def test_conflict_storm_check_rejects_inconsistent_figures() -> None:
    summary = _run("conflict_storm").summary
    assert conflict_storm.check(summary)
    for key, value in (("overlaps_at_end", 1), ("overlaps_during", 1), ("agents_with_claim", 7),
                       ("granted", summary["metrics"]["granted"] + 1)):
        broken = copy.deepcopy(summary)
        broken["metrics"][key] = value
        assert not conflict_storm.check(broken), key


# -- mode_comparison ----------------------------------------------------------------------------


def test_mode_comparison_shows_the_trade_off() -> None:
    result = _run("mode_comparison")
    p, m = result.summary["params"], result.summary["metrics"]
    builders, width, overlap, height = p["builders"], p["width"], p["overlap"], p["height"]
    cells = height * ((builders - 1) * (width - overlap) + width)
    assert result.success and m["cells"] == cells
    free, coordinated, sequential = m["free"], m["coordinated"], m["sequential"]
    for figures in (free, coordinated, sequential):
        assert figures["completion"] == 100.0 and figures["finished"] == builders
    # free: every strip built whole, each overlapping cell twice (the second write lost)
    assert free["tiles_placed"] == builders * width * height
    assert free["lost_work"] == (builders - 1) * overlap * height
    assert free["conflicts"] == 0
    assert free["makespan"] == height * width / p["tile_rate"]
    # claims: every cell built once, at the cost of conflicts
    for figures in (coordinated, sequential):
        assert figures["tiles_placed"] == cells and figures["lost_work"] == 0
        assert figures["conflicts"] > 0
    assert coordinated["makespan"] <= free["makespan"]
    # sequential: one writer at a time, so at least all the cells' building time
    assert sequential["write_refusals"] > 0
    assert sequential["makespan"] >= cells / p["tile_rate"] > free["makespan"]
    # the summary's world figures are the coordinated session's
    assert result.summary["conflicts"] == coordinated["conflicts"]


def test_mode_comparison_without_overlap_loses_nothing_anywhere() -> None:
    result = _run("mode_comparison", overlap=0, builders=2)
    m = result.summary["metrics"]
    assert result.success
    for mode in mode_comparison.MODES:
        assert m[mode]["lost_work"] == 0 and m[mode]["conflicts"] == 0
    assert m["sequential"]["makespan"] >= 2 * m["free"]["makespan"]


def test_mode_comparison_check_wants_lost_work_in_free_mode_only() -> None:
    summary = _run("mode_comparison").summary
    assert mode_comparison.check(summary)
    for mode, key, value in (("free", "lost_work", 0), ("coordinated", "lost_work", 3),
                             ("sequential", "completion", 99.0), ("sequential", "makespan", 1.0)):
        broken = copy.deepcopy(summary)
        broken["metrics"][mode][key] = value
        assert not mode_comparison.check(broken), (mode, key)


def test_mode_comparison_checks_in_realtime_a_bound_jitter_cannot_break() -> None:
    """In realtime a stall (or a resume's restart) lengthens whichever build it falls in: a
    free build slower than the sequential one fails the deterministic comparison and passes
    in realtime, where the sequential makespan must only reach its cells at tile_rate."""
    summary = _run("mode_comparison").summary
    m, rate = summary["metrics"], summary["params"]["tile_rate"]
    work = m["cells"] / rate
    assert m["sequential"]["makespan"] >= work  # deterministic: the bound holds exactly
    stalled = copy.deepcopy(summary)
    stalled["metrics"]["free"]["makespan"] = m["sequential"]["makespan"] + 5.0
    assert not mode_comparison.check(stalled)  # deterministic: sequential must be slowest
    stalled["mode"] = "realtime"
    assert mode_comparison.check(stalled)
    parallel = copy.deepcopy(stalled)  # sequential writers that did not wait their turn
    parallel["metrics"]["sequential"]["makespan"] = work - 0.5
    assert not mode_comparison.check(parallel)
    parallel["metrics"]["sequential"]["makespan"] = round(work - 1e-7, 6)  # rounding only
    assert mode_comparison.check(parallel)


def test_mode_comparison_rejects_an_overlap_as_wide_as_a_strip() -> None:
    with pytest.raises(ValueError, match="overlap"):
        run("mode_comparison", overlap=8, width=8)


# -- parallel_speedup --------------------------------------------------------------------------


def test_parallel_speedup_is_exact_in_deterministic_mode() -> None:
    result = _run("parallel_speedup")
    p, m = result.summary["params"], result.summary["metrics"]
    task_time = p["block"] * p["block"] / p["tile_rate"]
    assert result.success and m["tasks"] == 3 and m["builders"] == 3
    assert m["makespan_parallel"] == pytest.approx(task_time)
    assert m["makespan_sequential"] == pytest.approx(3 * task_time)
    assert m["speedup"] == m["ideal"] == 3.0
    assert m["completion_parallel"] == m["completion_sequential"] == 100.0
    assert result.summary["completion_percent"] == 100.0


@pytest.mark.parametrize(("builders", "expected"), [(1, 1.0), (2, 2.0), (4, 4.0)])
def test_parallel_speedup_follows_the_number_of_builders(builders: int, expected: float) -> None:
    result = _run("parallel_speedup", tasks=4, builders=builders, block=4, tile_rate=16.0)
    m = result.summary["metrics"]
    assert m["tasks"] == 4 and m["speedup"] == m["ideal"] == expected
    assert result.success == (builders >= 3)  # 003's criterion wants 3 builders and 2.8x


def test_parallel_speedup_checks_in_realtime_what_load_cannot_change() -> None:
    """A realtime run measured 2.78 under load and failed a check of 2.8 (test_restore,
    flaky); twelve seeded realtime runs on a busy machine ranged 2.77-2.99. The
    deterministic run keeps the 2.8 target; realtime checks that the builds ran at once."""
    result = _run("parallel_speedup", tasks=4, builders=4, block=4, tile_rate=16.0)
    summary = result.summary
    m = summary["metrics"]
    assert result.success and summary["mode"] == "deterministic"
    assert m["builds_at_once_parallel"] == 4 and m["builds_at_once_sequential"] == 1
    jittered = copy.deepcopy(summary)
    jittered["metrics"]["speedup"] = 2.765  # the lowest measured under load
    assert not parallel_speedup.check(jittered)  # deterministic: the target holds
    jittered["mode"] = "realtime"
    assert parallel_speedup.check(jittered)  # realtime: the builds ran at once
    for key, value in (("builds_at_once_parallel", 3), ("builds_at_once_sequential", 2),
                       ("done_parallel", False)):
        broken = copy.deepcopy(jittered)
        broken["metrics"][key] = value
        assert not parallel_speedup.check(broken), key


def test_parallel_speedup_counts_builds_at_once_in_realtime_too() -> None:
    result = run("parallel_speedup", mode="realtime", time_scale=50.0)
    m = result.summary["metrics"]
    assert result.success, m
    assert m["builds_at_once_parallel"] == 3 and m["builds_at_once_sequential"] == 1


# -- grid_build ----------------------------------------------------------------------------------


def test_grid_build_places_the_plan_exactly() -> None:
    result = _run("grid_build", seed=4)
    s, m = result.summary, result.summary["metrics"]
    grid, builders = s["params"]["grid"], s["params"]["builders"]
    assert result.success
    assert m["tiles_placed"] == s["tiles_placed"] == builders * m["block"] ** 2 == grid * grid
    assert m["calls"] == builders * m["steps"] and m["steps"] == m["block"]
    assert s["virtual_time"] == pytest.approx(m["steps"] * s["params"]["step"])
    assert result.canvas() is not None
    assert np.array_equal(result.canvas(), scenarios_bench._plan(grid, 4))
    # each builder claimed exactly its block: the claims tile the canvas
    covered = np.zeros((grid, grid), dtype=int)
    for claim in result.claims:
        b = claim["bounds"]
        assert b["width"] == b["height"] == m["block"]
        covered[b["y"]:b["y"] + b["height"], b["x"]:b["x"] + b["width"]] += 1
    assert len(result.claims) == builders and (covered == 1).all()


def test_grid_build_sizes_and_step() -> None:
    result = _run("grid_build", grid=60, builders=4, step=0.0)
    assert result.success and result.summary["virtual_time"] == 0.0
    assert result.summary["metrics"]["block"] == 30
    with pytest.raises(ValueError, match="square number"):
        run("grid_build", builders=8)
    with pytest.raises(ValueError, match="divides grid"):
        run("grid_build", grid=100, builders=9)


# -- benchmarks ----------------------------------------------------------------------------


def test_scenario_benchmarks_produce_their_figures() -> None:
    grid = scenarios_bench.bench_grid_build(repeats=1, grid=60, builders=4)
    assert grid["tiles"] == 3600 and grid["ratio"] > 0
    assert set(grid["runs"]) == {"plain_loop", "grid_build", "message_floor"}
    assert grid["message_floor"] > 0 and grid["ratio_message_floor"] > 0
    large = scenarios_bench.bench_kernel_build_large(agents=12, grid=64, block=16)
    assert large["success"] and large["completion_percent"] == 100.0
    assert large["agents"] == 13 and large["builders"] + large["testers"] == 11
    assert large["peak_rss_mib"] > 0 and large["wall_seconds"] > 0


# -- realtime --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["conflict_storm", "mode_comparison", "parallel_speedup",
                                  "grid_build"])
def test_the_figures_hold_in_realtime_too(name: str) -> None:
    """Another seed than tests/test_scenarios.py's: timing jitter must not break a check.

    parallel_speedup runs at a time scale of 10 rather than the runner's 50: on a machine
    whose two cores are busy with other work, a stall of a tenth of a wall second was 5
    simulated seconds of its half-second parallel build at 50, and a CI run measured
    2.748 against the 2.8 its check asked; at 10 the same stall is a fifth of that.
    Its makespans are bounded below by the build time (jitter only adds time) and its
    speedup by 2.5, from measured spread: twelve seeds at a load of 7 to 9 on two cores
    gave 2.970-3.005 (mean 2.986, sd 0.010) at 10, and 2.616-3.001 (sd 0.116) at 50. Below
    2.5 at 10 takes a half-second stall inside the 2.5 wall seconds of the parallel build.
    (The speedup's 2.8 is checked where it is exact: deterministic mode, above.)"""
    options = {"time_scale": 10.0} if name == "parallel_speedup" else {}
    result = run(name, seed=11, mode="realtime", **options)
    s, m = result.summary, result.summary["metrics"]
    assert result.success, {k: s[k] for k in ("metrics", "run_end", "behaviour_errors")}
    if name == "conflict_storm":
        assert s["conflicts"] == m["refused"] and m["overlaps_during"] == 0
    elif name == "mode_comparison":
        assert m["free"]["lost_work"] > 0 == m["coordinated"]["lost_work"]
    elif name == "parallel_speedup":
        build = 10 * 10 / 4.0  # a block of 10 x 10 at 4 tiles a simulated second
        assert m["makespan_parallel"] >= build  # jitter only ever adds time
        assert m["makespan_sequential"] >= 3 * build
        assert m["speedup"] >= 2.5, m
    else:
        assert s["tiles_placed"] == m["tiles_expected"]
