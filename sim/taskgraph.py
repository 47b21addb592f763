"""The task dependency graph: statuses, the ready set, cycle refusal.

Tasks live in a :class:`networkx.DiGraph` whose edges run from a dependency to
the task that depends on it (``dep -> task``), so a task's successors are the
tasks it can unblock. The graph is acyclic at all times: any addition that
would close a cycle is refused with :class:`DependencyCycle`, and every error
leaves the graph exactly as it was.

State machine (``*`` marks transitions made by the graph itself, not by a call)::

    pending     --start-->      in_progress   only when ready (see below)
    in_progress --complete-->   completed     terminal
    in_progress --fail-->       failed
    blocked     --fail-->       failed        (e.g. an agent gives up on a blocked task)
    in_progress --requeue-->    pending       retry; or blocked if a dependency is broken
    failed      --requeue-->    pending       retry; likewise
    pending     --block-->      blocked       held by hand until unblock
    in_progress --block-->      blocked       held; unblock returns it to pending
    blocked     --unblock-->    pending       clears the hold; stays blocked while
                                              a dependency is still broken
    pending / blocked / in_progress / failed --cancel--> cancelled   terminal
    pending     --*-->          blocked       a dependency became broken
    blocked     --*-->          pending       no broken dependency left and not held

A dependency is *broken* when its status is failed, cancelled or blocked, so a
failure blocks its dependents transitively and a successful requeue or unblock
releases them transitively. A task is *ready* when it is pending and every
dependency is completed.

Each task keeps two counters: dependencies not yet completed and dependencies
broken. A status change updates only the counters of the task's direct
dependents, and keeps going only through those whose status flips; nothing
rescans the graph. Ready tasks sit in a heap ordered by (priority, highest
first; then ``created_seq``; then id), so the best one is found in O(log n).
"""

from __future__ import annotations

import copy
import heapq
import numbers
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from enum import IntEnum, StrEnum
from typing import Any

import networkx as nx  # type: ignore[import-untyped, unused-ignore]

__all__ = [
    "DependencyCycle",
    "DuplicateTask",
    "InvalidTransition",
    "TaskGraph",
    "TaskGraphError",
    "TaskPriority",
    "TaskStatus",
    "TaskView",
    "UnknownDependency",
    "UnknownTask",
    "parse_priority",
]


class TaskStatus(StrEnum):
    PENDING = "pending"
    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"
    FAILED = "failed"
    BLOCKED = "blocked"
    CANCELLED = "cancelled"


class TaskPriority(IntEnum):
    """The named priorities of the task tools; any int is a valid priority."""

    LOW = 1
    MEDIUM = 5
    HIGH = 8
    CRITICAL = 10


#: The lower-case names, as the task tools write them: parse_priority's fast path.
_PRIORITY_NAMES: dict[object, TaskPriority] = {p.name.lower(): p for p in TaskPriority}

_BROKEN = frozenset({TaskStatus.FAILED, TaskStatus.CANCELLED, TaskStatus.BLOCKED})
_NOT_STARTED = frozenset({TaskStatus.PENDING, TaskStatus.BLOCKED})


def parse_priority(value: object) -> int:
    """An int priority from an int or a name (low/medium/high/critical, any case)."""
    # The task tools pass the names as written here, several times per task (its
    # queue counts, its rank): a dict look-up answers them without the general path,
    # which builds a new mapping proxy for ``__members__`` on every call.
    known = _PRIORITY_NAMES.get(value) if type(value) is str else None
    if known is not None:
        return known
    if isinstance(value, str):
        member = TaskPriority.__members__.get(value.strip().upper())
        if member is not None:
            return member
    elif isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    names = ", ".join(p.name.lower() for p in TaskPriority)
    raise ValueError(f"priority must be an integer or one of {names}, got {value!r}")


class TaskGraphError(ValueError):
    """Base of every error the task graph raises about tasks and dependencies."""


class UnknownTask(TaskGraphError):
    def __init__(self, task_id: str) -> None:
        self.task_id = task_id
        super().__init__(f"unknown task {task_id!r}")


