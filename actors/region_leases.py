"""The regions service's leases: a claim's term, renewed while its holder lives.

A room of :class:`barnraise.actors.regions.RegionManager` serving ``region_renew`` and
the timer of every claim that has a lease. A claim's ``timeout`` is a term, not a
lifetime: when it runs out the room asks the service whether the holder is still live
(:meth:`SessionService.holder_live`: a member of the session with an actor in the run);
a live holder's lease gets another term (``region_renewed``), a gone holder's lapses
(``region_released``, reason ``expired``). A holder that leaves or is expired by the
coordinator loses its claims at once, without waiting for a term's end.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from barnraise.actors.region_args import invalid
from barnraise.actors.service import Call
from barnraise.sim.events import RegionRenewed
from barnraise.sim.tools import TOOLS, ToolError, ok

if TYPE_CHECKING:
    from barnraise.actors.regions import RegionManager, _Claim, _World

__all__ = ["DEFAULT_LEASE", "RegionLeases"]

#: A claim's term when none is given: ``region_claim``'s default ``timeout``, also the
#: lease of a claim made on an agent's behalf (``_claim_for``, ``_auto_claim``).
DEFAULT_LEASE: Final[float] = float(TOOLS["region_claim"].input_schema["properties"]
                                    ["timeout"]["default"])


class RegionLeases:
    """Every session's claim timers, and the renewals, of one :class:`RegionManager`."""

    def __init__(self, manager: RegionManager) -> None:
        self.manager = manager

    def arm(self, session_id: str, claim: _Claim, delay: float) -> None:
        """Run ``claim``'s term out ``delay`` seconds from now (a daemon timer: a lease
        never keeps a run alive)."""
        manager = self.manager
        claim.timer = manager.dispatcher.call_later(
            delay, manager, self.expire, session_id, claim.claim_id, daemon=True)

    def expire(self, session_id: str, claim_id: str) -> None:
        """A claim's term ran out: a live holder's lease gets another, a gone one's lapses."""
        manager = self.manager
        s = manager.worlds.get(session_id)
        claim = s.claims.get(claim_id) if s is not None else None
        if s is not None and claim is not None:
            claim.timer = None  # it has fired
            if claim.lease > 0 and manager.holder_live(s.info.session_id, claim.agent_id):
                self.renew(s, claim, claim.lease)
            else:
                manager.drop(s, claim, "expired")

    def renew(self, s: _World, claim: _Claim, lease: float) -> None:
        """Start a new term of ``lease`` seconds for ``claim`` from now; announce it."""
        manager = self.manager
        if claim.timer is not None:
            claim.timer.cancel()
        claim.lease = lease
        claim.expires_at = manager.now + lease
        self.arm(s.info.session_id, claim, lease)
        manager.emit_event(RegionRenewed(
            session_id=s.info.session_id, agent_id=claim.agent_id, claim_id=claim.claim_id,
            expires_at=claim.expires_at, lease=lease))

    def tool_region_renew(self, call: Call) -> dict[str, Any]:
        """Start a new term of the caller's claim ``claim_id`` now: ``timeout`` seconds, or
        the claim's own term when not given (a claim with no lease gets the default one).

        Result: claim_id, expires_at, timeout. Only the holder may renew: anyone else is
        refused not_owner, a claim that is gone claim_not_found; either changes nothing.
        """
        manager = self.manager
        s = manager.world_of(call.session_id)
        claim_id = call.args["claim_id"]
        claim = manager.claim_of(s, call.session_id, claim_id)
        if claim.agent_id != call.caller:
            raise ToolError("not_owner", f"{claim_id} is held by "
                            f"{manager.member_name(call.session_id, claim.agent_id)}; only its "
                            "holder may renew it", owner=claim.agent_id)
        given = call.args.get("timeout")
        lease = float(given) if given is not None else claim.lease or DEFAULT_LEASE
        if lease <= 0:
            raise invalid("timeout", f"a renewal is a term of seconds > 0, got {given!r}; "
                          "release the claim to end it")
        self.renew(s, claim, lease)
        return ok(claim_id=claim_id, expires_at=claim.expires_at, timeout=lease)
