from __future__ import annotations

import json
from typing import Any

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from barnraise.sim.taskgraph import (
    DependencyCycle,
    DuplicateTask,
    InvalidTransition,
    TaskGraph,
    TaskGraphError,
    TaskPriority,
    TaskStatus,
    TaskView,
    UnknownDependency,
    UnknownTask,
    parse_priority,
)

S = TaskStatus


def chain(*ids: str) -> TaskGraph:
    """ids[i] depends on ids[i - 1]."""
    g = TaskGraph()
    prev: list[str] = []
    for tid in ids:
        g.add_task(tid, priority=5, dependencies=prev)
        prev = [tid]
    return g


def run(g: TaskGraph, task_id: str) -> list[str]:
    g.start(task_id)
    return g.complete(task_id)


def check_invariants(g: TaskGraph) -> None:
    """Recompute everything the graph maintains incrementally, from scratch."""
    assert nx.is_directed_acyclic_graph(g.graph)
    statuses = {t: g.status(t) for t in g}
    broken = {S.FAILED, S.CANCELLED, S.BLOCKED}
    expected_ready = set()
    for t, status in statuses.items():
        deps = g.dependencies(t)
        all_done = all(statuses[d] is S.COMPLETED for d in deps)
        any_broken = any(statuses[d] in broken for d in deps)
        view = g.get(t)
        if status in (S.PENDING, S.BLOCKED):
            assert (status is S.BLOCKED) == (any_broken or view.held), t
        if status in (S.IN_PROGRESS, S.COMPLETED):
            assert all_done, t
        if view.held:
            assert status is S.BLOCKED
        if status is S.PENDING and all_done:
            expected_ready.add(t)
    assert set(g.ready()) == expected_ready
    counts = g.counts()
    for status in TaskStatus:
        assert counts[str(status)] == sum(1 for s in statuses.values() if s is status)
    best = g.next_ready()
    assert best == (g.ready()[0] if expected_ready else None)


# ----------------------------------------------------------------- enums


def test_priorities_and_parse_priority() -> None:
    assert [int(p) for p in TaskPriority] == [1, 5, 8, 10]
    assert parse_priority("HIGH") == 8
    assert parse_priority(" critical ") == 10
    assert parse_priority(3) == 3
    for bad in ["urgent", True, 2.5, None]:
        with pytest.raises(ValueError, match="priority must be an integer or one of low"):
            parse_priority(bad)


def test_errors_are_value_errors() -> None:
    for cls in (UnknownTask, DuplicateTask, UnknownDependency, DependencyCycle, InvalidTransition):
        assert issubclass(cls, TaskGraphError)
    assert issubclass(TaskGraphError, ValueError)


# ------------------------------------------------------------- add_task


def test_add_task_and_queries() -> None:
    g = TaskGraph()
    assert g.add_task("a", priority=TaskPriority.HIGH, data={"kind": "build"}) is S.PENDING
    assert g.add_task("b", priority=1, dependencies=["a", "a"]) is S.PENDING
    assert len(g) == 2 and "a" in g and "zz" not in g
    assert list(g) == ["a", "b"]
    assert g.dependencies("b") == ["a"]  # duplicates merged
    assert g.dependents("a") == ["b"]
    view = g.get("a")
    assert view == TaskView(
        task_id="a",
        status=S.PENDING,
        priority=8,
        created_seq=0,
        dependencies=(),
        dependents=("b",),
        held=False,
        ready=True,
        data={"kind": "build"},
    )
    view.data["kind"] = "changed"
    assert g.get("a").data == {"kind": "build"}  # a copy
    assert g.get("b").created_seq == 1
    assert g.is_ready("a") and not g.is_ready("b")
    assert g.tasks() == ["a", "b"]
    assert g.tasks(S.PENDING) == ["a", "b"]
    assert g.tasks("completed") == []
    assert g.counts() == {
        "pending": 2,
        "in_progress": 0,
        "completed": 0,
        "failed": 0,
        "blocked": 0,
        "cancelled": 0,
    }


def test_created_seq_explicit_and_auto() -> None:
    g = TaskGraph()
    g.add_task("a", created_seq=10)
    g.add_task("b")
    g.add_task("c", created_seq=3)
    assert [g.get(t).created_seq for t in "abc"] == [10, 11, 3]


