"""Module-level reporters for the tests: other processes (a sweep's workers) import them
by name, which a lambda or a function defined in a test cannot offer."""

from __future__ import annotations

from barnraise.sim.reporters import AgentView
from barnraise.sim.views import WorldView


def tiles(view: WorldView) -> int:
    """The tiles placed, as the built-in ``tiles_placed`` column counts them."""
    return view.progress.tiles_placed


def members(view: WorldView) -> int:
    return len(view.members)


def mode(view: WorldView) -> str:
    return view.session.coordination_mode


def agent_tiles(agent: AgentView) -> int:
    return agent.tiles_placed


def agent_role(agent: AgentView) -> str:
    return agent.role
