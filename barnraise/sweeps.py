"""Sweeps: one scenario over a grid of parameter values and seeds, as one DataFrame.

``barnraise.sweep("conflict_storm", params={"agents": [2, 4, 8]}, seeds=range(20))``
runs every combination of the parameter values (in the order given, the last
parameter changing fastest), each with every seed, and returns one row per run
in that order, whatever ran it:

* ``engine="serial"``: one run after another, here;
* ``engine="processes"``: a pool of ``workers`` processes on this machine;
* ``engine="dask"``: a Dask cluster: a ``distributed.LocalCluster`` of ``workers``
  single-threaded worker processes started for the sweep (and stopped after it),
  or the existing scheduler at ``dask_address``.

Runs are deterministic, so the rows, trace digests included, are the same on
any engine and any number of workers (the tests compare them); only
``wall_seconds`` differs.

Columns: ``scenario``, ``seed``, one per parameter (a list or dict value as JSON
text), ``success``, ``trace_digest``, ``wall_seconds``, ``virtual_time``, the
summary's other scalar figures, every scalar metric of the scenario (a metric
that is a dict is flattened to ``name.key``), and ``error`` (empty, or why the
run raised). A figure whose name a parameter already uses is prefixed
``summary.``; a metric whose name is taken, ``metrics.``.

With ``out=DIR`` every finished run is saved as it completes: ``DIR/runs/KEY.json``
(its row and its whole summary, written atomically; KEY is a digest of the
scenario, its parameters and its seed) and a line in ``DIR/results.jsonl``. A
sweep started again with the same ``out`` reuses every saved run and computes
only the missing ones, so an interrupted sweep resumes; ``DIR/manifest.json`` names
the sweep (its scenario and the parameters it varies), and a folder holding another
sweep's runs or a run's files is refused (:mod:`barnraise.outdir`). At the end ``DIR`` gets
``results.csv`` (and ``results.parquet`` when pyarrow is installed) in the
sweep's order. ``DataFrame.attrs`` holds ``computed`` and ``reused`` counts.

Every argument is checked before any run starts; :class:`SweepError` (a
:class:`~scenarios.ScenarioError`) names the one at fault.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib
import itertools
import json
import math
import multiprocessing
import os
import pathlib
import re
import signal
import socket
import stat
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any, Final

from barnraise.loading import coerce_params, load, metric_names
from barnraise.outdir import check_sweep_out, write_sweep_manifest
from barnraise.outputs import RunSummary, check_out_dir
from barnraise.runner import MAX_SEED, ScenarioError, run
from barnraise.sim.reporters import check_picklable, check_reporters

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "ENGINES",
    "MAX_RUNS",
    "MAX_VALUES",
    "MAX_WORKERS",
    "STEP_TRIGGERS",
    "Collect",
    "RunSpec",
    "SweepError",
    "plan",
    "run_one",
    "steps_of",
    "sweep",
]

ENGINES: Final = ("serial", "processes", "dask")
#: The most runs one sweep may ask for.
MAX_RUNS: Final = 100_000
#: The most values one parameter may take in a sweep.
MAX_VALUES: Final = 10_000
#: The most worker processes one sweep may ask for.
MAX_WORKERS: Final = 256
#: Wall seconds to wait for an existing Dask scheduler to answer.
DASK_CONNECT_TIMEOUT: Final = 10.0

#: Summary figures every row has, after scenario/seed/parameters.
RUN_COLUMNS: Final = ("success", "trace_digest", "wall_seconds", "virtual_time")
_SKIP: Final = frozenset({"scenario", "seed", "params", "mode", "time_scale", "success",
                          "trace_digest", "wall_seconds", "virtual_time", "metrics",
                          "dead_letters", "dead_letter_details", "waiting", "tasks",
                          "session_id", "resumed_metrics_only"})  # a sweep never resumes
_ADDRESS: Final = re.compile(r"^(tcp|tls|inproc|ucx)://[^\s/]+(:\d{1,5})?/?$|^[\w.\-]+:\d{1,5}$")


class SweepError(ScenarioError):
    """A sweep request that cannot run: the message names the argument and the problem."""


@dataclass(frozen=True)
class RunSpec:
    """One run of a sweep: its place in the order, what to run, and its key."""

    index: int
    scenario: str
    seed: int
    params: dict[str, Any]
    key: str


def _key(scenario: str, params: Mapping[str, Any], seed: int,
         max_time: float | None = None) -> str:
    what: dict[str, Any] = {"scenario": scenario, "params": dict(params), "seed": seed}
    if max_time is not None:  # (a sweep without one keeps the keys it always had)
        what["max_time"] = max_time
    text = json.dumps(what, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def _seeds(seeds: int | Iterable[int]) -> list[int]:
    if isinstance(seeds, bool):
        raise SweepError(f"seeds must be a count or a list of seeds, got {seeds!r}")
    if isinstance(seeds, int):
        if not 1 <= seeds <= MAX_RUNS:
            raise SweepError(f"seeds: a count must be from 1 to {MAX_RUNS}, got {seeds}")
        return list(range(seeds))
    if isinstance(seeds, (str, bytes)) or not isinstance(seeds, Iterable):
        raise SweepError(f"seeds must be a count or a list of seeds, got {seeds!r}")
    out = list(seeds)
    if not out:
        raise SweepError("seeds: give at least one seed")
    seen: set[int] = set()
    for seed in out:
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
            raise SweepError(f"seeds: each seed must be an integer from 0 to {MAX_SEED}, "
                             f"got {seed!r}")
        if seed in seen:
            raise SweepError(f"seeds: {seed} is given twice")
        seen.add(seed)
    return out


def plan(scenario: str, params: Mapping[str, Sequence[Any]] | None = None,
         seeds: int | Iterable[int] = 1, *, max_time: float | None = None) -> list[RunSpec]:
    """The runs of a sweep in its order: the product of the parameter values (in the
    order given, the last parameter fastest), then the seeds. Checks everything.
    ``max_time``: part of each run's key (a run stopped early is another run)."""
    module = load(scenario)
    name = str(getattr(module, "NAME", pathlib.Path(scenario).stem))
    given = {} if params is None else params
    if not isinstance(given, Mapping):
        raise SweepError(f"params must be a dict of parameter -> list of values, got "
                         f"{type(given).__name__}")
    axes: list[tuple[str, list[Any]]] = []
    for key, values in given.items():
        if key not in module.PARAMS:
            raise SweepError(f"params: unknown parameter {key!r}; parameters: "
                             f"{', '.join(sorted(module.PARAMS)) or 'none'}")
        if isinstance(values, (str, bytes, Mapping)) or not isinstance(values, Sequence):
            raise SweepError(f"params[{key!r}] must be a list of values, got {values!r}")
        if not 1 <= len(values) <= MAX_VALUES:
            raise SweepError(f"params[{key!r}]: give from 1 to {MAX_VALUES} values, got "
                             f"{len(values)}")
        converted = [coerce_params(module, {key: v})[key] for v in values]
        texts = [json.dumps(v, sort_keys=True) for v in converted]
        for i, text in enumerate(texts):
            if text in texts[:i]:
                raise SweepError(f"params[{key!r}]: the value {converted[i]!r} is given twice")
        axes.append((key, converted))
    seed_list = _seeds(seeds)
    total = math.prod(len(v) for _, v in axes) * len(seed_list)
    if total > MAX_RUNS:
        raise SweepError(f"the sweep asks for {total} runs; at most {MAX_RUNS}")
    specs: list[RunSpec] = []
    names = [k for k, _ in axes]
    for combo in itertools.product(*(v for _, v in axes)):
        chosen = dict(zip(names, combo, strict=True))
        for seed in seed_list:
            specs.append(RunSpec(len(specs), scenario, seed, chosen,
                                 _key(name, chosen, seed, max_time)))
    return specs


