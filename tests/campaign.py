"""The bad-input campaign's parts: strategies made from the tool table's schemas, and the
world's invariants. tests/test_campaign.py drives every tool with them in process and
over the gateway's WebSocket.

Values are drawn from each tool's own JSON schema (``barnraise.sim.tools.TOOLS``), so a tool or
an argument added to the table is in the campaign without a line here: valid values
within the schema's bounds, and invalid ones of every class the adversarial pass found
(wrong types, missing and extra fields, NaN and infinity, huge and negative numbers,
huge strings, odd unicode, regions out of bounds or of zero or enormous size, tile
arrays of the wrong shape).
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import os
import queue
import secrets
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import strategies as st
from websockets.sync.client import connect

from barnraise.actors.world import Simulation
from barnraise.sim.geometry import Rect
from barnraise.sim.messages import Message, Metadata, encode
from barnraise.sim.tools import ERROR_CODES, FAILURE_KEYS, TOOLS

#: The campaign's sessions are small, so valid regions often fit.
GRID = 24

_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.text(max_size=6),
                     st.floats(allow_nan=False, allow_infinity=False, width=32))
_JSONISH = st.recursive(_SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner, max_size=3)),
    max_leaves=8)

#: Strings a careless or hostile caller sends: empty, control characters, a lone
#: surrogate, right-to-left marks, digits that are not ASCII, a megabyte.
ODD_STRINGS = st.sampled_from(["", "\x00", "\ud800", "\u202e\u202d", "²", "\u0663", "①",
                               "topic:topic:x", "session:other:events", " ", "x" * 100_000])
#: Numbers no schema bound admits, and the wrong kind of value for anything.
ODD_NUMBERS = st.sampled_from([math.nan, math.inf, -math.inf, 10**400, -(10**400), 1e300,
                               -1, -(2**63), 2**64, 0.5])
WRONG_TYPES = st.sampled_from([None, True, "x", 3, 2.5, [], {}, [[1]], {"x": 1}])


def region_values(valid: bool) -> st.SearchStrategy[Any]:
    small = st.fixed_dictionaries({"x": st.integers(0, GRID), "y": st.integers(0, GRID),
                                   "width": st.integers(1, 12), "height": st.integers(1, 12)})
    if valid:
        return small
    return st.one_of(
        st.fixed_dictionaries({"x": st.integers(0, 5), "y": st.integers(0, 5),
                               "width": st.sampled_from([0, -1, 10_001, 10**6]),
                               "height": st.integers(1, 3)}),
        st.fixed_dictionaries({"x": st.sampled_from([-1, GRID, 9_999, 10**9]),
                               "y": st.integers(0, 3), "width": st.just(2),
                               "height": st.just(2)}),
        st.just({"x": 0, "y": 0}), st.just({"x": 0, "y": 0, "width": 1, "height": 1, "z": 1}),
        small.map(lambda r: {**r, "width": float(r["width"]) + 0.5}),
        WRONG_TYPES)


def tile_values(valid: bool) -> st.SearchStrategy[Any]:
    names = st.sampled_from(["empty", "system", "code", "data", "network", "storage", "CODE"])
    if valid:
        return st.one_of(names, st.integers(0, 7))
    return st.one_of(st.integers(8, 300), st.integers(-3, -1), ODD_STRINGS, st.just(True),
                     st.just(1.0), st.just("cod"))


def tiles_for(region: Any, valid: bool) -> st.SearchStrategy[Any]:
    """Rows of tiles for ``region``: the right shape, or a wrong one."""
    if not (isinstance(region, dict) and all(isinstance(region.get(k), int) and
                                             0 < region[k] <= 12 for k in ("width", "height"))):
        return st.one_of(tile_values(True), st.lists(st.lists(tile_values(True), max_size=3),
                                                     max_size=3))
    h, w = region["height"], region["width"]
    rows = st.lists(st.lists(tile_values(True), min_size=w, max_size=w), min_size=h, max_size=h)
    if valid:
        return st.one_of(rows, tile_values(True))
    wrong_shape = st.one_of(
        st.lists(st.lists(tile_values(True), min_size=w + 1, max_size=w + 1),
                 min_size=h, max_size=h),
        st.lists(st.lists(tile_values(True), min_size=w, max_size=w),
                 min_size=h + 1, max_size=h + 1),
        st.just([[]]), st.just([]))
    bad_cell = st.lists(st.lists(tile_values(False), min_size=w, max_size=w),
                        min_size=h, max_size=h)
    return st.one_of(wrong_shape, bad_cell, st.just([[True] * w] * h))


def value_for(schema: Mapping[str, Any], ids: st.SearchStrategy[str]) -> st.SearchStrategy[Any]:
    """A valid value of ``schema`` (ids: strings that name things of the world)."""
    if "enum" in schema:
        return st.sampled_from(list(schema["enum"]))
    kinds = schema.get("type")
    if isinstance(kinds, list):
        return st.one_of(*(value_for({**schema, "type": kind}, ids) for kind in kinds))
    if kinds == "string":
        return st.one_of(ids, st.text(min_size=schema.get("minLength", 0), max_size=8))
    if kinds == "integer":
        low, high = schema.get("minimum", -10), schema.get("maximum", 10**6)
        return st.one_of(st.integers(low, min(high, low + 40)), st.just(high))
    if kinds == "number":
        low, high = schema.get("minimum", 0), schema.get("maximum", 1e6)
        return st.one_of(st.floats(low, min(high, low + 50.0)), st.just(high))
    if kinds == "boolean":
        return st.booleans()
    if kinds == "object" and "properties" in schema:
        return arguments(schema, ids)
    if kinds == "object":
        return st.dictionaries(st.text(max_size=6), _JSONISH, max_size=3)
    if kinds == "array":
        items = schema.get("items")
        inner = value_for(items, ids) if items else _JSONISH
        return st.lists(inner, max_size=3)
    return _JSONISH


def arguments(schema: Mapping[str, Any], ids: st.SearchStrategy[str]) -> st.SearchStrategy[
        dict[str, Any]]:
    """Valid arguments of an object schema: every required key, some optional ones."""
    props: Mapping[str, Any] = schema["properties"]
    required = set(schema.get("required", ()))

    def special(key: str, sub: Mapping[str, Any]) -> st.SearchStrategy[Any]:
        if key in ("region", "region_overlaps"):
            return region_values(True)
        if key in ("tile_type",):
            return tile_values(True)
        if key in ("x", "y"):
            return st.integers(0, GRID + 2)
        if key in ("timeout", "wait"):  # a short wait: the run must reach its end
            return st.floats(0, 5)
        return value_for(sub, ids)

    return st.fixed_dictionaries(
        {k: special(k, v) for k, v in props.items() if k in required},
        optional={k: special(k, v) for k, v in props.items() if k not in required})


@st.composite
def tool_call(draw: st.DrawFn, ids: st.SearchStrategy[str],
              names: tuple[str, ...] = tuple(TOOLS)) -> tuple[str, dict[str, Any], bool]:
    """``(tool, arguments, meant_valid)``: valid arguments, or valid ones with one flaw."""
    name = draw(st.sampled_from(names))
    schema = TOOLS[name].input_schema
    args = draw(arguments(schema, ids))
    if name == "builder_place_tiles":
        args["tiles"] = draw(tiles_for(args.get("region"), True))
    if draw(st.booleans()):
        return name, args, True
    flaw = draw(st.sampled_from(["type", "number", "string", "missing", "extra", "region",
                                 "tiles", "not_json"]))
    props = list(schema["properties"])
    key = draw(st.sampled_from(props))
    if flaw == "type":
        args[key] = draw(WRONG_TYPES)
    elif flaw == "number":
        args[key] = draw(ODD_NUMBERS)
    elif flaw == "string":
        args[key] = draw(ODD_STRINGS)
    elif flaw == "missing" and schema.get("required"):
        args.pop(draw(st.sampled_from(list(schema["required"]))), None)
    elif flaw == "extra":
        args[draw(st.text(min_size=1, max_size=8).filter(lambda k: k not in props))] = 1
    elif flaw == "region":
        args["region"] = draw(region_values(False))
    elif flaw == "tiles":
        args["tiles"] = draw(tiles_for(args.get("region"), False))
    elif flaw == "not_json":
        args[key] = draw(st.sampled_from([np.int64(3), np.zeros(2), object(), {1: "a"},
                                          b"bytes", {"deep": [np.float32(1)]}]))
    return name, args, False


# -- invariants ----------------------------------------------------------------------------


def check_result(tool: str, result: Any) -> None:
    """A result is a dict with ``success``; a failure names a known error code."""
    assert isinstance(result, dict), (tool, result)
    assert result.get("success") in (True, False), (tool, result)
    if not result["success"]:
        assert result.get("error") in ERROR_CODES, (tool, result)
        assert result.get("error") != "internal_error", (tool, result)
        assert isinstance(result.get("message"), str), (tool, result)
    # every key is one the typed results (barnraise.sim.tool_methods) declare
    known = TOOLS.get(tool)
    declared = {*FAILURE_KEYS, *(known.result if known is not None else ())}
    assert set(result) <= declared, (tool, sorted(set(result) - declared))


def check_world(simu: Simulation, session_id: str) -> None:
    """The world after any sequence of calls: nothing a bad call could have broken."""
    assert simu.dispatcher.behaviour_errors == 0, "a handler or behaviour raised"
    view = simu.view(session_id, completion=True)
    # Exclusive means exclusive of others: an agent may claim inside its own claim (a
    # lease on part of what it holds), which the region manager grants by design.
    exclusive = [c for c in view.claims if c.exclusive]
    for a, b in itertools.combinations(exclusive, 2):
        if a.agent_id != b.agent_id:
            assert not Rect(**a.region.to_dict()).overlaps(Rect(**b.region.to_dict())), (a, b)
    assert view.canvas is not None
    progress = view.progress
    assert sum(progress.tiles_by_agent.values()) == progress.tiles_placed
    assert progress.tiles_placed == int(np.count_nonzero(view.canvas)), progress
    completed = Counter(record.content_obj().get("task_id")
                        for record in simu.dispatcher.trace.records("event")
                        if record.type == "task_completed")
    assert all(n == 1 for n in completed.values()), completed
    statuses = {t.task_id: t.status for t in view.tasks}
    assert all(statuses.get(task) == "completed" for task in completed), statuses


def covered_by_claims(simu: Simulation, session_id: str, writer: str, region: Any) -> bool:
    """True when the claims ``writer`` holds cover ``region`` (coordinated mode's rule)."""
    rect = Rect.parse(region)
    covered = np.zeros((rect.height, rect.width), dtype=bool)
    for claim in simu.view(session_id, canvas=False).claims:
        if claim.agent_id != writer:
            continue
        overlap = Rect(**claim.region.to_dict()).intersection(rect)
        if overlap is not None:
            covered[overlap.y - rect.y:overlap.y2 - rect.y,
                    overlap.x - rect.x:overlap.x2 - rect.x] = True
    return bool(covered.all())


# -- the served surfaces -------------------------------------------------------------------

#: Distinct event types a remote agent may subscribe to (past the bound, some are refused).
EVENT_TYPES = ("region_claimed", "region_released", "agent_joined", "agent_left",
               "task_created", "task_completed", "tiles_placed", "task_failed")
#: What a forger plants in the answers it sends; no answer an agent receives carries it.
FORGED = "FORGED_BY"


def until(condition: Callable[[], bool], timeout: float = 20.0) -> bool:
    """True once ``condition`` holds (polled), False when ``timeout`` seconds passed."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def unforged(where: str, answer: Any) -> None:
    """No answer carries what a forger planted."""
    assert FORGED not in json.dumps(answer, default=repr), (where, answer)


#: The WebSocket clients' own log: a connection the campaign cuts on purpose logs the
#: end of its stream as an error, which is what the campaign meant.
_CUT = logging.getLogger("tests.campaign.websocket")
_CUT.setLevel(logging.CRITICAL)


class Member:
    """A remote agent on the gateway's WebSocket ``/a2a``: requests by id; answers that
    arrive for other ids are kept for their turn, notifications are skipped."""

    def __init__(self, url: str, session_id: str, name: str,
                 role_token: str | None = None) -> None:
        self.url = url.replace("http://", "ws://") + "/a2a"
        self.ids = itertools.count(1)
        self.early: dict[str, dict[str, Any]] = {}
        self.ws = connect(self.url, open_timeout=10, compression=None, max_size=None, legacy=True,
                          close_timeout=2, logger=_CUT)
        params = {"session_id": session_id, "agent_name": name, "role": "builder"}
        if role_token is not None:
            params["role_token"] = role_token
        joined = self.ask("session_join", params)
        assert joined["result"]["success"], joined
        self.joined: dict[str, Any] = joined["result"]
        self.agent_id: str = self.joined["agent_id"]
        self.token: str = self.joined["token"]

    def send(self, method: str, params: Any) -> str:
        rid = f"r{next(self.ids)}"
        self.ws.send(json.dumps({"jsonrpc": "2.0", "id": rid, "method": method,
                                 "params": params}, default=repr))
        return rid

    def answer(self, rid: str, timeout: float = 30.0) -> dict[str, Any]:
        if rid in self.early:
            return self.early.pop(rid)
        deadline = time.monotonic() + timeout
        while True:
            frame = json.loads(self.ws.recv(timeout=max(0.01, deadline - time.monotonic())))
            if "method" in frame:  # mail and events
                continue
            if frame.get("id") == rid or (frame.get("id") is None and "error" in frame):
                return dict(frame)  # a frame that is not JSON (NaN) has no id to echo
            self.early[str(frame.get("id"))] = frame

    def ask(self, method: str, params: Any) -> dict[str, Any]:
        return self.answer(self.send(method, params))

    def reconnect(self) -> None:
        """Drop the connection (no close handshake) and come back as the same agent."""
        self.ws.close_socket()
        self.early.clear()
        self.ws = connect(self.url, open_timeout=10, compression=None, max_size=None, legacy=True,
                          close_timeout=2, logger=_CUT,
                          additional_headers={"Authorization": f"Bearer {self.token}"})

    def close(self) -> None:
        self.ws.close()


def forged_letter(join: Mapping[str, Any], to: str, correlation_id: str,
                  n: int) -> dict[str, Any]:
    """A ``task_response`` signed by ``join``'s agent, answering ``correlation_id`` (a
    call of ``to``'s) with content of the forger's. (Not a ``coordination_response``:
    no agent outside may send one, and the gateway refuses it before any check of the
    answer could be tried.)"""
    message = Message(f"forged-{secrets.token_hex(6)}-{n}", join["now"], join["agent_id"], to,
                      "task_response", 8,
                      {"success": True, "released": True, FORGED: join["agent_id"]},
                      Metadata(correlation_id=correlation_id),
                      expires_at=join["now"] + 1800.0)
    wire: dict[str, Any] = json.loads(encode(message, bytes.fromhex(join["signing_key"])))
    return wire


def world_state(simu: Simulation) -> Any:
    """What a refused call or frame must leave as it was: the sessions, each one's members,
    claims, tasks and canvas, and the clock's scale."""
    sessions = {}
    for sid in simu.sessions():
        view = simu.view(sid)
        assert view.canvas is not None
        sessions[sid] = (
            sorted((m.agent_id, m.name, m.role) for m in view.members),
            sorted((c.claim_id, c.agent_id, c.exclusive, repr(c.region)) for c in view.claims),
            sorted((t.task_id, t.status, repr(t.assigned_to)) for t in view.tasks),
            view.canvas.tobytes())
    return sessions, simu.dispatcher.clock.time_scale  # type: ignore[attr-defined]


class McpStdio:
    """``barnraise mcp`` as a subprocess: one line in, the answer line out (read by a
    thread, waited for with a timeout); killed by :meth:`close`."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "barnraise.cli", "mcp"], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
        self.lines: queue.Queue[bytes] = queue.Queue()
        self._reader = threading.Thread(target=self._read, name="mcp-stdout", daemon=True)
        self._reader.start()
        hello = self.ask({"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "campaign", "version": "1"}}})
        assert "result" in hello, hello
        self.write(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"})
                   .encode())

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line)

    def write(self, line: bytes) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line + b"\n")
        self.process.stdin.flush()

    def answer(self, timeout: float = 60.0) -> dict[str, Any]:
        found = json.loads(self.lines.get(timeout=timeout))
        assert isinstance(found, dict), found
        return found

    def ask(self, request: Mapping[str, Any]) -> dict[str, Any]:
        self.write(json.dumps(request).encode())
        return self.answer()

    def close(self) -> None:
        self.process.kill()
        self.process.wait(10)
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                stream.close()
        self._reader.join(10)
