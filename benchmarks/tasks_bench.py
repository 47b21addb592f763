"""A 100,000-task DAG completed through the tasks service, against the design notes' executor.

``bench_task_dag`` builds one DAG of chains and fan-outs (:func:`dag_shape`) and
completes it in dependency order three ways, interleaved round by round:

* **task_queue** (the figure that counts): the ``tasks`` actor in a
  deterministic :class:`~barnraise.actors.world.Simulation` with the trace off. An
  architect client delegates every task with ``task_delegate`` (timed apart as
  ``delegate_s``). Then the architect hands each of ``workers`` simulated
  agents (:class:`Worker`, session members) a share of the tasks that had no
  dependencies, and the clock starts: each worker sends ``task_accept`` then
  ``task_report(status="completed")`` tool calls as ``coordination_request``
  messages, keeps up to ``window`` tasks in flight, and takes its next tasks
  from each report's ``unblocked_tasks``. ``complete_s`` ends when the run is
  quiescent: every task completed, every reply, ``task_result`` message to the
  architect and event delivered. Each call pays what any call pays:
  validation against the tool table, membership and policy checks, the graph
  update, events, and the messages both ways.
* **notes_executor**: the design notes' ``DAGExecutor`` (shared/seeds/003),
  transcribed: ``build_dag`` links each node to its dependents (timed apart as
  ``build_s``); ``execute`` (``execute_s``) repeats rounds until every node is
  complete, each round rescanning every node for those not complete whose
  dependencies all are, "executing" them (a dict per node, no agents, no
  messages) and marking them complete. Its rounds equal the DAG's depth, so
  its cost grows as depth x tasks.
* **graph_only** (context, not compared): the same completion straight on a
  :class:`~barnraise.sim.taskgraph.TaskGraph` (``start_next`` / ``complete``), with no
  actors: what the queue's bookkeeping costs without the machinery around it.

``ratio`` is notes ``execute_s`` over task_queue ``complete_s`` (medians), so it
compares completion phases only, each side's setup reported apart. The notes
side pays nothing for messaging or validation, so at small depths it wins;
``cost_model`` gives the measured per-task and per-node-visit costs and the
depths at which the ratio would be 1 and 5 for this machine.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from barnraise.actors.base import Agent
from barnraise.actors.world import Simulation
from barnraise.sim.messages import Message, Priority
from barnraise.sim.taskgraph import TaskGraph
from benchmarks.runtime import _summary, interleaved

__all__ = ["Worker", "bench_task_dag", "dag_depth", "dag_shape", "notes_build_dag",
           "notes_execute"]

#: Dependencies of each task, by index into the list; every index is lower than its own.
Shape = list[tuple[int, ...]]


def dag_shape(tasks: int, *, pipelines: int = 50, chain: int = 8, fan_out: int = 4) -> Shape:
    """``tasks`` tasks in ``pipelines`` independent pipelines of (almost) equal length.

    A pipeline repeats one motif: a chain of ``chain`` tasks, then ``fan_out``
    tasks that each depend on the chain's last, then a join task depending on
    all of them; the next chain hangs off the join. The list is in a
    dependency order (each task after its dependencies), pipeline by pipeline.
    """
    if tasks < 1 or pipelines < 1 or chain < 1 or fan_out < 1:
        raise ValueError("tasks, pipelines, chain and fan_out must be at least 1")
    deps: Shape = []
    for p in range(pipelines):
        size = tasks // pipelines + (1 if p < tasks % pipelines else 0)
        end = len(deps) + size
        last: tuple[int, ...] = ()
        while len(deps) < end:
            for _ in range(chain):
                if len(deps) == end:
                    break
                deps.append(last)
                last = (len(deps) - 1,)
            fanned = []
            for _ in range(fan_out):
                if len(deps) == end:
                    break
                deps.append(last)
                fanned.append(len(deps) - 1)
            if fanned and len(deps) < end:
                deps.append(tuple(fanned))
                last = (len(deps) - 1,)
    return deps


def dag_depth(deps: Shape) -> int:
    """Tasks on the longest dependency path: the notes executor's number of rounds."""
    depth: list[int] = []
    for before in deps:
        depth.append(1 + max((depth[d] for d in before), default=0))
    return max(depth, default=0)


# -- the design notes' executor ---------------------------------------------------------


@dataclass(slots=True)
class _Node:
    """The notes' ``DAGNode``."""

    id: str
    dependencies: list[str]
    dependents: list[str] = field(default_factory=list)