def test_graph_view_is_read_only() -> None:
    g = chain("a", "b")
    view = g.graph
    assert list(view.edges) == [("a", "b")]
    with pytest.raises(nx.NetworkXError):
        view.add_edge("b", "a")


def snapshot(g: TaskGraph) -> str:
    return json.dumps(
        {"dict": g.to_dict(), "ready": g.ready(), "counts": g.counts()}, sort_keys=True
    )


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "message"),
    [
        (("",), {}, ValueError, "task_id must be a non-empty string"),
        ((5,), {}, ValueError, "task_id must be a non-empty string, got 5"),
        (("a",), {}, DuplicateTask, "task 'a' already exists"),
        (("n",), {"priority": "high"}, ValueError, "priority must be an integer"),
        (("n",), {"priority": True}, ValueError, "priority must be an integer"),
        (("n",), {"created_seq": 1.5}, ValueError, "created_seq must be an integer"),
        (("n",), {"dependencies": "a"}, ValueError, "dependencies must be a list of task ids"),
        (("n",), {"dependencies": 3}, ValueError, "dependencies must be a list"),
        (("n",), {"dependencies": ["a", 7]}, ValueError, "dependencies must be a non-empty string"),
        (("n",), {"data": ["x"]}, ValueError, "data must be a mapping, got list"),
        (("n",), {"dependencies": ["a", "n"]}, DependencyCycle, "dependency cycle: n -> n"),
        (
            ("n",),
            {"dependencies": ["a", "ghost"]},
            UnknownDependency,
            "task 'n' depends on unknown task 'ghost'",
        ),
    ],
)
def test_add_task_errors_leave_graph_unchanged(
    args: tuple[Any, ...], kwargs: dict[str, Any], error: type[Exception], message: str
) -> None:
    g = chain("a", "b")
    before = snapshot(g)
    with pytest.raises(error, match=message):
        g.add_task(*args, **kwargs)
    assert snapshot(g) == before


def test_unknown_dependency_attributes() -> None:
    g = TaskGraph()
    with pytest.raises(UnknownDependency) as info:
        g.add_task("x", dependencies=["y"])
    assert (info.value.task_id, info.value.dependency) == ("x", "y")


# ------------------------------------------------------- add_dependency


def test_add_dependency_refuses_cycle_with_named_path() -> None:
    g = chain("a", "b", "c")  # c depends on b depends on a
    before = snapshot(g)
    with pytest.raises(DependencyCycle, match=r"^dependency cycle: a -> c -> b -> a$") as info:
        g.add_dependency("a", "c")
    assert info.value.cycle == ["a", "c", "b", "a"]
    with pytest.raises(DependencyCycle, match="b -> b"):
        g.add_dependency("b", "b")
    assert snapshot(g) == before


def test_would_cycle_and_cycle_through() -> None:
    g = chain("a", "b", "c")
    g.add_task("d")
    assert g.would_cycle("a", "c")
    assert g.cycle_through("a", "b") == ["a", "b", "a"]
    assert g.cycle_through("a", "a") == ["a", "a"]
    assert not g.would_cycle("c", "a")  # already implied, not a cycle
    assert g.cycle_through("d", "c") is None
    with pytest.raises(UnknownTask, match="unknown task 'zz'"):
        g.would_cycle("zz", "a")
    with pytest.raises(UnknownDependency, match="task 'a' depends on unknown task 'zz'"):
        g.cycle_through("a", "zz")


def test_add_dependency_updates_readiness() -> None:
    g = TaskGraph()
    g.add_task("a")
    g.add_task("b")
    assert g.ready() == ["a", "b"]
    assert g.add_dependency("b", "a") == []
    assert g.ready() == ["a"]
    assert g.add_dependency("b", "a") == []  # existing edge: no-op
    assert g.dependencies("b") == ["a"]
    assert run(g, "a") == ["b"]
    g.add_task("c")
    assert g.add_dependency("c", "a") == []  # on a completed task: still ready
    assert g.is_ready("c")


def test_add_dependency_on_broken_task_blocks_transitively() -> None:
    g = TaskGraph()
    g.add_task("a")
    g.start("a")
    g.fail("a")
    g.add_task("x")
    g.add_task("y", dependencies=["x"])
    assert g.add_dependency("x", "a") == ["x", "y"]
    assert g.status("x") is S.BLOCKED and g.status("y") is S.BLOCKED
    check_invariants(g)


