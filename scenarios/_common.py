"""Helpers the shipped scenarios share: seeded blueprints, sessions and crews."""

from __future__ import annotations

from typing import Any

import numpy as np

from actors.agents import Participant, architect, builder, observer, tester
from actors.agents.participant import Behaviour
from actors.world import Client, Simulation
from sim.canvas import Tile
from sim.dispatch import seed_for

ROLE_BEHAVIOURS: dict[str, Behaviour] = {
    "architect": architect, "builder": builder, "tester": tester, "observer": observer,
}


def rng_for(simu: Simulation, purpose: str) -> np.random.Generator:
    """A random stream for the scenario script itself, from the run's seed."""
    return np.random.default_rng(seed_for(simu.seed, f"scenario:{purpose}"))


def kernel_blueprint(size: int, rng: np.random.Generator,
                     fill: float = 0.8) -> np.ndarray[Any, Any]:
    """A seeded target: a system band on top, then code and data modules in rows."""
    plan = np.zeros((size, size), dtype=np.uint8)
    band = max(1, size // 10)
    plan[:band, :] = Tile.SYSTEM
    y = band
    while y < size:
        h = int(rng.integers(max(2, size // 12), max(3, size // 5)))
        x = 0
        while x < size:
            w = int(rng.integers(max(2, size // 12), max(3, size // 4)))
            if rng.random() < fill:
                plan[y:y + h, x:x + w] = rng.choice([Tile.CODE, Tile.DATA, Tile.NETWORK,
                                                     Tile.STORAGE])
            x += w
        y += h
    return plan


def host_session(simu: Simulation, **create: Any) -> tuple[Client, str]:
    """Create a session from an outside client that does not join it."""
    host = simu.client(f"host-{len(simu.clients) + 1}")
    created = host.call("session_create", **create)
    if not created.get("success"):
        raise RuntimeError(f"session_create failed: {created}")
    return host, str(created["session_id"])


def spawn(simu: Simulation, session_id: str, agent_id: str, role: str, *, crew: int,
          behaviour: Behaviour | None = None, **params: Any) -> Participant:
    """Start one participant of ``role`` (``agent_id`` is also its display name)."""
    agent: Participant = simu.dispatcher.spawn(
        Participant, agent_id, session_id=session_id, agent_name=agent_id, role=role,
        behaviour=behaviour or ROLE_BEHAVIOURS[role], crew=crew, params=params)
    return agent


def total(agents: list[Participant], key: str) -> Any:
    return sum(a.outcome.get(key, 0) for a in agents)
