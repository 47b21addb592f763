"""A hosted world: a realtime Simulation that stays up, optionally with a scenario's crew at work.

``HostedWorld(scenario=None)`` creates one open session at start (its id is
``default_session``) so outside agents have somewhere to join.
``HostedWorld(scenario="kernel_build", params={...})`` runs that scenario's
script on a background thread instead: its agents work in the world while
outside agents join their session. Either way the world stays up after the
script returns, until :meth:`close`. ``HostedWorld(simulation=simu)`` hosts a
Simulation someone else drives (``barnraise run --view`` puts its run on the
gateway this way): no session is made, no script started, and :meth:`close`
leaves it to its owner. ``limits`` (a :class:`barnraise.sim.tools.WorldLimits`) is what the
world lets sessions and agents cost; the gateway's own bounds per remote agent
and connection are ``Gateway(world, limits=Limits(...))``. A bad scenario name or parameter raises
:class:`scenarios.ScenarioError` before anything starts.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping
from typing import Any

from barnraise.actors.world import Simulation
from barnraise.loading import coerce_params, load_with_sha256
from barnraise.runner import package_version
from barnraise.sim.clock import check_time_scale
from barnraise.sim.store import Store
from barnraise.sim.tools import WorldLimits

__all__ = ["HostedWorld"]

log = logging.getLogger("barnraise.gateway")


class HostedWorld:
    """The Simulation a server hosts (see the module doc)."""

    def __init__(self, *, scenario: str | None = None, params: Mapping[str, Any] | None = None,
                 seed: int = 0, time_scale: float = 1.0, session_name: str = "barnraise",
                 grid_size: int = 1000, max_agents: int = 1000,
                 granted_roles: tuple[str, ...] = ("architect",),
                 guest_seats: int = 100, store: str | os.PathLike[str] | None = None,
                 overwrite: bool = False, simulation: Simulation | None = None,
                 limits: WorldLimits | None = None) -> None:
        self.scenario = scenario
        self.default_session: str | None = None
        #: The default session's role tokens, one per granted role: the operator hands
        #: them to the outside agents that may join in those roles.
        self.role_tokens: dict[str, str] = {}
        self.scenario_result: dict[str, Any] | None = None
        self.scenario_error: str | None = None
        self._thread: threading.Thread | None = None
        #: The served run's durable store (``serve --store``), finished on close.
        self.store: Store | None = None
        self._owned = simulation is None
        if simulation is not None:
            if store is not None or limits is not None:
                raise ValueError("store, limits: give them to the Simulation, not to its host")
            self.simulation = simulation
            return
        time_scale = check_time_scale(time_scale)  # the one bound (sim/clock.py)
        options: dict[str, Any] = {}
        module = None
        script_sha256: str | None = None
        values: dict[str, Any] = {}
        if scenario is not None:
            module, script_sha256 = load_with_sha256(scenario)
            values = coerce_params(module, dict(params or {}))
            options.update(getattr(module, "SIMULATION", {}))
        elif params:
            raise ValueError("params need a scenario")
        options["time_scale"] = float(time_scale)
        if limits is not None:  # what sessions and agents may cost (subscriptions, canvas)
            options["limits"] = limits
        if store is not None:  # checked before anything starts: StoreError, file untouched
            self.store = Store.create(store, seed=seed, mode="realtime", scenario=scenario,
                                      params=values, options={"time_scale": float(time_scale)},
                                      version=package_version(), overwrite=overwrite,
                                      script_sha256=script_sha256)
        self.simulation = Simulation(seed=seed, mode="realtime", store=self.store, **options)
        self.simulation.guest_seats = guest_seats
        if module is not None:
            self._thread = threading.Thread(target=self._run_scenario, args=(module, values),
                                            name=f"scenario-{scenario}", daemon=True)
            self._thread.start()
        else:
            host = self.simulation.client("gateway-host")
            # the roles are the operator's strings, checked by the tool: call_any
            made = host.call_any("session_create", {
                "session_name": session_name, "grid_size": grid_size,
                "max_agents": max_agents, "granted_roles": list(granted_roles)})
            if not made.get("success"):
                self.simulation.close()
                raise ValueError(f"could not create the session: {made.get('message')}")
            self.default_session = str(made["session_id"])
            for role in granted_roles:
                minted = host.call_any("session_grant", {"session_id": self.default_session,
                                                         "role": role})
                self.role_tokens[role] = str(minted["role_token"])

    def _run_scenario(self, module: Any, values: dict[str, Any]) -> None:
        try:
            self.scenario_result = dict(module.run(self.simulation, **values))
        except Exception as exc:  # the world stays up for the agents already in it
            self.scenario_error = f"{type(exc).__name__}: {exc}"
            log.warning("scenario %s stopped: %s", self.scenario, self.scenario_error)

    def sessions(self) -> list[dict[str, Any]]:
        """The sessions in the world: id, name, grid size, mode, member count."""
        out = []
        for sid in self.simulation.sessions():
            try:
                view = self.simulation.view(sid, canvas=False)
            except LookupError:  # closed between the two reads
                continue
            out.append({"session_id": sid, "session_name": view.session.session_name,
                        "grid_size": view.session.grid_size,
                        "coordination_mode": view.session.coordination_mode,
                        "agents": len(view.members)})
        return out

    def close(self, timeout: float = 5.0) -> None:
        """Stop every actor (the scenario thread, a daemon, ends with its world); a store
        gets every record made so far and is marked finished. A Simulation given to the
        constructor is its owner's to close."""
        if not self._owned:
            return
        if self.store is not None and not self.store.closed:
            simulation = self.simulation
            simulation.dispatcher.shutdown()  # no record after the store's last
            self.store.finish({"virtual_time": simulation.now, "served": True,
                               "scenario_result": self.scenario_result,
                               "scenario_error": self.scenario_error},
                              simulation.dispatcher.trace_digest)
        self.simulation.close()
        if self._thread is not None:
            self._thread.join(timeout)
