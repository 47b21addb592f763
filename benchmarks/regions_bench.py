"""Claim decisions at 10,000 active claims: the regions actor against a naive scan.

``bench_claims`` fills one session to ``claims`` active claims, then times the
same further stream of claim requests two ways:

* **actors**: each request is a ``region_claim`` tool call from a client, through
  the deterministic dispatcher to the regions actor and back (validation,
  policy, conflict check, suggestion search, events and the trace included);
* **naive**: a Python list of the active claims. A request scans every claim
  for a conflict (and collects the conflicting agents and overlaps); a refused
  request then searches a suggestion by walking candidate top-left positions
  outward from the request, ring by ring, until the nearest free placement is
  certain. Each ring makes one pass over every claim to keep those that can
  block one of its candidates, and checks the candidates against those. (A
  pass over every claim for every candidate would be several times slower
  again: about 1 decision/s at 10,000 claims.)

Both sides apply the same rules and must reach the same decisions, suggestions
included; the benchmark checks that they do. The naive side pays no messaging
at all, so the ratio understates the algorithmic gain. Python's
``random.Random(seed)`` makes the request stream; nothing uses global state.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from barnraise.actors.world import Client, Simulation
from benchmarks.runtime import _summary, interleaved

#: (agent index, x, y, width, height, exclusive)
Request = tuple[int, int, int, int, int, bool]
#: (x, y, x2, y2, agent index, exclusive) of an active claim
_Box = tuple[int, int, int, int, int, bool]


def requests(grid: int, agents: int, max_side: int, seed: int) -> Iterator[Request]:
    """An endless seeded stream of claim requests: random agent, size 1..``max_side``
    a side, position anywhere inside the grid, exclusive or shared with even odds."""
    rng = random.Random(seed)
    while True:
        w, h = rng.randint(1, max_side), rng.randint(1, max_side)
        yield (rng.randrange(agents), rng.randrange(grid - w + 1), rng.randrange(grid - h + 1),
               w, h, rng.random() < 0.5)


# -- the naive baseline -------------------------------------------------------------------


def _blocks(box: _Box, x: int, y: int, x2: int, y2: int, exclusive: bool) -> bool:
    bx, by, bx2, by2, _, bex = box
    return (exclusive or bex) and bx < x2 and x < bx2 and by < y2 and y < by2


def _naive_free(boxes: list[_Box], x: int, y: int, w: int, h: int, exclusive: bool) -> bool:
    x2, y2 = x + w, y + h
    return not any(_blocks(b, x, y, x2, y2, exclusive) for b in boxes)


def _naive_suggestion(boxes: list[_Box], grid: int, request: Request,
                      ) -> tuple[int, int] | None:
    # Free as the actor means it: no claim there (no exclusive claim for a
    # shared request). Nearest by Euclidean distance of the top-left, ties to
    # the smallest (y, x): positions on Chebyshev ring r are at least r away,
    # so once the best hit is within r no later ring can beat it.
    _, nx, ny, w, h, exclusive = request
    xmax, ymax = grid - w, grid - h
    best: tuple[int, int, int] | None = None
    for r in range(max(nx, xmax - nx, ny, ymax - ny) + 1):
        # One pass over every claim per ring keeps the claims that can block a
        # candidate of this ring; the candidates are checked against those.
        x0, y0 = max(0, nx - r), max(0, ny - r)
        x1, y1 = min(xmax, nx + r), min(ymax, ny + r)
        near = [b for b in boxes if _blocks(b, x0, y0, x1 + w, y1 + h, exclusive)]
        for y in range(y0, y1 + 1):
            xs = range(x0, x1 + 1) if abs(y - ny) == r else (nx - r, nx + r)
            for x in xs:
                if not 0 <= x <= xmax:
                    continue
                d2 = (x - nx) ** 2 + (y - ny) ** 2
                if (best is None or (d2, y, x) < best) and _naive_free(near, x, y, w, h,
                                                                       exclusive):
                    best = (d2, y, x)
        if best is not None and best[0] <= r * r:
            break
    return None if best is None else (best[2], best[1])


def naive_decide(boxes: list[_Box], grid: int, request: Request) -> tuple[bool, Any]:
    """One claim decision on a plain list: (granted, conflicting agents or suggestion)."""
    agent, x, y, w, h, exclusive = request
    x2, y2 = x + w, y + h
    conflicting = {b[4]: (max(b[0], x), max(b[1], y), min(b[2], x2), min(b[3], y2))
                   for b in boxes if b[4] != agent and _blocks(b, x, y, x2, y2, exclusive)}
    if not conflicting:
        boxes.append((x, y, x2, y2, agent, exclusive))
        return True, None
    return False, _naive_suggestion(boxes, grid, request)


# -- the actor side -----------------------------------------------------------------------------


@dataclass
class _Filled:
    simulation: Simulation
    clients: list[Client]
    boxes: list[_Box]  # the claims granted during the fill, for the naive side
    stream: Iterator[Request]


def _claim(client: Client, request: Request) -> dict[str, Any]:
    _, x, y, w, h, exclusive = request
    # timeout 0: no lease timers; the naive side has none either
    return client.region_claim(region={"x": x, "y": y, "width": w, "height": h},
                               exclusive=exclusive, timeout=0)


def _fill(claims: int, grid: int, agents: int, max_side: int, seed: int) -> _Filled:
    """A session holding ``claims`` claims from the request stream (the untimed set-up)."""
    simulation = Simulation(seed=seed, mode="deterministic")
    owner = simulation.client("bench-architect")
    session = owner.session_create(session_name="claims bench", grid_size=grid,
                                   max_agents=agents, coordination_mode="coordinated")
    clients = []
    for i in range(agents):
        client = simulation.client(f"bench-{i}")
        assert client.session_join(session_id=session["session_id"],
                                   agent_name=f"B{i}")["success"]
        clients.append(client)
    stream = requests(grid, agents, max_side, seed)
    boxes: list[_Box] = []
    while len(boxes) < claims:
        request = next(stream)
        if _claim(clients[request[0]], request)["success"]:
            agent, x, y, w, h, exclusive = request
            boxes.append((x, y, x + w, y + h, agent, exclusive))
    return _Filled(simulation, clients, boxes, stream)


Decision = tuple[bool, tuple[int, int] | None]  # (granted, top-left of the suggestion)


@dataclass
class _Round:
    """What one round's two sides share, and what each decided and spent."""

    boxes: list[_Box]
    batch: list[Request]
    decided: dict[str, list[Decision]]
    # per side: seconds spent on granted and on refused requests, this round
    spent: dict[str, tuple[float, float]]


