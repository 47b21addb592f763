"""Pictures of a run and of a sweep (the public ``barnraise.plots``). matplotlib lives
here and nowhere else, in the application layer: nothing in ``sim``, ``actors`` or
``scenarios`` draws. Import this module freely: matplotlib (an optional extra) loads
when a figure is first drawn, never at import.

Every function takes plain data (numpy arrays, lists of dicts, the DataFrames of
:mod:`barnraise.sim.metrics` and of a sweep), never actors, and returns a
``matplotlib.figure.Figure`` built with the object-oriented API (or, for the
animation, a ``FuncAnimation`` over such a Figure). **Nothing here selects or
switches a backend**: a Figure made this way needs none, so ``plt.show()`` and
a notebook's inline display keep working as the user set them up. Save with
``figure.savefig(path)``; in a notebook, a Figure as a cell's value is drawn as a
PNG, with or without ``%matplotlib inline``.

What a caller may rely on (the tests check it on real runs):

* :func:`canvas_figure`: the tiles, each claim outlined in its agent's colour,
  and a legend naming the tile kinds shown and the agent behind each outline.
* :func:`gantt_figure`: one row per agent, one bar per attempt at a task
  (gid ``attempt``) coloured by outcome, a repair hatched, each wait for an
  approval drawn over its attempt (gid ``approval``).
* :func:`dag_figure`: tasks placed by dependency depth (column = longest chain
  of dependencies below it), one point per task coloured by status, one arrow
  per dependency (gid ``dependency``).
* :func:`sequence_figure`: a lifeline per agent (gid ``lifeline``), one arrow
  per delivered message (gid ``message``), one cross per dropped one
  (gid ``drop``), in trace order from top to bottom.
* :func:`timeseries_figure`: one line per figure that has data, by panel.
* :func:`sweep_figure`: the mean of a figure against a parameter with a
  confidence band (Student's t across seeds), one line per value of ``hue``.
* :func:`canvas_animation` / :func:`save_gif`: the recorded canvas frames.
"""

from __future__ import annotations

import io
import math
import pathlib
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

import numpy as np

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.animation import FuncAnimation
    from matplotlib.figure import Figure

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

#: One colour per tile type (index = tile value): empty, system, code, data, shader,
#: cartridge, network, storage.
TILE_COLOURS: Final = ("#FFFFFF", "#37474F", "#1E88E5", "#43A047", "#8E24AA", "#FB8C00",
                       "#00ACC1", "#6D4C41")
TILE_NAMES: Final = ("empty", "system", "code", "data", "shader", "cartridge", "network",
                     "storage")

#: How an attempt at a task ended (Gantt chart).
OUTCOME_COLOURS: Final = {"completed": "#43A047", "failed": "#E53935", "cancelled": "#9E9E9E",
                          "requeued": "#FB8C00", "blocked": "#8E24AA",
                          "unfinished": "#90CAF9"}
APPROVAL_COLOUR: Final = "#FDD835"

#: A task's status (DAG).
STATUS_COLOURS: Final = {"pending": "#BDBDBD", "in_progress": "#1E88E5",
                         "awaiting_approval": "#FDD835", "completed": "#43A047",
                         "failed": "#E53935", "blocked": "#8E24AA", "cancelled": "#616161"}


def _figure(width: float, height: float, *, settle: bool = False) -> Figure:
    """A constrained-layout figure; ``settle``: laid out twice before it is saved."""
    from matplotlib.figure import Figure

    class ShownFigure(Figure):
        """A Figure that Jupyter draws as a PNG whatever backend is (or is not) active.

        A plain Figure has no picture of its own: IPython draws one only once the
        inline backend is switched on (``%matplotlib inline``, or importing pyplot),
        so a notebook that never did showed ``<Figure size ...>``. When a backend's
        formatter is registered it wins, and this method is not called.
        """

        def savefig(self, *args: Any, **kwargs: Any) -> None:
            """A settled figure is laid out once more before it is drawn into the file.

            One pass of constrained layout, on a canvas figure (a fixed-aspect image
            with a legend beside it) never drawn, left ``canvas.png``'s y labels
            ("100", "120") and its legend past the edges; a second pass, measuring
            what the first drew, keeps every label inside (tests/test_plots.py
            measures them against the figure's box). The other figures need no
            second pass (tested the same way), and it would cost them: 0.65 s of CPU
            became 1.01 s for a time series chart, 0.22 s became 0.29 s for the
            canvas (medians of 7, alternated).
            """
            if settle:
                self.draw_without_rendering()
            super().savefig(*args, **kwargs)

        def _repr_png_(self) -> bytes:
            buffer = io.BytesIO()
            self.savefig(buffer, format="png")
            return buffer.getvalue()

    return ShownFigure(figsize=(width, height), dpi=100, layout="constrained")


