"""The regions service's state, folded from a stored log: its share of every reader's fold.

The regions service (:mod:`barnraise.actors.regions`) owns the canvas, the claims, the artifacts,
the
blueprint and what each checkpoint keeps of them. What it held, the log says:

* **the canvas** and its counts: every tile write (:data:`WRITES`) whose answer says it
  succeeded, applied when the service took it (each write paired with its answer by the
  rules of :mod:`barnraise.sim.log`); a checkpoint of the tiles
  (:data:`barnraise.actors.service.CHECKPOINT`
  with ``tiles`` in its ``include``) keeps a copy and a rollback to it
  (:data:`barnraise.actors.service.ROLLBACK`) puts it back, with ``tiles_placed`` and
  ``tiles_by_agent``, as the service does;
* **the blueprint**: the coordinator's :data:`barnraise.actors.regions.BLUEPRINT`, or the
  ``blueprint_set`` tool;
* **claims**: ``region_claimed``, ``region_renewed`` (a lease's new end and term) and
  ``region_released``; a claim the task queue made for a
  task (:data:`barnraise.actors.regions.CLAIM_FOR` with ``purpose`` ``"task <id>"``) belongs to that
  task's acceptance; refusals are ``conflict_detected``;
* **shaders and cartridges**: the calls that made them, paired with their answers.

The readers in :mod:`barnraise.actors.stored` drive these folds: :class:`RegionsFold` for a realtime
resume (:class:`RegionsImage`, the part ``RegionManager.restore_session`` takes),
:func:`world_letter` for the world at a time (:mod:`barnraise.actors.stored.rebuild`),
:class:`Figures` and :func:`figures_letter` for the chart's figures
(:mod:`barnraise.actors.stored.index`).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Container
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

import msgspec
import numpy as np
from numpy.typing import NDArray

from barnraise.actors.regions import BLUEPRINT, CLAIM_FOR
from barnraise.actors.service import CHECKPOINT, OP_PREFIX, ROLLBACK
from barnraise.sim.canvas import TileCanvas, parse_tile
from barnraise.sim.geometry import Rect
from barnraise.sim.tools import SERVICES
from barnraise.sim.trace import TraceRecord

if TYPE_CHECKING:
    from barnraise.actors.stored.image import SessionImage, WorldSession

__all__ = ["ANSWERS", "EVENTS", "WORLD_EVENTS", "WRITES", "Figures", "Placed", "RegionsFold",
           "RegionsImage", "Timeline", "blueprint_of", "codes", "figures_letter",
           "is_write", "matches", "may_concern_figures", "placed_of", "rows", "serial_of",
           "world_event", "world_letter", "world_session"]

#: The tools that write tiles.
WRITES: Final = frozenset({"builder_place_tile", "builder_place_tiles"})
#: The tools whose answers regions' fold reads.
ANSWERS: Final = frozenset({*WRITES, "builder_load_shader", "builder_assemble_cartridge"})
#: The event types regions' fold reads (``task_accepted``: which task a claim went to).
EVENTS: Final = frozenset({"region_claimed", "region_renewed", "region_released",
                           "conflict_detected",
                           "task_accepted"})
_RECT_KEYS: Final = frozenset({"x", "y", "width", "height"})
#: The tools that make something over a region, and the key their answer names it by.
_MADE_OVER_A_REGION: Final = {"builder_place_tiles": "tiles_placed",
                              "builder_load_shader": "shader_id",
                              "builder_assemble_cartridge": "cartridge_id"}
_DIGITS: Final = re.compile(r"[0-9]+")
#: In the canonical JSON of a request that names an operation.
_ANY_OP: Final = b'"op":"' + OP_PREFIX.encode()


# -- a realtime resume ---------------------------------------------------------------------


@dataclass
class RegionsImage:
    """One session's share of the regions service."""

    canvas: TileCanvas
    writers: dict[str, int] = field(default_factory=dict)
    tiles_placed: int = 0
    tiles_by_agent: dict[str, int] = field(default_factory=dict)
    lost_work: int = 0
    #: Claims refused for a conflict (``conflict_detected`` events).
    conflicts: int = 0
    blueprint: NDArray[np.uint8] | None = None
    #: claim id -> agent_id, region, exclusive, claimed_at, expires_at, serial
    claims: dict[str, dict[str, Any]] = field(default_factory=dict)
    shaders: dict[str, dict[str, Any]] = field(default_factory=dict)
    cartridges: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: checkpoint id -> what regions keeps of it: the canvas (compressed) and its tile
    #: count, ``tiles_placed`` and ``tiles_by_agent``, the shaders and the cartridges (None
    #: for a part the checkpoint's ``include`` left out)
    checkpoints: dict[str, dict[str, Any]] = field(default_factory=dict)

    def writer(self, agent_id: str) -> int:
        who = self.writers.get(agent_id)
        if who is None:
            who = self.writers[agent_id] = len(self.writers) + 1
        return who

    def kept(self, checkpoint_id: str) -> tuple[list[str], dict[str, int], int]:
        """What checkpoint ``checkpoint_id`` kept here: the parts (of ``tiles``, ``shaders``,
        ``cartridges``), how many of each, and the size of the kept canvas in bytes."""
        kept = self.checkpoints.get(checkpoint_id, {})
        parts = [part for part, key in (("tiles", "canvas"), ("shaders", "shaders"),
                                        ("cartridges", "cartridges"))
                 if kept.get(key) is not None]
        contents = {"tiles": kept.get("tiles", 0), "shaders": len(kept.get("shaders") or {}),
                    "cartridges": len(kept.get("cartridges") or {})}
        return parts, contents, len(kept.get("canvas") or b"")


