"""Rectangles on the tile grid and fast searches for free space.

Coordinates are integer grid cells. ``x`` is the column and ``y`` the row of a
rectangle's top-left cell; ``x2``/``y2`` are exclusive. A numpy layer is indexed
``layer[row, col]``, so ``layer[rect.slices()]`` is the rectangle's block.

Free-space queries run on a summed-area table (integral image) of an occupancy
mask: one O(rows x cols) build, after which "how many occupied cells does this
rectangle cover" is four lookups, and "which top-left positions fit a w x h
rectangle" is four shifted slices of the table.
"""

from __future__ import annotations

import functools
import math
import numbers
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = [
    "OccupancyIndex",
    "Rect",
    "find_free_placement",
    "free_rectangles",
    "summed_area_table",
]

_RECT_FIELDS = ("x", "y", "width", "height")

# The nearest-free search starts with a window this many cells around the
# requested point; most requests find space close by, so a small first window
# keeps the common case far below a full-grid scan. 16 rather than 32: a refused
# 8 x 8 claim on a 1024 grid 38% / 60% covered (the conflict_storm's) took 64-76 /
# 81-89 us a search instead of 90-135 / 88-134 (4 alternated rounds of 3,000);
# 12 was no better (the second round it more often needs costs more than it saves).
_INITIAL_RADIUS = 16


def _as_int(value: object, what: str, minimum: int) -> int:
    # bool is an int subclass but never a meaningful coordinate; numpy integers
    # are accepted because callers compute positions with numpy.
    if type(value) is int and value >= minimum:
        return value  # the common case, without the slow numbers.Integral ABC check
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{what} must be an integer >= {minimum}, got {value!r}")
    result = int(value)
    if result < minimum:
        raise ValueError(f"{what} must be an integer >= {minimum}, got {result}")
    return result


def _as_point(value: object, what: str) -> tuple[int, int]:
    if type(value) is tuple and len(value) == 2:
        px, py = value
        if type(px) is int and type(py) is int:
            # The common case without the numbers.Integral ABC checks: each refused
            # claim passes its (x, y) here; 0.29 us a call instead of 2.0 (timeit),
            # 2.2 s of the 10,000-agent storm's 166 s profile before.
            return px, py
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise ValueError(f"{what} must be an (x, y) pair of integers, got {value!r}")
    px, py = value
    for part in (px, py):
        if isinstance(part, bool) or not isinstance(part, numbers.Integral):
            raise ValueError(f"{what} must be an (x, y) pair of integers, got {value!r}")
    return int(px), int(py)


def _as_mask(occupied: ArrayLike, what: str) -> NDArray[np.bool_]:
    arr = np.asarray(occupied)
    if arr.ndim != 2:
        raise ValueError(f"{what} must be a 2-D array, got shape {arr.shape}")
    if arr.dtype == np.bool_:
        return arr
    nonzero: NDArray[np.bool_] = arr != 0
    return nonzero


