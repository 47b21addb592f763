"""The durable store's cost (``python -m benchmarks --only store``).

* :func:`bench_durable`: a scenario run with ``store=`` against the same run in memory,
  in the same process, interleaved rounds, medians; the ratio is the cost of
  durability (target <= 1.5). Each stored round writes a fresh file. The same
  rounds' CPU time (``process_time``) gives ``cpu_ratio``: the wall ratio without
  the waits (syncs, other processes).
* :func:`bench_resume`: a stored kernel_build of about 100,000 log records, marked
  interrupted after its last commit (as a SIGKILL right after it leaves it), then
  resumed (each round a fresh copy of that file): the wall time of the whole resume
  (re-execution checked record by record against the log, then the finish), which
  bounds the time to reach live state (target < 2 s), against the same run in
  memory, interleaved rounds, medians (a resume re-executes the run, so the
  in-memory run is its floor); and the store's size per 1,000 records.
* :func:`bench_resume_killed`: a deterministic kernel_build killed (SIGKILL) once its
  store holds 100,000 records, then resumed: the time to live state (every stored
  record reproduced, ``RunResult.live_after``) against the target (< 2 s), and to the
  run's end.
* :func:`bench_resume_realtime`: a realtime kernel_build killed at its 100,000th record,
  brought back to live state from the log (the fold, then the services restored):
  target < 2 s.
* :func:`bench_sync`: one ``fsync`` of a new small file, the unit of a store's fixed
  cost (a run pays about five).

Both return JSON-able dicts and print nothing.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import sqlite3
import statistics
import subprocess
import tempfile
import time
from typing import Any

from barnraise.runner import resume
from barnraise.runner import run as run_scenario
from benchmarks.runtime import _summary, interleaved
from tests import crashing


def bench_durable(scenario: str, params: dict[str, Any], repeats: int = 5) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="barnraise-store-bench-") as folder:
        counter = iter(range(10**6))
        records: list[int] = []
        cpu: dict[str, list[float]] = {"memory": [], "store": []}

        def memory() -> float:
            start, used = time.perf_counter(), time.process_time()
            run_scenario(scenario, record=False, **params)
            cpu["memory"].append(time.process_time() - used)
            return time.perf_counter() - start

        def stored() -> float:
            path = pathlib.Path(folder) / f"run-{next(counter)}.db"
            start, used = time.perf_counter(), time.process_time()
            result = run_scenario(scenario, record=False, store=path, **params)
            cpu["store"].append(time.process_time() - used)
            elapsed = time.perf_counter() - start
            records.append(len(result.trace))
            return elapsed

        runs = interleaved(repeats, memory=memory, store=stored)
    medians = _summary(runs)
    cpu_medians = _summary(cpu)
    return {"scenario": scenario, "params": params, "records": records[0],
            "memory_s": round(medians["memory"], 4), "store_s": round(medians["store"], 4),
            "ratio": round(medians["store"] / medians["memory"], 3),
            # The process's CPU time (every thread, user and system) of the same rounds:
            # what the wall ratio would be without waits (syncs, a busy machine).
            "memory_cpu_s": round(cpu_medians["memory"], 4),
            "store_cpu_s": round(cpu_medians["store"], 4),
            "cpu_ratio": round(cpu_medians["store"] / cpu_medians["memory"], 3),
            "runs": {k: [round(v, 4) for v in vs] for k, vs in runs.items()}}


def bench_resume(grid_size: int = 840, block: int = 30, repeats: int = 3) -> dict[str, Any]:
    params = {"grid_size": grid_size, "block": block}
    with tempfile.TemporaryDirectory(prefix="barnraise-store-bench-") as folder:
        path = pathlib.Path(folder) / "big.db"
        start = time.perf_counter()
        result = run_scenario("kernel_build", record=False, store=path, **params)
        write_s = time.perf_counter() - start
        records = len(result.trace)
        with sqlite3.connect(path) as db:
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            snapshots = db.execute("SELECT count(*) FROM snapshots").fetchone()[0]
            # As if killed right after its last commit: the log is whole, the run unfinished.
            db.execute("UPDATE run SET status = 'running', summary = NULL")
        db.close()
        size = os.path.getsize(path)
        counter = iter(range(10**6))

        def memory() -> float:
            # The same run in memory: what the re-execution inside a resume costs at least.
            begin = time.perf_counter()
            run_scenario("kernel_build", record=False, **params)
            return time.perf_counter() - begin

        def resumed() -> float:
            copy = pathlib.Path(folder) / f"resume-{next(counter)}.db"
            shutil.copyfile(path, copy)
            begin = time.perf_counter()
            done = resume(copy, record=False)
            elapsed = time.perf_counter() - begin
            assert done.trace_digest == result.trace_digest
            copy.unlink()
            return elapsed

        runs = interleaved(repeats, memory=memory, resume=resumed)
    medians = _summary(runs)
    return {"records": records, "snapshots": snapshots, "store_bytes": size,
            "bytes_per_1000_records": round(size / records * 1000),
            "write_run_s": round(write_s, 3), "resume_s": round(medians["resume"], 3),
            "memory_s": round(medians["memory"], 3),
            "resume_over_memory": round(medians["resume"] / medians["memory"], 3),
            "resume_target_s": 2.0,
            "runs": {k: [round(v, 4) for v in vs] for k, vs in runs.items()}}


def _copy_killed(path: pathlib.Path, copy: pathlib.Path) -> None:
    """Copy a killed run's store: its WAL holds committed records too."""
    for suffix in ("", "-wal"):
        if os.path.exists(f"{path}{suffix}"):
            shutil.copyfile(f"{path}{suffix}", f"{copy}{suffix}")


