from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from numpy.lib.stride_tricks import sliding_window_view

from barnraise.sim.geometry import (
    OccupancyIndex,
    Rect,
    find_free_placement,
    free_rectangles,
    summed_area_table,
)

# ------------------------------------------------------------------ helpers


def brute_free_positions(mask: np.ndarray, width: int, height: int) -> np.ndarray:
    rows, cols = mask.shape
    if height > rows or width > cols:
        return np.zeros((max(rows - height + 1, 0), max(cols - width + 1, 0)), dtype=bool)
    windows = sliding_window_view(mask, (height, width))
    return np.asarray(~windows.any(axis=(2, 3)))


def brute_nearest(mask: np.ndarray, width: int, height: int, near: tuple[int, int]) -> Rect | None:
    free = brute_free_positions(mask, width, height)
    ys, xs = np.nonzero(free)
    if ys.size == 0:
        return None
    nx, ny = near
    best = min(
        zip(ys.tolist(), xs.tolist(), strict=True),
        key=lambda p: ((p[0] - ny) ** 2 + (p[1] - nx) ** 2, p[0], p[1]),
    )
    return Rect(best[1], best[0], width, height)


def coverage(rects: list[Rect], shape: tuple[int, int], origin: tuple[int, int]) -> np.ndarray:
    count = np.zeros(shape, dtype=np.int64)
    ox, oy = origin
    for r in rects:
        count[r.y - oy : r.y2 - oy, r.x - ox : r.x2 - ox] += 1
    return count


# --------------------------------------------------------------------- Rect


def test_rect_properties() -> None:
    r = Rect(2, 3, 4, 5)
    assert (r.x2, r.y2, r.area) == (6, 8, 20)
    assert r.to_dict() == {"x": 2, "y": 3, "width": 4, "height": 5}
    assert r.slices() == (slice(3, 8), slice(2, 6))


def test_rect_slices_index_rows_then_columns() -> None:
    grid = np.zeros((10, 10), dtype=int)
    grid[Rect(1, 2, 3, 4).slices()] = 1
    assert grid.sum() == 12
    assert grid[2, 1] == 1 and grid[5, 3] == 1
    assert grid[6, 1] == 0 and grid[2, 4] == 0


