"""The gateway benchmark's load generator: ``python -m benchmarks.gateway_load``, a process.

It runs apart from the server so that its own work (framing, JSON) does not
share the server's interpreter lock: on two cores the two processes still
share the CPUs, which is the honest condition for a client and a server on one
machine. It prints one JSON object.

``ws URL --clients N --calls M``: N WebSocket clients join a session of their
own (the first creates it), claim a block each, then (all at once, each call
waiting for its answer) make M calls each, alternating ``builder_place_tiles``
on their block and ``region_query``. ``--echo``: the same frames to an echo server (no joining).

``flood URL --calls M --session S``: one WebSocket client joins S and sends M
``a2a_barrier_enter`` calls without waiting for their answers (each at a barrier of
its own, timeout an hour: every one taken would wait), reading the answers as they
come and keeping at most about 512 unread (a client that reads nothing is dropped
as a slow consumer once the server's send queue is full) until a second of
quiet; it prints what it saw, then waits for a line on stdin before it closes
the socket: the bench measures the server in between.

``http URL --clients N --calls M [--barnraise]``: N keep-alive HTTP/1.1 clients
each post M A2A ``SendMessage`` requests in turn: a data part calling
``region_query`` with a bearer token (``--barnraise``, after a ``session_join``)
or a text part an echo agent answers.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed


def _figures(latencies: list[float], wall: float) -> dict[str, Any]:
    ordered = sorted(latencies)
    return {
        "calls": len(ordered),
        "wall_s": round(wall, 4),
        "calls_per_s": round(len(ordered) / wall, 1) if wall > 0 else 0.0,
        "p50_ms": round(1000 * ordered[len(ordered) // 2], 3),
        "p99_ms": round(1000 * ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))], 3),
        "mean_ms": round(1000 * statistics.fmean(ordered), 3),
    }


async def _ask(ws: ClientConnection, frame: str, echo: bool = False) -> dict[str, Any]:
    await ws.send(frame)
    while True:
        answer = json.loads(await ws.recv())
        if echo or "method" not in answer:  # an echo is the answer; else skip notifications
            return dict(answer)


async def ws_load(url: str, clients: int, calls: int, session: str | None,
                  echo: bool, run: int = 0) -> dict[str, Any]:
    conns = [await connect(url, compression=None, max_size=None, ping_interval=None)
             for _ in range(clients)]
    frames: list[tuple[str, str]] = []
    if not echo and session is None:
        made = await _ask(conns[0], json.dumps({"jsonrpc": "2.0", "id": 0,
                                                "method": "session_create", "params": {
                                                    "session_name": f"load {run}",
                                                    "max_agents": clients}}))
        session = made["result"]["session_id"]
    for i, ws in enumerate(conns):
        x, y = (i % 50) * 20, (i // 50) * 20
        region = {"x": x, "y": y, "width": 8, "height": 8}
        if not echo:
            joined = await _ask(ws, json.dumps({"jsonrpc": "2.0", "id": 1,
                                                "method": "session_join", "params": {
                                                    "session_id": session,
                                                    "agent_name": f"load-{run}-{i}"}}))
            assert joined["result"]["success"], joined
            claim = await _ask(ws, json.dumps({"jsonrpc": "2.0", "id": 2, "method": "region_claim",
                                               "params": {"region": region, "timeout": 1e6}}))
            assert claim["result"]["success"], claim
        place = json.dumps({"jsonrpc": "2.0", "id": 3, "method": "builder_place_tiles",
                            "params": {"region": region, "tiles": "code"}})
        query = json.dumps({"jsonrpc": "2.0", "id": 4, "method": "region_query",
                            "params": {"region": {"x": x, "y": y, "width": 16, "height": 16}}})
        frames.append((place, query))
    latencies: list[float] = []
    failures = 0

    async def one(ws: ClientConnection, pair: tuple[str, str]) -> None:
        nonlocal failures
        clock = time.perf_counter
        for n in range(calls):
            started = clock()
            answer = await _ask(ws, pair[n & 1], echo)
            latencies.append(clock() - started)
            if not echo and not answer.get("result", {}).get("success"):
                failures += 1

    started = time.perf_counter()
    await asyncio.gather(*(one(ws, pair) for ws, pair in zip(conns, frames, strict=True)))
    wall = time.perf_counter() - started
    for ws in conns:
        await ws.close()
    return {**_figures(latencies, wall), "clients": clients, "failures": failures}


async def flood_load(url: str, calls: int, session: str) -> dict[str, Any]:
    ws = await connect(url, compression=None, max_size=None, ping_interval=None)
    joined = await _ask(ws, json.dumps({"jsonrpc": "2.0", "id": 0, "method": "session_join",
                                        "params": {"session_id": session,
                                                   "agent_name": "flood"}}))
    assert joined["result"]["success"], joined
    limits: dict[str, int] = {}
    answered = 0

    async def read() -> None:
        nonlocal answered
        while answered < calls:
            try:
                frame = json.loads(await asyncio.wait_for(ws.recv(), 30.0 if sending else 1.0))
            except TimeoutError:
                return  # the rest wait at their barriers
            if "id" not in frame:
                continue
            answered += 1
            result = frame.get("result") or frame.get("error", {}).get("data") or {}
            name = str(result.get("limit", result.get("error", "other")))
            limits[name] = limits.get(name, 0) + 1

    sending = True
    reader = asyncio.create_task(read())
    started = time.perf_counter()
    closed = None
    try:
        for n in range(1, calls + 1):
            await ws.send(json.dumps({"jsonrpc": "2.0", "id": n, "method": "a2a_barrier_enter",
                                      "params": {"barrier_id": f"flood-{n}",
                                                 "expected_count": 2, "timeout": 3600}}))
            if n % 64 == 0:
                # At most ~512 answers unread: past the server's send queue (1,024
                # frames) it drops a client that does not read, ending the flood.
                while n - answered > 576 and not reader.done():
                    await asyncio.sleep(0.001)
    except ConnectionClosed as exc:
        closed = str(exc)
    sent = time.perf_counter() - started
    sending = False
    with contextlib.suppress(ConnectionClosed):
        await reader
    print(json.dumps({"sent": calls, "send_s": round(sent, 3), "answered": answered,
                      "refused_by": limits, "closed_by_server": closed}), flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    await ws.close()
    return {"closed": True}


class _Http:
    """A minimal keep-alive HTTP/1.1 client: the cheapest honest way to post JSON."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 host: str) -> None:
        self.reader, self.writer, self.host = reader, writer, host

    async def post(self, path: str, body: bytes, headers: dict[str, str]) -> dict[str, Any]:
        head = [f"POST {path} HTTP/1.1", f"Host: {self.host}",
                "Content-Type: application/json", f"Content-Length: {len(body)}",
                "A2A-Version: 1.0", *(f"{k}: {v}" for k, v in headers.items())]
        self.writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + body)
        status = await self.reader.readline()
        length = 0
        while True:
            line = await self.reader.readline()
            if line in (b"\r\n", b""):
                break
            name, _, value = line.decode().partition(":")
            if name.lower() == "content-length":
                length = int(value)
        data = await self.reader.readexactly(length)
        assert b" 200 " in status, (status, data)
        return dict(json.loads(data))


