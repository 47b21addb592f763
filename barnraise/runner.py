"""Running scenarios: check a request, run it (on a store, resumed, replayed), summarise it.

:func:`run` returns a :class:`~barnraise.outputs.RunResult`; its ``summary`` is what
``barnraise run --json`` prints; by default it also holds the run's per-step metrics
(``RunResult.timeseries()``). Problems with the request itself (unknown scenario,
unknown or ill-typed parameter, missing file, a bad seed, mode, time scale or
recording option) raise :class:`ScenarioError` before anything runs. Finding and
loading a scenario (what a scenario module holds) is :mod:`barnraise.loading`'s; what
a run gives back and writes, :mod:`barnraise.outputs`'.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import math
import os
import pathlib
import pkgutil
import time
import warnings
import zlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any

import msgspec

from barnraise import scenarios
from barnraise.actors.recording import DEFAULT_INTERVAL, MAX_FRAME_SIZE, Recorder
from barnraise.actors.stored.resume import Image, image_of
from barnraise.actors.stored.run import StoredRun
from barnraise.actors.supervisor import Supervisor
from barnraise.actors.world import Simulation
from barnraise.loading import UnverifiedScript, _load, coerce_params, is_script
from barnraise.outputs import RunResult, RunSummary
from barnraise.scenarios import ParamError, ScenarioError
from barnraise.sim.clock import MAX_TIME_SCALE, MIN_TIME_SCALE
from barnraise.sim.dispatch import DeterministicDispatcher, Faults, FaultsError
from barnraise.sim.dispatch.routing import KEPT_FAILURES
from barnraise.sim.failures import Failure
from barnraise.sim.reporters import ReporterError, Reporters, ReporterSampler, check_reporters
from barnraise.sim.store import SNAPSHOT_EVERY, Divergence, RunInfo, Store, StoreError, check_store
from barnraise.sim.trace import DELIVER, DROP, ERROR
from barnraise.sim.views import WorldView

if TYPE_CHECKING:
    pass

__all__ = [
    "ParamError",
    "ReporterError",
    "Request",
    "ScenarioError",
    "StoreError",
    "check_request",
    "open_run",
    "replay",
    "resume",
    "resume_request",
    "run",
    "run_request",
    "stored_request",
]


class ResumeDivergence(Exception):
    """A resumed or replayed run did not reproduce its stored log (names the record)."""


@dataclass(frozen=True)
class Request:
    """A checked run request: the scenario module, its full parameters, the options."""

    scenario: str
    module: ModuleType
    seed: int
    mode: str
    params: dict[str, Any]
    simulation: dict[str, Any]
    #: The SHA-256 of the scenario file's bytes (None for a shipped scenario): a store
    #: keeps it, so that the file runs again only as it was (docs/store.md).
    script_sha256: str | None = None
    #: The run's own reporters (the scenario's ``REPORTERS`` and the caller's) and agent
    #: reporters, checked (:func:`barnraise.sim.reporters.check_reporters`).
    reporters: Mapping[str, Callable[..., Any]] = field(default_factory=dict)
    agent_reporters: Mapping[str, Callable[..., Any]] = field(default_factory=dict)
    #: Simulated seconds after which the run stops (None: it runs to its end).
    max_time: float | None = None


def check_request(scenario: str, seed: int = 0, mode: str = "deterministic", *,
                  time_scale: float | None = None,
                  faults: str | Mapping[str, Any] | Faults | None = None,
                  reporters: Reporters | None = None,
                  agent_reporters: Reporters | None = None,
                  max_time: float | None = None,
                  **params: Any) -> Request:
    """Everything :func:`run` checks before it starts, and nothing more: ScenarioError
    names what is wrong (unknown scenario or parameter, a value that does not
    convert, a bad seed, mode, time scale, fault plan, reporter or time limit)."""
    return _checked(scenario, seed, mode, time_scale, faults, params,
                    lambda: _load(scenario), reporters=reporters,
                    agent_reporters=agent_reporters, max_time=max_time)


def _checked(scenario: str, seed: int, mode: str, time_scale: float | None,
             faults: str | Mapping[str, Any] | Faults | None, params: Mapping[str, Any],
             loader: Callable[[], tuple[ModuleType, str | None]], *,
             reporters: Reporters | None = None, agent_reporters: Reporters | None = None,
             max_time: float | None = None) -> Request:
    """:func:`check_request`, the scenario's module from ``loader`` (called only once every
    other option has been checked)."""
    if mode not in ("deterministic", "realtime"):
        raise ScenarioError(f"mode must be deterministic or realtime, got {mode!r}")
    if max_time is not None:
        if mode != "deterministic":
            raise ScenarioError("max_time applies to deterministic mode only")
        if type(max_time) not in (int, float) or not 0 < max_time < math.inf:
            raise ScenarioError(f"max_time must be a finite number of simulated seconds "
                                f"> 0, got {max_time!r}")
    try:
        plan = Faults.parse(faults)
    except FaultsError as exc:
        raise ScenarioError(str(exc)) from None
    if time_scale is not None:
        if mode != "realtime":
            raise ScenarioError("time_scale applies to realtime mode only")
        if type(time_scale) not in (int, float) or not \
                MIN_TIME_SCALE <= time_scale <= MAX_TIME_SCALE:
            raise ScenarioError(f"time_scale must be a number from {MIN_TIME_SCALE:g} to "
                                f"{MAX_TIME_SCALE:g} (simulated seconds per wall second), "
                                f"got {time_scale!r}")
    if type(seed) is not int or not 0 <= seed <= MAX_SEED:
        raise ScenarioError(f"seed must be an integer from 0 to {MAX_SEED}, got {seed!r}")
    module, sha = loader()
    values = coerce_params(module, params)
    options: dict[str, Any] = dict(getattr(module, "SIMULATION", {}))
    if mode == "realtime":
        options.setdefault("time_scale", 50.0)
        if time_scale is not None:
            options["time_scale"] = float(time_scale)
    if plan is not None:
        options["faults"] = plan
    try:
        chosen, agents = check_reporters(reporters, agent_reporters, module=module)
    except ValueError as exc:
        raise ScenarioError(str(exc)) from None
    return Request(scenario, module, seed, mode, values, options, sha, chosen, agents,
                   None if max_time is None else float(max_time))


#: The largest seed a run takes (numpy's SeedSequence takes more; a bound keeps
#: requests sane and file names short).
MAX_SEED = 2**63 - 1


def run(
    scenario: str,
    seed: int = 0,
    mode: str = "deterministic",
    *,
    progress: Callable[[float], None] | None = None,
    time_scale: float | None = None,
    faults: str | Mapping[str, Any] | Faults | None = None,
    record: bool = True,
    interval: float = DEFAULT_INTERVAL,
    frame_size: int = 0,
    check_metrics: bool = False,
    store: str | os.PathLike[str] | None = None,
    overwrite: bool = False,
    snapshot_every: int | None = None,
    reporters: Reporters | None = None,
    agent_reporters: Reporters | None = None,
    max_time: float | None = None,
    **params: Any,
) -> RunResult:
    """Run ``scenario`` (a shipped name or a file path) and summarise it.

    ``reporters`` / ``agent_reporters``: columns of one's own, ``{name: fn}``, added to
    the scenario's ``REPORTERS`` / ``AGENT_REPORTERS``: ``fn`` gets a session's
    :class:`~barnraise.sim.views.WorldView` (an agent reporter an
    :class:`~barnraise.sim.reporters.AgentView`) at every interval and final sample and
    returns a number or a string, a column of ``timeseries()`` (``agent_timeseries()``).
    A name a built-in column has is refused before the run (ScenarioError, a
    ValueError); a reporter that raises or returns anything else is printed with its
    traceback as it happens, and the run, once ended, raises
    :class:`~barnraise.sim.reporters.ReporterError` (see docs/experiments.md).

    ``max_time`` (deterministic mode): simulated seconds after which the run stops, as
    if it had ended there (``run_end`` is ``until``).

    ``time_scale`` (realtime mode only, default 50) is how many simulated seconds
    pass per wall second. Simulated timeouts shrink with it in wall terms, so a
    crew of hundreds of agents on two cores wants a smaller one.

    ``record`` (default True) samples the run's metrics (``RunResult.timeseries()``)
    every ``interval`` simulated seconds and at every domain event; ``frame_size``
    > 0 also keeps a canvas frame (at most that many cells a side) per interval,
    for :func:`barnraise.plots.canvas_animation`. Recording does not change the trace.
    ``check_metrics`` also reads every task at every interval sample and compares
    the counts the events moved with them (``RunResult.metrics.drift``; slower).

    ``faults`` is a fault plan (``"drop=0.05,duplicate=0.02,delay=0.5,crash=0.001"``,
    a dict or a :class:`barnraise.sim.dispatch.Faults`; docs/reliability.md): drawn from the
    seed, recorded in the trace, and reported in the summary's ``faults``.

    ``store``: keep the run durable in a SQLite file there (see docs/store.md);
    an existing store is refused (StoreError) unless ``overwrite``. ``snapshot_every``:
    records between two snapshots of the world in it (default 1,000; more often: a stored
    run's world at a time is folded from a nearer snapshot; the store grows). Both are
    refused (ValueError) without a ``store``: they would be ignored.
    """
    if store is None and (overwrite or snapshot_every is not None):
        given = "overwrite" if overwrite else "snapshot_every"
        raise ValueError(f"{given} applies to a store: give store= too, or leave {given} out")
    request = check_request(scenario, seed, mode, time_scale=time_scale, faults=faults,
                            reporters=reporters, agent_reporters=agent_reporters,
                            max_time=max_time, **params)
    if record:
        _check_recording(interval, frame_size)
    elif reporters or agent_reporters:
        raise ScenarioError("reporters and agent_reporters are sampled by the recorder: "
                            "they need record=True")
    opened = open_store(request, store, overwrite,
                        snapshot_every=SNAPSHOT_EVERY if snapshot_every is None
                        else snapshot_every) if store is not None else None
    return run_request(request, progress=progress, record=record, interval=interval,
                       frame_size=frame_size, check_metrics=check_metrics, store=opened)


@functools.cache
def package_version() -> str:
    """The installed barnraise's version ("0+unknown" in a checkout never installed).

    Asked once per process: the metadata look-up walks the installed distributions
    (about 2 ms, which a short stored run would pay every time)."""
    from importlib import metadata

    try:
        return metadata.version("barnraise")
    except metadata.PackageNotFoundError:  # pragma: no cover - a checkout never installed
        return "0+unknown"


def open_store(request: Request, path: str | os.PathLike[str], overwrite: bool = False, *,
               snapshot_every: int = SNAPSHOT_EVERY) -> Store:
    """A new store for ``request``'s run (StoreError for a path that cannot be one), with a
    snapshot every ``snapshot_every`` records."""
    options = dict(request.simulation)
    if isinstance(options.get("faults"), Faults):  # kept as JSON; resume and replay parse it
        options["faults"] = options["faults"].to_dict()
    if request.max_time is not None:
        options["max_time"] = request.max_time
    return Store.create(path, seed=request.seed, mode=request.mode, scenario=request.scenario,
                        params=request.params, options=options,
                        version=package_version(), overwrite=overwrite,
                        script_sha256=request.script_sha256, snapshot_every=snapshot_every)


def open_run(path: str | os.PathLike[str]) -> StoredRun:
    """A read-only view of a stored run (StoreError when ``path`` is not a store). It only
    reads: no scenario is imported, whatever the store names."""
    return StoredRun(path)


def stored_request(info: RunInfo, path: str, script: str | os.PathLike[str] | None = None
                   ) -> Request:
    """The request that re-executes the run a store holds: a store never chooses code.

    A run of a shipped scenario runs that scenario, found by name in the installed
    ``scenarios`` package. A run made from a scenario file runs again only from the file
    the user names (``script``), and only when its SHA-256 is the one the store keeps;
    a store from before schema 4 keeps none, so the named file runs with an
    :class:`UnverifiedScript` warning. Anything else is a StoreError, before any code
    is loaded: a name the package does not have, a file path with no ``script``, a
    ``script`` for a run of a shipped scenario, a file whose hash differs."""
    if info.scenario is None:
        raise StoreError(f"store {path!r} holds a run of no scenario (a Simulation driven by "
                         "hand): it cannot be re-executed")
    name = info.scenario
    given = None if script is None else os.fspath(script)
    if is_script(name):
        if given is None:
            raise StoreError(f"store {path!r} was made from the scenario file {name!r}; a "
                             "store never chooses code to run: name that file with --script "
                             "PATH (script=PATH) to run it again")

        def loader() -> tuple[ModuleType, str | None]:
            assert given is not None
            if info.script_sha256 is None:
                warnings.warn(f"store {path!r} keeps no sha256 of its scenario file (made "
                              f"before barnraise kept one): {given!r} runs, unverified",
                              UnverifiedScript, stacklevel=4)
            return _load(given, info.script_sha256, file=True)
    else:
        if given is not None:
            raise StoreError(f"store {path!r} holds a run of the installed scenario {name!r}; "
                             "--script (script=) is for a store made from a scenario file")
        if not name.isidentifier() or name.startswith("_") or \
                name not in {m.name for m in pkgutil.iter_modules(scenarios.__path__)}:
            raise StoreError(f"store {path!r} names the scenario {name!r}, which the "
                             "installed scenarios package does not have: nothing run")

        def loader() -> tuple[ModuleType, str | None]:
            return _load(name)
    time_scale = info.options.get("time_scale") if info.mode == "realtime" else None
    return _checked(name, info.seed, info.mode, time_scale, info.options.get("faults"),
                    info.params, loader, max_time=info.options.get("max_time"))


def resume(path: str | os.PathLike[str], *, script: str | os.PathLike[str] | None = None,
           record: bool = True, progress: Callable[[float], None] | None = None,
           snapshot_every: int = SNAPSHOT_EVERY) -> RunResult:
    """Continue the interrupted deterministic run stored at ``path`` to its end.

    The run is re-executed from its seed and parameters; each record is checked
    against the stored log (ResumeDivergence names the first that differs), and
    the records past the stored end are appended to the same store, which is
    marked finished at the end. StoreError for a path that is not a resumable store.
    ``script``: the scenario file of a run made from one (see :func:`stored_request`).
    ``snapshot_every``: as for :func:`run`, for the records the resumed run appends.
    """
    return resume_request(path, script=script, record=record, progress=progress,
                          snapshot_every=snapshot_every)[0]


def resume_request(path: str | os.PathLike[str], *,
                   script: str | os.PathLike[str] | None = None, record: bool = True,
                   progress: Callable[[float], None] | None = None,
                   snapshot_every: int = SNAPSHOT_EVERY,
                   check: Callable[[Request], None] | None = None
                   ) -> tuple[RunResult, Request]:
    """:func:`resume`, and the request it ran (its scenario module, for the text summary).
    ``check`` sees the request once the store is checked, before anything is written
    (``barnraise resume --out`` checks its folder there); what it raises stops the
    resume with the store as it was."""
    started = time.perf_counter()
    name = os.fspath(path)
    # Everything that can refuse is checked read-only first: the file stays as it was.
    info = check_store(name, writing=True)
    assert info is not None
    if info.status == "finished":
        raise StoreError(f"store {name!r} holds a finished run: nothing to resume "
                         "(barnraise replay checks it)")
    request = stored_request(info, name, script)
    image = None
    before: _Before | None = None
    if info.mode == "realtime":
        # No re-execution: the world is folded from the log, and the scenario's crew
        # resumes from it (actors/stored/resume.py; docs/store.md).
        if not getattr(request.module, "RESUMABLE", False):
            raise StoreError(f"store {name!r} holds a realtime run of {info.scenario}, which "
                             "does not declare how it resumes (RESUMABLE); only a "
                             "deterministic run of it resumes")
        with _log_contents(name):
            stored = StoredRun(name, info)
            image = image_of(stored)
            before = _Before.of(stored)
        problem = image.unsupported()
        if problem is not None:
            raise StoreError(f"store {name!r} cannot be resumed from its log: {problem}")
    if check is not None:
        check(request)
    store, info = Store.resume(name, info, snapshot_every=snapshot_every)
    if image is not None:
        store.continue_after()
    result = run_request(request, progress=progress, record=record, store=store,
                         restore=image, before=before)
    result.stored = info
    result.resumed_records = store.offset if image is not None else store.expected
    if store.live_at is not None:
        result.live_after = store.live_at - started
    return result, request


@dataclass(frozen=True)
class _Before:
    """What a realtime run stopped by a kill had counted, read from its stored log: a
    resumed realtime run goes on from the world it left but with a new dispatcher, whose
    counts start at 0, so its summary adds these (a deterministic resume re-executes
    the whole run and counts it all itself)."""

    records: int
    delivered: int
    dead_letters: dict[str, int]
    details: dict[str, int]
    errors: list[dict[str, Any]]

    @classmethod
    def of(cls, stored: StoredRun) -> _Before:
        dead: collections.Counter[str] = collections.Counter()
        details: collections.Counter[str] = collections.Counter()
        for r in stored.records(kind=DROP):
            content = r.content_obj()
            dead[content["reason"]] += 1
            if "detail" in content:
                details[content["detail"]] += 1
        errors = [r.content_obj() for r in stored.records(kind=ERROR)]
        last = stored.last()
        return cls(records=0 if last is None else last.seq + 1,
                   delivered=stored.count(DELIVER), dead_letters=dict(dead),
                   details=dict(details), errors=errors)


def replay(path: str | os.PathLike[str], *, script: str | os.PathLike[str] | None = None
           ) -> tuple[str, Divergence | None]:
    """Re-execute the deterministic run stored at ``path`` in memory and compare its trace
    with the stored log: (the re-execution's digest, the first difference or None).
    ``script``: the scenario file of a run made from one (see :func:`stored_request`)."""
    name = os.fspath(path)
    stored = StoredRun(name)
    info = stored.info
    assert info is not None
    if info.mode != "deterministic":
        raise StoreError(f"store {name!r} holds a realtime run, which does not replay")
    result = run_request(stored_request(info, name, script), record=False)
    with _log_contents(name):
        return result.trace_digest, stored.compare(result.trace)


@contextlib.contextmanager
def _log_contents(name: str) -> Iterator[None]:
    """Turn a record whose stored content is not what barnraise writes (a ``packed`` one
    that does not decompress, a content that is not JSON) into a StoreError naming the
    store: a store is data, and its damage is exit 2, not a traceback."""
    try:
        yield
    except (zlib.error, msgspec.DecodeError, UnicodeDecodeError) as exc:
        raise StoreError(f"store {name!r}: a record's content is not what barnraise writes "
                         f"({type(exc).__name__}: {exc})") from None


def _check_recording(interval: float, frame_size: int) -> None:
    if isinstance(interval, bool) or not isinstance(interval, (int, float)) \
            or not math.isfinite(interval) or interval <= 0:
        raise ScenarioError(f"interval must be a finite number of seconds > 0, got {interval!r}")
    if isinstance(frame_size, bool) or not isinstance(frame_size, int) \
            or not 0 <= frame_size <= MAX_FRAME_SIZE:
        raise ScenarioError(f"frame_size must be an integer from 0 to {MAX_FRAME_SIZE}, "
                            f"got {frame_size!r}")


def run_request(request: Request, *, progress: Callable[[float], None] | None = None,
                record: bool = True, interval: float = DEFAULT_INTERVAL,
                frame_size: int = 0, check_metrics: bool = False,
                store: Store | None = None,
                watch: Callable[[Simulation], Callable[[], None]] | None = None,
                restore: Image | None = None,
                on_error: Callable[[Failure, BaseException], None] | None = None,
                before: _Before | None = None) -> RunResult:
    """Run a request :func:`check_request` made (see :func:`run`); ``store`` keeps it
    (a new store from :func:`open_store`, or a resumed one).

    ``watch`` (a live view, say) is called with the Simulation before the
    scenario starts; the function it returns is called once the run has ended,
    while the world is still up, even when the scenario raised. ``on_error`` is called
    with every exception an agent's handler or behaviour lets escape, as it happens
    (``Dispatcher.on_error``: ``barnraise run --pdb``'s debugger). ``before``: what the
    stopped run of a realtime resume had counted, added to the summary's counts.
    """
    module, mode, seed = request.module, request.mode, request.seed
    options = request.simulation
    started = time.perf_counter()
    try:
        simu = Simulation(seed=seed, mode=mode, store=store, **options)
    except BaseException:
        if store is not None:
            store.close()
        raise
    with simu:
        if restore is not None:  # a realtime resume: the world as the stopped run left it
            simu.restore(restore)
            if store is not None:
                store.live_at = time.perf_counter()
        simu.progress = progress
        if on_error is not None:
            simu.dispatcher.on_error = on_error
        if request.max_time is not None:
            assert isinstance(simu.dispatcher, DeterministicDispatcher)
            simu.dispatcher.horizon = request.max_time
        sampler = ReporterSampler(request.reporters, request.agent_reporters)
        recorder = (Recorder(simu, interval=interval, frame_size=frame_size,
                             check=check_metrics, reporters=sampler) if record else None)
        ended = watch(simu) if watch is not None else None
        try:
            metrics = dict(module.run(simu, **request.params))
            ending = simu.dispatcher.run()  # let what the scenario set going finish
            simu.drop_unread()  # letters of one's own kept for a receive that never came
        finally:
            if ended is not None:
                ended()
        recorded = recorder.finish() if recorder is not None else None
        if sampler.failure is not None:  # printed with its traceback as it happened
            raise sampler.failure
        views: dict[str, WorldView] = {}
        world = _world(simu, metrics.pop("session_id", None), views)
        stats = simu.dispatcher.statistics()
        wall = time.perf_counter() - started
        dead = collections.Counter(stats.dead_letters)
        details = collections.Counter(simu.dispatcher.dead_details)
        errors = [f.summary() for f in simu.dispatcher.failures]
        delivered, error_count = stats.delivered, stats.behaviour_errors
        if before is not None:
            dead.update(before.dead_letters)
            details.update(before.details)
            errors = [*before.errors, *errors][:KEPT_FAILURES]
            delivered += before.delivered
            error_count += len(before.errors)
        summary: RunSummary = {
            "scenario": getattr(module, "NAME", pathlib.Path(request.scenario).stem),
            "seed": seed, "mode": mode, "params": request.params,
            "time_scale": options.get("time_scale") if mode == "realtime" else None,
            "trace_digest": simu.dispatcher.trace_digest,
            "virtual_time": round(simu.now, 6), "wall_seconds": round(wall, 3),
            "messages_delivered": delivered,
            "messages_dropped": sum(dead.values()),
            "dead_letters": dict(dead),
            "dead_letter_details": dict(details),
            "session_id": world["session_id"],
            "agents": world["agents"], "tiles_placed": world["tiles_placed"],
            "has_blueprint": world["has_blueprint"],
            "completion_percent": world["completion_percent"],
            "conflicts": world["conflicts"], "lost_work": world["lost_work"],
            "tasks_completed": world["tasks_completed"],
            "tasks_failed": world["tasks_failed"], "tasks": world["task_counts"],
            "behaviour_errors": error_count,
            "errors": errors,
            "run_end": ending.reason, "waiting": [str(w) for w in ending.waiters],
            "metrics": metrics,
            "resumed_metrics_only": before is not None,
            "faults": _faults_summary(simu),
            "supervision": _supervision_summary(simu),
            "success": False,  # until the check below says (it reads the rest)
        }
        summary["success"] = bool(module.check(summary)) and (
            not summary["behaviour_errors"] or errors_excused(module, simu))
        if store is not None:
            store.commit()
            if store.divergence is None and store.written < store.expected:
                raise ResumeDivergence(f"the re-execution ended after {store.written} records; "
                                       f"the stored log has {store.expected}")
            if store.divergence is not None:
                raise ResumeDivergence(f"the re-execution does not reproduce the stored log: "
                                       f"{store.divergence.describe()}")
            if recorded is None:
                store.finish(summary, summary["trace_digest"], simu.world_state(views))
            else:
                store.finish(summary, summary["trace_digest"], simu.world_state(views),
                             reporters=recorded.reporters,
                             agent_reporters=recorded.agent_reporters,
                             reported=recorded.reported)
        # What shutting down records (unregistrations dropped as offline) is not
        # part of the run: the trace handed back is the one the digest covers.
        simu.dispatcher.trace.enabled = False
        return RunResult(summary, simu.dispatcher.trace, world["canvas"], world["claims"],
                         world["tasks"], recorded)


def errors_excused(module: ModuleType, simu: Simulation) -> bool:
    """Whether exceptions escaping handlers or behaviours leave a run's success to its
    check: when the scenario says it raises on purpose (``EXPECTED_ERRORS = True``), or
    when a fault plan was on and every one of them crashed its agent and a supervisor
    restarted it (issue 27: under faults, a supervised restart is recovery, not failure;
    the supervisors' record, ``Supervisor.recoveries``, says which were). Otherwise any
    one fails the run, whatever the check says: without a plan, always.
    """
    if getattr(module, "EXPECTED_ERRORS", False) is True:
        return True
    d = simu.dispatcher
    return d.injector is not None and simu.supervisor.recoveries.restarted >= d.behaviour_errors


def _supervision_summary(simu: Simulation) -> dict[str, Any]:
    """What the supervisors did about crashes: errors that crashed an agent, how many of
    those a restart followed, the supervisors that reached their restart limit and gave
    up (their children stay stopped), and the agents left stopped after more than
    MAX_ERROR_RESTARTS errors in the run."""
    recoveries = simu.supervisor.recoveries
    return {"errors_crashed": len(recoveries.entries),
            "errors_restarted": recoveries.restarted,
            "gave_up": sorted(name for name, actor in simu.dispatcher.actors.items()
                              if isinstance(actor, Supervisor) and actor.gave_up),
            "retired": list(recoveries.retired)}


#: The summary's names for what an injector counts (barnraise.sim.dispatch.FAULT_KINDS).
_FAULT_WORDS = {"drop": "dropped", "duplicate": "duplicated", "delay": "delayed",
                "reorder": "reordered", "crash": "crashed"}


def _faults_summary(simu: Simulation) -> dict[str, Any] | None:
    """What the fault plan injected and what was recovered; None without a plan."""
    d = simu.dispatcher
    if d.injector is None:
        return None
    counts = d.injector.summary()
    out: dict[str, Any] = {"plan": str(d.faults)}
    out.update({_FAULT_WORDS[k]: n for k, n in counts.items()})
    out["restarted"] = d.injector.restarts
    return out


def _world(simu: Simulation, session_id: str | None,
           views: dict[str, WorldView] | None = None) -> dict[str, Any]:
    """World figures of one session (default: the oldest), from its frozen view (put in
    ``views`` under its session id, for a store's last snapshot to use).

    ``completion_percent`` is None for a session without a blueprint (there is
    nothing to be complete against).
    """
    sessions = simu.sessions()
    sid = session_id or (sessions[0] if sessions else None)
    if sid is None:
        return {"session_id": None, "agents": 0, "tiles_placed": 0, "has_blueprint": False,
                "completion_percent": None, "conflicts": 0, "lost_work": 0,
                "tasks_completed": 0, "tasks_failed": 0, "task_counts": {}, "canvas": None,
                "claims": [], "tasks": []}
    view = simu.view(sid, completion=True)
    if views is not None:
        views[sid] = view
    counts = view.task_counts()
    members = {m.agent_id: m for m in view.members}
    claims = []
    for c in view.claims:
        member = members.get(c.agent_id)
        claims.append({"bounds": c.region.to_dict(), "agent_id": c.agent_id,
                       "agent_name": member.name if member is not None else c.agent_id,
                       "color": member.color if member is not None else "#FF0000"})
    tasks = [{"task_id": t.task_id, "type": t.type, "description": t.description,
              "status": t.status, "assigned_to": t.assigned_to,
              "delegated_by": t.delegated_by, "dependencies": list(t.dependencies),
              "region": None if t.region is None else t.region.to_dict(),
              "created_at": t.created_at, "accepted_at": t.accepted_at,
              "completed_at": t.completed_at} for t in view.tasks]
    return {
        "session_id": sid,
        "agents": len(view.members),
        "tiles_placed": view.progress.tiles_placed,
        "has_blueprint": view.has_blueprint,
        "completion_percent": view.progress.completion_percent if view.has_blueprint else None,
        "conflicts": view.progress.conflicts,
        "lost_work": view.progress.lost_work,
        "tasks_completed": counts.get("completed", 0),
        "tasks_failed": counts.get("failed", 0),
        "task_counts": dict(counts),
        "canvas": view.canvas,
        "claims": claims,
        "tasks": tasks,
    }
