"""Small actors the tests share."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from actors.base import A2AActor, Agent
from actors.world import Client, Simulation
from sim.canvas import parse_tile
from sim.messages import Message


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