def test_rect_is_frozen_and_slotted() -> None:
    r = Rect(0, 0, 1, 1)
    with pytest.raises(AttributeError):
        r.x = 5  # type: ignore[misc]
    assert not hasattr(r, "__dict__")


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"x": -1, "y": 0, "width": 1, "height": 1}, "Rect.x"),
        ({"x": 0, "y": -1, "width": 1, "height": 1}, "Rect.y"),
        ({"x": 0, "y": 0, "width": 0, "height": 1}, "Rect.width"),
        ({"x": 0, "y": 0, "width": 1, "height": 0}, "Rect.height"),
        ({"x": 1.5, "y": 0, "width": 1, "height": 1}, "Rect.x"),
        ({"x": True, "y": 0, "width": 1, "height": 1}, "Rect.x"),
    ],
)
def test_rect_constructor_validates(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        Rect(**kwargs)  # type: ignore[arg-type]


def test_rect_normalises_numpy_integers() -> None:
    r = Rect(np.int64(1), np.int32(2), np.uint8(3), np.int16(4))  # type: ignore[arg-type]
    assert type(r.x) is int and type(r.width) is int
    assert r == Rect(1, 2, 3, 4)


def test_parse_accepts_dict_and_rect() -> None:
    r = Rect.parse({"x": 1, "y": 2, "width": 3, "height": 4})
    assert r == Rect(1, 2, 3, 4)
    assert Rect.parse(r) is r
    assert Rect.parse({"x": np.int64(1), "y": 0, "width": 1, "height": 1}).x == 1


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        ({"y": 0, "width": 1, "height": 1}, "region.x is missing"),
        ({"x": 0, "width": 1, "height": 1}, "region.y is missing"),
        ({"x": 0, "y": 0, "height": 1}, "region.width is missing"),
        ({"x": 0, "y": 0, "width": 1}, "region.height is missing"),
        ({"x": "0", "y": 0, "width": 1, "height": 1}, r"region\.x must be an integer >= 0"),
        ({"x": 0, "y": 0.0, "width": 1, "height": 1}, r"region\.y must be an integer >= 0"),
        ({"x": 0, "y": 0, "width": False, "height": 1}, r"region\.width must be an integer >= 1"),
        ({"x": -3, "y": 0, "width": 1, "height": 1}, r"region\.x must be an integer >= 0, got -3"),
        ({"x": 0, "y": -1, "width": 1, "height": 1}, r"region\.y must be an integer >= 0"),
        ({"x": 0, "y": 0, "width": 0, "height": 1}, r"region\.width must be an integer >= 1"),
        ({"x": 0, "y": 0, "width": 1, "height": -2}, r"region\.height must be an integer >= 1"),
        ({"x": 0, "y": 0, "w": 1, "h": 1}, "region has unknown field"),
        ([0, 0, 1, 1], "region must be a Rect or a mapping"),
        (None, "region must be a Rect or a mapping"),
    ],
)
def test_parse_errors_name_the_field(obj: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Rect.parse(obj)


def test_parse_uses_given_name() -> None:
    with pytest.raises(ValueError, match=r"bounds\.width"):
        Rect.parse({"x": 0, "y": 0, "width": 0, "height": 1}, "bounds")


def test_overlaps_and_intersection() -> None:
    a = Rect(0, 0, 10, 10)
    b = Rect(5, 5, 10, 10)
    assert a.overlaps(b) and b.overlaps(a)
    assert a.intersection(b) == Rect(5, 5, 5, 5)
    touching = Rect(10, 0, 5, 5)
    assert not a.overlaps(touching)
    assert a.intersection(touching) is None
    below = Rect(0, 10, 3, 3)
    assert not a.overlaps(below)
    assert a.intersection(below) is None
    assert a.intersection(a) == a


def test_contains_and_within() -> None:
    outer = Rect(0, 0, 10, 10)
    assert outer.contains(Rect(2, 2, 8, 8))
    assert outer.contains(outer)
    assert not outer.contains(Rect(2, 2, 9, 8))
    assert not Rect(2, 2, 8, 8).contains(outer)
    assert outer.within(10)
    assert not outer.within(9)
    assert Rect(9, 9, 1, 1).within(10)


@settings(max_examples=60, deadline=None)
@given(
    st.tuples(*[st.integers(0, 12)] * 2, *[st.integers(1, 8)] * 2),
    st.tuples(*[st.integers(0, 12)] * 2, *[st.integers(1, 8)] * 2),
)
def test_rect_relations_match_cell_sets(
    a_t: tuple[int, int, int, int], b_t: tuple[int, int, int, int]
) -> None:
    a, b = Rect(*a_t), Rect(*b_t)
    grid_a = np.zeros((25, 25), dtype=bool)
    grid_b = np.zeros((25, 25), dtype=bool)
    grid_a[a.slices()] = True
    grid_b[b.slices()] = True
    both = grid_a & grid_b
    assert a.overlaps(b) == bool(both.any())
    inter = a.intersection(b)
    if inter is None:
        assert not both.any()
    else:
        expected = np.zeros_like(both)
        expected[inter.slices()] = True
        assert np.array_equal(expected, both)
    assert a.contains(b) == bool((grid_a | ~grid_b).all())


# ------------------------------------------------------- summed-area table


def test_summed_area_table_matches_prefix_sums() -> None:
    rng = np.random.default_rng(7)
    mask = rng.random((13, 17)) < 0.4
    sat = summed_area_table(mask)
    assert sat.shape == (14, 18)
    for r, c in [(0, 0), (1, 1), (5, 9), (13, 17), (13, 0), (7, 17)]:
        assert sat[r, c] == mask[:r, :c].sum()


def test_summed_area_table_accepts_ints_and_rejects_1d() -> None:
    sat = summed_area_table([[0, 2], [3, 0]])
    assert sat[2, 2] == 2
    with pytest.raises(ValueError, match="occupied must be a 2-D array"):
        summed_area_table([1, 0, 1])


# ----------------------------------------------------------- OccupancyIndex


def test_index_set_query_and_lazy_rebuild() -> None:
    idx = OccupancyIndex.empty(20)
    assert idx.shape == (20, 20)
    assert idx.rebuilds == 0
    assert idx.is_free(Rect(0, 0, 20, 20))
    assert idx.rebuilds == 1
    idx.set(Rect(5, 5, 3, 3))
    idx.set({"x": 10, "y": 0, "width": 2, "height": 2})
    assert idx.rebuilds == 1  # updates only mark the table stale
    assert idx.occupied_count(Rect(0, 0, 20, 20)) == 13
    assert idx.rebuilds == 2
    assert not idx.is_free(Rect(6, 6, 1, 1))
    assert idx.is_free(Rect(0, 0, 5, 5))
    assert idx.occupied_count(Rect(4, 4, 3, 3)) == 4
    idx.set(Rect(5, 5, 3, 3))  # already occupied: no rebuild needed
    idx.set(Rect(0, 0, 2, 2), occupied=False)  # already free
    assert idx.is_free(Rect(0, 0, 2, 2))
    assert idx.rebuilds == 2
    idx.set(Rect(5, 5, 3, 3), occupied=False)
    assert idx.is_free(Rect(5, 5, 3, 3))
    assert idx.rebuilds == 3


def test_index_copies_input_and_exposes_read_only_mask() -> None:
    mask = np.zeros((4, 4), dtype=bool)
    idx = OccupancyIndex(mask)
    mask[0, 0] = True
    assert idx.is_free(Rect(0, 0, 1, 1))
    with pytest.raises(ValueError):
        idx.mask[0, 0] = True
    assert idx.mask.shape == (4, 4)


def test_index_replace() -> None:
    idx = OccupancyIndex(np.zeros((3, 3), dtype=bool))
    assert idx.is_free(Rect(0, 0, 3, 3))
    idx.replace(np.eye(3, dtype=int))
    assert not idx.is_free(Rect(0, 0, 3, 3))
    assert idx.is_free(Rect(1, 0, 2, 1))
    with pytest.raises(ValueError, match=r"occupied must have shape \(3, 3\)"):
        idx.replace(np.zeros((2, 2)))


def test_index_errors_name_arguments() -> None:
    idx = OccupancyIndex.empty(10)
    with pytest.raises(ValueError, match=r"rect .* is outside the 10 x 10 grid"):
        idx.is_free(Rect(5, 5, 6, 1))
    with pytest.raises(ValueError, match=r"rect .* is outside"):
        idx.set(Rect(0, 9, 1, 2))
    with pytest.raises(ValueError, match=r"rect\.width"):
        idx.occupied_count({"x": 0, "y": 0, "width": 0, "height": 1})
    with pytest.raises(ValueError, match="width must be an integer >= 1"):
        idx.free_positions(0, 1)
    with pytest.raises(ValueError, match="height must be an integer >= 1"):
        idx.nearest_free(1, -1)
    with pytest.raises(ValueError, match="near must be an"):
        idx.nearest_free(1, 1, near=(1.5, 2))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="near must be an"):
        idx.nearest_free(1, 1, near=(1, 2, 3))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="size must be an integer >= 1"):
        OccupancyIndex.empty(0)
    with pytest.raises(ValueError, match="occupied must be a 2-D array"):
        OccupancyIndex(np.zeros((2, 2, 2)))


