"""Pictures of a run. matplotlib lives here and nowhere else.

Functions take plain data (numpy arrays, lists of dicts), never actors, so a
notebook can call them on a saved summary as easily as the CLI does on a live run.
"""

from __future__ import annotations

import pathlib
from collections.abc import Mapping, Sequence
from typing import Any, Final

import numpy as np

__all__ = ["TILE_COLOURS", "canvas_figure", "save_canvas_png"]

#: One colour per tile type (index = tile value): empty, system, code, data, shader,
#: cartridge, network, storage.
TILE_COLOURS: Final = ("#FFFFFF", "#37474F", "#1E88E5", "#43A047", "#8E24AA", "#FB8C00",
                       "#00ACC1", "#6D4C41")


def canvas_figure(
    tiles: np.ndarray[Any, Any],
    claims: Sequence[Mapping[str, Any]] = (),
    *,
    title: str = "",
    max_pixels: int = 1000,
) -> Any:
    """A matplotlib Figure: the tiles, and each claim outlined in its agent's colour.

    ``claims`` are dicts with ``bounds`` (x, y, width, height) and ``color``. A
    canvas larger than ``max_pixels`` a side is shown downsampled (every n-th cell).
    """
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.colors import ListedColormap
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle

    size = max(tiles.shape)
    step = max(1, -(-size // max_pixels))
    shown = tiles[::step, ::step]
    figure = Figure(figsize=(8, 8), dpi=100)
    axes = figure.add_subplot()
    cmap = ListedColormap(TILE_COLOURS)
    axes.imshow(shown, cmap=cmap, vmin=0, vmax=len(TILE_COLOURS) - 1, interpolation="nearest",
                extent=(0, tiles.shape[1], tiles.shape[0], 0))
    for claim in claims:
        bounds = claim["bounds"]
        axes.add_patch(Rectangle((bounds["x"], bounds["y"]), bounds["width"], bounds["height"],
                                 fill=False, edgecolor=claim.get("color", "#FF0000"),
                                 linewidth=2.5))
    axes.set_xlim(0, tiles.shape[1])
    axes.set_ylim(tiles.shape[0], 0)
    if title:
        axes.set_title(title)
    return figure


def save_canvas_png(path: str | pathlib.Path, tiles: np.ndarray[Any, Any],
                    claims: Sequence[Mapping[str, Any]] = (), *, title: str = "") -> None:
    """Write :func:`canvas_figure` to ``path`` as PNG."""
    canvas_figure(tiles, claims, title=title).savefig(str(path))