def canvas_figure(
    tiles: np.ndarray[Any, Any],
    claims: Sequence[Mapping[str, Any]] = (),
    *,
    title: str = "",
    max_pixels: int = 1000,
    legend: bool = True,
) -> Figure:
    """The tiles, and each claim outlined in its agent's colour, with a legend.

    ``claims`` are dicts with ``bounds`` (x, y, width, height), ``color`` and
    optionally ``agent_name`` (or ``agent_id``), which the legend shows. A canvas
    larger than ``max_pixels`` a side is shown downsampled (every n-th cell).
    """
    from matplotlib.colors import ListedColormap
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch, Rectangle

    size = max(tiles.shape)
    step = max(1, -(-size // max_pixels))
    shown = tiles[::step, ::step]
    figure = _figure(9 if legend else 8, 8, settle=True)
    axes = figure.add_subplot()
    cmap = ListedColormap(TILE_COLOURS)
    axes.imshow(shown, cmap=cmap, vmin=0, vmax=len(TILE_COLOURS) - 1, interpolation="nearest",
                extent=(0, tiles.shape[1], tiles.shape[0], 0))
    owners: dict[str, str] = {}
    for claim in claims:
        bounds = claim["bounds"]
        colour = claim.get("color", "#FF0000")
        axes.add_patch(Rectangle((bounds["x"], bounds["y"]), bounds["width"], bounds["height"],
                                 fill=False, edgecolor=colour, linewidth=2.5))
        who = str(claim.get("agent_name") or claim.get("agent_id") or "")
        if who:
            owners.setdefault(who, colour)
    axes.set_xlim(0, tiles.shape[1])
    axes.set_ylim(tiles.shape[0], 0)
    if title:
        axes.set_title(title)
    if legend:
        present = sorted(int(v) for v in np.unique(shown) if 0 < int(v) < len(TILE_COLOURS))
        handles: list[Any] = [Patch(facecolor=TILE_COLOURS[v], edgecolor="#000000",
                                    label=TILE_NAMES[v]) for v in present]
        handles += [Line2D([], [], color=colour, linewidth=2.5, label=f"claim: {who}")
                    for who, colour in owners.items()]
        if handles:
            axes.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0),
                        fontsize=8, title="tiles and claims")
    return figure


def save_canvas_png(path: str | pathlib.Path, tiles: np.ndarray[Any, Any],
                    claims: Sequence[Mapping[str, Any]] = (), *, title: str = "") -> None:
    """Write :func:`canvas_figure` to ``path`` as PNG."""
    canvas_figure(tiles, claims, title=title).savefig(str(path))


