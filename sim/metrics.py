"""Per-step metrics of a run, as plain typed rows and as pandas DataFrames.

The idea of Mesa's ``DataCollector`` (model-level and agent-level reporters, one
row per step), for a world that has no steps: :class:`MetricsCollector` samples

* at **every domain event that changes what it records** (a claim granted or
  released, a conflict, a task changing status, a member joining or leaving),
  from the event alone: it keeps counters that each event moves, so an event
  sample costs one small row and reads nothing;
* at **every simulated interval** (and once at the end), from a frozen
  :class:`~barnraise.sim.views.WorldView` per session and the dispatcher's
  :class:`~barnraise.sim.dispatch.Statistics`: the figures no event carries (tiles placed,
  completion percent, messages delivered and dropped, the deepest mailbox,
  tiles per agent) and the expensive one (completion compares the whole canvas
  with the blueprint) are read only here.

This module only turns what it is given into rows (a trace's events, letters and task
attempts as frames are :mod:`barnraise.sim.analyses`'); ``actors/recording.py``
(:class:`~barnraise.actors.recording.Recorder`) feeds it from a running Simulation (an event
listener on the trace and a daemon timer, or a thread in realtime mode).

What a caller may rely on:

* **Rows are plain, typed values**: :class:`Sample` (one session at one moment)
  and :class:`AgentSample` (one agent of one session at one moment) are frozen
  ``msgspec.Struct`` values whose fields are ``int``, ``float``, ``str`` or
  None; a field that a sample does not measure is None (an event sample has no
  tile count; a session without a blueprint has no completion percent). They
  store and load back as they are (``msgspec.structs.astuple`` / the class).
* **Frames**: :func:`timeseries_frame` and :func:`agent_frame` make tidy
  DataFrames with the dtypes of :data:`TIMESERIES_DTYPES` and
  :data:`AGENT_DTYPES` (nullable ``Int64`` for counts a sample may lack), one
  row per sample, in sample order; :func:`read_timeseries` and
  :func:`read_agent_timeseries` read the CSV files back with those dtypes.
* **Consistency**: in deterministic mode every interval sample compares the
  counters the events moved with the world (claims and conflicts; the task
  counts too at the final sample, and at every sample when asked to check,
  since reading every task is the expensive part) and records any difference
  in :attr:`Metrics.drift` (tested to stay empty for every shipped scenario),
  then takes the world's figures. A rollback restores tasks without events:
  until the next interval sample re-reads them, event samples show their task
  counts as None.
* **Cost**: see ``docs/benchmarks.md`` (the sweep section covers the recorder).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Protocol

import msgspec
import numpy as np
from numpy.typing import NDArray

from barnraise.sim.events import status_after

if TYPE_CHECKING:
    import os

    import pandas as pd

__all__ = [
    "AGENT_DTYPES",
    "DEFAULT_INTERVAL",
    "TASK_STATUSES",
    "TICK_PRIORITY",
    "TIMESERIES_DTYPES",
    "AgentSample",
    "Frame",
    "Metrics",
    "MetricsCollector",
    "Reported",
    "Sample",
    "SampledWorld",
    "Value",
    "agent_frame",
    "read_agent_timeseries",
    "read_timeseries",
    "timeseries_frame",
    "with_reported",
]

#: Every status a task can show, in the order of the ``tasks_*`` columns.
TASK_STATUSES: Final = ("pending", "in_progress", "awaiting_approval", "completed", "failed",
                        "blocked", "cancelled")

INTERVAL: Final = "interval"
EVENT: Final = "event"
FINAL: Final = "final"

#: Simulated seconds between interval samples unless told otherwise.
DEFAULT_INTERVAL: Final = 1.0
#: The deterministic recorder's timer priority: below any letter's (1..10) and any other
#: timer's, so its sample at ``t`` comes after everything else due at ``t``. A stored
#: log's fold (``StoredRun.timeseries()``) samples at the same place: after every record
#: at or before ``t``.
TICK_PRIORITY: Final = 0


class _Member(Protocol):
    @property
    def agent_id(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def role(self) -> str: ...


class _Claim(Protocol):
    @property
    def claim_id(self) -> str: ...
    @property
    def agent_id(self) -> str: ...


class _Task(Protocol):
    @property
    def task_id(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def assigned_to(self) -> str: ...


class _Progress(Protocol):
    @property
    def tiles_placed(self) -> int: ...
    @property
    def conflicts(self) -> int: ...
    @property
    def lost_work(self) -> int: ...
    @property
    def completion_percent(self) -> float | None: ...
    @property
    def tiles_by_agent(self) -> dict[str, int]: ...


class SampledWorld(Protocol):
    """What an interval sample reads of a session: a :class:`~barnraise.sim.views.WorldView` (live),
    or the world folded from a stored log (``StoredRun.timeseries()``)."""

    @property
    def session_id(self) -> str: ...
    @property
    def members(self) -> Sequence[_Member]: ...
    @property
    def claims(self) -> Sequence[_Claim]: ...
    @property
    def tasks(self) -> Sequence[_Task]: ...
    @property
    def canvas(self) -> NDArray[np.uint8] | None: ...
    @property
    def has_blueprint(self) -> bool: ...
    @property
    def progress(self) -> _Progress: ...

    def task_counts(self) -> Mapping[str, int]: ...


class Sample(msgspec.Struct, frozen=True):
    """One session at one moment. None: not measured at this sample."""

    #: Sample number; the rows of one moment (one per session) share it.
    sample: int
    #: Simulation seconds.
    t: float
    #: ``interval``, ``event`` or ``final``.
    trigger: str
    #: The domain event behind an ``event`` sample ("" otherwise).
    event: str
    session_id: str
    #: Share of the blueprint's non-empty cells the canvas has right (0..100);
    #: None at event samples and in sessions without a blueprint.
    completion_percent: float | None
    #: Tiles written so far (interval and final samples).
    tiles_placed: int | None
    #: Cells overwritten by another agent (interval and final samples).
    lost_work: int | None
    #: Claims held now.
    claims_active: int
    #: Claims refused so far for overlapping someone else's.
    conflicts: int
    tasks_pending: int | None
    tasks_in_progress: int | None
    tasks_awaiting_approval: int | None
    tasks_completed: int | None
    tasks_failed: int | None
    tasks_blocked: int | None
    tasks_cancelled: int | None
    #: Messages handed to a recipient so far, in the whole dispatcher (interval, final).
    messages_delivered: int | None
    #: Messages dropped so far (dead letters of any reason), in the whole dispatcher.
    messages_dropped: int | None
    #: The most letters waiting in any one mailbox, and whose (interval, final; the
    #: agent is None when no mailbox holds a letter).
    mailbox_max: int | None
    mailbox_max_agent: str | None


class AgentSample(msgspec.Struct, frozen=True):
    """One member of one session at one moment.

    ``status``: ``working`` (a task in progress), ``awaiting_approval`` (its work
    waits for a verdict), ``idle``, ``offline`` (heartbeats lost) or ``left``.
    """

    sample: int
    t: float
    trigger: str
    session_id: str
    agent_id: str
    name: str
    role: str
    status: str
    #: Tasks assigned to it that completed.
    tasks_done: int
    #: Tiles it wrote (interval and final samples).
    tiles_placed: int | None
    #: Claims it holds now.
    claims_held: int


#: A reporter's value: what a column of one's own holds.
Value = int | float | str


class Reported(msgspec.Struct, frozen=True):
    """The values of a run's own reporters (``sim/reporters.py``) at one sample: of a
    session (``agent_id`` None: the model reporters) or of one agent of it (the agent
    reporters), in the order the reporters were given. ``sample`` and ``t`` are those of
    the built-in row they belong to."""

    sample: int
    t: float
    session_id: str
    agent_id: str | None
    values: tuple[Value, ...]


class Frame(msgspec.Struct, frozen=True):
    """A downsampled picture of a session's canvas (every ``step``-th cell a side)."""

    t: float
    session_id: str
    step: int
    tiles: Any  # a read-only uint8 [y, x] array


