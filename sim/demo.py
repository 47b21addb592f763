"""The demo run by ``barnraise demo``: a coordinator hands work to a crew.

A coordinator agent discovers the workers through the registry (request and
reply), hands each a task, collects every result, does a second round, then
broadcasts that the job is done. Workers serve tasks in a behaviour loop and take a seeded, random
amount of simulated time per task. It exists to show the runtime end to end
until the scenarios arrive.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from sim.dispatch import make_dispatcher


@dataclass(frozen=True)
class DemoResult:
    mode: str
    seed: int
    workers: int
    tasks_done: int
    reason: str
    virtual_time: float
    wall_seconds: float
    delivered: int
    dead_letters: dict[str, int]
    trace_digest: str

    @property
    def success(self) -> bool:
        return self.reason == "quiescent" and self.tasks_done == self.workers * 2

    def summary(self) -> dict[str, Any]:
        return {**self.__dict__, "success": self.success}


def run_demo(seed: int = 7, mode: str = "deterministic", workers: int = 6) -> DemoResult:
    # Imported here: sim never depends on actors at import time.
    from actors.base import Agent
    from actors.registry import Registry

    async def serve(agent: Agent) -> None:
        while True:
            task = await agent.receive(message_type="task_assignment", daemon=True)
            await agent.sleep(1.0 + 4.0 * float(agent.rng.random()))
            agent.reply(task, "task_result", {"task": task.content["task"], "by": agent.name})

    done: list[str] = []

    async def coordinate(agent: Agent) -> None:
        await agent.sleep(0.1)  # let every worker register first
        reply = await agent.request("registry", "registry_query",
                                    {"op": "discover", "agent_type": "worker"})
        crew = sorted(a["agent_id"] for a in reply.content["agents"])
        for round_ in range(2):
            # hand out a round at once, then collect: the crew works in parallel
            for name in crew:
                agent.send(name, "task_assignment", {"task": f"beam-{round_}-{name}"})
            for _ in crew:
                result = await agent.receive(message_type="task_result", timeout=30)
                done.append(result.content["task"])
        agent.send("broadcast", "status_update", {"event": "job_done", "tasks": len(done)})

    options: dict[str, Any] = {"time_scale": 20.0} if mode == "realtime" else {}
    dispatcher = make_dispatcher(mode, seed, **options)
    start = time.perf_counter()
    try:
        dispatcher.spawn(Registry, "registry")
        for i in range(workers):
            dispatcher.spawn(Agent, f"worker-{i}", agent_type="worker", behaviours=(serve,))
        dispatcher.spawn(Agent, "coordinator", agent_type="architect", behaviours=(coordinate,))
        report = dispatcher.run()
        stats = dispatcher.statistics()
    finally:
        dispatcher.shutdown()
    return DemoResult(
        mode=mode, seed=seed, workers=workers, tasks_done=len(done), reason=report.reason,
        virtual_time=round(report.now, 3), wall_seconds=round(time.perf_counter() - start, 3),
        delivered=stats.delivered, dead_letters=dict(stats.dead_letters),
        trace_digest=dispatcher.trace_digest,
    )