@dataclass(frozen=True, slots=True)
class Rect:
    """An axis-aligned rectangle of grid cells, at least 1 x 1.

    The constructor enforces the invariants (integers, ``x, y >= 0``,
    ``width, height >= 1``), so every ``Rect`` in existence is valid. Use
    :meth:`parse` for untrusted input such as a tool's ``region`` argument.
    """

    x: int
    y: int
    width: int
    height: int

    def __init__(self, x: int, y: int, width: int, height: int) -> None:
        # Written out rather than generated: a Rect is made for every tool call with a
        # region, and the generated __init__ stores each field through
        # object.__setattr__ and then calls a __post_init__ for the checks; storing
        # through the slots' own descriptors takes about 60% of that. The common
        # case, plain ints in range, costs four type tests and four compares.
        if not (type(x) is int and type(y) is int and type(width) is int
                and type(height) is int and x >= 0 and y >= 0 and width >= 1 and height >= 1):
            # Normalise numpy integers so to_dict() stays JSON-able.
            x = _as_int(x, "Rect.x", 0)
            y = _as_int(y, "Rect.y", 0)
            width = _as_int(width, "Rect.width", 1)
            height = _as_int(height, "Rect.height", 1)
        _set_x(self, x)
        _set_y(self, y)
        _set_width(self, width)
        _set_height(self, height)

    @classmethod
    def parse(cls, obj: object, name: str = "region") -> Rect:
        """Build a Rect from a Rect or a mapping with keys x, y, width, height.

        Raises ValueError naming ``name`` and the offending field (e.g.
        ``region.width``) for a missing or unknown key, a non-integer or bool
        value, a negative x/y, or a width/height below 1.
        """
        if isinstance(obj, Rect):
            return obj
        if type(obj) is dict and len(obj) == 4:
            # A well-formed region dict: the constructor's checks are all it needs.
            try:
                x, y, w, h = obj["x"], obj["y"], obj["width"], obj["height"]
            except KeyError:
                pass
            else:
                if type(x) is int and type(y) is int and type(w) is int and type(h) is int:
                    try:
                        return cls(x, y, w, h)
                    except ValueError:
                        pass  # below, with the caller's name in the message
        if not isinstance(obj, Mapping):
            raise ValueError(
                f"{name} must be a Rect or a mapping with keys x, y, width, height; "
                f"got {type(obj).__name__}"
            )
        unknown = sorted(str(k) for k in obj if k not in _RECT_FIELDS)
        if unknown:
            raise ValueError(f"{name} has unknown field(s): {', '.join(unknown)}")
        values: dict[str, int] = {}
        for field, minimum in (("x", 0), ("y", 0), ("width", 1), ("height", 1)):
            if field not in obj:
                raise ValueError(f"{name}.{field} is missing")
            values[field] = _as_int(obj[field], f"{name}.{field}", minimum)
        return cls(**values)

    @property
    def x2(self) -> int:
        """Exclusive right edge: the first column past the rectangle."""
        return self.x + self.width

    @property
    def y2(self) -> int:
        """Exclusive bottom edge: the first row past the rectangle."""
        return self.y + self.height

    @property
    def area(self) -> int:
        return self.width * self.height

    # The methods below add widths themselves rather than read x2 and y2: each
    # property read is a call, and some run on every write (contains, within).

    def overlaps(self, other: Rect) -> bool:
        """True when the two rectangles share at least one cell (touching edges do not)."""
        return (self.x < other.x + other.width and other.x < self.x + self.width
                and self.y < other.y + other.height and other.y < self.y + self.height)

    def intersection(self, other: Rect) -> Rect | None:
        """The cells common to both rectangles, or None when they do not overlap."""
        x = max(self.x, other.x)
        y = max(self.y, other.y)
        x2 = min(self.x2, other.x2)
        y2 = min(self.y2, other.y2)
        if x >= x2 or y >= y2:
            return None
        return Rect(x, y, x2 - x, y2 - y)

    def contains(self, other: Rect) -> bool:
        """True when every cell of ``other`` is inside this rectangle."""
        return (self.x <= other.x and self.y <= other.y
                and other.x + other.width <= self.x + self.width
                and other.y + other.height <= self.y + self.height)

    def within(self, size: int) -> bool:
        """True when the rectangle fits inside a ``size`` x ``size`` grid."""
        return self.x + self.width <= size and self.y + self.height <= size

    def to_dict(self) -> dict[str, int]:
        """The JSON form used by the tools: ``{"x", "y", "width", "height"}``."""
        return {"x": self.x, "y": self.y, "width": self.width, "height": self.height}

    def slices(self) -> tuple[slice, slice]:
        """``(rows, cols)`` slices, so ``array[rect.slices()]`` is the rectangle's block."""
        return slice(self.y, self.y + self.height), slice(self.x, self.x + self.width)


