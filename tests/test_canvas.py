from __future__ import annotations

import re
import struct
import zlib
from typing import Any

import numpy as np
import pytest

from barnraise.sim.canvas import (
    CanvasSnapshot,
    Defect,
    MatchResult,
    Tile,
    TileCanvas,
    WriteResult,
    completion_percent,
    parse_tile,
)
from barnraise.sim.geometry import Rect

# -------------------------------------------------------------------- tiles


def test_tile_codes_are_stable() -> None:
    assert [(t.name, int(t)) for t in Tile] == [
        ("EMPTY", 0),
        ("SYSTEM", 1),
        ("CODE", 2),
        ("DATA", 3),
        ("SHADER", 4),
        ("CARTRIDGE", 5),
        ("NETWORK", 6),
        ("STORAGE", 7),
    ]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("code", Tile.CODE),
        ("CODE", Tile.CODE),
        ("  Shader ", Tile.SHADER),
        (3, Tile.DATA),
        (np.uint8(7), Tile.STORAGE),
        (Tile.EMPTY, Tile.EMPTY),
        (0, Tile.EMPTY),
    ],
)
def test_parse_tile(value: object, expected: Tile) -> None:
    assert parse_tile(value) is expected


@pytest.mark.parametrize("value", ["lava", "", 8, -1, 256, True, 2.0, None, [2]])
def test_parse_tile_rejects_and_names_value(value: object) -> None:
    with pytest.raises(ValueError, match=re.escape(f"unknown tile {value!r}")):
        parse_tile(value)


# ----------------------------------------------------------- construction


def test_new_canvas_is_empty() -> None:
    canvas = TileCanvas(16)
    assert canvas.size == 16
    assert canvas.tiles.shape == (16, 16) and canvas.tiles.dtype == np.uint8
    assert canvas.writer.shape == (16, 16) and canvas.writer.dtype == np.int32
    assert canvas.count_nonempty() == 0
    assert not canvas.writer.any()


@pytest.mark.parametrize("size", [0, -4, True, 3.0, "10"])
def test_canvas_size_validated(size: object) -> None:
    with pytest.raises(ValueError, match="size must be an integer >= 1"):
        TileCanvas(size)  # type: ignore[arg-type]


def test_layers_are_read_only_live_views() -> None:
    canvas = TileCanvas(4)
    tiles = canvas.tiles
    with pytest.raises(ValueError):
        tiles[0, 0] = 1
    with pytest.raises(ValueError):
        canvas.writer[0, 0] = 1
    canvas.write_cell(1, 2, Tile.CODE, writer=3)
    assert tiles[2, 1] == Tile.CODE  # same memory: sees later writes


# ------------------------------------------------------------------ writes


def test_fill_write_counts() -> None:
    canvas = TileCanvas(10)
    result = canvas.write(Rect(2, 3, 4, 2), Tile.CODE, writer=1)
    assert result == WriteResult(region=Rect(2, 3, 4, 2), cells=8, placed=8, changed=8, lost_work=0)
    assert canvas.count_nonempty() == 8
    assert (canvas.tiles[3:5, 2:6] == Tile.CODE).all()
    assert (canvas.writer[3:5, 2:6] == 1).all()
    assert canvas.tiles[2, 2] == 0 and canvas.tiles[3, 6] == 0


def test_array_write_and_dict_region() -> None:
    canvas = TileCanvas(10)
    values = [[1, 0, 2], [3, 4, 5]]
    result = canvas.write({"x": 7, "y": 8, "width": 3, "height": 2}, values, writer=2)
    assert result.cells == 6
    assert result.placed == 5  # the EMPTY cell places nothing
    assert result.changed == 5
    assert np.array_equal(canvas.tiles[8:10, 7:10], values)
    assert (canvas.writer[8:10, 7:10] == 2).all()  # every written cell, even the empty one


def test_fill_accepts_names_and_numpy_scalars() -> None:
    canvas = TileCanvas(4)
    assert canvas.write(Rect(0, 0, 2, 2), "data", writer=1).placed == 4
    assert canvas.write(Rect(0, 0, 1, 1), np.int64(5), writer=1).changed == 1
    assert canvas.tiles[0, 0] == Tile.CARTRIDGE


