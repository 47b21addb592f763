"""The public surface and the layers: names resolve with real types, imports look only down."""

from __future__ import annotations

import ast
import importlib
import pathlib

import pytest

from tests.helpers import mypy_says

ROOT = pathlib.Path(__file__).resolve().parents[1]

#: Lowest first: a module may import its own layer and those below it, never above.
LAYERS = ("sim", "actors", "scenarios", "barnraise")
#: Never imported by a layer: they sit beside the project, not in it.
OUTSIDE = ("benchmarks", "tests")


@pytest.mark.parametrize(
    "module", ["barnraise", "sim", "actors", "barnraise.actors.agents", "scenarios"]
)
def test_every_public_name_resolves_and_none_is_private(module: str) -> None:
    mod = importlib.import_module(module)
    assert len(set(mod.__all__)) == len(mod.__all__)
    for name in mod.__all__:
        assert not name.startswith("_"), name
        assert getattr(mod, name) is not None, name


def test_the_public_face_hands_on_the_real_objects() -> None:
    import barnraise
    import barnraise.actors.world
    import barnraise.runner
    import barnraise.sim.dispatch
    import barnraise.sim.messages

    assert barnraise.Simulation is barnraise.actors.world.Simulation
    assert barnraise.Client is barnraise.actors.world.Client
    assert barnraise.run is barnraise.runner.run
    assert barnraise.make_dispatcher is barnraise.sim.dispatch.make_dispatcher
    assert barnraise.Message is barnraise.sim.messages.Message
    assert not hasattr(importlib.import_module("barnraise.sim"), "__getattr__")  # no lazy names


