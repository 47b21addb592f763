"""Scenario benchmarks: whole scenario runs at full size, in deterministic mode.

* :func:`bench_grid_build`: ``grid_build`` at 1000 x 1000 (100 builders, 1,000,000
  tiles), in tiles per second of the whole run (``barnraise.runner.run``), against a plain
  Python loop written here that writes the same tiles one by one into a numpy
  array. Interleaved rounds, medians (``benchmarks.runtime`` style).
* :func:`bench_kernel_build_large`: ``kernel_build`` with 1,000 agents on a
  1000 x 1000 canvas, in a fresh child process (``python -m
  benchmarks.scenarios_bench kernel-large ...``) so that its peak RSS is its own.
* :func:`bench_conflict_storm_scale`: ``conflict_storm`` at 1,000 and at 10,000 agents
  on a 1024 x 1024 grid, and the ratio of their times (issue 23: at most 12).

All return JSON-able dicts and print nothing.
"""

from __future__ import annotations

import json
import math
import pathlib
import resource
import subprocess
import sys
import time
from typing import Any

import numpy as np

from barnraise.actors.base import A2AActor, Agent
from barnraise.runner import run as run_scenario
from barnraise.scenarios._kit import seeded_tiles
from barnraise.sim.dispatch import make_dispatcher
from barnraise.sim.messages import Message, Priority
from barnraise.sim.seeds import seed_for
from benchmarks.runtime import _summary, interleaved

ROOT = pathlib.Path(__file__).resolve().parents[1]


# -- grid_build against a plain loop --------------------------------------------------------


def _plan(grid: int, seed: int) -> np.ndarray[Any, Any]:
    """The plan ``grid_build`` builds with ``seed`` (its rng_for(simu, "plan") stream)."""
    return seeded_tiles(np.random.default_rng(seed_for(seed, "scenario:plan")), grid, grid)


def plain_loop_rate(plan: np.ndarray[Any, Any]) -> float:
    """Tiles per second of a Python loop writing ``plan`` cell by cell into an array."""
    start = time.perf_counter()
    canvas = np.zeros(plan.shape, dtype=np.uint8)
    for y, row in enumerate(plan.tolist()):
        for x, tile in enumerate(row):
            canvas[y, x] = tile
    elapsed = time.perf_counter() - start
    assert np.array_equal(canvas, plan)
    return plan.size / elapsed


def grid_build_rate(grid: int, builders: int, seed: int, step: float = 1.0) -> float:
    """Tiles per second of a whole deterministic ``grid_build`` run (checked for success)."""
    start = time.perf_counter()
    result = run_scenario("grid_build", seed=seed, grid=grid, builders=builders, step=step)
    elapsed = time.perf_counter() - start
    summary = result.summary
    assert result.success, {k: summary[k] for k in ("metrics", "completion_percent", "run_end")}
    canvas = result.final_canvas
    assert canvas is not None and np.array_equal(canvas, _plan(grid, seed))
    return int(summary["tiles_placed"]) / elapsed


class _NoOpService(A2AActor):
    """Answers every request at once and does nothing: the message floor's far side."""

    def handle_coordination_request(self, message: Message) -> None:
        self.reply(message, "coordination_response", {"success": True},
                   priority=Priority.HIGH)


