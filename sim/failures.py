"""An exception that escaped a handler or a behaviour, as a run keeps it.

The dispatcher makes one :class:`Failure` per exception it reports
(``Router.report_error``) and shows it three ways, each for its reader:

* :meth:`Failure.letter`: the ``error_report`` letter published to the host's ``errors``
  topic and the session's own: agent, where, error type and detail, as before. No
  traceback: a session's members may be remote, and the host's file paths are not theirs
  to learn; the detail (the exception's message) has its absolute paths named portably
  and is cut at :data:`MAX_DETAIL` characters (:func:`portable_detail`).
* :meth:`Failure.record`: the content of the trace's ``error`` record (digested, stored):
  the letter's fields plus the function, file and line that raised and the whole
  traceback, in a *portable* form: barnraise's own files named from the package
  (``barnraise/actors/actor.py``), the standard library's and installed packages' as
  ``<python>/...`` and ``<site-packages>/...`` without line numbers or source text, any
  other file by its name alone (``my_scenario.py``). So a run's digest does not depend on
  where the checkout or the virtual environment lives, nor on the Python version's
  line numbers (tests/test_failures.py runs a copy of a scenario from another directory).
* :meth:`Failure.summary`: for the person running it (``summary["errors"]``, the log
  line on stderr): the same, with the traceback as Python prints it, absolute paths and
  all, so an editor can jump to the line.

What callers can rely on: every field is a str but ``line`` (an int, or None when no
frame is in a file the run can name); ``where`` is the behaviour's function name or the
``handle_<type>`` method that raised (else what the reporter said: ``timer``,
``on_stop``, a message type).
"""

from __future__ import annotations

import os
import pathlib
import re
import sysconfig
import traceback
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Final

__all__ = ["MAX_DETAIL", "Failure", "portable_detail", "portable_path"]

#: The characters of an exception's message a letter and the trace keep (the rest is
#: counted, not kept): a message of megabytes must not make the error report itself
#: too large to send. ``summary()`` keeps up to 64 times as much for the person.
MAX_DETAIL: Final = 1000
#: An absolute POSIX path in an exception's message (not a URL's path, not ``1/2``).
_ABSOLUTE: Final = re.compile(r"(?<![\w.:/~-])(?:/[^\s'\"/:,;()\[\]{}<>]+)+")

# The layers install as symlinks under barnraise/ (README, "Development"): a frame's file
# name is the symlinked path when imported as barnraise.sim..., the real one when not.
_OWN: Final[tuple[tuple[str, str], ...]] = tuple(sorted(
    {(str(pathlib.Path(__file__).parent.parent), "barnraise"),
     *((os.path.realpath(pathlib.Path(__file__).parent.parent / layer), f"barnraise/{layer}")
       for layer in ("sim", "actors", "scenarios"))},
    key=lambda pair: -len(pair[0])))
_PYTHON: Final[tuple[tuple[str, str], ...]] = tuple(sorted(
    {(os.path.realpath(p), name) for key, name in (
        ("purelib", "<site-packages>"), ("platlib", "<site-packages>"),
        ("stdlib", "<python>"), ("platstdlib", "<python>"))
     if (p := sysconfig.get_paths().get(key))},
    key=lambda pair: -len(pair[0])))


def _under(path: str, prefix: str) -> str | None:
    if path.startswith(prefix + os.sep):
        return path[len(prefix) + 1:].replace(os.sep, "/")
    return None


def portable_path(filename: str) -> tuple[str, bool]:
    """``filename`` as the trace names it, and whether it is the run's own code (True) or
    Python's or an installed package's (False: its line numbers are left out)."""
    for prefix, name in _OWN:
        rest = _under(filename, prefix)
        if rest is not None:
            return f"{name}/{rest}", True
    real = os.path.realpath(filename) if os.path.isabs(filename) else filename
    for prefix, name in _PYTHON:
        rest = _under(real, prefix)
        if rest is not None:
            return f"{name}/{rest}", False
    if filename.startswith("<"):  # <string>, <frozen importlib._bootstrap>
        return filename, False
    return pathlib.PurePath(filename).name, True


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else \
        f"{text[:limit]}... ({len(text) - limit} more characters)"


