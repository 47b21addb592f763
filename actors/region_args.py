"""The regions service's arguments: regions inside the grid, tile types and rows of them.

Each check raises :class:`~barnraise.sim.tools.ToolError` ``invalid_argument`` (or
``out_of_bounds``) naming the argument at fault; used by
:class:`barnraise.actors.regions.RegionManager` and its rooms.
"""

from __future__ import annotations

from typing import Final

import numpy as np
from numpy.typing import NDArray

from barnraise.sim.canvas import Tile, parse_tile
from barnraise.sim.geometry import Rect
from barnraise.sim.tools import ToolError

__all__ = ["inside", "invalid", "rect_arg", "tile_arg", "tile_bytes", "tile_rows"]


def invalid(name: str, problem: str) -> ToolError:
    """The ``invalid_argument`` error naming argument ``name``."""
    return ToolError("invalid_argument", f"{name}: {problem}", field=name)


def rect_arg(value: object, name: str = "region") -> Rect:
    """``value`` (a region dict) as a Rect; ``invalid_argument`` naming ``name`` if it is none."""
    if type(value) is dict and len(value) == 4:
        # Rect.parse's own first case, without the call: a region the tool's schema let
        # through is a dict of four ints in range (a row of a build, a claim, a test).
        try:
            return Rect(value["x"], value["y"], value["width"], value["height"])
        except (KeyError, ValueError, TypeError):
            pass  # parse says what is wrong, naming the field
    try:
        return Rect.parse(value, name)
    except ValueError as exc:
        raise invalid(name, str(exc)) from None


def inside(size: int, rect: Rect, name: str = "region") -> Rect:
    """``rect``, if it lies inside the ``size`` x ``size`` grid; else out_of_bounds."""
    if not rect.within(size):
        raise ToolError("out_of_bounds", f"{name} {rect.to_dict()} is not inside the "
                        f"{size} x {size} grid", field=name, grid_size=size)
    return rect


def tile_arg(value: object, name: str) -> Tile:
    try:
        return parse_tile(value)
    except ValueError as exc:
        raise invalid(name, str(exc)) from None


def _code_of(text: str, name: str) -> int:
    # A 2-D list mixing names and numbers reaches numpy as strings: "3" is code 3.
    # ASCII digits only: "²" is a digit to str.isdigit() and no number to int().
    digits = text.strip()
    return int(tile_arg(int(digits) if digits.isascii() and digits.isdigit() else text, name))


_MAX_TILE = max(int(t) for t in Tile)
_TILE_CODES: Final = bytes(int(t) for t in Tile)  # every valid code, a byte each


def tile_rows(value: object, name: str, shape: tuple[int, int]) -> NDArray[np.uint8]:
    """Rows of tile types (names or codes) as a uint8 array of exactly ``shape``
    (read-only); :func:`tile_bytes` says what is refused."""
    return np.frombuffer(tile_bytes(value, name, shape), dtype=np.uint8).reshape(shape)


def tile_bytes(value: object, name: str, shape: tuple[int, int]) -> bytes:
    """Rows of tile types (names or codes) as the bytes of their codes, row-major,
    exactly ``shape`` of them (what TileCanvas.put takes for a block).

    The conversion is vectorised: names are looked up once per distinct name.
    Raises ``invalid_argument`` naming ``name`` with the row or shape at fault.
    """
    rows, cols = shape
    if not isinstance(value, (list, tuple)):
        raise invalid(name, f"expected rows of tile types, got {type(value).__name__}")
    if len(value) != rows:
        raise invalid(name, f"expected {rows} rows, got {len(value)}")
    for i, row in enumerate(value):
        if not isinstance(row, (list, tuple)):
            raise invalid(name, f"row {i} is not a list of tile types")
        if len(row) != cols:
            raise invalid(name, f"row {i} has {len(row)} tiles, expected {cols}")
    # The common case, rows of valid int codes: bytes() packs a row in C and refuses
    # anything that is not one (a name: TypeError, a code beyond a byte: ValueError),
    # and deleting the valid codes must leave nothing. About 0.6 us for a builder's
    # row of 30 where np.asarray and a cast take 3.3, and a third of the time on a
    # whole blueprint.
    # Refused rows take the numpy path below, which names the fault. bytes() would
    # take True as 1 as numpy does beside ints; only rows all of bools (numpy's bool
    # dtype, refused below) start with one, so the first cell tells them apart. The
    # bytes are what the canvas takes (no array to make and take apart again).
    if rows and cols and type(value[0][0]) is not bool:
        try:
            packed = bytes(value[0]) if rows == 1 else b"".join(map(bytes, value))
        except (TypeError, ValueError):
            pass
        else:
            if not packed.translate(None, _TILE_CODES):
                return packed
    try:
        arr = np.asarray(value)
    except ValueError as exc:  # mixed nesting inside a row
        raise invalid(name, f"not a rectangular array of tile types: {exc}") from None
    if arr.shape != shape:
        raise invalid(name, f"expected shape {shape}, got {arr.shape}")
    if arr.dtype.kind in "iu":
        # numpy would read True as 1 beside integers: the tool's schema refuses a bool in
        # a row before this (barnraise.sim.tools._ROW), so no path pays a scan for it. Valid codes
        # get here only in rows that begin with a bool; the rest took the bytes above.
        if arr.size == 0 or (min(map(min, value)) >= 0 and max(map(max, value)) <= _MAX_TILE):
            return arr.astype(np.uint8).tobytes()
        distinct, inverse = np.unique(arr, return_inverse=True)
        codes = np.array([int(tile_arg(int(v), name)) for v in distinct], dtype=np.uint8)
    elif arr.dtype.kind == "U":
        distinct, inverse = np.unique(arr, return_inverse=True)
        codes = np.array([_code_of(str(v), name) for v in distinct], dtype=np.uint8)
    else:
        raise invalid(name, f"tile types must be names or integer codes, got {arr.dtype}")
    return codes[inverse.reshape(shape)].tobytes()
