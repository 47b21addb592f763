"""The gateway's edges (issue 23, findings 3 and 11): no cross-site requests, frames
bounded before parsing on every surface, MCP stdio answering every line, and sockets
that never finish their headers closed.

Each test first does what an attacker did (a ``text/plain`` cross-site POST, a
rebinding ``Host``, a frame nested 100,000 deep, bytes that are not UTF-8, a line
that is not a request, a request line never finished) and asserts on the
server's answer and its own counts.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import tracemalloc
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect

from barnraise.gateway.hosting import HostedWorld
from barnraise.gateway.hub import Counters
from barnraise.gateway.jsonrpc import MAX_DEPTH, RpcError, loads
from barnraise.gateway.mcp_surface import read_lines
from barnraise.gateway.server import EdgeMiddleware, Gateway, GatewayServer, check_hosts
from tests.gateway_support import counters, served

RPC = "/a2a/jsonrpc"
DEEP = b"[" * 100_000 + b"]" * 100_000
NOT_UTF8 = b'{"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"x": "\xff\xfe"}}'


def create_session(name: str = "from a page") -> bytes:
    """A2A SendMessage calling session_create: what a cross-site page would send."""
    return json.dumps({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
        "message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"data": {
            "tool": "session_create", "arguments": {"session_name": name}}}]}}}).encode()


def post(server: GatewayServer, body: bytes, **headers: str) -> httpx.Response:
    headers = {"content-type": "application/json", **headers}
    return httpx.post(server.url + RPC, content=body, headers=headers, timeout=20)


@pytest.fixture
def server() -> Iterator[GatewayServer]:
    with served(allowed_hosts=("barn.example",)) as gateway_server:
        yield gateway_server


def sessions(server: GatewayServer) -> int:
    return len(server.gateway.world.sessions())


# -- finding 3: no cross-site requests ----------------------------------------------------


def test_a_cross_site_text_plain_post_creates_nothing(server: GatewayServer) -> None:
    before, agents = sessions(server), len(server.gateway.hub.slots)
    evil = "https://evil.example"
    # The request a page of another site sends without a preflight.
    answer = post(server, create_session(), **{"content-type": "text/plain", "origin": evil})
    assert answer.status_code == 403 and "evil.example" in answer.text
    # The same without an Origin (a form, a proxy that drops it): still no JSON, refused.
    answer = post(server, create_session(), **{"content-type": "text/plain;charset=UTF-8"})
    assert answer.status_code == 415 and "application/json" in answer.text
    answer = post(server, create_session(), **{"content-type": "application/x-www-form-urlencoded"})
    assert answer.status_code == 415
    # JSON from a foreign page: refused under the WebSocket's rule.
    answer = post(server, create_session(), origin=evil)
    assert answer.status_code == 403
    assert sessions(server) == before and len(server.gateway.hub.slots) == agents
    found = counters(server)
    assert found["foreign_origin"] >= 2 and found["unsupported_media_type"] >= 2


def test_a_rebinding_host_is_refused_on_every_route(server: GatewayServer) -> None:
    before = sessions(server)
    evil = f"evil.example:{server.port}"
    for method, path in (("GET", "/.well-known/agent-card.json"), ("GET", "/stats"),
                         ("GET", "/healthz"), ("POST", RPC), ("POST", "/mcp")):
        answer = httpx.request(method, server.url + path, content=create_session(),
                               headers={"host": evil, "content-type": "application/json"},
                               timeout=20)
        assert answer.status_code == 421, (path, answer.status_code)
        assert "evil.example" in answer.text
    # A loopback name with another port is another server's name.
    answer = post(server, create_session(), host="127.0.0.1:1")
    assert answer.status_code == 421
    # The WebSocket upgrade gets the same answer.
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as raw:
        raw.sendall(f"GET /a2a HTTP/1.1\r\nHost: {evil}\r\nUpgrade: websocket\r\n"
                    "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                    "Sec-WebSocket-Version: 13\r\n\r\n".encode())
        assert raw.recv(64).startswith(b"HTTP/1.1 421")
    assert sessions(server) == before
    assert counters(server)["foreign_host"] >= 7


def test_local_json_requests_and_allowed_hosts_are_served(server: GatewayServer) -> None:
    port = server.port
    own = f"http://127.0.0.1:{port}"
    before = sessions(server)
    for headers in ({}, {"origin": own}, {"host": f"localhost:{port}"},
                    {"host": f"[::1]:{port}", "origin": f"http://[::1]:{port}"},
                    {"content-type": "application/json; charset=utf-8"},
                    # --allow-host barn.example: any port, and a page of it is same-origin
                    {"host": "barn.example", "origin": "https://barn.example"},
                    {"host": f"BARN.example:{port}"}):
        answer = post(server, create_session(), **headers)
        assert answer.status_code == 200, (headers, answer.text)
        assert answer.json()["result"]["message"]["parts"][0]["data"]["success"], headers
    assert sessions(server) == before + 7
    assert httpx.get(server.url + "/healthz", timeout=20).json() == {"ok": True}

    async def websocket() -> None:  # a page of this server opens the WebSocket
        async with connect(f"ws://127.0.0.1:{port}/a2a", origin=own) as ws:  # type: ignore[arg-type]
            await ws.send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "barnraise.ack",
                                      "params": {"seq": 0}}))
            assert json.loads(await ws.recv())["error"]["code"] == -32040

    asyncio.run(asyncio.wait_for(websocket(), 30))


def upgrade(server: GatewayServer, host: str, origin: str, path: str = "/a2a") -> bytes:
    """The status line a raw WebSocket upgrade with these headers is answered with."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as raw:
        raw.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nOrigin: {origin}\r\n"
                    "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                    "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                    "Sec-WebSocket-Version: 13\r\n\r\n".encode())
        return raw.recv(4096).split(b"\r\n")[0]