class RegionsFold:
    """Regions' share of a realtime resume's fold (:mod:`barnraise.actors.stored.resume`): each
    session's :class:`RegionsImage` in ``sessions``, the largest serial drawn in
    ``serials["regions"]``."""

    def __init__(self, sessions: dict[str, SessionImage], serials: dict[str, int]) -> None:
        self.sessions = sessions
        self.serials = serials
        #: the task queue's last claim request for a task_accept (agent, region, task id)
        self.claiming: tuple[str, str, str] | None = None
        #: claim id -> the task it was made for, by task_accept
        self.task_claims: dict[str, str] = {}
        #: Claims whose task_accepted the log holds (the service kept them, whatever
        #: became of the task later: a rollback leaves its claim in place).
        self.accepted_claims: set[str] = set()
        #: claim id -> its lease term, between a hand-over's release and its new grant
        self.handed: dict[str, float] = {}

    def session(self, sid: Any) -> SessionImage | None:
        return self.sessions.get(sid) if isinstance(sid, str) else None

    def on_session(self, s: SessionImage) -> None:
        """A session made (the coordinator's :data:`~barnraise.actors.service.SESSION`)."""
        s.regions = RegionsImage(TileCanvas(int(s.info["grid_size"])))

    def op(self, op: Any, content: dict[str, Any]) -> None:
        """An operation another service asked of regions."""
        if op in (CHECKPOINT, ROLLBACK):
            self.checkpoint(op, content)
        elif op == CLAIM_FOR and str(content.get("purpose", "")).startswith("task "):
            self.claiming = (str(content.get("agent_id")), _key(content.get("region")),
                             str(content["purpose"]).removeprefix("task "))
        elif op == BLUEPRINT:
            s = self.session(content.get("session_id"))
            if s is not None and s.regions is not None and content.get("blueprint") is not None:
                s.regions.blueprint = rows(content["blueprint"])

    def checkpoint(self, op: str, content: dict[str, Any]) -> None:
        """A checkpoint kept or rolled back to: regions' part of it."""
        s = self.session(content.get("session_id"))
        cid = str(content.get("checkpoint_id"))
        if s is None or s.regions is None:
            return
        g = s.regions
        if op == CHECKPOINT:
            include = set(content.get("include") or ())
            tiles = "tiles" in include
            g.checkpoints[cid] = {
                "canvas": g.canvas.compress() if tiles else None,
                "tiles": g.canvas.count_nonempty() if tiles else 0,
                "tiles_placed": g.tiles_placed,
                "shaders": dict(g.shaders) if "shaders" in include else None,
                "cartridges": dict(g.cartridges) if "cartridges" in include else None,
                "tiles_by_agent": dict(g.tiles_by_agent)}
        elif cid in g.checkpoints:
            kept = g.checkpoints[cid]
            if kept["canvas"] is not None:
                g.canvas.restore(TileCanvas.decompress(kept["canvas"]).snapshot())
                g.tiles_placed = kept["tiles_placed"]
                g.tiles_by_agent = dict(kept["tiles_by_agent"])
            if kept["shaders"] is not None:
                g.shaders = dict(kept["shaders"])
            if kept["cartridges"] is not None:
                g.cartridges = dict(kept["cartridges"])

    def placed(self, agent: str, call: dict[str, Any], answer: Any) -> bool:
        """:meth:`answered` for the answer most of a log's answers are, a successful
        ``builder_place_tiles`` whose region is the call's: the write applied. False
        (nothing done) for any other answer, which :meth:`answered` then takes."""
        if call.get("tool") != "builder_place_tiles" or not isinstance(answer, dict) \
                or not answer.get("success") or "tiles_placed" not in answer:
            return False
        args = call.get("args") or {}
        region = args.get("region")
        # What matches() checks, when the call's region has exactly a region's four keys.
        if type(region) is not dict or region.keys() != _RECT_KEYS \
                or answer.get("region") != region:
            return False
        s = self.session(args.get("session_id"))
        if s is None or s.regions is None:
            return True
        # A builder's row (nearly every write): its Rect made here, as write() would
        # (Rect.parse of four ints), and its codes taken as bytes by codes().
        x, y, width, tiles = region["x"], region["y"], region["width"], args.get("tiles")
        if region["height"] == 1 and type(region["height"]) is int and type(x) is int \
                and type(y) is int and type(width) is int and type(tiles) is list:
            try:
                rect = Rect(x, y, width, 1)
            except (TypeError, ValueError):
                pass  # a Rect the constructor refuses: write() says why
            else:
                self.put(s.regions, agent, rect, codes(tiles, rect))
                return True
        self.write(s.regions, agent, "builder_place_tiles", args)
        return True

    def answered(self, r: TraceRecord, tool: str, args: dict[str, Any],
                 answer: dict[str, Any]) -> None:
        """A successful answer of regions to ``r.recipient``'s call of ``tool`` (one of
        :data:`ANSWERS`), which :func:`matches` the call."""
        s = self.session(args.get("session_id"))
        if s is None or s.regions is None:
            return
        if tool in WRITES:
            self.write(s.regions, r.recipient, tool, args)
        elif tool == "builder_load_shader":
            sid_ = str(answer["shader_id"])
            self.serials["regions"] = max(self.serials["regions"], serial_of(sid_))
            s.regions.shaders.setdefault(sid_, {
                "shader_id": sid_, "name": args.get("shader_name"),
                "region": dict(answer["region"]), "agent_id": r.recipient,
                "created_at": r.t})
        elif tool == "builder_assemble_cartridge":
            cid = str(answer["cartridge_id"])
            self.serials["regions"] = max(self.serials["regions"], serial_of(cid))
            s.regions.cartridges[cid] = {
                "cartridge_id": cid, "name": args.get("name"), "region": dict(answer["region"]),
                "agent_id": r.recipient, "created_at": r.t, "tiles": answer.get("tiles", 0)}

    def write(self, g: RegionsImage, agent: str, tool: str, args: dict[str, Any]) -> None:
        if tool == "builder_place_tile":
            rect = Rect(int(args["x"]), int(args["y"]), 1, 1)
            values: Any = int(parse_tile(args["tile_type"]))
        else:
            rect = Rect.parse(args["region"], "region")
            tiles = args["tiles"]
            values = int(parse_tile(tiles)) if isinstance(tiles, (int, str)) \
                else codes(tiles, rect)
        self.put(g, agent, rect, values)

    @staticmethod
    def put(g: RegionsImage, agent: str, rect: Rect, values: bytes | NDArray[np.uint8] | int
            ) -> None:
        """A write the service accepted, applied to ``g``'s canvas and counted."""
        done = g.canvas.put(rect, values, g.writers.get(agent) or g.writer(agent))
        placed = done.placed
        if placed:
            g.tiles_placed += placed
            g.tiles_by_agent[agent] = g.tiles_by_agent.get(agent, 0) + placed
        g.lost_work += done.lost_work

    def event(self, s: SessionImage, r: TraceRecord, body: dict[str, Any]) -> None:
        """An event of :data:`EVENTS` in session ``s``."""
        kind = r.type
        if kind == "task_accepted":
            # (of a task the fold knows: one a rollback took back was accepted by no one)
            if body.get("claim_id") is not None and str(body.get("task_id")) in s.tasks:
                self.accepted_claims.add(str(body["claim_id"]))
            return
        if s.regions is None:
            return
        if kind == "conflict_detected":
            s.regions.conflicts += 1
        elif kind == "region_claimed":
            cid = str(body["claim_id"])
            serial = serial_of(cid)
            self.serials["regions"] = max(self.serials["regions"], serial)
            s.regions.claims[cid] = {
                "agent_id": str(body["agent_id"]), "region": dict(body["region"]),
                "exclusive": bool(body.get("exclusive", True)), "claimed_at": r.t,
                "expires_at": body.get("expires_at"), "serial": serial,
                "lease": self.handed.pop(cid, 0.0) if "transferred_from" in body
                else _term(body.get("expires_at"), r.t)}
            if self.claiming is not None and self.claiming[:2] == (
                    str(body["agent_id"]), _key(body["region"])):
                self.task_claims[cid] = self.claiming[2]
            self.claiming = None
        elif kind == "region_renewed":
            claim = s.regions.claims.get(str(body.get("claim_id")))
            if claim is not None:
                claim["expires_at"] = body.get("expires_at")
                claim["lease"] = float(body.get("lease") or 0.0)
        elif kind == "region_released":
            gone = s.regions.claims.pop(str(body.get("claim_id")), None)
            if gone is not None and "transferred_to" in body:
                self.handed[str(body["claim_id"])] = gone["lease"]  # the claim goes on

    def finish(self) -> None:
        """A claim task_accept made whose acceptance the log does not hold: the task is
        still pending (its assignee accepts it again, claiming again), so the claim is no
        one's."""
        for s in self.sessions.values():
            if s.regions is not None:
                for cid in self.task_claims:
                    if cid in s.regions.claims and cid not in self.accepted_claims:
                        del s.regions.claims[cid]


