"""The authoring kit: put behaviours of your own in a session, in a scenario of your own.

docs/writing.md is the guide. A scenario module hosts a session (:func:`host_session`)
and starts agents in it (:func:`spawn`); each is a :class:`Participant` that joins, then
runs its behaviour, an ``async def`` taking the agent (:data:`Behaviour`; the roles'
shipped ones are :data:`ROLE_BEHAVIOURS`)::

    from barnraise.kit import Participant, host_session, spawn

    async def greeter(agent: Participant) -> None:
        await agent.sleep(1.0)
        agent.outcome["said"] = await agent.call("session_get_state")

    def run(simu, *, grid_size):
        _, session_id = host_session(simu, session_name="mine", grid_size=grid_size)
        spawn(simu, session_id, "greeter-1", "builder", crew=1, behaviour=greeter)
        simu.run()
        return {"session_id": session_id}

The same objects as :mod:`barnraise.scenarios._kit` (below ``scenarios/`` in the layers,
where the shipped scenarios use them too, one function per job): sessions and crews
(:func:`host_session`, :func:`spawn`, :class:`Participant`, :data:`ROLE_BEHAVIOURS`),
seeded data (:func:`rng_for`, :func:`kernel_blueprint`), rectangles (:func:`box`), and
readers of what a run recorded (:func:`session_events`, :func:`deliveries`,
:func:`calls_before`, :class:`Replay`, :func:`percentile`, ...).
"""

from barnraise.scenarios._kit import (
    PATIENCE,
    ROLE_BEHAVIOURS,
    Behaviour,
    Participant,
    Replay,
    answered_before,
    box,
    calls_before,
    count,
    delivered_before,
    deliveries,
    host_session,
    kernel_blueprint,
    mark,
    max_concurrent,
    mean,
    message_type,
    min_gap,
    overlapping_pairs,
    percentile,
    placed_at,
    placed_before,
    restored_canvas,
    resumed_at,
    rng_for,
    rows_built,
    run_records,
    seeded_tiles,
    session_events,
    spawn,
    total,
)

__all__ = [
    "PATIENCE",
    "ROLE_BEHAVIOURS",
    "Behaviour",
    "Participant",
    "Replay",
    "answered_before",
    "box",
    "calls_before",
    "count",
    "delivered_before",
    "deliveries",
    "host_session",
    "kernel_blueprint",
    "mark",
    "max_concurrent",
    "mean",
    "message_type",
    "min_gap",
    "overlapping_pairs",
    "percentile",
    "placed_at",
    "placed_before",
    "restored_canvas",
    "resumed_at",
    "rng_for",
    "rows_built",
    "run_records",
    "seeded_tiles",
    "session_events",
    "spawn",
    "total",
]
