"""Inline Clients: what reaches them is recorded on the sending thread (realtime mode)."""

from __future__ import annotations

import threading

from barnraise.actors.client import InlineClientActor, InlineMailbox
from barnraise.actors.world import Simulation
from barnraise.sim.dispatch import DELIVERED, RealtimeDispatcher
from barnraise.sim.trace import DELIVER

WAIT = 10.0  # wall seconds any one wait in this file may take


def _realtime(simu: Simulation) -> RealtimeDispatcher:
    dispatcher = simu.dispatcher
    assert isinstance(dispatcher, RealtimeDispatcher)
    return dispatcher


def test_an_inline_client_hears_answers_on_the_services_thread() -> None:
    with Simulation(seed=3, mode="realtime", time_scale=50.0) as simu:
        dispatcher = _realtime(simu)
        client = simu.client("remote-1", inline=True)
        assert isinstance(client._actor, InlineClientActor)
        assert isinstance(client._actor.actor_inbox, InlineMailbox)
        heard: list[str] = []
        client.on_arrival(lambda: heard.append(threading.current_thread().name))
        made = client.call("session_create", session_name="inline", grid_size=20)
        assert made["success"], made
        joined = client.call("session_join", agent_name="A")
        assert joined["success"], joined
        assert client.session_id == made["session_id"]
        # Each answer was recorded by the coordinator's own thread: no Client thread hop.
        assert len(heard) == 2
        assert all(name.startswith("Coordinator-") for name in heard), heard
        # Counted offered and handled like any letter: the run goes idle, and the
        # deliveries are in the trace and the counts.
        assert dispatcher.wait_idle(timeout=WAIT, settle=0.05)
        assert client._actor.handled == 2 and client._actor.delivered == 2
        to_client = [r for r in dispatcher.trace.records(DELIVER) if r.recipient == "remote-1"]
        assert [r.type for r in to_client] == ["coordination_response"] * 2


def test_a_held_run_keeps_an_inline_clients_letters_in_order_until_it_resumes() -> None:
    with Simulation(seed=3, mode="realtime", time_scale=50.0) as simu:
        dispatcher = _realtime(simu)
        client = simu.client("remote-1", inline=True)
        dispatcher.pause()
        for n in range(3):
            report = dispatcher.send(dispatcher.message("coordinator", "remote-1", "status_update",
                                                        {"n": n}))
            assert report.statuses == {"remote-1": DELIVERED}
        assert client.messages() == []  # held: kept, not recorded
        assert len(client._actor.actor_inbox) == 3  # and shown as waiting
        assert dispatcher.in_flight() == 3  # and a held run never looks idle
        dispatcher.resume()  # the WAKE that resume offers hands them over
        assert [m.content["n"] for m in client.messages()] == [0, 1, 2]
        assert len(client._actor.actor_inbox) == 0
        assert dispatcher.wait_idle(timeout=WAIT, settle=0.05)
        # Kept while held, then the next letter after a resume goes after them.
        dispatcher.pause()
        dispatcher.send(dispatcher.message("coordinator", "remote-1", "status_update", {"n": 3}))
        dispatcher.holding = False  # resumed, but its WAKE not yet offered: a racing sender
        dispatcher.send(dispatcher.message("coordinator", "remote-1", "status_update", {"n": 4}))
        dispatcher.holding = True
        dispatcher.resume()
        assert [m.content["n"] for m in client.messages()] == [3, 4]


def test_a_timer_on_an_inline_client_runs_on_the_timer_thread_and_is_counted() -> None:
    with Simulation(seed=3, mode="realtime", time_scale=50.0) as simu:
        dispatcher = _realtime(simu)
        client = simu.client("remote-1", inline=True)
        ran = threading.Event()
        where: list[str] = []

        def fire() -> None:
            where.append(threading.current_thread().name)
            ran.set()

        dispatcher.call_later(0.01, client._actor, fire)
        assert ran.wait(WAIT)
        assert where == ["barnraise-timers"]
        assert dispatcher.wait_idle(timeout=WAIT, settle=0.05)
        assert client._actor.handled == 1


def test_a_released_inline_client_gets_no_more_mail() -> None:
    with Simulation(seed=3, mode="realtime", time_scale=50.0) as simu:
        dispatcher = _realtime(simu)
        client = simu.client("remote-1", inline=True)
        simu.release(client)
        report = dispatcher.send(dispatcher.message("coordinator", "remote-1", "status_update", {}))
        assert report.statuses == {"remote-1": "offline"}
        assert client._actor.handled == 0
        assert dispatcher.wait_idle(timeout=WAIT, settle=0.05)
