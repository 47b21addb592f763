"""``barnraise.connect``: a session agent on a remote gateway, with the in-process Client's face.

::

    import barnraise
    builder = barnraise.connect("http://127.0.0.1:8765", agent_name="B1", role="builder")
    builder.call("region_claim", region={"x": 0, "y": 0, "width": 10, "height": 10})
    message = builder.receive(timeout=5.0)
    builder.close()

:class:`RemoteClient` has ``call(tool, **args)``, a method per tool (both typed, from
:class:`barnraise.sim.tool_methods.ToolMethods`), ``call_any(tool, args)``, ``receive(timeout)``,
``messages()``, ``session_id`` and ``agent_id`` as :class:`barnraise.actors.world.Client` has, so
a script written against a local Simulation's client runs against a server. It
speaks JSON-RPC over the server's WebSocket ``/a2a`` (see :mod:`.ws`) and adds
``send(...)``: a barnraise Message signed with the agent's key.

What a caller can rely on:

* Results are the server's result dicts, failures included; a call never raises.
  A call with no answer within ``call_timeout`` wall seconds is ``no_reply``.
* When the connection drops, the client reconnects with exponential backoff and
  jitter (:class:`Backoff`: base, factor, cap, attempts), authenticates again
  with its token, checks its event subscriptions are still held (and takes out
  any missing one again), and resends the calls that had no answer with their
  original ids, which the server answers from memory if it had run them: no call
  runs twice. Messages the server kept for it while it was away arrive, each once
  (numbered; the client acknowledges what it has).
* After the last attempt fails, waiting calls and later ones answer ``no_reply``
  and :attr:`RemoteClient.closed` is true, with :attr:`RemoteClient.last_error`.

Only ``websockets`` (the gateway extra) is needed, and only when connecting:
importing this module needs nothing beyond barnraise's own dependencies.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import random
import secrets
import threading
import time
import urllib.request
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

import msgspec

from barnraise.sim.binding import prepare_call
from barnraise.sim.messages import Message, MessageError, Priority, decode, encode, session_topic
from barnraise.sim.tool_methods import ToolMethods
from barnraise.sim.tools import fail

if TYPE_CHECKING:
    from websockets.sync.client import ClientConnection

__all__ = ["Backoff", "RemoteClient", "RemoteError", "connect"]

_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder().decode


class RemoteError(RuntimeError):
    """Connecting, or joining on connect, failed; the text says why."""


@dataclass(frozen=True)
class Backoff:
    """Reconnection delays: ``base * factor**n`` capped at ``cap``, for ``attempts`` tries.

    Each delay is cut by a random fraction up to ``jitter`` (0..1), so clients
    cut off together do not all come back in the same instant.
    """

    base: float = 0.05
    factor: float = 2.0
    cap: float = 5.0
    attempts: int = 10
    jitter: float = 0.5

    def __post_init__(self) -> None:
        if not (self.base >= 0 and self.factor >= 1 and self.cap >= 0 and self.attempts >= 1
                and 0 <= self.jitter <= 1):
            raise ValueError(f"a backoff needs base >= 0, factor >= 1, cap >= 0, "
                             f"attempts >= 1 and 0 <= jitter <= 1; got {self}")

    def delays(self, rng: random.Random) -> Iterator[float]:
        for n in range(self.attempts):
            delay = min(self.cap, self.base * self.factor ** n)
            yield delay * (1.0 - self.jitter * rng.random())


def _ws_url(url: str) -> str:
    parts = urlsplit(url)
    scheme = {"http": "ws", "https": "wss", "ws": "ws", "wss": "wss"}.get(parts.scheme)
    if scheme is None or not parts.netloc:
        raise ValueError(f"expected http(s):// or ws(s):// and a host, got {url!r}")
    path = parts.path.rstrip("/")
    if not path.endswith("/a2a"):
        path += "/a2a"
    return urlunsplit((scheme, parts.netloc, path, "", ""))


def _http_url(url: str) -> str:
    parts = urlsplit(_ws_url(url))
    return urlunsplit(("https" if parts.scheme == "wss" else "http", parts.netloc, "", "", ""))


class _Waiter:
    __slots__ = ("done", "frame", "id", "result")

    def __init__(self, call_id: str, frame: bytes) -> None:
        self.id = call_id
        self.frame = frame
        self.done = threading.Event()
        self.result: dict[str, Any] | None = None


class RemoteClient(ToolMethods):
    """A remote agent's connection (see the module doc).

    A method per tool and ``call`` come typed from :class:`barnraise.sim.tool_methods.ToolMethods`;
    :meth:`call_any` takes any name.
    """

    def __init__(self, url: str, *, backoff: Backoff | None = None, call_timeout: float = 30.0,
                 open_timeout: float = 10.0, seed: int | None = None,
                 max_size: int = 4 << 20) -> None:
        self.url = _ws_url(url)
        self.backoff = backoff or Backoff()
        self.call_timeout = call_timeout
        self.open_timeout = open_timeout
        self.max_size = max_size
        self.agent_id: str | None = None
        self.session_id: str | None = None
        self.token: str | None = None
        self.signing_key: bytes | None = None
        self.time_scale = 1.0
        self.reconnects = 0
        self.closed = False
        self.last_error: str | None = None
        self._rng = random.Random(seed)
        self._nonce = secrets.token_hex(6)
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._waiters: dict[str, _Waiter] = {}
        self._inbox: deque[Message] = deque()
        self._arrived = threading.Condition()
        self._last_seq = 0  # the last message number received (never goes back)
        self._acked = 0
        self._subscriptions: list[dict[str, Any]] = []  # a2a_subscribe arguments
        self._clock: tuple[float, float] = (0.0, time.monotonic())  # (server now, at)
        try:
            self._ws: ClientConnection | None = self._open()
        except Exception as exc:  # refused, timed out, a bad handshake: say which
            raise RemoteError(f"cannot connect to {self.url}: {exc!r}") from None
        self._reader = threading.Thread(target=self._read_forever, name="barnraise-remote",
                                        daemon=True)
        self._reader.start()

    def __repr__(self) -> str:
        return f"<RemoteClient {self.agent_id} session={self.session_id} {self.url}>"

    def __enter__(self) -> RemoteClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the connection -------------------------------------------------------------------

    def _open(self) -> ClientConnection:
        from websockets.sync.client import connect as ws_connect

        # legacy=True: the connection itself, not a context manager (websockets 17)
        return ws_connect(self.url, open_timeout=self.open_timeout, max_size=self.max_size,
                          compression=None, close_timeout=1.0, legacy=True)

    def close(self) -> None:
        """Close the connection; waiting calls answer ``no_reply``. The agent stays joined."""
        self.closed = True
        ws = self._ws
        if ws is not None:
            with contextlib.suppress(Exception):  # already broken: closed either way
                ws.close()
        self._fail_waiting("the client was closed")
        if self._reader is not threading.current_thread():
            self._reader.join(5.0)

    def cut(self) -> None:
        """Drop the connection as a network fault would (for tests): the client reconnects."""
        ws = self._ws
        if ws is not None:
            ws.socket.close()

    def _read_forever(self) -> None:
        from websockets.exceptions import ConnectionClosed

        while not self.closed:
            ws = self._ws
            try:
                if ws is None:
                    raise ConnectionError("not connected")
                frame = ws.recv()
            except (ConnectionClosed, OSError, ConnectionError, RuntimeError) as exc:
                if self.closed:
                    return
                self.last_error = f"connection lost: {exc!r}"
                if not self._reconnect():
                    return
                continue
            try:
                self._on_frame(frame)
            except Exception as exc:  # a bad frame must not stop the reader
                self.last_error = f"bad frame from the server: {exc!r}"

    def _reconnect(self) -> bool:
        self._ws = None
        for delay in self.backoff.delays(self._rng):
            time.sleep(delay)
            if self.closed:
                return False
            try:
                ws = self._open()
            except Exception as exc:  # every failure to connect is one more attempt
                self.last_error = f"reconnect failed: {exc!r}"
                continue
            if self.token is not None and not self._resume(ws):
                ws.close()
                if self.closed:
                    return False
                continue
            self._ws = ws
            self.reconnects += 1
            self._resend()
            return True
        self.last_error = (f"gave up after {self.backoff.attempts} reconnection attempts; "
                           f"{self.last_error}")
        self.closed = True
        self._fail_waiting(self.last_error)
        return False

    def _resume(self, ws: ClientConnection) -> bool:
        """Authenticate a new connection as this agent and take back what it kept."""
        from websockets.exceptions import ConnectionClosed

        auth_id = f"{self._nonce}:auth:{next(self._ids)}"
        try:
            ws.send(_encode({"jsonrpc": "2.0", "id": auth_id, "method": "barnraise.auth",
                             "params": {"token": self.token, "last_seq": self._last_seq}})
                    .decode())
            deadline = time.monotonic() + self.open_timeout
            while True:
                frame = ws.recv(timeout=max(0.0, deadline - time.monotonic()))
                body = _decode(frame)
                if isinstance(body, dict) and body.get("id") == auth_id:
                    break
                self._on_frame(frame)
        except (ConnectionClosed, OSError, TimeoutError) as exc:
            self.last_error = f"resume failed: {exc!r}"
            return False
        if "error" in body:
            # The server no longer knows this agent (a new server): nothing to resume.
            self.last_error = f"the server refused the token: {body['error'].get('message')}"
            self.closed = True
            self._fail_waiting(self.last_error)
            return False
        answer = body["result"]
        self._set_clock(answer)
        held = {s.get("topic") for s in answer.get("subscriptions", ())}
        missing = [args for args in self._subscriptions
                   if self._topic_of(args) not in held]
        for args in missing:  # taken out again on the new connection, answers read later
            self._send_call(ws, "a2a_subscribe", args)
        return True

    def _topic_of(self, args: dict[str, Any]) -> str | None:
        if self.session_id is None:
            return None
        try:  # the server's own rule, so the two agree on what the subscription was
            return session_topic(self.session_id, args.get("topic") or None,
                                 args.get("event_type"))
        except (PermissionError, ValueError):
            return None  # refused when it was made: nothing to take out again

    def _resend(self) -> None:
        ws = self._ws
        with self._lock:
            frames = [w.frame for w in self._waiters.values() if not w.done.is_set()]
        for frame in frames:
            try:
                assert ws is not None
                ws.send(frame.decode())
            except Exception:
                return  # the reader notices the broken connection and tries again

    def _fail_waiting(self, why: str) -> None:
        with self._lock:
            waiting = list(self._waiters.values())
            self._waiters.clear()
        for waiter in waiting:
            if not waiter.done.is_set():
                waiter.result = fail("no_reply", why)
                waiter.done.set()

    # -- frames from the server -----------------------------------------------------------

    def _on_frame(self, frame: str | bytes) -> None:
        body = _decode(frame)
        if not isinstance(body, dict):
            return
        method = body.get("method")
        if method is not None:
            if method in ("barnraise.message", "barnraise.event"):
                self._on_delivery(body.get("params") or {})
            return
        with self._lock:
            waiter = self._waiters.pop(str(body.get("id")), None)
        if waiter is None:
            return
        if "error" in body:
            waiter.result = _failure(body["error"])
        else:
            waiter.result = body.get("result")
        waiter.done.set()

    def _on_delivery(self, params: dict[str, Any]) -> None:
        seq = params.get("seq")
        if type(seq) is not int or seq <= self._last_seq:
            return  # already had it (resent after a reconnect): once only
        try:
            message = decode(_encode(params.get("message")), self.signing_key)
        except MessageError as exc:
            self.last_error = f"a delivered message did not verify: {exc}"
            return
        with self._arrived:
            self._last_seq = seq
            self._inbox.append(message)
            self._arrived.notify_all()
        if seq - self._acked >= 64:
            self._ack()

    def _ack(self) -> None:
        seq = self._last_seq
        ws = self._ws
        if ws is None or seq <= self._acked:
            return
        # Unacknowledged mail is resent after a reconnect and dropped here as seen.
        with contextlib.suppress(Exception):
            ws.send(_encode({"jsonrpc": "2.0", "method": "barnraise.ack",
                             "params": {"seq": seq}}).decode())
            self._acked = seq

    def _set_clock(self, answer: dict[str, Any]) -> None:
        if isinstance(answer.get("now"), (int, float)):
            self._clock = (float(answer["now"]), time.monotonic())
        if isinstance(answer.get("time_scale"), (int, float)) and answer["time_scale"] > 0:
            self.time_scale = float(answer["time_scale"])

    @property
    def now(self) -> float:
        """The server's simulation time, as estimated from the last answer that gave it."""
        at, wall = self._clock
        return at + (time.monotonic() - wall) * self.time_scale

    # -- calls ------------------------------------------------------------------------------

    def _send_call(self, ws: ClientConnection | None, tool: str,
                   args: dict[str, Any]) -> _Waiter:
        call_id = f"{self._nonce}:{next(self._ids)}"
        waiter = _Waiter(call_id, _encode({"jsonrpc": "2.0", "id": call_id, "method": tool,
                                           "params": args}))
        with self._lock:
            self._waiters[call_id] = waiter
        if ws is not None:
            with contextlib.suppress(Exception):  # kept: resent once the reader reconnects
                ws.send(waiter.frame.decode())
        return waiter

    def call_any(self, name: str, args: Mapping[str, Any], /) -> dict[str, Any]:
        """Call tool ``name`` as this agent; its result dict (see the module doc).

        The untyped way in, for code that has the tool's name as data; ``call`` and
        the methods named after the tools (:class:`barnraise.sim.tool_methods.ToolMethods`)
        are the typed ones and come here.
        """
        prepared = prepare_call(name, args, None)  # the server binds the session
        if isinstance(prepared, dict):
            return prepared
        args = prepared[1]  # a copy of its own, plain data
        if self.closed:
            return fail("no_reply", f"the client is closed ({self.last_error or 'by its user'})")
        waiter = self._send_call(self._ws, name, args)
        if not waiter.done.wait(self.call_timeout):
            with self._lock:
                self._waiters.pop(waiter.id, None)
            return fail("no_reply", f"no answer to {name} within {self.call_timeout:g} s")
        result = waiter.result
        if not isinstance(result, dict):
            return fail("no_reply", f"the server answered {name} with {result!r}")
        self._bind(name, args, result)
        return result

    def _bind(self, name: str, args: dict[str, Any], result: dict[str, Any]) -> None:
        if not result.get("success"):
            return
        if "token" in result:
            self.token = str(result["token"])
            self.signing_key = bytes.fromhex(str(result["signing_key"]))
            self.agent_id = str(result["agent_id"])
            self._set_clock(result)
        if name == "session_join" or (name == "session_create" and self.session_id is None):
            self.session_id = str(result["session_id"])
        elif name == "session_leave":
            self.session_id = None
        elif name == "a2a_subscribe" and args not in self._subscriptions:
            self._subscriptions.append(dict(args))

    def send(self, to_agent: str, message_type: str = "status_update",
             content: dict[str, Any] | None = None, *, priority: int = Priority.NORMAL,
             expires_in: float = 60.0) -> dict[str, Any]:
        """Send a signed barnraise Message to a member of the session (or its topics).

        ``expires_in`` is in simulated seconds. The result says what became of it
        per recipient, or why the server refused it (``error`` ``refused``).
        """
        if self.token is None or self.signing_key is None or self.agent_id is None:
            return fail("not_a_member", "join a session before sending messages")
        now = self.now
        message = Message(f"{self.agent_id}-{secrets.token_hex(8)}", now, self.agent_id,
                          to_agent, message_type, int(priority), dict(content or {}),
                          expires_at=now + expires_in)
        wire = json.loads(encode(message, self.signing_key))
        waiter = self._send_call(self._ws, "barnraise.send", {"message": wire})
        if not waiter.done.wait(self.call_timeout):
            with self._lock:
                self._waiters.pop(waiter.id, None)
            return fail("no_reply", f"no answer to send within {self.call_timeout:g} s")
        result = waiter.result
        return result if isinstance(result, dict) else fail("no_reply", repr(result))

    # -- mail -------------------------------------------------------------------------------

    def receive(self, timeout: float = 0.0) -> Message | None:
        """The next message for this agent, waiting up to ``timeout`` simulated seconds."""
        wall = max(0.0, timeout) / self.time_scale
        end = time.monotonic() + wall
        with self._arrived:
            while not self._inbox:
                left = end - time.monotonic()
                if left <= 0 or self.closed:
                    break
                self._arrived.wait(left)
            message = self._inbox.popleft() if self._inbox else None
        self._ack()
        return message

    def messages(self) -> list[Message]:
        """Everything delivered so far and not yet read, in delivery order."""
        with self._arrived:
            out = list(self._inbox)
            self._inbox.clear()
        self._ack()
        return out



