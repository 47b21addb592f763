"""The region manager: claims, the canvas, artifacts and the blueprint of every session.

:class:`RegionManager` (the ``regions`` actor) is the only writer of tiles. Per
session it owns:

* the **canvas** (:class:`barnraise.sim.canvas.TileCanvas`); agents write under small int
  writer ids handed out per session in order of first write;
* the **claims**: leases on rectangles, exclusive or shared. An exclusive claim
  may not overlap any claim of another agent; a shared claim may overlap other
  shared claims but no exclusive claim of another agent; an agent's own claims
  never conflict with each other. A claim with ``timeout > 0`` is a lease that
  lives as long as its holder: each ``timeout`` seconds (its term; a daemon timer,
  so a lease never keeps a run alive) the manager looks whether the holder is still
  live, and extends a live holder's lease by another term (``region_renewed``) or
  lets a gone holder's lapse (``region_released``, reason ``expired``). See
  :meth:`SessionService.holder_live` for what live means; the room
  :mod:`barnraise.actors.region_leases` keeps the timers; ``region_renew`` starts a
  new term at once;
* **artifacts**: shaders and cartridges (its room :mod:`barnraise.actors.region_artifacts`);
* the **blueprint** (the target tiles) and the counters ``tiles_placed`` (and
  per writer, ``tiles_by_agent``), ``lost_work`` and ``conflicts``.

Conflict checks never scan every claim. Two boolean masks (cells under any
claim, cells under an exclusive claim) answer "is anything there" in O(area) of
the request, a grid of buckets finds the claims themselves, and the suggestion
for a refused claim is :func:`barnraise.sim.geometry.find_free_placement` on the mask, which
builds summed-area tables over its search window only. (An
:class:`~barnraise.sim.geometry.OccupancyIndex` would rebuild a whole-grid table after
every granted claim, about 1 ms at 1000 x 1000; the window search costs far less
when claims change between conflicts, which is the common case.) All of it is
updated incrementally on every claim and release.

Coordination modes (the session's ``coordination_mode``) decide who may write
(tiles, shaders and cartridges alike):

* ``coordinated``: every written cell must lie in a claim of the writer;
* ``free``: anyone writes anywhere; overwriting another agent's cells adds to
  ``lost_work`` (it is counted in every mode);
* ``sequential``: one writer at a time holds the session's write token, taken by
  a write when free and held until its holder has no claims left (after a
  release, expiry or transfer), leaves, or goes :data:`SEQUENTIAL_IDLE` seconds
  without writing. Claims are not needed to write.

Checkpoints (``_checkpoint``/``_rollback``, its room :mod:`barnraise.actors.region_checkpoints`)
keep the compressed canvas, the artifacts and ``tiles_placed`` in this actor under the
checkpoint id. Claims are leases on the present, not work, and are **not** rolled back;
nor are the contention statistics ``lost_work`` and ``conflicts``, nor the blueprint.
The arguments' checks are :mod:`barnraise.actors.region_args`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Final

import numpy as np
from numpy.typing import NDArray

from barnraise.actors.region_args import inside, invalid, rect_arg, tile_arg, tile_bytes, tile_rows
from barnraise.actors.region_artifacts import Artifacts
from barnraise.actors.region_checkpoints import RegionCheckpoints
from barnraise.actors.region_leases import DEFAULT_LEASE, RegionLeases
from barnraise.actors.service import REPLY_MARGIN, Call, SessionInfo, SessionService, fit_prefix
from barnraise.sim.canvas import CanvasSnapshot, MatchResult, Tile, TileCanvas, completion_percent
from barnraise.sim.dispatch import Timer
from barnraise.sim.events import ConflictDetected, RegionClaimed, RegionReleased
from barnraise.sim.geometry import Rect, find_free_placement, free_rectangles
from barnraise.sim.tools import ToolError, ok
from barnraise.sim.views import (
    ClaimView,
    ProgressView,
    RegionsPart,
    frozen_copy,
)

if TYPE_CHECKING:
    from barnraise.actors.stored.image import SessionImage

__all__ = ["BLUEPRINT", "CLAIM_FOR", "SEQUENTIAL_IDLE", "ClaimIndex", "RegionManager"]

# Regions' operations a stored log is read by (actors/regions_log.py folds them; the
# session services' own are barnraise.actors.service's): the log keeps them by these names.
#: From the coordinator: ``session_id``, ``blueprint`` (rows of tile codes).
BLUEPRINT: Final = "_blueprint"
#: From the task queue: ``session_id``, ``agent_id``, ``region``, ``purpose`` (``"task <id>"``
#: for a task's region).
CLAIM_FOR: Final = "_claim_for"

#: Simulated seconds without a write after which a sequential-mode write token is free.
SEQUENTIAL_IDLE: Final = 30.0

_TILE_NAMES: Final = {int(t): t.name.lower() for t in Tile}
_by_serial = attrgetter("serial")


@dataclass(slots=True, eq=False)
class _Claim:
    claim_id: str
    serial: int  # creation order: lists of claims are sorted by it, oldest first
    agent_id: str
    rect: Rect
    purpose: str
    exclusive: bool
    claimed_at: float
    expires_at: float | None
    #: the lease's term in seconds (0: no lease): a live holder's lease grows by this much
    lease: float = 0.0
    timer: Timer | None = None


class ClaimIndex:
    """Where the claims of one session are: occupancy masks and a grid of buckets.

    * :attr:`occupied` / :attr:`exclusive`: bool ``[y, x]`` masks of the cells under
      at least one claim / at least one exclusive claim. Callers may read them
      and must not write them.
    * :meth:`overlapping`: the claims overlapping a rectangle, found through the
      buckets it touches, oldest first.

    :meth:`add` costs O(area + buckets touched); :meth:`remove` also repaints
    the freed rectangle from the claims still overlapping it.
    """

    __slots__ = ("_buckets", "_cell", "_cols", "exclusive", "occupied", "size")

    def __init__(self, size: int) -> None:
        self.size = size
        # Buckets of at least 32 cells, and at most 64 a side however large the
        # grid: a whole-grid claim then touches at most 4,096 buckets.
        self._cell = max(32, -(-size // 64))
        self._cols = -(-size // self._cell)
        # Per bucket, by claim id: the claim's bounds (x, y, x2, y2) beside the claim, so
        # a lookup tests a bucket's claims without reading their rectangles' attributes.
        self._buckets: dict[int, dict[str, tuple[int, int, int, int, _Claim]]] = {}
        self.occupied: NDArray[np.bool_] = np.zeros((size, size), dtype=bool)
        self.exclusive: NDArray[np.bool_] = np.zeros((size, size), dtype=bool)

    def _keys(self, rect: Rect) -> Iterator[int]:
        cell, cols = self._cell, self._cols
        for by in range(rect.y // cell, (rect.y2 - 1) // cell + 1):
            row = by * cols
            for bx in range(rect.x // cell, (rect.x2 - 1) // cell + 1):
                yield row + bx

    def add(self, claim: _Claim) -> None:
        r = claim.rect
        entry = (r.x, r.y, r.x2, r.y2, claim)
        for key in self._keys(r):
            self._buckets.setdefault(key, {})[claim.claim_id] = entry
        block = claim.rect.slices()
        self.occupied[block] = True
        if claim.exclusive:
            self.exclusive[block] = True

    def remove(self, claim: _Claim) -> None:
        for key in self._keys(claim.rect):
            bucket = self._buckets.get(key)
            if bucket is not None:
                bucket.pop(claim.claim_id, None)
                if not bucket:
                    del self._buckets[key]
        rect = claim.rect
        self.occupied[rect.slices()] = False
        self.exclusive[rect.slices()] = False
        # Other claims may cover part of the freed cells: paint them back.
        for other in self.overlapping(rect):
            common = other.rect.intersection(rect)
            assert common is not None
            self.occupied[common.slices()] = True
            if other.exclusive:
                self.exclusive[common.slices()] = True

    def at(self, x: int, y: int) -> Iterable[_Claim]:
        """Claims in the bucket of cell (x, y): a superset of those covering it."""
        bucket = self._buckets.get((y // self._cell) * self._cols + x // self._cell)
        return [entry[4] for entry in bucket.values()] if bucket else ()

    def overlapping(self, rect: Rect) -> list[_Claim]:
        """The claims sharing at least one cell with ``rect``, oldest first."""
        found: dict[str, _Claim] = {}
        x, y, x2, y2 = rect.x, rect.y, rect.x2, rect.y2
        buckets = self._buckets
        for key in self._keys(rect):
            bucket = buckets.get(key)
            if not bucket:
                continue
            for claim_id, (cx, cy, cx2, cy2, claim) in bucket.items():
                if cx < x2 and x < cx2 and cy < y2 and y < cy2 and claim_id not in found:
                    found[claim_id] = claim
        return sorted(found.values(), key=_by_serial)


@dataclass(slots=True, eq=False)
class _World:
    """One session's share of the regions actor."""

    info: SessionInfo
    canvas: TileCanvas
    index: ClaimIndex
    claims: dict[str, _Claim] = field(default_factory=dict)
    by_agent: dict[str, dict[str, _Claim]] = field(default_factory=dict)
    blueprint: NDArray[np.uint8] | None = None
    writers: dict[str, int] = field(default_factory=dict)
    tiles_placed: int = 0
    tiles_by_agent: dict[str, int] = field(default_factory=dict)  # sums to tiles_placed
    lost_work: int = 0
    conflicts: int = 0
    token: str | None = None  # sequential mode: the agent holding the write token
    token_at: float = 0.0  # ... and the time of its last write

    def writer(self, agent_id: str) -> int:
        """The canvas writer id of ``agent_id`` (1, 2, ... in order of first write)."""
        who = self.writers.get(agent_id)
        if who is None:
            who = self.writers[agent_id] = len(self.writers) + 1
        return who

    def put_canvas(self, snapshot: CanvasSnapshot, tiles_placed: int,
                   tiles_by_agent: Mapping[str, int]) -> int:
        """Make a checkpoint's canvas and tile counts the session's (a rollback); the
        number of cells that differed."""
        differed = self.canvas.diff(snapshot)
        self.canvas.restore(snapshot)
        self.tiles_placed = tiles_placed
        self.tiles_by_agent = dict(tiles_by_agent)
        return differed