def _dtypes(cls: type[msgspec.Struct]) -> dict[str, str]:
    out: dict[str, str] = {}
    for info in msgspec.structs.fields(cls):
        kind = info.type
        nullable = False
        if getattr(kind, "__args__", None) and type(None) in kind.__args__:
            nullable = True
            kind = next(a for a in kind.__args__ if a is not type(None))
        if kind is int:
            out[info.name] = "Int64" if nullable else "int64"
        elif kind is float:
            out[info.name] = "float64"
        elif kind is bool:
            out[info.name] = "boolean" if nullable else "bool"
        else:
            out[info.name] = "string"
    return out


#: Column -> pandas dtype of :func:`timeseries_frame` (and of timeseries.csv read back).
TIMESERIES_DTYPES: Final[Mapping[str, str]] = _dtypes(Sample)
#: Column -> pandas dtype of :func:`agent_frame`.
AGENT_DTYPES: Final[Mapping[str, str]] = _dtypes(AgentSample)


@dataclass
class Metrics:
    """What a collector recorded: rows, optional canvas frames, and its own bookkeeping.

    ``drift`` counts interval samples (deterministic mode) whose world figures
    differed from the counters the events had moved; ``errors`` what went wrong
    while sampling (a sample that failed is skipped, never raised into the run).
    """

    interval: float
    samples: list[Sample] = field(default_factory=list)
    agents: list[AgentSample] = field(default_factory=list)
    frames: list[Frame] = field(default_factory=list)
    drift: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    #: The names of the run's own reporters and agent reporters (their columns, after
    #: the built-in ones), and their values (:class:`Reported`).
    reporters: tuple[str, ...] = ()
    agent_reporters: tuple[str, ...] = ()
    reported: list[Reported] = field(default_factory=list)

    def timeseries(self, session_id: str | None = None) -> pd.DataFrame:
        """Model-level samples as a DataFrame (optionally of one session), with a column
        per reporter of the run's own."""
        return with_reported(timeseries_frame(self.samples, session_id), self.reporters,
                             self.reported, agents=False)

    def agent_timeseries(self, session_id: str | None = None) -> pd.DataFrame:
        """Agent-level samples as a DataFrame (optionally of one session), with a column
        per agent reporter of the run's own."""
        return with_reported(agent_frame(self.agents, session_id), self.agent_reporters,
                             self.reported, agents=True)


