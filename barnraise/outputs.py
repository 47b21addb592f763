"""A run's outputs: :class:`RunResult` (the record of a run,
:class:`barnraise.sim.record.RunRecord`:
its summary, frames, canvas, and the files ``--out`` writes) and :class:`RunSummary`
(what ``barnraise run --json`` prints), and :func:`check_out_dir` (``--out``'s check,
before a run starts). Running is :mod:`barnraise.runner`'s.
"""

from __future__ import annotations

import json
import math
import os
import pathlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np

from barnraise.actors.stored.rebuild import fold_records
from barnraise.actors.stored.run import StoredRun
from barnraise.scenarios import ScenarioError
from barnraise.sim.analyses import events_frame, messages_frame, task_intervals
from barnraise.sim.metrics import Metrics
from barnraise.sim.record import (
    RunRecord,
    canvas_of,
    delegations_frame,
    fold_delegations,
    record_repr,
)
from barnraise.sim.store import RunInfo
from barnraise.sim.trace import Trace, TraceRecord

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "RunResult",
    "RunSummary",
    "check_out_dir",
]


class RunSummary(TypedDict):
    """A run's summary (``RunResult.summary``, ``summary.json``): what ``barnraise run``
    prints. The world figures are of the summary's session (``session_id``; None, 0
    and empty when the run made none)."""

    scenario: str
    seed: int
    mode: str
    params: dict[str, Any]
    #: Realtime runs: wall seconds per simulated second (None in deterministic mode).
    time_scale: float | None
    trace_digest: str
    virtual_time: float
    wall_seconds: float
    messages_delivered: int
    messages_dropped: int
    #: Dead letters by reason.
    dead_letters: dict[str, int]
    #: Dead letters by their reason in words, where one was given (``no handler for
    #: 'ping' on builder-3 (...)``): the mistakes an author should see.
    dead_letter_details: dict[str, int]
    session_id: str | None
    agents: int
    tiles_placed: int
    has_blueprint: bool
    #: Of the blueprint built, 0-100 (None without a blueprint).
    completion_percent: float | None
    conflicts: int
    lost_work: int
    tasks_completed: int
    tasks_failed: int
    #: Tasks by status.
    tasks: dict[str, int]
    #: Exceptions that escaped a handler or a behaviour: all are counted here, and any
    #: fails the run unless the scenario sets ``EXPECTED_ERRORS = True``.
    behaviour_errors: int
    #: The first 100 of them, whole (``barnraise.sim.failures.Failure.summary``): agent,
    #: where (the behaviour or handler), error, detail, function, file, line, traceback.
    errors: list[dict[str, Any]]
    #: How the run ended (a :class:`barnraise.sim.dispatch.RunReport` reason) and who still waited.
    run_end: str
    waiting: list[str]
    #: What the scenario's own ``run`` returned.
    metrics: dict[str, Any]
    #: True for a resumed realtime run: its ``metrics`` are what the scenario's crew did
    #: after the resume only (a scenario's own figures are its own to add up), while every
    #: other count is the whole run's (the stopped part's read from its log). False for
    #: any other run, a deterministic resume included (it re-executes the whole run).
    resumed_metrics_only: bool
    #: Counts of the injected faults (None: the run had no fault plan).
    faults: dict[str, Any] | None
    #: What the supervisors did: ``errors_crashed`` (behaviour errors that crashed a
    #: role agent), ``errors_restarted`` (of those, followed by a restart) and
    #: ``gave_up`` (supervisors that hit their restart limit and stopped their group).
    supervision: dict[str, Any]
    #: The scenario's success check, over the rest of the summary.
    success: bool


def sequence_window(letters: pd.DataFrame, size: int = 60) -> pd.DataFrame:
    """The letters ``sequence.png`` draws, at most ``size`` of
    :func:`barnraise.sim.analyses.messages_frame`'s rows in trace order: the first of each
    message type (each drop reason too), then letters evenly spread over the whole run.
    The first ``size`` alone would be a run's setup, all at its first instant."""
    if size < 1:
        raise ValueError(f"size must be at least 1, got {size}")
    firsts = list(letters.drop_duplicates(["kind", "type", "reason"]).index[:size])
    spread = np.linspace(0, len(letters) - 1, max(0, size - len(firsts))).round()
    chosen = set(firsts) | {letters.index[int(i)] for i in spread}
    return letters.loc[sorted(chosen)]


