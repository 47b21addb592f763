"""Whose files an ``--out`` folder holds: the manifest a run or a sweep writes there.

``barnraise run --out DIR`` and :meth:`RunResult.write` write ``DIR/manifest.json``
beside the run's files: which run they are (scenario, seed, mode, parameters) and
the file names written. ``barnraise sweep --out DIR`` writes one that names the sweep
(its scenario and the names of the parameters it varies).

What callers can rely on:

* :func:`check_run_out` refuses (ScenarioError naming the folder and its run) a
  folder holding *another* run's files (a manifest of a run with other scenario,
  seed, mode or parameters, or an older barnraise's ``summary.json`` of one) unless
  ``overwrite``, and refuses a sweep's folder always. The same run again (a rerun,
  a resume) may write over its own files. It refuses, always, a run's manifest that
  :func:`clear_run_files` would not act on: its ``files`` not a list of names, a name
  that is not one a run writes (:data:`RUN_FILES`), or one that is there but not a
  file. It reads and changes nothing else.
* :func:`clear_run_files` removes the files the manifest lists, and the manifest,
  so that a run written over another leaves none of the other's files behind: only
  names of :data:`RUN_FILES`, only files or symlinks (never what a link points to),
  after the same check (a bad manifest removes nothing).
* :func:`check_sweep_out` refuses a folder holding a run's files or another sweep's
  (another scenario, or other parameters varied): a sweep reuses the saved runs of
  the same sweep only. A sweep folder written before manifests existed (``runs/``
  and no manifest) is taken as the same sweep.
"""

from __future__ import annotations

import json
import os
import pathlib
import stat
from collections.abc import Iterable, Mapping
from typing import Any, Final

from barnraise.scenarios import ScenarioError

__all__ = ["MANIFEST", "RUN_FILES", "check_run_out", "check_sweep_out", "clear_run_files",
           "run_identity", "write_run_manifest", "write_sweep_manifest"]

#: The manifest's file name in an ``--out`` folder.
MANIFEST: Final = "manifest.json"
#: Every name of a file a run writes (:meth:`RunResult.write`): the only files a run's
#: manifest may list, and so the only ones :func:`clear_run_files` removes.
RUN_FILES: Final = frozenset({
    "summary.json", "trace.jsonl", "events.csv", "timeseries.csv", "agents.csv",
    "timeseries.png", "build.gif", "canvas.png", "gantt.png", "dag.png", "sequence.png"})
_RUN: Final = "barnraise run"
_SWEEP: Final = "barnraise sweep"


def run_identity(scenario: str, seed: int, mode: str,
                 params: Mapping[str, Any]) -> dict[str, Any]:
    """What makes two runs the same run, as the manifest keeps it (JSON values)."""
    return {"scenario": scenario, "seed": seed, "mode": mode,
            "params": json.loads(json.dumps(dict(params), sort_keys=True, default=str))}


def _read(folder: pathlib.Path, name: str) -> dict[str, Any] | None:
    try:
        value = json.loads((folder / name).read_text())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _named(identity: Mapping[str, Any]) -> str:
    params = ", ".join(f"{k}={v}" for k, v in sorted(dict(identity.get("params") or {}).items()))
    return (f"{identity.get('scenario')} seed {identity.get('seed')} "
            f"({identity.get('mode')}{'; ' + params if params else ''})")


def _held_run(folder: pathlib.Path) -> dict[str, Any] | None:
    """The identity of the run whose files ``folder`` holds, if any."""
    manifest = _read(folder, MANIFEST)
    if manifest is not None and manifest.get("kind") == _RUN:
        run = manifest.get("run")
        return dict(run) if isinstance(run, dict) else {}
    if manifest is None:
        summary = _read(folder, "summary.json")  # written before manifests existed
        if summary is not None and "scenario" in summary and "trace_digest" in summary:
            return run_identity(str(summary["scenario"]), summary.get("seed", 0),
                                str(summary.get("mode")), summary.get("params") or {})
    return None


def _held_sweep(folder: pathlib.Path) -> dict[str, Any] | None:
    manifest = _read(folder, MANIFEST)
    if manifest is not None and manifest.get("kind") == _SWEEP:
        sweep = manifest.get("sweep")
        return dict(sweep) if isinstance(sweep, dict) else {}
    if manifest is None and (folder / "runs").is_dir() and (
            (folder / ".sweep.lock").exists() or (folder / "results.jsonl").exists()):
        return {}  # a sweep folder from before manifests: whose is not known
    return None


