"""Async delegation: an architect hands out jobs, keeps building, and gets each result exactly once.

The delegator (an architect) delegates ``delegations`` jobs round-robin to
``workers`` workers and gets a delegation id for each at once. Then it works in
turns of ``turn`` simulated seconds, building its own strip of the canvas a row
per turn; at the start of every turn it takes the results that arrived since
(each once), and once its own work is done it waits for the rest. Workers take
a seeded ``min_work``..``max_work`` seconds per job; job ``fail_index`` is
impossible and fails (the delegator raises a warning alert). Worker
``echo_worker`` is an at-least-once delegate: it reports through the task
queue, tells the delegator directly as well, and reports a second time; the
delegator's ledger drops the duplicates. ``delegation.completed`` and
``delegation.failed`` are published on the session's event topic as results arrive.

Parameters: workers, delegations, fail_index, echo_worker, turn, min_work,
max_work, own_rows, grid_size.
Success: every result (and the failure) delivered exactly once and after its
delegation, one delegation event per delegation (completed or failed as it
ended), duplicates dropped, the delegator did its own work while results were
pending, and no behaviour failed.

Resumed after a kill (``barnraise resume``, realtime), the delegator takes its
delegations back from the task queue (``DelegationLedger.recover``) and delegates
only the jobs it had not; each result finished before the kill is read from its
task, and handed to the new incarnation once (the stopped one's memory of it died
with it); a delegation event or an alert the stopped run had published is not
published again. It keeps the claim on its strip it holds and builds only the
rows it had not been told were built. What the stopped run did and was told
(rows built, echoes, duplicates, refused reports) is read from the stored log.

Under a fault plan a result letter may be lost: the ledger, with none come for ``4 *
retry`` seconds, reads its open delegations' tasks from the task queue; a crashed
delegator recovers its ledger as after a kill. Letters are lost and doubled there, so
the duplicates dropped are not compared with the echoes: what is checked is that each
result reached the delegator once.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from barnraise.actors.agents.alerts import ALERT_EVENT, alert
from barnraise.actors.agents.delegation import Delegation, DelegationLedger, delegate_worker
from barnraise.actors.agents.participant import Participant
from barnraise.actors.world import Simulation
from barnraise.scenarios import COUNT, GRID, WAIT, Bound, ParamError
from barnraise.scenarios._kit import (
    answered_before,
    count,
    current,
    deliveries,
    host_session,
    kernel_blueprint,
    rng_for,
    session_events,
    spawn,
)

NAME = "async_delegation"
PARAMS: dict[str, Any] = {
    "workers": 3, "delegations": 4, "fail_index": 2, "echo_worker": 1, "turn": 1.0,
    "min_work": 2.0, "max_work": 6.0, "own_rows": 5, "grid_size": 16,
}
#: What each parameter may be, checked before the run (``barnraise scenarios async_delegation``).
BOUNDS = {"workers": COUNT, "delegations": COUNT, "fail_index": Bound(low=-1, high=100_000),
          "echo_worker": Bound(low=0, high=100_000), "turn": WAIT, "min_work": WAIT,
          "max_work": WAIT, "own_rows": Bound(low=0, high=4096), "grid_size": GRID}
#: A realtime run resumes by running this script again on the restored world: the
#: delegator takes its delegations back from the task queue and what it had done and
#: published from the stored log, the workers their requeued jobs (see above).
RESUMABLE = True


async def delegator(agent: Participant) -> None:
    """Delegate every job, then work in turns; results are taken at the start of each turn."""
    params = agent.params
    region: dict[str, int] = params["region"]
    blueprint = params["blueprint"]
    ledger = DelegationLedger(agent)
    deliveries: list[dict[str, Any]] = []
    delegated: dict[str, int] = {}
    outcome = agent.outcome
    before = params.get("before", {})  # a resumed run: what the stopped run did
    outcome.update(ledger=ledger, deliveries=deliveries, delegated=delegated, turns=0,
                   rows_built=len(before.get("rows", ())),
                   work_while_waiting=len(before.get("rows", ())), waits=0, alerts=0)
    alerted = set(before.get("alerted", ()))
    jobs = list(params["jobs"])
    if agent.resuming:
        taken_back = await ledger.recover(published=params.get("published_before", ()))
        for record, job in zip(taken_back, jobs, strict=False):
            if record.description != f"job {job['job']}":
                raise RuntimeError(f"{agent.name}: delegation {record.delegation_id} was "
                                   f"{record.description!r}, expected job {job['job']}")
            delegated[record.delegation_id] = 0
        jobs = jobs[len(ledger.records):]
    claimed = await _claim(agent, region)
    turn = 0

    def deliver(done: Delegation) -> None:
        deliveries.append({"turn": turn, "t": agent.now, "delegation_id": done.delegation_id,
                           "status": done.status, "job": done.result.get("job"),
                           "message": done.message})
        if done.status == "failed" and done.delegation_id not in alerted:
            alert(agent, "warning", "Delegation failed",
                  f"{done.delegate} could not do {done.description}: {done.message}",
                  delegation_id=done.delegation_id)
            outcome["alerts"] += 1

    for job in jobs:
        delegation_id = await ledger.delegate(
            job["worker"], "build", description=f"job {job['job']}",
            payload={"job": job["job"], "work": job["work"], "fail": job["fail"]})
        delegated[delegation_id] = turn
    built = set(before.get("rows", ()))
    rows = [y for y in range(region["y"], region["y"] + region["height"]) if y not in built] \
        if claimed else []
    x, width = region["x"], region["width"]
    while ledger.pending or ledger.undelivered:
        turn += 1
        for done in ledger.take():  # the results that came in since the last turn
            deliver(done)
        if not ledger.pending:
            break
        if not rows:  # nothing else to do: wait for the next result
            outcome["waits"] += 1
            for done in await ledger.wait():
                deliver(done)
            continue
        row = rows.pop(0)
        await agent.call("builder_place_tiles", tiles=[blueprint[row, x:x + width].tolist()],
                         region={"x": x, "y": row, "width": width, "height": 1})
        outcome["rows_built"] += 1
        outcome["work_while_waiting"] += 1  # something was pending: we worked instead
        await agent.sleep(float(params["turn"]))
    outcome["turns"] = turn


async def _claim(agent: Participant, region: dict[str, int]) -> bool:
    """Claim the delegator's strip; after a restart, the claim it holds on it is kept."""
    if agent.resuming:
        query = await agent.call("region_query", region=region)
        if any(c["agent_id"] == agent.name and c["bounds"] == region
               for c in query.get("claims", ())):
            return True
    claimed = await agent.call("region_claim", region=region,
                               purpose="the delegator's own strip")
    return bool(claimed.get("success"))