def _flatten(prefix: str, value: Any, out: dict[str, Any]) -> None:
    if isinstance(value, Mapping):
        for k, v in value.items():
            _flatten(f"{prefix}.{k}" if prefix else str(k), v, out)
    elif value is None or isinstance(value, (bool, int, float, str)):
        out[prefix] = value


def columns_before_runs(module: ModuleType, varied: Iterable[str]) -> frozenset[str] | None:
    """The columns a sweep of ``module`` over the parameters ``varied`` will have, known
    before any run (its metrics by :func:`~barnraise.loading.metric_names`); None when
    the scenario's metric names are known only once a run returns them. A metric that is
    a dict gives ``name.key`` columns: ``name`` stands for them here."""
    metrics = metric_names(module)
    if metrics is None:
        return None
    metrics -= {"session_id"}  # the runner takes it out of the metrics
    figures = {k for k, kind in RunSummary.__annotations__.items()
               if not str(kind).startswith(("dict[", "list["))} - _SKIP
    return frozenset({"scenario", "seed", "error", *RUN_COLUMNS, *varied, *figures,
                      *metrics, *(f"summary.{k}" for k in figures),
                      *(f"metrics.{k}" for k in metrics)})


def check_plot_column(module: ModuleType, varied: Iterable[str], name: str) -> None:
    """SweepError, before any run, when ``name`` can be no column of the sweep's table
    (:func:`columns_before_runs`; ``metric.key`` passes for a metric that may be a dict).
    Nothing is refused when the scenario's metric names cannot be read before a run."""
    known = columns_before_runs(module, varied)
    if known is None or name in known:
        return
    metrics = metric_names(module) or frozenset()
    if name.split(".", 1)[0] in metrics or name.removeprefix("metrics.").split(".", 1)[0] \
            in metrics:
        return
    plain = sorted(c for c in known if not c.startswith(("summary.", "metrics.")))
    raise SweepError(f"--plot {name!r}: no such column in this sweep's table; columns: "
                     + ", ".join(plain))


