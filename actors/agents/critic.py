"""Writer/critic refinement and best-of-N: layouts proposed in a sandbox, critiqued, committed.

A *proposal* is a tile array for a region (rows of tile codes). It travels in
messages and task payloads only; the canvas sees nothing until a layout is
committed, by the writer whose region claim covers it.

Pure helpers (no agent needed):

``propose_layout(target, error_rate, rng)``  a draft: each cell wrong with ``error_rate``
``score_layout(proposal, target, ...)``      the critique: ``score`` = 10 x the share of
                                             cells equal to the target, ``approved``
                                             (score >= threshold), ``issues`` (the wrong
                                             cells, ``[x, y, expected]``) and
                                             ``suggestions`` (what to change, by tile type)
``revise_layout(proposal, issues, fix_rate, rng)``  fixes a seeded share of the issues
``rank(critiques)``                          proposal indices, best first (ties: lowest index)

Behaviours:

``critic``   (a tester) answers ``review_request`` messages with critiques and a
             ranking, and ``verify_request`` messages by comparing the canvas
             (``build_test``) with a committed layout. Inputs: ``blueprint``,
             ``threshold`` (7), ``review_time`` (0.25 simulated s per proposal).
``writer``   (a builder) accepts build tasks; ``payload["mode"]``:
             ``refine`` (default): draft, then review / revise with
             ``payload["critic"]`` until approved or ``max_iterations``, commit
             the final layout to the task's (claimed) region, have the critic
             verify it; ``propose``: draft a layout of ``payload["region"]`` and
             return it (sandbox, no claim); ``commit``: place
             ``payload["layout"]`` in the task's region; a task with
             ``payload["cells"]`` is a repair, done as the builder does it.
             Inputs: ``blueprint``, ``error_rate`` (0.3), ``fix_rate`` (0.6),
             ``think`` (0.5 s per draft), and the builder's ``shader`` and
             ``cartridge`` (loaded over each refined region).
``critic_tester``  a critic that also runs the tester's test tasks: the second
             half of the architect's ``cluster`` strategy.
``refinement_lead``  (an architect) delegates one refine task per region and
             records each region's iterations, scores and verdict.
``best_of_n_lead``   (an architect) runs :func:`best_of_n` on one region.

Requests to the critic go through ``a2a_send_message`` (``status_update`` with
``kind`` and a ``request_id``; the answer names the same ``request_id``), so the
session's membership and policy apply to them like to any tool.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, Final

import numpy as np

from barnraise.actors.agents.builder import accept_with_backoff, build_task, load_artifacts
from barnraise.actors.agents.delegation import DelegationLedger
from barnraise.actors.agents.participant import Participant, start_next
from barnraise.actors.agents.tester import tester
from barnraise.actors.base import Agent
from barnraise.actors.errors import WaitTimeout
from barnraise.sim.canvas import Tile

__all__ = [
    "CriticError",
    "best_of_n",
    "best_of_n_lead",
    "critic",
    "critic_tester",
    "propose_layout",
    "rank",
    "refine",
    "refinement_lead",
    "request_review",
    "request_verify",
    "revise_layout",
    "score_layout",
    "writer",
]

Layout = np.ndarray[Any, Any]

DEFAULT_THRESHOLD: Final = 7.0
DEFAULT_MAX_ITERATIONS: Final = 3
BUILD_TYPES: Final = frozenset({"build"})
_NAMES: Final = {int(t): t.name.lower() for t in Tile}


class CriticError(RuntimeError):
    """The critic could not be asked (not a member, say) or answered a malformed request."""


# -- pure helpers -----------------------------------------------------------------------------

def _region_tuple(region: Mapping[str, int]) -> tuple[int, int, int, int]:
    return int(region["x"]), int(region["y"]), int(region["width"]), int(region["height"])


def target_of(blueprint: Layout, region: Mapping[str, int]) -> Layout:
    """The blueprint's tiles over ``region`` (a copy)."""
    x, y, w, h = _region_tuple(region)
    return np.array(blueprint[y:y + h, x:x + w], dtype=np.uint8)


