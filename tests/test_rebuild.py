"""The world of a stored run at any time, folded from its snapshots and log
(actors/stored/rebuild.py), checked against what the run itself kept: its final snapshot,
its mid-run snapshots, and a re-execution held at the same time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from barnraise import open_run
from barnraise.actors.stored.rebuild import pair_writes, world_at
from barnraise.actors.stored.run import StoredRun
from barnraise.loading import list_scenarios
from barnraise.runner import check_request, open_store, run_request
from barnraise.sim.store import SNAPSHOT_EVERY
from tests.helpers import HandSession, canvas_from_log

SMALL = {"grid_size": 60, "block": 30, "builders": 2, "testers": 1}
PARTS = ("canvas", "shape", "members", "claims", "tasks", "checkpoints")


class _FromNothing:
    """A stored run seen without its snapshots: the fold starts from an empty world."""

    def __init__(self, run: StoredRun) -> None:
        self.run, self.info = run, run.info

    def snapshots(self) -> list[tuple[int, float]]:
        return []

    def records(self, start: int = 0) -> Any:
        return self.run.records(start)

    def last(self) -> Any:
        return self.run.last()


def _store(path: Path, scenario: str, snapshot_every: int = SNAPSHOT_EVERY,
           **options: Any) -> StoredRun:
    request = check_request(scenario, **options)
    result = run_request(request, store=open_store(request, path, snapshot_every=snapshot_every),
                         record=False)
    assert result.success, result.summary
    return open_run(path)


def _same(got: dict[str, Any], want: dict[str, Any]) -> None:
    assert set(got) == set(want)
    for sid, part in want.items():
        for key in PARTS:
            assert got[sid][key] == part[key], (sid, key)


@pytest.mark.parametrize("scenario", [name for name, _ in list_scenarios()])
def test_folding_the_whole_log_gives_the_final_snapshot(tmp_path: Path, scenario: str) -> None:
    run = _store(tmp_path / "run.db", scenario, seed=0)
    world = world_at(_FromNothing(run))  # type: ignore[arg-type]
    assert world.start is None and world.notes == []
    _same(world.state(), run.snapshot())


@pytest.mark.parametrize("scenario", ["kernel_build", "checkpoint_rollback", "conflict_storm"])
def test_a_realtime_run_folds_to_its_final_snapshot(tmp_path: Path, scenario: str) -> None:
    params = SMALL if scenario == "kernel_build" else {}
    run = _store(tmp_path / "run.db", scenario, seed=2, mode="realtime", time_scale=50.0,
                 **params)
    assert len(run.snapshots()) == 1  # a realtime run keeps one, at its end
    _same(world_at(_FromNothing(run)).state(), run.snapshot())  # type: ignore[arg-type]
    if scenario == "kernel_build":  # mid-run: the tile writes the log holds by then
        times = sorted({r.t for r in run.records()})
        pairing = pair_writes(run.records())
        for t in times[len(times) // 5::len(times) // 5]:
            world = world_at(run, t, pairing=pairing).state()
            (part,) = world.values()
            canvas = np.frombuffer(part["canvas"], np.uint8).reshape(part["shape"])
            assert np.array_equal(canvas, canvas_from_log(run, t, SMALL["grid_size"])), t


def test_folding_from_a_snapshot_agrees_with_folding_from_the_start_and_a_re_execution(
        tmp_path: Path) -> None:
    from barnraise.view.stored import ReplaySource

    bigger = {"grid_size": 120, "block": 20, "builders": 4, "testers": 2}
    run = _store(tmp_path / "run.db", "kernel_build", snapshot_every=200, seed=7, **bigger)
    snapshots = run.snapshots()
    assert len(snapshots) >= 3  # snapshots come with commits: a few ms of wall time apart
    pairing = pair_writes(run.records())
    times = sorted({r.t for r in run.records()})
    chosen = [t for t in times[len(times) // 7::len(times) // 7]][:6]
    replay = ReplaySource(run)
    try:
        for t in chosen:
            folded = world_at(run, t, pairing=pairing)
            assert folded.start is not None or t < snapshots[0][1]
            plain = world_at(_FromNothing(run), t, pairing=pairing)  # type: ignore[arg-type]
            _same(folded.state(), plain.state())
            # the re-execution held at t: canvas, claims, members and tasks alike
            replay.control("seek", t)
            frame = replay.frame()
            assert replay.problem is None, replay.problem
            (part,) = folded.state().values()
            canvas = np.frombuffer(part["canvas"], np.uint8).reshape(part["shape"])
            assert np.array_equal(canvas, canvas_from_log(run, t, bigger["grid_size"]))
            assert sorted(c["id"] for c in frame["claims"]) == [c[0] for c in part["claims"]]
            assert sorted(a["id"] for a in frame["agents"]) == [m[0] for m in part["members"]]
            counts: dict[str, int] = {}
            for status, _ in part["tasks"].values():
                counts[status] = counts.get(status, 0) + 1
            assert frame["board"]["counts"] == counts, t
            colours = {a["id"]: a["color"] for a in frame["agents"]}
            assert colours == part["colours"]
    finally:
        replay.close()


def test_the_scrubber_of_a_realtime_store_shows_the_folded_world(tmp_path: Path) -> None:
    from barnraise.view.stored import StoredSource, open_source

    run = _store(tmp_path / "run.db", "kernel_build", seed=3, mode="realtime",
                 time_scale=50.0, **SMALL)
    source = open_source(run)
    assert isinstance(source, StoredSource)
    times = sorted({r.t for r in run.records()})
    for t in (times[len(times) // 3], times[2 * len(times) // 3], source.end):
        assert source.control("seek", t)["success"]
        frame = source.frame()
        height, width = frame["grid"]
        import base64

        (rect,) = frame["canvas"]
        canvas = np.frombuffer(base64.b64decode(rect["data"]), np.uint8).reshape(height, width)
        assert np.array_equal(canvas, canvas_from_log(run, t, SMALL["grid_size"])), t
        assert frame["scrub"]["shown"] == t and frame["scrub"]["notes"] == []
        assert all(e["t"] <= t for e in frame["events"])
        assert frame["agents"] and all(a["color"].startswith("#") for a in frame["agents"])
    final = run.canvas()
    assert final is not None and np.array_equal(canvas, final)


# -- any prefix of a hand-driven session ------------------------------------------------------

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_TILE = st.sampled_from(["code", "data", "system", "empty", 3])
STEPS = st.lists(st.one_of(
    st.tuples(st.just("place_tile"), st.integers(0, 9), st.integers(0, 9), _TILE),
    st.tuples(st.just("place_tiles"), st.integers(0, 8), st.integers(0, 8), _TILE),
    st.tuples(st.just("claim"), st.integers(0, 9), st.integers(0, 9), st.integers(1, 4)),
    st.tuples(st.just("release"), st.integers(0, 3), st.just(0), st.just(0)),
    st.tuples(st.just("delegate"), st.integers(0, 3), st.just(0), st.just(0)),
    st.tuples(st.just("accept"), st.integers(0, 3), st.integers(0, 3), st.just(0)),
    st.tuples(st.just("report"), st.integers(0, 3), st.integers(0, 3),
              st.sampled_from(["completed", "failed", "blocked", "cancelled"])),
    st.tuples(st.just("checkpoint"), st.integers(0, 2), st.just(0), st.just(0)),
    st.tuples(st.just("rollback"), st.integers(0, 3), st.just(0), st.just(0)),
    st.tuples(st.just("join"), st.integers(0, 2), st.just(0), st.just(0)),
    st.tuples(st.just("leave"), st.integers(0, 2), st.just(0), st.just(0)),
), min_size=1, max_size=16)


@settings(deadline=None,  # 100 examples; --hypothesis-profile=long: 2,000
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=STEPS)
def test_the_world_folded_from_the_log_equals_the_world_in_memory_at_every_prefix(
        tmp_path: Path, steps: list[tuple[str, int, int, Any]]) -> None:
    """Random tool calls (good and refused) by an owner and guests; after each, the world
    in memory is kept with the length of the log, and the fold of the log up to there
    (from nothing, no snapshots) must be the same world."""
    import tempfile

    from barnraise.actors.world import Simulation

    path = Path(tempfile.mkdtemp(dir=tmp_path)) / "p.db"
    seen: list[tuple[int, dict[str, Any]]] = []
    with Simulation(seed=3, store=path) as simu:
        store = simu.store
        assert store is not None
        store.snapshot_every = 10**9  # one at the end at most: the fold does the rest
        hand = HandSession(simu)
        for step in steps:
            hand.step(*step)
            store.commit()
            seen.append((store.written, simu.world_state()))
        run = open_run(path)
        pairing = pair_writes(run.records())
        assert pairing.unanswered == 0
        for written, world in seen:
            folded = world_at(run, upto=written, pairing=pairing)
            assert folded.notes == []
            _same(folded.state(), _plain(world))


def _plain(world: dict[str, Any]) -> Any:
    """The world as a store keeps it (msgpack: tuples come back as lists)."""
    import msgspec

    return msgspec.msgpack.decode(msgspec.msgpack.encode(world))
