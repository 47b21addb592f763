"""The public surface: every exported name resolves, nothing private leaks."""

from __future__ import annotations

import ast
import importlib
import pathlib

import pytest


@pytest.mark.parametrize("module", ["sim", "actors", "actors.agents"])
def test_every_public_name_resolves_and_none_is_private(module: str) -> None:
    mod = importlib.import_module(module)
    assert len(set(mod.__all__)) == len(mod.__all__)
    for name in mod.__all__:
        assert not name.startswith("_"), name
        assert getattr(mod, name) is not None, name


# The application layer of sim/ wires actors together; everything else in sim/
# is the engine, which actors build on and which must never import them.
APPLICATION_MODULES = {"cli.py", "demo.py", "simulation.py", "experiment.py"}


def _imported_modules(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def test_the_engine_never_imports_the_actors() -> None:
    engine = [p for p in pathlib.Path("sim").rglob("*.py") if p.name not in APPLICATION_MODULES]
    assert len(engine) >= 8
    for path in engine:
        modules = _imported_modules(path)
        assert not any(m == "actors" or m.startswith("actors.") for m in modules), path


def test_every_data_file_the_packages_read_is_installed_with_them() -> None:
    # A file a package opens at run time (a plan YAML) must be package data, or
    # `pip install .` leaves it behind and only a checkout works.
    import fnmatch
    import tomllib

    root = pathlib.Path(__file__).resolve().parents[1]
    config = tomllib.loads((root / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]
    for package in ("sim", "actors", "scenarios"):
        for path in (root / package).rglob("*"):
            if not path.is_file() or path.suffix in (".py", ".pyc") or "__pycache__" in str(path):
                continue
            relative = path.relative_to(root / package).as_posix()
            assert any(fnmatch.fnmatch(relative, p) for p in patterns.get(package, ())), (
                f"{package}/{relative} is not in [tool.setuptools.package-data]")