# The slots' descriptors store a field of a frozen Rect (Rect.__init__).
_set_x = Rect.__dict__["x"].__set__
_set_y = Rect.__dict__["y"].__set__
_set_width = Rect.__dict__["width"].__set__
_set_height = Rect.__dict__["height"].__set__


def _sat_dtype(rows: int, cols: int) -> type[np.int32] | type[np.int64]:
    return np.int32 if rows * cols < 2**31 else np.int64


def _fill_sat(mask: NDArray[np.bool_], sat: NDArray[Any]) -> None:
    sat[0, :] = 0
    sat[:, 0] = 0
    inner = sat[1:, 1:]
    # Summing along rows first walks contiguous memory, and the in-place second
    # pass adds whole rows at a time: about twice as fast as the other order.
    np.cumsum(mask, axis=1, dtype=sat.dtype, out=inner)
    np.cumsum(inner, axis=0, out=inner)


def summed_area_table(occupied: ArrayLike) -> NDArray[np.int64] | NDArray[np.int32]:
    """The integral image of a 2-D mask (non-zero = occupied), zero-padded.

    The result has shape ``(rows + 1, cols + 1)``; entry ``[r, c]`` is the number
    of occupied cells in ``mask[:r, :c]``. int32 when that cannot overflow,
    int64 otherwise. Cost: two cumulative sums, O(rows x cols).
    """
    mask = _as_mask(occupied, "occupied")
    rows, cols = mask.shape
    sat = np.empty((rows + 1, cols + 1), dtype=_sat_dtype(rows, cols))
    _fill_sat(mask, sat)
    return sat


def _rect_sum(sat: NDArray[Any], rect: Rect) -> int:
    return int(
        sat[rect.y2, rect.x2] - sat[rect.y, rect.x2] - sat[rect.y2, rect.x] + sat[rect.y, rect.x]
    )


def _window_free(
    sat: NDArray[Any],
    y0: int,
    y1: int,
    x0: int,
    x1: int,
    width: int,
    height: int,
    acc: NDArray[Any],
    out: NDArray[np.bool_],
) -> NDArray[np.bool_]:
    # Free flags for top-left positions y0..y1 x x0..x1 (inclusive): the four
    # corners of every candidate rectangle are shifted views of the table.
    # ``acc``/``out`` are caller-owned buffers at least that large: at 1000 x
    # 1000 fresh temporaries cost more in page faults than the arithmetic.
    rows = y1 - y0 + 1
    cols = x1 - x0 + 1
    total = acc[:rows, :cols]
    free = out[:rows, :cols]
    top, bottom = slice(y0, y1 + 1), slice(y0 + height, y1 + height + 1)
    left, right = slice(x0, x1 + 1), slice(x0 + width, x1 + width + 1)
    np.subtract(sat[bottom, right], sat[top, right], out=total)
    np.subtract(total, sat[bottom, left], out=total)
    np.add(total, sat[top, left], out=total)
    np.equal(total, 0, out=free)
    return free


def _ceil_sqrt(n: int) -> int:
    root = math.isqrt(n)
    return root if root * root == n else root + 1


# Free flags for top-left positions y0..y1 x x0..x1 (inclusive), given as
# (y0, y1, x0, x1); supplied by whoever owns the summed-area table.
_WindowFree = Callable[[int, int, int, int], NDArray[np.bool_]]


#: Beyond any squared distance on a grid: what an occupied position scores.
_FAR = int(np.iinfo(np.int64).max)


#: The largest distance table kept (positions): a first window's, and the next ones'.
_KEPT_TABLE = 129 * 129


def _distances(dy0: int, dy1: int, dx0: int, dx1: int) -> NDArray[np.int64]:
    """Squared distances ``dy * dy + dx * dx`` for the offsets dy0..dy1 x dx0..dx1 (rows
    x columns), read-only. A small table is kept: most searches are a first window of
    one shape (not at an edge of the grid), so most ask for the same one."""
    if (dy1 - dy0 + 1) * (dx1 - dx0 + 1) <= _KEPT_TABLE:
        return _kept_distances(dy0, dy1, dx0, dx1)
    return _distance_table(dy0, dy1, dx0, dx1)


