"""The public surface: every exported name resolves, nothing private leaks."""

from __future__ import annotations

import importlib

import pytest


@pytest.mark.parametrize("module", ["sim", "actors"])
def test_every_public_name_resolves_and_none_is_private(module: str) -> None:
    mod = importlib.import_module(module)
    assert len(set(mod.__all__)) == len(mod.__all__)
    for name in mod.__all__:
        assert not name.startswith("_"), name
        assert getattr(mod, name) is not None, name


# The application layer of sim/ wires actors together; everything else in sim/
# is the engine, which actors build on and which must never import them.
APPLICATION_MODULES = {"cli.py", "demo.py", "simulation.py", "experiment.py"}


def test_the_engine_never_imports_the_actors() -> None:
    import pathlib

    engine = [p for p in pathlib.Path("sim").rglob("*.py") if p.name not in APPLICATION_MODULES]
    assert len(engine) >= 8
    for path in engine:
        text = path.read_text()
        assert "from actors" not in text and "import actors" not in text, path
