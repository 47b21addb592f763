"""docs/writing.md's examples run and print what it says, and the kit it shows is public."""

from __future__ import annotations

import pathlib

import pytest

from tests.snippets import run_document

WRITING = pathlib.Path(__file__).resolve().parent.parent / "docs" / "writing.md"


def test_the_guides_examples_run_and_print_what_it_shows(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    ran = run_document(WRITING, tmp_path)
    assert len(ran) == 3  # a first agent, the stripes scenario run, the buggy one
    assert {p.name for p in tmp_path.iterdir()} >= {"stripes.py", "buggy.py"}


def test_the_guide_keeps_a_place_for_message_types_of_ones_own() -> None:
    text = WRITING.read_text()
    for heading in ("## A first agent", "## A first scenario with agents of your own",
                    "## Message types of your own", "## When your code raises"):
        assert heading in text, heading
