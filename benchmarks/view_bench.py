"""The live view's cost: a big kernel_build watched by a headless page, against none.

:func:`bench_view` runs the same deterministic kernel_build (1,000 agents on a
1000 x 1000 canvas by default) in this process, in interleaved rounds:

* **plain**: no viewer; the run is held at its first step (a gate, as the watched
  run is) and its wall time runs from the moment it is let go to the moment it
  ends (the runner's ``watch`` hook marks the end), so the scenario's set-up before
  its first step, Simulation set-up and summarising are outside both figures; it
  runs on a thread, as the watched run does;
* **watched**: a :class:`barnraise.view.live.LiveView` serves the run, headless
  Chromium (Debian's, through Playwright) has the page open from before the
  first step, and the run is started paused and let go once the page has its
  first frame; its wall time runs from that start (the run standing at its first
  step) to the run's end.

* **socket**: the same as watched, with a plain WebSocket client reading every frame
  and delta in place of the browser: the server's side of the cost alone.

It reports the medians, their ratio (target <= 1.15; and the median of the rounds'
own ratios, which a drift of the machine's speed across rounds moves less), and the
page's frame rate: the page draws on demand, so the figure is Chromium's own count of
animation frames and tasks over 50 ms while the run goes (target: none, that is at
least 20 frames per second at every moment), with the frames it drew, what the server
sent (deltas, reads), the CPU the browser's processes used during each watched run
(Linux), and the trace digests (equal: watching changes nothing in the run). The page
runs in a process of its own (``benchmarks/view_page.py``), as a browser does.
"""

from __future__ import annotations

import contextlib
import gc
import glob
import json
import os
import pathlib
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from barnraise.actors.world import Simulation
from barnraise.outputs import RunResult
from barnraise.runner import check_request, run_request
from barnraise.sim.dispatch import DeterministicDispatcher, Gate

#: The project's root: the page's process runs ``-m benchmarks.view_page`` from there.
_ROOT = str(pathlib.Path(__file__).resolve().parents[1])


