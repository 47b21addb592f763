"""The services' operations among themselves: declared by the services that serve them
(actors/service.py, actors/regions.py), read from a stored log by the services' own folds
(actors/*_log.py), and never spelt out by the engine (sim/), which knows no service's
private protocol."""

from __future__ import annotations

import ast
import pathlib

import pytest

import barnraise.actors.regions as regions
import barnraise.actors.service as service

ROOT = pathlib.Path(__file__).resolve().parents[1]


def served_operations(root: pathlib.Path) -> dict[str, list[str]]:
    """Every operation a service under ``root/actors`` serves, found by its handler (a
    method ``op_<name>`` serves ``_<name>``), with where each handler is defined."""
    found: dict[str, list[str]] = {}
    for path in sorted((root / "actors").rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for cls in ast.walk(tree):
            if not isinstance(cls, ast.ClassDef):
                continue
            for node in cls.body:
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) \
                        and node.name.startswith("op_") and len(node.name) > 3:
                    found.setdefault(node.name[2:], []).append(
                        f"{path.relative_to(root)}:{node.lineno} {cls.name}.{node.name}")
    return found


def spelt_operations(root: pathlib.Path, operations: set[str], under: str = "sim") -> list[str]:
    """Every string (or bytes) literal under ``root/under`` (the engine, by default) that
    is, or quotes as an ``op``, the name of one of ``operations`` (no module is exempt)."""
    found = []
    quoted = {f'"op":"{name}"' for name in operations}
    for path in sorted((root / under).rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Constant) or not isinstance(node.value, (str, bytes)):
                continue
            text = node.value if isinstance(node.value, str) \
                else node.value.decode("utf-8", "replace")
            if text in operations or any(q in text for q in quoted):
                found.append(f"{path.relative_to(root)}:{node.lineno} spells {text!r}")
    return found


#: The operations a stored log is read by, as the services that serve them declare them.
DECLARED = {service.SESSION, service.SESSION_CLOSED, service.MEMBER_JOINED, service.MEMBER_LEFT,
            service.CHECKPOINT, service.ROLLBACK, regions.BLUEPRINT, regions.CLAIM_FOR}


def test_the_services_serve_the_operations_the_log_is_read_by() -> None:
    served = served_operations(ROOT)
    # The scan finds the services' handlers (regions alone serves more than eight).
    assert len(served) >= 12, sorted(served)
    assert all(name.startswith(service.OP_PREFIX) for name in served)
    assert len(DECLARED) == 8
    assert set(served) >= DECLARED, sorted(DECLARED - set(served))
    assert "actors/region_checkpoints.py" in " ".join(served[service.CHECKPOINT])
    assert "actors/task_checkpoints.py" in " ".join(served[service.ROLLBACK])
    assert "actors/service.py" in " ".join(served[service.SESSION])
    assert "actors/regions.py" in " ".join(served[regions.BLUEPRINT])
    assert "actors/regions.py" in " ".join(served[regions.CLAIM_FOR])


def test_no_module_of_the_engine_spells_out_a_services_operation() -> None:
    served = set(served_operations(ROOT))
    assert served
    assert spelt_operations(ROOT, served) == []


def test_the_check_catches_an_operation_spelt_out(tmp_path: pathlib.Path) -> None:
    (tmp_path / "actors").mkdir()
    (tmp_path / "sim").mkdir()
    (tmp_path / "actors" / "svc.py").write_text(
        "class Svc:\n"
        "    def op_sweep(self, content): ...\n"
        "    async def op_tidy(self, content): ...\n"
        "    def tool_sweep(self, call): ...\n"
        "def op_loose(content): ...\n")
    (tmp_path / "sim" / "reader.py").write_text(
        "A = 'sweep'\n"          # a tool's name, not the operation
        "B = '_tidy'\n"          # the operation itself
        "C = b'{\"op\":\"_sweep\"}'\n"  # quoted as an op, in bytes
        "D = '_loose'\n")        # served by no method: not an operation
    served = served_operations(tmp_path)
    assert sorted(served) == ["_sweep", "_tidy"]
    assert spelt_operations(tmp_path, set(served)) == [
        "sim/reader.py:2 spells '_tidy'", "sim/reader.py:3 spells '{\"op\":\"_sweep\"}'"]
    # No module of the engine may spell one, not even one that would declare them.
    (tmp_path / "actors" / "svc.py").write_text(
        "class Svc:\n    def op_checkpoint(self, content): ...\n")
    (tmp_path / "sim" / "reader.py").write_text("A = 'checkpoint'\n")
    (tmp_path / "sim" / "ops.py").write_text("CHECKPOINT = '_checkpoint'\n")
    assert spelt_operations(tmp_path, set(served_operations(tmp_path))) == [
        "sim/ops.py:1 spells '_checkpoint'"]


def test_the_engine_has_no_module_of_the_services_operations() -> None:
    assert not (ROOT / "sim" / "ops.py").exists()


def test_an_operations_name_is_its_handlers_after_the_prefix() -> None:
    assert service.op_name("checkpoint") == service.CHECKPOINT == "_checkpoint"
    assert service.SESSION == "_session" and service.SESSION_CLOSED == "_session_closed"
    assert service.op_name("claim_for") == regions.CLAIM_FOR
    for bad in ("", "_checkpoint"):
        with pytest.raises(ValueError, match="an operation's name after '_'"):
            service.op_name(bad)