def test_free_positions_matches_brute_force() -> None:
    rng = np.random.default_rng(3)
    mask = rng.random((30, 40)) < 0.08
    idx = OccupancyIndex(mask)
    for w, h in [(1, 1), (3, 2), (2, 5), (7, 7), (40, 1), (1, 30)]:
        got = idx.free_positions(w, h)
        assert got.shape == (30 - h + 1, 40 - w + 1)
        assert np.array_equal(got, brute_free_positions(mask, w, h))


def test_free_positions_for_rect_larger_than_grid_is_empty() -> None:
    idx = OccupancyIndex.empty(5)
    assert idx.free_positions(6, 1).size == 0
    assert idx.free_positions(1, 6).size == 0


def test_nearest_free_reuses_the_table() -> None:
    mask = np.zeros((50, 50), dtype=bool)
    mask[10:20, 10:20] = True
    idx = OccupancyIndex(mask)
    assert idx.nearest_free(5, 5, near=(12, 12)) == Rect(12, 5, 5, 5)
    assert idx.nearest_free(5, 5, near=(0, 0)) == Rect(0, 0, 5, 5)
    assert idx.rebuilds == 1


# ------------------------------------------------------ find_free_placement


def test_find_free_placement_on_empty_grid_returns_near() -> None:
    mask = np.zeros((100, 100), dtype=bool)
    assert find_free_placement(mask, 10, 20, near=(30, 40)) == Rect(30, 40, 10, 20)


