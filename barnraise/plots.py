"""Pictures of a run and of a sweep: matplotlib Figures, never a backend switch.

The same objects as :mod:`sim.plots` (where they live and are documented): import
this module freely, matplotlib loads when a figure is first drawn.
"""

from sim.plots import (
    OUTCOME_COLOURS,
    STATUS_COLOURS,
    TILE_COLOURS,
    TILE_NAMES,
    canvas_animation,
    canvas_figure,
    dag_figure,
    gantt_figure,
    save_canvas_png,
    save_gif,
    sequence_figure,
    sweep_figure,
    t_critical,
    timeseries_figure,
)

__all__ = [
    "OUTCOME_COLOURS",
    "STATUS_COLOURS",
    "TILE_COLOURS",
    "TILE_NAMES",
    "canvas_animation",
    "canvas_figure",
    "dag_figure",
    "gantt_figure",
    "save_canvas_png",
    "save_gif",
    "sequence_figure",
    "sweep_figure",
    "t_critical",
    "timeseries_figure",
]
