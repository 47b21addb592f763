"""The bounded priority mailbox every barnraise actor has.

Letters leave in order of priority (10 first), then arrival. ``offer`` never
blocks: a full mailbox refuses the letter and the caller dead-letters it.
The class satisfies pykka's inbox protocol (``put``, ``get``, ``empty``);
pykka's own control messages (stop, proxy calls) arrive through ``put`` at
priority 0, which puts a stop request behind every letter already queued.
``get`` returns payloads as they were offered and envelopes as they were put:
the actor's loop (``barnraise.actors.base.A2AActor``) tells them apart.

Why not ``queue.PriorityQueue``: its every put and get takes a Python-level
``Condition``. Here each priority level is a ``collections.deque`` (append and
popleft are atomic in C) and a ``queue.SimpleQueue`` of tokens, one per
letter, does the blocking in C. Only the actor's own thread takes letters
out, so the one-token-one-letter invariant holds: a token is put only after
its letter, and taken before a letter is popped.
"""

from __future__ import annotations

import threading
from collections import deque
from queue import SimpleQueue
from typing import Any, ClassVar, Final

__all__ = ["DEFAULT_CAPACITY", "PriorityMailbox"]

DEFAULT_CAPACITY: Final = 1000
_LEVELS: Final = 11  # priorities 10 (index 0) down to 1, then 0 for pykka's control messages
_creating: Final = threading.Lock()


class PriorityMailbox:
    """Thread-safe for many senders and one reader; bounded (approximately, see offer)."""

    __slots__ = ("_levels", "_tokens", "capacity")

    #: True for a mailbox whose letters the sending thread hands over through
    #: ``accept`` (``barnraise.actors.client.InlineMailbox``): the realtime dispatcher asks.
    inline: ClassVar[bool] = False

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self.capacity = capacity
        # Index 0 is priority 10, so get() scans from the front. Levels are
        # made on first use: an empty deque is ~760 bytes, and 100,000 idle
        # actors with eleven each would cost most of a gigabyte.
        self._levels: list[deque[Any] | None] = [None] * _LEVELS
        self._tokens: SimpleQueue[None] = SimpleQueue()

    def _new_level(self, index: int) -> deque[Any]:
        with _creating:  # rare: racing first senders must share one deque
            level = self._levels[index]
            if level is None:
                level = self._levels[index] = deque()
            return level

    def offer(self, payload: Any, priority: int, *, bounded: bool = True) -> bool:
        """Queue ``payload``; False (and nothing queued) when the mailbox is full.

        With several threads offering at once the bound can be overshot by at
        most one letter per racing sender: the check and the append are not
        one atomic step, and making them one would cost a lock per letter.
        ``bounded=False`` is for the runtime's own timer letters, which must
        never be lost to a flood of mail.
        """
        if bounded and self._tokens.qsize() >= self.capacity:
            return False
        level = self._levels[10 - priority]
        if level is None:
            level = self._new_level(10 - priority)
        level.append(payload)
        self._tokens.put(None)
        return True

    def put(self, envelope: Any, /) -> None:
        """pykka's entry point for its control messages; never refused."""
        level = self._levels[10] or self._new_level(10)
        level.append(envelope)
        self._tokens.put(None)

    def get(self) -> Any:
        self._tokens.get()
        for level in self._levels:
            if level:
                return level.popleft()
        raise AssertionError("mailbox token without a letter")  # pragma: no cover

    def empty(self) -> bool:
        return self._tokens.empty()

    def __len__(self) -> int:
        return self._tokens.qsize()
