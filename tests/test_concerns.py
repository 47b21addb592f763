"""Rooms with one concern: each concern below is defined in one module, its own.

A concern is named by the top-level names that make it up. Each must be defined (a
``def``, ``class`` or assignment at module level) in the module listed for it and in
no other module of the project, so that a module which once held several concerns
cannot quietly grow one back beside its own.
"""

from __future__ import annotations

import ast
import functools
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
LAYERS = ("sim", "actors", "scenarios", "barnraise")

#: concern -> (its module's path, the names that make it up)
CONCERNS: dict[str, tuple[str, tuple[str, ...]]] = {
    "the tool table": ("sim/tools.py", ("TOOLS", "Tool", "RESULT_KEYS", "FAILURE_KEYS",
                                        "READ_ONLY_TOOLS", "ERROR_CODES")),
    "argument validation": ("sim/validation.py", ("validate", "validator",
                                                  "compile_schema")),
    "session binding": ("sim/binding.py", ("prepare_call", "bound_session_after",
                                           "TAKES_SESSION", "BINDING_TOOLS")),
    "topic names": ("sim/messages.py", ("topic_name", "session_topic")),
    "the store's schema and migrations": ("sim/store/migrations.py", (
        "SCHEMA_VERSION", "MIGRATIONS", "migrate", "fresh_image")),
    "what a store file holds": ("sim/store/files.py", ("check_store", "RunInfo",
                                                        "StoreError", "reading")),
    "the resume check": ("sim/store/divergence.py", ("Divergence", "ResumeCheck",
                                                     "first_difference")),
    "the store's writer": ("sim/store/writer.py", ("Store", "SNAPSHOT_EVERY",
                                                   "GROUP_SECONDS")),
    "the store's reader": ("sim/store/reader.py", ("StoredLog", "read_snapshot")),
    "figures (the application layer's)": ("barnraise/plots.py", (
        "canvas_figure", "gantt_figure", "timeseries_figure", "sweep_figure",
        "TILE_COLOURS", "STATUS_COLOURS")),
}


def top_level_names(path: pathlib.Path) -> set[str]:
    """The names a module defines at its top level (functions, classes, assignments)."""
    return set(_top_level_names(path, path.stat().st_mtime_ns))


@functools.cache
def _top_level_names(path: pathlib.Path, mtime_ns: int) -> frozenset[str]:
    # (each parametrized case reads every module: parse each once a version of its file)
    names: set[str] = set()
    for node in ast.parse(path.read_text(), str(path)).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return frozenset(names)


def homes(root: pathlib.Path, names: tuple[str, ...]) -> dict[str, list[str]]:
    """Each name -> the project modules (paths from ``root``) that define it."""
    found: dict[str, list[str]] = {name: [] for name in names}
    for layer in LAYERS:
        for path in sorted((root / layer).rglob("*.py")):
            defined = top_level_names(path)
            for name in names:
                if name in defined:
                    found[name].append(path.relative_to(root).as_posix())
    return found


@pytest.mark.parametrize("concern", sorted(CONCERNS))
def test_each_concern_is_defined_in_its_own_module_only(concern: str) -> None:
    module, names = CONCERNS[concern]
    assert homes(ROOT, names) == {name: [module] for name in names}


def test_the_check_sees_a_concern_grown_back_beside_another(tmp_path: pathlib.Path) -> None:
    for layer in LAYERS:
        (tmp_path / layer).mkdir()
    (tmp_path / "sim" / "tools.py").write_text(
        "TOOLS = {}\n\ndef validate(tool, args):\n    return args\n")
    (tmp_path / "sim" / "validation.py").write_text("def validate(tool, args):\n    return args\n")
    assert homes(tmp_path, ("TOOLS", "validate")) == {
        "TOOLS": ["sim/tools.py"], "validate": ["sim/tools.py", "sim/validation.py"]}
