"""barnraise: many agents building one thing together, as actors that talk in A2A messages.

This is the public face: the names a user needs first, each the real object from the
layer that owns it (the engine ``sim``, the actors and their world ``actors``, the
scenario scripts ``scenarios``, and the application here), so static tools see its
real type: :class:`Simulation` and its :class:`Client`, :func:`run` and its
:class:`RunResult`, :func:`open_run`, :func:`sweep`, :func:`connect`, :class:`Agent`,
:func:`make_dispatcher`, :class:`Message`, :class:`Priority`, :class:`Trace`, the
errors a caller catches, and the submodules :mod:`barnraise.kit` (the scenario-authoring
helpers), :mod:`barnraise.plots` (figures) and :mod:`barnraise.gateway` (the network).

Everything else lives in the module that owns it: ``barnraise.runner`` (``resume``,
``replay``), ``barnraise.loading`` (``list_scenarios``), ``barnraise.outputs``
(``RunSummary``), ``sim.tools`` (``TOOLS``),
``sim.tool_methods`` (the typed tool methods and their argument and result types),
``sim.dispatch`` (``Dispatcher``, ``RunReport``), ``sim.policy`` (``Policy``),
``sim.metrics`` (``Metrics``), ``actors.stored.run`` (``StoredRun``), ``sim.views``
(``WorldView``), ``sim.messages`` (``Region``), ``actors.recording`` (``Recorder``),
``actors.registry`` (``Registry``), ``actors.base`` (``A2AActor``),
``barnraise.gateway`` (``RemoteClient``). Those layers stay importable; names not
listed in an ``__all__`` may change.

::

    import barnraise

    result = barnraise.run("kernel_build", seed=7)
    print(result.success, result.summary["completion_percent"])
    result.timeseries()          # per-step metrics, a pandas DataFrame

    barnraise.run("kernel_build", seed=7, store="run.db")   # durable: docs/store.md
    stored = barnraise.open_run("run.db")
    stored.status, stored.events(), stored.canvas()

    table = barnraise.sweep("conflict_storm", params={"agents": [2, 4, 8]}, seeds=range(20),
                            engine="processes", workers=2)

    with barnraise.Simulation(seed=7) as simu:
        client = simu.client()
        client.call("session_create", session_name="S", grid_size=100)
"""

from importlib import metadata as _metadata

from actors.base import Agent, DeliveryError, RequestError, WaitTimeout
from actors.world import Client, Simulation
from barnraise import gateway, kit, plots
from barnraise.gateway.remote import RemoteError, connect
from barnraise.outputs import RunResult
from barnraise.runner import open_run, run
from barnraise.sweeps import SweepError, sweep
from scenarios import ParamError, ScenarioError
from sim.dispatch import make_dispatcher
from sim.messages import Message, MessageError, Priority
from sim.store import StoreError
from sim.trace import Trace

__all__ = [
    "Agent",
    "Client",
    "DeliveryError",
    "Message",
    "MessageError",
    "ParamError",
    "Priority",
    "RemoteError",
    "RequestError",
    "RunResult",
    "ScenarioError",
    "Simulation",
    "StoreError",
    "SweepError",
    "Trace",
    "WaitTimeout",
    "connect",
    "gateway",
    "kit",
    "make_dispatcher",
    "open_run",
    "plots",
    "run",
    "sweep",
]

try:
    __version__ = _metadata.version("barnraise")
except _metadata.PackageNotFoundError:  # a checkout that was never installed
    __version__ = "0+unknown"