def test_a_page_of_an_allowed_host_opens_the_websocket(server: GatewayServer) -> None:
    assert upgrade(server, "barn.example", "https://barn.example") == \
        b"HTTP/1.1 101 Switching Protocols"
    assert upgrade(server, "barn.example", "https://evil.example").startswith(b"HTTP/1.1 403")
    assert upgrade(server, f"127.0.0.1:{server.port}", "https://barn.example").startswith(
        b"HTTP/1.1 403")  # same origin means the host the page was loaded from


def test_the_view_is_behind_the_same_rule() -> None:
    from barnraise.view.server import ViewSurface
    from barnraise.view.watch import Watcher

    world = HostedWorld(time_scale=20.0)
    watcher = Watcher(world.simulation, lazy=True)
    try:
        gateway = Gateway(world, allowed_hosts=["barn.example"])
        ViewSurface(watcher, gateway)
        server = GatewayServer(gateway, "127.0.0.1", 0)
        server.start()
        try:
            evil = {"host": f"evil.example:{server.port}"}
            for path in ("/", "/view/static/index.html"):
                assert httpx.get(server.url + path, headers=evil, timeout=20).status_code == 421
                assert httpx.get(server.url + path, timeout=20).status_code == 200
            assert upgrade(server, evil["host"], f"http://{evil['host']}",
                           "/view/ws").startswith(b"HTTP/1.1 421")
            assert upgrade(server, "barn.example", "http://barn.example", "/view/ws") == \
                b"HTTP/1.1 101 Switching Protocols"
            assert upgrade(server, f"127.0.0.1:{server.port}", "http://evil.example",
                           "/view/ws").startswith(b"HTTP/1.1 403")
        finally:
            server.stop()
    finally:
        watcher.close()
        world.close()


def test_the_host_rule_follows_the_bound_address_and_a_picked_port() -> None:
    world = HostedWorld(time_scale=20.0)
    try:
        gateway = Gateway(world, allowed_hosts=["barn.example:9000", "Proxy.Example"])
        assert not gateway.host_allowed("127.0.0.1:8765")  # nothing before bind
        gateway.bind("127.0.0.1", 8765)
        assert gateway.host_allowed("127.0.0.1:8765") and gateway.host_allowed("LOCALHOST:8765")
        assert gateway.host_allowed("[::1]:8765") and gateway.host_allowed("barn.example:9000")
        assert not gateway.host_allowed("127.0.0.1") and not gateway.host_allowed(None)
        assert not gateway.host_allowed("barn.example:8765")
        assert gateway.host_allowed("proxy.example") and gateway.host_allowed("proxy.example:1")
        gateway.bind("10.1.2.3", 80)  # another address: that address, with or without :80
        assert gateway.host_allowed("10.1.2.3") and gateway.host_allowed("10.1.2.3:80")
        assert not gateway.host_allowed("localhost:80") and not gateway.host_allowed("10.1.2.4")
        gateway.bind("0.0.0.0", 8000)  # a wildcard: reachable on loopback as well
        assert gateway.host_allowed("127.0.0.1:8000") and not gateway.host_allowed("0.0.0.0:80")
        gateway.bind("::1", 8000)
        assert gateway.host_allowed("[::1]:8000")
    finally:
        world.close()
    with served() as picked:  # --port 0: the rule takes the port the socket got
        assert picked.port != 0
        assert post(picked, create_session()).status_code == 200