def _distance_table(dy0: int, dy1: int, dx0: int, dx1: int) -> NDArray[np.int64]:
    dy = np.arange(dy0, dy1 + 1, dtype=np.int64)
    dx = np.arange(dx0, dx1 + 1, dtype=np.int64)
    table: NDArray[np.int64] = dy[:, None] * dy[:, None] + dx[None, :] * dx[None, :]
    table.flags.writeable = False
    return table


_kept_distances = functools.lru_cache(maxsize=256)(_distance_table)


def _nearest_free(
    shape: tuple[int, int],
    occupied_cells: Callable[[], int],
    width: int,
    height: int,
    near: tuple[int, int],
    window_free: _WindowFree,
) -> Rect | None:
    rows, cols = shape
    ymax = rows - height
    xmax = cols - width
    if ymax < 0 or xmax < 0:
        return None
    nx, ny = near
    # The window must reach the box of valid top-lefts even when ``near`` lies
    # outside it, otherwise the first rounds would scan nothing.
    reach = max(abs(ny - min(max(ny, 0), ymax)), abs(nx - min(max(nx, 0), xmax)))
    full_radius = max(ny, ymax - ny, nx, xmax - nx)
    positions = (ymax + 1) * (xmax + 1)

    def widened(r: int) -> int:
        # Once a window would cover a quarter of all positions, scanning
        # everything at once is cheaper than another round of doubling.
        area = (min(ymax, ny + r) - max(0, ny - r) + 1) * (min(xmax, nx + r) - max(0, nx - r) + 1)
        return full_radius if 4 * area > positions else r

    radius = widened(max(_INITIAL_RADIUS, reach))
    counted = False
    while True:
        y0, y1 = max(0, ny - radius), min(ymax, ny + radius)
        x0, x1 = max(0, nx - radius), min(xmax, nx + radius)
        covers_all = y0 == 0 and x0 == 0 and y1 == ymax and x1 == xmax
        # Each free position's squared distance to ``near``, the rest past any distance:
        # argmin's first minimum is then the nearest, the smallest (y, x) on a tie (the
        # array is row-major). One table lookup and two array calls, where the free
        # positions' coordinates took ten (nonzero, their offsets, squares and sum).
        scored = np.where(window_free(y0, y1, x0, x1),
                          _distances(y0 - ny, y1 - ny, x0 - nx, x1 - nx), _FAR)
        best = int(np.argmin(scored))
        best_d2 = int(scored.flat[best])
        if best_d2 == _FAR:
            if covers_all:
                return None
            if not counted:
                # Fewer free cells than the rectangle needs: no window can hold it, so
                # skip the scan. Counted only once a window came back empty: for
                # find_free_placement the count is a pass over the whole mask, which
                # made a refusal's search at 1024 x 1024 cost ~130 us instead of ~25.
                counted = True
                if occupied_cells() > rows * cols - width * height:
                    return None
            radius = widened(2 * radius)
            continue
        row, col = divmod(best, x1 - x0 + 1)
        # Every position outside the window is more than ``radius`` away on one
        # axis, so a hit within ``radius`` is the global nearest. Otherwise the
        # nearest lies within sqrt(best_d2); widen to that and look once more.
        if best_d2 <= radius * radius or covers_all:
            return Rect(x0 + col, y0 + row, width, height)
        radius = widened(_ceil_sqrt(best_d2))