def _params(agents: int, grid: int, block: int) -> dict[str, Any]:
    testers = max(1, (agents - 1) // 5)
    return {"grid_size": grid, "block": block, "builders": agents - 1 - testers,
            "testers": testers}


def _plain(params: dict[str, Any], seed: int) -> tuple[float, RunResult]:
    marks: list[float] = []

    def watch(simu: Simulation) -> Callable[[], None]:
        # Held at the first step and let go as the watched run is, so both clocks start
        # at the same point (after the scenario's own set-up, the blueprint).
        dispatcher = simu.dispatcher
        assert isinstance(dispatcher, DeterministicDispatcher)
        gate = Gate(paused=True)
        detach = dispatcher.attach_gate(gate)

        def release() -> None:
            gate.call(lambda: None, timeout=120)  # returns once the run waits at its step
            marks.append(time.perf_counter())
            gate.resume()

        threading.Thread(target=release, daemon=True).start()

        def end() -> None:
            marks.append(time.perf_counter())
            detach()

        return end

    # On a thread, as the watched run is, with this thread waiting, as it does there.
    outcome: dict[str, Any] = {}

    def run() -> None:
        outcome["result"] = run_request(check_request("kernel_build", seed=seed, **params),
                                        watch=watch)

    thread = threading.Thread(target=run, name="view-bench-plain", daemon=True)
    thread.start()
    thread.join(600)
    if "result" not in outcome:
        raise RuntimeError("the unwatched run did not finish")
    return marks[1] - marks[0], outcome["result"]


def _browser_cpu(root: int) -> dict[int, float] | None:
    """CPU seconds used so far by each Chromium process started under process ``root``
    (the page's process), by pid, from Linux /proc; None elsewhere."""
    stats: dict[int, tuple[int, str, float]] = {}
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            with open(stat) as handle:
                head, tail = handle.read().rsplit(")", 1)
            parts = tail.split()
            stats[int(stat.split("/")[2])] = (
                int(parts[1]), head.rsplit("(", 1)[-1],
                (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK"))  # utime, stime
        except (OSError, IndexError, ValueError):
            continue
    if not stats:
        return None

    def under_root(pid: int) -> bool:
        for _ in range(64):
            if pid == root:
                return True
            entry = stats.get(pid)
            if entry is None or entry[0] <= 1:
                return False
            pid = entry[0]
        return False

    return {pid: cpu for pid, (_, name, cpu) in stats.items()
            if "chrom" in name and under_root(pid)}


def _renderer_threads(cpu: dict[int, float] | None) -> dict[tuple[int, str], tuple[int, int]]:
    """For each thread of each Chromium renderer among ``cpu``'s processes (Linux): the
    nanoseconds it has run and waited to run (runnable, on the run queue, no core free),
    from ``/proc/PID/task/TID/schedstat``, summed by (pid, thread name)."""
    threads: dict[tuple[int, str], tuple[int, int]] = {}
    for pid in cpu or {}:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                if b"--type=renderer" not in handle.read():
                    continue
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/comm") as handle:
                    name = handle.read().strip()
                with open(f"/proc/{pid}/task/{tid}/schedstat") as handle:
                    ran, waited = (int(v) for v in handle.read().split()[:2])
            except (OSError, ValueError):
                continue
            if tid == str(pid):
                name = "main"  # the renderer's main thread bears the process's name
            elif name.startswith("DedicatedWorker"):
                name = "DedicatedWorker"
            old = threads.get((pid, name), (0, 0))
            threads[(pid, name)] = (old[0] + ran, old[1] + waited)
    return threads


def _page_threads(before: dict[tuple[int, str], tuple[int, int]],
                  after: dict[tuple[int, str], tuple[int, int]]) -> dict[str, dict[str, float]]:
    """What the page's renderer (the one with a worker) did between two
    samples of :func:`_renderer_threads`: per thread name, ms run and ms waited for a core."""
    spent: dict[int, dict[str, dict[str, float]]] = {}
    for (pid, name), (ran, waited) in after.items():
        ran0, waited0 = before.get((pid, name), (0, 0))
        spent.setdefault(pid, {})[name] = {"run_ms": round((ran - ran0) / 1e6, 1),
                                           "wait_ms": round((waited - waited0) / 1e6, 1)}
    if not spent:
        return {}
    # The page's renderer is the one with a worker (headless Chromium runs others, its
    # own UI's among them); without one, the busiest.
    pages = [t for t in spent.values() if "DedicatedWorker" in t] or list(spent.values())
    busiest = max(pages, key=lambda t: sum(v["run_ms"] for v in t.values()))
    return {name: v for name, v in busiest.items()
            if name in ("main", "DedicatedWorker", "Compositor")}


def _cpu_between(before: dict[int, float] | None, after: dict[int, float] | None
                 ) -> float | None:
    """CPU the browser's processes used between two samples (a process that ended in
    between is not counted: its time is gone from /proc)."""
    if before is None or after is None:
        return None
    return sum(cpu - before.get(pid, 0.0) for pid, cpu in after.items())


def _at_first_step(live: Any) -> None:
    """Wait until the held run stands at its first step (as the plain run is let go)."""
    gate = live.watcher.gate
    if gate is not None:
        gate.call(lambda: None, timeout=120)


def _close_input(process: subprocess.Popen[str]) -> None:
    if process.stdin is not None and not process.stdin.closed:
        with contextlib.suppress(OSError):
            process.stdin.close()


def _line(process: subprocess.Popen[str], timeout: float) -> dict[str, Any]:
    """The next JSON line the page's process prints (within ``timeout`` wall seconds)."""
    assert process.stdout is not None
    got: dict[str, Any] = {}

    def read() -> None:
        assert process.stdout is not None
        line = process.stdout.readline()
        got.update(json.loads(line) if line.strip() else {"error": "the process ended"})

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout)
    if reader.is_alive():
        process.kill()
        reader.join(10)
        return {"error": f"nothing from the page's process within {timeout:g} s"}
    return got


def _watched(params: dict[str, Any], seed: int, client: str = "browser") -> dict[str, Any]:
    from barnraise.view.live import LiveView

    ready = threading.Event()
    live = LiveView(port=0, paused=True, announce=lambda _url: ready.set())
    marks: dict[str, float] = {}
    outcome: dict[str, Any] = {}

    def watch(simu: Simulation) -> Callable[[], None]:
        ended = live.watch(simu)

        def end() -> None:
            marks["end"] = time.perf_counter()
            ended()

        return end

    def run() -> None:
        try:
            outcome["result"] = run_request(check_request("kernel_build", seed=seed, **params),
                                            watch=watch)
        except BaseException as exc:
            outcome["error"] = exc
            ready.set()

    thread = threading.Thread(target=run, name="view-bench-run", daemon=True)
    thread.start()
    page = None
    try:
        if not ready.wait(60) or live.url is None or live.watcher is None:
            raise RuntimeError(f"the view did not start: {outcome.get('error')}")
        command = [sys.executable, "-m", "benchmarks.view_page"]
        if client == "socket":
            command += ["--socket", live.url.replace("http://", "ws://") + "/view/ws"]
        else:
            command.append(live.url + "/")
        page = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                text=True, cwd=_ROOT)
        ready_line = _line(page, 120)
        if not ready_line.get("ready"):
            raise RuntimeError(f"the page did not start: {ready_line}")
        cpu = _browser_cpu(page.pid)
        threads = _renderer_threads(cpu)
        _at_first_step(live)
        marks["start"] = time.perf_counter()
        answer = live.watcher.control("start")  # what the page's Start button sends
        if not answer["success"]:
            raise RuntimeError(f"start refused: {answer}")
        counted = _line(page, 600)  # once the page shows the run finished
        cpu_after = _browser_cpu(page.pid)
        threads_after = _renderer_threads(cpu_after)
        _close_input(page)  # the page's process may close its browser now
        if "error" in counted:
            raise RuntimeError(f"the page failed: {counted['error']}")
        thread.join(600)
        if "error" in outcome:
            raise RuntimeError(f"the watched run failed: {outcome['error']}")
        if client == "socket":
            return {"wall": marks["end"] - marks["start"], "result": outcome["result"],
                    "bytes": counted.get("bytes")}
        surface = live.surface
        return {
            "wall": marks["end"] - marks["start"], "result": outcome["result"],
            "frames_drawn_per_s": counted["frames_drawn_per_s"],
            "long_frames": counted["long_frames"], "worst_frame_ms": counted["worst_frame_ms"],
            "long_tasks": counted["long_tasks"], "worst_task_ms": counted["worst_task_ms"],
            "long_frame_share": counted["long_frame_share"],
            "long_frame_log": counted.get("long_frame_log", []),
            "worker_long_tasks": counted.get("worker_long_tasks"),
            "worker_worst_task_ms": counted.get("worker_worst_task_ms"),
            "worker_worst_task": counted.get("worker_worst_task"),
            "page_resyncs": counted.get("page_resyncs"),
            "before_run": counted.get("before_run"),
            "frame_watch": counted["frame_watch"], "page_deltas": counted["page_deltas"],
            "page_bad": counted["page_bad"], "page_progress": counted["page_progress"],
            "reads": live.watcher.reads,
            "browser_cpu_s": _cpu_between(cpu, cpu_after),
            "page_threads": _page_threads(threads, threads_after),
            "deltas_sent": None if surface is None else surface.deltas_sent,
            "frames_sent": None if surface is None else surface.frames_sent,
        }
    finally:
        if page is not None:
            _close_input(page)
            try:
                page.wait(60)
            except subprocess.TimeoutExpired:
                page.kill()
                page.wait(10)
            if page.stdout is not None:
                page.stdout.close()
        if live.watcher is not None and live.watcher.gate is not None:
            live.watcher.gate.close()
        thread.join(600)
        live.close()


def bench_view(agents: int = 1000, grid: int = 1000, block: int = 32, repeats: int = 7,
               seed: int = 1) -> dict[str, Any]:
    """A ``agents``-strong kernel_build watched live against the same run unwatched."""
    from barnraise.view import headless

    reason = headless.missing()
    if reason is not None:
        return {"skipped": reason}
    params = _params(agents, grid, block)
    plain: list[float] = []
    socket: list[float] = []
    watched: list[dict[str, Any]] = []
    digests: set[str] = set()
    for round_ in range(repeats):
        # Alternate which goes first, so a drift in the machine falls on both.
        kinds = ("plain", "socket", "watched")
        for kind in kinds if round_ % 2 == 0 else kinds[::-1]:
            gc.collect()
            if kind == "socket":
                side = _watched(params, seed, client="socket")
                digests.add(side["result"].trace_digest)
                socket.append(side["wall"])
            elif kind == "plain":
                wall, result = _plain(params, seed)
                assert result.success, "the unwatched run failed its check"
                plain.append(wall)
                digests.add(result.trace_digest)
            else:
                run = _watched(params, seed)
                assert run["result"].success, "the watched run failed its check"
                digests.add(run["result"].trace_digest)
                del run["result"]
                watched.append(run)
    walls = [w["wall"] for w in watched]
    drawn = [w["frames_drawn_per_s"] for w in watched]
    worst = max(w["worst_frame_ms"] for w in watched)
    return {
        "crew": agents, "grid": grid, "block": block, "mode": "deterministic",
        "repeats": repeats,
        "plain_wall_s": round(statistics.median(plain), 3),
        "watched_wall_s": round(statistics.median(walls), 3),
        "ratio": round(statistics.median(walls) / statistics.median(plain), 3),
        "ratio_per_round": [round(w / p, 3) for w, p in zip(walls, plain, strict=True)],
        "ratio_median_of_rounds": round(statistics.median(
            w / p for w, p in zip(walls, plain, strict=True)), 3),
        "plain_walls_s": [round(p, 3) for p in plain],
        "watched_walls_s": [round(w, 3) for w in walls],
        "socket_wall_s": round(statistics.median(socket), 3),
        "socket_ratio": round(statistics.median(socket) / statistics.median(plain), 3),
        "browser_cpu_s_per_run": [None if w["browser_cpu_s"] is None
                                  else round(w["browser_cpu_s"], 2) for w in watched],
        "frames_drawn_per_s": [round(f, 1) for f in drawn],
        "long_frames_per_run": [w["long_frames"] for w in watched],
        "long_tasks_per_run": [w["long_tasks"] for w in watched],
        "worst_long_task_ms": round(max(w["worst_task_ms"] for w in watched), 1),
        # Chromium reports every animation frame and task over 50 ms; with none in any
        # round, the page could draw at least 20 frames in every second of every run.
        "worst_long_frame_ms": round(worst, 1),
        "time_under_20_fps_share_per_run": [round(w["long_frame_share"], 4) for w in watched],
        "never_under_20_fps": all(w["long_frames"] == 0 and w["long_tasks"] == 0
                                  for w in watched),
        "frames_measured_by": watched[0]["frame_watch"] if watched else [],
        # what the long frames were made of (Chromium's long-animation-frame entries):
        # per frame, its length, the scripts' share, the share from the update of the
        # rendering on (animation callbacks, style, layout, paint), style and layout
        "long_frames": [
            {"run": i, "ms": f["ms"], "scripts_ms": f["scripts_ms"],
             "render_ms": f["render_ms"], "style_layout_ms": f["style_layout_ms"],
             "scripts": [f"{s['invoker']} {s['ms']}" for s in f["scripts"]],
             "work": f.get("work", [])}
            for i, w in enumerate(watched) for f in w["long_frame_log"]],
        # long frames before the run was let go (the page's first frame, its load)
        "long_frames_before_run": [w["before_run"] for w in watched],
        # the page's renderer's threads during each run (Linux): ms run, and ms waited
        # runnable for a core (the machine's two cores are shared with the run)
        "page_threads_per_run": [w["page_threads"] for w in watched],
        # the page's worker (socket, parsing, the canvas) times its own tasks
        "worker_long_tasks_per_run": [w["worker_long_tasks"] for w in watched],
        "worker_worst_task_ms": max((w["worker_worst_task_ms"] or 0 for w in watched),
                                    default=0),
        "worker_worst_task_per_run": [
            None if w["worker_worst_task_ms"] is None
            else f"{w['worker_worst_task']} {round(w['worker_worst_task_ms'], 1)}"
            for w in watched],
        "target_ratio": 1.15, "target_fps": 20,
        "same_digest": len(digests) == 1,
        "reads_per_run": [w["reads"] for w in watched],
        "deltas_sent_per_run": [w["deltas_sent"] for w in watched],
        "page_deltas_per_run": [w["page_deltas"] for w in watched],
        "page_bad": sum(w["page_bad"] for w in watched),
        "page_progress": [w["page_progress"] for w in watched],
    }


def run(quick: bool = False) -> dict[str, Any]:
    if quick:
        return {"watched_kernel_build": bench_view(agents=20, grid=96, block=16, repeats=1)}
    return {"watched_kernel_build": bench_view()}