def check_run_out(path: str | os.PathLike[str], identity: Mapping[str, Any], *,
                  overwrite: bool) -> None:
    """ScenarioError when ``path`` holds a sweep's files, or another run's unless
    ``overwrite`` (see the module docstring); ``identity`` is this run's
    (:func:`run_identity`). Nothing is changed."""
    folder = pathlib.Path(path)
    where = os.fspath(path)
    sweep = _held_sweep(folder)
    if sweep is not None:
        raise ScenarioError(f"--out {where!r} holds a sweep's files"
                            + (f" ({sweep.get('scenario')})" if sweep else "")
                            + ": a run's files would mix with them; choose another folder")
    _listed(folder)  # a manifest whose files a run would not remove is refused first
    held = _held_run(folder)
    if held is None or overwrite or held == dict(identity):
        return
    raise ScenarioError(f"--out {where!r} holds another run's files ({_named(held)}); "
                        "choose another folder, or give --overwrite-out to replace them")


def _listed(folder: pathlib.Path) -> list[str] | None:
    """The files the run manifest in ``folder`` lists (None if it holds none), each
    checked: ScenarioError naming the manifest and what is wrong when its ``run`` is
    not an object, its ``files`` not a list of names a run writes (:data:`RUN_FILES`),
    or one of them is there but not a file (a folder, say). Nothing is changed."""
    manifest = _read(folder, MANIFEST)
    if manifest is None or manifest.get("kind") != _RUN:
        return None
    where = os.fspath(folder / MANIFEST)
    if not isinstance(manifest.get("run"), dict):
        raise ScenarioError(f"{where!r} is not a run's manifest barnraise wrote: its \"run\" "
                            "is not an object; remove it, or choose another folder")
    files = manifest.get("files")
    if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
        raise ScenarioError(f"{where!r} is not a run's manifest barnraise wrote: its "
                            f"\"files\" must be a list of file names, not {files!r:.80}; "
                            "remove it, or choose another folder")
    foreign = sorted(set(files) - RUN_FILES)
    if foreign:
        raise ScenarioError(f"{where!r} lists files a run does not write "
                            f"({', '.join(map(repr, foreign[:5]))}): barnraise removes only "
                            "its own; remove the manifest, or choose another folder")
    for name in files:
        try:
            mode = (folder / name).lstat().st_mode
        except FileNotFoundError:
            continue
        if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
            raise ScenarioError(f"{where!r} lists {name!r}, which is there but not a "
                                "file; remove it or the manifest, or choose another folder")
    return files


def clear_run_files(folder: pathlib.Path) -> None:
    """Remove the files a run's manifest in ``folder`` lists, and the manifest; only
    names of :data:`RUN_FILES`, only files (a symlink itself, not what it points to).
    A manifest that lists anything else is a ScenarioError naming it, before anything
    is removed."""
    files = _listed(folder)
    if files is None:
        return
    for name in files:
        (folder / name).unlink(missing_ok=True)
    (folder / MANIFEST).unlink(missing_ok=True)


def write_run_manifest(folder: pathlib.Path, identity: Mapping[str, Any],
                       files: Iterable[pathlib.Path]) -> pathlib.Path:
    path = folder / MANIFEST
    path.write_text(json.dumps({"kind": _RUN, "run": dict(identity),
                                "files": sorted(f.name for f in files)}, indent=1) + "\n")
    return path


def check_sweep_out(folder: pathlib.Path, scenario: str, varied: Iterable[str]) -> None:
    """ScenarioError when ``folder`` holds a run's files or another sweep's."""
    where = os.fspath(folder)
    if _held_run(folder) is not None:
        raise ScenarioError(f"out directory {where!r} holds a run's files, not a sweep's; "
                            "choose another folder")
    held = _held_sweep(folder)
    this = {"scenario": scenario, "params": sorted(varied)}
    if held and held != this:
        over = ", ".join(held.get("params") or []) or "no parameter"
        raise ScenarioError(
            f"out directory {where!r} holds another sweep's runs ({held.get('scenario')} "
            f"over {over}); a sweep reuses only its own: choose another folder")


def write_sweep_manifest(folder: pathlib.Path, scenario: str, varied: Iterable[str]) -> None:
    (folder / MANIFEST).write_text(json.dumps(
        {"kind": _SWEEP, "sweep": {"scenario": scenario, "params": sorted(varied)}},
        indent=1) + "\n")
