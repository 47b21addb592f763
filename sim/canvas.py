"""The shared tile canvas: numpy layers, bulk writes, snapshots, verification.

A :class:`TileCanvas` is a ``size`` x ``size`` grid with two layers, both indexed
``[row, col]`` (``[y, x]``):

- ``tiles`` (uint8): the :class:`Tile` code of each cell, ``Tile.EMPTY`` (0) when
  nothing is there;
- ``writer`` (int32): the agent index of the cell's last writer, 0 when nobody has
  written it (since creation, or as restored from a snapshot).

Every write is a rectangular slice assignment; nothing loops over cells in Python.
A small block (a builder's row, a tester's block) is written, counted and compared
on bytes, a one-row write through flat byte views of the layers: in a run each numpy
call costs 1 to 3 us, and a row write of numpy slices and reductions made about ten
of them. Large blocks stay with numpy. The canvas knows nothing about claims or
coordination modes: the regions actor decides whether a write is allowed and uses
:class:`WriteResult` to account for it.
"""

from __future__ import annotations

import numbers
import struct
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from barnraise.sim.geometry import Rect

__all__ = [
    "CanvasSnapshot",
    "Defect",
    "MatchResult",
    "Tile",
    "TileCanvas",
    "WriteResult",
    "completion_percent",
    "parse_tile",
]


class Tile(IntEnum):
    """Tile types. Codes are stable: they are stored in checkpoints."""

    EMPTY = 0
    SYSTEM = 1
    CODE = 2
    DATA = 3
    SHADER = 4
    CARTRIDGE = 5
    NETWORK = 6
    STORAGE = 7


# Lookup table over every uint8 value: validating a block is one fancy-index
# and stays correct even if future codes are not contiguous.
_VALID_CODE = np.zeros(256, dtype=bool)
_VALID_CODE[[int(t) for t in Tile]] = True
_TOP_CODE = max(int(t) for t in Tile)
_CONTIGUOUS_CODES = len(Tile) == _TOP_CODE + 1
# The Tile of each code: a lookup is a tenth of the cost of calling Tile(code).
_TILE_OF: dict[int, Tile] = {int(t): t for t in Tile}

_MAX_WRITER = int(np.iinfo(np.int32).max)
_writer_bytes = struct.Struct("=i").pack  # a writer index as the writer layer stores it

#: Cells up to which :meth:`TileCanvas.put` and :meth:`TileCanvas.compare` count on
#: bytes: a builder's row (30) or a tester's block (30 x 30) is settled by a few
#: operations on short copies, where each numpy operation on a strided block costs a
#: quarter to one microsecond. On the whole canvas numpy is three times faster than
#: copying it out.
_SMALL_BLOCK = 64 * 64


def _lost(was: bytes, own: bytes, writer: int) -> int:
    """Of cells whose writer layer held ``was`` and now holds ``own`` (``writer``'s bytes),
    how many another writer had: the lost work of a write."""
    if was == own or was.count(0) == len(was):  # all this writer's, or nobody's
        return 0
    owners = np.frombuffer(was, dtype=np.int32)
    return int(np.count_nonzero(owners) - np.count_nonzero(owners == writer))


_MAGIC = b"BRCV"
_FORMAT_VERSION = 1
_HEADER = struct.Struct("<4sBI")  # magic, format version, size


def parse_tile(value: object) -> Tile:
    """A :class:`Tile` from a Tile, an int code, or a name (case-insensitive).

    Raises ValueError naming the value for anything else (unknown names or
    codes, bools, floats).
    """
    if isinstance(value, Tile):
        return value
    if isinstance(value, str):
        member = Tile.__members__.get(value.strip().upper())
        if member is not None:
            return member
    elif isinstance(value, numbers.Integral) and not isinstance(value, bool):
        code = int(value)
        if 0 <= code <= 255 and _VALID_CODE[code]:
            return Tile(code)
    names = ", ".join(t.name.lower() for t in Tile)
    raise ValueError(f"unknown tile {value!r}: expected one of {names} or codes 0-{max(Tile)}")