def test_allow_host_values_are_checked_before_anything_starts() -> None:
    assert check_hosts(["Barn.Example", "barn.example:8765", "[::1]:80", "10.0.0.2"]) == [
        "barn.example", "barn.example:8765", "[::1]:80", "10.0.0.2"]
    for bad in ("http://barn.example", "*", "", "barn.example:", "barn:99999", "::1", "a b",
                "[::1", "a]:80"):
        with pytest.raises(ValueError, match="--allow-host"):
            check_hosts([bad])
    cli = subprocess.run(
        [sys.executable, "-m", "barnraise.cli", "serve", "--port", "0", "--allow-host",
         "http://barn.example"], capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert cli.returncode == 2 and cli.stdout == ""
    assert cli.stderr.strip().splitlines() == [cli.stderr.strip()]  # one line
    assert "--allow-host 'http://barn.example'" in cli.stderr and "role_token" not in cli.stderr


def test_serve_allow_host_admits_the_named_host_only() -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "barnraise.cli", "serve", "--port", "0", "--time-scale", "20",
         "--allow-host", "barn.example", "--allow-host", "proxy.example:8443"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": os.getcwd()})
    try:
        line: list[str] = []
        reader = threading.Thread(target=lambda: line.append(process.stdout.readline()),  # type: ignore[union-attr]
                                  daemon=True)
        reader.start()
        reader.join(60)
        assert line and line[0].startswith("http://127.0.0.1:"), (line, process.poll())
        url = line[0].strip()
        port = url.rsplit(":", 1)[1]
        for host, status in ((f"127.0.0.1:{port}", 200), ("barn.example", 200),
                             (f"barn.example:{port}", 200), ("proxy.example:8443", 200),
                             ("proxy.example", 421), (f"evil.example:{port}", 421)):
            answer = httpx.get(url + "/healthz", headers={"host": host}, timeout=20)
            assert answer.status_code == status, (host, answer.status_code)
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=30)
        assert process.returncode == 0
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate(timeout=30)


# -- finding 11: frames bounded before parsing ---------------------------------------------


def test_deep_and_non_utf8_frames_over_http_answer_their_codes(server: GatewayServer) -> None:
    before = counters(server)
    answer = post(server, DEEP).json()
    assert answer["error"]["code"] == -32600
    assert "100000 deep" in answer["error"]["message"] and str(MAX_DEPTH) in \
        answer["error"]["message"]
    assert post(server, NOT_UTF8).json()["error"]["code"] == -32700
    # /mcp: the depth is checked before the SDK parses; bytes that are not UTF-8 it refuses
    mcp = {"accept": "application/json, text/event-stream"}
    answer = httpx.post(server.url + "/mcp", content=DEEP, timeout=20,
                        headers={"content-type": "application/json", **mcp})
    assert answer.status_code == 400 and answer.json()["error"]["code"] == -32600
    answer = httpx.post(server.url + "/mcp", content=NOT_UTF8, timeout=20,
                        headers={"content-type": "application/json", **mcp})
    assert answer.status_code == 400 and answer.json()["error"]["code"] == -32700
    after = counters(server)
    assert after.get("internal_error", 0) == before.get("internal_error", 0) == 0
    assert after["invalid_request"] - before.get("invalid_request", 0) == 2
    assert after["parse_error"] - before.get("parse_error", 0) == 1


async def answer_to(ws: Any) -> dict[str, Any]:
    """The next answer on a WebSocket, past any notification (mail, events)."""
    while True:
        frame = json.loads(await asyncio.wait_for(ws.recv(), 20))
        if "method" not in frame:
            return dict(frame)


