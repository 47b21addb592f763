"""Experiment benchmarks: what recording metrics costs a run, and what sweeps gain on workers.

* :func:`bench_recording`: a ``kernel_build`` run without the metrics recorder, with it
  (default interval, 1 simulated second) and with it keeping canvas frames, interleaved
  rounds, medians; the ratios are the recorder's cost. Digests are checked equal.
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
from benchmarks.runtime import _summary, interleaved

SWEEP_PARAMS: dict[str, list[Any]] = {"grid_size": [240]}


def bench_recording(*, grid_size: int = 240, repeats: int = 7) -> dict[str, Any]:
    """Wall seconds of a kernel_build run without and with the recorder (medians)."""
    digests: set[str] = set()

    def once(**options: Any) -> float:
        start = time.perf_counter()
        result = run("kernel_build", seed=0, grid_size=grid_size, **options)
        elapsed = time.perf_counter() - start
        assert result.success
        digests.add(result.trace_digest)
        return elapsed

    runs = interleaved(repeats, off=lambda: once(record=False), on=lambda: once(),
                       frames=lambda: once(frame_size=96))
    assert len(digests) == 1, "recording changed the trace"
    medians = _summary(runs)
    probe = run("kernel_build", seed=0, grid_size=grid_size)
    assert probe.metrics is not None
    samples = probe.metrics.samples
    return {
        "grid_size": grid_size, "repeats": repeats,
        "seconds": {k: round(v, 4) for k, v in medians.items()},
        "cost_recording": round(medians["on"] / medians["off"], 3),
        "cost_recording_with_frames": round(medians["frames"] / medians["off"], 3),
        "samples": len(samples),
        "interval_samples": sum(1 for s in samples if s.trigger == "interval"),
        "event_samples": sum(1 for s in samples if s.trigger == "event"),
        "agent_samples": len(probe.metrics.agents),
    }


def bench_sweep(*, runs: int = 40, workers: int = 2, repeats: int = 3,
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
        return {"recording": bench_recording(grid_size=60, repeats=1),
                "sweep": bench_sweep(runs=4, repeats=1, params={"grid_size": [60]})}
    return {"recording": bench_recording(), "sweep": bench_sweep()}
