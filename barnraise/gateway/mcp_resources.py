"""MCP resources of a served world: each session's canvas, state and recent events.

Three URIs a session, listed by ``resources/list`` and described by
``resources/templates/list``:

* ``barnraise://session/{id}/canvas.png``: the tile layer as a PNG, one pixel a cell
  (``grid_size`` x ``grid_size``), in the live view's palette;
* ``barnraise://session/{id}/state``: JSON: the session, members, claims, task counts,
  progress (with ``completion_percent``), locks and barriers;
* ``barnraise://session/{id}/events``: JSON: the session's last :data:`RECENT` domain
  events, oldest first, each ``{"t", "type", ...body}``.

Who may read them is the caller's to decide (:class:`~.mcp_surface.McpSurface`: a member
of the session reads its own session's, the operator every session's, anybody else
none). :class:`Subscriptions` sends ``notifications/resources/updated`` for a subscribed
URI when its session has a new domain event or its counters moved (a tile write is no
event: they are looked at once an interval), at most once each :data:`MIN_INTERVAL`
wall seconds a subscription (a burst of changes is one notification, sent when the
interval is up), and holds at most :data:`MAX_PER_CLIENT` subscriptions a client,
:data:`MAX_PER_OWNER` an agent (over all its MCP sessions) and :data:`MAX_TOTAL` in all.
"""

from __future__ import annotations

import asyncio
import io
import re
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

import msgspec
import numpy as np
from numpy.typing import NDArray
from PIL import Image

from barnraise.actors.world import Simulation
from barnraise.plots import TILE_COLOURS

__all__ = ["MAX_PER_CLIENT", "MAX_PER_OWNER", "MAX_SESSIONS", "MAX_TOTAL", "MIN_INTERVAL",
           "RECENT", "Feeds", "Subscriptions", "encode_png", "parse_uri"]

#: Events a session's ``events`` resource keeps (its last).
RECENT: Final = 100
#: Sessions whose recent events are kept at most: past it, the one heard from longest
#: ago is forgotten (a session's close is not a traced event, so a closed session's
#: events would otherwise stay for the life of the server).
MAX_SESSIONS: Final = 1024
#: Encoded canvases kept, each for the counters it was encoded at (a 4,096-square canvas
#: costs about a third of a CPU second to encode): a read of an unchanged canvas is
#: served from here, and the server encodes one canvas at a time.
PNGS_KEPT: Final = 8
#: Wall seconds between two updates of one subscription, at least.
MIN_INTERVAL: Final = 1.0
#: Subscriptions one MCP client (one MCP session, or the stdio peer) may hold.
MAX_PER_CLIENT: Final = 32
#: Subscriptions one agent holds at most over all its MCP sessions (a token can open
#: any number of them), and all clients together.
MAX_PER_OWNER: Final = 64
MAX_TOTAL: Final = 4096
#: Wall seconds a read waits for the world's services.
READ_TIMEOUT: Final = 10.0
#: zlib's level for the canvas PNG: 1 takes an eighth of the CPU of the default (6) on a
#: 4,096-cell-square canvas of random tiles (0.33 s against 2.6 s) for 7 % more bytes.
PNG_LEVEL: Final = 1
#: The kinds of resource a session has, with their MIME types.
KINDS: Final = {"canvas.png": "image/png", "state": "application/json",
                "events": "application/json"}
PREFIX: Final = "barnraise://session/"
_URI: Final = re.compile(r"^barnraise://session/([^/]+)/(canvas\.png|state|events)$")
#: The live view's palette, as RGB triples, by tile code.
_PALETTE: Final = b"".join(bytes.fromhex(colour[1:]) for colour in TILE_COLOURS)


def parse_uri(uri: str) -> tuple[str, str]:
    """``(session_id, kind)`` of a resource URI; ValueError naming the URI otherwise."""
    found = _URI.match(uri)
    if found is None:
        raise ValueError(f"unknown resource {uri!r}: expected {PREFIX}ID/canvas.png, "
                         f"{PREFIX}ID/state or {PREFIX}ID/events")
    return found.group(1), found.group(2)