class OccupancyIndex:
    """An occupancy mask with a lazily rebuilt summed-area table.

    The index owns a boolean copy of the mask, the table and scratch buffers
    for window queries: about 10 bytes per cell (10 MB at 1000 x 1000), all
    allocated once. Updates (:meth:`set`, :meth:`replace`) only mark the table
    stale; the next query rebuilds it in place, O(rows x cols) (about 1 ms at
    1000 x 1000). Queries on a fresh table:

    - :meth:`occupied_count` / :meth:`is_free`: O(1).
    - :meth:`free_positions`: O(rows x cols), vectorised.
    - :meth:`nearest_free`: O(window) where the window grows from a small square
      around ``near`` until the nearest free position is provably inside it;
      O(rows x cols) in the worst case (little or no free space).

    Batching many updates before a query therefore costs a single rebuild.
    """

    __slots__ = ("_acc", "_flags", "_mask", "_rebuilds", "_sat", "_stale")

    def __init__(self, occupied: ArrayLike) -> None:
        """Index a copy of ``occupied`` (2-D; non-zero or True = occupied)."""
        self._mask: NDArray[np.bool_] = np.array(_as_mask(occupied, "occupied"), dtype=bool)
        rows, cols = self._mask.shape
        # One table buffer for the index's lifetime: refilling it in place
        # avoids re-faulting megabytes of fresh pages on every rebuild.
        self._sat: NDArray[Any] = np.empty((rows + 1, cols + 1), dtype=_sat_dtype(rows, cols))
        # Scratch for window queries, reused for the same reason.
        self._acc: NDArray[Any] = np.empty((rows, cols), dtype=self._sat.dtype)
        self._flags: NDArray[np.bool_] = np.empty((rows, cols), dtype=bool)
        self._stale = True
        self._rebuilds = 0

    @classmethod
    def empty(cls, size: int) -> OccupancyIndex:
        """An all-free ``size`` x ``size`` index."""
        n = _as_int(size, "size", 1)
        return cls(np.zeros((n, n), dtype=bool))

    @property
    def shape(self) -> tuple[int, int]:
        rows, cols = self._mask.shape
        return int(rows), int(cols)

    @property
    def mask(self) -> NDArray[np.bool_]:
        """A read-only view of the current mask."""
        view = self._mask.view()
        view.flags.writeable = False
        return view

    @property
    def rebuilds(self) -> int:
        """How many times the summed-area table has been built (for cost accounting)."""
        return self._rebuilds

    def _table(self) -> NDArray[Any]:
        if self._stale:
            _fill_sat(self._mask, self._sat)
            self._stale = False
            self._rebuilds += 1
        return self._sat

    def _check_rect(self, rect: Rect | Mapping[str, Any], name: str) -> Rect:
        r = Rect.parse(rect, name)
        rows, cols = self._mask.shape
        if r.x2 > cols or r.y2 > rows:
            raise ValueError(f"{name} {r.to_dict()} is outside the {cols} x {rows} grid")
        return r

    def set(self, rect: Rect | Mapping[str, Any], occupied: bool = True) -> None:
        """Mark every cell of ``rect`` occupied (or free).

        ValueError naming "rect" when it is malformed or outside the grid.
        """
        r = self._check_rect(rect, "rect")
        block = self._mask[r.slices()]
        # Skipping no-op updates avoids an O(grid) rebuild for an O(area) check.
        if bool(block.all()) if occupied else not bool(block.any()):
            return
        block[...] = occupied
        self._stale = True

    def replace(self, occupied: ArrayLike) -> None:
        """Swap in a new mask of the same shape (copied). ValueError naming "occupied" otherwise."""
        mask = _as_mask(occupied, "occupied")
        if mask.shape != self._mask.shape:
            raise ValueError(f"occupied must have shape {self._mask.shape}, got {mask.shape}")
        self._mask = np.array(mask, dtype=bool)
        self._stale = True

    def occupied_count(self, rect: Rect | Mapping[str, Any]) -> int:
        """Number of occupied cells inside ``rect``; O(1) on a fresh table."""
        return _rect_sum(self._table(), self._check_rect(rect, "rect"))

    def is_free(self, rect: Rect | Mapping[str, Any]) -> bool:
        """True when no cell of ``rect`` is occupied; O(1) on a fresh table."""
        return self.occupied_count(rect) == 0

    def free_positions(self, width: int, height: int) -> NDArray[np.bool_]:
        """Where a ``width`` x ``height`` rectangle fits entirely in free cells.

        Returns a bool array of shape ``(rows - height + 1, cols - width + 1)``
        indexed ``[y, x]`` by top-left position; shape with a zero when the
        rectangle is larger than the grid.
        """
        w = _as_int(width, "width", 1)
        h = _as_int(height, "height", 1)
        rows, cols = self._mask.shape
        if h > rows or w > cols:
            return np.zeros((max(rows - h + 1, 0), max(cols - w + 1, 0)), dtype=bool)
        result = np.empty((rows - h + 1, cols - w + 1), dtype=bool)
        return _window_free(self._table(), 0, rows - h, 0, cols - w, w, h, self._acc, result)

    def nearest_free(self, width: int, height: int, near: tuple[int, int] = (0, 0)) -> Rect | None:
        """The free ``width`` x ``height`` placement whose top-left is nearest ``near``.

        Distance is Euclidean between top-left cells; ties go to the smallest
        ``(y, x)``. ``near`` is an ``(x, y)`` pair and may lie outside the grid.
        Returns None when no free placement exists (including a rectangle larger
        than the grid).
        """
        w = _as_int(width, "width", 1)
        h = _as_int(height, "height", 1)
        point = _as_point(near, "near")
        sat = self._table()

        def window_free(y0: int, y1: int, x0: int, x1: int) -> NDArray[np.bool_]:
            return _window_free(sat, y0, y1, x0, x1, w, h, self._acc, self._flags)

        return _nearest_free(self.shape, lambda: int(sat[-1, -1]), w, h, point, window_free)


