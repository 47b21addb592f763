"""Seeded fault injection (barnraise.sim.dispatch.faults) and the protocol that survives it.

The plan of issue 11 is ``drop=0.05,duplicate=0.02,delay=0.5,crash=0.001``: kernel_build
must reach 100% with every task completed exactly once, in both modes. A few seeds
run by default; ``BARNRAISE_DEEP=1`` runs the full campaign (50 deterministic seeds,
5 realtime).
"""

from __future__ import annotations

import os
from collections import Counter

import pytest

import barnraise
from barnraise.actors.world import Simulation
from barnraise.cli import main
from barnraise.sim.dispatch import Faults, FaultsError
from barnraise.sim.trace import FAULT

PLAN = "drop=0.05,duplicate=0.02,delay=0.5,crash=0.001"
DEEP = os.environ.get("BARNRAISE_DEEP") == "1"


# -- the plan --------------------------------------------------------------------------


def test_a_plan_parses_from_text_and_from_a_dict() -> None:
    plan = Faults.parse("drop=0.05, duplicate=0.02,delay=0.5,reorder=0.01,crash=0.001")
    assert plan == Faults(drop=0.05, duplicate=0.02, delay=0.5, reorder=0.01, crash=0.001)
    assert Faults.parse({"drop": 0.05}) == Faults(drop=0.05)
    assert str(Faults.parse({"drop": 0.05, "delay": 1})) == "drop=0.05,delay=1"


@pytest.mark.parametrize("spec", [None, "", "drop=0", {"delay": 0}])
def test_a_plan_that_injects_nothing_is_no_plan(spec: object) -> None:
    assert Faults.parse(spec) is None  # type: ignore[arg-type]


@pytest.mark.parametrize(("spec", "words"), [
    ("boom=1", "unknown boom; known: drop"),
    ({"drop": 0.1, "lag": 2}, "unknown lag"),
    ("drop=1.5", "drop must be from 0 to 1"),
    ("drop=-0.1", "drop must be from 0 to 1"),
    ("delay=nan", "delay must be from 0 to 3600"),
    ("delay=inf", "delay must be from 0 to 3600"),
    ("crash=x", "crash must be a number, got 'x'"),
    ("drop", "expected NAME=VALUE"),
    ({"drop": True}, "drop must be a number"),
    ("drop=0.1,retry=0", "retry must be > 0"),
    (3, "faults must be a string"),
])
def test_a_bad_plan_is_refused_naming_what_is_wrong(spec: object, words: str) -> None:
    with pytest.raises(FaultsError, match=words):
        Faults.parse(spec)  # type: ignore[arg-type]


def test_a_simulation_refuses_a_bad_plan_before_it_starts() -> None:
    with pytest.raises(ValueError, match="unknown boom"):
        Simulation(seed=0, faults="boom=1")


def test_without_a_plan_the_routing_is_the_plain_one() -> None:
    with Simulation(seed=0) as simu:
        d = simu.dispatcher
        assert d.faults is None and d.injector is None
        # no instance attribute shadows the class's routing methods
        assert "_route_one" not in vars(d) and "_route_batch" not in vars(d)


# -- what is injected is in the trace, and replays -----------------------------------------


def _fault_counts(result: barnraise.RunResult) -> Counter[str]:
    return Counter(r.type for r in result.trace.records(FAULT))


def test_every_injected_fault_is_a_trace_record_and_the_summary_counts_them() -> None:
    result = barnraise.run("kernel_build", seed=2,
                           faults="drop=0.05,duplicate=0.02,delay=0.5,reorder=0.02")
    faults = result.summary["faults"]
    counts = _fault_counts(result)
    assert faults["plan"] == "drop=0.05,duplicate=0.02,delay=0.5,reorder=0.02"
    assert faults["dropped"] == counts["drop"] > 0
    assert faults["duplicated"] == counts["duplicate"] > 0
    assert faults["delayed"] == counts["delay"] > 0
    assert faults["reordered"] == counts["reorder"] > 0
    assert result.success, result.summary


def test_a_run_without_a_plan_reports_no_faults() -> None:
    result = barnraise.run("kernel_build", seed=0, grid_size=60)
    assert result.summary["faults"] is None
    assert not _fault_counts(result)


def test_a_failing_faulted_run_replays_exactly() -> None:
    # Six letters in ten lost is more than the protocol is built for: the crew never
    # gets going. The same seed and plan fail the same way, to the last record.
    first = barnraise.run("kernel_build", seed=0, faults="drop=0.6", grid_size=60)
    again = barnraise.run("kernel_build", seed=0, faults="drop=0.6", grid_size=60)
    assert not first.success
    assert not again.success
    assert again.trace_digest == first.trace_digest
    assert again.summary["faults"] == first.summary["faults"]
    other = barnraise.run("kernel_build", seed=1, faults="drop=0.6", grid_size=60)
    assert other.trace_digest != first.trace_digest


