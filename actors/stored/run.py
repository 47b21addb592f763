"""A stored run, read: its log as stored (:class:`barnraise.sim.store.StoredLog`) and what folds of
the log show: the world at any time, the canvas, and the run's samples (the live
recorder's :class:`barnraise.sim.metrics.MetricsCollector` fed from the log,
:meth:`StoredRun.samples`).

The readers depend on the store's schema, not the other way round: :mod:`barnraise.sim.store`
writes and reads the file, :mod:`barnraise.actors.stored.rebuild` and
:mod:`barnraise.actors.stored.index` fold what it
reads, and this module, above both, is what ``barnraise.open_run`` hands out.
"""

from __future__ import annotations

import bisect
import math
from typing import TYPE_CHECKING, Any, Final, NamedTuple

import msgspec
import numpy as np

from barnraise.actors.stored.index import LogIndex
from barnraise.actors.stored.rebuild import Pairing, malformed, pair_writes, world_at
from barnraise.sim.analyses import events_frame
from barnraise.sim.canvas import completion_percent
from barnraise.sim.log import decode
from barnraise.sim.metrics import DEFAULT_INTERVAL, Metrics, MetricsCollector
from barnraise.sim.record import canvas_of, delegations_frame, record_repr
from barnraise.sim.store import StoredLog, StoreError
from barnraise.sim.trace import DELIVER, DROP, EVENT, TraceRecord

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["MAX_SAMPLES", "StoredRun", "is_time"]

#: The most interval samples one fold of a stored log makes (:meth:`StoredRun.samples`):
#: past it, a ValueError asks for a wider interval instead of a pass whose time and memory
#: grow with the run's simulated span (a long realtime run, or a store that says t=1e15).
MAX_SAMPLES: Final = 100_000


def is_time(t: object) -> bool:
    """Is ``t`` a simulated time as barnraise writes one: a finite number >= 0?"""
    return type(t) in (float, int) and 0.0 <= t < math.inf  # type: ignore[operator]


