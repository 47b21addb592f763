"""Reporters of one's own: per-step columns a user's functions compute from the world.

Mesa's ``DataCollector(model_reporters=..., agent_reporters=...)``, for barnraise's
samples: a **reporter** is a function of a session's frozen
:class:`~barnraise.sim.views.WorldView`, an **agent reporter** a function of an
:class:`AgentView` (one member of that session and the view it belongs to). Each
returns a number or a string, and each becomes a column of the run's
``timeseries()`` / ``agent_timeseries()``, named as the user named it.

They are called where the built-in figures that need the world are read: at every
interval sample and at the final one (``actors/recording.py``'s recorder). An event
sample reads nothing of the world, so its row has no value for them (missing, as its
tile count is).

This module only checks reporters (:func:`check_reporters`, :func:`check_picklable`)
and calls them (:class:`ReporterSampler`); the values are
:class:`~barnraise.sim.metrics.Reported` rows, which a store keeps as records of their
own (never by calling the functions again).
"""

from __future__ import annotations

import pickle
import sys
import traceback
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import msgspec
import numpy as np

from barnraise.sim.metrics import AGENT_DTYPES, TIMESERIES_DTYPES, AgentSample, Reported, Value
from barnraise.sim.views import ClaimView, MemberView, TaskView, WorldView

__all__ = [
    "MAX_NAME",
    "AgentView",
    "ReporterError",
    "ReporterSampler",
    "Reporters",
    "check_picklable",
    "check_reporters",
]

#: The longest reporter name (a column's name).
MAX_NAME: Final = 64

#: A reporter: a function of a session's view; an agent reporter: of an agent's.
Reporters = Mapping[str, Callable[..., Any]]


class ReporterError(RuntimeError):
    """A reporter raised, or returned something that is neither a number nor a string.

    The message names the reporter, the simulated time and the session (and agent);
    ``traceback`` is the reporter's own traceback text ("" for a refused value)."""

    def __init__(self, message: str, traceback_text: str = "") -> None:
        super().__init__(message)
        self.traceback = traceback_text


class AgentView(msgspec.Struct, frozen=True):
    """One agent of a session at a sample, as an agent reporter sees it: read-only.

    ``agent_id``, ``name``, ``role`` and ``status`` (``working``, ``awaiting_approval``,
    ``idle``, ``offline``, ``left`` or ``expired``) are its row's; ``world`` the
    session's :class:`~barnraise.sim.views.WorldView` at the same moment."""

    agent_id: str
    name: str
    role: str
    status: str
    world: WorldView

    @property
    def member(self) -> MemberView | None:
        """Its membership (colour, capabilities, when it joined); None once it left."""
        for member in self.world.members:
            if member.agent_id == self.agent_id:
                return member
        return None

    @property
    def claims(self) -> tuple[ClaimView, ...]:
        """The claims it holds, oldest first."""
        return self.world.claims_of(self.agent_id)

    @property
    def tasks(self) -> tuple[TaskView, ...]:
        """The tasks assigned to it, in creation order."""
        return tuple(t for t in self.world.tasks if t.assigned_to == self.agent_id)

    @property
    def tiles_placed(self) -> int:
        """Tiles it wrote so far."""
        return int(self.world.progress.tiles_by_agent.get(self.agent_id, 0))


def check_reporters(reporters: Reporters | None, agent_reporters: Reporters | None, *,
                    module: Any = None) -> tuple[dict[str, Callable[..., Any]],
                                                 dict[str, Callable[..., Any]]]:
    """The reporters of a run: ``module``'s ``REPORTERS`` / ``AGENT_REPORTERS`` and the
    ones given, checked. ValueError naming the first that is wrong: a name that is not a
    non-empty string of at most :data:`MAX_NAME` characters, a name a built-in column has
    (:data:`~barnraise.sim.metrics.TIMESERIES_DTYPES`, :data:`~barnraise.sim.metrics.AGENT_DTYPES`),
    a name both the module and the caller give, a value that is not callable."""
    out: list[dict[str, Callable[..., Any]]] = []
    for given, attribute, builtin in ((reporters, "REPORTERS", TIMESERIES_DTYPES),
                                      (agent_reporters, "AGENT_REPORTERS", AGENT_DTYPES)):
        argument = attribute.lower()
        chosen: dict[str, Callable[..., Any]] = {}
        sources = []
        if module is not None and getattr(module, attribute, None) is not None:
            sources.append((f"the scenario's {attribute}", getattr(module, attribute)))
        if given is not None:
            sources.append((argument, given))
        for where, table in sources:
            if not isinstance(table, Mapping):
                raise ValueError(f"{where} must be a dict of name -> function, got "
                                 f"{type(table).__name__}")
            for name, fn in table.items():
                if not isinstance(name, str) or not name or len(name) > MAX_NAME \
                        or not name.isprintable():
                    raise ValueError(f"{where}: a reporter's name must be a printable string "
                                     f"of 1 to {MAX_NAME} characters, got {name!r}")
                if name in builtin:
                    raise ValueError(f"{where}: the reporter name {name!r} is a built-in "
                                     "column of the time series; choose another")
                if name in chosen:
                    raise ValueError(f"{where}: the reporter {name!r} is given twice (the "
                                     f"scenario's {attribute} already has it)")
                if not callable(fn):
                    raise ValueError(f"{where}: reporter {name!r} is not a function, got "
                                     f"{type(fn).__name__}")
                chosen[name] = fn
        out.append(chosen)
    return out[0], out[1]


