"""The HTTP server's bounds on slow and numerous clients (issue 23, finding 11):
a request body that never finishes, a WebSocket that never becomes an agent,
more connections than the server will hold, and a body over the size limit on
every POST route.

Each test uses real sockets on 127.0.0.1 with small bounds, asserts on what the
server answered and on its own counts, and closes what it opened.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from barnraise.gateway.hosting import HostedWorld
from barnraise.gateway.operator import Operator
from barnraise.gateway.server import Gateway, GatewayServer
from tests.gateway_support import counters, served

BOUND = 0.5  # wall seconds: every timeout under test


def bounded(*, view: bool = False, operator: Operator | None = None,
            **options: Any) -> contextlib.AbstractContextManager[GatewayServer]:
    """A gateway on 127.0.0.1 with short timeouts (and ``options``); stopped after."""
    return served(view=view, operator=operator, auth_timeout=BOUND,
                  server_options={"header_timeout": BOUND, "body_timeout": BOUND, **options})


def closed_within(sock: socket.socket, bound: float) -> bytes:
    """What the server sent before it closed ``sock``; fails if it is open past ``bound``."""
    sock.settimeout(bound)
    received = b""
    try:
        while chunk := sock.recv(4096):
            received += chunk
    except TimeoutError:
        pytest.fail(f"the server kept the socket open for more than {bound} s")
    except ConnectionResetError:
        pass
    return received


def head(server: GatewayServer, method: str, path: str, length: int) -> bytes:
    return (f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n").encode()


def session_create(name: str) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
        "message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"data": {
            "tool": "session_create", "arguments": {"session_name": name}}}]}}}).encode()


# -- a body that never finishes ----------------------------------------------------------


def test_a_post_whose_body_never_finishes_is_closed() -> None:
    with bounded() as server:
        address = ("127.0.0.1", server.port)
        before = len(server.gateway.world.sessions())
        body = session_create("never finished")
        sockets = [socket.create_connection(address, timeout=10) for _ in range(2)]
        try:
            for sock, path in zip(sockets, ("/a2a/jsonrpc", "/mcp"), strict=True):
                sock.sendall(head(server, "POST", path, len(body)) + body[:20])
            for sock in sockets:
                closed_within(sock, 10)
        finally:
            for sock in sockets:
                sock.close()
        assert server.gateway.counters["body_timeout"] == 2
        assert len(server.gateway.world.sessions()) == before
        # A body that arrives whole, in pieces, is served.
        with socket.create_connection(address, timeout=10) as sock:
            sock.sendall(head(server, "POST", "/a2a/jsonrpc", len(body)) + body[:20])
            sock.sendall(body[20:])
            answer = sock.recv(65536)
        assert answer.startswith(b"HTTP/1.1 200")
        assert len(server.gateway.world.sessions()) == before + 1
        assert server.gateway.counters["body_timeout"] == 2


def test_the_bounds_are_checked_before_anything_binds() -> None:
    world = HostedWorld(time_scale=20.0)
    try:
        for options in ({"body_timeout": 0}, {"header_timeout": float("inf")},
                        {"keep_alive_timeout": -1.0}, {"max_connections": 0},
                        {"max_connections": 2.5}, {"body_timeout": True}):
            name = next(iter(options))
            with pytest.raises(ValueError, match=name):
                GatewayServer(Gateway(world), "127.0.0.1", 0, **options)
        with pytest.raises(ValueError, match="auth_timeout"):
            Gateway(world, auth_timeout=float("nan"))
    finally:
        world.close()


# -- a WebSocket that never becomes an agent ---------------------------------------------


def test_a_websocket_without_an_agent_is_closed_and_a_joined_one_stays() -> None:
    with bounded() as server:
        url = f"ws://127.0.0.1:{server.port}/a2a"

        async def scenario() -> tuple[int | None, Any]:
            async with connect(url, open_timeout=10) as idle, \
                    connect(url, open_timeout=10) as joined:
                await joined.send(json.dumps({"jsonrpc": "2.0", "id": 1,
                                              "method": "session_create",
                                              "params": {"session_name": "kept"}}))
                created = json.loads(await asyncio.wait_for(joined.recv(), 10))
                assert created["result"]["success"] is True, created
                # The one that sent nothing is closed, with the reason...
                with pytest.raises(ConnectionClosed):
                    await asyncio.wait_for(idle.recv(), 10)
                code = idle.close_code
                # ...and the agent's connection, opened with it, still answers.
                await joined.send(json.dumps({"jsonrpc": "2.0", "id": 2,
                                              "method": "session_get_state", "params": {}}))
                listed = json.loads(await asyncio.wait_for(joined.recv(), 10))
                return code, listed

        code, listed = asyncio.run(scenario())
        assert code == 1008
        assert listed["id"] == 2 and "result" in listed, listed
        assert server.gateway.counters["auth_timeout"] == 1


def test_a_socket_whose_join_failed_is_still_timed_and_gives_its_slot_back() -> None:
    """A failed join leaves the connection a slot without a token: it is no agent, so
    the auth bound still closes it, and the slot goes back to the hub at the close."""
    with bounded() as server:
        url = f"ws://127.0.0.1:{server.port}/a2a"

        async def scenario() -> tuple[Any, int | None]:
            async with connect(url, open_timeout=10) as guest:
                await guest.send(json.dumps({"jsonrpc": "2.0", "id": 1,
                                             "method": "session_join",
                                             "params": {"session_id": "nope",
                                                        "agent_name": "G"}}))
                refused = json.loads(await asyncio.wait_for(guest.recv(), 10))
                with pytest.raises(ConnectionClosed):
                    await asyncio.wait_for(guest.recv(), 10)
                return refused, guest.close_code

        refused, code = asyncio.run(scenario())
        assert refused["result"]["success"] is False, refused
        assert code == 1008
        assert server.gateway.counters["auth_timeout"] == 1
        hub = server.gateway.hub
        deadline = time.monotonic() + 10
        while hub.held()["agents"] and time.monotonic() < deadline:
            time.sleep(0.02)  # the close is handled on the server's loop
        assert hub.held()["agents"] == 0


def test_a_view_socket_that_is_not_watching_is_closed() -> None:
    class Remote(Operator):
        """Every peer as another host's: watching takes view.auth."""

        def may_watch(self, peer: str | None, token: object = None) -> bool:
            return self.valid(token)

    with bounded(view=True, operator=Remote("secret")) as server:

        async def scenario() -> int | None:
            async with connect(f"ws://127.0.0.1:{server.port}/view/ws",
                               open_timeout=10) as page:
                with pytest.raises(ConnectionClosed):
                    await asyncio.wait_for(page.recv(), 10)
                return page.close_code

        assert asyncio.run(scenario()) == 1008
        assert server.gateway.counters["auth_timeout"] == 1
        # with a view, GET / is its page and POST / the A2A binding (docs/gateway.md)
        page = httpx.get(server.url + "/", timeout=10)
        assert page.status_code == 200 and "text/html" in page.headers["content-type"]
        rpc = httpx.post(server.url + "/", timeout=10, json={
            "jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {
                "messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "help"}]}}})
        assert rpc.status_code == 401 and rpc.json()["error"]["code"] == -32040


# -- more connections than the server holds ----------------------------------------------


def wait_for_connections(server: GatewayServer, count: int) -> None:
    """Until the server holds ``count`` connections (the kernel completes a handshake
    before the server's loop accepts it, and a close is seen after); fails after 10 s."""
    deadline = time.monotonic() + 10
    while server.connections != count:
        assert time.monotonic() < deadline, f"{server.connections} of {count} accepted"
        time.sleep(0.01)


def test_connections_over_the_bound_answer_503_and_past_twice_it_are_closed() -> None:
    with bounded(header_timeout=30.0, max_connections=4) as server:
        address = ("127.0.0.1", server.port)
        request = f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n\r\n".encode()
        upgrade = (f"GET /a2a HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
                   "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                   "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                   "Sec-WebSocket-Version: 13\r\n\r\n").encode()
        opened: list[socket.socket] = []
        try:
            # Below the bound a request is served.
            first = socket.create_connection(address, timeout=10)
            opened.append(first)
            first.sendall(request)
            assert first.recv(4096).startswith(b"HTTP/1.1 200")
            # Four open (the bound): an upgrade answers 503, and so does a request. Each
            # 503 closes its connection, so the fourth is opened again in between.
            opened += [socket.create_connection(address, timeout=10) for _ in range(3)]
            wait_for_connections(server, 4)
            opened[1].sendall(upgrade)
            assert closed_within(opened[1], 10).startswith(b"HTTP/1.1 503")
            assert server.gateway.counters["over_capacity"] == 1
            wait_for_connections(server, 3)
            opened.append(socket.create_connection(address, timeout=10))
            wait_for_connections(server, 4)
            first.sendall(request)
            assert closed_within(first, 10).startswith(b"HTTP/1.1 503")
            wait_for_connections(server, 3)
            # Eight open (twice the bound): the ninth is closed unanswered.
            opened += [socket.create_connection(address, timeout=10) for _ in range(5)]
            wait_for_connections(server, 8)
            extra = socket.create_connection(address, timeout=10)
            opened.append(extra)
            assert closed_within(extra, 10) == b""
            assert server.gateway.counters["connection_refused"] == 1
        finally:
            for sock in opened:
                sock.close()
        # Once they are closed, requests are served again.
        deadline = time.monotonic() + 10
        while True:
            answer = httpx.get(server.url + "/healthz", timeout=10)
            if answer.status_code == 200 or time.monotonic() > deadline:
                break
        assert answer.status_code == 200


# -- a body over the limit, on every POST route ------------------------------------------


def _answer(raw: bytes) -> tuple[int, dict[str, str], bytes]:
    """Status, headers and body of one HTTP/1.1 response (with a Content-Length)."""
    head_part, _, body = raw.partition(b"\r\n\r\n")
    lines = head_part.decode("latin-1").split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), headers, body[:int(headers["content-length"])]


@pytest.mark.parametrize("path", ["/a2a/jsonrpc", "/mcp"])
@pytest.mark.parametrize("declared", [True, False], ids=["declared", "chunked"])
def test_a_body_over_the_limit_answers_413_with_a_jsonrpc_error(path: str,
                                                                declared: bool) -> None:
    with bounded() as server:
        limit = server.gateway.hub.limits.max_frame
        before = len(server.gateway.world.sessions())
        if declared:  # answered on the Content-Length alone: no byte of the body is sent
            with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
                sock.sendall(head(server, "POST", path, limit + 1))
                sock.settimeout(10)
                raw = b""
                while b"\r\n\r\n" not in raw or not raw.endswith(b"}"):
                    chunk = sock.recv(65536)
                    assert chunk, raw
                    raw += chunk
            status, headers, body = _answer(raw)
        else:  # no length given: counted as it comes, refused past the limit
            pieces = iter([session_create("x" * 1000)[:-2], b"x" * limit, b"}}"])
            answer = httpx.post(server.url + path, content=pieces, timeout=20, headers={
                "content-type": "application/json",
                "accept": "application/json, text/event-stream"})
            status, headers, body = answer.status_code, dict(answer.headers), answer.content
        assert status == 413, body
        assert headers["content-type"] == "application/json"
        error = json.loads(body)
        assert error["jsonrpc"] == "2.0" and error["id"] is None
        assert error["error"]["code"] == -32600 and f"over {limit} bytes" in \
            error["error"]["message"]
        assert counters(server)["body_too_large"] == 1
        assert len(server.gateway.world.sessions()) == before


def test_a_websocket_that_cannot_connect_over_the_bound_is_told_503() -> None:
    with bounded(max_connections=2) as server:
        hold = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        try:
            wait_for_connections(server, 1)
            async def scenario() -> int:
                with pytest.raises(InvalidStatus) as refused:
                    async with connect(f"ws://127.0.0.1:{server.port}/a2a", open_timeout=10):
                        pass
                return refused.value.response.status_code

            assert asyncio.run(scenario()) == 503
        finally:
            hold.close()


def test_serve_takes_max_connections_checked_before_anything_starts() -> None:
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    for bad in ("0", "1000001", "-3"):
        cli = subprocess.run([sys.executable, "-m", "barnraise.cli", "serve", "--port", "0",
                              f"--max-connections={bad}"], capture_output=True, text=True,
                             timeout=120, env=env)
        assert cli.returncode == 2 and cli.stdout == "", (bad, cli.stderr)
        assert len(cli.stderr.strip().splitlines()) == 1 and "--max-connections" in cli.stderr
    process = subprocess.Popen([sys.executable, "-m", "barnraise.cli", "serve", "--port", "0",
                                "--max-connections", "2"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=env)
    held: list[socket.socket] = []
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip()  # the server answers once it listens
        assert url.startswith("http://127.0.0.1:"), (url, process.poll())
        port = int(url.rsplit(":", 1)[1])
        assert httpx.get(url + "/healthz", timeout=10).status_code == 200
        held.append(socket.create_connection(("127.0.0.1", port), timeout=10))
        deadline = time.monotonic() + 10  # until the server has accepted the held socket
        while (status := httpx.get(url + "/healthz", timeout=10).status_code) == 200:
            assert time.monotonic() < deadline, "the held socket was never counted"
        assert status == 503
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=30)
        assert process.returncode == 0
    finally:
        for sock in held:
            sock.close()
        if process.poll() is None:
            process.kill()
        process.communicate(timeout=30)