def message_floor_rate(plan: np.ndarray[Any, Any], builders: int, step: float = 1.0,
                       seed: int = 1) -> float:
    """Tiles per second of grid_build's traffic alone, with no tool behind it.

    The same builders send the same rows (one request a row, the row's tile
    codes as content) and sleep ``step`` between rows, but the service answers
    at once without validating, checking or writing anything. It is what the
    runtime's request/reply and timers cost: no tool path can beat it.
    """
    side = math.isqrt(builders)
    block = plan.shape[0] // side  # as grid_build.layout, which the run has checked

    async def rows(agent: Agent, x: int, y: int) -> None:
        for row in range(y, y + block):
            await agent.request("service", "coordination_request",
                                {"tool": "builder_place_tiles",
                                 "args": {"tiles": [plan[row, x:x + block].tolist()],
                                          "region": {"x": x, "y": row, "width": block,
                                                     "height": 1}}})
            await agent.sleep(step)

    start = time.perf_counter()
    d = make_dispatcher("deterministic", seed=seed)
    try:
        d.spawn(_NoOpService, "service")
        for i in range(builders):
            x, y = (i % side) * block, (i // side) * block
            agent = d.spawn(Agent, f"builder-{i + 1}")
            agent.start_behaviour(rows, x, y)
        report = d.run()
        assert report.reason == "quiescent", report.describe()
    finally:
        d.shutdown()
    return float(builders * block * block) / (time.perf_counter() - start)


def bench_grid_build(repeats: int = 3, grid: int = 1000, builders: int = 100,
                     seed: int = 1) -> dict[str, Any]:
    plan = _plan(grid, seed)
    runs = interleaved(repeats,
                       plain_loop=lambda: plain_loop_rate(plan),
                       grid_build=lambda: grid_build_rate(grid, builders, seed),
                       message_floor=lambda: message_floor_rate(plan, builders, seed=seed))
    med = _summary(runs)
    return {
        "grid": grid, "builders": builders, "tiles": int(plan.size), "mode": "deterministic",
        "unit": "tiles/s (median)", "plain_loop": round(med["plain_loop"]),
        "grid_build": round(med["grid_build"]),
        "ratio": round(med["grid_build"] / med["plain_loop"], 3), "target": 0.5,
        # the runtime's request/reply and sleeps alone, no tool behind them: the
        # most any tool path on this runtime could reach
        "message_floor": round(med["message_floor"]),
        "ratio_message_floor": round(med["message_floor"] / med["plain_loop"], 3),
        "runs": {k: [round(r) for r in v] for k, v in runs.items()},
    }


# -- kernel_build with 1,000 agents ----------------------------------------------------------


def kernel_large(builders: int, testers: int, grid: int, block: int,
                 seed: int = 1) -> dict[str, Any]:
    """Child-process side: one deterministic kernel_build run and its figures."""
    start = time.perf_counter()
    result = run_scenario("kernel_build", seed=seed, grid_size=grid, block=block,
                          builders=builders, testers=testers)
    wall = time.perf_counter() - start
    s, m = result.summary, result.summary["metrics"]
    return {
        "wall_seconds": round(wall, 3), "virtual_time": s["virtual_time"],
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "success": s["success"], "completion_percent": s["completion_percent"],
        "agents": s["agents"], "blocks": m["blocks"], "repairs": m["repairs"],
        "tests_passed": m["tests_passed"], "makespan": m["makespan"],
        "messages_delivered": s["messages_delivered"], "messages_dropped": s["messages_dropped"],
        "dead_letters": s["dead_letters"], "behaviour_errors": s["behaviour_errors"],
        "run_end": s["run_end"],
    }


def bench_kernel_build_large(agents: int = 1000, grid: int = 1000, block: int = 32,
                             testers: int | None = None) -> dict[str, Any]:
    """kernel_build with ``agents`` crew members (an architect, a fifth of the rest
    testers unless told, the others builders; the scenario adds an observer)."""
    testers = max(1, (agents - 1) // 5) if testers is None else testers
    builders = agents - 1 - testers
    if builders < 1:
        raise ValueError(f"{agents} agents leave no builder beside {testers} testers")
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.scenarios_bench", "kernel-large",
         str(builders), str(testers), str(grid), str(block)],
        check=True, capture_output=True, text=True, timeout=1800, cwd=ROOT,
    )
    figures: dict[str, Any] = json.loads(out.stdout)
    return {"crew": agents, "builders": builders, "testers": testers, "grid": grid,
            "block": block, "mode": "deterministic", **figures}


# -- conflict_storm at 1,000 and 10,000 agents ------------------------------------------------