def notes_build_dag(deps: Shape) -> dict[str, _Node]:
    """``DAGExecutor.buildDAG``: one node per task, then each linked to its dependents."""
    dag = {f"t{i}": _Node(f"t{i}", [f"t{d}" for d in before]) for i, before in enumerate(deps)}
    for node in dag.values():
        for dep_id in node.dependencies:
            dep = dag.get(dep_id)
            if dep is not None:
                dep.dependents.append(node.id)
    return dag


def notes_execute(dag: dict[str, _Node]) -> tuple[dict[str, Any], int]:
    """``DAGExecutor.execute``: results by node id, and the number of rounds it took.

    Each round rescans every node for the ready ones, as the notes do; running
    a node is a dict, where the notes would allocate an agent and wait for it.
    """
    completed: set[str] = set()
    results: dict[str, Any] = {}
    rounds = 0
    while len(completed) < len(dag):
        ready = [node for node in dag.values()
                 if node.id not in completed
                 and all(dep in completed for dep in node.dependencies)]
        if not ready:
            pending = [n.id for n in dag.values() if n.id not in completed]
            raise RuntimeError(f"Deadlock detected! Pending tasks: {', '.join(pending)}")
        rounds += 1
        outcomes = [{"task": node.id, "status": "success"} for node in ready]
        for node, outcome in zip(ready, outcomes, strict=True):
            completed.add(node.id)
            results[node.id] = outcome
    return results, rounds


# -- the task queue, driven by simulated agents -----------------------------------------------


class Worker(Agent):
    """A session member that completes tasks by tool calls, reacting to each reply.

    ``ready`` holds the task ids it may accept; ``pump`` keeps up to ``window``
    of them in flight. A completed report's ``unblocked_tasks`` become ready.
    Any failure is kept in ``failures`` (the benchmark expects none).
    """

    agent_type = "builder"

    def __init__(self, window: int = 64) -> None:
        super().__init__()
        self.window = window
        self.ready: deque[str] = deque()
        self.completed = 0
        self.failures: list[dict[str, Any]] = []
        self.joined = False
        self._calls: dict[str, tuple[str, str]] = {}  # correlation id -> (tool, task id)

    def _send_call(self, service: str, tool: str, task_id: str, /, **args: Any) -> None:
        correlation_id = self.dispatcher.next_id()
        self._calls[correlation_id] = (tool, task_id)
        self.send(service, "coordination_request",
                  {"tool": tool, "args": {"session_id": self.session_id, **args}},
                  priority=Priority.HIGH, correlation_id=correlation_id)

    def join(self, session_id: str, name: str) -> None:
        self.session_id = session_id
        self._send_call("coordinator", "session_join", "", agent_name=name, role="builder")

    def pump(self) -> None:
        while self.ready and len(self._calls) < self.window:
            task_id = self.ready.popleft()
            self._send_call("tasks", "task_accept", task_id, task_id=task_id)

    def handle_coordination_response(self, message: Message) -> None:
        correlation_id = message.metadata.correlation_id
        tool, task_id = self._calls.pop(correlation_id or "", ("", ""))
        result = message.content
        if not result.get("success"):
            self.failures.append({"tool": tool, "task_id": task_id, **result})
        elif tool == "session_join":
            self.joined = True
        elif tool == "task_accept":
            self._send_call("tasks", "task_report", task_id, task_id=task_id,
                            status="completed")
        elif tool == "task_report":
            self.completed += 1
            self.ready.extend(result["unblocked_tasks"])
        self.pump()


def queue_run(deps: Shape, *, workers: int = 4, window: int = 64,
              seed: int = 1) -> dict[str, float]:
    """Delegate and complete ``deps`` through the tasks service; seconds of each phase."""
    with Simulation(seed=seed, trace=False) as simu:
        arch = simu.client("architect")
        created = arch.session_create(session_name="task-dag", grid_size=100,
                                      max_agents=workers + 1)
        assert arch.session_join(session_id=created["session_id"], agent_name="Architect",
                                 role="architect")["success"]
        crew: list[Worker] = [simu.dispatcher.spawn(Worker, f"worker-{i}", window=window)
                              for i in range(workers)]
        for i, worker in enumerate(crew):
            worker.join(created["session_id"], f"Worker-{i}")
        simu.run()
        assert all(w.joined for w in crew), [w.failures for w in crew]

        start = time.perf_counter()
        ids: list[str] = []
        roots: list[str] = []
        for before in deps:
            result = arch.task_delegate(task_type="build",
                                        dependencies=[ids[d] for d in before])
            ids.append(result["task_id"])
            if not before:
                roots.append(result["task_id"])
        delegated = time.perf_counter()
        for i, root in enumerate(roots):
            crew[i % workers].ready.append(root)
        for worker in crew:
            worker.pump()
        simu.run()
        done = time.perf_counter()

        failures = [f for w in crew for f in w.failures]
        assert not failures, failures[:3]
        assert sum(w.completed for w in crew) == len(deps)
        counts = simu.view(created["session_id"], canvas=False).task_counts()
        assert counts.get("completed") == len(deps), counts
    return {"delegate_s": delegated - start, "complete_s": done - delegated}