def propose_layout(target: Layout, error_rate: float, rng: np.random.Generator) -> Layout:
    """A draft of ``target`` with each cell wrong (another tile type) with ``error_rate``."""
    draft = np.array(target, dtype=np.uint8)
    if error_rate > 0 and draft.size:
        mask = rng.random(draft.shape) < error_rate
        draft[mask] = (draft[mask] + rng.integers(1, 8, size=int(mask.sum()))) % 8
    return draft


def score_layout(proposal: Layout | Sequence[Sequence[int]], target: Layout, *,
                 origin: tuple[int, int] = (0, 0), threshold: float = DEFAULT_THRESHOLD,
                 max_issues: int = 100_000) -> dict[str, Any]:
    """The critique of ``proposal`` against ``target`` (JSON-able).

    ``score`` 10 x matching / cells (2 decimals); ``approved`` score >= threshold;
    ``issues`` the wrong cells as ``[x, y, expected]`` in canvas coordinates
    (``origin`` is the region's top-left), row-major, at most ``max_issues``;
    ``suggestions`` one line per expected tile type, most cells first.
    """
    found = np.asarray(proposal, dtype=np.int64)
    want = np.asarray(target, dtype=np.int64)
    if found.shape != want.shape:
        raise ValueError(f"proposal is {found.shape[::-1]} (w x h); the region is "
                         f"{want.shape[::-1]}")
    wrong = np.argwhere(found != want)
    cells = int(want.size)
    matching = cells - len(wrong)
    score = round(10.0 * matching / cells, 2) if cells else 10.0
    ox, oy = origin
    issues = [[ox + int(c), oy + int(r), int(want[r, c])] for r, c in wrong[:max_issues]]
    by_type = Counter(int(want[r, c]) for r, c in wrong)
    suggestions = [f"{n} cell{'s' if n > 1 else ''} should be {_NAMES.get(t, str(t))}"
                   for t, n in sorted(by_type.items(), key=lambda kv: (-kv[1], kv[0]))]
    return {"score": score, "approved": score >= threshold, "threshold": threshold,
            "matching": matching, "cells": cells, "issues": issues,
            "issue_count": len(wrong), "suggestions": suggestions}


def revise_layout(proposal: Layout | Sequence[Sequence[int]], issues: Sequence[Sequence[int]],
                  fix_rate: float, rng: np.random.Generator, *,
                  origin: tuple[int, int] = (0, 0)) -> Layout:
    """A revision: each issue fixed with probability ``fix_rate`` (at least one is fixed)."""
    revised = np.array(proposal, dtype=np.uint8)
    if not issues:
        return revised
    fixed = rng.random(len(issues)) < fix_rate
    if not fixed.any():
        fixed[0] = True  # a revision always makes progress
    ox, oy = origin
    for (x, y, expected), fix in zip(issues, fixed, strict=True):
        if fix:
            revised[y - oy, x - ox] = expected
    return revised


def rank(critiques: Sequence[Mapping[str, Any]]) -> list[int]:
    """Indices of ``critiques`` by score, best first; equal scores keep their order."""
    return sorted(range(len(critiques)), key=lambda i: (-float(critiques[i]["score"]), i))


# -- asking the critic ------------------------------------------------------------------------

