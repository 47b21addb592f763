"""sim/plots.py: the canvas picture, with each claim outlined in its agent's colour."""

from __future__ import annotations

from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg

from sim.plots import TILE_COLOURS, canvas_figure, save_canvas_png

MAGENTA = (255, 0, 255)  # a claim colour no tile type uses


def pixels(figure: Any) -> np.ndarray[Any, Any]:
    canvas = FigureCanvasAgg(figure)
    canvas.draw()
    return np.asarray(canvas.buffer_rgba())[..., :3]


def count(image: np.ndarray[Any, Any], rgb: tuple[int, int, int]) -> int:
    return int(np.count_nonzero((image == np.array(rgb, dtype=np.uint8)).all(axis=-1)))


def rgb(hex_colour: str) -> tuple[int, int, int]:
    value = hex_colour.lstrip("#")
    return int(value[0:2], 16), int(value[2:4], 16), int(value[4:6], 16)


def test_tiles_are_drawn_in_their_colours_and_claims_outlined_in_theirs() -> None:
    tiles = np.zeros((40, 40), dtype=np.uint8)
    tiles[:20, :] = 2  # code
    tiles[20:, :20] = 3  # data
    claim = {"bounds": {"x": 22, "y": 22, "width": 10, "height": 10}, "color": "#FF00FF"}
    plain = pixels(canvas_figure(tiles))
    outlined = pixels(canvas_figure(tiles, [claim]))
    for code in (2, 3):
        assert count(plain, rgb(TILE_COLOURS[code])) > 1000
    assert count(plain, MAGENTA) == 0
    assert count(outlined, MAGENTA) > 100
    # the outline is where the claim is: in the lower right quarter of the axes
    ys, xs = np.nonzero((outlined == np.array(MAGENTA, dtype=np.uint8)).all(axis=-1))
    top, bottom = ys.min(), ys.max()
    left, right = xs.min(), xs.max()
    code_rows = np.nonzero((plain == np.array(rgb(TILE_COLOURS[2]),
                                              dtype=np.uint8)).all(axis=-1))[0]
    assert top > code_rows.max()  # below the code half
    assert right - left > 20 and bottom - top > 20  # a box, not a dot


def test_a_large_canvas_is_downsampled_and_written_as_png(tmp_path: Any) -> None:
    tiles = np.ones((3000, 3000), dtype=np.uint8)
    figure = canvas_figure(tiles, max_pixels=1000)
    assert figure.axes[0].images[0].get_array().shape == (1000, 1000)
    path = tmp_path / "canvas.png"
    save_canvas_png(path, tiles[:50, :50], [{"bounds": {"x": 0, "y": 0, "width": 5,
                                                         "height": 5}, "color": "#00FF00"}],
                    title="t")
    assert path.read_bytes()[:4] == b"\x89PNG"
