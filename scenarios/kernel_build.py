"""The flagship: a crew with fallible builders builds a blueprint to 100%, repairs included.

The architect cuts a seeded "kernel" blueprint into blocks, delegates a build task
per block to the builders and a test task (depending on it) to the testers. Builders
place tiles row by row at ``tile_rate`` tiles per simulated second and get a share
``error_rate`` of them wrong; testers compare each block with the blueprint; every
failed test makes the architect order a repair of exactly the wrong cells and a
retest. An observer records every session event.

Each builder also loads a shader over every block it builds and assembles the
block into a cartridge (the design notes' artifacts; ``shader`` or ``cartridge``
set to "" leaves them out).

Parameters: grid_size, block, builders, testers, error_rate, tile_rate, strategy
(parallel | sequential | cluster), shader, cartridge, max_repairs (the repairs and
rebuilds after which the architect gives up; 0, the default, allows ten per block
and at least 1000). The crew's mailboxes follow the grid too: each builder and tester
has room for four letters per block it is dealt, and never less than 1000. A cap
reached is said in the summary ("gave up") and fails the check.
Success: the canvas matches the blueprint (completion 100%), every test finally
passed (the architect declared the build done), no behaviour failed, with a
non-zero error rate at least one repair was needed, and there is one shader and
one cartridge per block (when they are on), the architect followed the build
through task_completed events, with ``cluster`` every block went through at
least one review, every task was completed exactly once (one task_completed
event per completed task), and no message was dropped as a dead letter.

Under a fault plan (``barnraise run kernel_build --faults
drop=0.05,duplicate=0.02,delay=0.5,crash=0.001``) the same check holds: lost
letters are sent again, duplicates are answered once, and lost results are read
from the task queue (docs/reliability.md).
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

from barnraise.actors.agents.critic import critic_tester, writer
from barnraise.actors.world import Simulation
from barnraise.scenarios import COUNT, FRACTION, GRID, RATE, Bound, ParamError
from barnraise.scenarios._kit import (
    current,
    host_session,
    kernel_blueprint,
    placed_at,
    restored_canvas,
    rng_for,
    spawn,
    total,
)

NAME = "kernel_build"
PARAMS: dict[str, Any] = {
    "grid_size": 120, "block": 30, "builders": 4, "testers": 2, "error_rate": 0.002,
    "tile_rate": 300.0, "strategy": "parallel", "shader": "kernel_shader", "cartridge": "kernel",
    "max_repairs": 0,
}
#: What each parameter may be, checked before the run (``barnraise scenarios kernel_build``).
BOUNDS = {"grid_size": GRID, "block": GRID, "builders": COUNT, "testers": COUNT,
          "error_rate": FRACTION, "tile_rate": RATE,
          "strategy": Bound(choices=("parallel", "sequential", "cluster")),
          "max_repairs": Bound(low=0, high=100_000_000)}
#: A realtime run resumes by running this script again on the restored world: the
#: session is found again, every agent resumes from the world's state (docs/store.md),
#: and a builder redoing a block requeued at the kill starts at its first row not built.
RESUMABLE = True
# A blueprint travels in one message: a 1000 x 1000 one is a few MB of JSON.
SIMULATION = {"max_content_bytes": 64 * 2**20}


def run(simu: Simulation, *, grid_size: int, block: int, builders: int, testers: int,
        error_rate: float, tile_rate: float, strategy: str, shader: str,
        cartridge: str, max_repairs: int) -> dict[str, Any]:
    if strategy not in ("parallel", "sequential", "cluster"):
        raise ParamError(f"strategy must be parallel, sequential or cluster, got {strategy!r}")
    if grid_size < 1 or block < 1 or builders < 1 or testers < 1:
        raise ParamError("grid_size, block, builders and testers must be at least 1")
    if not 0 <= error_rate < 1 or tile_rate <= 0:
        raise ParamError(f"need 0 <= error_rate < 1 and tile_rate > 0; got error_rate="
                         f"{error_rate}, tile_rate={tile_rate}")
    blueprint = kernel_blueprint(grid_size, rng_for(simu, "blueprint"))
    crew = 1 + builders + testers  # who waits at the ready barrier: all but the observer
    _, sid = host_session(simu, session_name="Linux Kernel Build", grid_size=grid_size,
                          max_agents=crew + 1, blueprint=blueprint.tolist())
    builder_ids = [f"builder-{i + 1}" for i in range(builders)]
    tester_ids = [f"tester-{i + 1}" for i in range(testers)]
    # cluster: builders are writers (draft, review with a critic, revise, commit)
    # and testers are critics too; the other strategies use the plain roles
    cluster: dict[str, Any] = {}
    reviewers: dict[str, Any] = {}
    if strategy == "cluster":
        cluster, reviewers = {"behaviour": writer}, {"behaviour": critic_tester,
                                                      "blueprint": blueprint}
    # A resumed run: the canvas as the stopped run left it, so that a builder redoing a
    # requeued block starts at its first row not yet built (builders cannot read it).
    built = restored_canvas(simu, sid)
    resumed = (lambda name: {"built": built, "placed_at": placed_at(simu, name)}) \
        if built is not None else (lambda name: {})
    blocks = math.ceil(grid_size / block) ** 2
    crew_agents = [spawn(simu, sid, name, "builder", crew=crew, blueprint=blueprint,
                         mailbox=mail_room(blocks, builders),
                         tile_rate=tile_rate, error_rate=error_rate, shader=shader,
                         cartridge=cartridge, **cluster, **resumed(name))
                   for name in builder_ids]
    testers_ = [spawn(simu, sid, name, "tester", crew=crew,
                      mailbox=mail_room(blocks, testers), **reviewers)
                for name in tester_ids]
    # Exactly once: every task_completed event the task queue records, counted by
    # task, as it is recorded (the trace's listener; nothing is added to the trace).
    # A resumed run counts on from the stored log's events.
    completions: Counter[str] = Counter(simu.restored.completions if simu.restored else {})

    def count(_t: float, _sender: str, _topic: str, event: str, body: Any) -> None:
        if event == "task_completed":
            completions[str(body.get("task_id"))] += 1

    stop_counting = simu.dispatcher.trace.listen(count)
    watcher = spawn(simu, sid, "observer-1", "observer", crew=crew)
    boss = spawn(simu, sid, "architect-1", "architect", crew=crew, blueprint=blueprint,
                 block=block, builders=builder_ids, testers=tester_ids, strategy=strategy,
                 max_repairs=max_repairs)
    simu.run(progress_of=lambda: current(boss).outcome.get("tests_passed", 0)
             / max(1, current(boss).outcome.get("blocks", 1)))
    stop_counting()
    # A crew member that crashed and was restarted is a new actor under the same name.
    boss = current(boss)
    crew_agents = [current(a) for a in crew_agents]
    testers_ = [current(a) for a in testers_]
    watcher = current(watcher)
    return {
        "completion_events": sum(completions.values()),
        "completed_twice": sorted(t for t, n in completions.items() if n > 1),
        "session_id": sid, "done": bool(boss.outcome.get("done")),
        "blocks": boss.outcome.get("blocks", 0), "repairs": boss.outcome.get("repairs", 0),
        "max_repairs": boss.outcome.get("max_repairs"),
        "gave_up": bool(boss.outcome.get("gave_up")),
        "tests_passed": boss.outcome.get("tests_passed", 0),
        "makespan": boss.outcome.get("makespan"),
        "wrong_tiles": total(crew_agents, "wrong_tiles"),
        "defects_found": total(testers_, "defects_found"),
        "events_observed": watcher.outcome.get("events", 0),
        "error_rate": error_rate,
        "shaders_loaded": boss.outcome.get("shaders_loaded", 0),
        "cartridges_assembled": boss.outcome.get("cartridges_assembled", 0),
        "shader": shader, "cartridge": cartridge, "strategy": strategy,
        "progress_events": len(boss.outcome.get("progress", [])),
        "iterations": boss.outcome.get("iterations"),
        "first_review_approval_rate": boss.outcome.get("first_review_approval_rate"),
        "reviews": total(testers_, "reviews") if strategy == "cluster" else 0,
    }


def describe(summary: dict[str, Any]) -> list[str]:
    """What the run's counts mean, for the text summary."""
    m = summary["metrics"]
    failed = summary["tasks_failed"]
    lines = [f"{m['blocks']} blocks, {m['tests_passed']} passed their final test"]
    if failed:
        # every failed task is a test that found wrong tiles; each brings a repair
        repaired = "all repaired" if m["done"] and m["repairs"] >= failed else (
            f"{m['repairs']} repairs ordered")
        lines.append(f"{failed} tests failed ({m['defects_found']} wrong tiles found), "
                     f"{repaired}")
    elif m["error_rate"] > 0:
        lines.append("no test failed: the builders' errors did not land on the blueprint")
    if m.get("gave_up"):
        lines.append(f"warning: the architect gave up, undone, after {m['max_repairs']} "
                     "repairs and rebuilds (its cap: raise it with --param max_repairs=N)")
    if m.get("makespan") is not None:
        lines.append(f"makespan {m['makespan']:g} simulated seconds ({m['strategy']})")
    return lines