def _tile_array(values: object, name: str) -> NDArray[np.uint8]:
    """A uint8 array of valid tile codes; ValueError naming ``name`` otherwise."""
    try:
        arr = np.asarray(values)
    except ValueError as exc:  # ragged nested sequences
        raise ValueError(f"{name} must be a rectangular array of tile codes: {exc}") from None
    if arr.dtype.kind not in "iu":
        raise ValueError(f"{name} must hold integer tile codes, got dtype {arr.dtype}")
    if arr.dtype != np.uint8:
        if arr.size and (int(arr.min()) < 0 or int(arr.max()) > 255):
            bad = int(arr.min()) if int(arr.min()) < 0 else int(arr.max())
            raise ValueError(f"{name} contains invalid tile code {bad}")
        arr = arr.astype(np.uint8)
    # While codes are contiguous from 0, a max() is all the check needed and
    # is much cheaper than the table lookup on a large block.
    if arr.size == 0 or (_CONTIGUOUS_CODES and int(arr.max()) <= _TOP_CODE):
        return arr
    valid = _VALID_CODE[arr]
    if not bool(valid.all()):
        raise ValueError(f"{name} contains invalid tile code {int(arr[~valid][0])}")
    return arr


def _writer_id(writer: object) -> int:
    if (
        isinstance(writer, bool)
        or not isinstance(writer, numbers.Integral)
        or not 1 <= int(writer) <= _MAX_WRITER
    ):
        raise ValueError(f"writer must be an agent index in 1..{_MAX_WRITER}, got {writer!r}")
    return int(writer)


@dataclass(frozen=True, slots=True)
class WriteResult:
    """What one write did to the canvas.

    - ``cells``: cells written (the region's area).
    - ``placed``: non-empty tiles written (writing ``EMPTY`` clears, it places nothing).
    - ``changed``: cells whose tile code differs from before.
    - ``lost_work``: cells whose previous writer was a different agent (non-zero
      and not ``writer``), whatever the old and new tiles are. An identical tile
      written over another agent's still counts: it is duplicated effort, and
      this is the contention figure free-mode experiments report.
    """

    region: Rect
    cells: int
    placed: int
    changed: int
    lost_work: int

    def __init__(self, region: Rect, cells: int, placed: int, changed: int,
                 lost_work: int) -> None:
        # Written out, as Rect's is: one is made for every write, and the generated
        # __init__ of a frozen dataclass stores each field through object.__setattr__
        # (in a run, 1% of kernel_build at grid 840 went to making these).
        _set_region(self, region)
        _set_cells(self, cells)
        _set_placed(self, placed)
        _set_changed(self, changed)
        _set_lost_work(self, lost_work)


# The slots' descriptors store a field of a frozen WriteResult (its __init__).
_set_region = WriteResult.__dict__["region"].__set__
_set_cells = WriteResult.__dict__["cells"].__set__
_set_placed = WriteResult.__dict__["placed"].__set__
_set_changed = WriteResult.__dict__["changed"].__set__
_set_lost_work = WriteResult.__dict__["lost_work"].__set__


@dataclass(frozen=True, slots=True, eq=False)
class CanvasSnapshot:
    """Read-only copies of both layers at one moment."""

    tiles: NDArray[np.uint8]
    writer: NDArray[np.int32]

    @property
    def size(self) -> int:
        return int(self.tiles.shape[0])


class Defect(NamedTuple):
    """One cell where the canvas differs from the blueprint, in canvas coordinates."""

    x: int
    y: int
    expected: Tile
    actual: Tile


@dataclass(frozen=True, slots=True)
class MatchResult:
    """A canvas checked against a blueprint.

    - ``total``: the blueprint's non-empty cells; the denominator of progress.
    - ``matching``: those of them the canvas has right. Empty blueprint cells
      never count here, so ``matching <= total``.
    - ``defect_count``: every differing cell: a missing or wrong tile on a
      non-empty blueprint cell, or an extra tile where the blueprint is empty.
    - ``defects``: the first ``limit`` of those in row-major order.
    """

    matching: int
    total: int
    defects: list[Defect]
    defect_count: int

    @property
    def fraction(self) -> float:
        """``matching / total``; 1.0 for a blueprint with no non-empty cells."""
        return self.matching / self.total if self.total else 1.0

    @property
    def complete(self) -> bool:
        """True when the checked area equals the blueprint exactly (no defects)."""
        return self.defect_count == 0


