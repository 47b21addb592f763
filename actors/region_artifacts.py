"""The regions service's artifacts: the shaders loaded and the cartridges assembled.

A room of :class:`barnraise.actors.regions.RegionManager` serving ``builder_load_shader`` and
``builder_assemble_cartridge``, the one owner of every session's artifacts. An
artifact is a record over a region (name, region, agent, time; a cartridge also counts
the region's non-empty tiles); the canvas is untouched, and the session's write rules
apply as to tiles (:meth:`RegionManager.may_write`). The same shader over the same
region is the one already there; the same cartridge of the same region is assembled
again (its count, agent and time renewed) under its first id. Checkpoints copy them and
a rollback puts a copy back (:mod:`barnraise.actors.region_checkpoints`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from barnraise.actors.region_args import inside, rect_arg
from barnraise.actors.service import Call
from barnraise.sim.geometry import Rect
from barnraise.sim.tools import ok
from barnraise.sim.views import ArtifactView

if TYPE_CHECKING:
    from barnraise.actors.regions import RegionManager

__all__ = ["Artifacts", "SessionArtifacts"]


class _Index:
    """``(name, x, y, width, height)`` -> id over one session's shaders (or cartridges): a
    load of the same shader over the same region finds the one made before without
    walking them all (a walk per load made a 784-block build quadratic). Rebuilt when
    the dict is not the one it was built over (a rollback or a restore puts a new dict
    in place); an artifact is only ever added through :meth:`add`."""

    __slots__ = ("_ids", "_of")

    def __init__(self) -> None:
        self._of: dict[str, dict[str, Any]] | None = None
        self._ids: dict[tuple[Any, ...], str] = {}

    def find(self, artifacts: dict[str, dict[str, Any]], name: str, rect: Rect) -> str | None:
        if self._of is not artifacts:
            self._of, self._ids = artifacts, {}
            for artifact_id, made in artifacts.items():
                r = made["region"]
                self._ids.setdefault((made["name"], r["x"], r["y"], r["width"], r["height"]),
                                     artifact_id)
        return self._ids.get((name, rect.x, rect.y, rect.width, rect.height))

    def add(self, name: str, rect: Rect, artifact_id: str) -> None:
        self._ids[(name, rect.x, rect.y, rect.width, rect.height)] = artifact_id


@dataclass(slots=True, eq=False)
class SessionArtifacts:
    """One session's artifacts by id, oldest first. Read them; the room changes them."""

    shaders: dict[str, dict[str, Any]] = field(default_factory=dict)
    cartridges: dict[str, dict[str, Any]] = field(default_factory=dict)
    shader_index: _Index = field(default_factory=_Index, repr=False)
    cartridge_index: _Index = field(default_factory=_Index, repr=False)


def _view(record: Mapping[str, Any], id_key: str) -> ArtifactView:
    region = record["region"]  # made from a Rect: the constructor's fast path suffices
    return ArtifactView(record[id_key], record["name"],
                        Rect(region["x"], region["y"], region["width"], region["height"]),
                        record["agent_id"], record["created_at"], record.get("tiles"))