def test_add_dependency_errors() -> None:
    g = chain("a", "b")
    g.add_task("c")
    g.start("a")
    before = snapshot(g)
    with pytest.raises(UnknownTask, match="unknown task 'zz'"):
        g.add_dependency("zz", "a")
    with pytest.raises(UnknownDependency, match="task 'b' depends on unknown task 'zz'"):
        g.add_dependency("b", "zz")
    with pytest.raises(TaskGraphError, match="task 'a' is in_progress: only a pending or blocked"):
        g.add_dependency("a", "c")
    assert snapshot(g) == before


# ----------------------------------------------------------- transitions


def test_ready_order_priority_then_seq_then_id() -> None:
    g = TaskGraph()
    g.add_task("low", priority=1)
    g.add_task("hi-late", priority=8, created_seq=20)
    g.add_task("hi-early", priority=8, created_seq=5)
    g.add_task("hi-tie-b", priority=8, created_seq=5)
    g.add_task("crit", priority=10)
    assert g.ready() == ["crit", "hi-early", "hi-tie-b", "hi-late", "low"]
    assert g.next_ready() == "crit"
    assert g.start_next() == "crit"
    assert g.status("crit") is S.IN_PROGRESS
    assert [g.start_next() for _ in range(4)] == ["hi-early", "hi-tie-b", "hi-late", "low"]
    assert g.start_next() is None and g.next_ready() is None


def test_start_requires_ready() -> None:
    g = chain("a", "b")
    g.add_task("c", dependencies=["a", "b"])
    with pytest.raises(
        InvalidTransition, match=r"task 'c': cannot go pending -> in_progress: waiting on 'a', 'b'"
    ):
        g.start("c")
    run(g, "a")
    with pytest.raises(InvalidTransition, match=r"waiting on 'b'$"):
        g.start("c")
    with pytest.raises(
        InvalidTransition, match=r"task 'a': cannot go completed -> in_progress$"
    ) as info:
        g.start("a")
    assert (info.value.from_status, info.value.to_status) == (S.COMPLETED, S.IN_PROGRESS)
    with pytest.raises(UnknownTask):
        g.start("nope")


def test_complete_returns_newly_ready_best_first() -> None:
    g = TaskGraph()
    g.add_task("root")
    g.add_task("other")
    g.add_task("x", priority=1, dependencies=["root"])
    g.add_task("y", priority=9, dependencies=["root"])
    g.add_task("z", priority=5, dependencies=["root", "other"])
    assert run(g, "root") == ["y", "x"]  # z still waits on other
    assert run(g, "other") == ["z"]
    assert g.status("root") is S.COMPLETED
    with pytest.raises(InvalidTransition, match="cannot go completed -> completed"):
        g.complete("root")
    with pytest.raises(InvalidTransition, match="cannot go pending -> completed"):
        g.complete("x")


def test_fail_blocks_dependents_transitively_and_requeue_releases_them() -> None:
    g = chain("a", "b", "c")
    g.add_task("d", dependencies=["a"])
    g.add_task("e")
    g.add_task("f", dependencies=["c", "e"])
    g.start("a")
    assert g.fail("a") == ["b", "c", "d", "f"]
    for t in "bcdf":
        assert g.status(t) is S.BLOCKED
    assert g.ready() == ["e"]
    check_invariants(g)
    assert g.requeue("a") == ["b", "c", "d", "f"]
    assert g.status("a") is S.PENDING and g.ready() == ["a", "e"]
    check_invariants(g)
    with pytest.raises(InvalidTransition, match="cannot go pending -> failed"):
        g.fail("a")


def test_diamond_stays_blocked_until_both_sides_clear() -> None:
    g = TaskGraph()
    g.add_task("l")
    g.add_task("r")
    g.add_task("d", dependencies=["l", "r"])
    for t in ("l", "r"):
        g.start(t)
        g.fail(t)
    assert g.status("d") is S.BLOCKED
    assert g.requeue("l") == []
    assert g.status("d") is S.BLOCKED
    assert g.requeue("r") == ["d"]
    check_invariants(g)


