"""Exploring a scenario in Jupyter: its parameters as widgets, its run drawn as it goes.

:func:`barnraise.explore` makes an :class:`Explorer`, an ``ipywidgets`` box (the
``barnraise[notebook]`` extra): one control per parameter of the scenario's ``PARAMS``,
within its ``BOUNDS`` (a choice for a bound with choices, a checkbox for a flag, a
slider for a number bounded on both sides, a text box for the rest), a seed, a Run
button, and below them the canvas, the time series and a status line.

What a caller may rely on:

* :meth:`Explorer.run` checks the parameters as :func:`barnraise.run` does, before
  anything runs: a bad one raises the scenario's own error
  (:class:`~barnraise.scenarios.ScenarioError`, :class:`~barnraise.scenarios.ParamError`)
  and changes neither the controls nor what is shown. A good run sets the controls to
  the values it ran with.
* The run is deterministic, on the calling thread (the cell runs until it ends), and is
  the run :func:`barnraise.run` makes with the same scenario, seed and parameters (the
  same trace digest): the explorer only reads the world when the scenario reports
  progress (``Simulation.report_progress``: kernel_build, grid_build, conflict_storm),
  at most :data:`REDRAW` times a wall second, through the read API, which sends no
  message. At the end the canvas is the run's final one and the chart the run's
  ``timeseries()``. The last :class:`~barnraise.outputs.RunResult` is :attr:`result`.
"""

from __future__ import annotations

import io
import math
import time
from collections.abc import Mapping
from types import ModuleType
from typing import Any, Final

import ipywidgets as widgets
import pandas as pd

from barnraise.actors.world import Simulation
from barnraise.loading import load
from barnraise.outputs import RunResult
from barnraise.plots import canvas_figure, timeseries_figure
from barnraise.scenarios import ANY_NUMBER, Bound

__all__ = ["REDRAW", "Explorer"]

#: Redraws a wall second, at most, while a run goes (each draws two small figures).
REDRAW: Final = 2.0
#: A number parameter gets a slider when its bound spans at most this much (a float
#: bounded above 0 over three decades or more, a logarithmic one); past it, a text box
#: checked against the bound (a slider over a billion values moves nowhere).
SLIDER_SPAN: Final = 1e6
#: The figures the chart shows while a run goes (what a read of the world gives).
LIVE_PANELS: Final = {"completion (%)": ("completion_percent",),
                      "tiles placed": ("tiles_placed",),
                      "claims and conflicts": ("claims_active", "conflicts"),
                      "tasks completed": ("tasks_completed",)}


def _png(figure: Any) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=60)
    return buffer.getvalue()


def control_for(name: str, default: Any, bound: Bound | None) -> Any:
    """The widget for one parameter: its default, within its bound (module doc)."""
    style = {"description_width": "initial"}
    if bound is not None and bound.choices is not None and not isinstance(default, list):
        return widgets.Dropdown(options=list(bound.choices), value=default, description=name,
                                style=style)
    if isinstance(default, bool):
        return widgets.Checkbox(value=default, description=name, style=style)
    if isinstance(default, (int, float)):
        b = bound if bound is not None else ANY_NUMBER
        low = b.low if b.low is not None else b.above
        high = b.high
        whole = isinstance(default, int)
        if not whole and low is not None and high is not None and low > 0 \
                and high / low >= 1000 and default > 0:  # a rate: its decades evenly spread
            return widgets.FloatLogSlider(value=default, base=10, min=math.log10(low),
                                          max=math.log10(high), step=0.01,
                                          description=name, style=style,
                                          continuous_update=False)
        if low is not None and high is not None and high - low <= SLIDER_SPAN:
            if whole:
                return widgets.IntSlider(value=default, min=math.ceil(low), max=math.floor(high),
                                         description=name, style=style,
                                         continuous_update=False)
            return widgets.FloatSlider(value=default, min=low, max=high,
                                       step=(high - low) / 1000, readout_format=".4g",
                                       description=name, style=style,
                                       continuous_update=False)
        kind = widgets.IntText if whole else widgets.FloatText
        return kind(value=default, description=name, style=style)
    if isinstance(default, str):
        return widgets.Text(value=default, description=name, style=style)
    # a list, a dict or None: JSON text, read as the CLI reads --param
    import json

    return widgets.Text(value=json.dumps(default), description=name, style=style)


