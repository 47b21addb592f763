"""barnraise: many agents building one thing together, as actors that talk in A2A messages.

This is the public face: the names a user needs first, each the real object from the
layer that owns it (the engine ``sim``, the actors and their world ``actors``, the
scenario scripts ``scenarios``, and the application here), so static tools see its
real type: :class:`Simulation` and its :class:`Client`, :func:`run` and its
:class:`RunResult`, :func:`open_run`, :func:`sweep`, :func:`connect`, :class:`Agent`,
:func:`make_dispatcher`, :class:`Message`, :class:`Priority`, :class:`Trace`,
:func:`show` and :func:`explore` (a run's view and a scenario's controls in a notebook),
the errors a caller catches, and the submodules :mod:`barnraise.kit` (the scenario-authoring
helpers), :mod:`barnraise.plots` (figures) and :mod:`barnraise.gateway` (the network).

Everything else lives in the module that owns it: ``barnraise.runner`` (``resume``,
``replay``), ``barnraise.loading`` (``list_scenarios``), ``barnraise.outputs``
(``RunSummary``), ``barnraise.sim.tools`` (``TOOLS``),
``barnraise.sim.tool_methods`` (the typed tool methods and their argument and result types),
``barnraise.sim.dispatch`` (``Dispatcher``, ``RunReport``), ``barnraise.sim.policy`` (``Policy``),
``barnraise.sim.metrics`` (``Metrics``), ``barnraise.actors.stored.run`` (``StoredRun``),
``barnraise.sim.views``
(``WorldView``), ``barnraise.sim.messages`` (``Region``), ``barnraise.actors.recording``
(``Recorder``),
``barnraise.actors.registry`` (``Registry``), ``barnraise.actors.base`` (``A2AActor``),
``barnraise.gateway`` (``RemoteClient``). Those layers stay importable; names not
listed in an ``__all__`` may change.

::

    import barnraise

    result = barnraise.run("kernel_build", seed=7)
    print(result.success, result.summary["completion_percent"])
    result.timeseries()          # per-step metrics, a pandas DataFrame
    barnraise.run("kernel_build", reporters={"tiles": lambda view: view.progress.tiles_placed})

    barnraise.run("kernel_build", seed=7, store="run.db")   # durable: docs/store.md
    stored = barnraise.open_run("run.db")
    stored.status, stored.events(), stored.canvas()

    table = barnraise.sweep("conflict_storm", params={"agents": [2, 4, 8]}, seeds=range(20),
                            engine="processes", workers=2)

    barnraise.show(result)       # in Jupyter: the run's view, scrubbed, in an IFrame
    barnraise.explore("kernel_build")   # its parameters as widgets (barnraise[notebook])

    with barnraise.Simulation(seed=7) as simu:
        client = simu.client()
        client.call("session_create", session_name="S", grid_size=100)
"""

from importlib import metadata as _metadata

from barnraise import gateway, kit, plots
from barnraise.actors.base import Agent, DeliveryError, RequestError, WaitTimeout
from barnraise.actors.world import Client, Simulation
from barnraise.gateway.remote import RemoteError, connect
from barnraise.notebook import explore, show
from barnraise.outputs import RunResult
from barnraise.runner import open_run, run
from barnraise.scenarios import ParamError, ScenarioError
from barnraise.sim.dispatch import make_dispatcher
from barnraise.sim.messages import Message, MessageError, Priority
from barnraise.sim.reporters import ReporterError
from barnraise.sim.store import StoreError
from barnraise.sim.trace import Trace
from barnraise.sweeps import SweepError, sweep

__all__ = [
    "Agent",
    "Client",
    "DeliveryError",
    "Message",
    "MessageError",
    "ParamError",
    "Priority",
    "RemoteError",
    "ReporterError",
    "RequestError",
    "RunResult",
    "ScenarioError",
    "Simulation",
    "StoreError",
    "SweepError",
    "Trace",
    "WaitTimeout",
    "connect",
    "explore",
    "gateway",
    "kit",
    "make_dispatcher",
    "open_run",
    "plots",
    "run",
    "show",
    "sweep",
]

try:
    __version__ = _metadata.version("barnraise")
except _metadata.PackageNotFoundError:  # a checkout that was never installed
    __version__ = "0+unknown"
