"""barnraise.plots: the canvas picture, with each claim outlined in its agent's colour."""

from __future__ import annotations

from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg

from barnraise.plots import TILE_COLOURS, canvas_figure, save_canvas_png

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


# -- every plot drawn from a real run, its content checked ----------------------------------

import math  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

import pytest  # noqa: E402
from PIL import Image  # noqa: E402

import barnraise  # noqa: E402
from barnraise.outputs import RunResult, sequence_window  # noqa: E402
from barnraise.plots import (  # noqa: E402
    TILE_NAMES,
    canvas_animation,
    dag_figure,
    gantt_figure,
    save_gif,
    sequence_figure,
    sweep_figure,
    t_critical,
    timeseries_figure,
)
from barnraise.sim.analyses import messages_frame  # noqa: E402


@pytest.fixture(scope="module")
def kernel() -> RunResult:
    return barnraise.run("kernel_build", seed=2, grid_size=60, interval=0.5, frame_size=30)


def _with_gid(figure: Any, gid: str) -> list[Any]:
    return [a for a in figure.findobj() if a.get_gid() == gid]


def test_the_canvas_legend_names_the_tile_kinds_and_each_claims_agent() -> None:
    result = barnraise.run("conflict_storm", seed=1)
    figure = canvas_figure(result.canvas(), result.claims)
    labels = [t.get_text() for t in figure.axes[0].get_legend().get_texts()]
    names = {c["agent_name"] for c in result.claims}
    assert len(names) == 8 and {f"claim: {n}" for n in names} <= set(labels)
    kinds = {int(v) for v in np.unique(result.canvas()) if v}
    assert [TILE_NAMES[k] for k in sorted(kinds)] == labels[:len(kinds)]


def test_gantt_has_one_bar_per_attempt_with_repairs_and_approval_waits() -> None:
    kernel = barnraise.run("kernel_build", seed=0)
    spans = kernel.task_intervals()
    figure = gantt_figure(spans)
    bars = _with_gid(figure, "attempt")
    assert len(bars) == len(spans) == 64  # 16 builds, 16 tests, 16 repairs, 16 retests
    hatched = [b for b in bars if b.get_hatch()]
    assert len(hatched) == spans["repair"].sum() == kernel.summary["metrics"]["repairs"]
    assert (spans["outcome"] == "failed").sum() == kernel.summary["tasks_failed"]
    approvals = barnraise.run("hitl_approval")
    spans = approvals.task_intervals()
    figure = gantt_figure(spans)
    waits = _with_gid(figure, "approval")
    assert len(waits) == spans["approval_start"].notna().sum() == 4
    # the timed-out approval waits until its deadline: the longest wait drawn
    assert max(w.get_width() for w in waits) == pytest.approx(10.0, abs=0.01)


def test_dag_has_a_point_per_task_and_an_arrow_per_dependency(kernel: RunResult) -> None:
    figure = dag_figure(kernel.tasks)
    points = sum(len(c.get_offsets()) for c in figure.axes[0].collections)
    assert points == len(kernel.tasks)
    arrows = _with_gid(figure, "dependency")
    assert len(arrows) == sum(len(t["dependencies"]) for t in kernel.tasks) > 0
    labels = {t.get_text().split(" (")[0] for t in figure.axes[0].get_legend().get_texts()}
    assert labels == {t["status"] for t in kernel.tasks}
    # columns by depth: every arrow points right, from a dependency to its dependent
    assert all(a.xy[0] > a.xyann[0] for a in arrows)


def test_sequence_has_lifelines_arrows_and_drops() -> None:
    with barnraise.Simulation(seed=4) as simu:
        a = simu.client("a")
        a.session_create(session_name="S", grid_size=10)
        d = simu.dispatcher
        d.send(d.message("a", "nobody", "status_update", {"x": 1}))  # a drop
        simu.settle()
        table = messages_frame(d.trace)
    figure = sequence_figure(table)
    agents = set(table["sender"]) | set(table["recipient"])
    assert len(_with_gid(figure, "lifeline")) == len(agents)
    assert len(_with_gid(figure, "message")) == (table["kind"] == "deliver").sum() > 0
    assert len(_with_gid(figure, "drop")) == (table["kind"] == "drop").sum() == 1
    short = sequence_figure(table, max_messages=3)
    assert len(_with_gid(short, "message")) + len(_with_gid(short, "drop")) == 3
    with pytest.raises(ValueError, match="max_messages"):
        sequence_figure(table, max_messages=0)