def _imports(path: pathlib.Path) -> list[tuple[int, str]]:
    """Every module ``path`` imports, anywhere in it (top level, functions, lazy)."""
    tree = ast.parse(path.read_text(), str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
        elif isinstance(node, ast.ImportFrom) and node.level:
            found.append((node.lineno, "." * node.level + (node.module or "")))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "import_module" and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            found.append((node.lineno, node.args[0].value))
    return found


def layer_of(module: str) -> str:
    """The layer a module is in by its name: ``barnraise.sim.store`` is in ``sim``,
    ``barnraise.runner`` in ``barnraise``; any other name's first part."""
    parts = module.split(".")
    if parts[0] == "barnraise" and len(parts) > 1 and parts[1] in LAYERS[:-1]:
        return parts[1]
    return parts[0]


def layering_violations(root: pathlib.Path) -> list[str]:
    problems = []
    for rank, layer in enumerate(LAYERS):
        above = set(LAYERS[rank + 1:]) | set(OUTSIDE)
        for path in sorted((root / layer).rglob("*.py")):
            for line, module in _imports(path):
                if module.startswith("."):
                    problems.append(f"{path.relative_to(root)}:{line} relative import {module}")
                elif module.split(".")[0] in LAYERS[:-1]:
                    problems.append(f"{path.relative_to(root)}:{line} imports {module} by a "
                                    f"top-level name (installed, it is barnraise.{module})")
                elif layer_of(module) in above:
                    problems.append(f"{path.relative_to(root)}:{line} imports {module}, "
                                    f"a layer above {layer}")
    return problems


def test_no_import_looks_up_a_layer() -> None:
    assert sum(1 for layer in LAYERS for _ in (ROOT / layer).rglob("*.py")) >= 40
    assert layering_violations(ROOT) == []


def test_the_layering_check_catches_a_lazy_import_upward(tmp_path: pathlib.Path) -> None:
    for layer in LAYERS:
        (tmp_path / layer).mkdir()
    (tmp_path / "sim" / "engine.py").write_text(
        "def later():\n    from barnraise.actors.world import Simulation\n    return Simulation\n")
    (tmp_path / "actors" / "agent.py").write_text(
        "import importlib\nmod = importlib.import_module('barnraise.scenarios.kernel_build')\n")
    (tmp_path / "scenarios" / "fine.py").write_text(
        "import barnraise.sim.messages\nimport barnraise.actors.base\n"
    )
    found = layering_violations(tmp_path)
    assert len(found) == 2
    assert "sim/engine.py:2 imports barnraise.actors.world" in found[0]
    assert "actors/agent.py:2 imports barnraise.scenarios.kernel_build" in found[1]


#: The layers whose modules load each other at import, never later: a lazy import between
#: two of their modules hides a cycle (the application layer may defer an optional extra).
EAGER = ("sim", "actors", "scenarios")


def eager_modules(root: pathlib.Path) -> list[pathlib.Path]:
    """Every module of ``EAGER``'s layers, subpackages included."""
    return [path for layer in EAGER for path in sorted((root / layer).rglob("*.py"))]


def lazy_imports(root: pathlib.Path) -> list[str]:
    """Every import of the project's own code made inside a function of ``EAGER``."""
    problems = []
    for path in eager_modules(root):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue
            inner = ast.Module(body=node.body if isinstance(node.body, list) else [],
                               type_ignores=[])
            for line, module in _imports_of(inner):
                if module.startswith(".") or module.split(".")[0] in LAYERS:
                    problems.append(f"{path.relative_to(root)}:{line} imports {module} "
                                    "inside a function")
    return sorted(set(problems))


def _imports_of(tree: ast.AST) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            found.append((node.lineno, "." * node.level + (node.module or "")))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "import_module" and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            found.append((node.lineno, node.args[0].value))
    return found


def test_no_module_of_the_engine_actors_or_scenarios_imports_its_own_code_lazily() -> None:
    scanned = {path.relative_to(ROOT).as_posix() for path in eager_modules(ROOT)}
    # the stored log's readers and the services' folds of it are among those checked
    assert {"sim/store/writer.py", "sim/store/reader.py", "sim/log.py", "actors/stored/run.py",
            "actors/stored/resume.py",
            "actors/stored/rebuild.py", "actors/stored/index.py", "actors/stored/image.py",
            "actors/regions_log.py", "actors/taskqueue_log.py", "actors/coordinator_log.py",
            "actors/coordination_log.py"} <= scanned
    assert lazy_imports(ROOT) == []


def test_the_lazy_import_check_catches_one_and_lets_an_extra_be(tmp_path: pathlib.Path) -> None:
    for layer in LAYERS:
        (tmp_path / layer).mkdir()
    (tmp_path / "sim" / "store.py").write_text(
        "import json\n\nclass Run:\n    def world(self):\n"
        "        from barnraise.actors.stored.rebuild import world_at\n"
        "        return world_at(self)\n"
    )
    (tmp_path / "sim" / "canvas.py").write_text(
        "def figure():\n    import matplotlib.figure\n    return matplotlib.figure\n")
    (tmp_path / "actors" / "agent.py").write_text(
        "async def later():\n    import barnraise.actors.world\n")
    (tmp_path / "barnraise" / "cli.py").write_text("def main():\n    import barnraise.sim.store\n")
    assert lazy_imports(tmp_path) == [
        "actors/agent.py:2 imports barnraise.actors.world inside a function",
        "sim/store.py:5 imports barnraise.actors.stored.rebuild inside a function"]


def test_static_tools_see_the_real_types_of_the_public_names(tmp_path: pathlib.Path) -> None:
    # trio's lesson: a lazy __getattr__ turns a class into Any and hides every typo.
    snippet = tmp_path / "uses_barnraise.py"
    snippet.write_text(
        "import barnraise\n"
        "reveal_type(barnraise.Simulation)\n"
        "reveal_type(barnraise.run)\n"
        "reveal_type(barnraise.Client)\n"
        "simu = barnraise.Simulation(seed=1, bogus_option=1)\n"
        "other = barnraise.Simulation(seed='x')\n"
    )
    out, _, _ = mypy_says(snippet)
    assert "-> barnraise.actors.world.Simulation" in out, out
    assert "barnraise.outputs.RunResult" in out, out
    assert 'Revealed type is "Any"' not in out, out
    # and so a typo in a keyword or a wrong type is caught before anything runs
    assert 'Unexpected keyword argument "bogus_option"' in out, out
    assert 'Argument "seed" to "Simulation" has incompatible type "str"' in out, out


def test_every_data_file_the_packages_read_is_installed_with_them() -> None:
    # A file a package opens at run time (a plan YAML) must be package data, or
    # `pip install .` leaves it behind and only a checkout works.
    import fnmatch
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]
    for package in LAYERS:
        for path in (ROOT / package).rglob("*"):
            if not path.is_file() or path.suffix in (".py", ".pyc") or "__pycache__" in str(path):
                continue
            relative = path.relative_to(ROOT / package).as_posix()
            installed = package if package == "barnraise" else f"barnraise.{package}"
            assert any(fnmatch.fnmatch(relative, p) for p in patterns.get(installed, ())), (
                f"{package}/{relative} is not in [tool.setuptools.package-data]")


def test_the_public_face_is_the_names_a_user_needs_first() -> None:
    import barnraise
    import barnraise.gateway
    import barnraise.scenarios._kit

    assert sorted(barnraise.__all__) == sorted([
        "Simulation", "Client", "run", "RunResult", "open_run", "sweep", "connect", "Agent",
        "make_dispatcher", "Message", "Priority", "Trace",
        "DeliveryError", "RequestError", "WaitTimeout", "MessageError", "ParamError",
        "ScenarioError", "StoreError", "SweepError", "RemoteError", "ReporterError",
        "kit", "plots", "gateway", "show", "explore"])
    assert barnraise.gateway is importlib.import_module("barnraise.gateway")
    # the kit re-exports the objects where they live, every one of them; plots is the
    # application layer's own module, their one home
    assert barnraise.kit.__all__ == barnraise.scenarios._kit.__all__
    for name in barnraise.kit.__all__:
        assert getattr(barnraise.kit, name) is getattr(barnraise.scenarios._kit, name), name
    assert barnraise.plots is importlib.import_module("barnraise.plots")
    assert {getattr(barnraise.plots, name).__module__ for name in barnraise.plots.__all__
            if callable(getattr(barnraise.plots, name))} == {"barnraise.plots"}
    assert not (ROOT / "sim" / "plots.py").exists()  # the engine layer draws nothing
    for gone in ("TOOLS", "Registry", "Recorder", "resume", "list_scenarios", "Dispatcher"):
        assert not hasattr(barnraise, gone), gone
