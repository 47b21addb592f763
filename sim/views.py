"""Frozen views of a session's world: what a reader may see of a finished or paused run.

A :class:`WorldView` is one session's world as values: the session, its members,
claims, tasks, the canvas and the blueprint, artifacts, the checkpoint index,
locks and barriers, and the progress counters. ``Simulation.view()``
(``actors/world.py``) assembles it from four parts, each built by the service
that owns that state (see :class:`SessionPart`, :class:`RegionsPart`,
:class:`TasksPart`, :class:`CoordinationPart`). Everything here is a pure value:
no actor, no dispatcher.

What a caller may rely on:

* **Nothing in a view changes, and changing a view changes nothing.** Every type
  is a frozen ``msgspec.Struct`` (assigning a field raises AttributeError);
  sequences are tuples; free-form JSON parts (a session's ``config``, a task's
  ``result``, ``payload`` and ``artifacts``, a checkpoint's ``contents``) are
  deep copies; arrays are copies with ``writeable`` False (writing raises
  ValueError).
* **One moment.** In deterministic mode a view is the world between two steps
  of the dispatcher. In realtime mode each service builds its part in its own
  actor, so each part is consistent in itself, but two parts may be a few
  letters apart (a claim granted after the regions part was built and before
  the tasks part was built shows in neither or in the tasks only).
* **Orders.** Members in join order, claims oldest first, tasks in creation
  order, artifacts and checkpoints in creation order, locks and barriers by id.
* **Cost.** Building a view copies the canvas and the blueprint (one
  ``grid_size``² byte array each; leave them out with ``canvas=False``) and one
  small struct per member, claim, task and artifact. The completion percentage
  compares the whole canvas with the blueprint, so it is computed only when
  asked for (``completion=True``); otherwise it is None.

The values encode with ``msgspec.json`` / ``msgspec.to_builtins`` except the two
arrays, which a caller turns into lists or bytes as it needs.
"""

from __future__ import annotations

import colorsys
from collections.abc import Mapping
from typing import Any, Final

import msgspec
import numpy as np
from numpy.typing import NDArray

from barnraise.sim.canvas import TileCanvas
from barnraise.sim.geometry import Rect

__all__ = [
    "ArtifactView",
    "BarrierView",
    "CheckpointView",
    "ClaimView",
    "CoordinationPart",
    "LockView",
    "MemberView",
    "ProgressView",
    "RegionsPart",
    "SessionPart",
    "SessionView",
    "StoredCheckpoint",
    "TaskView",
    "TasksPart",
    "WorldView",
    "frozen_copy",
    "json_copy",
    "member_colour",
]

#: Members' colours, in the order they join a session; then golden-ratio hues.
_PALETTE: Final = ("#4CAF50", "#2196F3", "#FF9800", "#9C27B0", "#F44336", "#00BCD4",
                   "#FFEB3B", "#795548", "#E91E63", "#3F51B5", "#8BC34A", "#607D8B")


def member_colour(index: int) -> str:
    """The colour of a session's ``index``-th member to join (the coordinator gives it;
    a stored run's fold gives it again from the order of the joins)."""
    if index < len(_PALETTE):
        return _PALETTE[index]
    hue = (index * 0.618033988749895) % 1.0
    r, g, b = colorsys.hsv_to_rgb(hue, 0.65, 0.9)
    return f"#{int(r * 255):02X}{int(g * 255):02X}{int(b * 255):02X}"


def frozen_copy(array: NDArray[Any]) -> NDArray[Any]:
    """A copy of ``array`` that refuses writes (``writeable`` False)."""
    out = array.copy()
    out.flags.writeable = False
    return out


def json_copy(value: Any) -> Any:
    """A deep copy of JSON-like data (dicts, lists, strings, numbers), made in C."""
    return msgspec.to_builtins(value)


# -- the coordinator's part ----------------------------------------------------------------


class SessionView(msgspec.Struct, frozen=True):
    """A session's identity and configuration, as ``session_create`` set them."""

    session_id: str
    session_name: str
    grid_size: int
    #: ``free``, ``coordinated`` or ``sequential``.
    coordination_mode: str
    #: The session's config with every default filled in (a copy).
    config: dict[str, Any]
    created_at: float
    max_agents: int
    #: True when joining needs the invite token (the token itself is not in the view).
    private: bool


