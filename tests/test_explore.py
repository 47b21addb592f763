"""barnraise.explore: a scenario's PARAMS as widgets within its BOUNDS, and its run drawn.

The widgets are ipywidgets objects, exercised without a kernel (their values are plain
traits); the notebook that shows them in a kernel is tests/test_notebooks.py's.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import ipywidgets as widgets
import pytest

import barnraise
from barnraise.explorer import Explorer, control_for
from barnraise.scenarios import COUNT, FRACTION, GRID, RATE, Bound, ParamError, ScenarioError

SMALL: dict[str, Any] = {"grid_size": 24, "block": 12}
PNG = b"\x89PNG\r\n\x1a\n"


def test_every_parameter_gets_a_control_within_its_bound() -> None:
    explorer = barnraise.explore("kernel_build", seed=4)
    assert isinstance(explorer, Explorer) and isinstance(explorer, widgets.VBox)
    c = explorer.controls
    assert list(c) == list(explorer.module.PARAMS)
    assert explorer.values() == explorer.module.PARAMS and explorer.seed.value == 4
    assert isinstance(c["grid_size"], widgets.IntSlider)
    assert (c["grid_size"].min, c["grid_size"].max) == (GRID.low, GRID.high)
    assert isinstance(c["builders"], widgets.IntSlider)
    assert (c["builders"].min, c["builders"].max) == (COUNT.low, COUNT.high)
    assert isinstance(c["error_rate"], widgets.FloatSlider)
    assert (c["error_rate"].min, c["error_rate"].max) == (FRACTION.low, FRACTION.high)
    # a rate over nine decades: a logarithmic slider, its ends the bound's
    assert isinstance(c["tile_rate"], widgets.FloatLogSlider)
    assert 10 ** c["tile_rate"].min == pytest.approx(RATE.low)
    assert 10 ** c["tile_rate"].max == pytest.approx(RATE.high)
    assert isinstance(c["strategy"], widgets.Dropdown)
    assert list(c["strategy"].options) == ["parallel", "sequential", "cluster"]
    assert isinstance(c["shader"], widgets.Text)


def test_controls_for_each_kind_of_parameter() -> None:
    assert isinstance(control_for("on", True, None), widgets.Checkbox)
    # a number bounded only by "any number" (a billion either way) gets a text box
    assert isinstance(control_for("n", 3, None), widgets.IntText)
    assert isinstance(control_for("x", 0.5, None), widgets.FloatText)
    assert isinstance(control_for("wait", 2.0, Bound(low=0, high=60)), widgets.FloatSlider)
    listed = control_for("agents", [2, 4], Bound(choices=(2, 4, 8)))
    assert isinstance(listed, widgets.Text) and listed.value == "[2, 4]"


def test_a_bad_parameter_is_the_scenarios_own_error_and_changes_nothing() -> None:
    explorer = barnraise.explore("kernel_build")
    explorer.controls["grid_size"].value = 30
    shown = (explorer.values(), explorer.seed.value, explorer.status.value)
    for bad, match in (({"grid_size": 0}, "parameter grid_size: must be at least 1"),
                       ({"strategy": "spiral"}, "spiral"),
                       ({"colour": "red"}, "unknown parameter 'colour'"),
                       ({"seed": -1}, "seed")):
        with pytest.raises(ScenarioError, match=match):
            explorer.run(**bad)
        assert (explorer.values(), explorer.seed.value, explorer.status.value) == shown
        assert explorer.result is None and explorer.canvas.value == b""
    # within BOUNDS but refused by the scenario itself as it begins (error_rate < 1)
    with pytest.raises(ParamError, match="error_rate"):
        explorer.run(error_rate=1.0, **SMALL)
    assert (explorer.values(), explorer.seed.value, explorer.status.value) == shown
    with pytest.raises(ScenarioError, match="unknown scenario"):
        barnraise.explore("no_such_scenario")


def test_a_run_is_the_same_run_drawn_and_the_controls_show_what_ran() -> None:
    explorer = barnraise.explore("kernel_build")
    result = explorer.run(seed=1, **SMALL)
    alone = barnraise.run("kernel_build", seed=1, **SMALL)
    assert result.trace_digest == alone.trace_digest and result.success
    assert explorer.result is result
    assert explorer.values() == {**explorer.module.PARAMS, **SMALL} and explorer.seed.value == 1
    # read while it ran (kernel_build reports progress), then drawn once more at the end
    assert explorer.redraws >= 2 and len(explorer._live) == explorer.redraws - 1
    assert bytes(explorer.canvas.value).startswith(PNG)
    assert bytes(explorer.chart.value).startswith(PNG)
    assert explorer.status.value.startswith("succeeded: quiescent")
    assert "100.0% complete" in explorer.status.value


def test_the_button_runs_the_controls_and_shows_a_refusal() -> None:
    explorer = barnraise.explore("kernel_build")
    explorer.controls["grid_size"].value = 24
    explorer.controls["block"].value = 12
    explorer.seed.value = 1
    explorer.button.click()
    assert explorer.result is not None and explorer.result.success
    explorer.controls["error_rate"].value = 1.0  # within the slider, refused by the scenario
    explorer.button.click()
    assert explorer.status.value.startswith("<span style='color:#b00'>refused: ")
    assert "error_rate" in explorer.status.value


def test_without_ipywidgets_explore_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ipywidgets", None)  # import ipywidgets fails
    monkeypatch.delitem(sys.modules, "barnraise.explorer")
    with pytest.raises(ImportError, match=r"pip install 'barnraise\[notebook\]'"):
        barnraise.explore("kernel_build")
    monkeypatch.undo()
    importlib.import_module("barnraise.explorer")