def test_deep_and_non_utf8_frames_over_the_websocket_answer_their_codes(
        server: GatewayServer) -> None:
    async def scenario() -> None:
        async with connect(f"ws://127.0.0.1:{server.port}/a2a", max_size=None) as ws:
            await ws.send(DEEP)  # a binary frame
            answer = await answer_to(ws)
            assert answer["error"]["code"] == -32600 and "100000 deep" in \
                answer["error"]["message"]
            await ws.send(DEEP.decode())  # a text frame
            assert (await answer_to(ws))["error"]["code"] == -32600
            await ws.send(NOT_UTF8)
            assert (await answer_to(ws))["error"]["code"] == -32700
            # JSON inside a string, as barnraise.send takes a signed message, is checked too
            await ws.send(json.dumps({"jsonrpc": "2.0", "id": 7, "method": "session_join",
                                      "params": {"session_id": session, "agent_name": "deep",
                                                 "role": "builder"}}))
            assert (await answer_to(ws))["result"]["success"]
            await ws.send(json.dumps({"jsonrpc": "2.0", "id": 8, "method": "barnraise.send",
                                      "params": {"message": '{"content": {"a": '
                                                 + DEEP.decode() + "}}"}}))
            answer = await answer_to(ws)
            assert answer["id"] == 8 and answer["error"]["code"] == -32600
            # the connection goes on
            await ws.send(json.dumps({"jsonrpc": "2.0", "id": 9, "method": "barnraise.ack",
                                      "params": {"seq": 0}}))
            answer = await answer_to(ws)
            assert answer["id"] == 9 and "result" in answer

    session = server.gateway.world.default_session

    before = counters(server).get("internal_error", 0)
    asyncio.run(asyncio.wait_for(scenario(), 60))
    assert counters(server).get("internal_error", 0) == before == 0


def test_depth_counts_brackets_outside_strings_only() -> None:
    assert loads(b"[" * MAX_DEPTH + b"]" * MAX_DEPTH) is not None
    with pytest.raises(RpcError) as deep:
        loads(b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1))
    assert deep.value.code == -32600 and f"{MAX_DEPTH + 1} deep" in deep.value.message
    # brackets in strings, escaped quotes and backslashes do not count, or hide depth
    inside = b'{"a": "' + b"[{" * 500 + b'"}'
    assert loads(inside) == {"a": "[{" * 500}
    tricky = b'{"a": "\\\\", "b": "\\"' + b"]" * 200 + b'", "c": ' + b"[" * 70 + b"]" * 70 + b"}"
    with pytest.raises(RpcError, match="nested 71 deep"):  # the object, then 70
        loads(tricky)
    with pytest.raises(RpcError) as text:
        loads('{"a": "\udc80' + "[" * 100 + '"}')
    assert text.value.code == -32700



@pytest.mark.parametrize("kind", [str, bytes])
def test_depth_of_objects_alone_or_mixed_with_arrays_is_bounded(kind: type) -> None:
    """loads counts ``{`` always and ``[`` only when there is one (the cheap bound, inline):
    objects nested without an array, arrays inside objects, and many brackets that do not
    nest, each decided by the depth itself."""
    def frame(text: str) -> str | bytes:
        return text if kind is str else text.encode()

    def objects(n: int) -> str:  # n objects, each inside the one before: no array at all
        return '{"a": ' * n + "1" + "}" * n

    with pytest.raises(RpcError) as deep:
        loads(frame(objects(MAX_DEPTH + 1)))
    assert deep.value.code == -32600 and f"{MAX_DEPTH + 1} deep" in deep.value.message
    assert loads(frame(objects(MAX_DEPTH))) is not None
    half = MAX_DEPTH // 2 + 1  # objects, then arrays inside: together one too deep
    mixed = '{"a": ' * half + "[" * half + "]" * half + "}" * half
    with pytest.raises(RpcError, match=f"nested {2 * half} deep"):
        loads(frame(mixed))
    # more brackets than MAX_DEPTH, side by side: shallow, so decoded
    flat = '{"a": [' + ", ".join(["[]"] * MAX_DEPTH) + '], "b": ' + \
        "[" + ", ".join(["{}"] * MAX_DEPTH) + "]}"
    assert loads(frame(flat)) == {"a": [[]] * MAX_DEPTH, "b": [{}] * MAX_DEPTH}



