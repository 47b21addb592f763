"""The one reader of a stored run's log: its decoder, and the pairing of calls with answers.

Every reader of a stored log (:func:`barnraise.actors.stored.rebuild.world_at` and the view's
:class:`barnraise.actors.stored.index.LogIndex`, :func:`barnraise.actors.stored.resume.image_of` for
a realtime resume,
the store's delegations table, ``barnraise.scenarios._kit.calls_before``) decodes a record's
content with :data:`decode` and pairs an agent's tool call with its answer here.

What a reader may rely on:

* a **call** is a ``coordination_request`` delivered from an agent (any sender that is
  not a service, :data:`barnraise.sim.tools.SERVICES`) to a service (:func:`is_call`); an
  **answer** is a ``coordination_response`` delivered from a service to an agent
  (:func:`is_answer`);
* answers carry no request id in the log, but a service answers one agent's calls in
  the order it takes them (the regions service's tools are synchronous; an agent waits
  for each answer before its next call to the task queue or the coordinator, as every
  shipped behaviour does), so the n-th answer a service gave an agent answers the n-th
  call it took from that agent (:class:`Calls`). A request from a sender that is not an
  agent's tool call (the supervisor's notices to the task queue) is queued like one and
  never answered: each sender's calls wait apart, so it pairs with nothing else;
* a resumed run's log goes on after a :data:`RESUMED` event: what the stopped run left
  unanswered is never answered (its services are gone), so the pairing starts afresh
  there (:meth:`Calls.clear`).

:func:`paired` is that pass over records. A reader on a hot path
(``barnraise.actors.stored.resume``'s fold
over raw rows, ``barnraise.actors.stored.rebuild.pair_writes`` over regions' calls alone) drives a
:class:`Calls` itself by the same two rules; ``tests/test_log.py`` checks that they pair
a real log as :func:`paired` does.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from typing import Final, Generic, TypeVar

import msgspec

from barnraise.sim.tools import SERVICES
from barnraise.sim.trace import DELIVER, EVENT, TraceRecord

__all__ = ["ANSWER", "CALL", "RESUMED", "Calls", "decode", "is_answer", "is_call", "paired"]

#: The one decoder of a record's content (canonical JSON bytes) into Python values.
decode: Final = msgspec.json.Decoder().decode

#: A call's record type, and its answer's.
CALL: Final = "coordination_request"
ANSWER: Final = "coordination_response"
#: The event a resumed run's log starts with (from ``system``): the calls the stopped run
#: left unanswered are never answered, so the pairing of calls and answers starts afresh.
RESUMED: Final = "run_resumed"

_SERVICES: Final = frozenset(SERVICES)

C = TypeVar("C")


def is_call(kind: str, type_: str, sender: str, recipient: str) -> bool:
    """Is a record of these fields an agent's call to a service?"""
    return kind == DELIVER and type_ == CALL and recipient in _SERVICES \
        and sender not in _SERVICES


def is_answer(kind: str, type_: str, sender: str, recipient: str) -> bool:
    """Is a record of these fields a service's answer to an agent?"""
    return kind == DELIVER and type_ == ANSWER and sender in _SERVICES \
        and recipient not in _SERVICES


class Calls(Generic[C]):
    """Every agent's calls to each service not yet answered, oldest first, each kept as
    whatever the reader made of it (a record, a decoded body, a seq)."""

    __slots__ = ("waiting",)

    def __init__(self) -> None:
        #: (service, agent) -> that agent's unanswered calls to that service, oldest first.
        self.waiting: dict[tuple[str, str], deque[C]] = {}

    def call(self, service: str, agent: str, call: C) -> None:
        """``agent`` called ``service``: ``call`` waits for its answer."""
        queue = self.waiting.get((service, agent))
        if queue is None:
            queue = self.waiting[service, agent] = deque()
        queue.append(call)

    def answer(self, service: str, agent: str) -> C | None:
        """``service`` answered ``agent``: the call it answers (None: the log holds no
        call of that agent's waiting for it)."""
        queue = self.waiting.get((service, agent))
        return queue.popleft() if queue else None

    def oldest(self, service: str, agent: str) -> C | None:
        """``agent``'s oldest call to ``service`` still waiting for its answer, or None."""
        queue = self.waiting.get((service, agent))
        return queue[0] if queue else None

    def unanswered(self) -> int:
        """How many calls are waiting."""
        return sum(len(queue) for queue in self.waiting.values())

    def clear(self) -> None:
        """A resumed run starts here: nothing waiting now will be answered."""
        self.waiting.clear()


def paired(records: Iterable[TraceRecord]
           ) -> Iterator[tuple[TraceRecord, TraceRecord | None]]:
    """Every record of ``records`` (a log from its first record), in order, each answer
    with the call it answers (None for any other record, and for an answer the log
    holds no call for)."""
    calls: Calls[TraceRecord] = Calls()
    for r in records:
        kind = r.kind
        if kind == DELIVER:
            if r.type == CALL:
                if r.recipient in _SERVICES and r.sender not in _SERVICES:
                    calls.call(r.recipient, r.sender, r)
            elif r.type == ANSWER and r.sender in _SERVICES and r.recipient not in _SERVICES:
                yield r, calls.answer(r.sender, r.recipient)
                continue
        elif kind == EVENT and r.type == RESUMED:
            calls.clear()
        yield r, None

