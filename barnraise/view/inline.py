"""The view in a notebook: :func:`show` serves the live view's page on loopback, for an IFrame.

``barnraise.show(x)`` puts the page ``barnraise run --view`` and ``barnraise view`` serve
(:class:`~barnraise.view.live.LiveView`, :class:`~barnraise.view.stored.StoredServer`: the
same server, the same page) on ``127.0.0.1`` at a free port, and returns an
:class:`InlineView`, which Jupyter draws as an IFrame of that page (``_repr_html_``).

What ``x`` may be:

* a :class:`~barnraise.actors.world.Simulation`: the live page of that world, as the
  notebook drives it (its controls hold and step it through the run gate; a page's Pause
  holds the next call a cell makes until Start);
* a :class:`~barnraise.actors.stored.run.StoredRun` (``barnraise.open_run(path)``) or the
  path of a store: the scrubber of that stored run;
* a :class:`~barnraise.outputs.RunResult` of a deterministic run of a shipped scenario:
  it keeps no store, so it is re-executed into a temporary one (its trace digest must be
  the result's, else :class:`ValueError` and nothing is served), which is then scrubbed.
  A realtime run cannot be re-executed: run it with ``store=`` and show the store.

What a caller may rely on: the page's controls need an operator token of this view's
own (:class:`~barnraise.gateway.operator.Operator`), which only :attr:`InlineView.url`
carries, in its fragment (``#operator=TOKEN``, never sent in a request line); anyone on
loopback may watch, as on every view. The server stops at :meth:`InlineView.close`, when
the InlineView is garbage-collected, or at interpreter exit, whichever comes first, and
leaves no thread behind; a temporary store is removed with it.
"""

from __future__ import annotations

import html
import os
import shutil
import tempfile
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Final

from barnraise.actors.stored.run import StoredRun
from barnraise.actors.world import Simulation
from barnraise.outputs import RunResult

if TYPE_CHECKING:
    from barnraise.gateway.operator import Operator

__all__ = ["InlineView", "show"]

#: The IFrame's height in CSS pixels, unless ``show(height=)`` says otherwise.
HEIGHT: Final = 640


class InlineView:
    """A view served on loopback for a notebook (see the module doc): ``url`` is the
    page's address with its operator token; Jupyter shows it as an IFrame."""

    def __init__(self, url: str, closers: list[Callable[[], None]], *, what: str,
                 height: int = HEIGHT) -> None:
        self.url = url
        #: What is shown: ``live``, ``stored`` or ``result``.
        self.what = what
        self.height = height
        # The finalizer holds the closers, never the InlineView, so the view can be
        # collected; it runs once, from close(), collection or interpreter exit.
        self._finalizer = weakref.finalize(self, _close_all, closers)

    @property
    def closed(self) -> bool:
        """True once the server has stopped."""
        return not self._finalizer.alive

    def close(self) -> None:
        """Stop the server (pages disconnected) and whatever it served from."""
        self._finalizer()

    def __enter__(self) -> InlineView:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<barnraise view of a {self.what} run at {self.url}" + \
            (" (closed)>" if self.closed else ">")

    def _repr_html_(self) -> str:
        if self.closed:
            return "<p>barnraise view: closed</p>"
        url = html.escape(self.url, quote=True)
        return (f'<iframe src="{url}" title="barnraise view" width="100%" '
                f'height="{self.height}" style="border: 1px solid #ccc"></iframe>')


def _close_all(closers: list[Callable[[], None]]) -> None:
    for close in closers:
        close()