def _term(expires_at: Any, at: float) -> float:
    """A claim's lease term from its grant: it ends ``term`` seconds after ``at`` (0: no
    lease). A claim handed over keeps its term (the fold carries it across); a renewal
    event carries the term itself."""
    return 0.0 if expires_at is None else max(0.0, float(expires_at) - at)


def matches(tool: Any, args: dict[str, Any], answer: dict[str, Any]) -> bool:
    """Does a successful ``answer`` fit a call of ``tool`` (one of :data:`ANSWERS`) with
    ``args``? (Each answer the fold uses names what its call was about.)"""
    if tool == "builder_place_tile":
        return answer.get("region") == {"x": args.get("x"), "y": args.get("y"),
                                        "width": 1, "height": 1}
    if tool in _MADE_OVER_A_REGION:
        # The same region is not enough: under a fault plan a shader's answer can meet a
        # cartridge's call over the same block. What the answer says it made must fit too.
        region = args.get("region")
        return isinstance(region, dict) and _MADE_OVER_A_REGION[tool] in answer and \
            answer.get("region") == {k: region.get(k) for k in ("x", "y", "width", "height")}
    return True


def _key(region: Any) -> str:
    return repr(sorted(region.items())) if isinstance(region, dict) else repr(region)


def serial_of(identifier: str) -> int:
    """The serial at the end of an id such as ``claim_000012`` (0 when there is none)."""
    tail = identifier.rsplit("_", 1)[-1]
    # ASCII digits only: str.isdigit() takes "²", which int() refuses (a log's ids are
    # data, and a crafted one must not make the fold a traceback).
    return int(tail) if _DIGITS.fullmatch(tail) else 0


