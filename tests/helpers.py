"""Small actors the tests share."""

from __future__ import annotations

import contextlib
import os
import pathlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from barnraise.actors.base import A2AActor, Agent
from barnraise.actors.world import Client, Simulation
from barnraise.sim.canvas import parse_tile
from barnraise.sim.messages import Message


class Recorder(Agent):
    """Keeps every message no behaviour or handler took, in arrival order."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.got: list[Message] = []

    def handle_message(self, message: Message) -> None:
        self.got.append(message)

    def contents(self, key: str) -> list[Any]:
        return [m.content.get(key) for m in self.got]


class Echo(Agent):
    """Answers every task_assignment with a task_result carrying the same content."""

    def handle_task_assignment(self, message: Message) -> None:
        self.reply(message, "task_result", dict(message.content))


class Service(A2AActor):
    """A service actor (no agent type): not reached by broadcasts."""

    def __init__(self) -> None:
        super().__init__()
        self.got: list[Message] = []

    def handle_message(self, message: Message) -> None:
        self.got.append(message)


@dataclass
class Crew:
    """One session's members: an architect, builders A and B, a tester, an observer."""

    sid: str
    arch: Client
    a: Client
    b: Client
    tester: Client
    observer: Client

    @property
    def everyone(self) -> list[Client]:
        return [self.arch, self.a, self.b, self.tester, self.observer]


def session_crew(simu: Simulation, grid: int = 100, mode: str = "coordinated", *,
                 name: str = "S", **options: Any) -> Crew:
    """Create session ``name`` and join a :class:`Crew` to it (client ids prefixed
    with the name's lower case when it is not the default, so two crews can share
    a simulation)."""
    prefix = "" if name == "S" else f"{name.lower()}-"
    arch = simu.client(f"{prefix}arch")
    created = arch.session_create(session_name=name, grid_size=grid, coordination_mode=mode,
                                  **options)
    assert created["success"], created
    sid = created["session_id"]
    assert arch.session_join(session_id=sid, agent_name="Arch", role="architect")["success"]
    members = []
    for who, role in (("A", "builder"), ("B", "builder"), ("T", "tester"),
                      ("O", "observer")):
        client = simu.client(f"{prefix}{who.lower()}")
        joined = client.session_join(session_id=sid, agent_name=who, role=role)
        assert joined["success"], joined
        members.append(client)
    return Crew(sid, arch, *members)


def box(x: int, y: int, w: int, h: int | None = None) -> dict[str, int]:
    """A region dict: a w x w square, or w x h."""
    return {"x": x, "y": y, "width": w, "height": w if h is None else h}


def canvas_from_log(run: Any, at: float, size: int) -> np.ndarray[Any, Any]:
    """The canvas at simulated time ``at`` worked out from the log alone: every tile write
    delivered to the regions service by then (a run whose writes all succeeded)."""
    canvas = np.zeros((size, size), dtype=np.uint8)
    for record in run.records():
        if record.t > at:
            break
        if record.recipient != "regions" or record.kind != "deliver":
            continue
        call = record.content_obj()
        args = call.get("args", {})
        if call.get("tool") == "builder_place_tile":
            canvas[args["y"], args["x"]] = int(parse_tile(args["tile_type"]))
        elif call.get("tool") == "builder_place_tiles":
            r = args["region"]
            tiles = args["tiles"]
            canvas[r["y"]:r["y"] + r["height"], r["x"]:r["x"] + r["width"]] = (
                int(parse_tile(tiles)) if isinstance(tiles, (int, str)) else np.array(tiles))
    return canvas


