"""What the services held when a stored realtime run stopped: the image a resume restores.

Each service's fold of the log (``actors/*_log.py``) fills its share of each session's
:class:`SessionImage`; :func:`actors.stored.resume.image_of` drives them, and
``Simulation.restore`` hands every service the image (their ``restore_session``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from actors.regions_log import RegionsImage

__all__ = ["Image", "SessionImage"]


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
    #: Session ids a resumed scenario has found again (``scenarios._kit.host_session``).
    taken: set[str] = field(default_factory=set)

    def unsupported(self) -> str | None:
        """Why this image cannot be resumed from (one line), or None."""
        return "; ".join(dict.fromkeys(self.problems)) or None