def row_of(spec: RunSpec, summary: Mapping[str, Any] | None, error: str = "") -> dict[str, Any]:
    """The sweep row of one run (see the module docstring for the columns)."""
    row: dict[str, Any] = {"scenario": summary["scenario"] if summary else spec.scenario,
                           "seed": spec.seed}
    for key, value in spec.params.items():
        row[key] = value if isinstance(value, (bool, int, float, str)) or value is None \
            else json.dumps(value, sort_keys=True)
    if summary is None:
        row.update(success=False, trace_digest=None, wall_seconds=None, virtual_time=None,
                   error=error)
        return row
    for column in RUN_COLUMNS:
        row[column] = summary.get(column)
    for key, value in summary.items():
        if key in _SKIP or not (value is None or isinstance(value, (bool, int, float, str))):
            continue
        row[f"summary.{key}" if key in row else key] = value
    metrics: dict[str, Any] = {}
    _flatten("", summary.get("metrics") or {}, metrics)
    for key, value in metrics.items():
        row[f"metrics.{key}" if key in row else key] = value
    row["error"] = error
    return row


@dataclass(frozen=True)
class Collect:
    """What each run of a sweep gives besides its row: with ``steps``, its per-step rows
    (the run recorded, with ``reporters`` and ``agent_reporters``); ``max_time``: the
    simulated seconds each run stops at (None: its end). It pickles, with module-level
    reporters, to whatever process runs a run."""

    steps: bool = False
    max_time: float | None = None
    reporters: Mapping[str, Callable[..., Any]] | None = None
    agent_reporters: Mapping[str, Callable[..., Any]] | None = None


#: The samples a sweep's per-step rows keep: those where every figure is read (and every
#: reporter called), not the event samples between them.
STEP_TRIGGERS: Final = ("interval", "final")


def _plain(value: Any, missing: Any) -> Any:
    """A frame's cell as a plain scalar (None for ``missing``, pandas' NA, and NaN), the
    same after pickling or JSON on any engine."""
    if value is None or value is missing:
        return None
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def steps_of(spec: RunSpec, table: pd.DataFrame) -> list[dict[str, Any]]:
    """The per-step rows of one run: its interval and final samples (every session's),
    each led by the scenario, the run's parameters and its seed (a time-series column
    whose name one of those has is prefixed ``timeseries.``)."""
    import pandas as pd

    key = row_of(spec, None)
    lead = {"scenario": key["scenario"], **{k: key[k] for k in spec.params},
            "seed": spec.seed}
    kept = table[table["trigger"].isin(STEP_TRIGGERS)]
    names = [f"timeseries.{c}" if c in lead else str(c) for c in kept.columns]
    return [{**lead, **{n: _plain(v, pd.NA) for n, v in zip(names, values, strict=True)}}
            for values in kept.itertuples(index=False, name=None)]