def find_free_placement(
    occupied: ArrayLike, width: int, height: int, near: tuple[int, int] = (0, 0)
) -> Rect | None:
    """One-shot :meth:`OccupancyIndex.nearest_free` on ``occupied`` (non-zero = occupied).

    Same result and tie rule. Instead of a whole-grid table it builds a small
    summed-area table over each search window's cells only, so a request with
    free space nearby costs O(window), independent of the grid size; the worst
    case (no free placement, or the nearest one far away) is O(rows x cols).
    Keep an :class:`OccupancyIndex` when asking many questions of one mask.
    """
    w = _as_int(width, "width", 1)
    h = _as_int(height, "height", 1)
    point = _as_point(near, "near")
    mask = _as_mask(occupied, "occupied")
    rows, cols = mask.shape
    dtype = _sat_dtype(rows, cols)

    def window_free(y0: int, y1: int, x0: int, x1: int) -> NDArray[np.bool_]:
        # The window's own summed-area table, its zero border from np.zeros, and each
        # position's count from four shifted views of it: seven array calls where the
        # shared helpers (_fill_sat, _window_free, with their buffers) took twelve.
        cells = mask[y0 : y1 + h, x0 : x1 + w]
        sat = np.zeros((cells.shape[0] + 1, cells.shape[1] + 1), dtype=dtype)
        inner = sat[1:, 1:]
        np.cumsum(cells, axis=1, dtype=dtype, out=inner)
        np.cumsum(inner, axis=0, out=inner)
        ny, nx = y1 - y0 + 1, x1 - x0 + 1
        total = sat[h : h + ny, w : w + nx] - sat[:ny, w : w + nx]
        total -= sat[h : h + ny, :nx]
        total += sat[:ny, :nx]
        free: NDArray[np.bool_] = total == 0
        return free

    return _nearest_free(
        (int(rows), int(cols)), lambda: int(np.count_nonzero(mask)), w, h, point, window_free
    )