def gantt_figure(spans: pd.DataFrame, *, title: str = "") -> Figure:
    """Tasks per agent over time: :func:`barnraise.sim.analyses.task_intervals`'s table as bars.

    One row per agent (in order of first work), one bar per attempt coloured by
    its outcome; repairs are hatched; a wait for an approval is a yellow bar
    over its attempt.
    """
    from matplotlib.patches import Patch

    agents = list(dict.fromkeys(str(a) for a in spans["agent_id"]))
    # An agent working on several tasks at once gets a lane per overlapping attempt
    # (greedy: each attempt takes the first lane free at its start).
    lanes: dict[str, list[float]] = {a: [] for a in agents}
    lane_of: list[int] = []
    attempts: list[dict[str, Any]] = spans.to_dict("records")  # type: ignore[assignment]
    for attempt in attempts:
        start, end = float(attempt["start"]), float(attempt["end"])
        ends = lanes[str(attempt["agent_id"])]
        free = next((i for i, e in enumerate(ends) if e <= start), len(ends))
        if free == len(ends):
            ends.append(end)
        else:
            ends[free] = end
        lane_of.append(free)
    base: dict[str, int] = {}
    rows = 0
    for agent in agents:
        base[agent] = rows
        rows += max(1, len(lanes[agent]))
    figure = _figure(11, max(2.5, 0.4 * rows + 1.5))
    axes = figure.add_subplot()
    height = 0.7
    # An instant's work (a test) still gets a visible sliver: 0.4% of the chart.
    span = float(spans["end"].max() - spans["start"].min()) if len(spans) else 1.0
    least = max(span, 1e-9) * 0.004
    for task, lane in zip(attempts, lane_of, strict=True):
        y = base[str(task["agent_id"])] + lane
        start, end = float(task["start"]), float(task["end"])
        bar = axes.barh(y, max(end - start, least), left=start, height=height,
                        color=OUTCOME_COLOURS.get(str(task["outcome"]), "#000000"),
                        edgecolor="#212121", linewidth=0.5,
                        hatch="///" if task["repair"] else None)
        bar.patches[0].set_gid("attempt")
        waited = float(task["approval_start"])
        if not math.isnan(waited):
            until = float(task["approval_end"])
            until = end if math.isnan(until) else until
            wait = axes.barh(y, max(until - waited, least), left=waited, height=height * 0.45,
                             color=APPROVAL_COLOUR, edgecolor="#212121", linewidth=0.5)
            wait.patches[0].set_gid("approval")
    axes.set_yticks([base[a] + (max(1, len(lanes[a])) - 1) / 2 for a in agents], agents)
    for agent in agents[1:]:
        axes.axhline(base[agent] - 0.5, color="#E0E0E0", linewidth=0.8)
    axes.invert_yaxis()
    axes.set_xlabel("simulated seconds")
    outcomes = [o for o in OUTCOME_COLOURS if (spans["outcome"] == o).any()]
    handles: list[Any] = [Patch(color=OUTCOME_COLOURS[o], label=o) for o in outcomes]
    if spans["repair"].any():
        handles.append(Patch(facecolor="#FFFFFF", edgecolor="#212121", hatch="///",
                             label="repair"))
    if spans["approval_start"].notna().any():
        handles.append(Patch(color=APPROVAL_COLOUR, label="waiting for approval"))
    if handles:
        axes.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    axes.set_title(title or "tasks per agent")
    return figure