def _before_kill(simu: Simulation, sid: str, delegator_id: str,
                 worker_ids: list[str]) -> dict[str, Any]:
    """A resumed run: what the stopped run did and was told, from its stored log ({} else).

    ``rows`` the delegator's strip rows whose write was acknowledged; ``alerted`` the
    delegations whose alert was raised (``spawn`` names those whose event was published:
    ``published_before``); ``echoes`` the
    results workers sent the delegator directly that reached it, ``duplicates`` the
    results that reached it for a delegation it already had one of (the stopped
    ledger's duplicates), ``refused`` the workers' second reports refused.
    """
    image = simu.restored
    if image is None:
        return {}
    rows = [args["region"]["y"] for tool, args, answer in answered_before(simu, delegator_id)
            if tool == "builder_place_tiles" and answer.get("success")]
    stopped = [e for e in session_events(simu, sid) if e["seq"] < image.seq]
    heard = [d for d in deliveries(simu, delegator_id, "task_result") if d["seq"] < image.seq]
    per_task = Counter(str(d["content"].get("task_id")) for d in heard)
    refused = sum(1 for w in worker_ids for tool, _, answer in answered_before(simu, w)
                  if tool == "task_report" and not answer.get("success"))
    return {"rows": rows,
            "alerted": [e.get("delegation_id") for e in stopped if e["event"] == ALERT_EVENT],
            "echoes": sum(1 for d in heard if d["from"] != "tasks"),
            "duplicates": sum(n - 1 for n in per_task.values()),
            "refused": refused}