def free_rectangles(occupied: ArrayLike, origin: tuple[int, int] = (0, 0)) -> list[Rect]:
    """Split the free (zero / False) cells of a region into disjoint rectangles.

    ``occupied`` is the region's own 2-D mask; ``origin`` is the ``(x, y)`` of
    its top-left cell on the grid, added to every result. The rectangles are
    pairwise disjoint and their union is exactly the free cells. They come from
    merging each row's free runs with identical runs directly below, so a
    region carved by a few rectangular claims yields a few rectangles. Ordered
    by ``(y, x)``. A small mask (at most :data:`SMALL_MASK` cells: a region query's)
    is scanned row by row (:func:`_free_rectangles_scan`); a larger one is fully
    vectorised (:func:`_free_rectangles_numpy`). Both give the same list.
    """
    mask = _as_mask(occupied, "occupied")
    ox, oy = _as_point(origin, "origin")
    if ox < 0 or oy < 0:
        raise ValueError(f"origin must be non-negative, got {origin!r}")
    rows, cols = mask.shape
    if rows == 0 or cols == 0:
        return []
    if rows * cols <= SMALL_MASK:
        return _free_rectangles_scan(mask, ox, oy)
    return _free_rectangles_numpy(mask, ox, oy)


#: Cells up to which :func:`free_rectangles` scans rows in Python: for a region query's
#: mask (16 x 16 with one claim in it: about 20 us against 40-60) the dozen array
#: operations of the vectorised form cost more than a regular-expression pass over
#: each row; the two meet near 48 x 48.
SMALL_MASK = 1024
_FREE_RUN = re.compile(rb"\x00+")


def _free_rectangles_scan(mask: NDArray[np.bool_], ox: int, oy: int) -> list[Rect]:
    """:func:`free_rectangles` by rows: a run of free cells that repeats, same start
    and end, on the row below extends its rectangle; any other run starts one."""
    rows, cols = mask.shape
    cells = np.ascontiguousarray(mask).tobytes()  # one byte a cell, 0 when free
    runs = _FREE_RUN.finditer
    found: list[tuple[int, int, int, int]] = []  # (y, x, width, height)
    growing: dict[tuple[int, int], int] = {}  # (start, end) of a run -> its first row
    for row in range(rows):
        base = row * cols
        here: dict[tuple[int, int], int] = {}
        for run in runs(cells, base, base + cols):
            start, end = run.span()
            key = (start - base, end - base)
            here[key] = growing.pop(key, row)
        for (start, end), top in growing.items():  # runs that stopped on the row above
            found.append((top, start, end - start, row - top))
        growing = here
    for (start, end), top in growing.items():
        found.append((top, start, end - start, rows - top))
    found.sort()
    return [Rect(ox + x, oy + y, w, h) for y, x, w, h in found]


def _free_rectangles_numpy(mask: NDArray[np.bool_], ox: int, oy: int) -> list[Rect]:
    """:func:`free_rectangles`, fully vectorised: Python work is one step per rectangle."""
    rows, cols = mask.shape
    padded = np.zeros((rows, cols + 2), dtype=np.int8)
    padded[:, 1:-1] = ~mask
    edges = np.diff(padded, axis=1)
    # Row-major order pairs the k-th run start with the k-th run end.
    run_row, run_start = np.nonzero(edges == 1)
    _, run_end = np.nonzero(edges == -1)
    if run_row.size == 0:
        return []
    order = np.lexsort((run_row, run_end, run_start))
    row = run_row[order]
    start = run_start[order]
    end = run_end[order]
    # After sorting by (start, end, row), a rectangle is a stretch of identical
    # runs on consecutive rows; a new one begins wherever that chain breaks.
    begins = np.ones(row.size, dtype=bool)
    begins[1:] = (start[1:] != start[:-1]) | (end[1:] != end[:-1]) | (row[1:] != row[:-1] + 1)
    first = np.flatnonzero(begins)
    heights = np.diff(np.append(first, row.size))
    ys = row[first]
    xs = start[first]
    widths = end[first] - xs
    out = np.lexsort((xs, ys))
    return [
        Rect(ox + int(x), oy + int(y), int(w), int(h))
        for x, y, w, h in zip(xs[out], ys[out], widths[out], heights[out], strict=True)
    ]
