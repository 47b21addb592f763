"""Orchestration patterns: writer/critic, best-of-N, async delegation, plans, alerts."""

from __future__ import annotations

import pathlib
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import numpy as np
import pytest

from barnraise.actors.agents.alerts import SEVERITIES, alert
from barnraise.actors.agents.critic import propose_layout, rank, revise_layout, score_layout
from barnraise.actors.agents.delegation import DelegationLedger, delegate_worker
from barnraise.actors.agents.participant import Participant
from barnraise.actors.agents.plans import (
    Debouncer,
    PlanError,
    approval_response,
    approver,
    load_plan,
    parse_plan,
    plan_runner,
)
from barnraise.actors.world import Simulation
from barnraise.outputs import RunResult
from barnraise.runner import run as run_scenario
from barnraise.scenarios._kit import host_session, kernel_blueprint, rng_for, spawn
from barnraise.sim.dispatch import seed_for
from barnraise.sim.trace import TraceRecord

SCENARIOS = pathlib.Path(__file__).resolve().parents[1] / "scenarios"
PLANS = SCENARIOS / "plans"
Behaviour = Callable[[Participant], Coroutine[Any, Any, Any]]


@pytest.fixture
def simu() -> Iterator[Simulation]:
    with Simulation(seed=3, mode="deterministic") as s:
        yield s


def run(name: str, seed: int = 0, **params: Any) -> RunResult:
    """Run one of these scenarios by path: it does not depend on the others importing."""
    return run_scenario(str(SCENARIOS / f"{name}.py"), seed=seed, **params)


def events(trace_records: Iterator[TraceRecord], prefix: str = "") -> list[dict[str, Any]]:
    """Session events from a trace, as ``{"event", ...}`` dicts, in order."""
    out = []
    for record in trace_records:
        if record.recipient.startswith("session:") and record.type.startswith(prefix):
            out.append({"t": record.t, **record.content_obj()})
    return out


# -- alerts -------------------------------------------------------------------------------------

def test_alerts_publish_each_severity_and_refuse_any_other(simu: Simulation) -> None:
    refused: list[str] = []

    async def shout(agent: Participant) -> None:
        for severity in SEVERITIES:
            alert(agent, severity, f"{severity} title", f"{severity} body", code=7)
        for bad in ("fatal", "WARNING", ""):
            try:
                alert(agent, bad, "nope")
            except ValueError as exc:
                refused.append(str(exc))

    _, sid = host_session(simu, session_name="alerts")
    spawn(simu, sid, "boss", "architect", crew=1, behaviour=shout)
    simu.run()
    got = events(simu.dispatcher.trace.records("event"), "agent.alert")
    assert [(e["severity"], e["title"], e["body"]) for e in got] == [
        (s, f"{s} title", f"{s} body") for s in SEVERITIES]
    assert all(e["agent_id"] == "boss" and e["session_id"] == sid and e["code"] == 7
               for e in got)
    assert len(refused) == 3
    assert "'fatal'" in refused[0] and "'WARNING'" in refused[1] and "''" in refused[2]


def test_an_alert_reaches_a_subscriber_of_the_alert_topic(simu: Simulation) -> None:
    _, sid = host_session(simu, session_name="alerts")
    watcher = simu.client("watcher")
    watcher.call("session_join", session_id=sid, agent_name="watcher", role="observer")
    watcher.call("a2a_subscribe", event_type="agent.alert")

    async def shout(agent: Participant) -> None:
        alert(agent, "critical", "Disk on fire", "rack 3")

    spawn(simu, sid, "boss", "architect", crew=1, behaviour=shout)
    simu.run()
    got = [m.content for m in watcher.messages()]
    assert [(c["event"], c["severity"], c["title"]) for c in got] == [
        ("agent.alert", "critical", "Disk on fire")]


# -- critic helpers -----------------------------------------------------------------------------