async def _ask(agent: Agent, critic_id: str, kind: str, body: dict[str, Any],
               timeout: float | None) -> dict[str, Any]:
    # Under faults the request or its answer may be lost: the request is sent again,
    # under the same request_id, every 4 x retry simulated seconds until answered
    # (the critic answers a request it has served again from what it said). A
    # supervised restart counts its serials from 1 again, so under faults the id names
    # the incarnation too: a restarted writer's first request is not its predecessor's,
    # and gets a review of its own, not the answer kept for the other.
    faults = agent.dispatcher.faults
    serial = agent.next_serial("critic-request")
    request_id = f"{agent.name}.{agent.incarnation}#{serial}" \
        if faults is not None and agent.incarnation > 0 else f"{agent.name}#{serial}"
    answer = f"{kind.removesuffix('_request')}_result"
    poll = None if faults is None else 4 * faults.retry
    until = None if timeout is None else agent.now + timeout
    while True:
        sent = await agent.call("a2a_send_message", to_agent=critic_id,
                                message_type="status_update",
                                content={"kind": kind, "request_id": request_id, **body})
        if not sent.get("success") or sent.get("status") != "delivered":
            raise CriticError(
                f"could not reach critic {critic_id}: "
                f"{sent.get('error') or sent.get('status')}: {sent.get('message', '')}")
        left = None if until is None else max(0.0, until - agent.now)
        patience = left if poll is None else (poll if left is None else min(poll, left))
        try:
            reply = await agent.receive(
                lambda m: (m.content.get("kind") == answer
                           and m.content.get("request_id") == request_id),
                timeout=patience, description=f"{critic_id}'s {answer} for {request_id}")
        except WaitTimeout:
            if poll is None or (until is not None and agent.now >= until):
                raise
            continue
        break
    content = dict(reply.content)
    if content.get("error"):
        raise CriticError(f"{critic_id}: {content['error']}")
    return content


async def request_review(agent: Agent, critic_id: str, region: Mapping[str, int],
                         proposals: Sequence[Layout | Sequence[Sequence[int]]], *,
                         threshold: float = DEFAULT_THRESHOLD,
                         timeout: float | None = 120.0) -> dict[str, Any]:
    """Have ``critic_id`` score ``proposals`` for ``region``: ``critiques`` and ``ranking``."""
    body = {"region": dict(region), "threshold": threshold,
            "proposals": [np.asarray(p).tolist() for p in proposals]}
    return await _ask(agent, critic_id, "review_request", body, timeout)


async def request_verify(agent: Agent, critic_id: str, region: Mapping[str, int],
                         layout: Layout | Sequence[Sequence[int]], *,
                         timeout: float | None = 120.0) -> dict[str, Any]:
    """Have ``critic_id`` check that the canvas over ``region`` now holds ``layout``."""
    body = {"region": dict(region), "layout": np.asarray(layout).tolist()}
    return await _ask(agent, critic_id, "verify_request", body, timeout)


# -- the critic -------------------------------------------------------------------------------

async def critic(agent: Participant) -> None:
    params = agent.params
    blueprint: Layout = params["blueprint"]
    review_time = float(params.get("review_time", 0.25))
    default_threshold = float(params.get("threshold", DEFAULT_THRESHOLD))
    outcome = agent.outcome
    outcome.update(reviews=0, proposals_scored=0, approvals=0, verifications=0,
                   verified_ok=0)
    kinds = ("review_request", "verify_request")
    # Under faults a request comes again when its answer was lost (or is a duplicate):
    # it is answered with what was said the first time, not served again.
    answered: dict[tuple[str, Any], dict[str, Any]] | None = (
        None if agent.dispatcher.faults is None else {})
    while True:
        message = await agent.receive(
            lambda m: m.message_type == "status_update" and m.content.get("kind") in kinds,
            daemon=True, description="a review or verify request")
        content = message.content
        kind = str(content["kind"])
        key = (message.from_agent, content.get("request_id"))
        if answered is not None and key in answered:
            await agent.call("a2a_send_message", to_agent=message.from_agent,
                             message_type="status_update", content=answered[key])
            continue
        answer: dict[str, Any] = {"kind": f"{kind.removesuffix('_request')}_result",
                                  "request_id": content.get("request_id")}
        try:
            region = content["region"]
            x, y, _, _ = _region_tuple(region)
            target = target_of(blueprint, region)
            if kind == "review_request":
                threshold = float(content.get("threshold", default_threshold))
                proposals = content["proposals"]
                await agent.sleep(review_time * max(1, len(proposals)))
                critiques = [score_layout(p, target, origin=(x, y), threshold=threshold)
                             for p in proposals]
                answer.update(critiques=critiques, ranking=rank(critiques))
                outcome["reviews"] += 1
                outcome["proposals_scored"] += len(critiques)
                outcome["approvals"] += sum(1 for c in critiques if c["approved"])
            else:
                answer.update(await _verify(agent, region, content["layout"], target))
                outcome["verifications"] += 1
                outcome["verified_ok"] += int(bool(answer["committed"]))
        except (KeyError, TypeError, ValueError) as exc:
            answer["error"] = f"malformed {kind}: {exc!r}"
        if answered is not None:
            answered[key] = answer
        await agent.call("a2a_send_message", to_agent=message.from_agent,
                         message_type="status_update", content=answer)


