"""Experiment benchmarks: what recording metrics costs a run, and what sweeps gain on workers.

* :func:`bench_recording`: a ``kernel_build`` run without the metrics recorder, with it
  (default interval, 1 simulated second), with it keeping canvas frames, and with it
  calling one reporter and one agent reporter of one's own (:func:`open_claims`,
  :func:`agent_claims`), interleaved rounds, medians; the ratios are the recorder's
  cost. Digests are checked equal.
* :func:`bench_ceiling`: the parallelism the machine gives at the time (a pure-Python
  loop alone against two copies at once), measured before and after the sweeps: on a
  shared machine it says what speed-up was possible at all.
* :func:`bench_sweep`: one 40-run sweep of ``kernel_build`` (seeds 0..39) serially, on a
  pool of 2 processes and on a 2-worker Dask LocalCluster, each started for the sweep and
  stopped after it (so their start-up is in the figure), interleaved rounds, medians; and
  the Dask engine on a cluster started beforehand (``dask_warm``), which shows what the
  start-up costs. Targets (issue 9): processes at least 1.7x faster than serial, Dask
  within 1.3x of the processes. The tables are checked equal (digests included).

Both return JSON-able dicts and print nothing.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import pandas as pd

from barnraise import run, sweep
from barnraise.sim.reporters import AgentView
from barnraise.sim.views import WorldView
from benchmarks.runtime import _summary, interleaved

SWEEP_PARAMS: dict[str, list[Any]] = {"grid_size": [180]}


def open_claims(view: WorldView) -> int:
    """A reporter of one's own, as a user would write one: the claims held now."""
    return len(view.claims)


def agent_claims(agent: AgentView) -> int:
    """An agent reporter: the claims this agent holds."""
    return len(agent.claims)


def bench_recording(*, grid_size: int = 240, repeats: int = 7) -> dict[str, Any]:
    """Seconds of a kernel_build run without and with the recorder (medians), in wall
    time and in this process's CPU time (steadier when the machine is shared)."""
    digests: set[str] = set()
    cpu: dict[str, list[float]] = {"off": [], "on": [], "frames": [], "reporters": []}

    def once(name: str, **options: Any) -> float:
        start, start_cpu = time.perf_counter(), time.process_time()
        result = run("kernel_build", seed=0, grid_size=grid_size, **options)
        elapsed = time.perf_counter() - start
        cpu[name].append(time.process_time() - start_cpu)
        assert result.success
        digests.add(result.trace_digest)
        return elapsed

    runs = interleaved(repeats, off=lambda: once("off", record=False),
                       on=lambda: once("on"), frames=lambda: once("frames", frame_size=96),
                       reporters=lambda: once("reporters",
                                              reporters={"open_claims": open_claims},
                                              agent_reporters={"claims": agent_claims}))
    assert len(digests) == 1, "recording changed the trace"
    wall = _summary(runs)
    cpu_medians = _summary(cpu)
    probe = run("kernel_build", seed=0, grid_size=grid_size)
    assert probe.metrics is not None
    samples = probe.metrics.samples
    inside, whole = _time_inside_the_recorder(grid_size)
    return {
        "grid_size": grid_size, "repeats": repeats,
        "wall_seconds": {k: round(v, 4) for k, v in wall.items()},
        "cpu_seconds": {k: round(v, 4) for k, v in cpu_medians.items()},
        "cost_recording": round(wall["on"] / wall["off"], 3),
        "cost_recording_with_frames": round(wall["frames"] / wall["off"], 3),
        "cost_recording_cpu": round(cpu_medians["on"] / cpu_medians["off"], 3),
        "cost_recording_with_frames_cpu": round(cpu_medians["frames"] / cpu_medians["off"], 3),
        "cost_recording_with_reporters_cpu": round(cpu_medians["reporters"] / cpu_medians["off"],
                                                   3),
        "cost_reporters_over_recording_cpu": round(cpu_medians["reporters"] / cpu_medians["on"],
                                                   3),
        # The recorder's own time, measured inside one run: steady on a busy machine.
        "recorder_seconds": {k: round(v, 4) for k, v in inside.items()},
        "run_seconds": round(whole, 4),
        "recorder_share": round(sum(inside.values()) / whole, 3),
        "samples": len(samples),
        "interval_samples": sum(1 for s in samples if s.trigger == "interval"),
        "event_samples": sum(1 for s in samples if s.trigger == "event"),
        "agent_samples": len(probe.metrics.agents),
    }