def encode_png(tiles: NDArray[np.uint8]) -> bytes:
    """``tiles`` (``[y, x]`` tile codes) as an indexed-colour PNG, one pixel a cell
    (Pillow, which matplotlib installs, at zlib level :data:`PNG_LEVEL`)."""
    colours = len(_PALETTE) // 3
    codes = np.minimum(tiles, colours - 1).astype(np.uint8)  # an unknown code draws as the last
    image = Image.fromarray(np.ascontiguousarray(codes), mode="P")
    image.putpalette(_PALETTE)
    out = io.BytesIO()
    image.save(out, format="PNG", compress_level=PNG_LEVEL)
    return out.getvalue()


class Feeds:
    """Each session's recent events, heard from the trace, and who wants to hear of them.

    The trace listener runs on the thread that records the event: it appends to a
    bounded deque and, for a session someone subscribed to, hands the session id to
    ``on_change`` (which must be cheap and thread-safe)."""

    def __init__(self, simulation: Simulation) -> None:
        self.simulation = simulation
        self._recent: dict[str, deque[tuple[float, str, Any]]] = {}
        self._heard_count: dict[str, int] = {}  # events heard a session: a rollback is one
        self._pngs: dict[str, tuple[tuple[int, ...], bytes]] = {}
        self._encoding = threading.Lock()
        self.encoded = 0  # canvases encoded (the rest of the reads were served kept ones)
        self.watched: frozenset[str] = frozenset()
        self.on_change: Callable[[str], None] | None = None
        self._stop = simulation.dispatcher.trace.listen(self._heard)

    def close(self) -> None:
        self._stop()

    def _heard(self, t: float, sender: str, topic: str, event_type: str, body: Any) -> None:
        if not (topic.startswith("session:") and topic.endswith(":events")):
            return
        session_id = topic[8:-7]
        recent = self._recent.pop(session_id, None)  # re-inserted: the latest heard last
        if recent is None:
            recent = deque(maxlen=RECENT)
            while len(self._recent) >= MAX_SESSIONS:
                forgotten = next(iter(self._recent))
                del self._recent[forgotten]
                self._heard_count.pop(forgotten, None)
        self._recent[session_id] = recent
        self._heard_count[session_id] = self._heard_count.get(session_id, 0) + 1
        recent.append((t, event_type, body))
        if session_id in self.watched and self.on_change is not None:
            self.on_change(session_id)

    def version(self, session_id: str) -> tuple[int, ...] | None:
        """What changes with every write to the canvas (tile writes are not domain events):
        the session's counters (asks the world: call off the loop). None: no such session."""
        try:
            view = self.simulation.view(session_id, canvas=False, tasks=False,
                                        timeout=READ_TIMEOUT)
        except LookupError:
            return None
        p = view.progress
        return (p.tiles_placed, p.lost_work, p.conflicts, p.shaders_loaded,
                p.cartridges_assembled, len(view.checkpoints))

    def _canvas_png(self, session_id: str) -> bytes:
        """The session's canvas as a PNG: the kept one while the session's counters and
        events have not moved since, else encoded now, one canvas at a time server-wide
        (so a client that reads in a loop, or many at once, costs one encoding per
        change, not one per read)."""
        with self._encoding:
            moved = self.version(session_id)
            if moved is None:
                raise LookupError(session_id)
            at = (self._heard_count.get(session_id, 0), *moved)
            kept = self._pngs.get(session_id)
            if kept is not None and kept[0] == at:
                return kept[1]
            view = self.simulation.view(session_id, canvas=True, timeout=READ_TIMEOUT)
            assert view.canvas is not None
            data = encode_png(view.canvas)
            self.encoded += 1
            self._pngs.pop(session_id, None)
            while len(self._pngs) >= PNGS_KEPT:
                del self._pngs[next(iter(self._pngs))]
            self._pngs[session_id] = (at, data)
            return data

    def sessions(self) -> list[str]:
        """The open sessions' ids, oldest first (asks the world: call off the loop)."""
        return self.simulation.sessions()

    def read(self, session_id: str, kind: str) -> bytes:
        """The resource's bytes (asks the world: call off the loop). LookupError: no
        such session."""
        if kind == "events":
            if session_id not in self._recent and session_id not in self.sessions():
                raise LookupError(session_id)
            events = [{"t": t, "type": event_type, **body} if isinstance(body, dict)
                      else {"t": t, "type": event_type, "body": body}
                      for t, event_type, body in list(self._recent.get(session_id, ()))]
            return msgspec.json.encode({"session_id": session_id, "events": events})
        if kind == "canvas.png":
            return self._canvas_png(session_id)
        view = self.simulation.view(session_id, completion=True, timeout=READ_TIMEOUT)
        return msgspec.json.encode({
            "at": view.at, "session": view.session, "members": view.members,
            "claims": view.claims, "task_counts": dict(view.task_counts()),
            "progress": view.progress, "locks": view.locks, "barriers": view.barriers,
            "has_blueprint": view.has_blueprint})