def test_requeue_in_progress_for_retry() -> None:
    g = chain("a", "b")
    g.start("a")
    assert g.requeue("a") == []
    assert g.status("a") is S.PENDING and g.ready() == ["a"]
    with pytest.raises(InvalidTransition, match="cannot go pending -> pending"):
        g.requeue("a")


def test_cancel() -> None:
    g = chain("a", "b", "c")
    g.add_task("solo")
    assert g.cancel("b") == ["c"]
    assert g.status("b") is S.CANCELLED and g.status("c") is S.BLOCKED
    assert g.cancel("solo") == []
    assert "solo" not in g.ready()
    run(g, "a")
    assert g.status("c") is S.BLOCKED
    with pytest.raises(InvalidTransition, match="cannot go cancelled -> cancelled"):
        g.cancel("b")
    with pytest.raises(InvalidTransition, match="cannot go completed -> cancelled"):
        g.cancel("a")
    assert g.cancel("c") == []  # blocked -> cancelled
    g2 = chain("p", "q")
    g2.start("p")
    assert g2.cancel("p") == ["q"]  # in_progress -> cancelled
    g3 = chain("p", "q")
    g3.start("p")
    g3.fail("p")
    assert g3.cancel("p") == []  # failed -> cancelled: q was already blocked
    assert g3.status("q") is S.BLOCKED


def test_block_and_unblock_by_hand() -> None:
    g = chain("a", "b", "c")
    assert g.block("a") == ["b", "c"]
    assert g.status("a") is S.BLOCKED and g.get("a").held
    assert g.ready() == []
    with pytest.raises(
        InvalidTransition, match="task 'a': cannot go blocked -> blocked: already held"
    ):
        g.block("a")
    assert g.unblock("a") == ["b", "c"]
    assert g.ready() == ["a"]
    check_invariants(g)


def test_block_in_progress_returns_to_pending_on_unblock() -> None:
    g = chain("a", "b")
    g.start("a")
    assert g.block("a") == ["b"]
    assert g.unblock("a") == ["b"]
    assert g.status("a") is S.PENDING and g.is_ready("a")


def test_block_a_dependency_blocked_task_then_unblock_keeps_it_blocked() -> None:
    g = chain("a", "b")
    g.start("a")
    g.fail("a")
    assert g.block("b") == []  # already blocked by a; now also held
    assert g.get("b").held
    assert g.unblock("b") == []
    assert g.status("b") is S.BLOCKED and not g.get("b").held
    assert g.requeue("a") == ["b"]
    check_invariants(g)


def test_unblock_errors_explain() -> None:
    g = chain("a", "b")
    with pytest.raises(InvalidTransition, match=r"task 'a': cannot go pending -> pending$"):
        g.unblock("a")
    g.start("a")
    g.fail("a")
    with pytest.raises(
        InvalidTransition, match="cannot go blocked -> pending: dependency 'a' is failed"
    ):
        g.unblock("b")
    with pytest.raises(InvalidTransition, match="cannot go completed -> blocked"):
        c = chain("x")
        run(c, "x")
        c.block("x")


def test_fail_a_blocked_task() -> None:
    g = chain("a", "b")
    g.block("a")
    assert g.fail("a") == []
    assert g.status("a") is S.FAILED and not g.get("a").held
    assert g.status("b") is S.BLOCKED
    assert g.requeue("a") == ["b"]
    check_invariants(g)


def test_requeue_a_failed_task_with_a_broken_dependency_goes_to_blocked() -> None:
    g = chain("a", "b")
    g.block("b")
    g.fail("b")  # failed straight from blocked
    g.start("a")
    g.fail("a")
    assert g.requeue("b") == []
    assert g.status("b") is S.BLOCKED
    check_invariants(g)


def test_heap_skips_stale_entries() -> None:
    g = TaskGraph()
    g.add_task("top", priority=10)
    g.add_task("gate", priority=1)
    g.add_task("mid", priority=5)
    g.add_dependency("top", "gate")  # top leaves the ready set
    assert g.next_ready() == "mid"
    run(g, "gate")  # top is ready again
    assert g.next_ready() == "top"
    assert g.start_next() == "top"
    assert g.start_next() == "mid"
    assert g.start_next() is None


def test_heap_stays_small_under_churn() -> None:
    g = TaskGraph()
    g.add_task("t")
    for _ in range(1000):
        g.start("t")
        g.requeue("t")
    assert len(g._heap) < 100  # stale entries are compacted
    assert g.next_ready() == "t"