def _share(m: MatchResult) -> float:
    """Matched share of the blueprint's tiles; an all-empty target counts only when exact."""
    if m.total:
        return m.matching / m.total
    return 1.0 if m.complete else 0.0


def _completion(s: _World) -> float:
    """Percent of the blueprint done (two decimals; 0.0 without one): a pass over the canvas
    (:func:`barnraise.sim.canvas.completion_percent`, the rule a stored log's fold uses too)."""
    return completion_percent(s.canvas.tiles, s.blueprint)


class RegionManager(SessionService):
    """The ``regions`` service. See the module docstring for what it owns and guarantees."""

    service_name = "regions"
    # Each of these builds its result from ints, strings and dicts made for it (a region
    # by its own Rect.to_dict(), never the one an event or the state holds): answered
    # without a copy (SessionService.fresh_results). Most of a build's calls are these.
    fresh_results = frozenset({
        "builder_place_tiles", "builder_place_tile", "build_test", "builder_load_shader",
        "builder_assemble_cartridge", "region_claim", "region_release", "region_renew",
        CLAIM_FOR,
        "_release"})

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.worlds: dict[str, _World] = {}
        self._serial = 0
        # The rooms, each the one owner of its state: the artifacts (serving the shader
        # and cartridge tools) and the checkpoints (serving _checkpoint, _rollback).
        self.artifacts = Artifacts(self)
        self.checkpoints = RegionCheckpoints(self)
        self.leases = RegionLeases(self)
        self.rooms = (self.artifacts, self.checkpoints, self.leases)

    def next_id(self, prefix: str) -> tuple[str, int]:
        self._serial += 1
        return f"{prefix}_{self._serial:06d}", self._serial

    def on_session(self, info: SessionInfo) -> None:
        size = info.grid_size
        self.worlds[info.session_id] = _World(info, TileCanvas(size), ClaimIndex(size))
        self.artifacts.open(info.session_id)

    def resume_serial(self, serials: Mapping[str, int]) -> None:
        self._serial = max(self._serial, serials["regions"])

    def restore_session(self, image: SessionImage, serials: Mapping[str, int]) -> None:
        """The canvas (tiles and last writers), tile counts, the conflicts counted, blueprint,
        claims with their leases (a lease already past expires at once), artifacts and
        checkpoints of
        ``image``."""
        part = image.regions
        if part is None:
            return
        s = self.worlds[image.session_id]
        s.canvas, s.writers = part.canvas, dict(part.writers)
        s.tiles_placed, s.tiles_by_agent = part.tiles_placed, dict(part.tiles_by_agent)
        s.lost_work, s.blueprint = part.lost_work, part.blueprint
        s.conflicts = part.conflicts
        self.artifacts.restore(image.session_id, part.shaders, part.cartridges)
        self.checkpoints.restore(image.session_id, part.checkpoints)
        for claim_id, c in sorted(part.claims.items(), key=lambda kv: kv[1]["serial"]):
            claim = _Claim(claim_id, c["serial"], c["agent_id"], Rect.parse(c["region"]), "",
                           c["exclusive"], c["claimed_at"], c["expires_at"],
                           float(c.get("lease") or 0.0))
            if claim.expires_at is not None:
                self.leases.arm(image.session_id, claim, max(0.0, claim.expires_at - self.now))
            s.claims[claim_id] = claim
            s.by_agent.setdefault(claim.agent_id, {})[claim_id] = claim
            s.index.add(claim)

    def world_of(self, session_id: object) -> _World:
        world = self.worlds.get(session_id) if isinstance(session_id, str) else None
        if world is None:
            raise ToolError("session_not_found", f"no session {session_id!r}")
        return world

    def view_of(self, session_id: str, *, canvas: bool = True,
                completion: bool = False) -> RegionsPart:
        """This service's part of a :class:`~barnraise.sim.views.WorldView` (LookupError: no
        session).

        ``canvas`` copies the tile layer and the blueprint; ``completion``
        compares them (a pass over the canvas). Call it in this actor's own
        context: ``barnraise.actors.world.Simulation.view`` does.
        """
        s = self.worlds.get(session_id)
        if s is None:
            raise LookupError(f"no session {session_id!r} in the regions service")
        claims = tuple(ClaimView(c.claim_id, c.agent_id, c.rect, c.exclusive, c.purpose,
                                 c.claimed_at, c.expires_at)
                       for c in sorted(s.claims.values(), key=_by_serial))
        tiles = blueprint = None
        if canvas:
            tiles = frozen_copy(s.canvas.tiles)
            blueprint = None if s.blueprint is None else frozen_copy(s.blueprint)
        shaders, cartridges = self.artifacts.views(session_id)
        progress = ProgressView(
            tiles_placed=s.tiles_placed, shaders_loaded=len(shaders),
            cartridges_assembled=len(cartridges), conflicts=s.conflicts,
            lost_work=s.lost_work, completion_percent=_completion(s) if completion else None,
            tiles_by_agent=dict(s.tiles_by_agent))
        return RegionsPart(
            claims=claims, canvas=tiles, blueprint=blueprint,
            has_blueprint=s.blueprint is not None,
            shaders=shaders, cartridges=cartridges, progress=progress,
            checkpoints=self.checkpoints.views(session_id))

    # -- claims: bookkeeping -------------------------------------------------------------

    def _claim_view(self, s: _World, claim: _Claim) -> dict[str, Any]:
        return {"claim_id": claim.claim_id, "agent_id": claim.agent_id,
                "agent_name": self.member_name(s.info.session_id, claim.agent_id),
                "bounds": claim.rect.to_dict(), "purpose": claim.purpose,
                "exclusive": claim.exclusive, "expires_at": claim.expires_at}

    def _conflicts(self, s: _World, agent_id: str, rect: Rect, exclusive: bool,
                   ignore: _Claim | None = None) -> list[_Claim]:
        """The claims that forbid ``agent_id`` holding ``rect`` (``ignore`` aside)."""
        mask = s.index.occupied if exclusive else s.index.exclusive
        if not mask[rect.slices()].any():
            return []  # the common case: nothing at all there, no claim to look at
        return [c for c in s.index.overlapping(rect)
                if c.agent_id != agent_id and c is not ignore and (exclusive or c.exclusive)]

    def _refuse(self, s: _World, agent_id: str, rect: Rect, exclusive: bool,
                conflicts: list[_Claim]) -> ToolError:
        """Count and announce a conflict; the region_conflict error to raise."""
        session_id = s.info.session_id
        boxes: dict[str, Rect] = {}  # per conflicting agent: the bounding box of its overlaps
        for claim in conflicts:
            common = claim.rect.intersection(rect)
            assert common is not None
            box = boxes.get(claim.agent_id)
            if box is not None:
                x, y = min(box.x, common.x), min(box.y, common.y)
                common = Rect(x, y, max(box.x2, common.x2) - x, max(box.y2, common.y2) - y)
            boxes[claim.agent_id] = common
        everything = next(iter(boxes.values()))
        for box in boxes.values():
            x, y = min(everything.x, box.x), min(everything.y, box.y)
            everything = Rect(x, y, max(everything.x2, box.x2) - x,
                              max(everything.y2, box.y2) - y)
        agents = [{"agent_id": a, "agent_name": self.member_name(session_id, a),
                   "overlapping_region": box.to_dict()} for a, box in boxes.items()]
        # Free means what region_query calls free: no claim there (no exclusive
        # claim, for a shared request), so claiming the suggestion succeeds.
        mask = s.index.occupied if exclusive else s.index.exclusive
        spot = find_free_placement(mask, rect.width, rect.height, near=(rect.x, rect.y))
        if spot is None:
            text = (f"No free {rect.width} x {rect.height} region is left in the grid; "
                    "wait for a release or ask for a smaller region")
        else:
            text = f"Claim region starting at ({spot.x}, {spot.y}) to avoid conflict"
        s.conflicts += 1
        self.emit_event(ConflictDetected(
            session_id=session_id, agent_id=agent_id, agents=list(boxes),
            region=rect.to_dict(), overlapping_region=everything.to_dict()))
        names = ", ".join(self.member_name(session_id, a) for a in boxes)
        return ToolError("region_conflict", f"{rect.to_dict()} overlaps claims of {names}",
                         conflicting_agents=agents, suggestion=text,
                         suggestion_region=None if spot is None else spot.to_dict())

    def _grant(self, s: _World, agent_id: str, rect: Rect, purpose: str, exclusive: bool,
               timeout: float) -> dict[str, Any]:
        """Claim ``rect`` for ``agent_id`` or raise region_conflict; the region_claim result."""
        conflicts = self._conflicts(s, agent_id, rect, exclusive)
        if conflicts:
            raise self._refuse(s, agent_id, rect, exclusive, conflicts)
        claim_id, serial = self.next_id("claim")
        expires_at = self.now + timeout if timeout > 0 else None
        claim = _Claim(claim_id, serial, agent_id, rect, purpose, exclusive, self.now, expires_at,
                       timeout if timeout > 0 else 0.0)
        if timeout > 0:
            self.leases.arm(s.info.session_id, claim, timeout)
        s.claims[claim_id] = claim
        s.by_agent.setdefault(agent_id, {})[claim_id] = claim
        s.index.add(claim)
        self.emit_event(RegionClaimed(
            session_id=s.info.session_id, agent_id=agent_id, claim_id=claim_id,
            region=rect.to_dict(), exclusive=exclusive, expires_at=expires_at))
        return ok(claim_id=claim_id, agent_id=agent_id, region=rect.to_dict(),
                  purpose=purpose, exclusive=exclusive, expires_at=expires_at, conflicts=[])

    def drop(self, s: _World, claim: _Claim, reason: str) -> None:
        """Remove ``claim`` (released, expired, owner left) and announce it."""
        del s.claims[claim.claim_id]
        self._unassign(s, claim)
        s.index.remove(claim)
        if claim.timer is not None:
            claim.timer.cancel()
            claim.timer = None
        self.emit_event(RegionReleased(
            session_id=s.info.session_id, agent_id=claim.agent_id, claim_id=claim.claim_id,
            region=claim.rect.to_dict(), reason=reason))

    def _unassign(self, s: _World, claim: _Claim) -> None:
        owner = claim.agent_id
        mine = s.by_agent.get(owner)
        if mine is not None:
            mine.pop(claim.claim_id, None)
            if not mine:
                del s.by_agent[owner]
                if s.token == owner:
                    s.token = None  # the holder's claims are all gone: so is its token

    def _hand_over(self, s: _World, claim: _Claim, to: str) -> None:
        """Give ``claim`` (same id, region and lease) to agent ``to``; announce it."""
        old = claim.agent_id
        self._unassign(s, claim)
        claim.agent_id = to
        s.by_agent.setdefault(to, {})[claim.claim_id] = claim
        session_id = s.info.session_id
        self.emit_event(RegionReleased(
            session_id=session_id, agent_id=old, claim_id=claim.claim_id,
            region=claim.rect.to_dict(), reason="transferred", transferred_to=to))
        self.emit_event(RegionClaimed(
            session_id=session_id, agent_id=to, claim_id=claim.claim_id,
            region=claim.rect.to_dict(), exclusive=claim.exclusive,
            expires_at=claim.expires_at, transferred_from=old))

    # -- claims: tools ----------------------------------------------------------------------

    def tool_region_claim(self, call: Call) -> dict[str, Any]:
        """Claim ``region``; a lease of ``timeout`` seconds (0: no expiry).

        Result: claim_id, region, exclusive, expires_at, conflicts ([]). Errors:
        out_of_bounds; region_conflict with conflicting_agents (one entry per
        agent, its overlapping_region the bounding box of its overlaps with the
        request), suggestion and suggestion_region (the nearest free placement of
        the same size, or None).
        """
        s = self.world_of(call.session_id)
        args = call.args
        rect = inside(s.info.grid_size, rect_arg(args["region"]))
        return self._grant(s, call.caller, rect, args["purpose"], args["exclusive"],
                           float(args["timeout"]))

    def claim_of(self, s: _World, session_id: str, claim_id: str) -> _Claim:
        """The claim ``claim_id`` of the session, or ``claim_not_found``."""
        claim = s.claims.get(claim_id)
        if claim is None:
            raise ToolError("claim_not_found", f"no claim {claim_id!r} in {session_id}",
                            field="claim_id")
        return claim

    def tool_region_release(self, call: Call) -> dict[str, Any]:
        """Release a claim, or hand it to ``transfer_to`` (an agent id or name).

        Only the owner or an architect may. A transfer keeps the claim's id,
        region and lease; it is refused with region_conflict when the new owner
        may not hold the region (it overlaps a third agent's claim that way).
        """
        s = self.world_of(call.session_id)
        claim_id = call.args["claim_id"]
        claim = self.claim_of(s, call.session_id, claim_id)
        role = call.member.role if call.member is not None else ""
        if claim.agent_id != call.caller and role != "architect":
            raise ToolError("not_owner", f"{claim_id} belongs to "
                            f"{self.member_name(call.session_id, claim.agent_id)}",
                            owner=claim.agent_id)
        target = call.args.get("transfer_to")
        if target is None:
            self.drop(s, claim, "released")
            return ok(claim_id=claim_id, released=True, transferred_to=None)
        to = self.member_id(call.session_id, target, "transfer_to")
        if to == claim.agent_id:
            raise invalid("transfer_to", f"{target!r} already holds {claim_id}")
        conflicts = self._conflicts(s, to, claim.rect, claim.exclusive, ignore=claim)
        if conflicts:
            raise self._refuse(s, to, claim.rect, claim.exclusive, conflicts)
        self._hand_over(s, claim, to)
        return ok(claim_id=claim_id, released=True, transferred_to=to)

    def tool_region_query(self, call: Call) -> dict[str, Any]:
        """Claims overlapping ``region``; ``is_free`` when there are none; the free part
        as disjoint rectangles whose union is exactly the unclaimed cells."""
        s = self.world_of(call.session_id)
        rect = inside(s.info.grid_size, rect_arg(call.args["region"]))
        claims = s.index.overlapping(rect)
        free = free_rectangles(s.index.occupied[rect.slices()], origin=(rect.x, rect.y))
        return ok(claims=[self._claim_view(s, c) for c in claims], is_free=not claims,
                  free_subregions=[r.to_dict() for r in free])

    # -- writing -------------------------------------------------------------------------------

    def may_write(self, s: _World, agent_id: str, rect: Rect) -> None:
        """Raise write_refused unless the session's mode lets ``agent_id`` write ``rect``."""
        mode = s.info.coordination_mode
        if mode == "coordinated":
            # A claim that contains rect contains its first cell, so it is in that
            # cell's bucket: the common case needs no search and no sort.
            for claim in s.index.at(rect.x, rect.y):
                if claim.agent_id == agent_id and claim.rect.contains(rect):
                    return
            own = [c for c in s.index.overlapping(rect) if c.agent_id == agent_id]
            covered = np.zeros((rect.height, rect.width), dtype=bool)
            for claim in own:
                common = claim.rect.intersection(rect)
                assert common is not None
                covered[common.y - rect.y:common.y2 - rect.y,
                        common.x - rect.x:common.x2 - rect.x] = True
            if not bool(covered.all()):
                missing = int(covered.size - np.count_nonzero(covered))
                raise ToolError("write_refused", f"region {rect.to_dict()} is not inside your "
                                f"claims ({missing} cells outside); claim it first",
                                region=rect.to_dict(), cells_outside=missing)
        elif mode == "sequential":
            holder = s.token
            idle = self.now - s.token_at
            if holder is not None and holder != agent_id and idle < SEQUENTIAL_IDLE:
                name = self.member_name(s.info.session_id, holder)
                raise ToolError("write_refused", f"{name} holds the write token in this "
                                "sequential session", holder=holder, holder_name=name,
                                region=rect.to_dict(), retry_after=SEQUENTIAL_IDLE - idle)

    def wrote(self, s: _World, agent_id: str) -> None:
        if s.info.coordination_mode == "sequential":
            s.token, s.token_at = agent_id, self.now

    def _write(self, s: _World, agent_id: str, rect: Rect, values: Tile | bytes,
               ) -> dict[str, Any]:
        self.may_write(s, agent_id, rect)
        # rect is inside the grid and values are valid codes (_inside, _tile, _tile_bytes)
        placed, lost = s.canvas.place(rect, values if type(values) is bytes else int(values),
                                      s.writer(agent_id))
        self.wrote(s, agent_id)
        s.tiles_placed += placed
        if placed:
            s.tiles_by_agent[agent_id] = s.tiles_by_agent.get(agent_id, 0) + placed
        s.lost_work += lost
        # ok(), written out: every row of a build is answered from here
        return {"success": True, "tiles_placed": placed, "lost_work": lost,
                "region": rect.to_dict()}

    def tool_builder_place_tile(self, call: Call) -> dict[str, Any]:
        """Place one tile. Result: tiles_placed (0 for ``empty``), lost_work, region."""
        s = self.world_of(call.session_id)
        args = call.args
        tile = tile_arg(args["tile_type"], "tile_type")
        size = s.info.grid_size
        for name in ("x", "y"):
            if args[name] >= size:
                raise ToolError("out_of_bounds", f"{name} {args[name]} is not inside the "
                                f"{size} x {size} grid", field=name, grid_size=size)
        rect = Rect(args["x"], args["y"], 1, 1)
        return self._write(s, call.caller, rect, tile)

    def tool_builder_place_tiles(self, call: Call) -> dict[str, Any]:
        """Write ``tiles`` (height x width rows, or one tile type to fill) into ``region``."""
        s = self.world_of(call.session_id)
        rect = inside(s.info.grid_size, rect_arg(call.args["region"]))
        tiles = call.args["tiles"]
        values: Tile | bytes
        if isinstance(tiles, (str, int)):
            values = tile_arg(tiles, "tiles")
        else:
            values = tile_bytes(tiles, "tiles", (rect.height, rect.width))
        return self._write(s, call.caller, rect, values)

    # -- blueprint and tests ------------------------------------------------------------------

    def _set_blueprint(self, s: _World, blueprint: object) -> dict[str, Any]:
        size = s.info.grid_size
        s.blueprint = tile_rows(blueprint, "blueprint", (size, size))
        return ok(cells=size * size, nonempty=int(np.count_nonzero(s.blueprint)))

    def tool_blueprint_set(self, call: Call) -> dict[str, Any]:
        """Set the target: exactly grid_size rows of grid_size tile types."""
        return self._set_blueprint(self.world_of(call.session_id), call.args["blueprint"])

    def tool_build_test(self, call: Call) -> dict[str, Any]:
        """Compare ``region`` with the blueprint.

        ``passed``: every cell equals the blueprint (extra tiles on empty target
        cells are defects). ``score``: 10 x matching / total, where total is the
        target's non-empty cells (a region whose target is empty scores 10 if
        passed, else 0). ``defects``: the first ``max_defects`` in row-major order.
        """
        s = self.world_of(call.session_id)
        rect = inside(s.info.grid_size, rect_arg(call.args["region"]))
        if s.blueprint is None:
            raise ToolError("no_blueprint", f"session {call.session_id} has no blueprint; "
                            "set one with blueprint_set")
        # The blueprint was checked when it was set and rect by _inside: compare, not match.
        m = s.canvas.compare(rect, s.blueprint[rect.slices()], call.args["max_defects"])
        defects = [{"x": d.x, "y": d.y, "expected": _TILE_NAMES[int(d.expected)],
                    "actual": _TILE_NAMES[int(d.actual)]} for d in m.defects]
        return ok(region=rect.to_dict(), passed=m.complete, score=round(10 * _share(m), 2),
                  matching=m.matching, total=m.total, defects=defects,
                  defect_count=m.defect_count)

    # -- internal operations --------------------------------------------------------------------

    def op_state(self, content: Mapping[str, Any]) -> dict[str, Any]:
        """Claims (oldest first, with claimed_at), progress and the contention counters.

        ``progress: false`` leaves out completion_percent, a pass over the canvas.
        A page of the claims (``session_get_state``, a join's state): ``offset`` and
        ``limit`` choose it, cut further to fit one reply (``fit_prefix``), with
        ``claims_total`` their full number; ``claims_of`` (agent ids) adds ``claimed_by``,
        how many claims each of them holds. Without ``limit``, every claim.
        """
        s = self.world_of(content.get("session_id"))
        ordered = sorted(s.claims.values(), key=_by_serial)
        limit = content.get("limit")
        if limit is not None:
            offset = int(content.get("offset", 0))
            ordered = ordered[offset:offset + int(limit)]
        claims = [{**self._claim_view(s, c), "claimed_at": c.claimed_at} for c in ordered]
        extra: dict[str, Any] = {}
        if limit is not None:
            del claims[fit_prefix(claims, self.dispatcher.max_content_bytes - REPLY_MARGIN):]
            extra["claims_total"] = len(s.claims)
        if "claims_of" in content:
            extra["claimed_by"] = {a: len(s.by_agent.get(a, ())) for a in content["claims_of"]}
        made = self.artifacts.of(s.info.session_id)
        progress: dict[str, Any] = {
            "tiles_placed": s.tiles_placed, "shaders_loaded": len(made.shaders),
            "cartridges_assembled": len(made.cartridges)}
        if content.get("progress", True):
            progress["completion_percent"] = _completion(s)
        return ok(claims=claims, progress=progress, conflicts=s.conflicts,
                  lost_work=s.lost_work, **extra)

    def op_release_all(self, content: Mapping[str, Any]) -> dict[str, Any]:
        """Release (or, with ``handoff_to``, hand over) every claim of ``agent_id``.

        A hand-over of all of them at once is always valid: the claims were valid
        against third parties, and the new owner's own claims never conflict.
        """
        s = self.world_of(content.get("session_id"))
        agent_id = content["agent_id"]
        handoff = content.get("handoff_to")
        released = []
        for claim in sorted(s.by_agent.get(agent_id, {}).values(), key=_by_serial):
            if handoff is None:
                self.drop(s, claim, "left")
            else:
                self._hand_over(s, claim, handoff)
            released.append(claim.claim_id)
        if s.token == agent_id:
            s.token = None
        return ok(released_regions=released, transferred_to=handoff)

    def op_auto_claim(self, content: Mapping[str, Any]) -> dict[str, Any]:
        """An exclusive ``size`` x ``size`` claim (capped at the grid) on free cells,
        nearest the origin, purpose "auto-assigned"; region_conflict if none is free."""
        s = self.world_of(content.get("session_id"))
        size = min(int(content["size"]), s.info.grid_size)
        spot = find_free_placement(s.index.occupied, size, size, near=(0, 0))
        if spot is None:
            raise ToolError("region_conflict", f"no free {size} x {size} region to assign",
                            conflicting_agents=[], suggestion_region=None,
                            suggestion="Release claims or use a smaller auto_region_size")
        return self._grant(s, content["agent_id"], spot, "auto-assigned", True, DEFAULT_LEASE)

    def op_claim_for(self, content: Mapping[str, Any]) -> dict[str, Any]:
        """An exclusive claim of ``region`` for ``agent_id`` (default lease), as region_claim."""
        s = self.world_of(content.get("session_id"))
        rect = inside(s.info.grid_size, rect_arg(content.get("region")))
        return self._grant(s, content["agent_id"], rect, str(content.get("purpose") or ""),
                           True, DEFAULT_LEASE)

    def op_release(self, content: Mapping[str, Any]) -> dict[str, Any]:
        """Release ``claim_id`` (whoever holds it); claim_not_found if it is gone."""
        s = self.world_of(content.get("session_id"))
        claim = s.claims.get(content.get("claim_id", ""))
        if claim is None:
            raise ToolError("claim_not_found", f"no claim {content.get('claim_id')!r}")
        self.drop(s, claim, "released")
        return ok(claim_id=claim.claim_id, released=True, transferred_to=None)

    def op_blueprint(self, content: Mapping[str, Any]) -> dict[str, Any]:
        """Set the blueprint, as blueprint_set."""
        return self._set_blueprint(self.world_of(content.get("session_id")),
                                   content.get("blueprint"))

    def op_claims_of(self, content: Mapping[str, Any]) -> dict[str, Any]:
        """Ids of the agents holding a claim that overlaps ``region``, oldest claim first."""
        s = self.world_of(content.get("session_id"))
        rect = inside(s.info.grid_size, rect_arg(content.get("region")))
        agents = dict.fromkeys(c.agent_id for c in s.index.overlapping(rect))
        return ok(agents=list(agents))

    def op_session_closed(self, content: Mapping[str, Any]) -> None:
        session_id = content["session_id"]
        world = self.worlds.pop(session_id, None)
        if world is not None:
            for claim in world.claims.values():
                if claim.timer is not None:
                    claim.timer.cancel()
        self.artifacts.close(session_id)
        self.checkpoints.close(session_id)
        # What the coordinator's own op_session_closed drops: the replicated entries.
        self.sessions.pop(session_id, None)
        self.members.pop(session_id, None)

    def op_member_left(self, content: Mapping[str, Any]) -> None:
        super().op_member_left(content)
        world = self.worlds.get(content["session_id"])
        if world is not None and world.token == content["agent_id"]:
            world.token = None