def bench_conflict_storm_scale(small: int = 1000, large: int = 10_000, grid: int = 1024,
                               claims_per_agent: int = 5, seed: int = 0) -> dict[str, Any]:
    """``conflict_storm`` with ``small`` then ``large`` agents on one ``grid`` (issue 23's
    load target): the wall and CPU seconds of each whole run (joins, the storm, its
    scoring), in this process one after the other, and their ratio, against the target
    of at most 12 for ten times the crew. Both runs must pass their check."""
    runs: dict[str, dict[str, Any]] = {}
    for agents in (small, large):
        wall, cpu = time.perf_counter(), time.process_time()
        result = run_scenario("conflict_storm", seed=seed, agents=agents, grid=grid,
                              claims_per_agent=claims_per_agent)
        m = result.summary["metrics"]
        runs[str(agents)] = {
            "wall_seconds": round(time.perf_counter() - wall, 3),
            "cpu_seconds": round(time.process_time() - cpu, 3),
            "success": result.success, "attempted": m["attempted"], "granted": m["granted"],
            "refused": m["refused"], "messages_delivered":
                result.summary["messages_delivered"]}
    a, b = runs[str(small)], runs[str(large)]
    joins = {str(agents): join_phase(agents, grid, seed) for agents in (small, large)}
    ja, jb = joins[str(small)], joins[str(large)]
    return {"grid": grid, "claims_per_agent": claims_per_agent, "runs": runs,
            "agents_ratio": large / small,
            "ratio": round(b["wall_seconds"] / a["wall_seconds"], 2),
            "ratio_cpu": round(b["cpu_seconds"] / a["cpu_seconds"], 2), "target": 12.0,
            # the storm on one grid: ten times the crew makes far more attempts per claim
            "attempts_ratio": round(b["attempted"] / a["attempted"], 2),
            "joins": joins, "joins_ratio": round(jb["wall_seconds"] / ja["wall_seconds"], 2),
            "joins_ratio_cpu": round(jb["cpu_seconds"] / ja["cpu_seconds"], 2)}


async def _joined(agent: Any) -> None:
    agent.outcome = {"ready": True}  # joined and through the crew's ready barrier


def join_phase(agents: int, grid: int = 1024, seed: int = 0) -> dict[str, Any]:
    """``agents`` builders join one session and meet at the crew's ready barrier, as
    every scenario's crew does (``barnraise.scenarios._kit.spawn``), and do nothing else: the
    join phase alone, in wall and CPU seconds."""
    from barnraise.actors.world import Simulation
    from barnraise.scenarios._kit import host_session, spawn

    wall, cpu = time.perf_counter(), time.process_time()
    with Simulation(seed=seed) as simu:
        _, sid = host_session(simu, session_name="Joins", grid_size=grid, max_agents=agents)
        crew = [spawn(simu, sid, f"agent-{i + 1}", "builder", crew=agents, behaviour=_joined)
                for i in range(agents)]
        simu.run()
        ready = sum(1 for a in crew if a.outcome.get("ready"))
    return {"wall_seconds": round(time.perf_counter() - wall, 3),
            "cpu_seconds": round(time.process_time() - cpu, 3), "ready": ready,
            "success": ready == agents}


def run(quick: bool = False) -> dict[str, Any]:
    if quick:  # a smoke run: the code paths, at sizes that take seconds
        return {"grid_build": bench_grid_build(repeats=1, grid=120, builders=9),
                "kernel_build_large": bench_kernel_build_large(agents=20, grid=96, block=16),
                "conflict_storm_scale": bench_conflict_storm_scale(small=20, large=200,
                                                                   grid=128)}
    return {"grid_build": bench_grid_build(), "kernel_build_large": bench_kernel_build_large(),
            "conflict_storm_scale": bench_conflict_storm_scale()}


if __name__ == "__main__":
    if sys.argv[1:2] == ["kernel-large"]:
        b, t, g, k = (int(v) for v in sys.argv[2:6])
        print(json.dumps(kernel_large(b, t, g, k)))
    else:
        print(json.dumps(run(quick="--quick" in sys.argv[1:]), indent=2))