def _depths(tasks: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """Longest chain of dependencies below each task (0: it depends on nothing)."""
    deps = {str(t["task_id"]): [str(d) for d in t.get("dependencies", ())] for t in tasks}
    depth: dict[str, int] = {}
    for start in deps:
        stack = [start]
        while stack:  # iterative depth-first: no recursion limit on long chains
            node = stack[-1]
            if node in depth:
                stack.pop()
                continue
            todo = [d for d in deps.get(node, ()) if d in deps and d not in depth]
            if todo:
                stack.extend(todo)
                continue
            known = [depth[d] for d in deps.get(node, ()) if d in depth]
            depth[node] = 1 + max(known) if known else 0
            stack.pop()
    return depth


def dag_figure(tasks: Sequence[Mapping[str, Any]], *, title: str = "") -> Figure:
    """The task DAG: a column per dependency depth, a point per task coloured by status,
    an arrow from each dependency to the task that waits for it.

    ``tasks`` are dicts with ``task_id``, ``status``, ``dependencies`` and
    optionally ``type`` (shown as the point's label when there are few tasks).
    """
    depth = _depths(tasks)
    columns: dict[int, list[str]] = {}
    for task in tasks:
        columns.setdefault(depth[str(task["task_id"])], []).append(str(task["task_id"]))
    place: dict[str, tuple[float, float]] = {}
    for d, ids in columns.items():
        for i, task_id in enumerate(ids):
            place[task_id] = (float(d), -(i - (len(ids) - 1) / 2))
    tallest = max((len(ids) for ids in columns.values()), default=1)
    figure = _figure(max(6.0, 1.6 * len(columns) + 2), max(3.0, 0.28 * tallest + 1.5))
    axes = figure.add_subplot()
    for task in tasks:
        to = place[str(task["task_id"])]
        for dep in task.get("dependencies", ()):
            if str(dep) in place:
                arrow = axes.annotate("", xy=to, xytext=place[str(dep)],
                                      arrowprops={"arrowstyle": "-|>", "color": "#9E9E9E",
                                                  "linewidth": 0.7, "shrinkA": 4,
                                                  "shrinkB": 4})
                arrow.set_gid("dependency")
    by_status: dict[str, list[tuple[float, float]]] = {}
    for task in tasks:
        by_status.setdefault(str(task["status"]), []).append(place[str(task["task_id"])])
    for status, points in by_status.items():
        xs, ys = zip(*points, strict=True)
        axes.scatter(xs, ys, s=60, color=STATUS_COLOURS.get(status, "#000000"),
                     edgecolors="#212121", linewidths=0.5, zorder=3,
                     label=f"{status} ({len(points)})")
    if len(tasks) <= 30:
        for task in tasks:
            x, y = place[str(task["task_id"])]
            axes.annotate(str(task.get("type", "")), (x, y), textcoords="offset points",
                          xytext=(0, 7), ha="center", fontsize=7)
    axes.set_xticks(sorted(columns), [str(d) for d in sorted(columns)])
    axes.set_yticks([])
    axes.set_xlabel("dependency depth")
    if by_status:
        axes.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, title="status")
    axes.set_title(title or "task dependencies")
    return figure


