"""The documents' code, run as the documents say (README.md, docs/writing.md).

A marker line right before a fenced block says what it is:

* ``<!-- snippet -->``: Python to run, in a fresh namespace, in the folder the snippets
  share, after the blocks before it;
* ``<!-- snippet: file NAME -->``: a file to write there under NAME (a scenario module),
  not run;
* ``<!-- output -->``: a ``text`` block, what the snippet before it prints: each of its
  lines, in order, is a line printed (or the start of one, when it ends in `` ...``).

Every ``python`` block of a document has a marker: one without is an error, so no
example goes untested by being left out.
"""

from __future__ import annotations

import contextlib
import io
import pathlib
import re
from dataclasses import dataclass

__all__ = ["Block", "blocks", "check_output", "run_document"]

_MARKED = re.compile(r"<!-- (?:(?P<output>output)|snippet(?:: file (?P<file>[\w./-]+))?) -->\n"
                     r"```(?P<lang>\w+)\n(?P<code>.*?)```", re.S)
_FENCE = re.compile(r"^```python$", re.M)


@dataclass(frozen=True)
class Block:
    kind: str  # "run", "file" or "output"
    code: str
    line: int  # of the marker, 1-based
    name: str | None = None  # a file block's file name


def blocks(text: str) -> list[Block]:
    """The marked blocks of ``text``, in order. ValueError for a python block without a
    marker, or an output block that follows no snippet."""
    found: list[Block] = []
    for match in _MARKED.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        if match["output"]:
            if not found or found[-1].kind != "run":
                raise ValueError(f"line {line}: an output block follows no snippet that runs")
            found.append(Block("output", match["code"], line))
        else:
            kind = "file" if match["file"] else "run"
            found.append(Block(kind, match["code"], line, match["file"]))
    marked = sum(1 for b in found if b.kind != "output")
    python = len(_FENCE.findall(text))
    if python != marked:
        raise ValueError(f"{python} python blocks but {marked} marked snippets: mark each "
                         "(<!-- snippet --> or <!-- snippet: file NAME -->)")
    return found


def check_output(expected: str, printed: str, where: str) -> None:
    """AssertionError unless every line of ``expected`` is, in order, a line of
    ``printed`` (or its start, for a line that ends in `` ...``)."""
    lines = printed.splitlines()
    at = 0
    for want in (w for w in expected.splitlines() if w.strip()):
        prefix = want[:-4] if want.endswith(" ...") else None
        while at < len(lines) and not (lines[at] == want if prefix is None
                                       else lines[at].startswith(prefix)):
            at += 1
        assert at < len(lines), f"{where}: expected the line {want!r}; it printed:\n{printed}"
        at += 1


def run_document(path: pathlib.Path, folder: pathlib.Path) -> list[tuple[Block, str]]:
    """Write and run ``path``'s blocks in ``folder`` (the caller makes it the working
    folder), checking each output block; each run block with what it printed."""
    ran: list[tuple[Block, str]] = []
    for block in blocks(path.read_text()):
        where = f"{path.name}, line {block.line}"
        if block.kind == "file":
            assert block.name is not None
            (folder / block.name).write_text(block.code)
        elif block.kind == "run":
            printed = io.StringIO()
            with contextlib.redirect_stdout(printed):
                exec(compile(block.code, f"{path} (line {block.line})", "exec"),
                     {"__name__": "snippet"})
            ran.append((block, printed.getvalue()))
        else:
            check_output(block.code, ran[-1][1], where)
    return ran
