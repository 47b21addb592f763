"""Random ids for what crosses the process (remote agents' correlation, message and
subscription ids), drawn from the operating system's CSPRNG as :mod:`secrets` draws
them, but in bulk: one ``os.urandom`` call for :data:`BATCH` ids rather than one a
call. Each ``urandom`` call is a system call that lets go of the GIL, so a thread
switch a WebSocket tool call; a batch makes it one per :data:`BATCH` calls.

Thread-safe without a lock: the ids of a batch wait in a list and each is taken
with one ``list.pop`` (atomic), so no id is handed out twice; two threads that find
the list empty at once each draw a batch of their own. A forked child draws afresh,
so it never repeats its parent's ids.
"""

from __future__ import annotations

import base64
import os
from typing import Final

__all__ = ["BATCH", "ID_BYTES", "random_id"]

#: Random bytes an id carries (as ``secrets.token_urlsafe(24)``: 32 URL-safe characters).
ID_BYTES: Final = 24
#: Ids drawn by one ``os.urandom`` call.
BATCH: Final = 256

_ID_CHARS: Final = ID_BYTES * 4 // 3  # base64 of 24 bytes: 32 characters, no padding
#: Ids drawn and not handed out yet. A pop, not a lock around an index: a lock's
#: acquire and release made an id cost 5,700 instructions instead of 3,100 (cachegrind,
#: one call each; docs/benchmarks.md, the WebSocket call's server CPU).
_ids: Final[list[str]] = []


def random_id() -> str:
    """32 URL-safe characters from 24 fresh random bytes (never handed out twice)."""
    try:
        return _ids.pop()
    except IndexError:
        return _draw()


def _draw() -> str:
    text = base64.urlsafe_b64encode(os.urandom(ID_BYTES * BATCH)).decode("ascii")
    fresh = [text[at:at + _ID_CHARS] for at in range(0, len(text), _ID_CHARS)]
    taken = fresh.pop()
    _ids.extend(fresh)
    return taken


def _forked() -> None:
    _ids.clear()


os.register_at_fork(after_in_child=_forked)