@dataclass
class RunResult:
    """What a scenario run produced. It pickles, so it comes back from worker processes.

    ``trace`` is the run's trace (its digest is ``trace_digest``); ``final_canvas``
    and ``claims`` the summary session's tiles and claims at the end (the canvas at
    any time: :meth:`canvas`; claims as dicts:
    ``bounds``, ``color``, ``agent_id``, ``agent_name``); ``tasks`` its tasks at
    the end (plain dicts: task_id, type, description, status, assigned_to,
    dependencies, region, ...); ``metrics`` what the recorder sampled (None when
    the run was not recorded).
    """

    summary: RunSummary
    trace: Trace
    final_canvas: np.ndarray[Any, Any] | None = None
    claims: list[dict[str, Any]] = field(default_factory=list)
    tasks: list[dict[str, Any]] = field(default_factory=list)
    metrics: Metrics | None = None
    #: What the store of a resumed run said about it (None for other runs).
    stored: RunInfo | None = None
    #: A resumed run: how many records the store held when it was resumed, and the
    #: seconds from the start of :func:`resume` to live state (a deterministic run's
    #: stored records all reproduced; a realtime run's world restored from them, its
    #: crew about to start). None for other runs.
    resumed_records: int | None = None
    live_after: float | None = None

    @property
    def success(self) -> bool:
        return bool(self.summary["success"])

    @property
    def trace_digest(self) -> str:
        return str(self.summary["trace_digest"])

    @property
    def session_id(self) -> str | None:
        """The session the summary's world figures are of (None: there was none)."""
        sid = self.summary.get("session_id")
        return None if sid is None else str(sid)

    def _recorded(self) -> Metrics:
        if self.metrics is None:
            raise ValueError("this run was not recorded (run it with record=True)")
        return self.metrics

    def timeseries(self, session_id: str | None = None) -> pd.DataFrame:
        """Model-level samples, one row each (:data:`barnraise.sim.metrics.TIMESERIES_DTYPES`),
        then a column per reporter of the run's own (``run(reporters=...)``, a scenario's
        ``REPORTERS``).

        Every session's by default; ``session_id`` keeps one.
        """
        return self._recorded().timeseries(session_id)

    def agent_timeseries(self, session_id: str | None = None) -> pd.DataFrame:
        """Agent-level samples, one row per agent per sample
        (:data:`barnraise.sim.metrics.AGENT_DTYPES`), then a column per agent reporter."""
        return self._recorded().agent_timeseries(session_id)

    def canvas(self, at: float | None = None, session_id: str | None = None
               ) -> np.ndarray[Any, Any] | None:
        """The canvas (``[y, x]`` tile codes, read-only) of ``session_id`` (default: the
        summary's session, else the first) after every record at or before simulated
        time ``at``: at the end (``at`` None) of the summary's session, the canvas the
        run kept (:attr:`final_canvas`); else folded from the trace
        (:func:`barnraise.actors.stored.rebuild.fold_records`), as ``open_run(store).canvas(at)``
        folds the
        stored log. None when that session has no canvas then."""
        if at is None and (session_id is None or session_id == self.session_id) \
                and self.final_canvas is not None:
            return self.final_canvas
        return canvas_of(fold_records(self.trace.records(), at).state(), session_id,
                         self.summary)

    def events(self) -> pd.DataFrame:
        """The run's domain events, one row each (see
        :func:`barnraise.sim.analyses.events_frame`)."""
        return events_frame(self.trace)

    def records(self) -> Iterator[TraceRecord]:
        """The run's raw trace records, in order (as shown: secrets redacted)."""
        return self.trace.records()

    def delegations(self) -> pd.DataFrame:
        """One row per task the run delegated (:data:`barnraise.sim.record.DELEGATION_COLUMNS`),
        folded from the trace (:func:`barnraise.sim.record.fold_delegations`): the frame
        ``open_run(store).delegations()`` gives for the same run."""
        return delegations_frame(fold_delegations(self.trace.records()))

    def __repr__(self) -> str:
        return record_repr("RunResult", self.summary, len(self.trace))

    def messages(self, start: float = 0.0, end: float = math.inf) -> pd.DataFrame:
        """Deliveries and drops in a time window (see
        :func:`barnraise.sim.analyses.messages_frame`)."""
        return messages_frame(self.trace, start, end)

    def task_intervals(self) -> pd.DataFrame:
        """One row per attempt at a task (see :func:`barnraise.sim.analyses.task_intervals`)."""
        return task_intervals(self.events(), self.tasks)

    def write(self, directory: str | pathlib.Path) -> list[pathlib.Path]:
        """Write the run's files and plots into ``directory`` (made if missing).

        summary.json, trace.jsonl, events.csv; with metrics timeseries.csv and
        agents.csv (with the run's own reporters' columns); with a canvas canvas.png;
        and the plots that have data: timeseries.png, gantt.png, dag.png, sequence.png
        (the first 60 letters), build.gif (with canvas frames). The CSV files hold every
        session's rows, each with its ``session_id``; the plots are of the summary's
        session (the canvas, tasks and claims the run kept are its). Returns the paths
        written.

        Last comes ``manifest.json``, naming the run and its files; the files an
        earlier run's manifest there lists are removed first, so no file of another
        run stays beside these (only names a run writes, only files: a manifest that
        lists anything else is a ScenarioError before anything is written or removed;
        :mod:`barnraise.outdir`; ``barnraise run --out``
        refuses another run's folder before the run, unless ``--overwrite-out``).
        """
        from barnraise import outdir, plots

        out = pathlib.Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        outdir.clear_run_files(out)
        written: list[pathlib.Path] = []

        def path(name: str) -> pathlib.Path:
            assert name in outdir.RUN_FILES, name  # what a later write() may remove
            written.append(out / name)
            return out / name

        path("summary.json").write_text(json.dumps(self.summary, indent=2, sort_keys=True)
                                        + "\n")
        with path("trace.jsonl").open("wb") as handle:
            for line in self.trace.to_jsonl():
                handle.write(line)
        events = self.events()
        events.to_csv(path("events.csv"), index=False)
        title = str(self.summary["scenario"])
        if self.metrics is not None:
            self.timeseries().to_csv(path("timeseries.csv"), index=False)
            self.agent_timeseries().to_csv(path("agents.csv"), index=False)
            # The chart is of the summary's session (the one its figures are of); of
            # every session when that one was never sampled (it closed before).
            sampled = {s.session_id for s in self.metrics.samples}
            sid = self.session_id if self.session_id in sampled else None
            series = self.timeseries(sid)
            if len(series):
                plots.timeseries_figure(series, title=title).savefig(path("timeseries.png"))
            frames = [f for f in self.metrics.frames if sid is None or f.session_id == sid]
            if len(frames) > 1:
                plots.save_gif(plots.canvas_animation(frames, title=title), path("build.gif"))
        if self.final_canvas is not None:
            plots.save_canvas_png(path("canvas.png"), self.final_canvas, self.claims,
                                  title=title)
        spans = task_intervals(events, self.tasks)
        if len(spans):
            plots.gantt_figure(spans, title=title).savefig(path("gantt.png"))
        if self.tasks:
            plots.dag_figure(self.tasks, title=title).savefig(path("dag.png"))
        letters = self.messages()
        if len(letters):
            window = sequence_window(letters)
            plots.sequence_figure(window, title=f"{title}: {len(window)} of {len(letters)} "
                                  "letters, each type's first and the rest spread over the run"
                                  ).savefig(path("sequence.png"))
        summary = self.summary
        written.append(outdir.write_run_manifest(out, outdir.run_identity(
            summary["scenario"], summary["seed"], summary["mode"], summary["params"]),
            written))
        return written


if TYPE_CHECKING:
    def _one_record(live: RunResult, stored: StoredRun) -> tuple[RunRecord, RunRecord]:
        """Never called: mypy holds both sides of a run's record to one protocol."""
        return live, stored


def check_out_dir(path: str | os.PathLike[str]) -> pathlib.Path:
    """Make ``path`` a directory this process can write files in, or say why it cannot.

    Creates it (and its parents) when missing, and writes and removes a probe
    file. ScenarioError names the path and the problem: an existing file where
    the directory should be, or a place that cannot be created or written
    (``/proc/x``, a read-only mount, no permission).
    """
    target = pathlib.Path(path)
    if target.exists() and not target.is_dir():
        raise ScenarioError(f"out directory {os.fspath(path)!r}: a file is there, not a "
                            "directory")
    probe = target / f".barnraise-probe-{os.getpid()}"
    try:
        target.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise ScenarioError(f"out directory {os.fspath(path)!r}: cannot write there "
                            f"({exc.strerror or exc})") from None
    return target