def graph_only_run(deps: Shape) -> dict[str, float]:
    """Build a TaskGraph of ``deps`` and complete it best-first; seconds of each phase."""
    start = time.perf_counter()
    graph = TaskGraph()
    for i, before in enumerate(deps):
        graph.add_task(f"t{i}", dependencies=[f"t{d}" for d in before])
    built = time.perf_counter()
    completed = 0
    while (task_id := graph.start_next()) is not None:
        graph.complete(task_id)
        completed += 1
    done = time.perf_counter()
    assert completed == len(deps)
    return {"build_s": built - start, "complete_s": done - built}


def notes_run(deps: Shape) -> dict[str, float]:
    start = time.perf_counter()
    dag = notes_build_dag(deps)
    built = time.perf_counter()
    results, rounds = notes_execute(dag)
    done = time.perf_counter()
    assert len(results) == len(deps)
    return {"build_s": built - start, "execute_s": done - built, "rounds": rounds}


# -- the benchmark ---------------------------------------------------------------------------


def bench_task_dag(tasks: int = 100_000, repeats: int = 3, *, pipelines: int = 50,
                   chain: int = 8, fan_out: int = 4, workers: int = 4,
                   window: int = 64) -> dict[str, Any]:
    """Complete one DAG of ``tasks`` tasks three ways; medians of ``repeats`` rounds.

    See the module docstring for exactly what each figure times. Returns
    JSON-able figures: seconds, tasks per second, the ratio (notes executor
    time over task-queue time, completion phases) and the cost model.
    """
    deps = dag_shape(tasks, pipelines=pipelines, chain=chain, fan_out=fan_out)
    depth = dag_depth(deps)
    phases: dict[str, list[float]] = {"queue_delegate_s": [], "notes_build_s": [],
                                      "graph_build_s": []}
    rounds: list[int] = []

    def queue_side() -> float:
        figures = queue_run(deps, workers=workers, window=window)
        phases["queue_delegate_s"].append(figures["delegate_s"])
        return figures["complete_s"]

    def notes_side() -> float:
        figures = notes_run(deps)
        phases["notes_build_s"].append(figures["build_s"])
        rounds.append(int(figures["rounds"]))
        return figures["execute_s"]

    def graph_side() -> float:
        figures = graph_only_run(deps)
        phases["graph_build_s"].append(figures["build_s"])
        return figures["complete_s"]

    runs = interleaved(repeats, task_queue=queue_side, notes_executor=notes_side,
                       graph_only=graph_side)
    med = _summary(runs)
    setup = _summary(phases)
    assert set(rounds) == {depth}, (rounds, depth)
    queue_per_task = med["task_queue"] / tasks
    notes_per_visit = med["notes_executor"] / (depth * tasks)
    return {
        "tasks": tasks,
        "shape": {"pipelines": pipelines, "chain": chain, "fan_out": fan_out,
                  "edges": sum(len(d) for d in deps), "depth": depth},
        "unit": "seconds (median) and tasks completed per second",
        "task_queue": {
            "delegate_s": round(setup["queue_delegate_s"], 3),
            "delegations_per_s": round(tasks / setup["queue_delegate_s"]),
            "complete_s": round(med["task_queue"], 3),
            "completed_per_s": round(tasks / med["task_queue"]),
            "workers": workers, "window": window, "trace": False,
        },
        "notes_executor": {
            "build_s": round(setup["notes_build_s"], 3),
            "execute_s": round(med["notes_executor"], 3),
            "completed_per_s": round(tasks / med["notes_executor"]),
            "rounds": depth,
        },
        "graph_only": {
            "build_s": round(setup["graph_build_s"], 3),
            "complete_s": round(med["graph_only"], 3),
            "completed_per_s": round(tasks / med["graph_only"]),
        },
        "ratio": round(med["notes_executor"] / med["task_queue"], 2),
        "target": 5.0,
        "cost_model": {
            "task_queue_us_per_task": round(queue_per_task * 1e6, 1),
            "notes_ns_per_node_visit": round(notes_per_visit * 1e9, 1),
            "depth_for_ratio_1": round(queue_per_task / notes_per_visit),
            "depth_for_ratio_5": round(5 * queue_per_task / notes_per_visit),
        },
        "runs": {name: [round(v, 3) for v in values] for name, values in runs.items()},
    }