def _failure(error: Any) -> dict[str, Any]:
    """A JSON-RPC error as the failure dict an in-process call would have returned."""
    if not isinstance(error, dict):
        return fail("no_reply", repr(error))
    data = error.get("data")
    if isinstance(data, dict) and data.get("success") is False:
        return data  # invalid params: the tool's own invalid_argument result
    code, text = error.get("code"), str(error.get("message", ""))
    if code == -32601:
        return fail("unknown_tool", text)
    if code == -32040:
        return fail("not_a_member", text)
    if code == -32041:
        reason = data.get("reason") if isinstance(data, dict) else None
        return fail("permission_denied", text, reason=reason)
    return fail("no_reply", f"JSON-RPC error {code}: {text}")


def connect(url: str, agent_name: str | None = None, role: str = "builder", *,
            session_id: str | None = None, backoff: Backoff | None = None,
            call_timeout: float = 30.0, seed: int | None = None,
            **join: Any) -> RemoteClient:
    """Connect to a gateway at ``url``; with ``agent_name``, join a session as that agent.

    The session is ``session_id``, or else the server's default session (or its only
    one). A refused join raises :class:`RemoteError` with the server's answer.
    Without ``agent_name`` the client is like ``simu.client()``: it calls
    ``session_create`` / ``session_join`` itself.
    """
    client = RemoteClient(url, backoff=backoff, call_timeout=call_timeout, seed=seed)
    if agent_name is None:
        return client
    try:
        if session_id is None:
            session_id = _default_session(url)
        joined = client.call_any("session_join", {"session_id": session_id,
                                                  "agent_name": agent_name, "role": role,
                                                  **join})
    except BaseException:
        client.close()
        raise
    if not joined.get("success"):
        client.close()
        raise RemoteError(f"session_join refused: {joined.get('error')}: "
                          f"{joined.get('message')}")
    return client


def _default_session(url: str) -> str:
    try:
        with urllib.request.urlopen(_http_url(url) + "/stats", timeout=10) as response:
            stats = json.loads(response.read())
    except OSError as exc:
        raise RemoteError(f"cannot read the server's sessions at {url}: {exc}") from None
    if stats.get("default_session"):
        return str(stats["default_session"])
    sessions = stats.get("sessions") or []  # a list in full, a count without the token
    count = sessions if isinstance(sessions, int) else len(sessions)
    if isinstance(sessions, list) and count == 1:
        return str(sessions[0]["session_id"])
    raise RemoteError(f"the server has {count} sessions: name one with session_id=")