class Artifacts:
    """Every session's shaders and cartridges (see the module doc)."""

    def __init__(self, manager: RegionManager) -> None:
        self.manager = manager
        self._of: dict[str, SessionArtifacts] = {}

    def open(self, session_id: str) -> None:
        self._of[session_id] = SessionArtifacts()

    def close(self, session_id: str) -> None:
        self._of.pop(session_id, None)

    def of(self, session_id: str) -> SessionArtifacts:
        """The session's artifacts (KeyError: no such session here)."""
        return self._of[session_id]

    def views(self, session_id: str) -> tuple[tuple[ArtifactView, ...],
                                              tuple[ArtifactView, ...]]:
        """The session's shaders and cartridges as views, oldest first."""
        made = self._of[session_id]
        return (tuple(_view(a, "shader_id") for a in made.shaders.values()),
                tuple(_view(a, "cartridge_id") for a in made.cartridges.values()))

    def copy(self, session_id: str) -> tuple[dict[str, dict[str, Any]],
                                             dict[str, dict[str, Any]]]:
        """The session's shaders and cartridges, new dicts of the same records (what a
        checkpoint keeps)."""
        made = self._of[session_id]
        return dict(made.shaders), dict(made.cartridges)

    def put_back(self, session_id: str, shaders: dict[str, dict[str, Any]] | None,
                 cartridges: dict[str, dict[str, Any]] | None) -> dict[str, int]:
        """Make a checkpoint's ``shaders`` and ``cartridges`` (new dicts of its records)
        the session's; None leaves that kind alone. How many of each that undid (made
        since, so not put back)."""
        made = self._of[session_id]
        lost = {"shaders": 0, "cartridges": 0}
        if shaders is not None:
            lost["shaders"] = len(made.shaders.keys() - shaders.keys())
            made.shaders = dict(shaders)
        if cartridges is not None:
            lost["cartridges"] = len(made.cartridges.keys() - cartridges.keys())
            made.cartridges = dict(cartridges)
        return lost

    def restore(self, session_id: str, shaders: Mapping[str, Mapping[str, Any]],
                cartridges: Mapping[str, Mapping[str, Any]]) -> None:
        """Make a stopped run's artifacts the session's (copies of them)."""
        made = self._of[session_id]
        made.shaders = {k: dict(v) for k, v in shaders.items()}
        made.cartridges = {k: dict(v) for k, v in cartridges.items()}

    def tool_builder_load_shader(self, call: Call) -> dict[str, Any]:
        """Record a shader over ``region`` (the canvas is untouched); write rules apply."""
        manager = self.manager
        s = manager.world_of(call.session_id)
        rect = inside(s.info.grid_size, rect_arg(call.args["region"]))
        manager.may_write(s, call.caller, rect)
        made = self._of[call.session_id]
        name = call.args["shader_name"]
        # The same shader over the same region is the one already there: loading it
        # again (a restarted builder redoing its task) adds nothing.
        loaded = made.shader_index.find(made.shaders, name, rect)
        if loaded is not None:
            return ok(shader_id=loaded, region=rect.to_dict())
        shader_id, _ = manager.next_id("shader")
        made.shaders[shader_id] = {"shader_id": shader_id, "name": name,
                                   "region": rect.to_dict(), "agent_id": call.caller,
                                   "created_at": manager.now}
        made.shader_index.add(name, rect, shader_id)
        manager.wrote(s, call.caller)
        return ok(shader_id=shader_id, region=rect.to_dict())

    def tool_builder_assemble_cartridge(self, call: Call) -> dict[str, Any]:
        """Record a cartridge of ``region``; ``tiles`` is its count of non-empty tiles."""
        manager = self.manager
        s = manager.world_of(call.session_id)
        rect = inside(s.info.grid_size, rect_arg(call.args["region"]))
        manager.may_write(s, call.caller, rect)
        made = self._of[call.session_id]
        tiles = s.canvas.count_nonempty(rect)
        name = call.args["name"]
        # As with shaders: the same cartridge of the same region is assembled again.
        assembled = made.cartridge_index.find(made.cartridges, name, rect)
        if assembled is not None:
            made.cartridges[assembled].update(tiles=tiles, agent_id=call.caller,
                                              created_at=manager.now)
            manager.wrote(s, call.caller)
            return ok(cartridge_id=assembled, region=rect.to_dict(), tiles=tiles)
        cartridge_id, _ = manager.next_id("cartridge")
        made.cartridges[cartridge_id] = {"cartridge_id": cartridge_id, "name": name,
                                         "region": rect.to_dict(), "agent_id": call.caller,
                                         "created_at": manager.now, "tiles": tiles}
        made.cartridge_index.add(name, rect, cartridge_id)
        manager.wrote(s, call.caller)
        return ok(cartridge_id=cartridge_id, region=rect.to_dict(), tiles=tiles)