def codes(tiles: Any, rect: Rect) -> bytes | NDArray[np.uint8]:
    """The tile rows of a write over ``rect`` as the canvas takes them: their codes as
    bytes, row-major, when they are ``rect.height`` lists of ``rect.width`` codes (a
    builder's rows, nearly every write), else as :func:`rows` makes them. The canvas
    stores the same either way, without a numpy array made for each write."""
    if type(tiles) is list and len(tiles) == rect.height and tiles \
            and type(tiles[0]) is list and len(tiles[0]) == rect.width:
        joined = _joined(tiles)
        if joined is not None:
            return joined
    return rows(tiles)


def _joined(tiles: Any) -> bytes | None:
    """Rows of equal length of codes as their bytes, row-major; None for anything else
    (names, numbers bytes() does not take, ragged or empty rows, not lists)."""
    if type(tiles) is list and tiles and all(type(row) is list for row in tiles):
        width = len(tiles[0])
        if width and all(len(row) == width for row in tiles):
            try:  # bytes() takes ints in 0..255 only (bools as 0 and 1, as numpy does)
                return bytes(tiles[0]) if len(tiles) == 1 else b"".join(map(bytes, tiles))
            except (TypeError, ValueError):
                return None
    return None


def rows(tiles: Any) -> NDArray[np.uint8]:
    """Tile rows as codes. Only writes the service accepted are folded, so every value is
    a valid code or tile name: numbers convert at once, names are looked up.

    Rows of equal length of codes (a blueprint, 840 rows of 840) are joined as bytes and
    viewed as an array: numpy's conversion of the nested lists costs four times that."""
    joined = _joined(tiles)
    if joined is not None:
        return np.frombuffer(bytearray(joined), dtype=np.uint8).reshape(len(tiles), -1)
    try:
        return np.array(tiles, dtype=np.uint8)
    except (ValueError, TypeError, OverflowError):
        return np.array([[int(parse_tile(v)) for v in row] for row in tiles], dtype=np.uint8)


