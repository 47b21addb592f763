"""The README's code runs, and its quick start is exactly two commands."""

from __future__ import annotations

import pathlib
import re

import pytest

README = pathlib.Path(__file__).resolve().parent.parent / "README.md"


def test_quick_start_has_exactly_two_commands() -> None:
    text = README.read_text()
    quick = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    [block] = re.findall(r"```bash\n(.*?)```", quick, re.S)
    commands = [line for line in block.splitlines() if line.strip()]
    assert commands == ["pip install . && barnraise run kernel_build",
                        "pip install '.[test]' && python -m pytest"]


def test_the_python_examples_run(capsys: pytest.CaptureFixture[str]) -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    assert len(blocks) == 3
    for code in blocks:
        exec(compile(code, str(README), "exec"), {"__name__": "readme_example"})
    out = capsys.readouterr().out
    assert "final ball 6" in out
    assert "run ended: quiescent" in out
    assert "True 400" in out  # the task's 20 x 20 tiles
    assert "region_conflict {'x':" in out
    assert "open_claims" in out and "builders  seed    t  open_claims" in out


def test_every_scenario_is_in_the_readme_table() -> None:
    from barnraise.loading import list_scenarios

    text = README.read_text()
    names = [name for name, _ in list_scenarios()]
    assert len(names) == 16
    for name in names:
        assert f"| `{name}` |" in text, name
