"""The shapes the services' folds of a stored log fill, each service its share.

* :class:`Image` and :class:`SessionImage`: what the services held when a stored realtime
  run stopped, the image a resume restores (:func:`barnraise.actors.stored.resume.image_of` drives
  the folds; ``Simulation.restore`` hands every service the image, their
  ``restore_session``);
* :class:`WorldSession`: one session of the world at a time, as a snapshot keeps it
  (:func:`barnraise.actors.stored.rebuild.world_at` drives the folds).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from barnraise.actors.regions_log import RegionsImage

__all__ = ["Image", "SessionImage", "WorldSession"]


@dataclass
class WorldSession:
    """One session of the world at a time: regions' canvas, claims and checkpoints of the
    tiles, the coordinator's members, the task queue's statuses and its checkpoints."""

    canvas: NDArray[np.uint8] | None = None
    members: dict[str, tuple[str, str, str]] = field(default_factory=dict)  # name, role, colour
    joined: int = 0
    claims: dict[str, tuple[str, dict[str, int], float | None]] = field(default_factory=dict)
    tasks: dict[str, list[Any]] = field(default_factory=dict)  # [status, assigned, awaiting]
    #: By checkpoint id: the tiles it kept (None: it kept no tiles).
    checkpoints: dict[str, NDArray[np.uint8] | None] = field(default_factory=dict)
    #: Checkpoints taken before the snapshot the fold started from: what they kept is
    #: not known.
    unknown: set[str] = field(default_factory=set)
    #: The tasks as each checkpoint of the session state kept them.
    task_checkpoints: dict[str, dict[str, list[Any]]] = field(default_factory=dict)


@dataclass
class SessionImage:
    """One session as the services held it."""

    info: dict[str, Any]
    owner: str = ""
    granted_roles: list[str] = field(default_factory=list)
    #: agent id -> Member fields, in the order they joined
    members: dict[str, dict[str, Any]] = field(default_factory=dict)
    joined: int = 0
    regions: RegionsImage | None = None
    #: task id -> TaskRecord fields, in the order the tasks were created
    tasks: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: checkpoint id -> the tasks as a checkpoint of the session state kept them
    task_checkpoints: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    #: checkpoint id -> the coordinator's index entry (what build_checkpoint answers)
    checkpoints: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: lock id -> holder, expires_at (a lock's waiters were the stopped run's: gone)
    locks: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: barrier id -> releases so far (arrivals waiting were the stopped run's: gone)
    barrier_releases: dict[str, int] = field(default_factory=dict)

    @property
    def session_id(self) -> str:
        return str(self.info["session_id"])


@dataclass
class Image:
    """Every session at record :attr:`seq` (exclusive), time :attr:`at`."""

    seq: int
    at: float
    sessions: dict[str, SessionImage]
    #: The largest serial each service had drawn (ids must not be drawn again).
    serials: dict[str, int]
    #: What the fold met and cannot restore, one line each.
    problems: list[str] = field(default_factory=list)
    #: task_completed events by task id: a resumed scenario counts on from these.
    completions: dict[str, int] = field(default_factory=dict)
    #: Session ids a resumed scenario has found again (``barnraise.scenarios._kit.host_session``).
    taken: set[str] = field(default_factory=set)

    def unsupported(self) -> str | None:
        """Why this image cannot be resumed from (one line), or None."""
        return "; ".join(dict.fromkeys(self.problems)) or None