class MemberView(msgspec.Struct, frozen=True):
    """A member of the session. ``agent_id`` is its actor name; ``name`` its display name."""

    agent_id: str
    name: str
    role: str
    color: str
    capabilities: tuple[str, ...]
    joined_at: float


class CheckpointView(msgspec.Struct, frozen=True):
    """One checkpoint: the coordinator's index entry and what the regions service stored.

    ``canvas`` is the compressed canvas kept for it (None when its ``include``
    left tiles out); :meth:`tiles` unpacks it. ``tiles_placed`` is the session's
    counter at the checkpoint, which a rollback restores.
    """

    checkpoint_id: str
    name: str
    description: str
    created_at: float
    include: tuple[str, ...]
    #: Counts kept: ``tiles`` (non-empty cells), ``shaders``, ``cartridges``.
    contents: dict[str, int]
    size_kb: float
    tiles_placed: int | None = None
    canvas: bytes | None = None

    def tiles(self) -> NDArray[np.uint8] | None:
        """The checkpointed tile layer (read-only), or None if tiles were not included."""
        if self.canvas is None:
            return None
        return frozen_copy(TileCanvas.decompress(self.canvas).tiles)


class SessionPart(msgspec.Struct, frozen=True):
    """What the coordinator owns of a session: identity, members, checkpoint index."""

    session: SessionView
    members: tuple[MemberView, ...]
    checkpoints: tuple[CheckpointView, ...]


# -- the regions service's part ------------------------------------------------------------


class ClaimView(msgspec.Struct, frozen=True):
    """A claim (a lease on ``region``). ``expires_at`` None: no expiry."""

    claim_id: str
    agent_id: str
    region: Rect
    exclusive: bool
    purpose: str
    claimed_at: float
    expires_at: float | None


class ArtifactView(msgspec.Struct, frozen=True):
    """A shader or a cartridge; ``tiles`` (non-empty cells when made) for cartridges only."""

    artifact_id: str
    name: str
    region: Rect
    agent_id: str
    created_at: float
    tiles: int | None = None


class ProgressView(msgspec.Struct, frozen=True):
    """The session's counters.

    ``completion_percent`` (0..100, two decimals, the share of the blueprint's
    non-empty cells the canvas has right; 0.0 without a blueprint) is None
    unless the view was asked to compute it. ``tiles_by_agent`` splits
    ``tiles_placed`` by writer.
    """

    tiles_placed: int
    shaders_loaded: int
    cartridges_assembled: int
    conflicts: int
    lost_work: int
    completion_percent: float | None = None
    #: Tiles each agent wrote (agent id -> count; a copy), summing to ``tiles_placed``;
    #: a rollback restores it with ``tiles_placed``.
    tiles_by_agent: dict[str, int] = msgspec.field(default_factory=dict)


class StoredCheckpoint(msgspec.Struct, frozen=True):
    """What the regions service keeps under a checkpoint id (merged into CheckpointView)."""

    checkpoint_id: str
    tiles_placed: int
    canvas: bytes | None


class RegionsPart(msgspec.Struct, frozen=True, eq=False):
    """What the regions service owns of a session. Arrays are None with ``canvas=False``."""

    claims: tuple[ClaimView, ...]
    canvas: NDArray[np.uint8] | None
    blueprint: NDArray[np.uint8] | None
    has_blueprint: bool
    shaders: tuple[ArtifactView, ...]
    cartridges: tuple[ArtifactView, ...]
    progress: ProgressView
    checkpoints: tuple[StoredCheckpoint, ...]


# -- the task queue's part -----------------------------------------------------------------


class TaskView(msgspec.Struct, frozen=True):
    """One task of the queue, as ``task_get_queue`` reports it, plus its place in the graph.

    ``status`` is the shown status: a graph status, or ``awaiting_approval``
    for a finished build task waiting for an architect. ``dependents`` and
    ``ready`` (pending with every dependency completed) come from the task
    graph. (``barnraise.sim.taskgraph.TaskView`` is the graph's own, smaller node view.)
    """

    task_id: str
    type: str
    description: str
    status: str
    priority: str
    #: ``"any"`` or the agent id of the assignee.
    assigned_to: str
    delegated_by: str
    region: Rect | None
    dependencies: tuple[str, ...]
    dependents: tuple[str, ...]
    ready: bool
    created_at: float
    accepted_at: float | None
    completed_at: float | None
    deadline: float | None
    max_retries: int
    retries_used: int
    result: dict[str, Any]
    artifacts: tuple[dict[str, Any], ...]
    message: str
    claim_id: str | None
    approval_requested_at: float | None
    payload: dict[str, Any]


