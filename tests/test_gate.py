"""The run gate: pausing, stepping and pacing a deterministic run change nothing in it."""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np
import pytest

from barnraise.actors.world import Simulation
from barnraise.runner import check_request, run_request
from barnraise.sim.dispatch import DeterministicDispatcher, Gate, GateAborted

PARAMS = {"grid_size": 60, "block": 30, "builders": 2, "testers": 1}


def _driven(gate: Gate, script: Callable[[Gate, DeterministicDispatcher], None]
            ) -> tuple[str, list[str]]:
    """Run kernel_build with ``gate`` in its loop and ``script`` driving it from a thread."""
    errors: list[str] = []

    def watch(simu: Simulation) -> Callable[[], None]:
        dispatcher = simu.dispatcher
        assert isinstance(dispatcher, DeterministicDispatcher)
        detach = dispatcher.attach_gate(gate)

        def drive() -> None:
            try:
                script(gate, dispatcher)
            except Exception as exc:
                errors.append(f"{type(exc).__name__}: {exc}")
            finally:
                gate.resume()

        thread = threading.Thread(target=drive, daemon=True)
        thread.start()

        def ended() -> None:
            thread.join(30)
            detach()

        return ended

    result = run_request(check_request("kernel_build", seed=3, **PARAMS), watch=watch)
    assert result.success
    return result.trace_digest, errors


def _held_twice(gate: Gate, dispatcher: DeterministicDispatcher) -> tuple[int, int]:
    """The trace's length read twice at the gate, between steps."""
    return (gate.call(lambda: len(dispatcher.trace), timeout=10),
            gate.call(lambda: len(dispatcher.trace), timeout=10))


def test_a_paused_run_holds_and_steps_by_event_and_by_second() -> None:
    plain = run_request(check_request("kernel_build", seed=3, **PARAMS)).trace_digest
    seen: dict[str, object] = {}

    def script(gate: Gate, dispatcher: DeterministicDispatcher) -> None:
        first, second = _held_twice(gate, dispatcher)
        seen["held_at_start"] = (first, second)
        for _ in range(5):
            before = gate.events
            gate.step_events(1)
            while not gate.paused:
                gate.call(lambda: None, timeout=10)
            seen.setdefault("event_steps", []).append(gate.events - before)  # type: ignore[attr-defined]
            a, b = _held_twice(gate, dispatcher)
            assert a == b, "the run moved while paused"
        t0 = gate.call(lambda: dispatcher.now, timeout=10)
        gate.step_time(2.0)
        while not gate.paused:
            gate.call(lambda: None, timeout=10)
        t1 = gate.call(lambda: dispatcher.now, timeout=10)
        seen["time_step"] = (t0, t1, gate.at)

    digest, errors = _driven(Gate(paused=True), script)
    assert errors == []
    first, second = seen["held_at_start"]  # type: ignore[misc]
    assert first == second
    steps = seen["event_steps"]
    assert isinstance(steps, list) and len(steps) == 5 and all(s >= 1 for s in steps)
    t0, t1, at = seen["time_step"]  # type: ignore[misc]
    assert t0 <= t1 <= t0 + 2.0 and at == pytest.approx(t0 + 2.0)
    assert digest == plain  # the gate changed nothing in the run


def test_pacing_and_calls_leave_the_trace_alone() -> None:
    plain = run_request(check_request("kernel_build", seed=3, **PARAMS)).trace_digest
    reads: list[int] = []

    def script(gate: Gate, dispatcher: DeterministicDispatcher) -> None:
        gate.set_speed(1e6)
        for _ in range(20):
            try:
                reads.append(gate.call(lambda: len(dispatcher.trace), timeout=2))
            except TimeoutError:
                break  # the run is over
        gate.set_speed(None)

    digest, errors = _driven(Gate(), script)
    assert errors == []
    assert reads and reads == sorted(reads)
    assert digest == plain