def _frame(rows: Sequence[msgspec.Struct], cls: type[msgspec.Struct],
           dtypes: Mapping[str, str], session_id: str | None) -> pd.DataFrame:
    import pandas as pd

    names = list(dtypes)
    if session_id is not None:
        kept = [r for r in rows if r.session_id == session_id]  # type: ignore[attr-defined]
        if not kept and rows:
            known = sorted({r.session_id for r in rows})  # type: ignore[attr-defined]
            raise LookupError(f"no samples of session {session_id!r}; sampled: "
                              f"{', '.join(known)}")
        rows = kept
    table = pd.DataFrame([msgspec.structs.astuple(r) for r in rows], columns=names)
    return table.astype(dict(dtypes))


def timeseries_frame(rows: Sequence[Sample], session_id: str | None = None) -> pd.DataFrame:
    """The tidy DataFrame of model samples (columns and dtypes: :data:`TIMESERIES_DTYPES`),
    of every session or of ``session_id`` (LookupError if it was never sampled)."""
    return _frame(rows, Sample, TIMESERIES_DTYPES, session_id)


def agent_frame(rows: Sequence[AgentSample], session_id: str | None = None) -> pd.DataFrame:
    """The tidy DataFrame of agent samples (columns and dtypes: :data:`AGENT_DTYPES`)."""
    return _frame(rows, AgentSample, AGENT_DTYPES, session_id)


def with_reported(table: pd.DataFrame, names: Sequence[str], rows: Sequence[Reported], *,
                  agents: bool) -> pd.DataFrame:
    """``table`` (a :func:`timeseries_frame`, or with ``agents`` an :func:`agent_frame`)
    with a column per name in ``names``: the value each row's sample got from that
    reporter (``rows``), missing where it got none (an event sample). A column's dtype
    follows its values: ``Int64`` for whole numbers, ``float64`` for numbers, ``string``
    for text, ``object`` for a mix."""
    if not names:
        return table
    import pandas as pd

    keyed = {(r.sample, r.t, r.session_id, r.agent_id): r.values for r in rows
             if (r.agent_id is not None) == agents}
    keys = zip(table["sample"], table["t"], table["session_id"],
               table["agent_id"] if agents else [None] * len(table), strict=True)
    columns: list[list[Value | None]] = [[] for _ in names]
    for sample, t, sid, agent_id in keys:
        values = keyed.get((int(sample), float(t), str(sid),
                            None if agent_id is None else str(agent_id)))
        for i, column in enumerate(columns):
            column.append(None if values is None else values[i])
    for name, column in zip(names, columns, strict=True):
        kinds = {type(v) for v in column if v is not None}
        dtype = ("Int64" if kinds == {int} else "float64" if kinds <= {int, float} and kinds
                 else "string" if kinds == {str} else "object")
        table[name] = pd.Series(column, index=table.index, dtype=dtype)
    return table