def test_score_layout_scores_the_matching_share_and_lists_the_wrong_cells() -> None:
    target = np.array([[1, 2, 2], [3, 3, 0]], dtype=np.uint8)
    proposal = target.copy()
    proposal[0, 1] = 3
    proposal[1, 2] = 2
    critique = score_layout(proposal, target, origin=(10, 20), threshold=7)
    assert critique["score"] == round(10 * 4 / 6, 2) and critique["approved"] is False
    assert critique["issues"] == [[11, 20, 2], [12, 21, 0]]
    assert critique["suggestions"] == ["1 cell should be empty", "1 cell should be code"]
    assert score_layout(target, target)["score"] == 10.0
    with pytest.raises(ValueError, match="region"):
        score_layout(proposal[:, :2], target)


def test_drafts_revisions_and_ranking_are_seeded() -> None:
    target = np.full((20, 20), 2, dtype=np.uint8)
    draft = propose_layout(target, 0.3, np.random.default_rng(1))
    again = propose_layout(target, 0.3, np.random.default_rng(1))
    assert np.array_equal(draft, again) and 0.2 < (draft != target).mean() < 0.4
    critique = score_layout(draft, target)
    revised = revise_layout(draft, critique["issues"], 0.5, np.random.default_rng(2))
    left = (revised != target).sum()
    assert 0 < left < len(critique["issues"])
    # a revision always fixes at least one issue, even with fix_rate 0
    one = revise_layout(draft, critique["issues"], 0.0, np.random.default_rng(2))
    assert (one != target).sum() == len(critique["issues"]) - 1
    assert rank([{"score": 5}, {"score": 9}, {"score": 9}, {"score": 1}]) == [1, 2, 0, 3]


# -- debounce -----------------------------------------------------------------------------------

def test_debouncer_sends_at_most_one_update_per_interval_and_keeps_the_last() -> None:
    d: Debouncer[str] = Debouncer(2.0)
    assert d.offer(0.0, "a") == "a"
    assert d.offer(0.5, "b") is None and d.offer(1.0, "c") is None  # held, coalesced
    assert d.due() == 2.0 and d.flush(1.9) is None
    assert d.flush(2.0) == "c" and d.coalesced == 1
    assert d.due() is None and d.flush(10.0) is None
    assert d.offer(3.0, "d") is None  # 1 s after the flush
    assert d.due() == 4.0
    assert d.offer(4.5, "e") == "e" and d.coalesced == 2  # "d" is superseded, never sent
    assert d.offer(5.0, "f") is None and d.flush(6.4) is None and d.flush(6.5) == "f"
    with pytest.raises(ValueError):
        Debouncer(0)


# -- plans: validation --------------------------------------------------------------------------

def _plan(*steps: dict[str, Any]) -> dict[str, Any]:
    return {"name": "p", "steps": list(steps)}


def _step(step_id: str, **more: Any) -> dict[str, Any]:
    return {"id": step_id, "role": "builder", "task_type": "build", **more}


@pytest.mark.parametrize(("plan", "field", "words"), [
    (_plan(_step("a"), _step("b", depends_on=["a", "zz"])), "steps[1].depends_on[1]",
     "unknown step 'zz'"),
    (_plan(_step("a"), {"id": "b", "task_type": "test"}), "steps[1].role", "missing role"),
    (_plan(_step("a", depends_on=["c"]), _step("b", depends_on=["a"]),
           _step("c", depends_on=["b"])), "steps[0].depends_on", "cycle: a -> c -> b -> a"),
    (_plan(_step("a", depends_on=["a"])), "steps[0].depends_on", "cycle: a -> a"),
    (_plan(_step("a"), _step("a")), "steps[1].id", "duplicate step id 'a'"),
    (_plan(_step("a", aproval=True)), "steps[0].aproval", "unknown field"),
    (_plan(_step("a", task_type="paint")), "steps[0].task_type", "'paint'"),
    (_plan(_step("a", role="observer")), "steps[0].role", "'observer'"),
    (_plan(_step("a", approval="yes")), "steps[0].approval", "true or false"),
    (_plan(_step("a", approval_timeout="soon")), "steps[0].approval_timeout", "'soon'"),
    (_plan(_step("a", approval_timeout=0)), "steps[0].approval_timeout", "more than 0"),
    (_plan(_step("a", region={"x": 0, "y": 0, "width": 0, "height": 1})),
     "steps[0].region.width", ">= 1"),
    (_plan(_step("a", region={"x": 20, "y": 0, "width": 8, "height": 1})),
     "steps[0].region", "does not fit the 24x24 grid"),
    ({"steps": [_step("a")]}, "name", "required"),
    ({"name": "p", "steps": []}, "steps", "non-empty"),
    ({"name": "p", "steps": [_step("a")], "stepz": 1}, "stepz", "unknown field"),
    (["not", "a", "mapping"], "plan", "mapping"),
])
def test_plan_validation_names_the_bad_field(plan: Any, field: str, words: str) -> None:
    with pytest.raises(PlanError) as caught:
        parse_plan(plan, grid_size=24)
    assert caught.value.field == field
    assert field in str(caught.value) and words in str(caught.value)