def show(x: Simulation | RunResult | StoredRun | str | os.PathLike[str], *,
         height: int = HEIGHT, script: str | os.PathLike[str] | None = None) -> InlineView:
    """Serve the view of ``x`` on loopback and return it for the notebook (module doc).

    ``script``: the scenario file of a stored run made from one (as ``barnraise view
    --script``). TypeError for anything else to show; ValueError for a height that is
    not a positive int, a Simulation closed or already watched, or a RunResult that
    cannot be re-executed; StoreError for a path
    that is not a store. Nothing is left running when it raises.
    """
    from barnraise.gateway.operator import Operator, operator_token

    if type(height) is not int or not 0 < height <= 10_000:
        raise ValueError(f"height must be an int of CSS pixels from 1 to 10000, got {height!r}")
    operator = Operator(operator_token({}))
    if isinstance(x, Simulation):
        if script is not None:
            raise ValueError("script= applies to a stored run, not a live Simulation")
        return _live(x, operator, height)
    if isinstance(x, RunResult):
        if script is not None:
            raise ValueError("script= applies to a stored run; a RunResult is re-executed "
                             "from its scenario's name")
        return _result(x, operator, height)
    if isinstance(x, (str, os.PathLike)):
        from barnraise.runner import open_run

        x = open_run(x)
    if isinstance(x, StoredRun):
        return _stored(x, operator, height, script, "stored", [])
    raise TypeError(f"show() takes a Simulation, a RunResult, a StoredRun or a store's path, "
                    f"not {type(x).__name__}")


def _page(url: str, operator: Operator) -> str:
    return f"{url}/#operator={operator.token}"


def _live(simu: Simulation, operator: Operator, height: int) -> InlineView:
    from barnraise.sim.dispatch import DeterministicDispatcher
    from barnraise.view.live import LiveView

    if simu.closed:
        raise ValueError("this Simulation is closed: there is nothing live to show")
    if isinstance(simu.dispatcher, DeterministicDispatcher) and simu.dispatcher.gate is not None:
        raise ValueError("this Simulation is already watched (a view's gate holds it): "
                         "close that view first")
    live = LiveView(port=0, operator=operator)
    url = live.start(simu)  # closes what it started when it raises
    return InlineView(_page(url, operator), [live.close], what="live", height=height)


def _stored(run: StoredRun, operator: Operator, height: int,
            script: str | os.PathLike[str] | None, what: str,
            after: list[Callable[[], None]]) -> InlineView:
    from barnraise.view.stored import StoredServer

    served = StoredServer(run, port=0, script=script, operator=operator)
    try:
        url = served.server.start()
    except BaseException:
        served.close()
        raise
    return InlineView(_page(url, operator), [served.close, *after], what=what, height=height)


def _result(result: RunResult, operator: Operator, height: int) -> InlineView:
    """A RunResult's scrubber: re-executed into a temporary store, checked by its digest."""
    from barnraise.runner import check_request, open_store, run_request
    from barnraise.scenarios import ScenarioError

    summary = result.summary
    if summary["mode"] != "deterministic":
        raise ValueError("a realtime RunResult cannot be re-executed: run it with "
                         "store=PATH and show(barnraise.open_run(PATH))")
    faults = summary.get("faults")
    try:
        request = check_request(str(summary["scenario"]), int(summary["seed"]),
                                faults=None if faults is None else faults["plan"],
                                **summary["params"])
    except ScenarioError as exc:
        raise ValueError(f"this RunResult cannot be re-executed ({exc}): run it with "
                         "store=PATH and show(barnraise.open_run(PATH))") from None
    folder = tempfile.mkdtemp(prefix="barnraise-show-")

    def remove() -> None:
        shutil.rmtree(folder, ignore_errors=True)

    try:
        path = Path(folder) / "run.db"
        again = run_request(request, record=False, store=open_store(request, path))
        if again.trace_digest != result.trace_digest:
            raise ValueError(f"re-executing {summary['scenario']} (seed {summary['seed']}) "
                             f"gave trace {again.trace_digest[:12]}, not this result's "
                             f"{result.trace_digest[:12]} (a time limit, or other code): run "
                             "it with store=PATH and show(barnraise.open_run(PATH))")
        return _stored(StoredRun(path), operator, height, None, "result", [remove])
    except BaseException:
        remove()
        raise