class DuplicateTask(TaskGraphError):
    def __init__(self, task_id: str) -> None:
        self.task_id = task_id
        super().__init__(f"task {task_id!r} already exists")


class UnknownDependency(TaskGraphError):
    def __init__(self, task_id: str, dependency: str) -> None:
        self.task_id = task_id
        self.dependency = dependency
        super().__init__(f"task {task_id!r} depends on unknown task {dependency!r}")


class DependencyCycle(TaskGraphError):
    """Refused because it would close a cycle.

    ``cycle`` lists the tasks in order, first and last equal, each depending
    on the next: ``["a", "b", "a"]`` means a depends on b, which depends on a.
    """

    def __init__(self, cycle: list[str]) -> None:
        self.cycle = list(cycle)
        super().__init__("dependency cycle: " + " -> ".join(self.cycle))


class InvalidTransition(TaskGraphError):
    def __init__(
        self, task_id: str, from_status: TaskStatus, to_status: TaskStatus, reason: str = ""
    ) -> None:
        self.task_id = task_id
        self.from_status = from_status
        self.to_status = to_status
        detail = f": {reason}" if reason else ""
        super().__init__(f"task {task_id!r}: cannot go {from_status} -> {to_status}{detail}")


@dataclass(frozen=True, slots=True)
class TaskView:
    """A copy of one task's state at the moment it was taken."""

    task_id: str
    status: TaskStatus
    priority: int
    created_seq: int
    dependencies: tuple[str, ...]
    dependents: tuple[str, ...]
    held: bool
    ready: bool
    data: dict[str, Any]


class _Task:
    __slots__ = (
        "broken",
        "created_seq",
        "data",
        "gen",
        "held",
        "priority",
        "status",
        "task_id",
        "unmet",
    )

    def __init__(self, task_id: str, priority: int, created_seq: int, data: dict[str, Any]) -> None:
        self.task_id = task_id
        self.priority = priority
        self.created_seq = created_seq
        self.data = data
        self.status = TaskStatus.PENDING
        self.unmet = 0  # dependencies not completed
        self.broken = 0  # dependencies failed, cancelled or blocked
        self.held = False  # blocked by hand (block) rather than by a dependency
        self.gen = 0  # bumped on each entry to the ready set; tags heap entries

    def order_key(self) -> tuple[int, int, str]:
        return (-self.priority, self.created_seq, self.task_id)


# Both checks answer the common case (a plain str, a plain int) by its exact type
# first: isinstance against numbers.Integral is an ABC check, several times the cost.
def _check_id(value: object, name: str) -> str:
    if type(value) is str and value:
        return value
    if not isinstance(value, str) or not value:
        raise ValueError(f"{name} must be a non-empty string, got {value!r}")
    return value


def _check_int(value: object, name: str) -> int:
    if type(value) is int:
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        # A TaskPriority (the task queue passes one per task): an int, without asking
        # the numbers.Integral ABC, which took 0.3% of a kernel_build run.
        return int(value)
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    return int(value)