class HandSession:
    """A session driven by hand, one step at a time, for the stores' property tests
    (tests/test_rebuild.py, tests/test_restore.py): an owner (architect) and guests
    (builders) who come and go, making tool calls good and refused.

    :meth:`step` takes ``(name, a, b, c)`` as the tests' hypothesis strategies draw them:
    ``place_tile``, ``place_tiles``, ``claim``, ``release``, ``delegate`` (b odd: on the
    last task; to guest b when it is in, else to any), ``accept`` and ``report`` (by guest
    b, or the owner), ``artifact``, ``checkpoint``, ``rollback``, ``join``, ``leave``,
    ``wait`` (a simulated seconds pass), ``lock``, ``unlock``, ``barrier``.
    """

    def __init__(self, simu: Simulation) -> None:
        self.simu = simu
        self.owner = simu.client("owner")
        self.session_id = str(self.owner.call("session_create", session_name="P",
                                              grid_size=10)["session_id"])
        self.owner.call("session_join", agent_name="owner", role="architect")
        self.guests: dict[int, Any] = {}  # in the session now
        self.clients: dict[int, Any] = {}  # made once each: an actor name is never reused
        self.claims: list[str] = []
        self.tasks: list[str] = []
        self.checkpoints: list[str] = []

    def step(self, name: str, a: int, b: int, c: Any) -> None:
        owner, guests, simu = self.owner, self.guests, self.simu
        who = guests.get(b, owner)
        claims, tasks, checkpoints = self.claims, self.tasks, self.checkpoints
        if name == "place_tile":
            owner.call("builder_place_tile", x=a, y=b, tile_type=c)
        elif name == "place_tiles":
            owner.call("builder_place_tiles", region=box(a, b, 2), tiles=c)
        elif name == "claim":
            got = owner.call("region_claim", region=box(a, b, c), timeout=60)
            if got.get("success"):
                claims.append(got["claim_id"])
        elif name == "release" and claims:
            owner.call("region_release", claim_id=claims[a % len(claims)])
        elif name == "delegate":
            deps = tasks[-1:] if b % 2 and tasks else []
            target = f"guest-{b}" if b in guests else "any"
            got = owner.call("task_delegate", task_type="build", description=f"t{a}",
                             dependencies=deps, target_agent_id=target, region=box(a, 0, 2),
                             payload={"n": a}, deadline=simu.now + 100 * (a + 1))
            if got.get("success"):
                tasks.append(got["task_id"])
        elif name == "accept" and tasks:
            who.call("task_accept", task_id=tasks[a % len(tasks)])
        elif name == "report" and tasks:
            who.call("task_report", task_id=tasks[a % len(tasks)], status=c, result={"k": a})
        elif name == "artifact":
            if b:
                owner.call("builder_assemble_cartridge", region=box(a, a, 2), name=f"c{a}")
            else:
                owner.call("builder_load_shader", region=box(a, a, 2), shader_name=f"s{a}")
        elif name == "checkpoint":
            include = [["tiles"], ["tiles", "session_state"], ["session_state"],
                       ["tiles", "shaders", "cartridges", "session_state"]][a]
            got = owner.call("build_checkpoint", include=include, description=f"c{a}")
            if got.get("success"):
                checkpoints.append(got["checkpoint_id"])
        elif name == "rollback" and checkpoints:
            owner.call("build_rollback", checkpoint_id=checkpoints[a % len(checkpoints)])
        elif name == "join" and a not in guests:
            if a not in self.clients:
                self.clients[a] = simu.client(f"guest-{a}")
            guests[a] = self.clients[a]
            guests[a].call("session_join", session_id=self.session_id,
                           agent_name=f"guest-{a}", role="builder")
        elif name == "leave" and a in guests:
            guests.pop(a).call("session_leave")
        elif name == "wait":
            simu.advance(a)
        elif name == "lock":
            who.call("a2a_lock_acquire", lock_id=f"lock-{a}", wait=0, lease=c)
        elif name == "unlock":
            who.call("a2a_lock_release", lock_id=f"lock-{a}")
        elif name == "barrier":
            who.call("a2a_barrier_enter", barrier_id=f"b-{a}", expected_count=1, timeout=0)


ROOT = pathlib.Path(__file__).resolve().parents[1]
#: The flags every mypy check of a snippet runs with: one set, so one cache serves them all.
MYPY_FLAGS = ("--follow-imports=silent", "--no-error-summary", "--show-error-codes")


def mypy_says(snippet: pathlib.Path) -> tuple[str, str, int]:
    """What mypy says of ``snippet`` (stdout, stderr, exit status), run in this process on
    this checkout's modules (not an installed copy) with the project's configuration and
    its cache kept in the checkout's .mypy_cache: the first check of a test run pays for
    the package (about 12 s of CPU cold), later ones read it from the cache (a second or
    two). The snippets share the flags, and so the cache."""
    import pytest

    api = pytest.importorskip("mypy.api")
    before = os.environ.get("MYPYPATH")
    os.environ["MYPYPATH"] = str(ROOT)
    try:
        with contextlib.chdir(ROOT):
            out, err, status = api.run([str(snippet), *MYPY_FLAGS,
                                        "--cache-dir", str(ROOT / ".mypy_cache")])
    finally:
        if before is None:
            del os.environ["MYPYPATH"]
        else:
            os.environ["MYPYPATH"] = before
    return out, err, status