def run_one(spec: RunSpec, collect: Collect | None = None) -> dict[str, Any]:
    """Run one sweep run (in whatever process runs it): ``{"row", "summary"}``, and
    ``"steps"`` (:func:`steps_of`) when ``collect`` asks for them.

    A run that raises is a row with success False and the exception in ``error`` (and
    no steps).
    """
    collect = collect or Collect()
    try:
        if collect.steps:
            result = run(spec.scenario, seed=spec.seed, max_time=collect.max_time,
                         reporters=collect.reporters, agent_reporters=collect.agent_reporters,
                         **spec.params)
        else:
            result = run(spec.scenario, seed=spec.seed, record=False, max_time=collect.max_time,
                         **spec.params)
    except Exception as exc:  # one broken run must not lose the others
        done: dict[str, Any] = {"row": row_of(spec, None, f"{type(exc).__name__}: {exc}"),
                                "summary": None}
        if collect.steps:
            done["steps"] = []
        return done
    done = {"row": row_of(spec, result.summary), "summary": result.summary}
    if collect.steps:
        done["steps"] = steps_of(spec, result.timeseries())
    return done


# -- saving and resuming ------------------------------------------------------------------


#: The file in ``out`` a sweep holds an flock on for its whole life (see :class:`_Store`).
LOCK_NAME: Final = ".sweep.lock"
_SCALARS: Final = (bool, int, float, str, type(None))
_DIGEST: Final = re.compile(r"[0-9a-f]{64}")


class _Store:
    """A sweep's ``out`` directory: its saved runs, held by one sweep at a time.

    The hold is an ``flock`` on ``out/.sweep.lock``, taken without waiting: a second
    sweep on the same directory is refused (SweepError naming the holder, which the file
    says: its pid, host, start time and scenario) instead of computing the same runs
    again beside the first. The kernel lets go of it when the holder dies, however it
    dies."""

    def __init__(self, out: pathlib.Path, scenario: str) -> None:
        self.out = out
        self.runs = out / "runs"
        self._lock_fd = self._hold(out / LOCK_NAME, scenario)
        try:
            for name in ("results.csv", "results.parquet", "results.jsonl"):
                _regular_or_none(out / name)
            self.runs.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            self.close()
            raise SweepError(f"out directory {os.fspath(out)!r}: cannot make runs/ there "
                             f"({exc.strerror or exc})") from None
        except SweepError:
            self.close()
            raise

    @staticmethod
    def _hold(path: pathlib.Path, scenario: str) -> int:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        except OSError as exc:
            raise SweepError(f"out directory {os.fspath(path.parent)!r}: cannot open its lock "
                             f"file ({exc.strerror or exc})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 300, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise SweepError(f"out directory {os.fspath(path.parent)!r} is in use by another "
                             f"sweep ({holder}); wait for it to end or choose another "
                             "--out") from None
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        text = f"pid {os.getpid()} on {socket.gethostname()} since {stamp}, {scenario}"
        os.ftruncate(fd, 0)
        os.pwrite(fd, text.replace("\n", " ").encode(), 0)
        return fd

    def close(self) -> None:
        if self._lock_fd >= 0:
            os.close(self._lock_fd)  # lets go of the flock
            self._lock_fd = -1

    def load(self, spec: RunSpec, steps: bool = False,
             reporters: Sequence[str] = ()) -> dict[str, Any] | None:
        """The saved run of ``spec``, checked (``{"row"}``, and its ``"steps"`` when
        ``steps``); None when there is none, when it is not one this sweep would have made
        (then said on stderr: it is computed again), or when ``steps`` are wanted and it
        was saved without (a sweep that did not collect them) or with other
        ``reporters`` (the names of the sweep's own, whose columns its steps have: said
        on stderr, and computed again)."""
        path = self.runs / f"{spec.key}.json"
        _regular_or_none(path)
        try:
            text = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            _redo(path, f"cannot be read ({exc.strerror or exc})")
            return None
        try:
            saved = json.loads(text)
        except ValueError:
            _redo(path, "is not JSON")
            return None
        problem = _saved_problem(spec, saved)
        if problem is not None:
            _redo(path, problem)
            return None
        out: dict[str, Any] = {"row": saved["row"]}
        if steps:
            kept = saved.get("steps")
            if not isinstance(kept, list) or not all(isinstance(r, dict) for r in kept):
                return None
            had = saved.get("reporters")
            if had != sorted(reporters):
                _redo(path, "was saved with the reporters "
                      + (", ".join(map(str, had)) or "(none)" if isinstance(had, list)
                         else "(not said)")
                      + ", not this sweep's " + (", ".join(sorted(reporters)) or "(none)"))
                return None
            out["steps"] = kept
        return out

    def save(self, spec: RunSpec, done: Mapping[str, Any],
             reporters: Sequence[str] = ()) -> None:
        """Keep a finished run (its file written whole, then renamed into place); with
        its steps, the names of the ``reporters`` that gave their columns."""
        record = {"key": spec.key, "scenario": spec.scenario, "seed": spec.seed,
                  "params": spec.params, "row": done["row"], "summary": done["summary"]}
        if "steps" in done:
            record["steps"] = done["steps"]
            record["reporters"] = sorted(reporters)
        final = self.runs / f"{spec.key}.json"
        partial = final.with_suffix(f".{os.getpid()}.tmp")
        # Not sort_keys: the row's key order is the table's column order.
        partial.write_text(json.dumps(record, indent=1))
        os.replace(partial, final)
        with (self.out / "results.jsonl").open("a") as handle:
            handle.write(json.dumps({"index": spec.index, "key": spec.key, **done["row"]})
                         + "\n")


