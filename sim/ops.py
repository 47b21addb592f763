"""The services' operations among themselves that a stored run's log is read by.

Besides the tools an agent calls, the services ask each other (and the coordinator tells
every service) through operations: a ``coordination_request`` whose content names the
operation under ``"op"`` where a tool call names its tool under ``"tool"``. A service
serves operation ``name`` with its method ``op`` + ``name`` (``op_checkpoint`` serves
:data:`CHECKPOINT`); the leading underscore of every operation's name is what tells it from
a tool's.

The log keeps these requests as it keeps every letter. The ones named here are part of
the log's schema: the readers of a stored log (:mod:`sim.rebuild`, :mod:`sim.rebuild_more`,
:mod:`sim.restore`) fold them, and the services send them by these names, so no reader
spells an operation out. Stores already written hold these names: changing one makes
those stores unreadable, like any change to the log's schema. The content each carries,
as the readers rely on it:

* :data:`SESSION` (coordinator to every service): ``session``, the session's info;
* :data:`SESSION_CLOSED` (coordinator to every service): ``session_id``;
* :data:`MEMBER_JOINED` (coordinator to every service): ``session_id``, ``member``;
* :data:`MEMBER_LEFT` (coordinator to every service): ``session_id``, ``agent_id``;
* :data:`BLUEPRINT` (coordinator to regions): ``session_id``, ``blueprint`` (rows of tile
  codes);
* :data:`CHECKPOINT` (coordinator to regions; to the task queue too when the checkpoint
  keeps the session state): ``session_id``, ``checkpoint_id``, and to regions ``include``
  (what it keeps: any of ``tiles``, ``shaders``, ``cartridges``);
* :data:`ROLLBACK` (coordinator to regions, and to the task queue as for its checkpoint):
  ``session_id``, ``checkpoint_id``;
* :data:`CLAIM_FOR` (task queue to regions): ``session_id``, ``agent_id``, ``region``,
  ``purpose`` (``"task <id>"`` for a task's region).

Every other operation (``_state``, ``_release_all``, ...) stays the services' own: no
reader of the log depends on it.
"""

from __future__ import annotations

from typing import Final

__all__ = ["BLUEPRINT", "CHECKPOINT", "CLAIM_FOR", "FOLDED", "MEMBER_JOINED", "MEMBER_LEFT",
           "PREFIX", "ROLLBACK", "SESSION", "SESSION_CLOSED", "op_name"]

#: What every operation's name starts with, and no tool's.
PREFIX: Final = "_"


def op_name(name: str) -> str:
    """The operation served by a service's method ``op_<name>``, as the log spells it."""
    if not name or name.startswith(PREFIX):
        raise ValueError(f"an operation's name after {PREFIX!r}, not {name!r}")
    return PREFIX + name


SESSION: Final = "_session"
SESSION_CLOSED: Final = "_session_closed"
MEMBER_JOINED: Final = "_member_joined"
MEMBER_LEFT: Final = "_member_left"
BLUEPRINT: Final = "_blueprint"
CHECKPOINT: Final = "_checkpoint"
ROLLBACK: Final = "_rollback"
CLAIM_FOR: Final = "_claim_for"

#: Every operation the log's readers fold.
FOLDED: Final = frozenset({SESSION, SESSION_CLOSED, MEMBER_JOINED, MEMBER_LEFT, BLUEPRINT,
                           CHECKPOINT, ROLLBACK, CLAIM_FOR})