def test_the_sequence_window_spans_the_run_and_its_ticks_tell_rows_apart(
        kernel: RunResult) -> None:
    letters = kernel.messages()
    window = sequence_window(letters)
    assert 50 <= len(window) <= 60 and window["seq"].is_monotonic_increasing
    # every message type once, not only the setup's letters at t=0
    assert set(window["type"]) == set(letters["type"])
    assert window["t"].iloc[-1] == letters["t"].iloc[-1] > 0 == letters["t"].iloc[59]
    axes = sequence_figure(window).axes[0]
    labels = [t.get_text() for t in axes.get_yticklabels()]
    assert len(set(labels)) == len(labels)  # one instant's rows: their record numbers differ
    assert labels[0] == f"0  #{int(window['seq'].iloc[0])}"
    with pytest.raises(ValueError, match="size"):
        sequence_window(letters, size=0)


def test_timeseries_draws_one_line_per_measured_figure(kernel: RunResult) -> None:
    series = kernel.timeseries(kernel.session_id)
    figure = timeseries_figure(series)
    lines = [line for axes in figure.axes for line in axes.get_lines()]
    drawn = {line.get_label() for line in lines}
    assert {"completion_percent", "tiles_placed", "claims_active", "completed",
            "messages_delivered"} <= drawn
    assert "awaiting_approval" not in drawn  # never non-zero here: not drawn
    # A deterministic run without latency leaves no letter waiting at a sample: its
    # deepest mailbox is 0 throughout, and no flat panel of it is drawn ...
    assert series["mailbox_max"].dropna().eq(0).all() and "mailbox_max" not in drawn
    assert "deepest mailbox" not in {a.get_ylabel() for a in figure.axes}
    tiles = next(line for line in lines if line.get_label() == "tiles_placed")
    assert tiles.get_ydata()[-1] == kernel.summary["tiles_placed"]
    # ... while one that was ever above 0 is
    deeper = series.copy()
    deeper.loc[deeper["mailbox_max"].notna().idxmax(), "mailbox_max"] = 3
    again = timeseries_figure(deeper)
    assert "deepest mailbox" in {a.get_ylabel() for a in again.axes}
    assert max(line.get_ydata().max() for a in again.axes for line in a.get_lines()
               if line.get_label() == "mailbox_max") == 3


def test_sweep_plot_has_a_mean_line_and_band_per_mode() -> None:
    table = barnraise.sweep("conflict_storm", {"agents": [2, 4, 6],
                                               "coordination_mode": ["coordinated", "free"]},
                            range(3))
    figure = sweep_figure(table, x="agents", y="conflict_rate", hue="coordination_mode")
    lines = _with_gid(figure, "mean")
    assert len(lines) == 2 and len(_with_gid(figure, "interval")) == 2
    expected = table[table["coordination_mode"] == "free"].groupby("agents")["conflict_rate"]
    free = next(line for line in lines if line.get_label() == "coordination_mode=free")
    assert list(free.get_ydata()) == pytest.approx(list(expected.mean()))
    with pytest.raises(KeyError, match="no column 'nope'"):
        sweep_figure(table, x="agents", y="nope")
    assert t_critical(1) == 12.706 and t_critical(19) == 2.093 and t_critical(10**6) == 1.96
    with pytest.raises(ValueError, match="degrees of freedom must be at least 1"):
        t_critical(0)