class Explorer(widgets.VBox):  # type: ignore[misc]  # ipywidgets has no types
    """A scenario's parameters as controls, a Run button, and its run drawn (module doc)."""

    def __init__(self, scenario: str, *, seed: int = 0) -> None:
        module: ModuleType = load(scenario)
        self.scenario = scenario
        self.module = module
        bounds: Mapping[str, Bound] = getattr(module, "BOUNDS", {})
        #: One control per parameter, by name.
        self.controls: dict[str, Any] = {
            name: control_for(name, default, bounds.get(name))
            for name, default in module.PARAMS.items()}
        self.seed = widgets.IntText(value=seed, description="seed")
        self.button = widgets.Button(description="Run", button_style="primary")
        self.button.on_click(self._clicked)
        self.status = widgets.HTML(value="not run yet")
        self.canvas = widgets.Image(format="png")
        self.chart = widgets.Image(format="png")
        #: The last run's result (None before the first).
        self.result: RunResult | None = None
        #: Times the canvas and chart were drawn during and after the last run.
        self.redraws = 0
        self._last_draw = -math.inf
        self._live: list[dict[str, Any]] = []
        super().__init__([
            widgets.HTML(value=f"<b>{scenario}</b>"),
            widgets.HBox([widgets.VBox(list(self.controls.values())),
                          widgets.VBox([self.seed, self.button])]),
            self.status,
            widgets.HBox([self.canvas, self.chart]),
        ])

    def values(self) -> dict[str, Any]:
        """The parameters as the controls set them."""
        return {name: control.value for name, control in self.controls.items()}

    def _clicked(self, _button: Any) -> None:
        try:
            self.run()
        except ValueError as exc:  # the scenario's refusal, shown where it was asked
            self.status.value = f"<span style='color:#b00'>refused: {_escape(str(exc))}</span>"

    def run(self, seed: int | None = None, **params: Any) -> RunResult:
        """Run the scenario with the controls' values overlaid by ``params`` (and ``seed``,
        default the seed control's), drawing it as it goes; the run's result."""
        from barnraise.runner import check_request, run_request

        chosen = self.seed.value if seed is None else seed
        # The scenario's own checks, before anything runs or any control moves.
        request = check_request(self.scenario, chosen, **{**self.values(), **params})
        before = (self.values(), self.seed.value, self.status.value)
        self._set(request.params, chosen)
        self._live = []
        self.redraws = 0
        self._last_draw = -math.inf
        self.status.value = f"running {self.scenario} (seed {chosen})..."
        simulation: list[Simulation] = []

        def watch(simu: Simulation) -> Any:
            simulation.append(simu)
            return lambda: None

        def progress(fraction: float) -> None:
            now = time.monotonic()
            if simulation and now - self._last_draw >= 1.0 / REDRAW:
                self._last_draw = now
                self._draw_live(simulation[0], fraction)

        try:
            result = run_request(request, progress=progress, watch=watch)
        except ValueError:  # the scenario refused its parameters (ParamError) as it began
            self._set(before[0], before[1])
            self.status.value = before[2]
            raise
        self.result = result
        self._draw_result(result)
        return result

    def _set(self, params: Mapping[str, Any], seed: int) -> None:
        for name, value in params.items():
            control = self.controls[name]
            control.value = value if not isinstance(control, widgets.Text) or \
                isinstance(value, str) else _as_text(value)
        self.seed.value = seed

    def _draw_live(self, simu: Simulation, fraction: float) -> None:
        """The world as it stands (the read API: no message, the trace unchanged)."""
        sessions = simu.sessions()
        if not sessions:
            return
        view = simu.view(sessions[0], completion=True)
        p = view.progress
        self._live.append({"t": simu.now, "completion_percent": p.completion_percent,
                           "tiles_placed": p.tiles_placed, "claims_active": len(view.claims),
                           "conflicts": p.conflicts,
                           "tasks_completed": view.task_counts().get("completed", 0)})
        if view.canvas is not None:
            self.canvas.value = _png(canvas_figure(view.canvas, legend=False,
                                                   title=f"t = {simu.now:.1f} s"))
        self.chart.value = _png(timeseries_figure(pd.DataFrame(self._live),
                                                  panels=LIVE_PANELS))
        self.status.value = f"running {self.scenario}: {100 * fraction:.0f}%"
        self.redraws += 1

    def _draw_result(self, result: RunResult) -> None:
        summary = result.summary
        if result.final_canvas is not None:
            self.canvas.value = _png(canvas_figure(result.final_canvas, result.claims,
                                                   legend=False,
                                                   title=f"t = {summary['virtual_time']:g} s"))
        if result.metrics is not None:
            self.chart.value = _png(timeseries_figure(result.timeseries(result.session_id)))
        completion = summary["completion_percent"]
        self.status.value = (
            f"{'succeeded' if result.success else 'failed'}: {summary['run_end']} at "
            f"t={summary['virtual_time']:g} s, "
            + (f"{completion:.1f}% complete, " if completion is not None else "")
            + f"{summary['tiles_placed']} tiles, {summary['conflicts']} conflicts, "
            f"{summary['tasks_completed']} tasks completed")
        self.redraws += 1


def _as_text(value: Any) -> str:
    import json

    return json.dumps(value)


def _escape(text: str) -> str:
    import html

    return html.escape(text)