class TileCanvas:
    """A ``size`` x ``size`` tile grid with a last-writer layer. See the module docstring."""

    __slots__ = ("_cells", "_owners", "_size", "_tiles", "_writer")

    def __init__(self, size: int = 1000) -> None:
        if isinstance(size, bool) or not isinstance(size, numbers.Integral) or size < 1:
            raise ValueError(f"size must be an integer >= 1, got {size!r}")
        self._size: int = int(size)
        self._tiles: NDArray[np.uint8] = np.zeros((self._size, self._size), dtype=np.uint8)
        self._writer: NDArray[np.int32] = np.zeros((self._size, self._size), dtype=np.int32)
        # Both layers' memory as flat bytes, for writing a row without a numpy call
        # (put). The layers are only ever changed in place, never replaced.
        self._cells: memoryview = self._tiles.data.cast("B")
        self._owners: memoryview = self._writer.data.cast("B")

    def __reduce__(self) -> tuple[Any, ...]:
        # The byte views do not pickle: a copy is rebuilt from the layers.
        return _canvas_of, (self._tiles, self._writer)

    @property
    def size(self) -> int:
        return self._size

    @property
    def tiles(self) -> NDArray[np.uint8]:
        """Read-only view of the tile layer (changes as the canvas changes)."""
        view = self._tiles.view()
        view.flags.writeable = False
        return view

    @property
    def writer(self) -> NDArray[np.int32]:
        """Read-only view of the last-writer layer (changes as the canvas changes)."""
        view = self._writer.view()
        view.flags.writeable = False
        return view

    def _region(self, region: Rect | Mapping[str, Any], name: str = "region") -> Rect:
        r = Rect.parse(region, name)
        if not r.within(self._size):
            raise ValueError(
                f"{name} {r.to_dict()} is outside the {self._size} x {self._size} canvas"
            )
        return r

    def write(self, region: Rect | Mapping[str, Any], values: object, writer: int) -> WriteResult:
        """Write ``values`` into ``region`` on behalf of agent ``writer`` (>= 1).

        ``values`` is either one tile (a :class:`Tile`, code or name) that fills
        the region, or a 2-D integer array of shape ``(height, width)``. The write
        is all-or-nothing: any ValueError (naming ``region``, ``values`` or
        ``writer``) leaves the canvas untouched. Every written cell's writer
        becomes ``writer``.
        """
        r = self._region(region)
        who = _writer_id(writer)
        fill: Tile | None = None
        block_values: NDArray[np.uint8] | None = None
        # exact types first: numbers.Integral is an ABC, slow to check on every write
        if type(values) in (str, int) or (
                not isinstance(values, (list, tuple, np.ndarray))
                and isinstance(values, (str, numbers.Integral))):
            try:
                fill = parse_tile(values)
            except ValueError as exc:
                raise ValueError(f"values: {exc}") from None
        else:
            block_values = _tile_array(values, "values")
            expected = (r.height, r.width)
            if block_values.shape != expected:
                raise ValueError(
                    f"values must have shape (height, width) = {expected}, got {block_values.shape}"
                )
        if fill is not None:
            return self.put(r, int(fill), who)
        assert block_values is not None
        return self.put(r, block_values, who)

    def put(self, region: Rect, values: NDArray[np.uint8] | bytes | int,
            writer: int) -> WriteResult:
        """:meth:`write` for a caller that has checked everything already.

        ``region`` is a Rect inside the canvas, ``values`` a valid tile code (a
        fill), a uint8 array of valid codes shaped ``(height, width)`` or those
        codes as bytes, row-major, and ``writer`` an agent index >= 1. Nothing is
        checked again: the region manager validates a tool call's arguments once
        and writes with this.
        """
        area = region.width * region.height
        if area <= _SMALL_BLOCK:
            if isinstance(values, bytes):
                return self._put_small(region, values, writer)
            if isinstance(values, np.ndarray):  # (as a slice assignment would cast it)
                return self._put_small(region, values.astype(np.uint8, copy=False).tobytes(),
                                       writer)
            return self._put_small(region, bytes((int(values),)) * area, writer)
        rows, cols = region.slices()
        tiles = self._tiles[rows, cols]
        writers = self._writer[rows, cols]
        # Fresh cells (no writer yet) are the common case: one count settles it.
        written = np.count_nonzero(writers)
        lost = int(written - np.count_nonzero(writers == writer)) if written else 0
        if isinstance(values, (np.ndarray, bytes)):
            block = (values if isinstance(values, np.ndarray)
                     else np.frombuffer(values, dtype=np.uint8).reshape(tiles.shape))
            changed = int(np.count_nonzero(tiles != block))
            placed = int(np.count_nonzero(block))
            tiles[...] = block
        else:  # a fill: one code for the whole region
            values = int(values)
            changed = int(np.count_nonzero(tiles != values))
            placed = area if values != Tile.EMPTY else 0
            tiles[...] = values
        writers[...] = writer
        return WriteResult(region, area, placed, changed, lost)

    def _put_small(self, region: Rect, new: bytes, writer: int) -> WriteResult:
        """:meth:`put` of a small block (a builder's row), given as bytes.

        In a run every numpy call costs 1 to 3 us (its code and data are cold
        between two writes), several times what timeit shows. A row is read and
        written here through the byte views of the layers and counted with string
        operations, with no numpy call at all when the cells were empty (a build)
        or held these very tiles; only a row over other tiles or other writers'
        cells is counted by numpy.
        """
        width, height = region.width, region.height
        area = len(new)
        own = _writer_bytes(writer) * area  # the writer layer's bytes after
        if height == 1:
            start = region.y * self._size + region.x
            end = start + width
            old = self._cells[start:end].tobytes()
            was = self._owners[4 * start:4 * end].tobytes()
            self._cells[start:end] = new
            self._owners[4 * start:4 * end] = own
        else:
            rows, cols = region.slices()
            tiles = self._tiles[rows, cols]
            writers = self._writer[rows, cols]
            old = tiles.tobytes()
            was = writers.tobytes()
            tiles[...] = np.frombuffer(new, dtype=np.uint8).reshape(height, width)
            writers[...] = writer
        placed = area - new.count(0)
        if old.count(0) == area:  # empty cells: every tile placed is a change
            changed = placed
        elif old == new:
            changed = 0
        else:
            changed = int(np.count_nonzero(np.frombuffer(old, dtype=np.uint8)
                                           != np.frombuffer(new, dtype=np.uint8)))
        return WriteResult(region, area, placed, changed, _lost(was, own, writer))

    def place(self, region: Rect, values: bytes | int, writer: int) -> tuple[int, int]:
        """:meth:`put`, for a caller that reads only two of its counts: ``(placed,
        lost_work)``, without the changed cells or a :class:`WriteResult`.

        The region manager answers a write with these two; a builder's row or a
        repair's tile (one row of codes as bytes, or a fill) goes straight to the
        layers' byte views, without reading the old tiles, which only the changed
        count needs. Anything else is :meth:`put`'s.
        """
        if region.height == 1:
            width = region.width
            new = values if isinstance(values, bytes) else bytes((values,)) * width
            start = region.y * self._size + region.x
            end = start + width
            was = self._owners[4 * start:4 * end].tobytes()
            own = _writer_bytes(writer) * width
            self._cells[start:end] = new
            self._owners[4 * start:4 * end] = own
            return width - new.count(0), _lost(was, own, writer)
        result = self.put(region, values, writer)
        return result.placed, result.lost_work

    def write_cell(self, x: int, y: int, tile: Tile | int | str, writer: int) -> WriteResult:
        """Write one tile at column ``x``, row ``y``.

        ValueError naming ``x`` or ``y`` when off the canvas, ``tile`` for an
        unknown tile, ``writer`` for a bad agent index.
        """
        for name, value in (("x", x), ("y", y)):
            if (
                isinstance(value, bool)
                or not isinstance(value, numbers.Integral)
                or not 0 <= int(value) < self._size
            ):
                raise ValueError(f"{name} must be an integer in 0..{self._size - 1}, got {value!r}")
        try:
            code = parse_tile(tile)
        except ValueError as exc:
            raise ValueError(f"tile: {exc}") from None
        return self.write(Rect(int(x), int(y), 1, 1), code, writer)

    def snapshot(self) -> CanvasSnapshot:
        """Copies of both layers; later writes do not affect the snapshot."""
        tiles = self._tiles.copy()
        writer = self._writer.copy()
        tiles.flags.writeable = False
        writer.flags.writeable = False
        return CanvasSnapshot(tiles=tiles, writer=writer)

    def _check_snapshot(self, snapshot: object) -> CanvasSnapshot:
        if not isinstance(snapshot, CanvasSnapshot):
            raise ValueError(f"snapshot must be a CanvasSnapshot, got {type(snapshot).__name__}")
        if snapshot.tiles.shape != self._tiles.shape:
            raise ValueError(
                f"snapshot is {snapshot.tiles.shape[0]} x {snapshot.tiles.shape[1]}, "
                f"canvas is {self._size} x {self._size}"
            )
        return snapshot

    def restore(self, snapshot: CanvasSnapshot) -> None:
        """Make both layers equal to ``snapshot`` (ValueError naming it on a size mismatch)."""
        snap = self._check_snapshot(snapshot)
        np.copyto(self._tiles, snap.tiles)
        np.copyto(self._writer, snap.writer)

    def diff(self, snapshot: CanvasSnapshot) -> int:
        """Number of cells whose tile differs from ``snapshot`` (writers are ignored)."""
        snap = self._check_snapshot(snapshot)
        return int(np.count_nonzero(self._tiles != snap.tiles))

    def count_nonempty(self, region: Rect | Mapping[str, Any] | None = None) -> int:
        """Non-empty cells on the whole canvas, or inside ``region``."""
        if region is None:
            return int(np.count_nonzero(self._tiles))
        return int(np.count_nonzero(self._tiles[self._region(region).slices()]))

    def compress(self, level: int = 6) -> bytes:
        """Both layers as bytes for a checkpoint: a small header, then zlib data.

        Header: magic ``BRCV``, format version (1), size (uint32 LE). Payload:
        the tile layer (uint8) then the writer layer (int32 LE), row-major.
        """
        if isinstance(level, bool) or not isinstance(level, int) or not 0 <= level <= 9:
            raise ValueError(f"level must be an integer in 0..9, got {level!r}")
        packer = zlib.compressobj(level)
        parts = [
            _HEADER.pack(_MAGIC, _FORMAT_VERSION, self._size),
            packer.compress(self._tiles.data),
            packer.compress(np.ascontiguousarray(self._writer, dtype="<i4").data),
            packer.flush(),
        ]
        return b"".join(parts)

    @classmethod
    def decompress(cls, data: bytes | bytearray | memoryview) -> TileCanvas:
        """Rebuild a canvas from :meth:`compress` output.

        Raises ValueError naming ``data`` when it is not such output (wrong
        magic or version, corrupt or truncated payload, invalid tile codes).
        """
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise ValueError(f"data must be bytes, got {type(data).__name__}")
        raw = bytes(data)
        if len(raw) < _HEADER.size:
            raise ValueError("data is too short to be a compressed canvas")
        magic, version, size = _HEADER.unpack_from(raw)
        if magic != _MAGIC:
            raise ValueError("data is not a compressed canvas (bad magic)")
        if version != _FORMAT_VERSION:
            raise ValueError(f"data has unsupported canvas format version {version}")
        if size < 1:
            raise ValueError("data declares a canvas size of 0")
        cells = size * size
        expected = cells * 5
        unpacker = zlib.decompressobj()
        try:
            # max_length bounds memory even if the payload is a decompression bomb.
            payload = unpacker.decompress(raw[_HEADER.size :], expected + 1)
        except zlib.error as exc:
            raise ValueError(f"data has a corrupt payload: {exc}") from None
        if len(payload) != expected or not unpacker.eof or unpacker.unconsumed_tail:
            raise ValueError(f"data payload has the wrong length for a {size} x {size} canvas")
        tiles = np.frombuffer(payload, dtype=np.uint8, count=cells).reshape(size, size)
        writer = np.frombuffer(payload, dtype="<i4", count=cells, offset=cells).reshape(size, size)
        if not bool(_VALID_CODE[tiles].all()):
            raise ValueError("data contains invalid tile codes")
        if bool((writer < 0).any()):
            raise ValueError("data contains negative writer indices")
        canvas = cls(size)
        np.copyto(canvas._tiles, tiles)
        np.copyto(canvas._writer, writer)
        return canvas

    def match(
        self,
        blueprint: ArrayLike,
        region: Rect | Mapping[str, Any] | None = None,
        *,
        limit: int = 100,
    ) -> MatchResult:
        """Compare the canvas with ``blueprint``; see :class:`MatchResult` for the counts.

        Without ``region`` the blueprint covers the whole canvas (shape ``(size,
        size)``); with it, the blueprint covers ``region`` (shape ``(height,
        width)``) and defects are still reported in canvas coordinates. At most
        ``limit`` defects are listed. ValueError names ``blueprint``, ``region``
        or ``limit``.
        """
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise ValueError(f"limit must be an integer >= 0, got {limit!r}")
        r = Rect(0, 0, self._size, self._size) if region is None else self._region(region)
        plan = _tile_array(blueprint, "blueprint")
        if plan.shape != (r.height, r.width):
            raise ValueError(f"blueprint must have shape {(r.height, r.width)}, got {plan.shape}")
        return self.compare(r, plan, limit)

    def compare(self, region: Rect, plan: NDArray[np.uint8], limit: int) -> MatchResult:
        """:meth:`match` for a caller that has checked everything already.

        ``region`` is a Rect inside the canvas, ``plan`` a uint8 array of valid
        codes shaped ``(height, width)`` and ``limit`` an int >= 0. Nothing is
        checked again: the region manager validates the blueprint once, when it
        is set, and tests a block of it with this.
        """
        actual = self._tiles[region.slices()]
        if plan.size <= _SMALL_BLOCK:
            return _compare_small(region, plan.tobytes(), actual.tobytes(), limit)
        wanted = plan != 0
        same = actual == plan
        wrong = ~same
        defect_count = int(np.count_nonzero(wrong))
        defects: list[Defect] = []
        if limit and defect_count:  # finding where they are costs a pass over the block
            first = np.flatnonzero(wrong)[:limit]
            rows, cols = np.unravel_index(first, plan.shape)
            defects = [
                Defect(region.x + c, region.y + rr, _TILE_OF[int(plan[rr, c])],
                       _TILE_OF[int(actual[rr, c])])
                for rr, c in zip(rows.tolist(), cols.tolist(), strict=True)
            ]
        return MatchResult(
            matching=int(np.count_nonzero(same & wanted)),
            total=int(np.count_nonzero(wanted)),
            defects=defects,
            defect_count=defect_count,
        )