def test_uint8_array_and_tile_enum_lists() -> None:
    canvas = TileCanvas(4)
    block = np.full((2, 3), Tile.NETWORK, dtype=np.uint8)
    canvas.write(Rect(0, 0, 3, 2), block, writer=1)
    canvas.write(Rect(0, 3, 2, 1), [[Tile.SYSTEM, Tile.STORAGE]], writer=1)
    assert canvas.tiles[3, 1] == Tile.STORAGE
    assert canvas.count_nonempty() == 8


def test_lost_work_counts_cells_last_written_by_another_agent() -> None:
    canvas = TileCanvas(10)
    canvas.write(Rect(0, 0, 4, 4), Tile.CODE, writer=1)
    # Same writer overwriting its own cells: never lost work.
    own = canvas.write(Rect(0, 0, 2, 2), Tile.DATA, writer=1)
    assert own.lost_work == 0 and own.changed == 4
    # Another writer: every cell agent 1 wrote counts, even with an identical tile.
    other = canvas.write(Rect(2, 2, 4, 4), Tile.CODE, writer=2)
    assert other.lost_work == 4  # the 2 x 2 overlap with agent 1's block
    assert other.changed == 12  # the overlap already held CODE
    # Cells no one wrote (writer 0) are never lost work.
    fresh = canvas.write(Rect(8, 8, 2, 2), Tile.CODE, writer=3)
    assert fresh.lost_work == 0
    # Clearing someone else's tiles is lost work too, and places nothing.
    cleared = canvas.write(Rect(0, 0, 1, 1), Tile.EMPTY, writer=3)
    assert cleared == WriteResult(Rect(0, 0, 1, 1), cells=1, placed=0, changed=1, lost_work=1)
    assert canvas.writer[0, 0] == 3


def test_write_out_of_bounds_names_region() -> None:
    canvas = TileCanvas(10)
    with pytest.raises(ValueError, match=r"region \{.*\} is outside the 10 x 10 canvas"):
        canvas.write(Rect(8, 0, 3, 1), Tile.CODE, writer=1)
    with pytest.raises(ValueError, match=r"region\.height"):
        canvas.write({"x": 0, "y": 0, "width": 1, "height": 0}, Tile.CODE, writer=1)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (np.zeros((3, 2), dtype=np.uint8), r"values must have shape \(height, width\) = \(2, 3\)"),
        (np.zeros(6, dtype=np.uint8), r"values must have shape"),
        ([[1, 2, 9], [0, 0, 0]], "values contains invalid tile code 9"),
        ([[1, 2, 3], [0, -1, 0]], "values contains invalid tile code -1"),
        ([[1, 2, 3], [0, 300, 0]], "values contains invalid tile code 300"),
        (np.full((2, 3), 200, dtype=np.uint8), "values contains invalid tile code 200"),
        (np.zeros((2, 3), dtype=float), "values must hold integer tile codes"),
        (np.zeros((2, 3), dtype=bool), "values must hold integer tile codes"),
        ([[1, 2, 3], [1, 2]], "values must be a rectangular array"),
        ("lava", "values: unknown tile 'lava'"),
        (99, "values: unknown tile 99"),
        (True, "values: unknown tile True"),
    ],
)
def test_write_rejects_bad_values_without_changing_anything(values: object, message: str) -> None:
    canvas = TileCanvas(10)
    canvas.write(Rect(0, 0, 5, 5), Tile.DATA, writer=4)
    before = canvas.snapshot()
    with pytest.raises(ValueError, match=message):
        canvas.write(Rect(1, 1, 3, 2), values, writer=1)
    assert canvas.diff(before) == 0
    assert np.array_equal(canvas.writer, before.writer)


@pytest.mark.parametrize("writer", [0, -1, True, 1.0, "1", 2**31])
def test_write_rejects_bad_writer(writer: object) -> None:
    canvas = TileCanvas(4)
    with pytest.raises(ValueError, match="writer must be an agent index"):
        canvas.write(Rect(0, 0, 1, 1), Tile.CODE, writer=writer)  # type: ignore[arg-type]
    assert canvas.count_nonempty() == 0