def _nullable(cls: type[msgspec.Struct]) -> set[str]:
    return {f.name for f in msgspec.structs.fields(cls)
            if type(None) in getattr(f.type, "__args__", ())}


def _read(path: str | os.PathLike[str], dtypes: Mapping[str, str],
          cls: type[msgspec.Struct]) -> pd.DataFrame:
    import pandas as pd

    # An empty field is missing in a column that may be None, and "" in one that
    # may not (the ``event`` of an interval sample).
    nullable = _nullable(cls)
    table = pd.read_csv(path, dtype=dict(dtypes), keep_default_na=False,
                        na_values={k: [""] for k in dtypes if k in nullable})
    missing = [c for c in dtypes if c not in table.columns]
    if missing:
        raise ValueError(f"{path}: not a barnraise metrics file (missing {missing})")
    return table


def read_timeseries(path: str | os.PathLike[str]) -> pd.DataFrame:
    """A ``timeseries.csv`` (as ``--out`` writes it) back as :func:`timeseries_frame` made it."""
    return _read(path, TIMESERIES_DTYPES, Sample)


def read_agent_timeseries(path: str | os.PathLike[str]) -> pd.DataFrame:
    """An ``agents.csv`` back as :func:`agent_frame` made it."""
    return _read(path, AGENT_DTYPES, AgentSample)


# -- the collector ---------------------------------------------------------------------------


@dataclass(slots=True)
class _Agent:
    name: str
    role: str
    gone: str | None = None  # "left", "expired" or "offline"
    working: set[str] = field(default_factory=set)
    awaiting: set[str] = field(default_factory=set)
    done: int = 0
    claims: int = 0
    tiles: int | None = None

    @property
    def status(self) -> str:
        if self.gone is not None:
            return self.gone
        if self.working:
            return "working"
        if self.awaiting:
            return "awaiting_approval"
        return "idle"


@dataclass(slots=True)
class _Session:
    claims: dict[str, str] = field(default_factory=dict)  # claim id -> agent id
    conflicts: int = 0
    tasks: dict[str, str] = field(default_factory=dict)  # task id -> status
    assignee: dict[str, str] = field(default_factory=dict)  # task id -> agent id
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TASK_STATUSES, 0))
    stale: bool = False  # a rollback restored tasks without events
    agents: dict[str, _Agent] = field(default_factory=dict)

    def agent(self, agent_id: str) -> _Agent:
        found = self.agents.get(agent_id)
        if found is None:
            found = self.agents[agent_id] = _Agent(agent_id, "")
        return found

    def set_status(self, task_id: str, status: str) -> None:
        old = self.tasks.get(task_id)
        if old == status:
            return
        if old is not None:
            self.counts[old] -= 1
        self.tasks[task_id] = status
        self.counts[status] = self.counts.get(status, 0) + 1


#: Session events that move a counter this module keeps.
_SESSION_PREFIX: Final = "session:"
_EVENTS_SUFFIX: Final = ":events"