def completion_percent(tiles: NDArray[np.uint8] | None,
                       blueprint: NDArray[np.uint8] | None) -> float:
    """Percent of ``blueprint`` that ``tiles`` has right, two decimals: the share of its
    non-empty cells the canvas matches (a blueprint with none counts only when the canvas
    is exactly it). 0.0 without a canvas or a blueprint, or when their shapes differ. The
    one rule: the regions service's progress, and the fold of a stored log, use it."""
    if tiles is None or blueprint is None or blueprint.shape != tiles.shape:
        return 0.0
    wanted = blueprint != 0
    total = int(np.count_nonzero(wanted))
    if total:
        share = int(np.count_nonzero((tiles == blueprint) & wanted)) / total
    else:
        share = 1.0 if bool((tiles == blueprint).all()) else 0.0
    return round(100 * share, 2)


def _compare_small(region: Rect, want: bytes, have: bytes, limit: int) -> MatchResult:
    """:meth:`TileCanvas.compare` on the blueprint's and the canvas' cells of
    ``region`` as bytes, row-major."""
    total = len(want) - want.count(0)
    if have == want:  # built right: most tests
        return MatchResult(total, total, [], 0)
    wrong = np.flatnonzero(np.frombuffer(have, dtype=np.uint8)
                           != np.frombuffer(want, dtype=np.uint8)).tolist()
    missed = sum(1 for i in wrong if want[i])  # wrong on a non-empty target cell
    x, y, width = region.x, region.y, region.width
    defects = [Defect(x + i % width, y + i // width, _TILE_OF[want[i]], _TILE_OF[have[i]])
               for i in wrong[:limit]]
    return MatchResult(total - missed, total, defects, len(wrong))


def _canvas_of(tiles: NDArray[np.uint8], writer: NDArray[np.int32]) -> TileCanvas:
    """A canvas with copies of these layers (unpickling)."""
    canvas = TileCanvas(int(tiles.shape[0]))
    np.copyto(canvas._tiles, tiles)
    np.copyto(canvas._writer, writer)
    return canvas