# -- the protocol survives -------------------------------------------------------------------


def test_a_request_sent_twice_is_served_once_and_answered_alike() -> None:
    with Simulation(seed=0, faults="delay=0.01") as simu:
        simu.client("host")
        d = simu.dispatcher
        actor = d.actor("host")
        cid = d.next_id()
        answers = []
        for _ in range(2):  # the same request, with the same correlation id, twice
            actor.expect(cid, "coordinator")  # type: ignore[attr-defined]
            d.send(d.message("host", "coordinator", "coordination_request",
                             {"tool": "session_create",
                              "args": {"session_name": "twice", "grid_size": 10}},
                             correlation_id=cid))
            simu.advance(0.1)
            answers.append(actor.take_reply(cid).content)  # type: ignore[attr-defined]
        assert len(simu.sessions()) == 1
        assert answers[0] == answers[1]
        assert answers[0]["session_id"] == simu.sessions()[0]


def _exactly_once(result: barnraise.RunResult) -> None:
    s, m = result.summary, result.summary["metrics"]
    assert result.success, (s["run_end"], s["waiting"], s["faults"], m)
    assert s["completion_percent"] == 100.0
    assert m["completed_twice"] == []
    assert m["completion_events"] == s["tasks_completed"]
    completed = Counter(r.content_obj()["task_id"] for r in result.trace.records("event")
                        if r.type == "task_completed")
    assert set(completed.values()) == {1}


SEEDS = range(50) if DEEP else range(4)


@pytest.mark.parametrize("seed", SEEDS)
def test_kernel_build_completes_every_task_exactly_once_under_the_plan(seed: int) -> None:
    _exactly_once(barnraise.run("kernel_build", seed=seed, faults=PLAN, record=False))


@pytest.mark.parametrize("seed", range(5) if DEEP else range(1))
def test_kernel_build_survives_the_plan_in_realtime(seed: int) -> None:
    _exactly_once(barnraise.run("kernel_build", seed=seed, mode="realtime", faults=PLAN,
                                record=False))


#: The plan every shipped scenario is to survive (issue 27): the one above with reorders.
FULL_PLAN = "drop=0.05,duplicate=0.02,delay=0.5,reorder=0.01,crash=0.001"
#: Scenarios made to survive FULL_PLAN, with the parameters they run at here (their
#: defaults: each run costs well under a CPU second).
_SURVIVORS_A: list[tuple[str, dict[str, object]]] = [
    ("best_of_n", {}), ("writer_critic", {}), ("hitl_approval", {}), ("plan_run", {}),
]
_SURVIVOR_SEEDS = range(20) if DEEP else range(3)
_SURVIVOR_REALTIME_SEEDS = range(3) if DEEP else range(1)


def _survivor_cases(survivors: list[tuple[str, dict[str, object]]]) -> list[object]:
    cases = []
    for name, params in survivors:
        cases += [pytest.param(name, params, "deterministic", seed, id=f"{name}-{seed}")
                  for seed in _SURVIVOR_SEEDS]
        cases += [pytest.param(name, params, "realtime", seed, id=f"{name}-realtime-{seed}")
                  for seed in _SURVIVOR_REALTIME_SEEDS]
    return cases


@pytest.mark.parametrize(("name", "params", "mode", "seed"), _survivor_cases(_SURVIVORS_A))
def test_every_scenario_survives_the_plan(name: str, params: dict[str, object], mode: str,
                                          seed: int) -> None:
    result = barnraise.run(name, seed=seed, mode=mode, faults=FULL_PLAN, **params)
    s = result.summary
    assert s["faults"]["plan"] == FULL_PLAN
    assert result.success, (s["run_end"], s["waiting"], s["faults"], s["metrics"])
    completed = Counter(r.content_obj()["task_id"] for r in result.trace.records("event")
                        if r.type == "task_completed")
    assert set(completed.values()) <= {1}, completed  # no task completed twice
    assert sum(completed.values()) == s["tasks_completed"]


def test_the_check_fails_a_task_completed_twice() -> None:
    from barnraise.scenarios import kernel_build

    summary = barnraise.run("kernel_build", seed=0, grid_size=60).summary
    assert kernel_build.check(summary)
    twice = {**summary, "metrics": {**summary["metrics"], "completed_twice": ["task_x"]}}
    assert not kernel_build.check(twice)
    fewer = {**summary, "metrics": {**summary["metrics"],
                                    "completion_events": summary["tasks_completed"] - 1}}
    assert not kernel_build.check(fewer)


# -- the command line ---------------------------------------------------------------------