class MetricsCollector:
    """Turns domain events and world views into :class:`Sample` / :class:`AgentSample` rows.

    Feed it with :meth:`on_event` (a :meth:`barnraise.sim.trace.Trace.listen` listener) and
    :meth:`sample`; :meth:`result` is what it recorded. Thread-safe: in realtime
    mode events arrive on the services' threads and samples on a sampler thread.
    ``resync``: take the world's task statuses, claims and conflicts at every
    interval sample (deterministic mode, where a view is exact); otherwise only
    after a rollback. ``check``: count differences between the two in ``drift``.
    """

    def __init__(self, interval: float, *, resync: bool = True, check: bool = True) -> None:
        self._metrics = Metrics(interval)
        self._sessions: dict[str, _Session] = {}
        self._lock = threading.Lock()
        self._next = 0
        self._resync = resync
        self._check = check
        self._handlers = {
            "region_claimed": self._claimed, "region_released": self._released,
            "conflict_detected": self._conflict, "task_created": self._task_created,
            "task_accepted": self._task_accepted, "task_completed": self._task_completed,
            "task_failed": self._task_ended, "task_cancelled": self._task_ended,
            "task_blocked": self._task_blocked, "task_unblocked": self._task_pending,
            "task_requeued": self._task_requeued, "approval_requested": self._approval,
            "agent_joined": self._joined, "agent_left": self._left,
            "agent_offline": self._offline, "agent_expired": self._expired,
            "rollback": self._rollback,
        }

    # -- events ----------------------------------------------------------------------------

    def on_event(self, t: float, sender: str, topic: str, event_type: str, body: Any) -> None:
        """A domain event was recorded: move the counters it moves; sample if any moved."""
        handler = self._handlers.get(event_type)
        if handler is None or not topic.startswith(_SESSION_PREFIX) \
                or not topic.endswith(_EVENTS_SUFFIX) or not isinstance(body, dict):
            return
        session_id = body.get("session_id")
        if not isinstance(session_id, str):
            return
        with self._lock:
            state = self._sessions.get(session_id)
            if state is None:
                state = self._sessions[session_id] = _Session()
            touched: set[str] = set()
            handler(state, body, touched)
            number = self._next
            self._next += 1
            self._metrics.samples.append(self._row(number, t, EVENT, event_type, session_id,
                                                   state, None, None))
            for agent_id in sorted(touched):
                self._metrics.agents.append(self._agent_row(number, t, EVENT, session_id,
                                                            agent_id, state.agent(agent_id)))

    def _claimed(self, s: _Session, body: dict[str, Any], touched: set[str]) -> None:
        agent_id = str(body.get("agent_id"))
        if body.get("claim_id") not in s.claims:
            s.claims[str(body.get("claim_id"))] = agent_id
            s.agent(agent_id).claims += 1
            touched.add(agent_id)

    def _released(self, s: _Session, body: dict[str, Any], touched: set[str]) -> None:
        agent_id = s.claims.pop(str(body.get("claim_id")), None)
        if agent_id is not None:
            s.agent(agent_id).claims -= 1
            touched.add(agent_id)

    def _conflict(self, s: _Session, body: dict[str, Any], touched: set[str]) -> None:
        s.conflicts += 1

    @staticmethod
    def _move(s: _Session, body: dict[str, Any]) -> str:
        """Give ``body``'s task the status the event leaves it in; the task's id."""
        task_id = str(body["task_id"])
        status = status_after(body, s.tasks.get(task_id))
        if status is not None:
            s.set_status(task_id, status)
        return task_id

    def _task_created(self, s: _Session, body: dict[str, Any], touched: set[str]) -> None:
        self._move(s, body)

    def _task_accepted(self, s: _Session, body: dict[str, Any], touched: set[str]) -> None:
        task_id, agent_id = self._move(s, body), str(body.get("agent_id"))
        self._unassign(s, task_id, touched)
        s.assignee[task_id] = agent_id
        s.agent(agent_id).working.add(task_id)
        touched.add(agent_id)

    def _unassign(self, s: _Session, task_id: str, touched: set[str]) -> str | None:
        agent_id = s.assignee.get(task_id)
        if agent_id is not None:
            agent = s.agent(agent_id)
            agent.working.discard(task_id)
            agent.awaiting.discard(task_id)
            touched.add(agent_id)
        return agent_id

    def _task_completed(self, s: _Session, body: dict[str, Any], touched: set[str]) -> None:
        task_id = self._move(s, body)
        self._unassign(s, task_id, touched)
        who = body.get("assigned_to")
        if isinstance(who, str) and who != "any":
            s.agent(who).done += 1
            touched.add(who)

    def _task_ended(self, s: _Session, body: dict[str, Any], touched: set[str]) -> None:
        self._unassign(s, self._move(s, body), touched)

    def _task_blocked(self, s: _Session, body: dict[str, Any], touched: set[str]) -> None:
        self._unassign(s, self._move(s, body), touched)

    def _task_pending(self, s: _Session, body: dict[str, Any], touched: set[str]) -> None:
        self._move(s, body)

    def _task_requeued(self, s: _Session, body: dict[str, Any], touched: set[str]) -> None:
        # Back to pending from work (a member left: its pending or blocked task stays
        # so; the graph makes a retried one blocked instead when a dependency is
        # broken, and the interval samples' check would count a miss in ``drift``).
        task_id = self._move(s, body)
        self._unassign(s, task_id, touched)
        s.assignee.pop(task_id, None)

    def _approval(self, s: _Session, body: dict[str, Any], touched: set[str]) -> None:
        task_id = self._move(s, body)
        agent_id = s.assignee.get(task_id)
        if agent_id is not None:
            agent = s.agent(agent_id)
            agent.working.discard(task_id)
            agent.awaiting.add(task_id)
            touched.add(agent_id)

    def _joined(self, s: _Session, body: dict[str, Any], touched: set[str]) -> None:
        agent_id = str(body.get("agent_id"))
        s.agents[agent_id] = _Agent(str(body.get("name", agent_id)), str(body.get("role", "")))
        touched.add(agent_id)

    def _left(self, s: _Session, body: dict[str, Any], touched: set[str]) -> None:
        agent_id = str(body.get("agent_id"))
        s.agent(agent_id).gone = "left"
        touched.add(agent_id)

    def _expired(self, s: _Session, body: dict[str, Any], touched: set[str]) -> None:
        agent_id = str(body.get("agent_id"))
        s.agent(agent_id).gone = "expired"
        touched.add(agent_id)

    def _offline(self, s: _Session, body: dict[str, Any], touched: set[str]) -> None:
        agent_id = str(body.get("agent_id"))
        if agent_id in s.agents:
            s.agents[agent_id].gone = "offline"
            touched.add(agent_id)

    def _rollback(self, s: _Session, body: dict[str, Any], touched: set[str]) -> None:
        s.stale = True

    # -- interval samples ------------------------------------------------------------------

    def needs_tasks(self, session_id: str) -> bool:
        """True when the next sample of ``session_id`` must read its tasks: the events
        alone no longer tell (a rollback), or the session was never heard of."""
        with self._lock:
            state = self._sessions.get(session_id)
            return state is None or state.stale

    def sample(self, t: float, views: Iterable[SampledWorld], *, delivered: int | None = None,
               dropped: int | None = None, mailbox: tuple[int, str | None] | None = None,
               final: bool = False, frame_size: int = 0,
               tasks_read: bool | Sequence[bool] = True) -> tuple[int, list[AgentSample]]:
        """An interval (or, with ``final``, the last) sample of each viewed session.

        ``views`` should be built with ``completion=True`` (else completion is
        None) and, for ``frame_size`` > 0 (keep a canvas frame at most that many
        cells a side), with the canvas. ``tasks_read``: the views hold the tasks
        (one flag for all, or one per view; without them their task counts come
        from the events, and a session that :meth:`needs_tasks` must be viewed
        with them).

        Returns the sample's number and the agent rows it wrote (what a run's own agent
        reporters are called for).
        """
        trigger = FINAL if final else INTERVAL
        views = list(views)
        flags = [tasks_read] * len(views) if isinstance(tasks_read, bool) else list(tasks_read)
        if len(flags) != len(views):
            raise ValueError(f"tasks_read: {len(flags)} flags for {len(views)} views")
        with self._lock:
            number = self._next
            self._next += 1
            first = len(self._metrics.agents)
            for view, read in zip(views, flags, strict=True):
                self._sample_one(number, t, trigger, view, delivered, dropped, mailbox,
                                 frame_size, read)
            return number, self._metrics.agents[first:]

    def _sample_one(self, number: int, t: float, trigger: str, view: SampledWorld,
                    delivered: int | None, dropped: int | None,
                    mailbox: tuple[int, str | None] | None, frame_size: int,
                    tasks_read: bool) -> None:
        sid = view.session_id
        state = self._sessions.get(sid)
        if state is None:
            state = self._sessions[sid] = _Session(stale=True)
        if self._check and not (state.stale and tasks_read):
            mine: dict[str, int] = {}
            theirs: dict[str, int] = {}
            if tasks_read:
                mine = {k: v for k, v in state.counts.items() if v}
                theirs = dict(view.task_counts())
            if mine != theirs or len(state.claims) != len(view.claims) \
                    or state.conflicts != view.progress.conflicts:
                self._metrics.drift.append(
                    f"t={t:g} {sid}: events say tasks {mine}, claims {len(state.claims)}, "
                    f"conflicts {state.conflicts}; the world {theirs}, {len(view.claims)}, "
                    f"{view.progress.conflicts}")
        if self._resync or state.stale:
            self._take_world(state, view, tasks_read)
        for member in view.members:
            agent = state.agent(member.agent_id)
            agent.name, agent.role = member.name, member.role
        tiles = view.progress.tiles_by_agent
        for agent_id, agent in state.agents.items():
            agent.tiles = tiles.get(agent_id, 0)
        completion = view.progress.completion_percent if view.has_blueprint else None
        self._metrics.samples.append(self._row(
            number, t, trigger, "", sid, state, completion, view.progress.tiles_placed,
            lost_work=view.progress.lost_work, delivered=delivered, dropped=dropped,
            mailbox=mailbox))
        for agent_id in state.agents:
            self._metrics.agents.append(self._agent_row(number, t, trigger, sid, agent_id,
                                                        state.agents[agent_id]))
        if frame_size > 0 and view.canvas is not None:
            canvas = view.canvas
            step = max(1, -(-max(canvas.shape) // frame_size))
            small: NDArray[np.uint8] = np.ascontiguousarray(canvas[::step, ::step])
            small.flags.writeable = False
            self._metrics.frames.append(Frame(t, sid, step, small))

    def _take_world(self, state: _Session, view: SampledWorld, tasks_read: bool) -> None:
        state.claims = {c.claim_id: c.agent_id for c in view.claims}
        for agent in state.agents.values():
            agent.claims = 0
        for claim in view.claims:
            state.agent(claim.agent_id).claims += 1
        state.conflicts = view.progress.conflicts
        if not tasks_read:
            return
        state.tasks.clear()
        state.counts = dict.fromkeys(TASK_STATUSES, 0)
        state.assignee.clear()
        for agent in state.agents.values():
            agent.working.clear()
            agent.awaiting.clear()
            agent.done = 0
        for task in view.tasks:
            state.set_status(task.task_id, task.status)
            if task.assigned_to != "any":
                agent = state.agent(task.assigned_to)
                if task.status in ("in_progress", "awaiting_approval", "completed"):
                    state.assignee[task.task_id] = task.assigned_to
                if task.status == "in_progress":
                    agent.working.add(task.task_id)
                elif task.status == "awaiting_approval":
                    agent.awaiting.add(task.task_id)
                elif task.status == "completed":
                    agent.done += 1
        state.stale = False

    # -- rows ------------------------------------------------------------------------------

    def _row(self, number: int, t: float, trigger: str, event: str, sid: str, s: _Session,
             completion: float | None, tiles: int | None, *, lost_work: int | None = None,
             delivered: int | None = None, dropped: int | None = None,
             mailbox: tuple[int, str | None] | None = None) -> Sample:
        c: dict[str, int | None] = dict.fromkeys(TASK_STATUSES) if s.stale else {
            k: s.counts.get(k, 0) for k in TASK_STATUSES}
        return Sample(
            sample=number, t=t, trigger=trigger, event=event, session_id=sid,
            completion_percent=completion, tiles_placed=tiles, lost_work=lost_work,
            claims_active=len(s.claims), conflicts=s.conflicts,
            tasks_pending=c["pending"], tasks_in_progress=c["in_progress"],
            tasks_awaiting_approval=c["awaiting_approval"], tasks_completed=c["completed"],
            tasks_failed=c["failed"], tasks_blocked=c["blocked"],
            tasks_cancelled=c["cancelled"], messages_delivered=delivered,
            messages_dropped=dropped, mailbox_max=None if mailbox is None else mailbox[0],
            mailbox_max_agent=None if mailbox is None else mailbox[1])

    @staticmethod
    def _agent_row(number: int, t: float, trigger: str, sid: str, agent_id: str,
                   a: _Agent) -> AgentSample:
        tiles = a.tiles if trigger != EVENT else None
        return AgentSample(number, t, trigger, sid, agent_id, a.name, a.role, a.status, a.done,
                           tiles, a.claims)

    def note_error(self, text: str) -> None:
        """Record that a sample could not be taken (the run goes on)."""
        with self._lock:
            self._metrics.errors.append(text)

    def result(self) -> Metrics:
        """What has been recorded so far (a copy of the lists; rows are immutable)."""
        with self._lock:
            m = self._metrics
            return Metrics(m.interval, list(m.samples), list(m.agents), list(m.frames),
                           list(m.drift), list(m.errors), m.reporters, m.agent_reporters,
                           list(m.reported))