def _regular_or_none(path: pathlib.Path) -> None:
    """SweepError when something other than a file is at ``path`` (a directory where a
    sweep writes a file would be a traceback after every run was computed)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISREG(mode):
        raise SweepError(f"{os.fspath(path)!r} is in the way: a sweep writes a file there, "
                         "and this is not a regular file")


def _redo(path: pathlib.Path, why: str) -> None:
    print(f"barnraise: note: saved run {path} {why}: computing it again", file=sys.stderr,
          flush=True)


def _number(value: Any) -> bool:
    return type(value) in (int, float) and math.isfinite(value) and value >= 0


def _saved_problem(spec: RunSpec, saved: Any) -> str | None:
    """Why a saved run is not one this sweep would have made for ``spec`` (None: it is).

    A row edited by hand, or written by something else, must not reach the table: the
    key, seed and parameters must be ``spec``'s, the columns every row has must have
    their types (a seed an int, success a bool, virtual_time and wall_seconds numbers
    >= 0, a trace digest's 64 hex digits, error a string) and every other value a
    scalar a CSV or Parquet column holds."""
    if not isinstance(saved, dict) or not isinstance(saved.get("row"), dict):
        return "is not a saved run (no row)"
    if saved.get("key") != spec.key:
        return f"is the run of another key ({str(saved.get('key'))[:30]!r})"
    row = saved["row"]
    seed = row.get("seed")
    if type(seed) is not int or seed != spec.seed or saved.get("seed") != spec.seed:
        return f"has seed {seed!r}, not this run's {spec.seed}"
    wanted = row_of(spec, None)
    for key in spec.params:
        if json.dumps(row.get(key, _MISSING), default=repr) != json.dumps(wanted[key]):
            return f"has {key}={row.get(key, '(none)')!r}, not this run's {wanted[key]!r}"
    if not isinstance(row.get("scenario"), str):
        return f"has scenario {row.get('scenario')!r}"
    error = row.get("error")
    if not isinstance(error, str):
        return f"has error {error!r}, not a string"
    if type(row.get("success")) is not bool:
        return f"has success {row.get('success')!r}, not true or false"
    for column in ("virtual_time", "wall_seconds"):
        value = row.get(column)
        if not (_number(value) or (value is None and error)):
            return f"has {column} {value!r}, not a number >= 0"
    digest = row.get("trace_digest")
    if not ((isinstance(digest, str) and _DIGEST.fullmatch(digest)) or
            (digest is None and error)):
        return f"has trace_digest {digest!r}, not a digest"
    for key, value in row.items():
        if not isinstance(key, str) or not isinstance(value, _SCALARS):
            return f"has {key!r} = {value!r}, not a scalar"
    return None


_MISSING: Final = object()


# -- running ---------------------------------------------------------------------------------


def _check_engine(engine: str, workers: int | None,
                  dask_address: str | None) -> int:
    if engine not in ENGINES:
        raise SweepError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int)
                                or not 1 <= workers <= MAX_WORKERS):
        raise SweepError(f"workers must be an integer from 1 to {MAX_WORKERS}, got {workers!r}")
    if engine == "serial" and workers not in (None, 1):
        raise SweepError(f"engine 'serial' runs one run at a time: workers must be 1, "
                         f"got {workers}")
    if dask_address is not None:
        if engine != "dask":
            raise SweepError("dask_address applies to engine 'dask' only")
        if not isinstance(dask_address, str) or not _ADDRESS.match(dask_address):
            raise SweepError(f"dask_address must be a scheduler address such as "
                             f"tcp://127.0.0.1:8786, got {dask_address!r}")
        if workers is not None:
            raise SweepError("workers applies to a LocalCluster the sweep starts; an "
                             "existing scheduler (dask_address) has its own workers")
    if engine == "dask":
        try:
            importlib.import_module("distributed")
        except ImportError:
            raise SweepError("engine 'dask' needs Dask's distributed package: pip install "
                             "'barnraise[dask]'") from None
    return workers or (1 if engine == "serial" else max(1, os.cpu_count() or 1))


def sweep(
    scenario: str,
    params: Mapping[str, Sequence[Any]] | None = None,
    seeds: int | Iterable[int] = 1,
    *,
    workers: int | None = None,
    engine: str = "serial",
    dask_address: str | None = None,
    out: str | os.PathLike[str] | None = None,
    progress: bool = False,
    on_result: Callable[[dict[str, Any]], None] | None = None,
    collect: str = "runs",
    max_time: float | None = None,
    reporters: Mapping[str, Callable[..., Any]] | None = None,
    agent_reporters: Mapping[str, Callable[..., Any]] | None = None,
) -> pd.DataFrame:
    """Run ``scenario`` for every combination of ``params`` and every seed; one row per run,
    or with ``collect="timeseries"`` one row per step of every run.

    ``seeds``: a list (or range) of seeds, or a count n for seeds 0..n-1.
    ``workers``: processes (engine ``processes``, default: the CPU count) or
    LocalCluster workers (engine ``dask``); must be 1 or None for ``serial``.
    ``progress``: show a tqdm bar (elapsed and remaining time) on stderr.
    ``on_result``: called with each finished run's row, in completion order.
    ``collect``: ``"runs"`` (the default) or ``"timeseries"``: each run recorded, and the
    table its interval and final samples (:data:`STEP_TRIGGERS`), every session's, each
    row led by ``scenario``, the parameters and ``seed``, with a column per reporter
    (``reporters`` added to the scenario's ``REPORTERS``, as for :func:`barnraise.run`;
    only with ``"timeseries"``, and on ``processes`` or ``dask`` only module-level
    functions; ``agent_reporters`` are refused: the rows are the model-level samples);
    the one-row-per-run table is then in ``attrs["runs"]``. ``max_time``: simulated
    seconds each run stops at.
    See the module docstring for the columns, the order and ``out``.
    """
    count = _check_engine(engine, workers, dask_address)
    chosen = _check_collect(scenario, collect, max_time, reporters, agent_reporters, engine)
    specs = plan(scenario, params, seeds, max_time=max_time)
    if dask_address is not None:
        _connect(dask_address).close()  # an address nobody answers is a bad request too
    store = None
    if out is not None:
        target = check_out_dir(out)
        varied = list(params or {})
        check_sweep_out(target, scenario, varied)  # another sweep's runs are not reused
        store = _Store(target, scenario)
        write_sweep_manifest(target, scenario, varied)
    try:
        return _sweep(specs, store, engine, count, dask_address, progress, on_result, chosen)
    finally:
        if store is not None:
            store.close()


def _check_collect(scenario: str, collect: str, max_time: float | None,
                   reporters: Mapping[str, Callable[..., Any]] | None,
                   agent_reporters: Mapping[str, Callable[..., Any]] | None,
                   engine: str) -> Collect:
    """The checked :class:`Collect` of a sweep; SweepError naming what is wrong."""
    if collect not in ("runs", "timeseries"):
        raise SweepError(f"collect must be 'runs' or 'timeseries', got {collect!r}")
    if max_time is not None and (type(max_time) not in (int, float)
                                 or not 0 < max_time < math.inf):
        raise SweepError(f"max_time must be a finite number of simulated seconds > 0, "
                         f"got {max_time!r}")
    if reporters and collect != "timeseries":
        raise SweepError("reporters give per-step columns: they go with "
                         "collect='timeseries'")
    if agent_reporters:
        raise SweepError("agent_reporters: a sweep's per-step rows are the model-level "
                         "samples; agent reporters go with barnraise.run")
    try:
        check_reporters(reporters, agent_reporters, module=load(scenario))
        if engine != "serial":
            check_picklable(reporters, agent_reporters, engine)
    except ValueError as exc:
        raise SweepError(str(exc)) from None
    return Collect(collect == "timeseries", None if max_time is None else float(max_time),
                   dict(reporters) if reporters else None,
                   dict(agent_reporters) if agent_reporters else None)


def _sweep(specs: list[RunSpec], store: _Store | None, engine: str, count: int,
           dask_address: str | None, progress: bool,
           on_result: Callable[[dict[str, Any]], None] | None,
           collect: Collect | None = None) -> pd.DataFrame:
    """:func:`sweep` once everything is checked (and ``out``, if any, held)."""
    collect = collect or Collect()
    reporters = sorted(collect.reporters or {})
    rows: dict[int, dict[str, Any]] = {}
    steps: dict[int, list[dict[str, Any]]] = {}
    todo: list[RunSpec] = []
    for spec in specs:
        saved = store.load(spec, collect.steps, reporters) if store is not None else None
        if saved is None:
            todo.append(spec)
        else:
            rows[spec.index] = saved["row"]
            steps[spec.index] = saved.get("steps", [])
    bar = _bar(len(specs), len(rows)) if progress else None

    def finished(spec: RunSpec, done: dict[str, Any]) -> None:
        if store is not None:
            store.save(spec, done, reporters)
        rows[spec.index] = done["row"]
        steps[spec.index] = done.get("steps", [])
        if bar is not None:
            bar.update(1)
        if on_result is not None:
            on_result(done["row"])

    started = time.perf_counter()
    try:
        if todo:
            if engine == "serial" or (engine == "processes" and count == 1):
                for spec in todo:
                    finished(spec, run_one(spec, collect))
            elif engine == "processes":
                _on_processes(todo, count, finished, collect)
            else:
                _on_dask(todo, count if dask_address is None else None, dask_address, finished,
                         collect)
    finally:
        if bar is not None:
            bar.close()
    table = _table([rows[s.index] for s in specs])
    table.attrs.update(computed=len(todo), reused=len(specs) - len(todo),
                       wall_seconds=round(time.perf_counter() - started, 3), engine=engine,
                       workers=count if dask_address is None else None)
    if store is not None:
        _write_results(table, store.out)
    if not collect.steps:
        return table
    per_step = _steps_table([row for s in specs for row in steps[s.index]])
    per_step.attrs.update(table.attrs)
    per_step.attrs["runs"] = table
    if store is not None:
        per_step.to_csv(store.out / TIMESERIES_NAME, index=False)
    return per_step


#: The file in ``out`` a sweep with ``collect="timeseries"`` writes its per-step rows to.
TIMESERIES_NAME: Final = "timeseries.csv"


def _steps_table(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """The per-step rows as one frame, built the same way whichever engine ran them."""
    import pandas as pd

    columns: dict[str, None] = {}
    for row in rows:
        for key in row:
            columns.setdefault(key, None)
    return pd.DataFrame([[row.get(c) for c in columns] for row in rows], columns=list(columns))


def _bar(total: int, done: int) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, initial=done, unit="run", file=sys.stderr, dynamic_ncols=True,
                bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} runs "
                           "[{elapsed} elapsed, {remaining} left]")


def _on_processes(todo: list[RunSpec], workers: int,
                  finished: Callable[[RunSpec, dict[str, Any]], None],
                  collect: Collect | None = None) -> None:
    # spawn, not fork: a fresh interpreter per worker shares no thread or lock
    # state with this one (a forked copy of a process with threads can hang).
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=min(workers, len(todo)), mp_context=context,
                             initializer=_worker_ignores_ctrl_c) as pool:
        pending: dict[Future[dict[str, Any]], RunSpec] = {
            pool.submit(run_one, spec, collect): spec for spec in todo}
        try:
            while pending:
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    finished(pending.pop(future), future.result())
        except BrokenProcessPool:
            raise SweepError(_broken_pool_words()) from None
        except BaseException:
            for future in pending:
                future.cancel()
            raise


def _worker_ignores_ctrl_c() -> None:
    """Ctrl-C reaches every process of the terminal's group: the sweep's own process
    stops the sweep, and a worker must not print a KeyboardInterrupt traceback of its own."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _broken_pool_words() -> str:
    """Why a worker process died before returning its run, as far as can be told here.

    The processes engine starts each worker by importing the main script again (the
    ``spawn`` start method): a script that calls :func:`sweep` at its top level, not
    under ``if __name__ == "__main__":``, makes every worker start a sweep of its own,
    which Python refuses, and the pool breaks (``BrokenProcessPool``).
    """
    main = sys.modules.get("__main__")
    script = getattr(main, "__file__", None)
    guard = 'if __name__ == "__main__":'
    try:
        guarded = script is None or "__main__" in pathlib.Path(script).read_text()
    except (OSError, UnicodeDecodeError):
        guarded = True
    if not guarded:
        return (f"engine 'processes': a worker process died (BrokenProcessPool): the script "
                f"{script} has no `{guard}` guard. Each worker imports the script again, so "
                f"the sweep must be called under that guard (docs/experiments.md)")
    return (f"engine 'processes': a worker process died before it returned its run "
            f"(BrokenProcessPool). A script that starts the sweep must call it under "
            f"`{guard}` (each worker imports the script again); otherwise a worker was "
            f"killed (out of memory, a signal)")


def _on_dask(todo: list[RunSpec], workers: int | None, address: str | None,
             finished: Callable[[RunSpec, dict[str, Any]], None],
             collect: Collect | None = None) -> None:
    import logging

    # distributed has no type information: take it as Any rather than silence each call
    dask: Any = importlib.import_module("distributed")
    Client, LocalCluster, as_completed = dask.Client, dask.LocalCluster, dask.as_completed
    dask_config: Any = importlib.import_module("dask.config")

    cluster = None
    if address is None:
        # The workers' statistical profiler samples every thread's stack every 10 ms:
        # a real cost for tasks that are pure Python. A sweep has no use for it.
        with dask_config.set({"distributed.worker.profile.enabled": False}):
            cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                   dashboard_address=":0", silence_logs=logging.ERROR)
        client = Client(cluster)
    else:
        client = _connect(address)
    try:
        futures = {client.submit(run_one, spec, collect, pure=False,
                                 key=f"barnraise-{spec.key}"): spec
                   for spec in todo}
        for future in as_completed(futures):
            finished(futures[future], future.result())
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def _connect(address: str) -> Any:
    """A Dask client of the scheduler at ``address``; SweepError if none answers."""
    dask: Any = importlib.import_module("distributed")
    try:
        return dask.Client(address, timeout=DASK_CONNECT_TIMEOUT)
    except OSError as exc:
        raise SweepError(f"dask_address {address!r}: no scheduler answered within "
                         f"{DASK_CONNECT_TIMEOUT:g} s ({exc})") from None


def _table(rows: list[dict[str, Any]]) -> pd.DataFrame:
    import pandas as pd

    columns: dict[str, None] = {}
    for row in rows:
        for key in row:
            if key != "error":
                columns.setdefault(key, None)
    columns["error"] = None
    table = pd.DataFrame([[row.get(c) for c in columns] for row in rows], columns=list(columns))
    table["error"] = table["error"].fillna("").astype("string")
    return table


def _write_results(table: pd.DataFrame, out: pathlib.Path) -> None:
    table.to_csv(out / "results.csv", index=False)
    try:
        import pyarrow
    except ImportError:
        return
    try:
        table.to_parquet(out / "results.parquet", index=False)
    except (pyarrow.ArrowException, ValueError, TypeError) as exc:
        # A column whose runs gave values of different types (a metric a number in one
        # run and text in another): the CSV holds it, Parquet's typed columns do not.
        with contextlib.suppress(FileNotFoundError):
            (out / "results.parquet").unlink()
        print(f"barnraise: note: {out / 'results.parquet'} not written (results.csv is): "
              f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}",
              file=sys.stderr, flush=True)
