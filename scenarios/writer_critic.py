"""Writer/critic: builders draft each region, a critic scores it, they revise until approved.

The lead (an architect) cuts a seeded kernel blueprint into blocks and gives each
to a writer (a builder) as one task. The writer drafts the block's layout in its
sandbox, a seeded share ``error_rate`` of the cells wrong; the critic (a tester)
scores it against the blueprint (10 x the share of matching cells) and lists the
wrong cells with suggestions; the writer fixes a seeded share ``fix_rate`` of them
and asks again, until the critic approves (score >= ``threshold``) or
``max_iterations`` reviews were made. Proposals travel in messages only; then the
final layout is committed to the canvas and the critic checks that the canvas
holds exactly it. Records the iterations per region and the first-review
approval rate.

Parameters: grid_size, block, writers, threshold, max_iterations, error_rate, fix_rate.
Success: every region ends approved or at max_iterations, every final layout is
committed (verified on the canvas), iterations are recorded per region
(``iterations`` is their total), and no behaviour failed.

Resumed after a kill (``barnraise resume``, realtime): the lead takes back the
refine tasks it had delegated from the task queue (``critic.refinement_lead``),
with the results of those done; a refine task in progress at the kill goes back
to its writer, who drafts it again. ``reviews`` counts the critic's reviews
before the kill from the stored log; ``revisions`` counts the writers' since
the resume only (a revision is in no message).
"""

from __future__ import annotations

from typing import Any

from barnraise.actors.agents.architect import plan_blocks
from barnraise.actors.agents.critic import critic, refinement_lead, writer
from barnraise.actors.world import Simulation
from barnraise.scenarios import COUNT, FRACTION, GRID, Bound, ParamError
from barnraise.scenarios._kit import (
    answered_before,
    current,
    host_session,
    kernel_blueprint,
    rng_for,
    spawn,
)

NAME = "writer_critic"
PARAMS: dict[str, Any] = {
    "grid_size": 24, "block": 8, "writers": 2, "threshold": 7.0, "max_iterations": 3,
    "error_rate": 0.3, "fix_rate": 0.6,
}
#: What each parameter may be, checked before the run (``barnraise scenarios writer_critic``).
BOUNDS = {"grid_size": GRID, "block": GRID, "writers": COUNT,
          "threshold": Bound(low=0, high=10), "max_iterations": COUNT, "error_rate": FRACTION,
          "fix_rate": FRACTION}
#: A realtime run resumes by running this script again on the restored world: the lead
#: takes its delegated tasks back from the task queue, the writers their requeued work.
RESUMABLE = True


def run(simu: Simulation, *, grid_size: int, block: int, writers: int, threshold: float,
        max_iterations: int, error_rate: float, fix_rate: float) -> dict[str, Any]:
    if max_iterations < 1 or writers < 1:
        raise ParamError("max_iterations and writers must be at least 1")
    blueprint = kernel_blueprint(grid_size, rng_for(simu, "blueprint"))
    regions = plan_blocks(blueprint, block)
    crew = 2 + writers
    _, sid = host_session(simu, session_name="Writer and critic", grid_size=grid_size,
                          max_agents=crew, blueprint=blueprint.tolist())
    writer_ids = [f"writer-{i + 1}" for i in range(writers)]
    writers_ = [spawn(simu, sid, name, "builder", crew=crew, behaviour=writer,
                      blueprint=blueprint, error_rate=error_rate, fix_rate=fix_rate)
                for name in writer_ids]
    judge = spawn(simu, sid, "critic-1", "tester", crew=crew, behaviour=critic,
                  blueprint=blueprint, threshold=threshold)
    lead = spawn(simu, sid, "lead-1", "architect", crew=crew, behaviour=refinement_lead,
                 regions=regions, writers=writer_ids, critic="critic-1", threshold=threshold,
                 max_iterations=max_iterations)
    simu.run()
    # after a crash under a fault plan, the agents' outcomes are their last incarnations'
    lead, judge = current(lead), current(judge)
    writers_ = [current(w) for w in writers_]
    results: list[dict[str, Any]] = lead.outcome.get("results", [])
    per_region = [{"region": r["region"], "writer": r.get("writer"), "status": r["status"],
                   "iterations": int(r.get("iterations", 0)), "scores": r.get("scores", []),
                   "approved": bool(r.get("approved")), "committed": bool(r.get("committed")),
                   "first_review_approved": bool(r.get("first_review_approved"))}
                  for r in results]
    iterations = [r["iterations"] for r in per_region]
    first = sum(1 for r in per_region if r["first_review_approved"])
    finals = [r["scores"][-1] for r in per_region if r["scores"]]
    return {
        "session_id": sid, "regions": len(regions), "max_iterations": max_iterations,
        "iterations": sum(iterations), "iterations_per_region": iterations,
        "approved": sum(1 for r in per_region if r["approved"]),
        "at_max_iterations": sum(1 for r in per_region
                                 if not r["approved"] and r["iterations"] == max_iterations),
        "first_review_approval_rate": round(first / len(per_region), 3) if per_region else 0.0,
        "committed": sum(1 for r in per_region if r["committed"]),
        "mean_final_score": round(sum(finals) / len(finals), 3) if finals else 0.0,
        "reviews": judge.outcome.get("reviews", 0) + sum(  # before a kill: the log's
            1 for tool, args, _ in answered_before(simu, "critic-1")
            if tool == "a2a_send_message" and args["content"].get("kind") == "review_result"),
        "revisions": sum(w.outcome.get("revisions", 0) for w in writers_),
        "per_region": per_region,
    }


def check(summary: dict[str, Any]) -> bool:
    m = summary["metrics"]
    regions = m["per_region"]
    return (len(regions) == m["regions"] > 0
            and all(r["status"] == "completed" for r in regions)
            and all(r["approved"] or r["iterations"] == m["max_iterations"] for r in regions)
            and all(1 <= r["iterations"] <= m["max_iterations"] for r in regions)
            and all(r["committed"] for r in regions)
            and m["iterations"] == sum(m["iterations_per_region"])
            and summary["behaviour_errors"] == 0)