def check_picklable(reporters: Reporters | None, agent_reporters: Reporters | None,
                    engine: str) -> None:
    """ValueError (one line) for a reporter another process cannot receive: a lambda, a
    function defined inside another, anything pickle refuses."""
    for kind, table in (("reporter", reporters), ("agent reporter", agent_reporters)):
        for name, fn in (table or {}).items():
            qualname = str(getattr(fn, "__qualname__", ""))
            problem = None
            if "<lambda>" in qualname or "<locals>" in qualname:
                problem = f"{qualname} is not defined at a module's top level"
            else:
                try:
                    pickle.dumps(fn)
                except Exception as exc:  # pickle raises several kinds
                    problem = f"it does not pickle ({type(exc).__name__}: " \
                              f"{str(exc).splitlines()[0] if str(exc) else ''})"
            if problem is not None:
                raise ValueError(f"{kind} {name!r}: engine {engine!r} runs in other processes, "
                                 f"which need a module-level function (def at the top of "
                                 f"an importable module); {problem}")


def _value(name: str, value: Any, where: str) -> Value:
    """``value`` as a column's value: an int, float or str (numpy scalars taken as their
    Python values); ReporterError naming the reporter otherwise."""
    if isinstance(value, (np.integer, np.floating)):
        value = value.item()
    if type(value) in (int, float, str):
        return value  # type: ignore[no-any-return]
    if isinstance(value, bool):
        return int(value)
    raise ReporterError(f"reporter {name!r} returned {type(value).__name__} "
                        f"{_short(value)} {where}: a reporter returns a number or a string")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class ReporterSampler:
    """Calls a run's reporters at each interval and final sample, and keeps their values.

    The first reporter that raises (or returns what a column cannot hold) is printed with
    its traceback on stderr as it happens and kept in :attr:`failure`; from then on no
    reporter is called (the built-in figures go on being sampled), and the runner fails
    the run with it once the run has ended."""

    def __init__(self, reporters: Mapping[str, Callable[..., Any]],
                 agent_reporters: Mapping[str, Callable[..., Any]]) -> None:
        self.reporters = dict(reporters)
        self.agent_reporters = dict(agent_reporters)
        self.rows: list[Reported] = []
        self.failure: ReporterError | None = None

    def __bool__(self) -> bool:
        return bool(self.reporters or self.agent_reporters)

    def sample(self, number: int, t: float, views: Sequence[WorldView],
               agents: Sequence[AgentSample]) -> None:
        """Values of sample ``number`` (at ``t``): each reporter of each view, each agent
        reporter of each of ``agents`` (the sample's agent rows)."""
        if self.failure is not None:
            return
        by_session = {view.session_id: view for view in views}
        try:
            if self.reporters:
                for view in views:
                    where = f"at t={t:g} (session {view.session_id})"
                    self.rows.append(Reported(number, t, view.session_id, None, tuple(
                        self._call(name, fn, view, where)
                        for name, fn in self.reporters.items())))
            if self.agent_reporters:
                for row in agents:
                    world = by_session.get(row.session_id)
                    if world is None:
                        continue
                    agent = AgentView(row.agent_id, row.name, row.role, row.status, world)
                    where = f"at t={t:g} (session {row.session_id}, agent {row.agent_id})"
                    self.rows.append(Reported(number, t, row.session_id, row.agent_id, tuple(
                        self._call(name, fn, agent, where)
                        for name, fn in self.agent_reporters.items())))
        except ReporterError as exc:
            self.failure = exc
            print(f"barnraise: {exc}" + (f"\n{exc.traceback}" if exc.traceback else ""),
                  file=sys.stderr, flush=True)

    @staticmethod
    def _call(name: str, fn: Callable[..., Any], view: Any, where: str) -> Value:
        try:
            value = fn(view)
        except Exception as exc:
            text = "".join(traceback.format_exception(exc))
            error = ReporterError(f"reporter {name!r} raised {type(exc).__name__} {where}: "
                                  f"{exc}", text)
            raise error from exc
        return _value(name, value, where)