def sequence_figure(messages: pd.DataFrame, *, agents: Sequence[str] | None = None,
                    title: str = "", max_messages: int = 60) -> Figure:
    """A message sequence diagram of :func:`barnraise.sim.analyses.messages_frame`'s table.

    A lifeline per agent (``agents``, or everyone who appears, in order of first
    appearance), an arrow per delivery from sender to recipient, a cross at the
    recipient per drop (labelled with its reason), top to bottom in trace order;
    the left axis shows each row's simulated time and, with a ``seq`` column, its trace
    record's number. At most ``max_messages`` rows
    are drawn (the first ones; the title says so when more were given).
    """
    if max_messages < 1:
        raise ValueError(f"max_messages must be at least 1, got {max_messages}")
    table = messages.iloc[:max_messages]
    names = list(agents) if agents is not None else list(dict.fromkeys(
        [str(n) for pair in zip(table["sender"], table["recipient"], strict=True)
         for n in pair]))
    column = {n: i for i, n in enumerate(names)}
    letters: list[dict[str, Any]] = table.to_dict("records")  # type: ignore[assignment]
    rows = [r for r in letters if str(r["sender"]) in column and str(r["recipient"]) in column]
    figure = _figure(max(6.0, 1.3 * len(names) + 2), max(4.0, 0.22 * len(rows) + 2))
    axes = figure.add_subplot()
    depth = len(rows) + 1
    for x in column.values():
        line = axes.plot([x, x], [0, depth], color="#BDBDBD", linewidth=1, zorder=1)[0]
        line.set_gid("lifeline")
    for y, r in enumerate(rows, start=1):
        x0, x1 = column[str(r["sender"])], column[str(r["recipient"])]
        if r["kind"] == "deliver":
            if x0 == x1:  # to itself: a small loop
                arrow = axes.annotate("", xy=(x1 + 0.02, y + 0.3), xytext=(x0 + 0.02, y),
                                      arrowprops={"arrowstyle": "-|>", "color": "#1E88E5",
                                                  "connectionstyle": "arc3,rad=-1.2"})
            else:
                arrow = axes.annotate("", xy=(x1, y), xytext=(x0, y),
                                      arrowprops={"arrowstyle": "-|>", "color": "#1E88E5",
                                                  "linewidth": 0.9})
            arrow.set_gid("message")
            axes.text((x0 + x1) / 2, y - 0.12, str(r["type"]), ha="center", va="bottom",
                      fontsize=6, color="#424242")
        else:
            axes.plot([x0, x1], [y, y], color="#E53935", linewidth=0.8, linestyle="--",
                      zorder=2)
            cross = axes.plot([x1], [y], marker="x", color="#E53935", markersize=9,
                              linestyle="none", zorder=4)[0]
            cross.set_gid("drop")
            axes.text(x1, y - 0.12, f"{r['type']}: {r['reason']}", ha="center", va="bottom",
                      fontsize=6, color="#E53935")
    axes.set_xticks(range(len(names)), names, rotation=30, ha="right")
    step = max(1, len(rows) // 20)
    ticks = list(range(1, len(rows) + 1, step))
    numbered = "seq" in table.columns  # many letters share an instant: their numbers differ
    axes.set_yticks(ticks, [f"{float(rows[i - 1]['t']):.4g}"
                            + (f"  #{int(rows[i - 1]['seq'])}" if numbered else "")
                            for i in ticks])
    axes.set_ylabel("simulated seconds" + ("  #trace record" if numbered else "")
                    + " (one row per letter, in trace order)")
    axes.set_ylim(depth, 0)
    more = len(messages) - len(table)
    heading = title or "messages"
    axes.set_title(heading + (f" (first {len(table)} of {len(messages)})" if more > 0 else ""))
    return figure


#: Panels of :func:`timeseries_figure`: title -> columns.
TIMESERIES_PANELS: Final = {
    "completion (%)": ("completion_percent",),
    "tiles placed": ("tiles_placed",),
    "claims and conflicts": ("claims_active", "conflicts"),
    "tasks by status": ("tasks_pending", "tasks_in_progress", "tasks_awaiting_approval",
                        "tasks_completed", "tasks_failed", "tasks_blocked", "tasks_cancelled"),
    "messages": ("messages_delivered", "messages_dropped"),
    "deepest mailbox": ("mailbox_max",),
}


#: Columns :func:`timeseries_figure` draws only when they were above 0 at some sample.
_DRAWN_ABOVE_0: Final = ("tasks_", "mailbox_max")


def timeseries_figure(series: pd.DataFrame, *, title: str = "",
                      panels: Mapping[str, Sequence[str]] | None = None) -> Figure:
    """The collector's figures over time, one panel per group, one line per column.

    ``series`` is :func:`barnraise.sim.metrics.timeseries_frame`'s table (one session's).
    A column is drawn from the rows that measured it, as steps, with the value
    each instant ended on (several events at one instant show as one step);
    columns with no data, and panels left empty, are not drawn. Nor are a task status
    never held and a deepest mailbox never above 0 (what a deterministic run without
    latency samples: no letter is left waiting at a sample, docs/experiments.md), which
    would be flat lines at 0.
    """
    chosen = dict(TIMESERIES_PANELS if panels is None else panels)
    drawn: dict[str, list[str]] = {}
    for name, cols in chosen.items():
        have = [c for c in cols if c in series.columns and series[c].notna().any()
                and (not c.startswith(_DRAWN_ABOVE_0) or bool((series[c].fillna(0) > 0).any()))]
        if have:
            drawn[name] = have
    figure = _figure(10, max(2.6, 2.2 * len(drawn)))
    if not drawn:
        axes = figure.add_subplot()
        axes.text(0.5, 0.5, "no samples", ha="center", va="center")
        return figure
    grid = figure.subplots(len(drawn), 1, sharex=True, squeeze=False)
    for axes, (name, cols) in zip(grid[:, 0], drawn.items(), strict=True):
        for col in cols:
            measured = series[series[col].notna()].drop_duplicates("t", keep="last")
            axes.plot(measured["t"].to_numpy(dtype=float), measured[col].to_numpy(dtype=float),
                      drawstyle="steps-post", label=col.removeprefix("tasks_"), linewidth=1.3)
        axes.set_ylabel(name, fontsize=8)
        if len(cols) > 1:
            axes.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    grid[-1, 0].set_xlabel("simulated seconds")
    figure.suptitle(title or "metrics over time")
    return figure


# Two-sided 95% critical values of Student's t by degrees of freedom (1..30, then
# 40, 60, 120, and the normal limit): enough for intervals across seeds, with no
# statistics library to install.
_T95: Final = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
               2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
               2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def t_critical(dof: int) -> float:
    """The two-sided 95% critical value of Student's t with ``dof`` degrees of freedom
    (a conservative step for degrees of freedom between the tabulated ones)."""
    if dof < 1:
        raise ValueError(f"degrees of freedom must be at least 1, got {dof}")
    if dof <= 30:
        return _T95[dof - 1]
    for limit, value in ((40, 2.042), (60, 2.021), (120, 2.000)):
        if dof <= limit:
            return value
    return 1.980 if dof <= 1000 else 1.960


def sweep_figure(results: pd.DataFrame, *, x: str, y: str, hue: str | None = None,
                 title: str = "", axes: Any = None) -> Figure:
    """``y`` against parameter ``x``: the mean across the rows (seeds) of each point and
    its 95% confidence interval (Student's t; no band for a single seed), one line per
    value of ``hue``. KeyError names a column that is not there.

    With ``axes`` (a matplotlib Axes) it draws there and returns that Axes' figure.
    """
    for name in (x, y, *(() if hue is None else (hue,))):
        if name not in results.columns:
            raise KeyError(f"no column {name!r} in the sweep results; columns: "
                           f"{', '.join(map(str, results.columns))}")
    figure = _figure(7, 4.5) if axes is None else axes.figure
    if axes is None:
        axes = figure.add_subplot()
    groups = [(None, results)] if hue is None else list(results.groupby(hue, sort=False))
    for key, part in groups:
        stats = part.groupby(x, sort=True)[y].agg(["mean", "std", "count"])
        xs = stats.index.to_numpy(dtype=float)
        mean = stats["mean"].to_numpy(dtype=float)
        half = np.array([t_critical(int(n) - 1) * s / math.sqrt(n) if n > 1 else 0.0
                         for s, n in zip(stats["std"].fillna(0.0), stats["count"],
                                         strict=True)])
        label = y if key is None else f"{hue}={key!s}"
        line = axes.plot(xs, mean, marker="o", label=label)[0]
        line.set_gid("mean")
        band = axes.fill_between(xs, mean - half, mean + half, alpha=0.2,
                                 color=line.get_color(), linewidth=0)
        band.set_gid("interval")
    axes.set_xlabel(x)
    axes.set_ylabel(f"{y} (mean, 95% CI)")
    if hue is not None:
        axes.legend(fontsize=8)
    axes.set_title(title or f"{y} against {x}")
    return figure


def canvas_animation(frames: Sequence[Any], *, title: str = "",
                     interval_ms: int = 200) -> FuncAnimation:
    """The build as an animation: one frame per recorded canvas frame.

    ``frames`` are :class:`barnraise.sim.metrics.Frame` values (``t``, ``tiles``). Save it
    with :func:`save_gif`; ``animation.to_jshtml()`` shows it in a notebook.
    ValueError when there is no frame.
    """
    from matplotlib.animation import FuncAnimation
    from matplotlib.colors import ListedColormap

    if not frames:
        raise ValueError("no canvas frames: record the run with frame_size > 0")
    figure = _figure(5, 5.3)
    axes = figure.add_subplot()
    image = axes.imshow(frames[0].tiles, cmap=ListedColormap(TILE_COLOURS), vmin=0,
                        vmax=len(TILE_COLOURS) - 1, interpolation="nearest")
    axes.set_xticks([])
    axes.set_yticks([])
    heading = axes.set_title("")

    def draw(i: int) -> tuple[Any, ...]:
        image.set_data(frames[i].tiles)
        heading.set_text(f"{title + ': ' if title else ''}t = {float(frames[i].t):g} s")
        return image, heading

    draw(0)
    return FuncAnimation(figure, draw, frames=len(frames), interval=interval_ms, blit=False,
                         repeat=False)


def save_gif(animation: FuncAnimation, path: str | pathlib.Path, *, fps: int = 5) -> None:
    """Write ``animation`` to ``path`` as a GIF (Pillow, which matplotlib installs)."""
    from matplotlib.animation import PillowWriter

    animation.save(str(path), writer=PillowWriter(fps=fps))
