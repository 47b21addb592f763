"""The README's code runs, and its quick start is exactly two commands."""

from __future__ import annotations

import pathlib
import re

import pytest

from tests.snippets import blocks, check_output, run_document

README = pathlib.Path(__file__).resolve().parent.parent / "README.md"


def test_quick_start_has_exactly_two_commands() -> None:
    text = README.read_text()
    quick = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    [block] = re.findall(r"```bash\n(.*?)```", quick, re.S)
    commands = [line for line in block.splitlines() if line.strip()]
    assert commands == ["pip install . && barnraise run kernel_build",
                        "pip install '.[test]' && python -m pytest"]


def test_the_python_examples_run_and_print_what_the_readme_shows(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every python block is marked (tests/snippets.py) and runs; a scenario file it
    shows is written and run by name, as a reader would."""
    monkeypatch.chdir(tmp_path)
    ran = run_document(README, tmp_path)
    assert len(ran) == 4
    assert (tmp_path / "pair.py").is_file()
    assert "builders  seed    t  open_claims" in ran[0][1]  # the sweep's per-step rows
    assert "final ball 6" in ran[1][1]
    assert "region_conflict {'x':" in ran[3][1]


def test_a_snippet_whose_output_differs_fails(tmp_path: pathlib.Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The check can fail: a wrong output, an unmarked block, an output of nothing."""
    monkeypatch.chdir(tmp_path)
    doc = tmp_path / "doc.md"
    doc.write_text("<!-- snippet -->\n```python\nprint('one')\nprint('two')\n```\n\n"
                   "<!-- output -->\n```text\ntwo\none\n```\n")
    with pytest.raises(AssertionError, match="expected the line 'one'"):
        run_document(doc, tmp_path)
    doc.write_text("```python\nprint(1)\n```\n")
    with pytest.raises(ValueError, match="1 python blocks but 0 marked"):
        blocks(doc.read_text())
    doc.write_text("<!-- output -->\n```text\nx\n```\n")
    with pytest.raises(ValueError, match="follows no snippet"):
        blocks(doc.read_text())
    check_output("run ended: quiescent ...", "a\nrun ended: quiescent at t=1\n", "doc")


def test_every_scenario_is_in_the_readme_table() -> None:
    from barnraise.loading import list_scenarios

    text = README.read_text()
    names = [name for name, _ in list_scenarios()]
    assert len(names) == 16
    for name in names:
        assert f"| `{name}` |" in text, name