# -- the world at a time -------------------------------------------------------------------

#: The event types regions' part of the world reads.
WORLD_EVENTS: Final = frozenset({"region_claimed", "region_renewed", "region_released"})


def world_session(s: WorldSession, info: dict[str, Any]) -> None:
    """A session made (the coordinator's :data:`~barnraise.actors.service.SESSION`): its empty
    canvas
    (unless a snapshot gave one)."""
    grid = int(info.get("grid_size", 0))
    if s.canvas is None:
        s.canvas = np.zeros((grid, grid), dtype=np.uint8)


def world_letter(sessions: dict[str, WorldSession], r: TraceRecord, content: dict[str, Any],
                 placed: Container[int], notes: list[str]) -> None:
    """A letter regions took (its decoded ``content``): a checkpoint of the tiles or a
    rollback to one, or a tile write (applied when ``placed``, the seqs of the writes that
    succeeded, holds it)."""
    op, tool = content.get("op"), content.get("tool")
    if op == CHECKPOINT:
        s = _world(sessions, content.get("session_id"))
        if s is not None and s.canvas is not None:
            tiles = "tiles" in (content.get("include") or ())
            s.checkpoints[str(content.get("checkpoint_id"))] = \
                s.canvas.copy() if tiles else None
    elif op == ROLLBACK:
        s = _world(sessions, content.get("session_id"))
        cid = str(content.get("checkpoint_id"))
        if s is not None and cid in s.unknown:
            notes.append(f"a rollback to {cid} at t={r.t:g}: the checkpoint was "
                         "taken before the snapshot this fold started from; the "
                         "canvas is shown as it was before the rollback")
        elif s is not None and s.checkpoints.get(cid) is not None:
            s.canvas = s.checkpoints[cid].copy()  # type: ignore[union-attr]
    elif tool in WRITES and r.seq in placed:
        args = content.get("args") or {}
        s = _world(sessions, args.get("session_id"))
        if s is None or s.canvas is None:
            return
        if tool == "builder_place_tile":
            s.canvas[args["y"], args["x"]] = int(parse_tile(args["tile_type"]))
        else:
            box = args["region"]
            y, x, h, w = box["y"], box["x"], box["height"], box["width"]
            tiles = args["tiles"]
            if isinstance(tiles, (int, str)):
                s.canvas[y:y + h, x:x + w] = int(parse_tile(tiles))
            else:
                s.canvas[y:y + h, x:x + w] = _world_rows(tiles)