def test_a_chain_of_thousands_of_steps_is_checked_without_exhausting_the_stack() -> None:
    """The cycle check is iterative: a 3,000-step chain given last step first (each
    depends on the next) parses, and the same chain closed into a loop is refused
    naming the cycle, where a recursive search raised RecursionError."""
    n = 3000
    chain = [_step(f"s{i}", depends_on=[f"s{i + 1}"] if i + 1 < n else []) for i in range(n)]
    plan = parse_plan(_plan(*chain))
    assert len(plan.steps) == n
    chain[-1] = _step(f"s{n - 1}", depends_on=["s0"])
    with pytest.raises(PlanError) as caught:
        parse_plan(_plan(*chain))
    assert caught.value.field == "steps[0].depends_on"
    assert str(caught.value).count("->") == n and "cycle: s0 -> s1 -> s2" in str(caught.value)


def test_a_valid_plan_parses_with_defaults_durations_and_a_dependency_order() -> None:
    plan = parse_plan(_plan(
        _step("c", depends_on=["a", "b"]), _step("a"),
        {"id": "b", "agent": "tester-1", "task_type": "test", "depends_on": "a",
         "approval": True, "approval_timeout": "2m"}))
    b = plan.step("b")
    assert (b.agent, b.role, b.depends_on, b.approval, b.approval_timeout) == (
        "tester-1", None, ("a",), True, 120.0)
    assert plan.step("a").approval is False and plan.step("a").approval_timeout == 300.0
    assert plan.order() == ["a", "b", "c"]
    assert plan.dependents("a") == ["c", "b"]
    assert parse_plan(plan.to_dict()).to_dict() == plan.to_dict()