class StoredRun(StoredLog):
    """A read-only view of a store (see ``barnraise.open_run``): :class:`StoredLog`, and
    the folds of its log. A :class:`barnraise.sim.record.RunRecord`: ``.events()``,
    ``.delegations()``, ``.timeseries()`` and ``.agent_timeseries()`` are the frames
    ``RunResult`` gives for the same run."""

    def __repr__(self) -> str:
        last = self.last()
        return record_repr("StoredRun", self.summary, 0 if last is None else last.seq + 1,
                        path=self.path, status=self.status)

    def events(self) -> pd.DataFrame:
        """The run's domain events, one row each (:func:`barnraise.sim.analyses.events_frame`'s
        columns; the raw log is :meth:`records`). StoreError for an event whose content
        is not the JSON object barnraise writes."""
        try:
            return events_frame(self.records(kind=EVENT))
        except (msgspec.DecodeError, AttributeError, TypeError):
            for r in self.records(kind=EVENT):  # (only to name the record)
                try:
                    body = decode(r.content)
                except msgspec.DecodeError as exc:
                    raise malformed(r, exc) from exc
                if not isinstance(body, dict):
                    kind = type(body).__name__
                    raise malformed(r, TypeError(f"its content is {kind}")) from None
            raise

    def delegations(self) -> pd.DataFrame:
        """One row per task the run delegated (:data:`barnraise.sim.record.DELEGATION_COLUMNS`):
        the store's delegations table (:meth:`StoredLog.delegation_rows`) as a frame.
        ``delivered_at``: when the task's ``task_result`` letter reached the delegator,
        or, for a result the stopped run had not delivered, when the resumed delegator
        read it from the task queue; NaN if neither happened."""
        return delegations_frame(self.delegation_rows())

    def world(self, at: float | None = None) -> dict[str, Any]:
        """Every session's world after each record at or before simulated time ``at``
        (default: the end), folded from the last snapshot before it and the log
        (:func:`barnraise.actors.stored.rebuild.world_at`): canvas bytes and shape, members, claims,
        task
        statuses, checkpoints and the members' colours, by session id. ValueError for an
        ``at`` that is not a finite number."""
        if at is not None and (isinstance(at, bool) or not isinstance(at, (int, float))
                               or not math.isfinite(at)):
            raise ValueError(f"at must be a finite simulated time in seconds, got {at!r}")
        return world_at(self, at).state()

    def canvas(self, at: float | None = None, session_id: str | None = None
               ) -> np.ndarray[Any, Any] | None:
        """The canvas (``[y, x]`` tile codes) of ``session_id`` (default: the summary's
        session, else the first) after every record at or before simulated time ``at``
        (default: the end), folded from the snapshots and the log. None when that
        session has no canvas then (:func:`barnraise.sim.record.canvas_of`). ValueError
        for an ``at`` that is not a finite number."""
        return canvas_of(self.world(at), session_id, self.summary)

    def timeseries(self, session_id: str | None = None, *,
                   interval: float = DEFAULT_INTERVAL) -> pd.DataFrame:
        """The run's model-level samples, one row each, as ``RunResult.timeseries()`` gives
        them for the same run (:data:`barnraise.sim.metrics.TIMESERIES_DTYPES`; every session's by
        default, ``session_id`` keeps one): the log's records fed through the collector the
        live recorder feeds (:meth:`samples`). ``interval``: the simulated seconds between
        interval samples the run was recorded with. ValueError for an interval that is not
        a number > 0; LookupError for a session never sampled."""
        _check_session(session_id)
        return self.samples(interval).timeseries(session_id)

    def agent_timeseries(self, session_id: str | None = None, *,
                         interval: float = DEFAULT_INTERVAL) -> pd.DataFrame:
        """The run's agent-level samples (:data:`barnraise.sim.metrics.AGENT_DTYPES`), as
        ``RunResult.agent_timeseries()`` gives them for the same run (see :meth:`timeseries`)."""
        _check_session(session_id)
        return self.samples(interval).agent_timeseries(session_id)

    def samples(self, interval: float = DEFAULT_INTERVAL) -> Metrics:
        """The run's samples folded from its log by the live recorder's collector
        (:class:`barnraise.sim.metrics.MetricsCollector`): each domain event goes to
        :meth:`~barnraise.sim.metrics.MetricsCollector.on_event` as the trace's listener gives it
        to the recorder, and every ``interval`` simulated seconds the sessions open then,
        as the log folds them (:class:`barnraise.actors.stored.index.LogIndex`), go to
        :meth:`~barnraise.sim.metrics.MetricsCollector.sample`, after every record at or before
        that time (where the deterministic recorder's tick runs), while the log goes on
        past it; a finished run's final sample comes at its end. Mailbox depths: letters
        handled after the sample that were sent by then (the store's ``latency`` option;
        0 when it has none, where no letter waits between instants). For a deterministic
        run these are the rows the live run recorded (``tests/test_record.py``); a
        realtime run's recorder sampled by the wall clock, so its rows differ; under a
        fault plan that drops letters a tile write can pair with another call's answer
        (:func:`barnraise.actors.stored.rebuild.world_at`'s note), and the tile figures may
        differ."""
        return self.fold_samples(interval)[0]

    def fold_samples(self, interval: float = DEFAULT_INTERVAL, *,
                     pairing: Pairing | None = None) -> tuple[Metrics, LogIndex]:
        """:meth:`samples`, and the :class:`LogIndex` of the same pass over the log (the
        view's scrubber needs both). ``pairing``:
        :func:`barnraise.actors.stored.rebuild.pair_writes` of
        this log, when the caller has it."""
        if isinstance(interval, bool) or not isinstance(interval, (int, float)) \
                or not math.isfinite(interval) or interval <= 0:
            raise ValueError(f"interval must be a finite number of seconds > 0, "
                             f"got {interval!r}")
        if pairing is None:
            records = self.records()
            try:
                pairing = pair_writes(records)
            finally:
                records.close()
        latency = float((self.info.options.get("latency") if self.info else None) or 0.0)
        deliveries: tuple[list[float], list[str]] = ([], [])
        seen: dict[str, int] = {}  # every name, by its first record (sender or recipient)
        if latency > 0:
            for r in self.records():
                seen.setdefault(r.sender, len(seen))
                seen.setdefault(r.recipient, len(seen))
                if r.kind == DELIVER:
                    deliveries[0].append(r.t)
                    deliveries[1].append(r.recipient)
        sampler = _Sampler(float(interval), latency, deliveries, seen)
        index = LogIndex(self, pairing, visit=sampler.visit)
        summary = self.summary
        if self.status == "finished" and summary is not None:
            sampler.finish(summary.get("virtual_time"))
        result = sampler.collector.result()
        # The run's own reporters: their values as the run kept them (a store never
        # calls user code), on the rows of the samples they were taken at.
        result.reporters, result.agent_reporters, result.reported = self.reported()
        return result, index


def _check_session(session_id: object) -> None:
    if session_id is not None and not isinstance(session_id, str):
        raise TypeError(f"session_id must be a session's id (a str), got {session_id!r}; "
                        f"the interval is keyword-only: interval={session_id!r}")


class _Member(NamedTuple):
    agent_id: str
    name: str
    role: str


class _Claim(NamedTuple):
    claim_id: str
    agent_id: str


class _Task(NamedTuple):
    task_id: str
    status: str
    assigned_to: str


class _Progress(NamedTuple):
    tiles_placed: int
    conflicts: int
    lost_work: int
    completion_percent: float | None
    tiles_by_agent: dict[str, int]


class _Folded(NamedTuple):
    """One session of the folded world, as an interval sample reads it
    (:class:`barnraise.sim.metrics.SampledWorld`)."""

    session_id: str
    members: tuple[_Member, ...]
    claims: tuple[_Claim, ...]
    tasks: tuple[_Task, ...]
    canvas: np.ndarray[Any, Any] | None
    has_blueprint: bool
    progress: _Progress

    def task_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for task in self.tasks:
            counts[task.status] = counts.get(task.status, 0) + 1
        return counts