def test_the_cli_runs_with_faults_and_says_what_it_injected(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "kernel_build", "--param", "grid_size=60", "--faults",
                 "drop=0.05,delay=0.2"]) == 0
    out = capsys.readouterr().out
    assert "faults (drop=0.05,delay=0.2):" in out and "dropped" in out


@pytest.mark.parametrize("spec", ["boom=1", "drop=2", "delay=-1", "drop"])
def test_the_cli_refuses_a_bad_plan_with_exit_2(spec: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "kernel_build", "--faults", spec]) == 2
    err = capsys.readouterr().err
    assert err.startswith("barnraise: error: faults") and err.count("\n") == 1


# -- what makes the scenarios survive: each mechanism at a seed where the plan needs it --------


def _full(name: str, seed: int) -> barnraise.RunResult:
    result = barnraise.run(name, seed=seed, faults=FULL_PLAN)
    assert result.success, result.summary["metrics"]
    return result


def _calls(result: barnraise.RunResult, caller: str, tool: str) -> list[float]:
    return [r.t for r in result.trace.records("deliver")
            if r.sender == caller and r.type == "coordination_request"
            and r.content_obj().get("tool") == tool]


def test_a_lost_delegation_result_is_read_back_from_the_task_queue() -> None:
    # best_of_n at seed 0 loses a task_result on its way to the lead; the lead's ledger,
    # hearing nothing for 4 x retry, reads the finished task from the queue.
    result = _full("best_of_n", 0)
    lost = [r.t for r in result.trace.records(FAULT)
            if r.type == "drop" and r.recipient == "lead-1"
            and r.content_obj()["type"] == "task_result"]
    assert lost
    assert [t for t in _calls(result, "lead-1", "task_get_queue") if t > lost[0]]


def test_a_critic_asked_again_answers_from_what_it_said() -> None:
    # writer_critic at seed 1: some review or verify requests reach the critic twice
    # (resent after a loss, or duplicated); each is served once.
    result = _full("writer_critic", 1)
    asked: Counter[tuple[str, str]] = Counter()
    for r in result.trace.records("deliver"):
        content = r.content_obj()
        if r.recipient == "critic-1" and content.get("kind") == "review_request":
            asked[(r.sender, str(content["request_id"]))] += 1
    assert max(asked.values()) > 1
    assert result.summary["metrics"]["reviews"] == len(asked)


def test_a_restarted_writers_requests_are_its_own_not_its_predecessors() -> None:
    # writer_critic at seed 15: writer-1 crashes and restarts, counting its serials from
    # 1 again. Its requests name its incarnation, so the critic reviews them anew
    # instead of answering them with what it kept for its predecessor's same serials.
    result = _full("writer_critic", 15)
    [crash] = [r for r in result.trace.records(FAULT) if r.type == "crash"]
    assert crash.sender == "writer-1"
    asked: Counter[tuple[str, str]] = Counter()
    after: set[str] = set()
    for r in result.trace.records("deliver"):
        content = r.content_obj()
        if r.recipient == "critic-1" and content.get("kind") == "review_request":
            asked[(r.sender, str(content["request_id"]))] += 1
            if r.sender == "writer-1" and r.t > crash.t:
                after.add(str(content["request_id"]))
    assert after and all(i.startswith("writer-1.1#") for i in after)
    assert result.summary["metrics"]["reviews"] == len(asked)


def test_a_plan_runner_restarted_mid_plan_picks_its_plan_up() -> None:
    # plan_run at seed 6: the planner crashes 18.7 s in, with steps running. Its next
    # incarnation takes its plan events from the session and its tasks from the queue:
    # nothing is started or delegated twice.
    result = _full("plan_run", 6)
    crashes = [r.sender for r in result.trace.records(FAULT) if r.type == "crash"]
    assert crashes == ["planner-1"]
    events = [tuple(e) for e in result.summary["metrics"]["step_events"]]
    assert len(events) == len(set(events)) and events.count(("plan.started", None)) == 1
    assert result.summary["tasks_completed"] == 6


def test_a_member_restarted_before_the_start_barrier_arrives_there() -> None:
    # plan_run at seed 18: the approver crashes 1.6 s in, before its arrival at the
    # crew's 'ready' barrier was recorded; restarted, it arrives, and the crew goes on.
    result = _full("plan_run", 18)
    crash = next(r for r in result.trace.records(FAULT) if r.type == "crash")
    assert crash.sender == "approver-1"
    released = [r.t for r in result.trace.records("event") if r.type == "barrier_released"
                and r.content_obj()["barrier_id"] == "ready"]
    assert released and released[0] > crash.t


