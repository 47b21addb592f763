"""The hub's bounds per remote agent: calls in flight, lock and barrier waits, and the
subscriptions it holds.

A room of :class:`barnraise.gateway.hub.Hub`: the hub asks :meth:`Bounds.over_limit`
before it sends a call and tells :meth:`Bounds.settled` when a bounded one is answered.
The counts live on each agent's :class:`~barnraise.gateway.slots.AgentSlot` (its
``waits``, ``subscribing``, ``subscriptions`` and ``subscribed_as``); this room is the
only code that changes the subscription ones. A call past a bound is not sent: it
answers ``limit_exceeded`` with ``limit`` naming the bound, counted (``limit_exceeded``
and ``limit_exceeded:NAME``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

from barnraise.gateway.slots import WAITS, AgentSlot, Counters, Limits, digest_of, fingerprint_of
from barnraise.sim.tools import fail

__all__ = ["Bounds"]


class Bounds:
    """The bounds of every remote agent of one hub (see the module doc)."""

    def __init__(self, limits: Limits, counters: Counters,
                 holds_subscription: Callable[[str], bool]) -> None:
        """``holds_subscription``: whether the world still holds a subscription id (the
        dispatcher's; one ends when its agent leaves, or crashes)."""
        self.limits = limits
        self.counters = counters
        self._holds_subscription = holds_subscription

    def subscribed(self, slot: AgentSlot, asked: bytes,
                    future: asyncio.Future[dict[str, Any]]) -> None:
        """Remember which subscription the ``a2a_subscribe`` whose arguments are
        ``asked`` was answered with (pruned to those the world holds as it grows)."""
        if future.cancelled():
            return
        result = future.result()
        sid = result.get("subscription_id")
        if not result.get("success") or not isinstance(sid, str):
            return
        kept = slot.subscribed_as
        # One key per subscription: the world answers many spellings of one (topic
        # aliases, an empty event_type) with the same id; only the last is kept, so
        # the memory stays within the bound, 16 bytes a key.
        for key in [k for k, v in kept.items() if v == sid]:
            del kept[key]
        kept[digest_of(asked)] = sid
        if len(kept) > 2 * self.limits.subscriptions:
            held = {s["subscription_id"] for s in self.held_subscriptions(slot)}
            slot.subscribed_as = {k: v for k, v in kept.items() if v in held}

    def _holds_identical(self, slot: AgentSlot, args: Mapping[str, Any]) -> bool:
        """``slot`` holds the very subscription these arguments ask for (the same
        arguments were answered with one the world still holds)."""
        sid = slot.subscribed_as.get(digest_of(fingerprint_of("a2a_subscribe", args)))
        return sid is not None and any(
            s["subscription_id"] == sid for s in self.held_subscriptions(slot))

    def over_limit(self, slot: AgentSlot, tool: str,
                    args: Mapping[str, Any]) -> dict[str, Any] | None:
        """The refusal of a call past one of the agent's bounds, or None. Costs a few
        lengths a call; a refused call is never sent, so it changes nothing. At the
        subscriptions bound, an ``a2a_subscribe`` identical to one the agent holds is
        let through: the world answers it with the one held, as below the bound."""
        limits = self.limits
        if len(slot.pending) + len(slot.orphans) >= limits.calls:
            return self.refusal("calls", f"{limits.calls} calls of this agent are in "
                                      "flight; wait for their answers")
        if tool in WAITS and slot.waits >= limits.waits:
            return self.refusal("waits", f"{limits.waits} lock and barrier waits of this "
                                      "agent are under way; wait for one to end")
        # At the bound, those the world no longer holds are forgotten first.
        if tool == "a2a_subscribe" and \
                len(slot.subscriptions) + slot.subscribing >= limits.subscriptions and \
                len(self.held_subscriptions(slot)) + slot.subscribing >= limits.subscriptions \
                and not self._holds_identical(slot, args):
            return self.refusal("subscriptions", f"this agent holds "
                                      f"{limits.subscriptions} subscriptions, the most it may")
        return None

    def held_subscriptions(self, slot: AgentSlot) -> list[dict[str, Any]]:
        """``slot``'s subscriptions that the world still holds (one ends when its agent
        leaves, or crashes); the others are forgotten here too."""
        holds = self._holds_subscription
        slot.subscriptions = [s for s in slot.subscriptions
                              if holds(str(s["subscription_id"]))]
        return slot.subscriptions

    def refusal(self, name: str, text: str) -> dict[str, Any]:
        """A ``limit_exceeded`` result naming the bound (``limit``), counted."""
        self.count(name)
        return fail("limit_exceeded", f"{name}: {text}", limit=name)

    def count(self, name: str) -> None:
        self.counters.add("limit_exceeded")
        self.counters.add(f"limit_exceeded:{name}")

    def settled(self, slot: AgentSlot, tool: str) -> None:
        """A call of ``slot``'s has its answer (or its caller has gone): off the bounds."""
        if tool in WAITS:
            slot.waits -= 1
        elif tool == "a2a_subscribe":
            slot.subscribing -= 1