def bench_resume_killed(records: int = 100_000, grid_size: int = 900, block: int = 30,
                        repeats: int = 3, past: int | None = None) -> dict[str, Any]:
    """A deterministic kernel_build killed (SIGKILL, in a subprocess) in the commit that
    holds record ``records + past`` (``past``: one commit group unless given), so that
    its store holds at least ``records``, then
    resumed as ``barnraise resume`` does, each round on a fresh copy of the killed store.
    ``to_live_s`` is :attr:`RunResult.live_after`: from the resume's start until every
    stored record has been re-executed and checked, when the run goes on live (the
    target's measure); ``resume_s`` goes on to the run's end. ``grid_size`` is chosen
    so that the run goes well past the kill. The whole run in memory, interleaved,
    is ``memory_s``; medians."""
    from barnraise.actors.stored.run import StoredRun
    from barnraise.sim.store import GROUP_RECORDS

    params = {"grid_size": grid_size, "block": block}
    with tempfile.TemporaryDirectory(prefix="barnraise-store-bench-") as folder:
        path = pathlib.Path(folder) / "killed.db"
        kill = records + (GROUP_RECORDS if past is None else past)
        done = subprocess.run(
            crashing.command(f"record:{kill}", "run", "kernel_build", "--param",
                             f"grid_size={grid_size}", "--param", f"block={block}",
                             "--store", str(path)),
            cwd=crashing.ROOT, capture_output=True, timeout=600, check=False)
        if done.returncode != -9:
            raise RuntimeError(f"the run was not killed past record {records} "
                               f"(exit {done.returncode}): make it bigger")
        last = StoredRun(path).last()
        stored = 0 if last is None else last.seq + 1
        if stored < records:
            raise RuntimeError(f"the killed store holds {stored} records, not {records}")
        counter = iter(range(10**6))
        live: list[float] = []
        digests: set[str] = set()

        def memory() -> float:
            begin = time.perf_counter()
            digests.add(run_scenario("kernel_build", record=False, **params).trace_digest)
            return time.perf_counter() - begin

        def resumed() -> float:
            copy = pathlib.Path(folder) / f"resume-{next(counter)}.db"
            _copy_killed(path, copy)
            begin = time.perf_counter()
            result = resume(copy, record=False)
            elapsed = time.perf_counter() - begin
            assert result.live_after is not None and result.resumed_records == stored
            live.append(result.live_after)
            digests.add(result.trace_digest)
            return elapsed

        runs = interleaved(repeats, memory=memory, resume=resumed)
    if len(digests) != 1:
        raise RuntimeError(f"the resumed run and the run in memory differ: {digests}")
    medians = _summary(runs)
    return {"records": stored, "grid_size": grid_size,
            "to_live_s": round(statistics.median(live), 3),
            "resume_s": round(medians["resume"], 3), "memory_s": round(medians["memory"], 3),
            "target_s": 2.0, "target_met": statistics.median(live) < 2.0,
            "runs": {"to_live": [round(x, 4) for x in live],
                     **{k: [round(v, 4) for v in vs] for k, vs in runs.items()}}}