def test_find_free_placement_moves_off_a_claim() -> None:
    mask = np.zeros((100, 100), dtype=bool)
    mask[Rect(40, 40, 20, 20).slices()] = True
    # Request at (45, 45), 10 x 10: nearest free top-left is above the claim
    # (y = 30, dy = 15); the left side is also 15 away (x = 30); (y, x) order picks above.
    got = find_free_placement(mask, 10, 10, near=(45, 45))
    assert got == Rect(45, 30, 10, 10)


def test_find_free_placement_ties_break_by_row_then_column() -> None:
    mask = np.ones((9, 9), dtype=bool)
    for x, y in [(4, 6), (6, 4), (2, 4), (4, 2)]:
        mask[y, x] = False
    # All four are 2 away from (4, 4); (y, x) smallest is (2, 4) -> x=4, y=2.
    assert find_free_placement(mask, 1, 1, near=(4, 4)) == Rect(4, 2, 1, 1)
    mask[2, 4] = True
    assert find_free_placement(mask, 1, 1, near=(4, 4)) == Rect(2, 4, 1, 1)


def test_find_free_placement_beyond_first_window() -> None:
    mask = np.ones((300, 300), dtype=bool)
    mask[130, 130] = False  # 42.4 away
    mask[100, 140] = False  # outside the first window on x, yet 40 away
    assert find_free_placement(mask, 1, 1, near=(100, 100)) == Rect(140, 100, 1, 1)
    mask[100, 140] = True
    assert find_free_placement(mask, 1, 1, near=(100, 100)) == Rect(130, 130, 1, 1)
    mask[130, 130] = True
    mask[299, 0] = False  # far corner, needs several window doublings
    assert find_free_placement(mask, 1, 1, near=(250, 10)) == Rect(0, 299, 1, 1)