def test_edge_middleware_hands_the_app_its_own_awaitable() -> None:
    """Not a coroutine of its own: a served request or WebSocket gets the app's awaitable
    as it is (every frame of every connection was resumed through one more frame), and
    a refused one the refusal's, counted."""
    made: list[Any] = []

    def app(scope: Any, receive: Any, send: Any) -> Any:
        made.append(asyncio.sleep(0))
        return made[-1]

    gate = SimpleNamespace(host_allowed=lambda host: host == "127.0.0.1:1",
                           origin_allowed=lambda origin, host: True, counters=Counters())
    edge = EdgeMiddleware(app, gate)  # type: ignore[arg-type]
    served_ws = edge({"type": "websocket", "headers": [(b"host", b"127.0.0.1:1")]},
                     None, None)  # type: ignore[arg-type]
    assert served_ws is made[0]
    asyncio.run(served_ws)  # type: ignore[arg-type]
    sent: list[dict[str, Any]] = []

    async def send(message: Any) -> None:
        sent.append(message)

    async def receive() -> Any:
        return {"type": "http.disconnect"}

    refused = edge({"type": "http", "method": "GET", "headers": [(b"host", b"evil:1")]},
                   receive, send)
    assert len(made) == 1  # the app was not called
    asyncio.run(refused)  # type: ignore[arg-type]
    assert sent[0]["status"] == 421 and gate.counters["foreign_host"] == 1


# -- finding 11: MCP stdio answers every line ----------------------------------------------


def test_mcp_stdio_answers_every_line_and_logs_each_refusal() -> None:
    limit = 1 << 20
    lines = [b"not json", b"[]", b"null", b"3", DEEP, NOT_UTF8,
             b'{"jsonrpc": "2.0", "id": 7, "method": 5}',
             b"x" * (60 * limit),  # 60 MB: dropped as it is read
             b'{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {'
             b'"protocolVersion": "2025-06-18", "capabilities": {}, '
             b'"clientInfo": {"name": "edge-test", "version": "1"}}}']
    process = subprocess.Popen([sys.executable, "-m", "barnraise.cli", "mcp"],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, env={**os.environ,
                                                            "PYTHONPATH": os.getcwd()})
    try:
        out, err = process.communicate(b"\n".join(lines) + b"\n", timeout=120)
    finally:
        process.kill()
        process.wait(10)
    answers = [json.loads(line) for line in out.splitlines()]
    codes = [a.get("error", {}).get("code") for a in answers]
    assert codes == [-32700, -32600, -32600, -32600, -32600, -32700, -32600, -32600, None]
    assert answers[6]["id"] == 7 and answers[8]["id"] == 1 and "result" in answers[8]
    assert "100000 deep" in answers[4]["error"]["message"]
    assert f"{60 * limit} bytes" in answers[7]["error"]["message"]
    logged = [line for line in err.decode().splitlines() if "refused" in line]
    assert [line.split()[3] for line in logged] == ["1", "2", "3", "4", "5", "6", "7", "8"]


def test_mcp_stdio_skips_blank_lines_and_answers_anything_else() -> None:
    """Blank and JSON-whitespace lines are no message (the stdio transport is
    newline-delimited): no answer, no log line, and the line numbers still count them."""
    initialize = (b'{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {'
                  b'"protocolVersion": "2025-06-18", "capabilities": {}, '
                  b'"clientInfo": {"name": "edge-test", "version": "1"}}}')
    lines = [b"", b"   ", b"\t \r", b"\x0c", b"\r", initialize + b"\r", b"\x0b"]
    process = subprocess.Popen([sys.executable, "-m", "barnraise.cli", "mcp"],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, env={**os.environ,
                                                            "PYTHONPATH": os.getcwd()})
    try:
        out, err = process.communicate(b"\n".join(lines) + b"\n\n", timeout=120)
    finally:
        process.kill()
        process.wait(10)
    answers = [json.loads(line) for line in out.splitlines()]
    # (a refusal is written at once; a message's answer comes from the server: in any order)
    assert sorted((a.get("id") or 0, a.get("error", {}).get("code") or 0)
                  for a in answers) == [(0, -32700), (0, -32700), (1, 0)]
    logged = [line.split()[3] for line in err.decode().splitlines() if "refused" in line]
    assert logged == ["4", "7"]


def test_read_lines_holds_at_most_the_limit() -> None:
    chunks = [b"ab\ncdefgh", b"ijk\n", b"", b"x" * 3, b"\nlast"]

    async def collect() -> list[bytes | int]:
        feed = iter(chunks)

        async def read() -> bytes:
            chunk = next(feed, b"")
            return chunk

        return [line async for line in read_lines(read, 4)]

    # a chunk b"" ends the stream: what follows it is never read
    assert asyncio.run(collect()) == [b"ab", 9]
    chunks[2:3] = []
    assert asyncio.run(collect()) == [b"ab", 9, b"xxx", b"last"]