# -------------------------------------------------------------- snapshots


def test_to_dict_from_dict_round_trip_preserves_behaviour() -> None:
    g = chain("a", "b", "c")
    g.add_task("d", priority=9, dependencies=["a"], data={"region": {"x": 1}})
    g.add_task("e")
    g.add_task("h")
    run(g, "a")
    g.start("d")
    g.fail("d")
    g.block("h")
    data = g.to_dict()
    json.dumps(data)  # JSON-able
    restored = TaskGraph.from_dict(data)
    assert restored.to_dict() == data
    assert restored.ready() == g.ready()
    assert restored.counts() == g.counts()
    assert restored.get("h").held
    check_invariants(restored)
    assert restored.requeue("d") == g.requeue("d")
    restored.add_task("later")
    g.add_task("later")
    assert restored.get("later").created_seq == g.get("later").created_seq
    data["tasks"][3]["data"]["region"]["x"] = 99
    assert restored.get("d").data == {"region": {"x": 1}}  # deep copied


def test_links_agree_with_dependents_and_is_ready_before_and_after_a_restore() -> None:
    g = chain("a", "b", "c")
    g.add_task("d", dependencies=["a"])
    g.add_task("e", dependencies=["b", "a"])
    run(g, "a")
    for graph in (g, TaskGraph.from_dict(g.to_dict())):
        links = graph.links()
        assert list(links) == list(graph)
        assert links == {t: (tuple(graph.dependents(t)), graph.is_ready(t)) for t in graph}
    assert g.links()["a"] == (("b", "d", "e"), False)
    assert g.links()["b"] == (("c", "e"), True)


def _entry(
    tid: str, status: str = "pending", deps: list[str] | None = None, **extra: Any
) -> dict[str, Any]:
    return {
        "task_id": tid,
        "status": status,
        "priority": 5,
        "created_seq": 0,
        "dependencies": deps or [],
        "held": False,
        "data": {},
        **extra,
    }


@pytest.mark.parametrize(
    ("snap", "error", "message"),
    [
        ([], ValueError, "snapshot must be a mapping, got list"),
        ({"version": 2, "tasks": []}, ValueError, "snapshot has unsupported version 2"),
        ({"version": 1, "tasks": {}}, ValueError, "snapshot.tasks must be a list"),
        ({"version": 1, "tasks": [5]}, ValueError, r"snapshot.tasks\[0\] must be a mapping"),
        ({"version": 1, "tasks": [_entry("")]}, ValueError, r"snapshot.tasks\[0\].task_id"),
        (
            {"version": 1, "tasks": [_entry("a", "done")]},
            ValueError,
            r"snapshot.tasks\[0\].status must be one of",
        ),
        (
            {"version": 1, "tasks": [_entry("a", priority="x")]},
            ValueError,
            r"tasks\[0\].priority must be an integer",
        ),
        (
            {"version": 1, "tasks": [_entry("a", data=[])]},
            ValueError,
            r"tasks\[0\].data must be a mapping",
        ),
        (
            {"version": 1, "tasks": [_entry("a", dependencies="b")]},
            ValueError,
            r"tasks\[0\].dependencies must be a list",
        ),
        (
            {"version": 1, "tasks": [_entry("a", held=1)]},
            ValueError,
            r"tasks\[0\].held must be a bool",
        ),
        (
            {"version": 1, "tasks": [_entry("a"), _entry("a")]},
            DuplicateTask,
            "task 'a' already exists",
        ),
        ({"version": 1, "tasks": [_entry("a", deps=["z"])]}, UnknownDependency, "unknown task 'z'"),
        ({"version": 1, "tasks": [_entry("a", deps=["a"])]}, DependencyCycle, "a -> a"),
        (
            {
                "version": 1,
                "tasks": [
                    _entry("a", deps=["b"]),
                    _entry("b", deps=["c"]),
                    _entry("c", deps=["a"]),
                ],
            },
            DependencyCycle,
            "dependency cycle: a -> b -> c -> a",
        ),
        (
            {"version": 1, "tasks": [_entry("a"), _entry("b", "completed", ["a"])]},
            ValueError,
            "snapshot: task 'b' is completed but its dependency 'a' is pending",
        ),
        (
            {"version": 1, "tasks": [_entry("a", "failed"), _entry("b", "pending", ["a"])]},
            ValueError,
            "snapshot: task 'b' is pending but a dependency is broken",
        ),
        (
            {"version": 1, "tasks": [_entry("a", "blocked")]},
            ValueError,
            "snapshot: task 'a' is blocked with no broken dependency and no hold",
        ),
        (
            {"version": 1, "tasks": [_entry("a", held=True)]},
            ValueError,
            "snapshot: task 'a' is held but pending",
        ),
        (
            {"version": 1, "tasks": [], "next_seq": "x"},
            ValueError,
            "snapshot.next_seq must be an integer",
        ),
    ],
)
def test_from_dict_errors(snap: Any, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        TaskGraph.from_dict(snap)


# ------------------------------------------------------------- properties


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 12),
    ops=st.lists(st.tuples(st.integers(0, 11), st.integers(0, 11), st.booleans()), max_size=40),
)
def test_property_random_additions_never_create_a_cycle(
    n: int, ops: list[tuple[int, int, bool]]
) -> None:
    g = TaskGraph()
    for i in range(n):
        g.add_task(f"t{i}")
    for a, b, as_new_task in ops:
        before = snapshot(g)
        try:
            if as_new_task:
                # a new task depending on a possibly unknown one
                g.add_task(f"n{a}_{b}_{len(g)}", dependencies=[f"t{a}", f"t{b}"])
            else:
                g.add_dependency(f"t{a % n}", f"t{b % n}")
        except DependencyCycle as exc:
            assert exc.cycle[0] == exc.cycle[-1]
            # every consecutive pair is a real (or the refused) dependency edge
            for x, y in zip(exc.cycle[1:], exc.cycle[2:], strict=False):
                assert y in g.dependencies(x)
            assert snapshot(g) == before
        except UnknownDependency:
            assert snapshot(g) == before
        assert nx.is_directed_acyclic_graph(g.graph)
    check_invariants(g)