class TasksPart(msgspec.Struct, frozen=True):
    """What the task queue owns of a session."""

    tasks: tuple[TaskView, ...]


# -- the coordination service's part -------------------------------------------------------


class LockView(msgspec.Struct, frozen=True):
    """A held lock: its holder, lease end (None: no lease) and the queue, first first."""

    lock_id: str
    holder: str
    expires_at: float | None
    waiting: tuple[str, ...]


class BarrierView(msgspec.Struct, frozen=True):
    """A barrier someone waits at: who arrived (in order) and what it expects."""

    barrier_id: str
    generation: int
    expected_count: int
    #: The expected agent ids, or None when only a count is expected.
    expected_agents: tuple[str, ...] | None
    arrived: tuple[str, ...]


class CoordinationPart(msgspec.Struct, frozen=True):
    """What the coordination service owns of a session: locks held, barriers waited at."""

    locks: tuple[LockView, ...]
    barriers: tuple[BarrierView, ...]


# -- the whole ------------------------------------------------------------------------------


class WorldView(msgspec.Struct, frozen=True, eq=False):
    """One session's world at ``at`` (simulation seconds). See the module docstring."""

    at: float
    session: SessionView
    members: tuple[MemberView, ...]
    claims: tuple[ClaimView, ...]
    tasks: tuple[TaskView, ...]
    #: The tile layer (``[y, x]`` tile codes), read-only; None if asked without canvas.
    canvas: NDArray[np.uint8] | None
    #: The target tiles, read-only; None without a blueprint or without canvas.
    blueprint: NDArray[np.uint8] | None
    has_blueprint: bool
    shaders: tuple[ArtifactView, ...]
    cartridges: tuple[ArtifactView, ...]
    checkpoints: tuple[CheckpointView, ...]
    progress: ProgressView
    locks: tuple[LockView, ...]
    barriers: tuple[BarrierView, ...]

    @classmethod
    def assemble(cls, at: float, session: SessionPart, regions: RegionsPart, tasks: TasksPart,
                 coordination: CoordinationPart) -> WorldView:
        """Put the four parts together; the checkpoint index gains what regions stored."""
        stored = {c.checkpoint_id: c for c in regions.checkpoints}
        checkpoints = []
        for entry in session.checkpoints:
            kept = stored.get(entry.checkpoint_id)
            if kept is not None:
                entry = msgspec.structs.replace(entry, tiles_placed=kept.tiles_placed,
                                                canvas=kept.canvas)
            checkpoints.append(entry)
        return cls(
            at=at, session=session.session, members=session.members, claims=regions.claims,
            tasks=tasks.tasks, canvas=regions.canvas, blueprint=regions.blueprint,
            has_blueprint=regions.has_blueprint, shaders=regions.shaders,
            cartridges=regions.cartridges, checkpoints=tuple(checkpoints),
            progress=regions.progress, locks=coordination.locks,
            barriers=coordination.barriers)

    @property
    def session_id(self) -> str:
        return self.session.session_id

    def member(self, agent_id: str) -> MemberView | None:
        """The member with this agent id (or display name), or None."""
        for member in self.members:
            if member.agent_id == agent_id:
                return member
        for member in self.members:
            if member.name == agent_id:
                return member
        return None

    def task(self, task_id: str) -> TaskView | None:
        """The task with this id, or None."""
        for task in self.tasks:
            if task.task_id == task_id:
                return task
        return None

    def checkpoint(self, checkpoint_id: str) -> CheckpointView | None:
        """The checkpoint with this id, or None."""
        for checkpoint in self.checkpoints:
            if checkpoint.checkpoint_id == checkpoint_id:
                return checkpoint
        return None

    def claims_of(self, agent_id: str) -> tuple[ClaimView, ...]:
        """The claims ``agent_id`` holds, oldest first."""
        return tuple(c for c in self.claims if c.agent_id == agent_id)

    def task_counts(self) -> Mapping[str, int]:
        """Tasks per shown status (only statuses some task has)."""
        counts: dict[str, int] = {}
        for task in self.tasks:
            counts[task.status] = counts.get(task.status, 0) + 1
        return counts