def _timed(decide: Callable[[Request], Decision], batch: list[Request],
           ) -> tuple[list[Decision], float, float]:
    decided = []
    granted = refused = 0.0
    clock = time.perf_counter
    for request in batch:
        start = clock()
        decision = decide(request)
        took = clock() - start
        decided.append(decision)
        if decision[0]:
            granted += took
        else:
            refused += took
    return decided, granted, refused


def bench_claims(claims: int = 10_000, grid: int = 1000, repeats: int = 3, *,
                 decisions: int = 100, agents: int = 100, max_side: int = 20,
                 seed: int = 1) -> dict[str, Any]:
    """Claim decisions per second once ``claims`` claims are active.

    Set-up (untimed, every round): a fresh deterministic Simulation with one
    coordinated session of ``grid`` x ``grid`` cells and ``agents`` builder
    clients, filled through the actors from a seeded request stream (see
    :func:`requests`) until ``claims`` claims are held.

    Timed: the next ``decisions`` requests of the stream, one by one, as
    region_claim calls from the requesting agent's client (``actors``) and as
    :func:`naive_decide` on a list holding the same claims (``naive``); the
    claims each side grants stay, so both end with the same claims. The two
    must agree on every decision and suggestion (checked). Rates are medians
    over ``repeats`` interleaved rounds: overall, and over granted and over
    refused requests alone; ``conflict_share`` is the share refused.
    """
    rounds: list[_Round] = []

    def actors() -> float:
        filled = _fill(claims, grid, agents, max_side, seed)
        batch = [next(filled.stream) for _ in range(decisions)]
        clients = filled.clients

        def decide(request: Request) -> Decision:
            result = _claim(clients[request[0]], request)
            if result["success"]:
                return True, None
            spot = result["suggestion_region"]
            return False, None if spot is None else (spot["x"], spot["y"])

        try:
            decided, granted, refused = _timed(decide, batch)
        finally:
            filled.simulation.close()
        rounds.append(_Round(filled.boxes, batch, {"actors": decided},
                             {"actors": (granted, refused)}))
        return decisions / (granted + refused)

    def naive() -> float:
        this = rounds[-1]  # the actors side of this round has just set it up
        boxes = list(this.boxes)
        decided, granted, refused = _timed(lambda r: naive_decide(boxes, grid, r), this.batch)
        this.decided["naive"] = decided
        this.spent["naive"] = (granted, refused)
        return decisions / (granted + refused)

    sides: dict[str, Callable[[], float]] = {"actors": actors, "naive": naive}
    runs = interleaved(repeats, **sides)
    for this in rounds:
        assert this.decided["actors"] == this.decided["naive"], "the sides decided differently"
    med = _summary(runs)
    decided = rounds[0].decided["actors"]
    refused_n = sum(1 for granted, _ in decided if not granted)
    granted_n = decisions - refused_n
    by_outcome: dict[str, float] = {}
    for side in sides:
        for i, (label, n) in enumerate((("granted", granted_n), ("refused", refused_n))):
            times = [this.spent[side][i] for this in rounds]
            by_outcome[f"{side}_{label}"] = n / statistics.median(times) if n else 0.0
    return {
        "claims_active": claims, "grid": grid, "agents": agents, "max_side": max_side,
        "decisions_timed": decisions, "conflict_share": round(refused_n / decisions, 3),
        "unit": "claim decisions/s (median)",
        "actors": round(med["actors"]), "naive": round(med["naive"], 1),
        "ratio": round(med["actors"] / med["naive"], 1), "target": 10.0,
        "granted_only": {"actors": round(by_outcome["actors_granted"]),
                         "naive": round(by_outcome["naive_granted"], 1),
                         "ratio": _ratio(by_outcome["actors_granted"],
                                         by_outcome["naive_granted"])},
        "refused_only": {"actors": round(by_outcome["actors_refused"]),
                         "naive": round(by_outcome["naive_refused"], 1),
                         "ratio": _ratio(by_outcome["actors_refused"],
                                         by_outcome["naive_refused"])},
        "runs": {k: [round(r, 1) for r in v] for k, v in runs.items()},
    }


def _ratio(fast: float, slow: float) -> float | None:
    return round(fast / slow, 1) if slow else None
