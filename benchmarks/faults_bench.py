"""The ``faults`` section: what fault injection costs, off and on, and what faults cost a build.

* :func:`bench_off`: the runtime benchmarks' request/reply loop and a message
  throughput loop (deterministic), with no plan against a plan that injects almost
  nothing (``drop=1e-9``), interleaved in one process, medians. With no plan the code
  on these paths is the code as it was before fault injection (``Request.arm``,
  ``Dispatcher.post``, ``send``, ``_route_one`` and ``deliver`` are unchanged; the
  injector shadows the routing methods only under a plan, which
  tests/test_faults.py checks), so "off" costs nothing by construction; the
  figures show what turning it on costs.
* :func:`bench_kernel_build`: kernel_build's makespan, messages delivered and wall
  time over seeds, without faults and under the issue's plan
  ``drop=0.05,duplicate=0.02,delay=0.5,crash=0.001`` (medians).
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from barnraise.actors.base import Agent
from barnraise.sim.dispatch import make_dispatcher
from benchmarks.runtime import _Counter, _Echo, _summary, interleaved

PLAN = "drop=0.05,duplicate=0.02,delay=0.5,crash=0.001"


def _request_rate(faults: str | None, round_trips: int) -> float:
    async def asker(agent: Agent) -> None:
        for i in range(round_trips):
            await agent.request("echo", "task_assignment", {"i": i})

    dispatcher = make_dispatcher("deterministic", seed=1, faults=faults)
    dispatcher.spawn(_Echo, "echo")
    start = time.perf_counter()
    dispatcher.spawn(Agent, "asker", agent_type="worker", behaviours=(asker,))
    report = dispatcher.run()
    elapsed = time.perf_counter() - start
    assert report.reason == "quiescent", report
    dispatcher.shutdown()
    return round_trips / elapsed


def _throughput(faults: str | None, messages: int) -> float:
    dispatcher = make_dispatcher("deterministic", seed=1, mailbox_capacity=messages + 1,
                                 faults=faults)
    counter = dispatcher.spawn(_Counter, "counter")

    async def sender(agent: Agent) -> None:
        for _ in range(messages):
            agent.send("counter", "task_update", {"n": 1})

    start = time.perf_counter()
    dispatcher.spawn(Agent, "sender", agent_type="worker", behaviours=(sender,))
    dispatcher.run()
    elapsed = time.perf_counter() - start
    dispatcher.shutdown()
    assert counter.count == messages or faults is not None, counter.count
    return messages / elapsed


def bench_off(round_trips: int = 50_000, messages: int = 50_000,
              repeats: int = 7) -> dict[str, Any]:
    requests = interleaved(
        repeats,
        off=lambda: _request_rate(None, round_trips),
        on=lambda: _request_rate("drop=1e-9", round_trips),
    )
    sends = interleaved(
        repeats,
        off=lambda: _throughput(None, messages),
        on=lambda: _throughput("drop=1e-9", messages),
    )
    med_r, med_s = _summary(requests), _summary(sends)
    return {
        "request_reply": {
            "round_trips": round_trips, "unit": "round trips/s (median)",
            "faults_off": round(med_r["off"]), "faults_on": round(med_r["on"]),
            "ratio_on_to_off": round(med_r["on"] / med_r["off"], 3),
            "runs": {k: [round(r) for r in v] for k, v in requests.items()},
        },
        "send_throughput": {
            "messages": messages, "unit": "messages/s (median)",
            "faults_off": round(med_s["off"]), "faults_on": round(med_s["on"]),
            "ratio_on_to_off": round(med_s["on"] / med_s["off"], 3),
            "runs": {k: [round(r) for r in v] for k, v in sends.items()},
        },
    }


def bench_kernel_build(seeds: int = 10) -> dict[str, Any]:
    from barnraise import run

    sides: dict[str, dict[str, list[float]]] = {}
    for label, faults in (("without", None), ("with_plan", PLAN)):
        figures: dict[str, list[float]] = {"makespan": [], "messages_delivered": [],
                                           "wall_seconds": [], "success": []}
        for seed in range(seeds):
            started = time.perf_counter()
            result = run("kernel_build", seed=seed, faults=faults, record=False)
            figures["wall_seconds"].append(time.perf_counter() - started)
            figures["makespan"].append(result.summary["metrics"]["makespan"])
            figures["messages_delivered"].append(result.summary["messages_delivered"])
            figures["success"].append(float(result.success))
        sides[label] = figures
    out: dict[str, Any] = {"seeds": seeds, "plan": PLAN, "unit": "medians over seeds"}
    for label, figures in sides.items():
        out[label] = {"makespan": round(statistics.median(figures["makespan"]), 3),
                      "messages_delivered": round(statistics.median(
                          figures["messages_delivered"])),
                      "wall_seconds": round(statistics.median(figures["wall_seconds"]), 4),
                      "successes": int(sum(figures["success"]))}
    for key in ("makespan", "messages_delivered", "wall_seconds"):
        out[f"ratio_{key}"] = round(out["with_plan"][key] / out["without"][key], 2)
    return out


def run(quick: bool = False) -> dict[str, Any]:
    if quick:
        return {"off": bench_off(round_trips=2_000, messages=2_000, repeats=1),
                "kernel_build": bench_kernel_build(seeds=2)}
    return {"off": bench_off(), "kernel_build": bench_kernel_build()}
