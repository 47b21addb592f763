"""The benchmark code runs and counts every message (sizes tiny; nothing is timed here)."""

from __future__ import annotations

from benchmarks import runtime


def test_runtime_benchmarks_produce_their_figures() -> None:
    throughput = runtime.bench_throughput(agents=5, messages=300, repeats=1)
    assert throughput["pykka_tell"] > 0 and throughput["deterministic"] > 0
    assert set(throughput["runs"]) == {"pykka_tell", "realtime", "deterministic"}
    split = runtime.bench_realtime_cpu(agents=5, messages=300, repeats=1)
    assert split["pykka_tell"]["cpu_sending_thread"] > 0 and split["realtime"]["cpu"] > 0
    assert set(split["send_side_alone_cpu"]) == {"pykka_tell", "realtime", "floor"}
    request_reply = runtime.bench_request_reply(round_trips=30, repeats=2)
    assert request_reply["ratio"] > 0 and len(request_reply["ratio_per_round"]) == 2
    assert request_reply["ratio_min"] == min(request_reply["ratio_per_round"])
    assert request_reply["floor"] > 0 and len(request_reply["runs"]["floor"]) == 2
    assert runtime.bench_fanout(subscribers=8, events=3, repeats=1)["ratio"] > 0
    scale = runtime.bench_scale(agents=300, pykka_actors=20, repeats=1)
    assert scale["peak_rss_mib"] > 0 and scale["time_ratio"] > 0
    from barnraise.sim.dispatch import deterministic

    shipped = deterministic.LOOP_GC_THRESHOLD
    collector = runtime.bench_loop_collector(grid_size=60, repeats=1)
    assert collector["ratio"] > 0 and collector["threshold"] == shipped
    assert shipped == deterministic.LOOP_GC_THRESHOLD  # put back after the bench


def test_world_benchmarks_produce_their_figures() -> None:
    from benchmarks.__main__ import world

    figures = world(quick=True)
    assert figures["claims"]["ratio"] > 0
    assert figures["task_dag"]["ratio"] > 0


def test_the_recording_benchmark_produces_its_figures() -> None:
    from benchmarks.sweep_bench import bench_recording

    figures = bench_recording(grid_size=60, repeats=1)
    assert figures["cost_recording"] > 0 and figures["interval_samples"] >= 1
    assert figures["samples"] == figures["interval_samples"] + figures["event_samples"] + 1


def test_gateway_benchmarks_produce_their_figures() -> None:
    from benchmarks import gateway_bench

    calls = gateway_bench.bench_ws_calls(clients=3, calls=4, repeats=1)
    assert calls["barnraise"]["calls"] == 12 and calls["barnraise"]["failures"] == 0
    assert calls["echo"]["calls"] == 12 and calls["world_only"]["calls"] == 12
    assert calls["ratio"] > 0 and calls["barnraise"]["server_cpu_us_per_call"] > 0
    a2a = gateway_bench.bench_a2a(clients=1, calls=4, repeats=1)
    assert a2a["barnraise"]["failures"] == 0 and a2a["sdk_echo"]["failures"] == 0
    assert a2a["ratio"] > 0



def test_the_in_process_websocket_drive_answers_every_call() -> None:
    import asyncio

    from benchmarks.ws_inprocess import drive

    figures = asyncio.run(asyncio.wait_for(drive(clients=3, calls=4), 120))
    assert figures["calls"] == 12 and figures["failures"] == 0, figures

def test_the_validation_comparison_checks_every_side_gives_the_same_arguments() -> None:
    from benchmarks import validation_bench

    figures = validation_bench.bench_validation(calls=20, repeats=1)
    assert set(figures["tools"]) == {"builder_place_tiles", "region_claim", "task_report"}
    for tool in figures["tools"].values():
        assert {"hand", "fastjsonschema", "msgspec"} <= set(tool)
        # the validator in use words its refusals as the hand checkers did
        assert tool["errors"]["msgspec"] == tool["errors"]["hand"]


def test_the_store_benchmarks_produce_their_figures() -> None:
    from benchmarks import store_bench

    figures = store_bench.run(quick=True)
    assert figures["kernel_build"]["ratio"] > 0 and figures["kernel_build"]["records"] > 0
    assert figures["resume"]["records"] > 0 and figures["resume"]["bytes_per_1000_records"] > 0
    killed = figures["resume_killed"]  # resumed from at least the records it was asked for
    assert killed["records"] >= 300 and 0 < killed["to_live_s"] <= killed["resume_s"]


def test_the_view_benchmark_watches_a_run_to_its_end() -> None:
    import pytest

    from barnraise.view import headless

    reason = headless.missing()
    if reason is not None:
        pytest.skip(f"no headless browser: {reason}")
    from benchmarks import view_bench

    figures = view_bench.bench_view(agents=20, grid=96, block=16, repeats=1)
    assert figures["same_digest"] is True  # watching changed nothing in the run
    assert figures["page_progress"] == [100] and figures["page_bad"] == 0
    assert figures["frames_drawn_per_s"][0] > 0 and figures["ratio"] > 0
    assert figures["frames_measured_by"]  # the browser reports long frames
    assert figures["page_deltas_per_run"][0] >= 1


def test_the_conflict_storm_scale_benchmark_times_both_crews() -> None:
    from benchmarks.scenarios_bench import bench_conflict_storm_scale

    figures = bench_conflict_storm_scale(small=4, large=40, grid=64, claims_per_agent=2)
    assert set(figures["runs"]) == {"4", "40"} and figures["agents_ratio"] == 10
    assert all(r["success"] and r["granted"] > 0 for r in figures["runs"].values())
    assert figures["ratio"] > 0 and figures["ratio_cpu"] > 0 and figures["joins_ratio"] > 0
    assert all(j["success"] and j["ready"] == int(n) for n, j in figures["joins"].items())