class TaskGraph:
    """A DAG of tasks with incremental readiness. See the module docstring."""

    __slots__ = ("_counts", "_g", "_heap", "_next_seq", "_ready", "_tasks")

    def __init__(self) -> None:
        self._g: Any = nx.DiGraph()
        self._tasks: dict[str, _Task] = {}
        self._ready: set[str] = set()
        self._heap: list[tuple[int, int, str, int]] = []
        self._counts: dict[TaskStatus, int] = dict.fromkeys(TaskStatus, 0)
        self._next_seq = 0

    # ----------------------------------------------------------- queries

    def __len__(self) -> int:
        return len(self._tasks)

    def __contains__(self, task_id: object) -> bool:
        return task_id in self._tasks

    def __iter__(self) -> Iterator[str]:
        """Task ids in the order they were added."""
        return iter(list(self._tasks))

    @property
    def graph(self) -> Any:
        """A read-only networkx view of the graph (edges run dependency -> dependent)."""
        return self._g.copy(as_view=True)

    def _get(self, task_id: str) -> _Task:
        task = self._tasks.get(task_id)
        if task is None:
            raise UnknownTask(task_id)
        return task

    def status(self, task_id: str) -> TaskStatus:
        return self._get(task_id).status

    def get(self, task_id: str) -> TaskView:
        """A snapshot of one task; ``data`` is a shallow copy."""
        task = self._get(task_id)
        return TaskView(
            task_id=task.task_id,
            status=task.status,
            priority=task.priority,
            created_seq=task.created_seq,
            dependencies=tuple(self._g.pred[task_id]),
            dependents=tuple(self._g.succ[task_id]),
            held=task.held,
            ready=task_id in self._ready,
            data=dict(task.data),
        )

    def dependencies(self, task_id: str) -> list[str]:
        """Direct dependencies, in the order they were added."""
        self._get(task_id)
        return list(self._g.pred[task_id])

    def dependents(self, task_id: str) -> list[str]:
        """Tasks that depend directly on ``task_id``, in the order the edges were added."""
        self._get(task_id)
        return list(self._g.succ[task_id])

    def links(self) -> dict[str, tuple[tuple[str, ...], bool]]:
        """Every task's dependents (as :meth:`dependents` orders them) and whether it is
        ready, by id, in one pass: what a view of the whole graph needs, without a
        look-up and a networkx view object per task and question."""
        ready = self._ready
        # adjacency() yields each node's own successor dict, in the order nodes were added
        return {tid: (tuple(succ), tid in ready) for tid, succ in self._g.adjacency()}

    def tasks(self, status: TaskStatus | str | None = None) -> list[str]:
        """Task ids in insertion order, optionally only those with ``status``."""
        if status is None:
            return list(self._tasks)
        wanted = _parse_status(status, "status")
        return [t.task_id for t in self._tasks.values() if t.status is wanted]

    def counts(self) -> dict[str, int]:
        """Number of tasks in every status (all six keys present)."""
        return {str(s): n for s, n in self._counts.items()}

    def is_ready(self, task_id: str) -> bool:
        self._get(task_id)
        return task_id in self._ready

    def ready(self) -> list[str]:
        """Ready tasks, best first: priority high to low, then ``created_seq``, then id."""
        return sorted(self._ready, key=lambda t: self._tasks[t].order_key())

    def next_ready(self) -> str | None:
        """The best ready task without starting it; amortised O(log n)."""
        heap = self._heap
        while heap:
            _, _, task_id, gen = heap[0]
            if task_id in self._ready and self._tasks[task_id].gen == gen:
                return task_id
            heapq.heappop(heap)
        return None

    def start_next(self) -> str | None:
        """Start the best ready task and return its id, or None when nothing is ready."""
        task_id = self.next_ready()
        if task_id is not None:
            self.start(task_id)
        return task_id

    def would_cycle(self, task_id: str, dependency: str) -> bool:
        """True when ``add_dependency(task_id, dependency)`` would be refused as a cycle."""
        return self.cycle_through(task_id, dependency) is not None

    def cycle_through(self, task_id: str, dependency: str) -> list[str] | None:
        """The cycle that making ``task_id`` depend on ``dependency`` would close, or None.

        Same order as :attr:`DependencyCycle.cycle`. Cost: a search over what
        depends on ``task_id``, transitively.
        """
        self._get(task_id)
        if dependency not in self._tasks:
            raise UnknownDependency(task_id, dependency)
        if dependency == task_id:
            return [task_id, task_id]
        try:
            path: list[str] = nx.shortest_path(self._g, task_id, dependency)
        except nx.NetworkXNoPath:
            return None
        # path runs task -> ... -> dependency along "is needed by" edges;
        # reversed it reads "depends on", and the new edge closes it at task.
        return [task_id, *reversed(path)]

    # ---------------------------------------------------------- building

    def add_task(
        self,
        task_id: str,
        *,
        priority: int = TaskPriority.MEDIUM,
        dependencies: Iterable[str] = (),
        created_seq: int | None = None,
        data: Mapping[str, Any] | None = None,
    ) -> TaskStatus:
        """Add a task; returns its initial status (pending, or blocked on a broken dependency).

        ``created_seq`` breaks priority ties (lower first); by default it is one
        more than the largest seen so far. Duplicate dependencies are merged.
        Raises ValueError naming the argument for malformed input,
        :class:`DuplicateTask`, :class:`UnknownDependency`, or
        :class:`DependencyCycle` for a task listing itself. On error nothing
        changes.
        """
        tid = _check_id(task_id, "task_id")
        if tid in self._tasks:
            raise DuplicateTask(tid)
        prio = _check_int(priority, "priority")
        seq = self._next_seq if created_seq is None else _check_int(created_seq, "created_seq")
        if isinstance(dependencies, (str, bytes)) or not isinstance(dependencies, Iterable):
            raise ValueError(f"dependencies must be a list of task ids, got {dependencies!r}")
        deps = list(dict.fromkeys(dependencies))
        for dep in deps:
            _check_id(dep, "dependencies")
        if data is not None and not isinstance(data, Mapping):
            raise ValueError(f"data must be a mapping, got {type(data).__name__}")
        for dep in deps:
            if dep == tid:
                raise DependencyCycle([tid, tid])
            if dep not in self._tasks:
                raise UnknownDependency(tid, dep)

        task = _Task(tid, prio, seq, dict(data) if data is not None else {})
        self._tasks[tid] = task
        self._g.add_node(tid)
        for dep in deps:
            self._g.add_edge(dep, tid)
            status = self._tasks[dep].status
            if status is not TaskStatus.COMPLETED:
                task.unmet += 1
            if status in _BROKEN:
                task.broken += 1
        self._next_seq = max(self._next_seq, seq + 1)
        self._counts[TaskStatus.PENDING] += 1
        if task.broken:
            # Nothing depends on a new task yet, so there is nothing to spread.
            self._set_status(task, TaskStatus.BLOCKED)
        else:
            self._refresh_ready(task)
        return task.status

    def add_dependency(self, task_id: str, dependency: str) -> list[str]:
        """Make ``task_id`` depend on ``dependency``; returns the tasks that became blocked.

        Only a task not yet started (pending or blocked) can gain a dependency;
        otherwise :class:`TaskGraphError`. Adding an existing edge does
        nothing. Raises :class:`UnknownTask`, :class:`UnknownDependency` or
        :class:`DependencyCycle`; on error nothing changes.
        """
        task = self._get(task_id)
        cycle = self.cycle_through(task_id, dependency)
        if cycle is not None:
            raise DependencyCycle(cycle)
        if task.status not in _NOT_STARTED:
            raise TaskGraphError(
                f"task {task_id!r} is {task.status}: only a pending or blocked task "
                f"can gain a dependency (got {dependency!r})"
            )
        if self._g.has_edge(dependency, task_id):
            return []
        self._g.add_edge(dependency, task_id)
        dep_status = self._tasks[dependency].status
        if dep_status is not TaskStatus.COMPLETED:
            task.unmet += 1
        if dep_status in _BROKEN:
            task.broken += 1
        if task.status is TaskStatus.PENDING and task.broken:
            return self._sorted([task_id, *self._set_status(task, TaskStatus.BLOCKED)])
        self._refresh_ready(task)
        return []

    # ------------------------------------------------------- transitions

    def start(self, task_id: str) -> None:
        """pending -> in_progress; the task must be ready."""
        task = self._get(task_id)
        _require(task, TaskStatus.IN_PROGRESS, _PENDING_ONLY)
        if task.unmet:
            waiting = [d for d in self._g.pred[task_id] if not self._is_completed(d)]
            raise InvalidTransition(
                task_id,
                task.status,
                TaskStatus.IN_PROGRESS,
                "waiting on " + ", ".join(repr(d) for d in waiting),
            )
        self._set_status(task, TaskStatus.IN_PROGRESS)

    def complete(self, task_id: str) -> list[str]:
        """in_progress -> completed; returns the tasks that became ready, best first.

        Touches only the task's direct dependents.
        """
        task = self._get(task_id)
        _require(task, TaskStatus.COMPLETED, _IN_PROGRESS_ONLY)
        self._set_status(task, TaskStatus.COMPLETED)
        unblocked: list[_Task] = []
        for succ_id in self._g.succ[task_id]:
            succ = self._tasks[succ_id]
            succ.unmet -= 1
            if succ.unmet == 0 and succ.status is TaskStatus.PENDING:
                self._refresh_ready(succ)
                unblocked.append(succ)
        unblocked.sort(key=_Task.order_key)
        return [t.task_id for t in unblocked]

    def fail(self, task_id: str) -> list[str]:
        """in_progress or blocked -> failed; returns the dependents that became blocked.

        The list is transitive and ordered by (``created_seq``, id).
        """
        task = self._get(task_id)
        _require(task, TaskStatus.FAILED, _FAILABLE)
        task.held = False
        return self._sorted(self._set_status(task, TaskStatus.FAILED))

    def requeue(self, task_id: str) -> list[str]:
        """in_progress or failed -> pending, for a retry; returns dependents that became unblocked.

        The task itself goes to blocked instead when one of its dependencies
        is broken.
        """
        task = self._get(task_id)
        _require(task, TaskStatus.PENDING, _REQUEUEABLE)
        target = TaskStatus.BLOCKED if task.broken else TaskStatus.PENDING
        return self._sorted(self._set_status(task, target))

    def cancel(self, task_id: str) -> list[str]:
        """pending, blocked, in_progress or failed -> cancelled.

        Returns the dependents that became blocked (transitively).
        """
        task = self._get(task_id)
        _require(task, TaskStatus.CANCELLED, _CANCELLABLE)
        task.held = False
        return self._sorted(self._set_status(task, TaskStatus.CANCELLED))

    def block(self, task_id: str) -> list[str]:
        """Hold a pending, in_progress or dependency-blocked task as blocked.

        Returns the dependents that became blocked. An in_progress task that is
        blocked and later unblocked goes back to pending and must be started
        again. Raises :class:`InvalidTransition` if it is already held.
        """
        task = self._get(task_id)
        _require(task, TaskStatus.BLOCKED, _BLOCKABLE)
        if task.held:
            raise InvalidTransition(task_id, task.status, TaskStatus.BLOCKED, "already held")
        task.held = True
        return self._sorted(self._set_status(task, TaskStatus.BLOCKED))

    def unblock(self, task_id: str) -> list[str]:
        """Release a task held by :meth:`block`; returns dependents that became unblocked.

        The task returns to pending unless one of its dependencies is still
        broken, in which case it stays blocked (and the hold is still cleared).
        A task blocked only by its dependencies cannot be unblocked by hand:
        :class:`InvalidTransition` names the broken dependency.
        """
        task = self._get(task_id)
        if task.status is not TaskStatus.BLOCKED or not task.held:
            reason = ""
            if task.status is TaskStatus.BLOCKED:
                culprit = next(d for d in self._g.pred[task_id] if self._tasks[d].status in _BROKEN)
                reason = f"dependency {culprit!r} is {self._tasks[culprit].status}"
            raise InvalidTransition(task_id, task.status, TaskStatus.PENDING, reason)
        task.held = False
        if task.broken:
            return []
        return self._sorted(self._set_status(task, TaskStatus.PENDING))

    # --------------------------------------------------------- snapshots

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able snapshot (deep copy of task data) that :meth:`from_dict` restores."""
        return {
            "version": 1,
            "next_seq": self._next_seq,
            "tasks": [
                {
                    "task_id": t.task_id,
                    "status": str(t.status),
                    "priority": t.priority,
                    "created_seq": t.created_seq,
                    "dependencies": list(self._g.pred[t.task_id]),
                    "held": t.held,
                    "data": copy.deepcopy(t.data),
                }
                for t in self._tasks.values()
            ],
        }

    @classmethod
    def from_dict(cls, snapshot: Mapping[str, Any]) -> TaskGraph:
        """Rebuild a graph from :meth:`to_dict` output.

        Raises ValueError naming ``snapshot`` (and the task) for malformed or
        inconsistent input, e.g. a completed task with an unfinished
        dependency, or a pending task whose dependency failed;
        :class:`UnknownDependency`, :class:`DuplicateTask` or
        :class:`DependencyCycle` for bad structure.
        """
        if not isinstance(snapshot, Mapping):
            raise ValueError(f"snapshot must be a mapping, got {type(snapshot).__name__}")
        if snapshot.get("version") != 1:
            raise ValueError(f"snapshot has unsupported version {snapshot.get('version')!r}")
        entries = snapshot.get("tasks")
        if not isinstance(entries, list):
            raise ValueError("snapshot.tasks must be a list")
        graph = cls()
        deps_of: dict[str, list[str]] = {}
        for i, entry in enumerate(entries):
            where = f"snapshot.tasks[{i}]"
            if not isinstance(entry, Mapping):
                raise ValueError(f"{where} must be a mapping")
            tid = _check_id(entry.get("task_id"), f"{where}.task_id")
            if tid in graph._tasks:
                raise DuplicateTask(tid)
            data = entry.get("data", {})
            if not isinstance(data, Mapping):
                raise ValueError(f"{where}.data must be a mapping")
            deps = entry.get("dependencies", [])
            if not isinstance(deps, list):
                raise ValueError(f"{where}.dependencies must be a list")
            held = entry.get("held", False)
            if not isinstance(held, bool):
                raise ValueError(f"{where}.held must be a bool")
            task = _Task(
                tid,
                _check_int(entry.get("priority"), f"{where}.priority"),
                _check_int(entry.get("created_seq"), f"{where}.created_seq"),
                copy.deepcopy(dict(data)),
            )
            task.status = _parse_status(entry.get("status"), f"{where}.status")
            task.held = held
            graph._tasks[tid] = task
            graph._g.add_node(tid)
            deps_of[tid] = [_check_id(d, f"{where}.dependencies") for d in dict.fromkeys(deps)]
        for tid, deps in deps_of.items():
            for dep in deps:
                if dep not in graph._tasks:
                    raise UnknownDependency(tid, dep)
                if dep == tid:
                    raise DependencyCycle([tid, tid])
                graph._g.add_edge(dep, tid)
        try:
            edges = nx.find_cycle(graph._g)
        except nx.NetworkXNoCycle:
            pass
        else:
            # find_cycle follows dep -> dependent edges; reverse to read "depends on".
            nodes = [u for u, _ in edges]
            raise DependencyCycle([nodes[0], *reversed(nodes)])
        for task in graph._tasks.values():
            _check_restored(graph, task)
            graph._counts[task.status] += 1
            graph._refresh_ready(task)
        next_seq = snapshot.get("next_seq", 0)
        graph._next_seq = max(
            _check_int(next_seq, "snapshot.next_seq"),
            max((t.created_seq + 1 for t in graph._tasks.values()), default=0),
        )
        return graph

    # ---------------------------------------------------------- internals

    def _is_completed(self, task_id: str) -> bool:
        return self._tasks[task_id].status is TaskStatus.COMPLETED

    def _sorted(self, task_ids: list[str]) -> list[str]:
        # Adjacency order depends on edge insertion history, which a restored
        # graph does not share; sorting keeps results identical after from_dict.
        return sorted(task_ids, key=lambda t: (self._tasks[t].created_seq, t))

    def _refresh_ready(self, task: _Task) -> None:
        should = task.status is TaskStatus.PENDING and task.unmet == 0
        if should and task.task_id not in self._ready:
            self._ready.add(task.task_id)
            task.gen += 1
            heapq.heappush(self._heap, (-task.priority, task.created_seq, task.task_id, task.gen))
            # Stale entries are normally dropped at the top; compact when they
            # dominate so the heap stays proportional to the ready set.
            if len(self._heap) > 4 * len(self._ready) + 64:
                self._heap = [
                    (-t.priority, t.created_seq, t.task_id, t.gen)
                    for t in (self._tasks[i] for i in self._ready)
                ]
                heapq.heapify(self._heap)
        elif not should:
            self._ready.discard(task.task_id)

    def _set_status(self, task: _Task, status: TaskStatus) -> list[str]:
        """Change one status, spread broken-ness; returns dependents whose status flipped."""
        old = task.status
        if old is status:
            return []
        task.status = status
        self._counts[old] -= 1
        self._counts[status] += 1
        self._refresh_ready(task)
        now_broken = status in _BROKEN
        if (old in _BROKEN) == now_broken:
            return []
        flipped: list[str] = []
        queue = deque([task.task_id])
        while queue:
            for succ_id in self._g.succ[queue.popleft()]:
                succ = self._tasks[succ_id]
                succ.broken += 1 if now_broken else -1
                if succ.status not in _NOT_STARTED:
                    continue
                target = TaskStatus.BLOCKED if succ.broken or succ.held else TaskStatus.PENDING
                if target is not succ.status:
                    self._counts[succ.status] -= 1
                    self._counts[target] += 1
                    succ.status = target
                    self._refresh_ready(succ)
                    flipped.append(succ_id)
                    queue.append(succ_id)
        return flipped


_PENDING_ONLY = frozenset({TaskStatus.PENDING})
_IN_PROGRESS_ONLY = frozenset({TaskStatus.IN_PROGRESS})
_FAILABLE = frozenset({TaskStatus.IN_PROGRESS, TaskStatus.BLOCKED})
_REQUEUEABLE = frozenset({TaskStatus.IN_PROGRESS, TaskStatus.FAILED})
_CANCELLABLE = frozenset(
    {TaskStatus.PENDING, TaskStatus.BLOCKED, TaskStatus.IN_PROGRESS, TaskStatus.FAILED}
)
_BLOCKABLE = frozenset({TaskStatus.PENDING, TaskStatus.IN_PROGRESS, TaskStatus.BLOCKED})


def _parse_status(value: object, name: str) -> TaskStatus:
    try:
        return TaskStatus(str(value))
    except ValueError:
        names = ", ".join(str(s) for s in TaskStatus)
        raise ValueError(f"{name} must be one of {names}, got {value!r}") from None


def _require(task: _Task, target: TaskStatus, allowed: frozenset[TaskStatus]) -> None:
    if task.status not in allowed:
        raise InvalidTransition(task.task_id, task.status, target)


def _check_restored(graph: TaskGraph, task: _Task) -> None:
    """Count a restored task's unmet and broken dependencies; ValueError naming it when
    its status cannot follow from theirs (from_dict's consistency check)."""
    tid = task.task_id
    for dep in graph._g.pred[tid]:
        dep_status = graph._tasks[dep].status
        if dep_status is not TaskStatus.COMPLETED:
            task.unmet += 1
            if task.status in (TaskStatus.IN_PROGRESS, TaskStatus.COMPLETED):
                raise ValueError(
                    f"snapshot: task {tid!r} is {task.status} "
                    f"but its dependency {dep!r} is {dep_status}"
                )
        if dep_status in _BROKEN:
            task.broken += 1
    if task.held and task.status is not TaskStatus.BLOCKED:
        raise ValueError(f"snapshot: task {tid!r} is held but {task.status}")
    if task.status is TaskStatus.PENDING and task.broken:
        raise ValueError(f"snapshot: task {tid!r} is pending but a dependency is broken")
    if task.status is TaskStatus.BLOCKED and not (task.broken or task.held):
        raise ValueError(
            f"snapshot: task {tid!r} is blocked with no broken dependency and no hold"
        )