def _send_message(part: dict[str, Any], n: int) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": n, "method": "SendMessage", "params": {
        "message": {"messageId": f"m{n}", "role": "ROLE_USER", "parts": [part]}}}).encode()


async def http_load(url: str, clients: int, calls: int, path: str,
                    barnraise: bool, session: str | None, run: int = 0) -> dict[str, Any]:
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    conns = []
    for _ in range(clients):
        reader, writer = await asyncio.open_connection(host, port)
        conns.append(_Http(reader, writer, f"{host}:{port}"))
    tokens: list[dict[str, str]] = []
    if barnraise and session is None:
        made = await conns[0].post(path, _send_message({"data": {
            "tool": "session_create", "arguments": {"session_name": f"a2a load {run}",
                                                    "max_agents": clients}}}, 0), {})
        session = made["result"]["message"]["parts"][0]["data"]["session_id"]
    for i, conn in enumerate(conns):
        if barnraise:
            joined = await conn.post(path, _send_message({"data": {
                "tool": "session_join", "arguments": {"session_id": session,
                                                      "agent_name": f"a2a-load-{i}"}}}, 0), {})
            result = joined["result"]["message"]["parts"][0]["data"]
            tokens.append({"Authorization": f"Bearer {result['token']}"})
        else:
            tokens.append({})
    if barnraise:
        part: dict[str, Any] = {"data": {"tool": "region_query", "arguments": {
            "region": {"x": 0, "y": 0, "width": 8, "height": 8}}}}
    else:
        part = {"text": "ping"}
    bodies = [_send_message(part, n) for n in range(1, 3)]
    latencies: list[float] = []
    failures = 0

    async def one(conn: _Http, headers: dict[str, str]) -> None:
        nonlocal failures
        clock = time.perf_counter
        for n in range(calls):
            started = clock()
            answer = await conn.post(path, bodies[n & 1], headers)
            latencies.append(clock() - started)
            if "message" not in answer.get("result", {}):
                failures += 1

    started = time.perf_counter()
    await asyncio.gather(*(one(c, t) for c, t in zip(conns, tokens, strict=True)))
    wall = time.perf_counter() - started
    for conn in conns:
        conn.writer.close()
    return {**_figures(latencies, wall), "clients": clients, "failures": failures}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gateway_load")
    parser.add_argument("kind", choices=("ws", "http", "flood"))
    parser.add_argument("url")
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--session")
    parser.add_argument("--path", default="/")
    parser.add_argument("--echo", action="store_true")
    parser.add_argument("--barnraise", action="store_true")
    parser.add_argument("--run", type=int, default=0, help="which repeat: fresh names, rows")
    args = parser.parse_args(argv)
    if args.kind == "flood":
        out = asyncio.run(asyncio.wait_for(flood_load(args.url, args.calls, args.session), 600))
    elif args.kind == "ws":
        out = asyncio.run(asyncio.wait_for(
            ws_load(args.url, args.clients, args.calls, args.session, args.echo, args.run),
            600))
    else:
        out = asyncio.run(asyncio.wait_for(
            http_load(args.url, args.clients, args.calls, args.path, args.barnraise,
                      args.session, args.run), 600))
    json.dump(out, sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