def test_plans_load_from_a_name_a_path_or_a_dict_with_errors_for_files(
        tmp_path: pathlib.Path) -> None:
    shipped = load_plan("kernel_plan", directory=PLANS, grid_size=24)
    assert shipped.name == "kernel" and [s.id for s in shipped.steps if s.approval] == ["drivers"]
    assert shipped.order().index("test_core") > shipped.order().index("memory")
    assert load_plan(PLANS / "kernel_plan.yaml").to_dict() == shipped.to_dict()
    with pytest.raises(PlanError, match="no plan file 'nope'"):
        load_plan("nope", directory=PLANS)
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: x\nsteps: [\n")
    with pytest.raises(PlanError, match="not valid YAML") as caught:
        load_plan(broken)
    assert caught.value.field == "plan"
    cyclic = tmp_path / "cyclic.yaml"
    cyclic.write_text("name: x\nsteps:\n  - {id: a, role: builder, task_type: build, "
                      "depends_on: [b]}\n  - {id: b, role: builder, task_type: build, "
                      "depends_on: [a]}\n")
    with pytest.raises(PlanError) as caught:
        load_plan(cyclic)
    assert str(cyclic) in str(caught.value) and "cycle: a -> b -> a" in str(caught.value)
    with pytest.raises(PlanError, match="does not fit the 10x10 grid"):
        load_plan("kernel_plan", directory=PLANS, grid_size=10)


def test_approval_responses_take_only_the_three_decisions() -> None:
    request = {"plan_id": "p-1", "step_id": "s"}
    assert approval_response(request, "skip", "meh") == {
        "event": "hitl.approval.response", "plan_id": "p-1", "step_id": "s",
        "decision": "skip", "comment": "meh"}
    with pytest.raises(ValueError, match="'maybe'"):
        approval_response(request, "maybe")


# -- async delegation: exactly once -------------------------------------------------------------

def _delegation_world(simu: Simulation, boss: Behaviour, **worker: Any) -> Participant:
    _, sid = host_session(simu, session_name="delegation")
    spawn(simu, sid, "worker-1", "builder", crew=2, behaviour=delegate_worker, **worker)
    return spawn(simu, sid, "boss", "architect", crew=2, behaviour=boss)


def test_a_delegation_id_comes_back_at_once_and_the_result_on_a_later_turn(
        simu: Simulation) -> None:
    log: list[Any] = []

    async def boss(agent: Participant) -> None:
        ledger = DelegationLedger(agent)
        did = await ledger.delegate("worker-1", "build", payload={"job": "j", "work": 3.0})
        log.append(("delegated", did, agent.now, [r.status for r in ledger.pending]))
        while not ledger.take():  # our own turns: one simulated second each
            log.append(("turn", agent.now))
            await agent.sleep(1.0)
        log.append(("delivered", agent.now, ledger.records[did].status,
                    ledger.records[did].result["job"]))
        agent.outcome["ledger"] = ledger

    me = _delegation_world(simu, boss)
    simu.run()
    assert log[0][1] == "dlg-boss-1" and log[0][3] == ["pending"]
    turns = [entry for entry in log if entry[0] == "turn"]
    assert len(turns) >= 3  # it kept working for the 3 s the job took
    assert log[-1][2:] == ("completed", "j")
    record = me.outcome["ledger"].records["dlg-boss-1"]
    assert record.settled_at is not None and record.delivered_at is not None
    assert record.settled_at <= record.delivered_at
    assert record.delegated_at < record.settled_at


def test_duplicated_results_are_delivered_and_announced_exactly_once(simu: Simulation) -> None:
    delivered: list[str] = []

    async def boss(agent: Participant) -> None:
        ledger = DelegationLedger(agent)
        agent.outcome["ledger"] = ledger
        ids = [await ledger.delegate("worker-1", "build", payload={"job": f"j{i}", "work": 1.0,
                                                                   "fail": i == 1})
               for i in range(3)]
        while ledger.pending:
            delivered.extend(d.delegation_id for d in await ledger.wait())
        await agent.sleep(5.0)  # the echoes and the forged copies come in meanwhile
        delivered.extend(d.delegation_id for d in ledger.take())
        agent.outcome["ids"] = ids

    # an at-least-once worker: reports through the queue, tells the boss directly, reports again
    me = _delegation_world(simu, boss, echo=True)
    simu.run(until=4.0)
    ledger: DelegationLedger = me.outcome["ledger"]
    # forge copies of a settled result: the network duplicated the queue's message
    first = ledger.records["dlg-boss-1"]
    d = simu.dispatcher
    for _ in range(2):
        d.send(d.seal(d.message("tasks", "boss", "task_result", {
            "task_id": first.task_id, "status": "failed", "message": "forged"})))
    # a stranger's result for the same task is not even looked at
    d.send(d.seal(d.message("worker-9", "boss", "task_result", {
        "task_id": first.task_id, "status": "failed"})))
    simu.run()
    assert sorted(delivered) == sorted(me.outcome["ids"]) and len(delivered) == 3
    assert [r.status for r in ledger.records.values()] == ["completed", "failed", "completed"]
    assert first.result["job"] == "j0" and first.duplicates == 3  # 1 echo + 2 forged
    assert ledger.duplicates == 3 + 2  # and one echo each for the other two
    got = events(simu.dispatcher.trace.records("event"), "delegation.")
    assert [(e["event"], e["delegation_id"]) for e in got] == [
        ("delegation.completed", "dlg-boss-1"), ("delegation.failed", "dlg-boss-2"),
        ("delegation.completed", "dlg-boss-3")]
    assert got[1]["error"] == "could not do it" and got[0]["result"]["job"] == "j0"
    assert ledger.summary() == {"delegations": 3, "pending": 0, "completed": 2, "failed": 1,
                                "delivered": 3, "duplicates": 5}


def test_wait_returns_nothing_without_pending_delegations_and_gather_collects(
        simu: Simulation) -> None:
    seen: dict[str, Any] = {}

    async def boss(agent: Participant) -> None:
        ledger = DelegationLedger(agent, collect=False)
        seen["empty"] = await ledger.wait()
        ids = [await ledger.delegate("worker-1", "build", payload={"work": w})
               for w in (2.0, 1.0)]
        got = await ledger.gather(ids)
        seen["gathered"] = {k: v.status for k, v in got.items()}
        seen["after"] = (ledger.take(), await ledger.wait())

    _delegation_world(simu, boss)
    simu.run()
    assert seen["empty"] == []
    assert seen["gathered"] == {"dlg-boss-1": "completed", "dlg-boss-2": "completed"}
    assert seen["after"] == ([], [])


# -- plans: running -----------------------------------------------------------------------------

def test_a_client_can_answer_an_approval_request(simu: Simulation) -> None:
    plan = {"name": "tiny", "steps": [
        {"id": "lay", "role": "builder", "task_type": "build",
         "region": {"x": 0, "y": 0, "width": 4, "height": 2}},
        {"id": "gate", "role": "builder", "task_type": "build", "depends_on": ["lay"],
         "region": {"x": 0, "y": 2, "width": 4, "height": 2}, "approval": True,
         "approval_timeout": 50}]}
    blueprint = kernel_blueprint(8, np.random.default_rng(0))
    _, sid = host_session(simu, session_name="hitl", grid_size=8, blueprint=blueprint.tolist())
    human = simu.client("human")
    simu.grant(sid, "human", "architect")  # the host's grant
    joined = human.call("session_join", session_id=sid, agent_name="human", role="architect")
    assert joined["success"], joined
    human.call("a2a_subscribe", event_type="hitl.approval.requested")
    spawn(simu, sid, "builder-1", "builder", crew=2, blueprint=blueprint)
    planner = spawn(simu, sid, "planner", "architect", crew=2, behaviour=plan_runner, plan=plan)
    message = human.receive(timeout=100)
    assert message is not None
    request = message.content
    assert (request["event"], request["step_id"], request["reply_to"]) == (
        "hitl.approval.requested", "gate", "planner")
    assert planner.outcome["steps"]["gate"]["status"] == "awaiting_approval"
    sent = human.call("a2a_send_message", to_agent=request["reply_to"],
                      message_type="status_update", content=approval_response(request, "approve"))
    assert sent["success"]
    simu.run()
    assert planner.outcome["status"] == "completed"
    assert planner.outcome["approvals"][0]["by"] == "human"
    assert planner.outcome["approvals"][0]["decision"] == "approve"


def _gated_world(simu: Simulation, first_gated: bool = True) -> tuple[str, Participant]:
    plan = {"name": "gated", "steps": [
        {"id": "lay", "role": "builder", "task_type": "build", "approval": first_gated,
         "region": {"x": 0, "y": 0, "width": 4, "height": 2}}]}
    blueprint = kernel_blueprint(8, np.random.default_rng(0))
    _, sid = host_session(simu, session_name="late", grid_size=8, blueprint=blueprint.tolist())
    spawn(simu, sid, "builder-1", "builder", crew=2, blueprint=blueprint)
    return sid, spawn(simu, sid, "planner", "architect", crew=2, behaviour=plan_runner,
                      plan=plan)


def test_an_approver_that_subscribes_late_catches_up_on_open_requests(
        simu: Simulation) -> None:
    sid, planner = _gated_world(simu)
    simu.run(until=5.0)  # the request went out with nobody listening
    assert planner.outcome["steps"]["lay"]["status"] == "awaiting_approval"
    late = spawn(simu, sid, "approver-1", "architect", crew=1, behaviour=approver)
    simu.run()
    assert late.outcome["answered"] == [["lay", "approve"]] and late.outcome["requests"] == 1
    assert planner.outcome["status"] == "completed"
    assert planner.outcome["approvals"][0]["by"] == "approver-1"


def test_a_step_whose_task_is_blocked_fails_instead_of_hanging(simu: Simulation) -> None:
    sid, planner = _gated_world(simu, first_gated=False)
    squatter = simu.client("squatter")
    squatter.call("session_join", session_id=sid, agent_name="squatter", role="builder")
    held = squatter.call("region_claim", region={"x": 0, "y": 0, "width": 8, "height": 8},
                         timeout=10_000)
    assert held["success"]
    report = simu.run()
    assert report.reason == "quiescent"
    assert planner.outcome["status"] == "failed"
    assert planner.outcome["steps"]["lay"]["message"].startswith("blocked: could not start")


def test_plan_run_publishes_its_events_in_dependency_order() -> None:
    result = run("plan_run", seed=5)
    assert result.success
    m = result.summary["metrics"]
    plan = load_plan("kernel_plan", directory=PLANS)
    got = [e for e in events(result.trace.records("event")) if e.get("plan_id") == m["plan_id"]
           or e["event"].startswith("hitl.")]
    names = [e["event"] for e in got]
    assert names[0] == "plan.started" and names[-1] == "plan.completed"
    assert got[-1]["status"] == "completed"
    where = {(e["event"], e.get("step_id")): i for i, e in enumerate(got)}
    for step in plan.steps:
        for dep in step.depends_on:
            assert where[("plan.step.completed", dep)] < where[("plan.step.started", step.id)]
    gate = [(e["event"], e.get("decision")) for e in got if e.get("step_id") == "drivers"]
    assert gate == [("plan.step.started", None), ("hitl.approval.requested", None),
                    ("hitl.approval.resolved", "approve"), ("plan.step.completed", None)]
    assert result.summary["completion_percent"] == 100.0
    final = m["progress_final"]
    assert (final["done"], final["total"], final["status"]) == (6, 6, "completed")
    assert m["progress_min_gap"] >= 2.0 and m["alerts"] == []


@pytest.mark.parametrize(("decision", "drivers", "reason"), [
    ("reject", "failed", "Rejected"),
    ("ignore", "failed", "Approval timed out"),
    ("skip", "completed", None),
])
def test_plan_run_rejected_timed_out_or_skipped_approvals(decision: str, drivers: str,
                                                          reason: str | None) -> None:
    result = run("plan_run", seed=5, decision=decision)
    m = result.summary["metrics"]
    assert not result.success  # the approval step was not approved
    assert result.summary["behaviour_errors"] == 0 and result.summary["run_end"] == "quiescent"
    got = events(result.trace.records("event"))
    step_events = [e for e in got if e.get("step_id") == "drivers"
                   and e["event"].startswith("plan.step.")]
    if drivers == "failed":
        assert m["steps"]["drivers"] == "failed" and step_events[-1]["reason"] == reason
        assert m["steps"]["release"] == "failed" and m["status"] == "failed"
        release = [e for e in got if e.get("step_id") == "release"]
        assert [(e["event"], e.get("blocked_by")) for e in release] == [
            ("plan.step.failed", "drivers")]
        alerts = [(e["severity"], e["title"]) for e in got if e["event"] == "agent.alert"]
        expected = [("warning", "Plan kernel failed")]
        if decision == "ignore":
            expected.insert(0, ("warning", "Approval timed out"))
            assert m["decisions"] == {"drivers": "timeout"}
        assert alerts == expected
    else:
        # skipped counts as done: release runs, and its test finds the drivers missing
        assert step_events[-1]["event"] == "plan.step.completed" and step_events[-1]["skipped"]
        assert m["steps"]["drivers"] == "skipped" and m["in_dependency_order"]
        release = [e for e in got if e.get("step_id") == "release"]
        assert [e["event"] for e in release] == ["plan.step.started", "plan.step.failed"]
        assert "wrong cells" in release[-1]["reason"] and m["status"] == "failed"
    assert m["plan_completed"] == 1


# -- the other scenarios ------------------------------------------------------------------------

def _blueprint(seed: int, size: int) -> np.ndarray[Any, Any]:
    return kernel_blueprint(size, np.random.default_rng(seed_for(seed, "scenario:blueprint")))


def test_writer_critic_records_iterations_and_commits_each_final_layout_once() -> None:
    result = run("writer_critic", seed=5)
    m = result.summary["metrics"]
    assert result.success and m["iterations"] == sum(m["iterations_per_region"]) >= m["regions"]
    assert 0 <= m["first_review_approval_rate"] <= 1 and m["approved"] == m["regions"]
    assert m["reviews"] == m["iterations"] and m["committed"] == m["regions"]
    # proposals never touch the canvas: one builder_place_tiles per region, the commit
    placed = [r for r in result.trace.records("deliver") if r.recipient == "regions"
              and r.type == "coordination_request"
              and r.content_obj().get("tool") == "builder_place_tiles"]
    assert len(placed) == m["regions"]
    # what was committed is what the critic scored last
    blueprint = _blueprint(5, 24)
    assert result.canvas() is not None
    for region in m["per_region"]:
        r = region["region"]
        x, y, w, h = r["x"], r["y"], r["width"], r["height"]
        final = score_layout(result.canvas()[y:y + h, x:x + w], blueprint[y:y + h, x:x + w])
        assert final["score"] == region["scores"][-1]


def test_writer_critic_stops_at_max_iterations_when_the_bar_is_out_of_reach() -> None:
    result = run("writer_critic", seed=5, threshold=10.0, max_iterations=2, fix_rate=0.3)
    m = result.summary["metrics"]
    assert result.success and m["at_max_iterations"] >= 1
    assert all(r["iterations"] == 2 for r in m["per_region"] if not r["approved"])
    assert m["iterations"] == sum(m["iterations_per_region"])


def test_best_of_n_commits_the_best_scored_proposal() -> None:
    result = run("best_of_n", seed=5, builders=4)
    m = result.summary["metrics"]
    assert result.success and len(m["scores"]) == 4
    assert m["winner"] == max(m["scores"], key=lambda b: (m["scores"][b], -int(b[-1])))
    assert m["ranking"] == sorted(m["scores"], key=lambda b: -m["scores"][b])
    r = m["region"]
    x, y, w, h = r["x"], r["y"], r["width"], r["height"]
    assert result.canvas() is not None
    on_canvas = score_layout(result.canvas()[y:y + h, x:x + w], _blueprint(5, 24)[y:y + h, x:x + w])
    assert on_canvas["score"] == m["winner_score"]
    placed = [r for r in result.trace.records("deliver") if r.recipient == "regions"
              and r.content_obj().get("tool") in ("builder_place_tiles", "builder_place_tile")]
    assert len(placed) == 1  # only the winner reached the canvas
    assert placed[0].sender == m["winner"]


def test_async_delegation_delivers_each_result_once_while_the_delegator_works() -> None:
    result = run("async_delegation", seed=5)
    m = result.summary["metrics"]
    assert result.success
    assert (m["delegations"], m["completed"], m["failed"], m["deliveries"]) == (4, 3, 1, 4)
    assert m["duplicates_ignored"] == m["echoes"] > 0 and m["refused_reports"] == m["echoes"]
    assert m["rows_built"] >= 1 and m["work_while_waiting"] >= 1
    got = events(result.trace.records("event"))
    kinds = [e["event"] for e in got if e["event"].startswith(("delegation.", "agent.alert"))]
    # the failure is announced, then the delegator raises its alert on its next turn
    assert kinds.count("delegation.failed") == 1 and kinds.count("delegation.completed") == 3
    assert kinds.index("delegation.failed") < kinds.index("agent.alert")
    alert_ = next(e for e in got if e["event"] == "agent.alert")
    assert alert_["severity"] == "warning" and alert_["agent_id"] == "delegator-1"
    # a result is delivered at the start of a turn after the one it was delegated in
    assert all(turn >= 1 for turn, _, _ in m["delivery_log"])


def test_pattern_scenarios_depend_on_the_seed() -> None:
    for name in ("writer_critic", "best_of_n"):
        a, b = run(name, seed=1).summary["metrics"], run(name, seed=2).summary["metrics"]
        assert a != b, name


def test_rng_for_is_the_scenarios_stream() -> None:
    with Simulation(seed=5) as s:
        assert np.array_equal(kernel_blueprint(24, rng_for(s, "blueprint")), _blueprint(5, 24))
