"""The live view: watch a run in the browser as it builds the canvas.

``barnraise run NAME --view`` and ``barnraise serve`` serve a page at the
server's base URL: the canvas (tiles as they are placed, claims outlined in
their agent's colour, conflicts flashing), the agents, the task board, a log of
domain events, the progress and a chart of the run's figures, updated over
the WebSocket ``/view/ws`` with deltas; in deterministic mode its controls
start, pause, step and pace the run (``barnraise.sim.dispatch.Gate``).

``barnraise view PATH`` serves the same page over a stored run, with a time
slider over its snapshots.

Modules: ``watch`` (the model: reads, deltas, controls; needs nothing beyond
barnraise), ``server`` (the routes on the gateway), ``live`` (a run on a
server), ``stored`` (a stored run's frames and its server), ``inline``
(``barnraise.show``: either page on loopback for a notebook's IFrame), ``headless``
(Debian's chromium through Playwright, for tests and benchmarks). The server
side needs the gateway extra.
"""

from barnraise.view.watch import Watcher, changed_rectangles

__all__ = ["Watcher", "changed_rectangles"]