async def _verify(agent: Participant, region: Mapping[str, Any], layout: Any,
                  target: Layout) -> dict[str, Any]:
    """Does the canvas over ``region`` equal ``layout``? (build_test lists what differs.)"""
    x, y, w, h = _region_tuple(region)
    tested = await agent.call("build_test", region=dict(region), max_defects=w * h)
    if not tested.get("success"):
        return {"committed": False, "reason": f"build_test: {tested.get('error')}"}
    expected = np.asarray(layout, dtype=np.int64)
    want = np.asarray(target, dtype=np.int64)
    on_canvas = {(d["x"], d["y"], int(Tile[str(d["actual"]).upper()]))
                 for d in tested["defects"]}
    in_layout = {(x + int(c), y + int(r), int(expected[r, c]))
                 for r, c in np.argwhere(expected != want)}
    complete = tested["defect_count"] == len(tested["defects"])
    return {"committed": complete and on_canvas == in_layout,
            "canvas_score": tested["score"], "defects": tested["defect_count"]}


# -- the writer -------------------------------------------------------------------------------

async def writer(agent: Participant) -> None:
    outcome = agent.outcome
    outcome.update(tasks_done=0, drafts=0, revisions=0, commits=0, repairs=0,
                   tiles_placed=0, wrong_tiles=0, claim_retries=0)
    while True:
        task = await start_next(agent, BUILD_TYPES, accept_with_backoff)
        payload = task.get("payload", {})
        mode = "repair" if "cells" in payload else payload.get("mode", "refine")
        artifacts: list[dict[str, Any]] = []
        try:
            if mode == "repair":  # a tester found wrong cells: fixed as a builder would
                artifacts = await build_task(agent, task, agent.params)
                result: dict[str, Any] = {"repaired": len(payload["cells"])}
                outcome["repairs"] += 1
            elif mode == "propose":
                result = await _propose(agent, payload)
            elif mode == "commit":
                result = await _commit(agent, task["region"], payload["layout"])
            else:
                result = await _refine_task(agent, task, payload)
                artifacts = await load_artifacts(agent, task["region"], agent.params)
        except Exception as exc:  # report it: the delegator must hear of it
            await agent.call("task_report", task_id=task["task_id"], status="failed",
                             message=f"{mode}: {type(exc).__name__}: {exc}")
            continue
        await agent.call("task_report", task_id=task["task_id"], status="completed",
                         result=result, artifacts=artifacts)
        outcome["tasks_done"] += 1


async def critic_tester(agent: Participant) -> None:
    """A tester that is also a critic: reviews for writers, tests for the architect."""
    agent.start_behaviour(critic)
    await tester(agent)


async def _draft(agent: Participant, region: Mapping[str, int]) -> Layout:
    params = agent.params
    await agent.sleep(float(params.get("think", 0.5)))
    agent.outcome["drafts"] += 1
    return propose_layout(target_of(params["blueprint"], region),
                          float(params.get("error_rate", 0.3)), agent.rng)


async def _propose(agent: Participant, payload: Mapping[str, Any]) -> dict[str, Any]:
    draft = await _draft(agent, payload["region"])
    return {"proposal": draft.tolist(), "region": dict(payload["region"])}