def world_event(s: WorldSession, kind: str, body: dict[str, Any]) -> None:
    """An event of :data:`WORLD_EVENTS` in session ``s``: the claims."""
    if kind == "region_claimed":
        s.claims[str(body["claim_id"])] = (str(body["agent_id"]), dict(body["region"]),
                                           body.get("expires_at"))
    elif kind == "region_renewed":
        held = s.claims.get(str(body.get("claim_id")))
        if held is not None:
            s.claims[str(body["claim_id"])] = (held[0], held[1], body.get("expires_at"))
    elif kind == "region_released":
        s.claims.pop(str(body.get("claim_id")), None)


def _world(sessions: dict[str, WorldSession], sid: Any) -> WorldSession | None:
    return sessions.get(sid) if isinstance(sid, str) else None


def _world_rows(tiles: list[list[Any]]) -> NDArray[np.uint8]:
    """Tile rows as codes (the service checked them: numbers, or names to look up)."""
    if all(type(v) is int for row in tiles for v in row):
        return np.array(tiles, dtype=np.uint8)
    return np.array([[int(parse_tile(v)) for v in row] for row in tiles], dtype=np.uint8)


class _Tool(msgspec.Struct):
    """What a write's pairing reads of a call: its tool (the arguments are skipped)."""

    tool: Any = None


class Placed(msgspec.Struct):
    """What a write's pairing reads of regions' answer."""

    success: Any = False
    tiles_placed: int = 0
    lost_work: int = 0


_tool: Final = msgspec.json.Decoder(_Tool).decode
_placed: Final = msgspec.json.Decoder(Placed).decode


def is_write(call: bytes) -> bool:
    """Is ``call`` (a call's content as stored) a tile write (:data:`WRITES`)?"""
    try:
        return _tool(call).tool in WRITES
    except msgspec.DecodeError:  # not an object: no tool call the service took
        return False


def placed_of(content: bytes) -> Placed | None:
    """What an answer of regions (its content as stored) says a write did; None for one
    that is not an object, or whose counts are not numbers."""
    try:
        return _placed(content)
    except msgspec.DecodeError:
        return None


# -- the chart's figures -------------------------------------------------------------------


@dataclass
class Timeline:
    """A figure's value after each record that changed it: (seq, value) in order."""

    seqs: list[int] = field(default_factory=list)
    values: list[int] = field(default_factory=list)

    def set(self, seq: int, value: int) -> None:
        self.seqs.append(seq)
        self.values.append(value)

    def at(self, upto: int) -> int:
        """The value after records ``0 .. upto - 1`` (0 before any change)."""
        i = bisect.bisect_left(self.seqs, upto)
        return self.values[i - 1] if i else 0