@st.composite
def random_dags(draw: st.DrawFn) -> list[tuple[str, int, list[str]]]:
    n = draw(st.integers(1, 25))
    tasks: list[tuple[str, int, list[str]]] = []
    for i in range(n):
        deps = draw(st.lists(st.integers(0, i - 1), max_size=min(i, 4), unique=True)) if i else []
        tasks.append((f"t{i}", draw(st.integers(0, 3)), [f"t{d}" for d in deps]))
    return tasks


@settings(max_examples=60, deadline=None)
@given(random_dags())
def test_property_completing_ready_tasks_completes_the_dag(
    tasks: list[tuple[str, int, list[str]]],
) -> None:
    g = TaskGraph()
    for tid, prio, deps in tasks:
        g.add_task(tid, priority=prio, dependencies=deps)
    order: list[str] = []
    while (started := g.start_next()) is not None:
        order.append(started)
        newly = g.complete(started)
        assert all(g.is_ready(t) for t in newly)
        check_invariants(g)
    assert len(order) == len(tasks)
    assert g.counts()["completed"] == len(tasks)
    position = {t: i for i, t in enumerate(order)}
    for tid, _, deps in tasks:
        assert all(position[d] < position[tid] for d in deps)


_ACTIONS = ["start", "complete", "fail", "requeue", "cancel", "block", "unblock", "add_dep", "add"]


@settings(max_examples=80, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(_ACTIONS), st.integers(0, 9), st.integers(0, 9)),
        max_size=60,
    )
)
def test_property_any_sequence_keeps_state_consistent(ops: list[tuple[str, int, int]]) -> None:
    g = TaskGraph()
    for i in range(4):
        g.add_task(f"t{i}", priority=i % 3, dependencies=[f"t{i - 1}"] if i else [])
    for action, a, b in ops:
        ids = list(g)
        ta, tb = ids[a % len(ids)], ids[b % len(ids)]
        before = snapshot(g)
        try:
            if action == "add":
                g.add_task(f"t{len(ids)}", priority=a % 4, dependencies=[ta, tb])
            elif action == "add_dep":
                g.add_dependency(ta, tb)
            else:
                getattr(g, action)(ta)
        except TaskGraphError:
            assert snapshot(g) == before
        check_invariants(g)
    restored = TaskGraph.from_dict(g.to_dict())
    assert snapshot(restored) == snapshot(g)