def test_find_free_placement_counts_the_mask_only_when_a_window_is_empty(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A pass over the whole mask per refusal was a third of a storm's suggestion cost
    # at 1024 x 1024: it is made only once a window came back empty, for the early
    # "too few free cells" answer, which stays the same.
    counts: list[int] = []
    count_nonzero = np.count_nonzero

    def spy(a: object, *args: object, **kwargs: object) -> object:
        counts.append(1)
        return count_nonzero(a, *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(np, "count_nonzero", spy)
    mask = np.zeros((1024, 1024), dtype=bool)
    mask[500:508, 500:508] = True
    assert find_free_placement(mask, 8, 8, near=(500, 500)) == Rect(500, 492, 8, 8)
    assert counts == []
    full = np.ones((1024, 1024), dtype=bool)
    full[0, :] = False  # 1,024 free cells, more than 8 x 8, yet no 8 x 8 block
    assert find_free_placement(full, 8, 8, near=(500, 500)) is None
    assert find_free_placement(full, 40, 40, near=(500, 500)) is None  # too few: counted
    assert counts == [1, 1]


def test_find_free_placement_near_outside_grid() -> None:
    mask = np.zeros((20, 20), dtype=bool)
    assert find_free_placement(mask, 5, 5, near=(500, -300)) == Rect(15, 0, 5, 5)
    assert find_free_placement(mask, 5, 5, near=(-1, -1)) == Rect(0, 0, 5, 5)


def test_find_free_placement_none_cases() -> None:
    full = np.ones((50, 50), dtype=bool)
    assert find_free_placement(full, 1, 1) is None
    holes = np.ones((50, 50), dtype=bool)
    holes[::2, ::2] = False  # plenty of free cells, but no 2 x 2 block
    assert find_free_placement(holes, 2, 2, near=(25, 25)) is None
    assert find_free_placement(np.zeros((10, 10)), 11, 1) is None
    assert find_free_placement(np.zeros((10, 10)), 1, 11) is None


def test_find_free_placement_matches_brute_force_on_a_larger_grid() -> None:
    rng = np.random.default_rng(11)
    mask = np.zeros((200, 200), dtype=bool)
    for _ in range(150):
        x, y = rng.integers(0, 190, 2)
        w, h = rng.integers(1, 25, 2)
        mask[y : y + h, x : x + w] = True
    for w, h, near in [(8, 8, (100, 100)), (20, 3, (0, 199)), (3, 30, (150, 20)), (1, 1, (57, 91))]:
        assert find_free_placement(mask, w, h, near=near) == brute_nearest(mask, w, h, near)


def test_find_free_placement_in_a_crowd_matches_brute_force_at_every_edge() -> None:
    """A storm's grid: 8 x 8 claims packed until few places are left, searched from
    points inside, at the edges and outside it (windows clipped differently, the kept
    distance tables reused), each the brute-force nearest with its (y, x) tie rule; the
    kept tables stay read-only."""
    from barnraise.sim.geometry import _distances

    rng = np.random.default_rng(5)
    mask = np.zeros((160, 160), dtype=bool)
    for x, y in rng.integers(0, 153, size=(3000, 2)).tolist():
        if not mask[y : y + 8, x : x + 8].any():
            mask[y : y + 8, x : x + 8] = True
    assert 0.45 < mask.mean() < 0.9
    points = [*rng.integers(-12, 172, size=(150, 2)).tolist(), [0, 0], [152, 152], [0, 152]]
    for x, y in points:
        for w, h in ((8, 8), (8, 11), (1, 1)):
            assert find_free_placement(mask, w, h, near=(x, y)) == \
                brute_nearest(mask, w, h, (x, y)), (x, y, w, h)
    table = _distances(-16, 16, -16, 16)
    assert table is _distances(-16, 16, -16, 16) and table[0, 0] == 512 and table[16, 16] == 0
    with pytest.raises(ValueError, match="read-only"):
        table[16, 16] = 1


def test_find_free_placement_errors() -> None:
    mask = np.zeros((10, 10))
    with pytest.raises(ValueError, match="width must be an integer >= 1, got 0"):
        find_free_placement(mask, 0, 1)
    with pytest.raises(ValueError, match="height must be an integer >= 1"):
        find_free_placement(mask, 1, True)
    with pytest.raises(ValueError, match="near must be an"):
        find_free_placement(mask, 1, 1, near=5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="occupied must be a 2-D array"):
        find_free_placement(np.zeros(10), 1, 1)


@settings(max_examples=120, deadline=None)
@given(
    mask=hnp.arrays(bool, st.tuples(st.integers(1, 12), st.integers(1, 12))),
    width=st.integers(1, 6),
    height=st.integers(1, 6),
    near=st.tuples(st.integers(-5, 16), st.integers(-5, 16)),
)
def test_property_find_free_placement(
    mask: np.ndarray, width: int, height: int, near: tuple[int, int]
) -> None:
    got = find_free_placement(mask, width, height, near=near)
    expected = brute_nearest(mask, width, height, near)
    if got is None:
        assert expected is None
        return
    rows, cols = mask.shape
    assert (got.width, got.height) == (width, height)
    assert got.x2 <= cols and got.y2 <= rows
    assert not mask[got.slices()].any()
    assert got == expected


# ---------------------------------------------------------- free_rectangles


def test_free_rectangles_around_a_claim() -> None:
    region = np.zeros((100, 100), dtype=bool)
    region[:50, :50] = True
    assert free_rectangles(region, origin=(100, 200)) == [
        Rect(150, 200, 50, 50),
        Rect(100, 250, 100, 50),
    ]


def test_free_rectangles_trivial_cases() -> None:
    assert free_rectangles(np.zeros((4, 6), dtype=bool)) == [Rect(0, 0, 6, 4)]
    assert free_rectangles(np.ones((4, 6), dtype=bool)) == []
    assert free_rectangles(np.zeros((0, 3), dtype=bool)) == []
    assert free_rectangles([[0, 1, 0]]) == [Rect(0, 0, 1, 1), Rect(2, 0, 1, 1)]


@settings(max_examples=300, deadline=None)
@given(hnp.arrays(np.bool_, st.tuples(st.integers(1, 20), st.integers(1, 20))),
       st.integers(0, 50), st.integers(0, 50), st.booleans())
def test_free_rectangles_by_rows_and_vectorised_agree(mask: np.ndarray, ox: int, oy: int,
                                                     strided: bool) -> None:
    from barnraise.sim.geometry import _free_rectangles_numpy, _free_rectangles_scan

    if strided:  # a region of a larger grid is a view, not a contiguous array
        grid = np.ones((mask.shape[0] + 2, 2 * mask.shape[1] + 3), dtype=bool)
        grid[1:-1, 3::2] = mask
        mask = grid[1:-1, 3::2]
    scanned = _free_rectangles_scan(mask, ox, oy)
    assert scanned == _free_rectangles_numpy(mask, ox, oy)
    covered = np.zeros(mask.shape, dtype=int)
    for r in scanned:
        covered[r.y - oy:r.y - oy + r.height, r.x - ox:r.x - ox + r.width] += 1
    assert (covered == ~mask).all()  # disjoint, and exactly the free cells


def test_free_rectangles_errors() -> None:
    with pytest.raises(ValueError, match="occupied must be a 2-D array"):
        free_rectangles(np.zeros(5))
    with pytest.raises(ValueError, match="origin must be non-negative"):
        free_rectangles(np.zeros((2, 2)), origin=(-1, 0))
    with pytest.raises(ValueError, match="origin must be an"):
        free_rectangles(np.zeros((2, 2)), origin=(0,))  # type: ignore[arg-type]


@settings(max_examples=120, deadline=None)
@given(
    mask=hnp.arrays(bool, st.tuples(st.integers(1, 16), st.integers(1, 16))),
    origin=st.tuples(st.integers(0, 50), st.integers(0, 50)),
)
def test_property_free_rectangles_exact_disjoint_cover(
    mask: np.ndarray, origin: tuple[int, int]
) -> None:
    rects = free_rectangles(mask, origin=origin)
    count = coverage(rects, mask.shape, origin)
    assert count.max(initial=0) <= 1  # pairwise disjoint
    assert np.array_equal(count == 1, ~mask)  # union is exactly the free cells
    assert rects == sorted(rects, key=lambda r: (r.y, r.x))


def test_free_rectangles_large_random_mask_is_exact() -> None:
    rng = np.random.default_rng(5)
    mask = rng.random((300, 300)) < 0.3
    rects = free_rectangles(mask)
    count = coverage(rects, mask.shape, (0, 0))
    assert count.max() == 1
    assert np.array_equal(count == 1, ~mask)


@settings(max_examples=40, deadline=None)
@given(
    holes=st.lists(
        st.tuples(st.integers(0, 149), st.integers(0, 149), st.integers(1, 12), st.integers(1, 12)),
        max_size=6,
    ),
    width=st.integers(1, 8),
    height=st.integers(1, 8),
    near=st.tuples(st.integers(-20, 170), st.integers(-20, 170)),
)
def test_property_sparse_free_space_needs_wide_searches(
    holes: list[tuple[int, int, int, int]], width: int, height: int, near: tuple[int, int]
) -> None:
    # Mostly occupied grids push the search through several window widenings.
    mask = np.ones((150, 150), dtype=bool)
    for x, y, w, h in holes:
        mask[y : y + h, x : x + w] = False
    expected = brute_nearest(mask, width, height, near)
    assert find_free_placement(mask, width, height, near=near) == expected
    assert OccupancyIndex(mask).nearest_free(width, height, near=near) == expected