async def _commit(agent: Participant, region: Mapping[str, int],
                  layout: Layout | Sequence[Sequence[int]]) -> dict[str, Any]:
    tiles = np.asarray(layout, dtype=np.int64).tolist()
    placed = await agent.call("builder_place_tiles", region=dict(region), tiles=tiles)
    if not placed.get("success"):
        raise RuntimeError(f"commit refused: {placed.get('error')}: {placed.get('message')}")
    rate = agent.params.get("tile_rate")
    if rate:  # placing takes the time a builder's rows would
        await agent.sleep(region["width"] * region["height"] / float(rate))
    agent.outcome["commits"] += 1
    return {"committed_by": agent.name, "region": dict(region)}


async def refine(agent: Participant, critic_id: str, region: Mapping[str, int], *,
                 threshold: float = DEFAULT_THRESHOLD,
                 max_iterations: int = DEFAULT_MAX_ITERATIONS) -> tuple[Layout, dict[str, Any]]:
    """Draft, then review and revise with ``critic_id`` until approved or out of iterations.

    Returns the final layout and the record: ``iterations`` (reviews asked),
    ``scores`` (one per review), ``approved``, ``first_review_approved``,
    ``issues_left``. Nothing touches the canvas.
    """
    if max_iterations < 1:
        raise ValueError(f"max_iterations must be >= 1, got {max_iterations}")
    x, y, _, _ = _region_tuple(region)
    fix_rate = float(agent.params.get("fix_rate", 0.6))
    layout = await _draft(agent, region)
    scores: list[float] = []
    approved = False
    critique: dict[str, Any] = {}
    for iteration in range(1, max_iterations + 1):
        review = await request_review(agent, critic_id, region, [layout], threshold=threshold)
        critique = review["critiques"][0]
        scores.append(float(critique["score"]))
        approved = bool(critique["approved"]) and critique["score"] >= threshold
        if approved or iteration == max_iterations:
            break
        await agent.sleep(float(agent.params.get("think", 0.5)))
        layout = revise_layout(layout, critique["issues"], fix_rate, agent.rng, origin=(x, y))
        agent.outcome["revisions"] += 1
    return layout, {"iterations": len(scores), "scores": scores, "approved": approved,
                    "first_review_approved": approved and len(scores) == 1,
                    "issues_left": int(critique.get("issue_count", 0))}


async def _refine_task(agent: Participant, task: Mapping[str, Any],
                       payload: Mapping[str, Any]) -> dict[str, Any]:
    critic_id = str(payload["critic"])
    region = task["region"]
    layout, record = await refine(
        agent, critic_id, region,
        threshold=float(payload.get("threshold", DEFAULT_THRESHOLD)),
        max_iterations=int(payload.get("max_iterations", DEFAULT_MAX_ITERATIONS)))
    await _commit(agent, region, layout)
    verified = await request_verify(agent, critic_id, region, layout)
    return {**record, "committed": bool(verified["committed"]), "region": dict(region),
            "final_score": record["scores"][-1], "writer": agent.name}


# -- leads (architects) -----------------------------------------------------------------------

async def refinement_lead(agent: Participant) -> None:
    """Delegate a refine task per region (round-robin over ``writers``); record the verdicts.

    Inputs: ``regions``, ``writers``, ``critic``, ``threshold``, ``max_iterations``.
    Outcome: ``results`` (per region, in region order), ``iterations``
    (per region), ``failed`` (regions whose task failed). Restarted after a crash, it
    takes back the tasks it had delegated (``DelegationLedger.recover``) and delegates
    only the others.
    """
    params = agent.params
    regions: list[dict[str, int]] = [dict(r) for r in params["regions"]]
    writers: list[str] = list(params["writers"])
    ledger = DelegationLedger(agent)
    earlier = await _taken_back(agent, ledger)
    order: list[str] = []
    for i, region in enumerate(regions):
        if f"refine region {i}" in earlier:  # delegated before a crash
            order.append(earlier.pop(f"refine region {i}"))
            continue
        order.append(await ledger.delegate(
            writers[i % len(writers)], "build", region=region,
            payload={"mode": "refine", "critic": params["critic"],
                     "threshold": float(params.get("threshold", DEFAULT_THRESHOLD)),
                     "max_iterations": int(params.get("max_iterations",
                                                      DEFAULT_MAX_ITERATIONS))},
            description=f"refine region {i}"))
    done = await ledger.gather(order)
    results = []
    for delegation_id, region in zip(order, regions, strict=True):
        record = done[delegation_id]
        results.append({**record.result, "region": region, "status": record.status,
                        "writer": record.delegate, "message": record.message})
    agent.outcome.update(results=results, iterations=[r.get("iterations", 0) for r in results],
                         failed=sum(1 for r in results if r["status"] != "completed"))


