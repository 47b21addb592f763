"""The regions service's checkpoints: the canvas and the artifacts kept under an id.

A room of :class:`barnraise.actors.regions.RegionManager` serving the internal operations
``_checkpoint`` and ``_rollback`` (the coordinator's ``build_checkpoint`` and
``build_rollback``), the one owner of every session's kept checkpoints. A checkpoint
keeps the parts it was asked to include: the compressed canvas with ``tiles_placed``
(and per writer) for "tiles", the artifacts for "shaders" and "cartridges". Claims are
leases on the present, not work, and are not rolled back; nor are the contention
statistics ``lost_work`` and ``conflicts``, nor the blueprint.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgspec

from barnraise.sim.canvas import TileCanvas
from barnraise.sim.tools import ToolError, ok
from barnraise.sim.views import StoredCheckpoint

if TYPE_CHECKING:
    from barnraise.actors.regions import RegionManager

__all__ = ["RegionCheckpoint", "RegionCheckpoints"]


@dataclass(slots=True)
class RegionCheckpoint:
    """What one checkpoint keeps of a session's regions (None: a part not included)."""

    canvas: bytes | None  # TileCanvas.compress() output; None when tiles were not included
    tiles: int
    tiles_placed: int
    shaders: dict[str, dict[str, Any]] | None
    cartridges: dict[str, dict[str, Any]] | None
    tiles_by_agent: dict[str, int] = field(default_factory=dict)


class RegionCheckpoints:
    """Every session's checkpoints of its regions, by checkpoint id."""

    def __init__(self, manager: RegionManager) -> None:
        self.manager = manager
        self._kept: dict[str, dict[str, RegionCheckpoint]] = {}  # session -> id -> kept

    def kept(self, session_id: str) -> Mapping[str, RegionCheckpoint]:
        """The session's checkpoints by id, oldest first."""
        return self._kept.get(session_id, {})

    def views(self, session_id: str) -> tuple[StoredCheckpoint, ...]:
        return tuple(StoredCheckpoint(checkpoint_id, ck.tiles_placed, ck.canvas)
                     for checkpoint_id, ck in self.kept(session_id).items())

    def close(self, session_id: str) -> None:
        self._kept.pop(session_id, None)

    def restore(self, session_id: str, kept: Mapping[str, Mapping[str, Any]]) -> None:
        """A stopped run's checkpoints (their fields as plain data) become the session's."""
        self._kept[session_id] = {cid: RegionCheckpoint(**k) for cid, k in kept.items()}

    def op_checkpoint(self, content: Mapping[str, Any]) -> dict[str, Any]:
        """Keep the included parts under ``checkpoint_id``: the compressed canvas (and
        tiles_placed) for "tiles", the artifacts for "shaders" / "cartridges"."""
        manager = self.manager
        s = manager.world_of(content.get("session_id"))
        session_id = s.info.session_id
        include = set(content.get("include") or ())
        canvas = s.canvas.compress() if "tiles" in include else None
        tiles = s.canvas.count_nonempty() if canvas is not None else 0
        # Artifacts are never changed once made, so copying the dicts that hold them suffices.
        shaders_now, cartridges_now = manager.artifacts.copy(session_id)
        shaders = shaders_now if "shaders" in include else None
        cartridges = cartridges_now if "cartridges" in include else None
        self._kept.setdefault(session_id, {})[content["checkpoint_id"]] = RegionCheckpoint(
            canvas, tiles, s.tiles_placed, shaders, cartridges, dict(s.tiles_by_agent))
        size = len(canvas or b"") + len(msgspec.json.encode([shaders, cartridges]))
        return ok(tiles=tiles, shaders=len(shaders or {}), cartridges=len(cartridges or {}),
                  size_bytes=size)

    def op_rollback(self, content: Mapping[str, Any]) -> dict[str, Any]:
        """Restore the checkpoint's parts; ``lost`` counts what that undid: cells that
        differed, artifacts made after it. Parts it did not include are left alone."""
        manager = self.manager
        s = manager.world_of(content.get("session_id"))
        session_id = s.info.session_id
        checkpoint_id = content.get("checkpoint_id")
        ck = (self.kept(session_id).get(checkpoint_id) if isinstance(checkpoint_id, str)
              else None)
        if ck is None:
            raise ToolError("checkpoint_not_found", f"no checkpoint {checkpoint_id!r} here")
        lost = {"tiles": 0, "shaders": 0, "cartridges": 0}
        if ck.canvas is not None:
            lost["tiles"] = s.put_canvas(TileCanvas.decompress(ck.canvas).snapshot(),
                                         ck.tiles_placed, ck.tiles_by_agent)
        lost.update(manager.artifacts.put_back(
            session_id, None if ck.shaders is None else dict(ck.shaders),
            None if ck.cartridges is None else dict(ck.cartridges)))
        restored = {"tiles": ck.tiles, "shaders": len(ck.shaders or {}),
                    "cartridges": len(ck.cartridges or {})}
        return ok(restored=restored, lost=lost)