def mail_room(blocks: int, members: int) -> int:
    """The letters one builder or tester may hold waiting, dealt ``blocks`` among ``members``.

    Every task is assigned as it is delegated, so a tester holds a letter for each of
    its blocks' tests from the start: at 1500 x 1500 (2125 blocks, two testers) the
    runtime's default 1000 dropped 125 of them. Four per block leave room for the
    repairs and retests; never less than the default, so small builds run as before.
    """
    return max(1000, 4 * math.ceil(blocks / members))


def check(summary: dict[str, Any]) -> bool:
    m = summary["metrics"]
    repaired = m["repairs"] > 0 or m["error_rate"] == 0
    artifacts = (m["shaders_loaded"] == (m["blocks"] if m["shader"] else 0)
                 and m["cartridges_assembled"] == (m["blocks"] if m["cartridge"] else 0))
    # the architect heard the session's task_completed events (the last may come
    # after its final result, so at most one per completed task)
    followed = 0 < m["progress_events"] <= summary["tasks_completed"]
    clustered = m["strategy"] != "cluster" or (
        all(n >= 1 for n in m["iterations"]) and m["reviews"] >= m["blocks"])
    # every task completed exactly once: one task_completed event per completed task
    exactly_once = (not m["completed_twice"]
                    and m["completion_events"] == summary["tasks_completed"])
    return (summary["completion_percent"] == 100.0 and m["done"] and repaired and artifacts
            and followed and clustered and exactly_once and summary["behaviour_errors"] == 0
            and _no_letter_lost(summary))


def _no_letter_lost(summary: dict[str, Any]) -> bool:
    """No dead letter, except mail to an agent while it was down after a crash."""
    if summary["messages_dropped"] == 0:
        return True
    faults = summary.get("faults") or {}
    return bool(faults.get("crashed")) and set(summary["dead_letters"]) == {"offline"}