class _Sampler:
    """Drives a :class:`MetricsCollector` from one pass over a log (:meth:`visit`, the
    :class:`LogIndex` pass's visitor), as the deterministic recorder drives it live."""

    def __init__(self, interval: float, latency: float,
                 deliveries: tuple[list[float], list[str]], order: dict[str, int]) -> None:
        self.interval = interval
        self.latency = latency
        #: The times and recipients of the log's deliveries, in order (latency > 0 only).
        self.deliveries = deliveries
        #: The order the recorder's runtime lists actors in, as near as the log says
        #: (the first record naming each): the deepest mailbox's tie-break.
        self.order = order
        # resync: a folded world is exact, as a deterministic run's views are.
        self.collector = MetricsCollector(interval, resync=True, check=False)
        self.tick = 0.0 + interval  # the recorder arms its timer at 0, re-arms from each tick
        self.index: LogIndex | None = None
        self.delivered = 0
        self.dropped = 0
        self.last_t: float | None = None
        self.taken = 0  # interval samples taken

    def visit(self, index: LogIndex, r: TraceRecord | None) -> None:
        self.index = index
        if r is None:
            return
        t = r.t
        if not is_time(t):
            raise StoreError(f"record {r.seq}: time {t!r} is not a finite simulated time "
                             ">= 0; barnraise writes no such record")
        if self.tick < t:
            self._ticks_before(t)
        if r.kind == DELIVER:
            self.delivered += 1
        elif r.kind == DROP:
            self.dropped += 1
        elif r.kind == EVENT:
            try:
                body = decode(r.content)
            except msgspec.DecodeError as exc:
                raise malformed(r, exc) from exc
            self.collector.on_event(r.t, r.sender, r.recipient, r.type, body)
        self.last_t = r.t

    def finish(self, virtual_time: Any) -> None:
        """The final sample, at the run's end: its last record's time, or the summary's
        ``virtual_time`` when the clock went on past it (timers that left no record: a
        fault plan's retries, a run driven to a deadline). The clock got there by taking
        entries, so the recorder ticked at every interval before it (not at the end
        itself, where the run stopped): those samples come first."""
        end = self.last_t if self.last_t is not None else 0.0
        if type(virtual_time) in (int, float) and math.isfinite(virtual_time) \
                and round(end, 6) != virtual_time:
            end = float(virtual_time)
            self._ticks_before(end)
        self._sample(end, final=True)

    def _ticks_before(self, end: float) -> None:
        """The interval samples due before ``end``: ValueError, before any is taken, when
        they would bring the samples past :data:`MAX_SAMPLES` (a long run at a short
        interval asks for a wider one)."""
        due = math.ceil((end - self.tick) / self.interval)
        if self.taken + due > MAX_SAMPLES:
            raise ValueError(
                f"the run goes on to t={end:g} s: {self.taken + due:,} samples at an interval "
                f"of {self.interval:g} s, over the {MAX_SAMPLES:,} a fold makes; ask for an "
                f"interval of at least {end / MAX_SAMPLES:.3g} s")
        while self.tick < end:
            self._sample(self.tick)
            self.taken += 1
            self.tick = self.tick + self.interval

    def _sample(self, t: float, final: bool = False) -> None:
        index = self.index
        if index is None or index.fold is None:
            return
        collector = self.collector
        views = []
        read = []
        for sid, part in index.fold.sessions.items():
            f = index.figures_now(sid)
            plan = f.blueprints[-1][1] if f.blueprints else None
            views.append(_Folded(
                sid,
                tuple(_Member(aid, m[0], m[1]) for aid, m in part.members.items()),
                tuple(_Claim(cid, c[0]) for cid, c in part.claims.items()),
                tuple(_Task(tid, "awaiting_approval" if task[2] else str(task[0]),
                            str(task[1])) for tid, task in part.tasks.items()),
                part.canvas, plan is not None,
                _Progress(f.tiles_placed, f.conflicts, f.lost_work,
                          completion_percent(part.canvas, plan) if plan is not None else None,
                          dict(f.by_agent))))
            read.append(final or collector.needs_tasks(sid))
        collector.sample(t, views, delivered=self.delivered, dropped=self.dropped,
                         mailbox=(0, None) if final else self._deepest(t),
                         final=final, tasks_read=read)

    def _deepest(self, t: float) -> tuple[int, str | None]:
        """The most letters waiting in one mailbox after everything at ``t``, and whose."""
        if self.latency <= 0:
            return 0, None  # a letter is handled at the instant it is sent
        # A letter is handled ``latency`` after it is sent: those handled in
        # (t, t + latency] were sent by t and wait now.
        times = self.deliveries[0]
        waiting: dict[str, int] = {}
        for i in range(bisect.bisect_right(times, t),
                       bisect.bisect_right(times, t + self.latency)):
            who = self.deliveries[1][i]
            waiting[who] = waiting.get(who, 0) + 1
        depth, deepest = 0, None
        for who in sorted(waiting, key=lambda name: self.order.get(name, len(self.order))):
            if waiting[who] > depth:
                depth, deepest = waiting[who], who
        return depth, deepest