def _time_inside_the_recorder(grid_size: int, repeats: int = 5) -> tuple[dict[str, float], float]:
    """Seconds spent in the recorder's event listener and in its interval samples during
    a kernel_build run (medians of ``repeats`` runs), and the run's own seconds."""
    import statistics

    from barnraise.actors.recording import Recorder
    from barnraise.sim.metrics import MetricsCollector

    spent = {"events": 0.0, "intervals": 0.0}
    on_event, sample = MetricsCollector.on_event, Recorder.sample

    def timed_event(self: Any, *args: Any) -> None:
        start = time.perf_counter()
        on_event(self, *args)
        spent["events"] += time.perf_counter() - start

    def timed_sample(self: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        out = sample(self, **kwargs)
        spent["intervals"] += time.perf_counter() - start
        return out

    shares: list[tuple[float, float, float]] = []
    MetricsCollector.on_event = timed_event  # type: ignore[method-assign]
    Recorder.sample = timed_sample  # type: ignore[method-assign]
    try:
        for _ in range(repeats):
            spent.update(events=0.0, intervals=0.0)
            start = time.perf_counter()
            run("kernel_build", seed=0, grid_size=grid_size)
            shares.append((spent["events"], spent["intervals"], time.perf_counter() - start))
    finally:
        MetricsCollector.on_event = on_event  # type: ignore[method-assign]
        Recorder.sample = sample  # type: ignore[method-assign]
    median = statistics.median
    return ({"events": median(s[0] for s in shares), "intervals": median(s[1] for s in shares)},
            median(s[2] for s in shares))


def _spin(n: int) -> float:
    """Seconds a pure-Python loop of ``n`` steps takes here (no I/O, no allocation)."""
    start = time.perf_counter()
    total = 0
    for i in range(n):
        total += i * i
    return time.perf_counter() - start


def bench_ceiling(*, workers: int = 2, steps: int = 10_000_000,
                  repeats: int = 3) -> dict[str, Any]:
    """What parallelism the machine gives right now: a pure-Python loop alone, then
    ``workers`` copies at once in spawned processes (interleaved, medians). On an idle
    2-core machine ``ceiling`` is close to 2; other processes on the cores lower it,
    and no sweep on processes can beat it."""
    import multiprocessing
    import statistics

    alone: list[float] = []
    together: list[float] = []
    with multiprocessing.get_context("spawn").Pool(workers) as pool:
        pool.map(abs, range(workers))  # started before anything is timed
        for _ in range(repeats):
            alone.append(_spin(steps))
            start = time.perf_counter()
            pool.map(_spin, [steps] * workers)
            together.append(time.perf_counter() - start)
    one, many = statistics.median(alone), statistics.median(together)
    return {"workers": workers, "alone_seconds": round(one, 3),
            "together_seconds": round(many, 3), "ceiling": round(workers * one / many, 3)}


def bench_sweep(*, runs: int = 40, workers: int = 2, repeats: int = 5,
                params: dict[str, list[Any]] | None = None) -> dict[str, Any]:
    """Wall seconds of one sweep per engine (medians), speed-ups and the targets."""
    from distributed import LocalCluster

    grid = dict(SWEEP_PARAMS if params is None else params)
    seeds = range(runs)
    tables: dict[str, pd.DataFrame] = {}

    def timed(name: str, **engine: Any) -> float:
        start = time.perf_counter()
        table = sweep("kernel_build", grid, seeds, **engine)
        elapsed = time.perf_counter() - start
        assert table["success"].all()
        tables[name] = table.drop(columns="wall_seconds")
        return elapsed

    cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                           dashboard_address=":0", silence_logs=logging.ERROR)
    try:
        address = cluster.scheduler_address
        samples = interleaved(
            repeats,
            serial=lambda: timed("serial"),
            processes=lambda: timed("processes", engine="processes", workers=workers),
            dask=lambda: timed("dask", engine="dask", workers=workers),
            dask_warm=lambda: timed("dask_warm", engine="dask", dask_address=address))
    finally:
        cluster.close()
    for name, table in tables.items():
        assert table.equals(tables["serial"]), f"{name} differs from serial"
    medians = _summary(samples)
    speedup = medians["serial"] / medians["processes"]
    dask_ratio = medians["dask"] / medians["processes"]
    return {
        "scenario": "kernel_build", "params": grid, "runs": runs, "workers": workers,
        "repeats": repeats,
        "seconds": {k: round(v, 3) for k, v in medians.items()},
        "all_seconds": {k: [round(x, 3) for x in v] for k, v in samples.items()},
        "speedup_processes_vs_serial": round(speedup, 3),
        "dask_vs_processes": round(dask_ratio, 3),
        "dask_warm_vs_processes": round(medians["dask_warm"] / medians["processes"], 3),
        "target_speedup_1_7": speedup >= 1.7,
        "target_dask_within_1_3": dask_ratio <= 1.3,
        "tables_equal": True,
    }


def run_section(quick: bool) -> dict[str, Any]:
    if quick:
        return {"ceiling_before": bench_ceiling(steps=200_000, repeats=1),
                "recording": bench_recording(grid_size=60, repeats=1),
                "sweep": bench_sweep(runs=4, repeats=1, params={"grid_size": [60]})}
    return {"ceiling_before": bench_ceiling(), "recording": bench_recording(),
            "sweep": bench_sweep(), "ceiling_after": bench_ceiling()}