def portable_detail(detail: str) -> str:
    """An exception's message as a letter and the trace keep it: every absolute path in
    it named as :func:`portable_path` names a frame's file (``[Errno 2] No such file or
    directory: 'data.csv'``), so neither tells a member where the host keeps its files
    nor makes a digest depend on it; then cut to :data:`MAX_DETAIL` characters."""
    return _cut(_ABSOLUTE.sub(lambda m: portable_path(m.group())[0], detail), MAX_DETAIL)


def _frames(tb: TracebackType | None) -> traceback.StackSummary:
    return traceback.StackSummary.extract(traceback.walk_tb(tb), capture_locals=False)


def _type_name(exc: BaseException) -> str:
    kind = type(exc)
    module = kind.__module__
    return kind.__qualname__ if module in ("builtins", "__main__") else \
        f"{module}.{kind.__qualname__}"


@dataclass(frozen=True, slots=True)
class Failure:
    """One reported exception (see the module's docstring for its three forms)."""

    agent: str
    where: str
    error: str
    detail: str
    #: The innermost frame in a file of the run's own (a barnraise module, the scenario,
    #: the user's module): where to look first. Portable names, as in the trace.
    function: str
    file: str
    line: int | None
    #: The traceback in the trace's portable form, and as Python prints it.
    portable: str
    full: str
    #: The exception's message as Python gives it (cut at 64 x MAX_DETAIL), for summary().
    raw_detail: str = ""

    @classmethod
    def of(cls, agent: str, where: str, exc: BaseException, *, skip: int = 1,
           handler: bool = False) -> Failure:
        """The failure of ``exc`` as ``agent``'s reporter caught it at ``where``.

        ``skip``: the outermost frames of the traceback that are the reporter's own (the
        loop that caught it), left out of both forms. ``handler``: it was caught around a
        delivery, so the innermost ``handle_<type>`` frame in the traceback, if there is
        one, names ``where`` (the message type, else).
        """
        tb = exc.__traceback__
        for _ in range(skip):
            if tb is not None and tb.tb_next is not None:
                tb = tb.tb_next
        frames = _frames(tb)
        handlers = [f.name for f in frames if f.name.startswith("handle_")] if handler else []
        if handlers:
            where = handlers[-1]
        lines = ["Traceback (most recent call last):\n"]
        function, file, line = where, "", None
        for frame in frames:
            name, own = portable_path(frame.filename)
            if own:
                lines.append(f'  File "{name}", line {frame.lineno}, in {frame.name}\n')
                if frame.line:
                    lines.append(f"    {frame.line.strip()}\n")
                function, file, line = frame.name, name, frame.lineno
            else:
                lines.append(f'  File "{name}", in {frame.name}\n')
        raw = str(exc)
        detail = portable_detail(raw)
        lines.append(f"{_type_name(exc)}: {detail}\n" if detail else f"{_type_name(exc)}\n")
        full = _cut("".join(traceback.format_exception(type(exc), exc, tb)),
                    64 * MAX_DETAIL)
        return cls(agent=agent, where=where, error=type(exc).__name__, detail=detail,
                   function=function, file=file, line=line,
                   portable=_cut("".join(lines), 64 * MAX_DETAIL),
                   full=full, raw_detail=_cut(raw, 64 * MAX_DETAIL))

    def letter(self) -> dict[str, Any]:
        """The ``error_report`` letter's content: no traceback, no file."""
        return {"agent": self.agent, "where": self.where, "error": self.error,
                "detail": self.detail}

    def record(self) -> dict[str, Any]:
        """The trace's ``error`` record: portable, so digests travel."""
        return {**self.letter(), "function": self.function, "file": self.file,
                "line": self.line, "traceback": self.portable}

    def summary(self) -> dict[str, Any]:
        """``summary["errors"]``'s entry: the record with the message and the traceback
        as Python prints them."""
        return {**self.record(), "detail": self.raw_detail, "traceback": self.full}

    def headline(self) -> str:
        """One line: who, where, what, and the line that raised."""
        at = f" at {self.file}:{self.line}" if self.file else ""
        return (f"{self.agent}: {self.where} raised {self.error}"
                + (f": {self.detail}" if self.detail else "") + at)