def bench_resume_realtime(records: int = 100_000, grid_size: int = 840, builders: int = 8,
                          repeats: int = 3) -> dict[str, Any]:
    """A realtime kernel_build killed (SIGKILL, in a subprocess) at log record ``records``,
    then brought back to live state as ``barnraise resume`` does: the store checked, the
    world folded from the whole log (actors/stored/resume.py), the store opened for appending, a
    realtime Simulation made and every service restored. The crew then starts; the time
    up to there is what the target (< 2 s for 100,000 records) measures. The rest of the
    resumed run is the build's remaining work, not resume cost. Each round restores a
    fresh copy of the killed store; medians."""
    from barnraise.actors.stored.resume import image_of
    from barnraise.actors.stored.run import StoredRun
    from barnraise.actors.world import Simulation
    from barnraise.sim.store import Store, check_store

    with tempfile.TemporaryDirectory(prefix="barnraise-store-bench-") as folder:
        path = pathlib.Path(folder) / "killed.db"
        begin = time.perf_counter()
        done = subprocess.run(
            crashing.command(f"record:{records}", "run", "kernel_build", "--mode",
                             "realtime", "--time-scale", "200", "--param",
                             f"grid_size={grid_size}", "--param", "block=30", "--param",
                             f"builders={builders}", "--store", str(path)),
            cwd=crashing.ROOT, capture_output=True, timeout=600, check=False)
        write_s = time.perf_counter() - begin
        if done.returncode != -9:
            raise RuntimeError(f"the realtime run was not killed at record {records} "
                               f"(exit {done.returncode}): make it bigger")
        parts: dict[str, list[float]] = {"fold": [], "open": [], "restore": [], "live": []}
        stored = 0
        for n in range(repeats):
            copy = pathlib.Path(folder) / f"copy-{n}.db"
            _copy_killed(path, copy)
            start = time.perf_counter()
            checked = check_store(copy, writing=True)
            image = image_of(StoredRun(copy, checked))
            folded = time.perf_counter()
            store, _ = Store.resume(copy, checked)
            store.continue_after()
            simu = Simulation(mode="realtime", time_scale=200, store=store)
            opened = time.perf_counter()
            simu.restore(image)
            live = time.perf_counter()
            stored = image.seq
            simu.close()
            store.close()
            parts["fold"].append(folded - start)
            parts["open"].append(opened - folded)
            parts["restore"].append(live - opened)
            parts["live"].append(live - start)
    medians = {k: round(statistics.median(v), 3) for k, v in parts.items()}
    return {"records": stored, "write_run_s": round(write_s, 3),
            "to_live_state_s": medians["live"], "fold_s": medians["fold"],
            "open_s": medians["open"], "restore_s": medians["restore"],
            "target_s": 2.0, "target_met": medians["live"] < 2.0,
            "runs": {k: [round(x, 4) for x in v] for k, v in parts.items()}}


def bench_sync(repeats: int = 15) -> dict[str, Any]:
    """What one ``fsync`` of a new 32 KB file costs here (median, ms): a run with a store
    pays about five (docs/store.md), which a short run feels whatever its length."""
    times = []
    with tempfile.TemporaryDirectory(prefix="barnraise-store-bench-") as folder:
        for n in range(repeats):
            fd = os.open(os.path.join(folder, f"sync-{n}"), os.O_RDWR | os.O_CREAT, 0o644)
            try:
                os.write(fd, bytes(32768))
                start = time.perf_counter()
                os.fsync(fd)
                times.append(time.perf_counter() - start)
            finally:
                os.close(fd)
    return {"fsync_new_file_ms": round(statistics.median(times) * 1000, 3),
            "runs_ms": [round(t * 1000, 3) for t in times]}


def run(quick: bool = False) -> dict[str, Any]:
    if quick:
        return {
            "kernel_build": bench_durable("kernel_build", {"grid_size": 40, "block": 20}, 1),
            "resume": bench_resume(grid_size=60, block=20, repeats=1),
            "resume_killed": bench_resume_killed(records=300, grid_size=90, block=15,
                                                 repeats=1, past=1000),
            "resume_realtime": bench_resume_realtime(records=300, grid_size=60, builders=2,
                                                     repeats=1),
            "sync": bench_sync(3),
        }
    return {
        "kernel_build": bench_durable("kernel_build", {}),
        "kernel_build_large": bench_durable("kernel_build", {"grid_size": 480, "block": 30}, 3),
        "grid_build": bench_durable("grid_build", {}),
        "grid_build_1000": bench_durable("grid_build", {"grid": 1000, "builders": 100}, 3),
        "resume": bench_resume(),
        "resume_killed": bench_resume_killed(),
        "resume_realtime": bench_resume_realtime(),
        "sync": bench_sync(),
    }