@dataclass
class Figures:
    """One session's figures of regions as a pass over the log goes, and their timelines:
    ``tiles_placed`` and ``lost_work`` from the answers regions gave each tile write (a
    rollback of the tiles restores ``tiles_placed`` as the service does), ``conflicts``
    (``conflict_detected`` events), and every blueprint set on regions, by its
    :data:`~barnraise.actors.regions.BLUEPRINT` operation or the ``blueprint_set`` tool."""

    tiles_placed: int = 0
    lost_work: int = 0
    conflicts: int = 0
    #: Tiles each writer placed (summing to tiles_placed), as regions counts them.
    by_agent: dict[str, int] = field(default_factory=dict)
    #: id -> (tiles_placed, by_agent) when a checkpoint of the tiles was taken.
    checkpoints: dict[str, tuple[int, dict[str, int]]] = field(default_factory=dict)
    placed: Timeline = field(default_factory=Timeline)
    lost: Timeline = field(default_factory=Timeline)
    conflict: Timeline = field(default_factory=Timeline)
    #: (seq, blueprint) of every blueprint set on regions, in order.
    blueprints: list[tuple[int, NDArray[np.uint8]]] = field(default_factory=list)

    def write(self, seq: int, placed: int, lost: int, writer: str) -> None:
        """A tile write by ``writer`` at record ``seq`` whose answer counted ``placed`` and
        ``lost``."""
        self.tiles_placed += placed
        self.lost_work += lost
        if placed:
            self.by_agent[writer] = self.by_agent.get(writer, 0) + placed
        self.placed.set(seq, self.tiles_placed)
        self.lost.set(seq, self.lost_work)

    def conflicted(self, seq: int) -> None:
        """A ``conflict_detected`` event at record ``seq``."""
        self.conflicts += 1
        self.conflict.set(seq, self.conflicts)


def may_concern_figures(content: bytes) -> bool:
    """Might a letter to regions that is not a write (its content as stored) be one
    :func:`figures_letter` reads? (Most are not: they are passed over undecoded.)"""
    return _ANY_OP in content or b"blueprint" in content


def figures_letter(figures: dict[str, Figures], r: TraceRecord, content: dict[str, Any]
                   ) -> None:
    """A letter regions took (its decoded ``content``), not a write: a blueprint set, or a
    service's checkpoint of the tiles or rollback to one."""
    op, tool = content.get("op"), content.get("tool")
    if op == BLUEPRINT or tool == "blueprint_set":
        where = content if op == BLUEPRINT else (content.get("args") or {})
        sid, plan = where.get("session_id"), blueprint_of(where.get("blueprint"))
        if isinstance(sid, str) and plan is not None:
            figures.setdefault(sid, Figures()).blueprints.append((r.seq, plan))
    elif op in (CHECKPOINT, ROLLBACK) and r.sender in SERVICES:
        sid = content.get("session_id")
        if not isinstance(sid, str):
            return
        f = figures.setdefault(sid, Figures())
        cid = str(content.get("checkpoint_id"))
        if op == CHECKPOINT:
            # Only a checkpoint of the tiles keeps (and a rollback to it puts back) the
            # count, as regions does; one of the session state alone leaves it be.
            if "tiles" in (content.get("include") or ()):
                f.checkpoints[cid] = (f.tiles_placed, dict(f.by_agent))
        elif cid in f.checkpoints:
            f.tiles_placed, kept = f.checkpoints[cid]
            f.by_agent = dict(kept)
            f.placed.set(r.seq, f.tiles_placed)


def blueprint_of(value: Any) -> NDArray[np.uint8] | None:
    """Rows of tile types as codes; None for anything the service would refuse."""
    if not isinstance(value, list) or not value or not all(
            isinstance(row, list) and len(row) == len(value) for row in value):
        return None
    try:
        if all(type(v) is int for row in value for v in row):
            arr = np.array(value, dtype=np.int64)
            if int(arr.min()) < 0 or int(arr.max()) > 255:
                return None
            return arr.astype(np.uint8)
        return np.array([[int(parse_tile(v)) for v in row] for row in value], dtype=np.uint8)
    except (ValueError, TypeError, KeyError):
        return None