def test_write_cell() -> None:
    canvas = TileCanvas(5)
    result = canvas.write_cell(4, 0, "shader", writer=9)
    assert result == WriteResult(Rect(4, 0, 1, 1), cells=1, placed=1, changed=1, lost_work=0)
    assert canvas.tiles[0, 4] == Tile.SHADER and canvas.writer[0, 4] == 9


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((5, 0, Tile.CODE, 1), r"x must be an integer in 0\.\.4, got 5"),
        ((0, -1, Tile.CODE, 1), r"y must be an integer in 0\.\.4, got -1"),
        ((1.0, 0, Tile.CODE, 1), "x must be an integer"),
        ((0, True, Tile.CODE, 1), "y must be an integer"),
        ((0, 0, "lava", 1), "tile: unknown tile 'lava'"),
        ((0, 0, Tile.CODE, 0), "writer must be an agent index"),
    ],
)
def test_write_cell_errors(args: tuple[object, ...], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TileCanvas(5).write_cell(*args)  # type: ignore[arg-type]


# -------------------------------------------------- snapshot, restore, diff


def test_snapshot_is_an_independent_read_only_copy() -> None:
    canvas = TileCanvas(8)
    canvas.write(Rect(0, 0, 2, 2), Tile.CODE, writer=1)
    snap = canvas.snapshot()
    assert isinstance(snap, CanvasSnapshot) and snap.size == 8
    canvas.write(Rect(0, 0, 8, 1), Tile.DATA, writer=2)
    assert snap.tiles[0, 5] == 0 and snap.writer[0, 0] == 1
    with pytest.raises(ValueError):
        snap.tiles[0, 0] = 3


def test_diff_and_restore() -> None:
    canvas = TileCanvas(8)
    canvas.write(Rect(0, 0, 4, 4), Tile.CODE, writer=1)
    snap = canvas.snapshot()
    assert canvas.diff(snap) == 0
    canvas.write(Rect(2, 2, 4, 4), Tile.CODE, writer=2)  # 4 cells same tile, 12 new
    assert canvas.diff(snap) == 12  # tiles only; writer changes are not differences
    canvas.restore(snap)
    assert canvas.diff(snap) == 0
    assert np.array_equal(canvas.writer, snap.writer)
    assert canvas.count_nonempty() == 16
    # Restoring copies: writing afterwards leaves the snapshot alone.
    canvas.write_cell(7, 7, Tile.DATA, writer=1)
    assert snap.tiles[7, 7] == 0


def test_restore_and_diff_validate_snapshot() -> None:
    canvas = TileCanvas(8)
    with pytest.raises(ValueError, match="snapshot is 4 x 4, canvas is 8 x 8"):
        canvas.restore(TileCanvas(4).snapshot())
    with pytest.raises(ValueError, match="snapshot is 4 x 4"):
        canvas.diff(TileCanvas(4).snapshot())
    with pytest.raises(ValueError, match="snapshot must be a CanvasSnapshot"):
        canvas.restore(canvas.tiles)  # type: ignore[arg-type]


def test_count_nonempty_in_region() -> None:
    canvas = TileCanvas(10)
    canvas.write(Rect(0, 0, 5, 5), Tile.CODE, writer=1)
    assert canvas.count_nonempty(Rect(3, 3, 5, 5)) == 4
    assert canvas.count_nonempty({"x": 5, "y": 5, "width": 5, "height": 5}) == 0
    with pytest.raises(ValueError, match=r"region .* is outside"):
        canvas.count_nonempty(Rect(9, 9, 2, 2))


# ----------------------------------------------------------- compression


def test_compress_round_trip() -> None:
    rng = np.random.default_rng(2)
    canvas = TileCanvas(64)
    canvas.write(Rect(0, 0, 64, 64), rng.integers(0, 8, (64, 64)), writer=3)
    canvas.write(Rect(10, 10, 5, 5), Tile.EMPTY, writer=70000)
    data = canvas.compress()
    assert data[:4] == b"BRCV"
    restored = TileCanvas.decompress(data)
    assert restored.size == 64
    assert np.array_equal(restored.tiles, canvas.tiles)
    assert np.array_equal(restored.writer, canvas.writer)
    assert TileCanvas.decompress(bytearray(canvas.compress(level=0))).diff(canvas.snapshot()) == 0


def test_empty_canvas_compresses_small() -> None:
    assert len(TileCanvas(1000).compress()) < 10_000


def _forge(size: int, payload: bytes, magic: bytes = b"BRCV", version: int = 1) -> bytes:
    return struct.pack("<4sBI", magic, version, size) + zlib.compress(payload)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"BRC", "data is too short"),
        (_forge(2, bytes(20), magic=b"NOPE"), "bad magic"),
        (_forge(2, bytes(20), version=2), "unsupported canvas format version 2"),
        (_forge(0, b""), "canvas size of 0"),
        (_forge(2, bytes(19)), "wrong length for a 2 x 2 canvas"),
        (_forge(2, bytes(21)), "wrong length"),
        (struct.pack("<4sBI", b"BRCV", 1, 2) + b"garbage", "corrupt payload"),
        (_forge(2, bytes([9, 0, 0, 0]) + bytes(16)), "invalid tile codes"),
        (_forge(2, bytes(4) + struct.pack("<4i", 0, -1, 0, 0)), "negative writer"),
    ],
)
def test_decompress_rejects_bad_data(data: bytes, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TileCanvas.decompress(data)


def test_decompress_rejects_trailing_garbage_and_non_bytes() -> None:
    good = TileCanvas(3).compress()
    with pytest.raises(ValueError, match="wrong length"):
        TileCanvas.decompress(good[:-3])
    with pytest.raises(ValueError, match="data must be bytes"):
        TileCanvas.decompress("BRCV")  # type: ignore[arg-type]


def test_compress_level_validated() -> None:
    with pytest.raises(ValueError, match=r"level must be an integer in 0..9"):
        TileCanvas(2).compress(level=10)


# ------------------------------------------------------------------- match


def test_match_whole_canvas() -> None:
    canvas = TileCanvas(4)
    plan = np.zeros((4, 4), dtype=np.uint8)
    plan[0, :] = Tile.CODE  # 4 wanted cells
    canvas.write(Rect(0, 0, 3, 1), Tile.CODE, writer=1)  # 3 right
    canvas.write_cell(2, 2, Tile.DATA, writer=1)  # extra tile where the plan is empty
    result = canvas.match(plan)
    assert isinstance(result, MatchResult)
    assert (result.matching, result.total, result.defect_count) == (3, 4, 2)
    assert result.defects == [
        Defect(3, 0, Tile.CODE, Tile.EMPTY),
        Defect(2, 2, Tile.EMPTY, Tile.DATA),
    ]
    assert result.fraction == 0.75
    assert not result.complete
    canvas.write_cell(3, 0, Tile.CODE, writer=2)
    canvas.write_cell(2, 2, Tile.EMPTY, writer=2)
    done = canvas.match(plan)
    assert done.complete and done.fraction == 1.0 and done.defects == []


def test_match_region_reports_canvas_coordinates() -> None:
    canvas = TileCanvas(20)
    region = Rect(10, 5, 3, 2)
    plan = [[1, 2, 3], [4, 5, 0]]
    canvas.write(region, plan, writer=1)
    canvas.write_cell(11, 6, Tile.SYSTEM, writer=1)
    result = canvas.match(plan, region)
    assert (result.matching, result.total) == (4, 5)
    assert result.defects == [Defect(11, 6, Tile.CARTRIDGE, Tile.SYSTEM)]
    # Tiles outside the region do not matter.
    canvas.write_cell(0, 0, Tile.CODE, writer=1)
    assert canvas.match(plan, {"x": 10, "y": 5, "width": 3, "height": 2}).defect_count == 1


def test_match_caps_defects_but_counts_all() -> None:
    canvas = TileCanvas(10)
    plan = np.full((10, 10), Tile.CODE, dtype=np.uint8)
    result = canvas.match(plan, limit=5)
    assert result.defect_count == 100 and len(result.defects) == 5
    assert [(d.x, d.y) for d in result.defects] == [(0, 0), (1, 0), (2, 0), (3, 0), (4, 0)]
    assert canvas.match(plan, limit=0).defects == []


def test_match_empty_blueprint() -> None:
    canvas = TileCanvas(3)
    result = canvas.match(np.zeros((3, 3), dtype=np.uint8))
    assert (result.matching, result.total, result.fraction, result.complete) == (0, 0, 1.0, True)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"blueprint": np.zeros((3, 4), dtype=np.uint8)}, r"blueprint must have shape \(4, 4\)"),
        ({"blueprint": np.full((4, 4), 8)}, "blueprint contains invalid tile code 8"),
        ({"blueprint": np.zeros((4, 4), dtype=float)}, "blueprint must hold integer"),
        ({"blueprint": np.zeros((2, 2)), "region": Rect(3, 3, 2, 2)}, "region .* is outside"),
        ({"blueprint": np.zeros((4, 4), dtype=int), "limit": -1}, "limit must be an integer >= 0"),
    ],
)
def test_match_errors(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TileCanvas(4).match(**kwargs)  # type: ignore[arg-type]


def test_put_is_write_without_the_checks() -> None:
    checked, trusted = TileCanvas(8), TileCanvas(8)
    block = np.full((4, 4), 3, np.uint8)
    steps: list[tuple[Rect, Any, int]] = [
        (Rect(0, 0, 4, 4), Tile.CODE, 1), (Rect(2, 2, 4, 4), block, 2),
        (Rect(1, 1, 2, 2), np.uint8(0), 2), (Rect(5, 5, 3, 3), 7, 1)]
    for rect, values, writer in steps:  # fills of every integer kind, and a block
        assert trusted.put(rect, values, writer) == checked.write(rect, values, writer)
    assert np.array_equal(checked.tiles, trusted.tiles)
    assert np.array_equal(checked.writer, trusted.writer)


def _reference_write(tiles: np.ndarray[Any, Any], writers: np.ndarray[Any, Any], rect: Rect,
                     block: np.ndarray[Any, Any], writer: int) -> tuple[int, int, int]:
    """(placed, changed, lost_work) of a write, by whole-array numpy on a model canvas."""
    sl = rect.slices()
    before, owners = tiles[sl].copy(), writers[sl].copy()
    tiles[sl], writers[sl] = block, writer
    return (int(np.count_nonzero(block)), int(np.count_nonzero(before != block)),
            int(np.count_nonzero((owners != 0) & (owners != writer))))


def test_put_counts_small_and_large_blocks_rows_bytes_and_fills_alike() -> None:
    """A small block (a row above all) is counted on bytes through the layers' byte views,
    a large one by numpy: every kind of write, over empty cells, the same tiles, other
    tiles and other writers' cells, counts as a plain numpy model says; and place(), which
    gives two of the counts, writes and counts the same."""
    rng = np.random.default_rng(4)
    size = 80  # blocks up to 80 x 80: both sides of 64 x 64
    canvas = TileCanvas(size)
    placing = TileCanvas(size)  # the same writes through place(): two of the counts
    tiles = np.zeros((size, size), np.uint8)
    writers = np.zeros((size, size), np.int32)
    kinds = set()
    for _ in range(3000):
        if rng.random() < 0.1:  # a large block
            x, y = int(rng.integers(0, 14)), int(rng.integers(0, 14))
            w, h = int(rng.integers(65, size - x + 1)), int(rng.integers(65, size - y + 1))
        else:
            x, y = int(rng.integers(0, size)), int(rng.integers(0, size))
            w = int(rng.integers(1, size - x + 1))
            h = 1 if rng.random() < 0.5 else int(rng.integers(1, size - y + 1))
        rect, writer = Rect(x, y, w, h), int(rng.integers(1, 4))
        kind = rng.choice(["array", "bytes", "fill", "again"])
        block = rng.integers(0, 8, (h, w)).astype(np.uint8)
        if kind == "again":  # the tiles already there, by the same or another writer
            block = tiles[rect.slices()].copy()
        values: Any = {"bytes": block.tobytes(), "fill": int(block.flat[0])}.get(kind, block)
        if kind == "fill":
            block = np.full((h, w), values, np.uint8)
        kinds.add((str(kind), h == 1, w * h <= 64 * 64))
        expected = _reference_write(tiles, writers, rect, block, writer)
        result = canvas.put(rect, values, writer)
        assert result == WriteResult(rect, w * h, *expected), (kind, rect)
        assert all(type(v) is int for v in (result.placed, result.changed, result.lost_work))
        counts = placing.place(rect, values if kind == "fill" else block.tobytes(), writer)
        assert counts == (expected[0], expected[2]), (kind, rect)
        assert all(type(v) is int for v in counts)
    assert np.array_equal(canvas.tiles, tiles) and np.array_equal(canvas.writer, writers)
    assert np.array_equal(placing.tiles, tiles) and np.array_equal(placing.writer, writers)
    # every kind as a row and as a block, and as a large block (a row here is never large)
    assert len(kinds) == 4 * 3


def test_compare_is_match_without_the_checks() -> None:
    """compare() counts and lists defects as match() does, on small blocks (as bytes) and
    large ones (numpy), limits and empty targets included."""
    rng = np.random.default_rng(5)
    size = 90
    plan = rng.integers(0, 8, (size, size)).astype(np.uint8)
    plan[:10] = 0  # an empty band: extra tiles there are defects
    canvas = TileCanvas(size)
    canvas.write(Rect(0, 0, size, size), np.where(rng.random((size, size)) < 0.02,
                                                   rng.integers(0, 8, (size, size)),
                                                   plan).astype(np.uint8), 1)
    for _ in range(400):
        x, y = int(rng.integers(0, size)), int(rng.integers(0, size))
        rect = Rect(x, y, int(rng.integers(1, size - x + 1)), int(rng.integers(1, size - y + 1)))
        limit = int(rng.choice([0, 1, 5, 100_000]))
        target = plan[rect.slices()]
        got = canvas.compare(rect, target, limit)
        assert got == canvas.match(target, rect, limit=limit)
        actual = canvas.tiles[rect.slices()]
        wrong = np.argwhere(actual != target)
        assert got.defect_count == len(wrong)
        assert got.total == np.count_nonzero(target)
        assert got.matching == np.count_nonzero((actual == target) & (target != 0))
        assert got.defects == [Defect(rect.x + int(c), rect.y + int(r), Tile(int(target[r, c])),
                                      Tile(int(actual[r, c]))) for r, c in wrong[:limit]]
        assert all(type(d.expected) is Tile and type(d.x) is int for d in got.defects)


def test_a_canvas_pickles_and_its_copy_writes_alone() -> None:
    import pickle

    canvas = TileCanvas(6)
    canvas.write(Rect(0, 1, 3, 1), [[1, 2, 3]], 4)
    copy = pickle.loads(pickle.dumps(canvas))
    assert np.array_equal(copy.tiles, canvas.tiles) and np.array_equal(copy.writer, canvas.writer)
    assert copy.put(Rect(0, 1, 3, 1), b"\x07\x07\x07", 5) == WriteResult(
        Rect(0, 1, 3, 1), 3, 3, 3, 3)
    assert copy.tiles[1, :3].tolist() == [7, 7, 7] and canvas.tiles[1, :3].tolist() == [1, 2, 3]
    assert canvas.writer[1, :3].tolist() == [4, 4, 4]


@pytest.mark.parametrize("size", [3, 40, 300])  # the small-block path and the array one
def test_completion_percent_is_the_share_match_counts(size: int) -> None:
    rng = np.random.default_rng(size)
    for fill in (0.0, 0.3, 1.0):
        plan = np.where(rng.random((size, size)) < fill,
                        rng.integers(1, 8, (size, size)), 0).astype(np.uint8)
        canvas = TileCanvas(size)
        tiles = np.where(rng.random((size, size)) < 0.6, plan,
                         rng.integers(0, 8, (size, size))).astype(np.uint8)
        canvas.place(Rect(0, 0, size, size), tiles.tobytes(), 1)
        m = canvas.match(plan, limit=0)
        share = m.matching / m.total if m.total else (1.0 if m.complete else 0.0)
        assert completion_percent(canvas.tiles, plan) == round(100 * share, 2)
    blank = np.zeros((size, size), dtype=np.uint8)
    assert completion_percent(blank, blank) == 100.0  # an empty target, met exactly
    assert completion_percent(None, blank) == completion_percent(blank, None) == 0.0
    assert completion_percent(blank, np.zeros((size + 1, size + 1), dtype=np.uint8)) == 0.0