def run(simu: Simulation, *, workers: int, delegations: int, fail_index: int, echo_worker: int,
        turn: float, min_work: float, max_work: float, own_rows: int,
        grid_size: int) -> dict[str, Any]:
    if workers < 1 or delegations < 1 or not 1 <= own_rows <= grid_size:
        raise ParamError("need workers >= 1, delegations >= 1, 1 <= own_rows <= grid_size")
    blueprint = kernel_blueprint(grid_size, rng_for(simu, "blueprint"))
    work = rng_for(simu, "work")
    worker_ids = [f"worker-{i + 1}" for i in range(workers)]
    jobs = [{"job": f"job-{i + 1}", "worker": worker_ids[i % workers],
             "work": round(float(work.uniform(min_work, max_work)), 3), "fail": i == fail_index}
            for i in range(delegations)]
    crew = 1 + workers
    _, sid = host_session(simu, session_name="Async delegation", grid_size=grid_size,
                          max_agents=crew, blueprint=blueprint.tolist())
    crew_ = [spawn(simu, sid, name, "builder", crew=crew, behaviour=delegate_worker,
                   echo=(i + 1 == echo_worker)) for i, name in enumerate(worker_ids)]
    before = _before_kill(simu, sid, "delegator-1", worker_ids)
    boss = spawn(simu, sid, "delegator-1", "architect", crew=crew, behaviour=delegator,
                 jobs=jobs, turn=turn, blueprint=blueprint,
                 region={"x": 0, "y": 0, "width": grid_size, "height": own_rows},
                 **({"before": before} if before else {}))
    simu.run()
    out = current(boss).outcome  # after a crash, its last incarnation (its ledger recovered)
    crew_ = [current(w) for w in crew_]
    ledger: DelegationLedger = out["ledger"]
    deliveries: list[dict[str, Any]] = out["deliveries"]
    ids = list(ledger.records)
    delivered = Counter(d["delegation_id"] for d in deliveries)
    events = session_events(simu, sid, prefix="delegation.")
    per_id = Counter(e["delegation_id"] for e in events)
    right_kind = all(
        e["event"] == f"delegation.{ledger.records[e['delegation_id']].status}" for e in events)
    summary = ledger.summary()
    return {
        "session_id": sid, "delegations": len(ids), "completed": summary["completed"],
        "failed": summary["failed"], "pending": summary["pending"],
        "deliveries": len(deliveries),
        "exactly_once": sorted(delivered) == sorted(ids) and set(delivered.values()) == {1},
        "delivered_after_delegation": all(
            d["turn"] > out["delegated"][d["delegation_id"]] for d in deliveries),
        "events_completed": count(events, "delegation.completed"),
        "events_failed": count(events, "delegation.failed"),
        "events_once": sorted(per_id) == sorted(ids) and set(per_id.values()) == {1}
        and right_kind,
        "duplicates_ignored": ledger.duplicates + before.get("duplicates", 0),
        "echoes": sum(w.outcome.get("echoes", 0) for w in crew_) + before.get("echoes", 0),
        "refused_reports": sum(w.outcome.get("refused_reports", 0) for w in crew_)
        + before.get("refused", 0),
        "turns": out["turns"], "rows_built": out["rows_built"],
        "work_while_waiting": out["work_while_waiting"], "waits": out["waits"],
        "alerts": len(session_events(simu, sid, "agent.alert")),
        "delivery_log": [[d["turn"], d["delegation_id"], d["status"]] for d in deliveries],
    }


def check(summary: dict[str, Any]) -> bool:
    m = summary["metrics"]
    return (m["exactly_once"] and m["delivered_after_delegation"] and m["events_once"]
            and m["completed"] >= 1 and m["failed"] >= 1 and m["pending"] == 0
            and m["completed"] + m["failed"] == m["delegations"]
            and m["events_completed"] == m["completed"] and m["events_failed"] == m["failed"]
            and _duplicates_dropped(summary) and m["work_while_waiting"] >= 1
            and m["alerts"] == m["failed"] and summary["behaviour_errors"] == 0)


def _duplicates_dropped(summary: dict[str, Any]) -> bool:
    """Each echo reached the ledger as a duplicate and was dropped. Under a fault plan
    letters are lost and doubled, and a crash takes an incarnation's counts: what is
    promised there is what ``exactly_once`` checks, each result delivered once however
    many copies came (so the count of copies dropped is not compared)."""
    m = summary["metrics"]
    return bool(summary.get("faults")) or m["duplicates_ignored"] == m["echoes"]
