"""The layers are installed as barnraise.sim, barnraise.actors and barnraise.scenarios, so a
user's own ``sim.py``, ``actors.py`` or ``scenarios/`` package in the working folder
breaks neither ``import barnraise`` nor the ``barnraise`` command (issue 24 item 6)."""

from __future__ import annotations

import ast
import json
import os
import pathlib
import subprocess
import sys
import textwrap

import barnraise
from tests.test_public_api import layering_violations

ROOT = pathlib.Path(__file__).resolve().parents[1]
LAYERS = ("sim", "actors", "scenarios")
#: The folder the barnraise under test is imported from (a checkout or site-packages).
HOME = pathlib.Path(barnraise.__file__).resolve().parents[1]
SMALL = ["--param", "grid_size=16", "--param", "block=8"]


def _users_folder(folder: pathlib.Path) -> None:
    """A researcher's folder with modules of the three names: each says whose it is, and
    the user's scenarios/kernel_build.py refuses to run."""
    (folder / "sim.py").write_text("OWNER = 'user'\n")
    (folder / "actors.py").write_text("OWNER = 'user'\n")
    (folder / "scenarios").mkdir()
    (folder / "scenarios" / "__init__.py").write_text("OWNER = 'user'\n")
    (folder / "scenarios" / "my_scenario.py").write_text("PARAMS = {}\n")
    (folder / "scenarios" / "kernel_build.py").write_text(
        "raise RuntimeError('the user\\'s scenarios/kernel_build.py was imported')\n")


def _python(folder: pathlib.Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python ARGS`` run in ``folder`` (first on its sys.path, as for a user typing it
    there), with the barnraise under test importable after it."""
    env = dict(os.environ, PYTHONPATH=str(HOME))
    return subprocess.run([sys.executable, *args], cwd=folder, env=env, capture_output=True,
                          text=True, timeout=300, check=False)


def test_import_barnraise_beside_a_users_sim_actors_and_scenarios(
        tmp_path: pathlib.Path) -> None:
    _users_folder(tmp_path)
    code = textwrap.dedent("""
        import json, sys
        import barnraise, barnraise.cli, barnraise.kit, barnraise.plots
        from barnraise.sim import store
        from barnraise.actors import world
        loaded = sorted(name for name in ("sim", "actors", "scenarios") if name in sys.modules)
        import sim, actors, scenarios
        result = barnraise.run("kernel_build", seed=1, grid_size=16, block=8, record=False)
        print(json.dumps({"loaded": loaded, "owners": [sim.OWNER, actors.OWNER,
                          scenarios.OWNER], "completion": result.summary["completion_percent"],
                          "barnraise": barnraise.__file__, "store": store.__name__,
                          "world": world.__name__}))
        """)
    done = _python(tmp_path, "-c", code)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    # barnraise loaded none of the three top-level names; the user's are the user's own.
    assert out["loaded"] == [] and out["owners"] == ["user", "user", "user"]
    assert out["completion"] == 100.0
    assert pathlib.Path(out["barnraise"]).resolve().parents[1] == HOME
    assert (out["store"], out["world"]) == ("barnraise.sim.store", "barnraise.actors.world")


def test_the_command_beside_a_users_sim_actors_and_scenarios(tmp_path: pathlib.Path) -> None:
    _users_folder(tmp_path)
    listed = _python(tmp_path, "-m", "barnraise.cli", "scenarios")
    assert listed.returncode == 0, listed.stderr
    names = [line.split()[0] for line in listed.stdout.splitlines()]
    shipped = sorted(p.stem for p in (ROOT / "scenarios").glob("[!_]*.py"))
    assert names == shipped and "my_scenario" not in names
    ran = _python(tmp_path, "-m", "barnraise.cli", "run", "kernel_build", *SMALL, "--json")
    assert ran.returncode == 0, ran.stderr
    summary = json.loads(ran.stdout)
    assert summary["completion_percent"] == 100.0
    described = _python(tmp_path, "-m", "barnraise.cli", "scenarios", "kernel_build")
    assert described.returncode == 0 and "grid_size" in described.stdout, described.stderr


def _imports(path: pathlib.Path) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
    return found


def test_no_code_of_the_project_imports_a_layer_by_a_top_level_name() -> None:
    """The library, the tests, the benchmarks: every import of a layer is by its installed
    name (a top-level ``sim`` works only in a checkout, and is a second copy of it)."""
    folders = ["barnraise", *LAYERS, "tests", "benchmarks"]
    paths = [path for folder in folders for path in sorted((ROOT / folder).rglob("*.py"))]
    assert len(paths) > 150
    wrong = [f"{path.relative_to(ROOT)}:{line} imports {module}"
             for path in paths for line, module in _imports(path)
             if module.split(".")[0] in LAYERS]
    assert wrong == []


def test_the_layering_check_reads_the_installed_names(tmp_path: pathlib.Path) -> None:
    for layer in (*LAYERS, "barnraise"):
        (tmp_path / layer).mkdir()
    (tmp_path / "sim" / "fine.py").write_text("from barnraise.sim.messages import Message\n")
    (tmp_path / "actors" / "up.py").write_text("from barnraise.scenarios import _kit\n")
    old = "sim"  # spelt so that the rename script leaves the old name here
    (tmp_path / "scenarios" / "old.py").write_text(f"import {old}.messages\n")
    (tmp_path / "barnraise" / "fine.py").write_text(
        "import barnraise.scenarios\nfrom barnraise.actors import world\n")
    assert layering_violations(tmp_path) == [
        "actors/up.py:1 imports barnraise.scenarios, a layer above actors",
        f"scenarios/old.py:1 imports {old}.messages by a top-level name (installed, it is "
        "barnraise.sim.messages)"]


def test_the_layers_in_the_package_are_the_checkouts_folders() -> None:
    """In a checkout barnraise/sim, barnraise/actors and barnraise/scenarios are symlinks to
    the top-level folders (the wheel holds them as folders)."""
    import barnraise.actors
    import barnraise.scenarios
    import barnraise.sim

    for layer, module in zip(LAYERS, (barnraise.sim, barnraise.actors, barnraise.scenarios),
                             strict=True):
        assert module.__file__ is not None
        assert pathlib.Path(module.__file__).resolve().parent.name == layer
        link = ROOT / "barnraise" / layer
        assert link.is_symlink() and link.resolve() == ROOT / layer
