"""Every notebook in notebooks/ runs top to bottom, and every figure in it is a picture.

A cell tagged ``figure`` must show an ``image/png``; one tagged ``animation`` an
``image/gif``; one tagged ``iframe`` an HTML IFrame of a page on 127.0.0.1 (``barnraise.show``);
one tagged ``widget`` an ipywidgets view (``barnraise.explore``); and any output that is
a matplotlib Figure must carry its PNG (a bare ``<Figure size ...>`` is the symptom of a
backend that cannot draw).
"""

from __future__ import annotations

import pathlib

import nbclient
import nbformat
import pytest

#: The MIME type under which Jupyter shows an ipywidgets widget.
WIDGET = "application/vnd.jupyter.widget-view+json"
NOTEBOOKS = sorted((pathlib.Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))


def _pictures(notebook: nbformat.NotebookNode) -> list[str]:
    """What is wrong with the notebook's pictures (empty: nothing)."""
    problems = []
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type != "code":
            continue
        tags = set(cell.get("metadata", {}).get("tags", ()))
        shown = [o.get("data", {}) for o in cell.get("outputs", [])
                 if o.get("output_type") in ("execute_result", "display_data")]
        if "figure" in tags and not any("image/png" in d for d in shown):
            problems.append(f"cell {index} (figure) shows no image/png")
        if "animation" in tags and not any("image/gif" in d for d in shown):
            problems.append(f"cell {index} (animation) shows no image/gif")
        if "iframe" in tags and not any(
                str(d.get("text/html", "")).startswith('<iframe src="http://127.0.0.1:')
                for d in shown):
            problems.append(f"cell {index} (iframe) shows no IFrame of a loopback page")
        if "widget" in tags and not any(WIDGET in d for d in shown):
            problems.append(f"cell {index} (widget) shows no widget")
        for data in shown:
            if str(data.get("text/plain", "")).startswith("<Figure") and "image/png" not in data:
                problems.append(f"cell {index} shows {data['text/plain']!r} and no picture")
    return problems


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs_and_draws_its_figures(path: pathlib.Path) -> None:
    notebook = nbformat.read(path, as_version=4)
    figures = [c for c in notebook.cells if "figure" in c.get("metadata", {}).get("tags", ())]
    assert figures, f"{path.name} has no cell tagged 'figure'"
    client = nbclient.NotebookClient(notebook, timeout=180, kernel_name="python3",
                                     resources={"metadata": {"path": str(path.parent.parent)}})
    client.execute()
    outputs = [o for cell in notebook.cells for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    assert _pictures(notebook) == []


def test_a_figure_cell_without_a_picture_is_caught() -> None:
    cell = nbformat.v4.new_code_cell("figure")
    cell.metadata["tags"] = ["figure"]
    cell.outputs = [nbformat.v4.new_output(
        "execute_result", data={"text/plain": "<Figure size 800x800 with 1 Axes>"},
        execution_count=1)]
    notebook = nbformat.v4.new_notebook(cells=[cell])
    assert _pictures(notebook) == [
        "cell 0 (figure) shows no image/png",
        "cell 0 shows '<Figure size 800x800 with 1 Axes>' and no picture"]


def test_an_iframe_or_widget_cell_that_shows_neither_is_caught() -> None:
    cells = []
    for tag in ("iframe", "widget"):
        cell = nbformat.v4.new_code_cell(tag)
        cell.metadata["tags"] = [tag]
        cell.outputs = [nbformat.v4.new_output(
            "execute_result", data={"text/plain": "<barnraise view>",
                                    "text/html": '<iframe src="http://example.org/">'},
            execution_count=1)]
        cells.append(cell)
    assert _pictures(nbformat.v4.new_notebook(cells=cells)) == [
        "cell 0 (iframe) shows no IFrame of a loopback page", "cell 1 (widget) shows no widget"]


def test_there_are_notebooks() -> None:
    assert {p.name for p in NOTEBOOKS} >= {"explore_a_run.ipynb", "load_experiments.ipynb",
                                           "explore.ipynb"}