def _member(simu: Simulation) -> barnraise.actors.world.Client:
    host = simu.client("host")
    made = host.call("session_create", session_name="s", grid_size=10)
    person = simu.client("person")
    assert person.call("session_join", session_id=made["session_id"],
                       agent_name="P", role="builder")["success"]
    return person


def test_a_member_clients_lost_call_is_sent_again_until_answered() -> None:
    with Simulation(seed=0, faults="drop=0.5") as simu:
        person = _member(simu)
        answers = [person.call("session_get_state", include=["progress"]) for _ in range(6)]
        assert all(a["success"] for a in answers)
        lost = [r for r in simu.dispatcher.trace.records(FAULT)
                if r.type == "drop" and r.sender == "person"]
        assert lost  # some were lost, and every call was answered all the same


def test_a_call_its_client_gave_up_on_is_not_sent_again() -> None:
    with Simulation(seed=0, faults="drop=0.5") as simu:
        person = _member(simu)
        simu.dispatcher.injector.faults = Faults(drop=1.0)  # type: ignore[union-attr]
        pending = person.submit("session_get_state", include=["progress"])
        assert pending.result(timeout=5.0)["error"] == "no_reply"
        tried = sum(1 for r in simu.dispatcher.trace.records(FAULT)
                    if r.type == "drop" and r.sender == "person")
        simu.advance(60.0)
        assert tried >= 2  # sent, then sent again while it was awaited
        assert sum(1 for r in simu.dispatcher.trace.records(FAULT)
                   if r.type == "drop" and r.sender == "person") == tried


def test_calls_given_up_on_are_kept_expected_up_to_a_bound() -> None:
    """A call whose caller stopped waiting stays expected (a late answer is still its
    answer), but only the latest GIVEN_UP_KEPT of them: answers that never come pile up
    nowhere; a call forgotten leaves no trace in either table."""
    from barnraise.actors.client import GIVEN_UP_KEPT, ClientActor

    client = ClientActor()
    for n in range(GIVEN_UP_KEPT + 10):
        client.expect(f"c{n}", "regions")
        client.give_up(f"c{n}")
    assert len(client.given_up) == GIVEN_UP_KEPT == len(client.expected)
    assert "c0" not in client.expected and f"c{GIVEN_UP_KEPT + 9}" in client.given_up
    client.expect("x", "regions")
    client.give_up("x")
    client.forget("x")
    assert "x" not in client.expected and "x" not in client.given_up


# -- every scenario under the full plan (issue 27) ------------------------------------------

#: (scenario, parameters) run under FULL_PLAN by the test below: the four made to survive
#: it here and those that already did; small parameters where the property holds.
_SURVIVORS_B: list[tuple[str, dict[str, object]]] = [
    ("grid_build", {"grid": 60, "builders": 4}),
    ("parallel_speedup", {}),
    ("conflict_storm", {}),
    ("async_delegation", {}),
    ("checkpoint_rollback", {}),
    ("conflict_resolution", {}),
    ("delegation_chain", {}),
    ("kernel_build", {"grid_size": 60}),
    ("locks_barriers", {}),
    ("mode_comparison", {}),
    ("parallel_build", {}),
    ("permissions", {}),
]
#: Realtime under the plan only in the deep campaign: mode_comparison's realtime run
#: failed once in a clean-clone CI (seed 0, 2026-11-28; its sequential build lost 24
#: tiles) and passed in 4 runs of the same test before, a flake not yet understood
#: (docs/reliability.md, "Not promised").
_REALTIME_DEEP_ONLY = frozenset({"mode_comparison"})
_RUNS_B = [(name, params, mode, seed) for name, params in _SURVIVORS_B
           for mode, seeds in (("deterministic", range(20) if DEEP else range(3)),
                               ("realtime", range(3) if DEEP else
                                range(0 if name in _REALTIME_DEEP_ONLY else 1)))
           for seed in seeds]


@pytest.mark.parametrize(("name", "params", "mode", "seed"), _RUNS_B,
                         ids=[f"{n}-{m[:4]}-{s}" for n, _, m, s in _RUNS_B])
def test_every_scenario_survives_the_plan_b(name: str, params: dict[str, object], mode: str,
                                            seed: int) -> None:
    result = barnraise.run(name, seed=seed, mode=mode, faults=FULL_PLAN, record=False,
                           **params)
    s = result.summary
    assert s["faults"]["plan"] == FULL_PLAN
    assert result.success, (s["run_end"], s["waiting"], s["faults"], s["errors"], s["metrics"])
    # every task completed at most once, and the summary counts each of its session's
    completed = Counter(r.content_obj()["task_id"] for r in result.trace.records("event")
                        if r.type == "task_completed"
                        and r.recipient == f"session:{s.get('session_id')}:events")
    assert set(completed.values()) <= {1}, completed
    assert len(completed) == s["tasks_completed"]
