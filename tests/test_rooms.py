"""Rooms with one concern: no class of the library defines more than ``MAX_METHODS``
methods in its own body (issue 24: a class past that holds several concerns; split it
into classes of its own, as ``barnraise.sim.dispatch`` splits the dispatcher into routing,
lifecycle and timers)."""

from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]

#: The packages whose classes are counted.
PACKAGES = ("sim", "actors", "scenarios", "barnraise")
#: The most functions one class body may define (methods, properties, overloads,
#: static and class methods alike: each ``def`` counts; inherited ones do not).
MAX_METHODS = 35


def methods_defined(node: ast.ClassDef) -> int:
    """How many functions ``node``'s own body defines (not nested classes' ones)."""
    return sum(isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) for item in node.body)


def large_classes(root: pathlib.Path, limit: int = MAX_METHODS) -> list[str]:
    """Every class in ``PACKAGES`` under ``root`` that defines more than ``limit``
    methods, as ``path:line Class: N methods``, largest first."""
    found: list[tuple[int, str]] = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef):
                    count = methods_defined(node)
                    if count > limit:
                        found.append((count, f"{path.relative_to(root)}:{node.lineno} "
                                             f"{node.name}: {count} methods"))
    return [text for _, text in sorted(found, key=lambda item: (-item[0], item[1]))]


def test_no_class_defines_more_than_35_methods() -> None:
    assert sum(1 for package in PACKAGES for _ in (ROOT / package).rglob("*.py")) >= 100
    offenders = large_classes(ROOT)
    assert offenders == [], (
        f"{len(offenders)} classes define more than {MAX_METHODS} methods; split each by "
        "concern (issue 24 item 4):\n  " + "\n  ".join(offenders))


def test_the_count_takes_every_def_of_a_class_body_and_only_those(
        tmp_path: pathlib.Path) -> None:
    for package in PACKAGES:
        (tmp_path / package).mkdir()
    body = "".join(f"    def m{i}(self):\n        def inner():\n            pass\n"
                   for i in range(34))
    (tmp_path / "sim" / "big.py").write_text(
        "from typing import overload\n\n"
        "class Big:\n"
        + body
        + "    @overload\n    def call(self, x: int) -> int: ...\n"
        + "    async def later(self):\n        pass\n"
        + "    class Inner:\n        def one(self):\n            pass\n")
    (tmp_path / "actors" / "fits.py").write_text(
        "class Fits:\n" + "".join(f"    def m{i}(self):\n        pass\n" for i in range(35)))
    (tmp_path / "barnraise" / "app.py").write_text(
        "class Large:\n" + "".join(f"    def m{i}(self):\n        pass\n" for i in range(40)))
    assert large_classes(tmp_path) == ["barnraise/app.py:1 Large: 40 methods",
                                       "sim/big.py:3 Big: 36 methods"]
