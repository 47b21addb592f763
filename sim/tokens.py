"""Random ids for what crosses the process (remote agents' correlation, message and
subscription ids), drawn from the operating system's CSPRNG as :mod:`secrets` draws
them, but in bulk: one ``os.urandom`` call for :data:`BATCH` ids rather than one a
call. Each ``urandom`` call is a system call that lets go of the GIL, so a thread
switch a WebSocket tool call; a batch makes it one per :data:`BATCH` calls.

Thread-safe (a lock around taking a slice); a forked child draws afresh, so it
never repeats its parent's ids.
"""

from __future__ import annotations

import base64
import os
import threading
from typing import Final

__all__ = ["BATCH", "ID_BYTES", "random_id"]

#: Random bytes an id carries (as ``secrets.token_urlsafe(24)``: 32 URL-safe characters).
ID_BYTES: Final = 24
#: Ids drawn by one ``os.urandom`` call.
BATCH: Final = 256

_lock: Final = threading.Lock()
_ID_CHARS: Final = ID_BYTES * 4 // 3  # base64 of 24 bytes: 32 characters, no padding
_pool = ""  # BATCH ids' characters, base64-encoded at once (24 bytes are whole groups of 3)
_at = 0


def random_id() -> str:
    """32 URL-safe characters from 24 fresh random bytes (never handed out twice)."""
    global _pool, _at
    with _lock:
        at = _at
        if at >= len(_pool):
            _pool = base64.urlsafe_b64encode(os.urandom(ID_BYTES * BATCH)).decode("ascii")
            at = 0
        _at = at + _ID_CHARS
        return _pool[at:at + _ID_CHARS]


def _forked() -> None:
    global _pool, _at
    _pool, _at = "", 0


os.register_at_fork(after_in_child=_forked)
