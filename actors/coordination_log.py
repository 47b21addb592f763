"""The coordination service's state, folded from a stored log.

The coordination service (:mod:`barnraise.actors.coordination`) owns named locks and barriers. What
it
held, the log says: each lock's holder and lease, its end and its term (``lock_granted``, which a
renewal is too; ``lock_released`` and
``lock_expired`` free it, and a next holder's grant follows) and each barrier's releases
(``barrier_released``). Waits for a lock or at a barrier are not kept: the agents waiting
were the stopped run's, and are gone.

:class:`CoordinationFold` is its share of a realtime resume's fold
(:mod:`barnraise.actors.stored.resume`); ``CoordinationService.restore_session`` takes what it
makes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from barnraise.sim.trace import TraceRecord

if TYPE_CHECKING:
    from barnraise.actors.stored.image import SessionImage

__all__ = ["EVENTS", "CoordinationFold"]

#: The event types the coordination service's fold reads.
EVENTS: Final = frozenset({"lock_granted", "lock_released", "lock_expired",
                           "barrier_released"})


class CoordinationFold:
    """Each session's ``locks`` and ``barrier_releases``, from the events."""

    def event(self, s: SessionImage, r: TraceRecord, body: dict[str, Any]) -> None:
        """An event of :data:`EVENTS` in session ``s``."""
        kind = r.type
        if kind == "lock_granted":
            # a renewal is a grant to the holder again; its term is the grant's length
            ends = body.get("expires_at")
            s.locks[str(body["lock_id"])] = {"holder": str(body["holder"]), "expires_at": ends,
                                            "lease": 0.0 if ends is None else ends - r.t}
        elif kind in ("lock_released", "lock_expired"):
            s.locks.pop(str(body.get("lock_id")), None)  # a next holder's grant follows
        elif kind == "barrier_released":
            s.barrier_releases[str(body["barrier_id"])] = int(body["generation"])