def test_bad_requests_are_refused_and_a_closed_gate_lets_everything_through() -> None:
    gate = Gate(paused=True)
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="step_events"):
            gate.step_events(bad)  # type: ignore[arg-type]
    for bad_t in (0, -2.0, float("inf"), "1"):
        with pytest.raises(ValueError, match="step_time"):
            gate.step_time(bad_t)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="speed"):
        gate.set_speed(0)
    with pytest.raises(TimeoutError, match="no run passed"):
        gate.call(lambda: 1, timeout=0.01)
    gate.close()
    assert gate.open
    with Simulation(seed=1) as simu:
        dispatcher = simu.dispatcher
        assert isinstance(dispatcher, DeterministicDispatcher)
        detach = dispatcher.attach_gate(gate)
        with pytest.raises(RuntimeError, match="already has a gate"):
            dispatcher.attach_gate(Gate())
        client = simu.client()
        made = client.call("session_create", session_name="s", grid_size=10)
        assert made["success"]
        view = simu.view(made["session_id"])
        assert np.count_nonzero(view.canvas) == 0
        detach()
        assert dispatcher.gate is None


def test_wait_held_sees_the_loop_stand_and_abort_ends_the_run_where_it_stands() -> None:
    """wait_held is True only once the loop stands held (never for a hold it has left);
    abort raises GateAborted in the run's thread at its next entry, and the run stops."""
    gate = Gate(paused=True)
    outcome: dict[str, object] = {}
    seen: dict[str, object] = {}

    def watch(simu: Simulation) -> Callable[[], None]:
        dispatcher = simu.dispatcher
        assert isinstance(dispatcher, DeterministicDispatcher)
        detach = dispatcher.attach_gate(gate)
        seen["dispatcher"] = dispatcher
        return detach

    def run() -> None:
        try:
            run_request(check_request("kernel_build", seed=3, **PARAMS), watch=watch)
        except GateAborted as exc:
            outcome["aborted"] = str(exc)
        except BaseException as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        assert gate.wait_held(20)  # held before the first step
        dispatcher = seen["dispatcher"]
        assert isinstance(dispatcher, DeterministicDispatcher)
        gate.step_time(1.0)  # let go: the stale hold is not seen again
        assert gate.wait_held(20) and gate.at == 1.0
        now = dispatcher.clock.now
        gate.abort()
        thread.join(20)
        assert not thread.is_alive()
        assert outcome == {"aborted": "the run was ended at its gate"}, outcome
        assert dispatcher.clock.now == now <= 1.0  # no later entry ran after the abort
    finally:
        gate.close()
        thread.join(20)


def test_a_wall_clock_freezes_thaws_and_rescales_without_a_jump() -> None:
    from barnraise.sim.clock import WallClock

    clock = WallClock(100.0)
    clock.freeze()
    held = clock.now
    assert clock.frozen and clock.now == held
    clock.set_scale(1000.0)  # frozen: the scale changes, the time does not
    assert clock.now == held and clock.time_scale == 1000.0
    clock.thaw()
    assert not clock.frozen and clock.now >= held
    before = clock.now
    clock.set_scale(1.0)
    after = clock.now
    assert before <= after < before + 1.0  # no jump: the new scale starts from here
    for bad in (0, -1.0, float("inf")):
        with pytest.raises(ValueError, match="time_scale"):
            clock.set_scale(bad)


def test_a_held_realtime_run_keeps_its_letters_and_handles_them_on_resume() -> None:
    from barnraise.sim.dispatch import RealtimeDispatcher

    with Simulation(seed=1, mode="realtime", time_scale=50.0) as simu:
        dispatcher = simu.dispatcher
        assert isinstance(dispatcher, RealtimeDispatcher)
        client = simu.client()
        made = client.call("session_create", session_name="held", grid_size=20)
        assert made["success"]
        joined = client.call("session_join", session_id=made["session_id"], agent_name="A")
        assert joined["success"], joined
        assert dispatcher.wait_idle(timeout=10)  # every service has heard of the session
        dispatcher.pause()
        at = simu.now
        pending = client.submit("session_get_state")
        # Held: the coordinator keeps the letter; the clock stands; the read API answers.
        assert simu.view(made["session_id"]).session.session_name == "held"
        assert not pending.answered() and simu.now == at
        assert dispatcher.in_flight() > 0  # a held run never looks idle
        dispatcher.resume()
        answer = pending.result(timeout=5.0)
        assert answer["success"], answer
        assert simu.now >= at
        dispatcher.pause()
        client.submit("session_get_state")
    # Closed while held: the run was let go first, and every actor's thread ended.
    assert not dispatcher.holding
    assert all(a.actor_stopped.is_set()  # type: ignore[attr-defined]
               for a in dispatcher.actors.values())