@dataclass(eq=False)
class _Subscription:
    client: str
    owner: str  # the agent (or the operator) whose subscription it is
    uri: str
    session_id: str
    send: Callable[[str], Any]  # coroutine function: notify the client of uri
    still_allowed: Callable[[], bool]
    last: float = float("-inf")
    timer: asyncio.TimerHandle | None = None


@dataclass
class _Client:
    subscriptions: dict[str, _Subscription] = field(default_factory=dict)


class Subscriptions:
    """``resources/subscribe`` state, served from one asyncio loop (the hub's).

    A client is a key (its MCP session id; the stdio peer's is ``"stdio"``). An update
    is due when a subscribed URI's session has a new domain event; it goes out at
    once if the subscription's last went out :data:`MIN_INTERVAL` ago or more, else
    once when that interval is up. A client whose send fails, or whose
    ``still_allowed`` no longer holds (its agent left or expired), loses its
    subscriptions."""

    def __init__(self, feeds: Feeds, *, max_per_client: int = MAX_PER_CLIENT,
                 interval: float = MIN_INTERVAL) -> None:
        self.feeds = feeds
        self.max_per_client = max_per_client
        self.interval = interval
        self._clients: dict[str, _Client] = {}
        self._owners: dict[str, int] = {}  # subscriptions held by each agent (or client)
        self._by_session: dict[str, list[_Subscription]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._due: set[str] = set()
        self._versions: dict[str, tuple[int, ...] | None] = {}
        self._poller: asyncio.Task[None] | None = None
        #: Notifications sent, and updates folded into a later one (for tests and /stats).
        self.sent = 0
        self.folded = 0
        feeds.on_change = self._changed

    def _bound(self, client: str, owner: str) -> None:
        held = self._clients.get(client)
        if held is not None and len(held.subscriptions) >= self.max_per_client:
            raise ValueError(f"this client holds {len(held.subscriptions)} subscriptions, "
                             f"the most one may (unsubscribe from one first)")
        if self._owners.get(owner, 0) >= MAX_PER_OWNER:
            raise ValueError(f"this agent holds {MAX_PER_OWNER} subscriptions over its MCP "
                             "sessions, the most one may (unsubscribe from one first)")
        if self.total() >= MAX_TOTAL:
            raise ValueError(f"the server holds {MAX_TOTAL} subscriptions, the most it "
                             "keeps; try again later")

    def total(self) -> int:
        """The subscriptions held, by every client."""
        return sum(len(held.subscriptions) for held in self._clients.values())

    async def add(self, client: str, uri: str, send: Callable[[str], Any],
                  still_allowed: Callable[[], bool], owner: str | None = None) -> None:
        """Subscribe ``client`` (of agent ``owner``; the client itself when None) to
        ``uri`` (again: no change). ValueError at a bound: the client's, the owner's or
        all clients'. A change after this returns is one an update is sent for."""
        owner = client if owner is None else owner
        self._loop = asyncio.get_running_loop()
        session_id, _ = parse_uri(uri)
        held = self._clients.get(client)
        if held is not None and uri in held.subscriptions:
            return
        self._bound(client, owner)
        if session_id not in self._by_session:  # the counters to compare the next look with
            self._versions[session_id] = await asyncio.to_thread(self.feeds.version,
                                                                 session_id)
        held = self._clients.get(client)
        if held is not None and uri in held.subscriptions:
            return
        self._bound(client, owner)  # again: another subscribe may have come in the await
        held = self._clients.setdefault(client, _Client())
        sub = _Subscription(client, owner, uri, session_id, send, still_allowed)
        held.subscriptions[uri] = sub
        self._owners[owner] = self._owners.get(owner, 0) + 1
        self._by_session.setdefault(session_id, []).append(sub)
        self.feeds.watched = frozenset(self._by_session)
        if self._poller is None or self._poller.done():
            self._poller = self._loop.create_task(self._poll())
            self._poller.add_done_callback(_quiet)

    async def _poll(self) -> None:
        """Each interval while anything is subscribed: the subscriptions whose agent
        has left or expired end; then the watched sessions' counters, an update for each
        session whose counters moved (a tile write is no event)."""
        while self._by_session:
            for sub in [sub for subs in self._by_session.values() for sub in subs]:
                if not sub.still_allowed():  # its agent left or expired: it ends
                    self.remove_client(sub.client)
            for session_id in list(self._by_session):
                version = await asyncio.to_thread(self.feeds.version, session_id)
                before = self._versions.get(session_id, version)
                if session_id not in self._by_session:
                    continue
                self._versions[session_id] = version
                if version != before:
                    self._update(session_id)
            await asyncio.sleep(self.interval)
        self._versions.clear()

    def close(self) -> None:
        if self._poller is not None:
            self._poller.cancel()

    def remove(self, client: str, uri: str) -> bool:
        held = self._clients.get(client)
        sub = held.subscriptions.pop(uri, None) if held is not None else None
        if sub is None:
            return False
        self._drop(sub)
        if held is not None and not held.subscriptions:
            del self._clients[client]
        return True

    def remove_client(self, client: str) -> None:
        held = self._clients.pop(client, None)
        for sub in held.subscriptions.values() if held is not None else ():
            self._drop(sub)

    def _drop(self, sub: _Subscription) -> None:
        if sub.timer is not None:
            sub.timer.cancel()
        left = self._owners.get(sub.owner, 0) - 1
        if left > 0:
            self._owners[sub.owner] = left
        else:
            self._owners.pop(sub.owner, None)
        same = self._by_session.get(sub.session_id, [])
        if sub in same:
            same.remove(sub)
        if not same:
            self._by_session.pop(sub.session_id, None)
            self._versions.pop(sub.session_id, None)
            self.feeds.watched = frozenset(self._by_session)

    def _changed(self, session_id: str) -> None:
        # on a world thread: hand over to the loop, once a session until it has run
        loop = self._loop
        if loop is None or session_id in self._due:
            return
        self._due.add(session_id)
        try:
            loop.call_soon_threadsafe(self._update, session_id)
        except RuntimeError:  # the loop has closed
            self._due.discard(session_id)

    def _update(self, session_id: str) -> None:
        self._due.discard(session_id)
        now = asyncio.get_running_loop().time()
        for sub in list(self._by_session.get(session_id, ())):
            if sub.timer is not None:
                self.folded += 1
                continue
            wait = sub.last + self.interval - now
            if wait <= 0:
                self._send(sub)
            else:
                self.folded += 1
                sub.timer = asyncio.get_running_loop().call_later(wait, self._send, sub)

    def _send(self, sub: _Subscription) -> None:
        sub.timer = None
        client = sub.client
        held = self._clients.get(client)
        if held is None or held.subscriptions.get(sub.uri) is not sub:
            return
        if not sub.still_allowed():
            self.remove_client(client)
            return
        sub.last = asyncio.get_running_loop().time()
        self.sent += 1
        task = asyncio.get_running_loop().create_task(self._deliver(client, sub))
        task.add_done_callback(_quiet)

    async def _deliver(self, client: str, sub: _Subscription) -> None:
        try:
            await asyncio.wait_for(sub.send(sub.uri), 10)
        except Exception:  # the client has gone: its subscriptions go too
            self.remove_client(client)


def _quiet(task: asyncio.Task[Any]) -> None:
    if not task.cancelled():
        task.exception()