def test_an_over_long_line_is_dropped_as_it_is_read() -> None:
    chunk = b"x" * (1 << 16)
    count = 512  # a 32 MiB line, 64 KiB at a time, against a 1 MiB limit

    async def collect() -> list[bytes | int]:
        left = count

        async def read() -> bytes:
            nonlocal left
            left -= 1
            return chunk if left >= 0 else (b"\n{}\n" if left == -1 else b"")

        return [line async for line in read_lines(read, 1 << 20)]

    tracemalloc.start()
    try:
        lines = asyncio.run(collect())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert lines == [count * len(chunk), b"{}"]
    assert peak < 4 << 20, f"{peak} bytes held for a line of {count * len(chunk)}"


# -- finding 11: sockets that never finish their headers ----------------------------------


def _closed_within(sock: socket.socket, bound: float) -> float:
    """Seconds until the server closed ``sock`` (reading EOF); fails past ``bound``."""
    start = time.monotonic()
    sock.settimeout(bound)
    try:
        while sock.recv(4096):
            pass
    except TimeoutError:
        pytest.fail(f"the server kept the socket open for more than {bound} s")
    except ConnectionResetError:
        pass
    return time.monotonic() - start


def test_a_socket_that_never_finishes_its_headers_is_closed() -> None:
    world = HostedWorld(time_scale=20.0)
    try:
        server = GatewayServer(Gateway(world), "127.0.0.1", 0, header_timeout=0.5,
                               keep_alive_timeout=0.5)
        server.start()
        try:
            address = ("127.0.0.1", server.port)
            # Fifty sockets that send half a request, and one that sends nothing.
            partial = [socket.create_connection(address, timeout=10) for _ in range(50)]
            silent = socket.create_connection(address, timeout=10)
            try:
                for sock in partial:
                    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1")
                for sock in [*partial, silent]:
                    assert _closed_within(sock, 10) < 5
            finally:
                for sock in [*partial, silent]:
                    sock.close()
            # After an answer: an idle keep-alive socket closes, and so does one that
            # starts its next request and never finishes it.
            for rest in (b"", b"GET /heal"):
                with socket.create_connection(address, timeout=10) as kept:
                    kept.sendall(f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{server.port}"
                                 "\r\n\r\n".encode())
                    assert b"200 OK" in kept.recv(4096)
                    kept.sendall(rest)
                    assert _closed_within(kept, 10) < 5
            # A request whose headers are in is not cut by the timer.
            answer: Any = httpx.get(server.url + "/healthz", timeout=10)
            assert answer.json() == {"ok": True}
            assert server.gateway.counters["header_timeout"] >= 52
        finally:
            server.stop()
    finally:
        world.close()


@pytest.mark.parametrize("frame", [b'{"jsonrpc": "2.0", "id": 1, "params": {"x": "\\ud800"}}',
                                   '{"jsonrpc": "2.0", "id": 1, "params": {"x": "\\udfff!"}}'])
def test_a_lone_surrogate_escape_is_named_not_called_truncated(frame: bytes | str) -> None:
    """msgspec refuses ``"\\ud800"`` as "Input data was truncated"; the answer says what
    the frame holds. A surrogate pair is one character and decodes."""
    with pytest.raises(RpcError) as refused:
        loads(frame)
    assert refused.value.code == -32700
    assert "surrogate" in refused.value.message and "truncated" not in refused.value.message
    assert loads(b'{"x": "\\ud83d\\ude00"}') == {"x": "\U0001F600"}
    with pytest.raises(RpcError, match="truncated"):
        loads(b'{"x": "unterminated')


def test_a_surrogate_pair_in_a_malformed_frame_is_not_blamed() -> None:
    """A frame malformed elsewhere that holds an escaped pair (as json.dumps writes an
    emoji) is answered with its real fault."""
    with pytest.raises(RpcError) as refused:
        loads(b'{"x": "\\ud83d\\ude00", "y": 1,}')
    assert "surrogate" not in refused.value.message
    for lone in (b'{"x": "\\ude00"}', b'{"x": "\\ud83d."}', b'{"x": "a\\udbff\\ud800"}'):
        with pytest.raises(RpcError, match="surrogate"):
            loads(lone)
