"""Pages of a long answer: a cursor's position, and lists cut to fit one reply.

Used by the coordinator and its rooms for ``session_get_state``, a join's first look
and ``a2a_discover`` (see also :func:`barnraise.actors.service.fit_prefix`).
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from barnraise.sim.tools import ToolError

__all__ = ["cursor_offset", "fit_lists"]

_encode: Final = msgspec.json.encode


def cursor_offset(cursor: str | None) -> int:
    """The position a cursor names (a previous answer's ``next_cursor``); 0 for None.
    Anything else is ``invalid_argument`` naming ``cursor``."""
    if cursor is None:
        return 0
    if not (cursor.isascii() and cursor.isdigit() and len(cursor) <= 9):
        raise ToolError("invalid_argument", "cursor: not a cursor this session gave "
                        f"(a previous answer's next_cursor), got {cursor[:40]!r}",
                        field="cursor")
    return int(cursor)


def fit_lists(result: dict[str, Any], lists: list[list[Any]], budget: int) -> int:
    """Cut every list of ``lists`` (parts of ``result``) to the longest common length
    ``n`` at which ``result`` fits ``budget`` bytes of JSON; ``n``. Most answers fit as
    they are, found with one encoding; only a longer one is measured item by item."""
    longest = max((len(x) for x in lists), default=0)
    if len(_encode(result)) <= budget:
        return longest
    kept = [x[:] for x in lists]
    for x in lists:
        x.clear()
    used = len(_encode(result))
    n = 0
    while n < longest:
        step = sum(len(_encode(x[n])) + 1 for x in kept if n < len(x))
        if used + step > budget:
            break
        used += step
        n += 1
    for x, whole in zip(lists, kept, strict=True):
        x.extend(whole[:n])
    return n