async def _taken_back(agent: Agent, ledger: DelegationLedger) -> dict[str, str]:
    """Restarted after a crash (``Agent.resuming``): the delegations ``agent`` had made, taken
    back into ``ledger`` (``DelegationLedger.recover``), by description; {} otherwise. A
    participant's ``params["published_before"]`` names those whose events it had published."""
    if not agent.resuming:
        return {}
    published = agent.params.get("published_before", ()) if isinstance(agent, Participant) \
        else ()
    return {r.description: r.delegation_id for r in await ledger.recover(published=published)}


async def best_of_n(agent: Agent, region: Mapping[str, int], builders: Sequence[str],
                    critic_id: str, *, ledger: DelegationLedger | None = None,
                    threshold: float = DEFAULT_THRESHOLD) -> dict[str, Any]:
    """Every builder proposes a layout of ``region`` (sandbox), the critic ranks them,
    the best one's author commits it, the critic verifies the canvas.

    Returns ``scores`` (builder -> score), ``ranking`` (builders, best first),
    ``winner``, ``winner_score``, ``best_score``, ``committed`` and ``failed``
    (builders whose proposal task failed). Restarted after a crash, ``agent`` takes back
    the proposal and commit tasks it had delegated (``DelegationLedger.recover``) rather
    than delegating them again; the critic's review and check, which change nothing
    and are not kept, are asked for again.
    """
    ledger = ledger or DelegationLedger(agent)
    earlier = await _taken_back(agent, ledger)
    asked: dict[str, str] = {}  # delegation id -> builder
    for builder in builders:
        description = f"propose a layout ({builder})"
        delegation_id = earlier.pop(description, None) or await ledger.delegate(
            builder, "build", payload={"mode": "propose", "region": dict(region)},
            description=description)
        asked[delegation_id] = builder
    done = await ledger.gather(asked)
    authors = [asked[d] for d in asked if done[d].status == "completed"]
    proposals = [done[d].result["proposal"] for d in asked if done[d].status == "completed"]
    failed = [asked[d] for d in asked if done[d].status != "completed"]
    if not proposals:
        return {"scores": {}, "ranking": [], "winner": None, "winner_score": None,
                "best_score": None, "committed": False, "failed": failed}
    review = await request_review(agent, critic_id, region, proposals, threshold=threshold)
    critiques = review["critiques"]
    best = int(review["ranking"][0])
    winner = authors[best]
    description = f"commit {winner}'s layout"
    commit = earlier.pop(description, None) or await ledger.delegate(
        winner, "build", region=dict(region),
        payload={"mode": "commit", "layout": proposals[best]}, description=description)
    committed = (await ledger.gather([commit]))[commit]
    verified: dict[str, Any] = {"committed": False}
    if committed.status == "completed":
        verified = await request_verify(agent, critic_id, region, proposals[best])
    scores = {a: float(c["score"]) for a, c in zip(authors, critiques, strict=True)}
    return {"scores": scores, "ranking": [authors[i] for i in review["ranking"]],
            "winner": winner, "winner_score": scores[winner],
            "best_score": max(scores.values()), "committed": bool(verified["committed"]),
            "failed": failed}


async def best_of_n_lead(agent: Participant) -> None:
    """Inputs: ``region``, ``builders``, ``critic``, ``threshold``. Outcome: :func:`best_of_n`'s."""
    params = agent.params
    agent.outcome.update(await best_of_n(
        agent, params["region"], list(params["builders"]), str(params["critic"]),
        threshold=float(params.get("threshold", DEFAULT_THRESHOLD))))
