"""barnraise: many agents building one thing together, as actors that talk in A2A messages.

This is the public face: what a user imports. Each name is the real object from the
layer that owns it (the engine ``sim``, the actors and their world ``actors``, the
scenario scripts ``scenarios``, and the application here), so static tools see its
real type. Those layers stay importable; names not listed here may change.

::

    import barnraise

    result = barnraise.run("kernel_build", seed=7)
    print(result.success, result.summary["completion_percent"])
    result.timeseries()          # per-step metrics, a pandas DataFrame

    barnraise.run("kernel_build", seed=7, store="run.db")   # durable: docs/store.md
    stored = barnraise.open_run("run.db")
    stored.status, stored.events(type="task_completed"), stored.canvas()

    table = barnraise.sweep("conflict_storm", params={"agents": [2, 4, 8]}, seeds=range(20),
                            engine="processes", workers=2)

    with barnraise.Simulation(seed=7) as simu:
        client = simu.client()
        client.call("session_create", session_name="S", grid_size=100)
"""

from importlib import metadata as _metadata

from actors.base import A2AActor, Agent, DeliveryError, RequestError, WaitTimeout
from actors.recording import Recorder
from actors.registry import Registry
from actors.world import Client, Simulation
from barnraise.gateway.remote import RemoteClient, RemoteError, connect
from barnraise.runner import RunResult, list_scenarios, open_run, replay, resume, run
from barnraise.sweeps import SweepError, sweep
from scenarios import ParamError, ScenarioError
from sim.dispatch import Dispatcher, RunReport, make_dispatcher
from sim.messages import Message, MessageError, Priority, Region
from sim.metrics import Metrics
from sim.policy import Policy
from sim.store import StoreError
from sim.stored import StoredRun
from sim.tools import TOOLS
from sim.trace import Trace
from sim.views import WorldView

__all__ = [
    "TOOLS",
    "A2AActor",
    "Agent",
    "Client",
    "DeliveryError",
    "Dispatcher",
    "Message",
    "MessageError",
    "Metrics",
    "ParamError",
    "Policy",
    "Priority",
    "Recorder",
    "Region",
    "Registry",
    "RemoteClient",
    "RemoteError",
    "RequestError",
    "RunReport",
    "RunResult",
    "ScenarioError",
    "Simulation",
    "StoreError",
    "StoredRun",
    "SweepError",
    "Trace",
    "WaitTimeout",
    "WorldView",
    "connect",
    "list_scenarios",
    "make_dispatcher",
    "open_run",
    "replay",
    "resume",
    "run",
    "sweep",
]

try:
    __version__ = _metadata.version("barnraise")
except _metadata.PackageNotFoundError:  # a checkout that was never installed
    __version__ = "0+unknown"
