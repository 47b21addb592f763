"""The scenario helpers (scenarios/_kit.py): one function per job, each doing what it says."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest

from barnraise.actors.world import Simulation
from barnraise.scenarios._kit import (
    Replay,
    count,
    host_session,
    max_concurrent,
    min_gap,
    overlapping_pairs,
    percentile,
    seeded_tiles,
    session_events,
)
from barnraise.sim.geometry import Rect


def test_percentile_is_nearest_rank() -> None:
    assert percentile([], 95) == 0.0
    assert percentile([3.0], 95) == 3.0
    assert percentile([float(v) for v in range(1, 21)], 95) == 19.0
    assert percentile([5.0, 1.0, 2.0], 50) == 2.0


def test_overlapping_pairs_finds_shared_cells_only() -> None:
    a = {"x": 0, "y": 0, "width": 4, "height": 4}
    touching = {"x": 4, "y": 0, "width": 4, "height": 4}
    inside = {"x": 3, "y": 3, "width": 2, "height": 2}
    assert overlapping_pairs([a, touching]) == []
    assert overlapping_pairs([a, touching, inside]) == [(0, 2), (1, 2)]
    # Rects and region dicts mix; a big square and one across its corner share cells
    big = {"x": 0, "y": 0, "width": 100, "height": 100}
    assert overlapping_pairs([big, Rect(50, 50, 100, 100)]) == [(0, 1)]
    assert overlapping_pairs([big, Rect(100, 0, 10, 10)]) == []


def test_max_concurrent_counts_touching_intervals_once() -> None:
    assert max_concurrent([]) == 0
    assert max_concurrent([(0, 1), (1, 2), (2, 3)]) == 1
    assert max_concurrent([(0, 2), (1, 3), (1.5, 1.6)]) == 3


def test_min_gap_and_count() -> None:
    assert min_gap([]) is None and min_gap([1.0]) is None
    assert min_gap([0.0, 2.0, 2.5, 5.0]) == 0.5
    assert count([{"event": "a"}, {"event": "b"}, {"event": "a"}, {}], "a") == 2


def test_seeded_tiles_keeps_both_seeded_streams() -> None:
    # The two helpers this one replaced drew in different integer types, which
    # numpy turns into different codes from one seed; both streams must repeat.
    uint8 = seeded_tiles(np.random.default_rng(5), 6, 7)
    assert np.array_equal(uint8, np.random.default_rng(5).integers(1, 8, size=(6, 7),
                                                                   dtype=np.uint8))
    wide = seeded_tiles(np.random.default_rng(5), 6, 7, draw_dtype=np.int64)
    assert np.array_equal(wide, np.random.default_rng(5).integers(1, 8, size=(6, 7)))
    for tiles in (uint8, wide):
        assert tiles.dtype == np.uint8 and tiles.shape == (6, 7)
        assert tiles.min() >= 1 and tiles.max() <= 7  # full: no empty cell
    holes = seeded_tiles(np.random.default_rng(5), 40, 40, empty=0.25)
    assert 0.15 < float(np.mean(holes == 0)) < 0.35


def test_host_session_makes_a_host_or_reuses_the_one_given() -> None:
    with Simulation(seed=1) as simu:
        first, sid1 = host_session(simu, session_name="one", grid_size=8)
        assert first.agent_id == "host-1"
        again, sid2 = host_session(simu, host=first, session_name="two", grid_size=8)
        assert again is first and sid1 != sid2
        assert simu.sessions() == [sid1, sid2]
        with pytest.raises(RuntimeError, match="session_create failed"):
            host_session(simu, session_name="bad", grid_size=0)


def test_session_events_filters_by_type_or_prefix() -> None:
    with Simulation(seed=1) as simu:
        host, sid = host_session(simu, session_name="s", grid_size=8)
        other_host, other = host_session(simu, session_name="other", grid_size=8)
        host.call("session_join", session_id=sid, agent_name="A", role="architect")
        other_host.call("session_join", session_id=other, agent_name="B", role="architect")
        host.call("region_claim", region={"x": 0, "y": 0, "width": 2, "height": 2})
        host.call("a2a_lock_acquire", lock_id="L")
        everything = session_events(simu, sid)
        assert [e["event"] for e in everything] == ["agent_joined", "region_claimed",
                                                     "lock_granted"]
        assert all(e["session_id"] == sid for e in everything)  # the other session's stay out
        seqs = [e["seq"] for e in everything]
        assert seqs == sorted(seqs) and all(e["t"] == 0.0 for e in everything)
        assert [e["event"] for e in session_events(simu, sid, "lock_granted",
                                                   "agent_joined")] == ["agent_joined",
                                                                        "lock_granted"]
        assert [e["event"] for e in session_events(simu, sid, prefix="region_")] == [
            "region_claimed"]
        assert session_events(simu, sid, "region_claimed", prefix="lock") == []


class _Stub:
    """Just what Replay uses of an agent: name, call, sleep, now."""

    def __init__(self) -> None:
        self.name = "agent-1"
        self.now = 99.0
        self.live: list[str] = []
        self.slept: list[float] = []

    async def call(self, tool: str, **args: Any) -> dict[str, Any]:
        self.live.append(tool)
        return {"live": tool}

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)


def _call(tool: str, asked: float, answer: Any = None, **args: Any) -> dict[str, Any]:
    return {"tool": tool, "args": args, "asked": asked, "answer": answer,
            "answered": None if answer is None else asked + 1}


def test_replay_answers_the_logged_calls_then_goes_live() -> None:
    """Logged calls are answered from the log at the logged times, sleeps between them are
    skipped; a call a run left unanswered before others was made again and is left out;
    from a last unanswered call on, everything is live."""
    agent = _Stub()
    replay = Replay(agent, [_call("region_claim", 1.0, {"n": 1}, x=1),  # type: ignore[arg-type]
                            _call("region_release", 3.0),  # died with its run, made again
                            _call("region_release", 5.0, {"n": 2}),
                            _call("region_claim", 7.0)])  # unanswered at the kill

    async def script() -> list[Any]:
        seen = [await replay.call("region_claim", x=1), replay.now]
        await replay.sleep(10.0)
        seen.append(replay.now)  # the next logged call's time, not slept
        seen += [await replay.call("region_release"), replay.now]
        await replay.sleep(10.0)  # nothing left in the log: slept
        seen += [await replay.call("region_claim"), replay.now]
        return seen

    assert asyncio.run(script()) == [{"n": 1}, 2.0, 5.0, {"n": 2}, 6.0,
                                     {"live": "region_claim"}, 99.0]
    assert (agent.live, agent.slept, replay.replayed) == (["region_claim"], [10.0], 2)


def test_replay_refuses_a_script_that_goes_another_way_than_its_log() -> None:
    replay = Replay(_Stub(), [_call("region_claim", 1.0, {"n": 1}, x=1)])  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="another way than its stored log"):
        asyncio.run(replay.call("region_claim", x=2))
