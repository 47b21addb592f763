"""The coordinator's checkpoints: ``build_checkpoint``, ``build_rollback`` and autosave.

A room of :class:`barnraise.actors.coordinator.Coordinator`, the one owner of every session's
checkpoint index (id -> name, description, time, what it includes, its contents and
size) and of its autosave timer. A checkpoint is kept where its data lives: each
service stores its own part under the checkpoint id (``regions`` the canvas and the
artifacts, ``tasks`` the session state; internal operations ``_checkpoint`` and
``_rollback``), and this room keeps the index. Times are simulation seconds.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from barnraise.actors.service import CHECKPOINT, ROLLBACK, Call
from barnraise.sim.events import CheckpointCreated, Rollback
from barnraise.sim.tools import ToolError, ok
from barnraise.sim.views import CheckpointView, json_copy

if TYPE_CHECKING:
    from barnraise.actors.coordinator import Coordinator

__all__ = ["SessionCheckpoints"]

#: What an automatic checkpoint includes: everything.
_AUTOSAVED = ("tiles", "shaders", "cartridges", "session_state")


class SessionCheckpoints:
    """Every session's checkpoint index and autosave (see the module doc)."""

    def __init__(self, coordinator: Coordinator) -> None:
        self.coordinator = coordinator
        self._index: dict[str, dict[str, dict[str, Any]]] = {}  # session -> id -> entry
        self._stop_autosave: dict[str, Callable[[], None]] = {}

    def open(self, session_id: str, interval: float,
             index: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        """A session opens (created, or resumed with its ``index``): checkpoints every
        ``interval`` simulated seconds when it is above 0."""
        self._index[session_id] = {cid: dict(entry) for cid, entry in (index or {}).items()}
        if interval > 0:
            coordinator = self.coordinator
            self._stop_autosave[session_id] = coordinator.dispatcher.call_every(
                interval, coordinator, lambda: self._start_autosave(session_id))

    def close(self, session_id: str) -> None:
        """The session closed: its index goes, and its autosave stops."""
        self._index.pop(session_id, None)
        stop = self._stop_autosave.pop(session_id, None)
        if stop is not None:
            stop()

    def index(self, session_id: str) -> Mapping[str, Mapping[str, Any]]:
        """The session's checkpoint entries by id, oldest first."""
        return self._index.get(session_id, {})

    def views(self, session_id: str) -> tuple[CheckpointView, ...]:
        return tuple(CheckpointView(
            e["checkpoint_id"], e["checkpoint_name"], e["description"], e["created_at"],
            tuple(e["include"]), json_copy(e["contents"]), e["size_kb"])
            for e in self.index(session_id).values())

    async def tool_build_checkpoint(self, call: Call) -> dict[str, Any]:
        return await self._checkpoint(call.session_id, call.args["checkpoint_name"],
                                      call.args["description"], call.args["include"])

    def _start_autosave(self, session_id: str) -> None:
        self.coordinator.start_behaviour(self._autosave, session_id, name="autosave")

    async def _autosave(self, _actor: Any, session_id: str) -> None:
        if session_id in self._index:
            await self._checkpoint(session_id, f"auto-{self.coordinator.now:g}", "automatic",
                                   list(_AUTOSAVED))

    async def _checkpoint(self, session_id: str, name: str, description: str,
                          include: list[str]) -> dict[str, Any]:
        coordinator = self.coordinator
        checkpoint_id = coordinator.new_id("ckpt")
        regions = await coordinator.ask("regions", CHECKPOINT, session_id=session_id,
                                        checkpoint_id=checkpoint_id, include=include)
        tasks: dict[str, Any] = {"tasks": 0, "size_bytes": 0}
        if "session_state" in include:
            tasks = await coordinator.ask("tasks", CHECKPOINT, session_id=session_id,
                                          checkpoint_id=checkpoint_id)
        contents = {"tiles": regions.get("tiles", 0), "shaders": regions.get("shaders", 0),
                    "cartridges": regions.get("cartridges", 0)}
        size = regions.get("size_bytes", 0) + tasks.get("size_bytes", 0)
        entry = {"checkpoint_id": checkpoint_id, "checkpoint_name": name or checkpoint_id,
                 "description": description, "created_at": coordinator.now,
                 "include": include, "contents": contents, "size_kb": round(size / 1024, 2)}
        self._index[session_id][checkpoint_id] = entry
        coordinator.emit_event(CheckpointCreated(
            session_id=session_id, checkpoint_id=checkpoint_id, name=entry["checkpoint_name"]))
        return ok(**entry)

    async def tool_build_rollback(self, call: Call) -> dict[str, Any]:
        coordinator = self.coordinator
        checkpoint_id = call.args["checkpoint_id"]
        entry = self.index(call.session_id).get(checkpoint_id)
        if entry is None:
            raise ToolError("checkpoint_not_found", f"no checkpoint {checkpoint_id!r} in "
                            f"{call.session_id}")
        regions = await coordinator.ask("regions", ROLLBACK, session_id=call.session_id,
                                        checkpoint_id=checkpoint_id)
        if "session_state" in entry["include"]:
            await coordinator.ask("tasks", ROLLBACK, session_id=call.session_id,
                                  checkpoint_id=checkpoint_id)
        restored = regions.get("restored", {})
        lost = regions.get("lost", {})
        coordinator.emit_event(Rollback(session_id=call.session_id,
                                        checkpoint_id=checkpoint_id, lost_items=lost,
                                        by=call.caller))
        if call.args["notify_agents"]:
            for member in coordinator.members[call.session_id].values():
                if member.agent_id != call.caller:
                    coordinator.send(member.agent_id, "status_update", {
                        "event": "rollback", "session_id": call.session_id,
                        "checkpoint_id": checkpoint_id})
        return ok(rolled_back_to=checkpoint_id, rolled_back_at=coordinator.now,
                  restored=restored, lost=lost)
