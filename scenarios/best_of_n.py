"""Best-of-N: builders each propose a layout for one region; a critic ranks them; the best is built.

The lead (an architect) asks each of ``builders`` builders for a proposal of the
same seeded region of a kernel blueprint. Each drafts one in its sandbox, with
its own seeded quality (a share of wrong cells between ``min_error`` and
``max_error``); the proposals come back in task results, never on the canvas.
The critic (a tester) scores every proposal against the blueprint (10 x the
share of matching cells) and ranks them; the author of the best one commits it
to the canvas, and the critic checks that the canvas holds exactly that layout.

Parameters: grid_size, size (the region's side), builders, threshold, min_error, max_error.
Success: every builder proposed, the committed layout is the best-scored
proposal (verified on the canvas), and no behaviour failed.

Resumed after a kill (``barnraise resume``, realtime): the lead takes back the
proposal and commit tasks it had delegated from the task queue, with the
proposals that had come (``critic.best_of_n``); only the rest is delegated, and
the critic, whose review changes nothing, is asked again.
"""

from __future__ import annotations

from typing import Any

from barnraise.actors.agents.critic import best_of_n_lead, critic, writer
from barnraise.actors.world import Simulation
from barnraise.scenarios import COUNT, FRACTION, GRID, Bound, ParamError
from barnraise.scenarios._kit import current, host_session, kernel_blueprint, rng_for, spawn

NAME = "best_of_n"
PARAMS: dict[str, Any] = {
    "grid_size": 24, "size": 12, "builders": 3, "threshold": 7.0,
    "min_error": 0.05, "max_error": 0.6,
}
#: What each parameter may be, checked before the run (``barnraise scenarios best_of_n``).
BOUNDS = {"grid_size": GRID, "size": GRID, "builders": COUNT, "threshold": Bound(low=0, high=10),
          "min_error": FRACTION, "max_error": FRACTION}
#: A realtime run resumes by running this script again on the restored world: the lead
#: takes its delegated tasks back from the task queue, the builders their requeued work.
RESUMABLE = True


def run(simu: Simulation, *, grid_size: int, size: int, builders: int, threshold: float,
        min_error: float, max_error: float) -> dict[str, Any]:
    if not 1 <= size <= grid_size or builders < 1:
        raise ParamError("need 1 <= size <= grid_size and at least one builder")
    blueprint = kernel_blueprint(grid_size, rng_for(simu, "blueprint"))
    where = rng_for(simu, "region")
    region = {"x": int(where.integers(0, grid_size - size + 1)),
              "y": int(where.integers(0, grid_size - size + 1)), "width": size, "height": size}
    quality = rng_for(simu, "quality")
    error_rates = [round(float(quality.uniform(min_error, max_error)), 3)
                   for _ in range(builders)]
    crew = 2 + builders
    _, sid = host_session(simu, session_name="Best of N", grid_size=grid_size, max_agents=crew,
                          blueprint=blueprint.tolist())
    builder_ids = [f"builder-{i + 1}" for i in range(builders)]
    for name, rate in zip(builder_ids, error_rates, strict=True):
        spawn(simu, sid, name, "builder", crew=crew, behaviour=writer, blueprint=blueprint,
              error_rate=rate)
    spawn(simu, sid, "critic-1", "tester", crew=crew, behaviour=critic, blueprint=blueprint,
          threshold=threshold)
    lead = spawn(simu, sid, "lead-1", "architect", crew=crew, behaviour=best_of_n_lead,
                 region=region, builders=builder_ids, critic="critic-1", threshold=threshold)
    simu.run()
    out = current(lead).outcome  # its last incarnation's, after a crash under a fault plan
    return {
        "session_id": sid, "region": region, "builders": builders,
        "error_rates": dict(zip(builder_ids, error_rates, strict=True)),
        "scores": out.get("scores", {}), "ranking": out.get("ranking", []),
        "winner": out.get("winner"), "winner_score": out.get("winner_score"),
        "best_score": out.get("best_score"), "committed": bool(out.get("committed")),
        "failed": out.get("failed", []),
    }


def check(summary: dict[str, Any]) -> bool:
    m = summary["metrics"]
    scores = m["scores"]
    return (len(scores) == m["builders"] and not m["failed"] and m["winner"] in scores
            and m["winner_score"] == max(scores.values()) == m["best_score"]
            and m["ranking"][0] == m["winner"] and m["committed"]
            and summary["behaviour_errors"] == 0)