def test_the_animation_has_one_gif_frame_per_recorded_frame(kernel: RunResult,
                                                            tmp_path: Any) -> None:
    assert kernel.metrics is not None
    frames = [f for f in kernel.metrics.frames if f.session_id == kernel.session_id]
    assert len(frames) == math.floor(kernel.summary["virtual_time"] / 0.5) + 1
    path = tmp_path / "build.gif"
    save_gif(canvas_animation(frames), path)
    with Image.open(path) as gif:
        assert gif.n_frames == len(frames)
    # the last frame is the finished canvas, downsampled
    assert (frames[-1].tiles == kernel.final_canvas[::frames[-1].step, ::frames[-1].step]).all()
    with pytest.raises(ValueError, match="no canvas frames"):
        canvas_animation([])


def test_no_plot_switches_the_users_backend() -> None:
    code = """
import matplotlib
matplotlib.use("svg")
import sys, barnraise
from barnraise import plots
r = barnraise.run("hitl_approval", frame_size=16, interval=2.0)
plots.canvas_figure(r.canvas(), r.claims); plots.gantt_figure(r.task_intervals())
plots.dag_figure(r.tasks); plots.sequence_figure(r.messages())
plots.timeseries_figure(r.timeseries())
import tempfile, os
plots.save_gif(plots.canvas_animation(r.metrics.frames), os.path.join(tempfile.mkdtemp(), "b.gif"))
print(matplotlib.get_backend(), "matplotlib.pyplot" in sys.modules)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["svg", "False"]



def test_a_figure_draws_itself_in_jupyter_without_any_backend() -> None:
    figure = canvas_figure(np.ones((10, 10), dtype=np.uint8))
    png = figure._repr_png_()
    assert png[:4] == b"\x89PNG" and len(png) > 1000


def _outside(figure: Any) -> list[str]:
    """What of ``figure`` (as last drawn) reaches past its edges: an axes' drawn ticks,
    labels, title and legend (its tight box), or a text of the figure's own."""
    renderer = figure._get_renderer()
    edge = figure.bbox
    parts = [(f"axes {i}", axes.get_tightbbox(renderer)) for i, axes in enumerate(figure.axes)]
    parts += [(text.get_text(), text.get_window_extent(renderer)) for text in figure.texts
              if text.get_text()]
    legends = [legend for axes in figure.axes for legend in [axes.get_legend()] if legend]
    parts += [(legend.get_title().get_text() or "legend", legend.get_window_extent(renderer))
              for legend in legends]
    return [name for name, box in parts
            if box.x0 < edge.x0 - 0.5 or box.x1 > edge.x1 + 0.5
            or box.y0 < edge.y0 - 0.5 or box.y1 > edge.y1 + 0.5]


def _white_rim(path: Any) -> bool:
    """Every pixel of the image's outermost rows and columns is white."""
    image = np.asarray(Image.open(path).convert("RGB"))
    rim = np.concatenate([image[0], image[-1], image[:, 0], image[:, -1]])
    return bool((rim == 255).all())


@pytest.mark.parametrize("size", [120, 1200])
def test_the_saved_canvas_clips_no_label_and_no_legend(tmp_path: Any, size: int) -> None:
    """Constrained layout in one pass left "100", "120" and the legend past the edges."""
    tiles = np.zeros((size, size), dtype=np.uint8)
    tiles[: size // 2] = 2
    claims = [{"bounds": {"x": 0, "y": 0, "width": 30, "height": 30}, "color": "#FF00FF",
               "agent_name": "builder-1"}]
    figure = canvas_figure(tiles, claims, title="kernel")
    path = tmp_path / "canvas.png"
    figure.savefig(path)
    labels = [t.get_text() for t in figure.axes[0].get_yticklabels()]
    assert str(size) in labels
    assert figure.axes[0].get_legend().get_title().get_text() == "tiles and claims"
    assert _outside(figure) == []
    assert _white_rim(path)


def test_the_run_figures_with_outside_legends_clip_nothing(kernel: RunResult,
                                                           tmp_path: Any) -> None:
    figures = {"timeseries": timeseries_figure(kernel.timeseries(kernel.session_id)),
               "dag": dag_figure(kernel.tasks), "gantt": gantt_figure(kernel.task_intervals()),
               "sequence": sequence_figure(kernel.messages())}
    for name, figure in figures.items():
        path = tmp_path / f"{name}.png"
        figure.savefig(path)
        assert _outside(figure) == [], name
        assert _white_rim(path), name
