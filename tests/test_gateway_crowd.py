"""Many remote agents at once, and connections cut under them: the world's invariants hold."""

from __future__ import annotations

import random
import threading
from typing import Any

import numpy as np

import barnraise
from barnraise.gateway.remote import Backoff, RemoteClient
from barnraise.gateway.server import GatewayServer
from tests.gateway_support import CuttableProxy, counters, served

AREA = 60  # every claim falls in this corner of the canvas, so claims collide


def _canvas(server: GatewayServer, session_id: str) -> np.ndarray[Any, Any]:
    regions = server.gateway.world.simulation.dispatcher.actor("regions")
    tiles: np.ndarray[Any, Any] = regions.world_of(session_id).canvas.tiles  # type: ignore[attr-defined]
    return tiles.copy()


def _overlap(a: dict[str, int], b: dict[str, int]) -> bool:
    return (a["x"] < b["x"] + b["width"] and b["x"] < a["x"] + a["width"]
            and a["y"] < b["y"] + b["height"] and b["y"] < a["y"] + a["height"])


def test_fifty_remote_agents_build_one_canvas_and_its_invariants_hold() -> None:
    with served(time_scale=10.0) as server:
        session = server.gateway.world.default_session
        assert session is not None
        writes: list[tuple[dict[str, int], int]] = []  # acknowledged block writes
        granted: list[tuple[int, dict[str, int]]] = []
        refused_writes: list[dict[str, int]] = []
        problems: list[str] = []
        lock = threading.Lock()

        def agent(i: int) -> None:
            rng = random.Random(1000 + i)
            try:
                client = barnraise.connect(server.url, agent_name=f"B{i}", role="builder",
                                           session_id=session)
            except Exception as exc:
                with lock:
                    problems.append(f"B{i} could not join: {exc!r}")
                return
            try:
                tile = 1 + i % 7
                for _ in range(4):
                    w, h = rng.randint(3, 12), rng.randint(3, 12)
                    region = {"x": rng.randrange(AREA - w), "y": rng.randrange(AREA - h),
                              "width": w, "height": h}
                    claim = client.call("region_claim", region=region, timeout=3600)
                    if not claim["success"]:
                        if claim["error"] != "region_conflict":
                            with lock:
                                problems.append(f"B{i}: {claim}")
                        # writing where it holds no claim is refused and changes nothing
                        placed = client.call("builder_place_tiles", region=region, tiles=tile)
                        if placed["success"]:
                            with lock:
                                problems.append(f"B{i} wrote without a claim: {placed}")
                        continue
                    with lock:
                        granted.append((i, region))
                    placed = client.call("builder_place_tiles", region=region, tiles=tile)
                    if placed["success"]:
                        with lock:
                            writes.append((region, tile))
                    else:
                        with lock:
                            problems.append(f"B{i} could not write its claim: {placed}")
            finally:
                client.close()

        threads = [threading.Thread(target=agent, args=(i,)) for i in range(50)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        assert not any(t.is_alive() for t in threads)
        assert problems == []
        assert len(granted) >= 20 and refused_writes == []

        # no two agents' exclusive claims overlap (an agent's own may): by what the
        # agents were granted ...
        for n, (i, a) in enumerate(granted):
            for j, b in granted[n + 1:]:
                assert i == j or not _overlap(a, b), (i, a, j, b)
        # ... and by what the server holds
        inspector = RemoteClient(server.url)
        held = inspector.call("session_join", session_id=session, agent_name="Inspector",
                              role="observer")
        assert held["success"]
        state = inspector.call("region_query", region={"x": 0, "y": 0, "width": AREA,
                                                       "height": AREA})
        inspector.close()
        claims = [(c["agent_id"], c["bounds"]) for c in state["claims"]]
        assert len(claims) == len(granted)
        for n, (i, a) in enumerate(claims):
            for j, b in claims[n + 1:]:
                assert i == j or not _overlap(a, b)

        # the canvas is exactly what the acknowledged calls wrote
        expected = np.zeros((AREA, AREA), dtype=np.uint8)
        for region, tile in writes:
            expected[region["y"]:region["y"] + region["height"],
                     region["x"]:region["x"] + region["width"]] = tile
        canvas = _canvas(server, session)
        assert np.array_equal(canvas[:AREA, :AREA], expected)
        assert not canvas[AREA:, :].any() and not canvas[:, AREA:].any()
        assert counters(server).get("internal_error", 0) == 0


def test_connections_cut_at_seeded_moments_lose_nothing_and_repeat_nothing() -> None:
    backoff = Backoff(base=0.02, factor=2.0, cap=0.4, attempts=30, jitter=0.5)
    with served(time_scale=10.0, allowed_hosts=("127.0.0.1",)) as server:  # via the proxy's port
        session = server.gateway.world.default_session
        proxy = CuttableProxy(("127.0.0.1", server.port))
        stop = threading.Event()
        try:
            def remote(name: str, role: str, seed: int) -> RemoteClient:
                client = barnraise.connect(
                    proxy.url, agent_name=name, role=role, session_id=session,
                    backoff=backoff, seed=seed,
                    role_token=server.gateway.world.role_tokens[role])
                assert isinstance(client, RemoteClient)
                return client

            workers = [remote(f"A{i}", "architect", i) for i in range(4)]
            sender = remote("Sender", "architect", 99)
            results: dict[str, list[dict[str, Any]]] = {}
            inboxes: dict[str, list[int]] = {}
            calls, messages = 40, 40

            # The seeded moments: cut after these numbers of answered calls, overall.
            cut_after = set(random.Random(20260).sample(range(5, len(workers) * calls), 8))
            answered = iter(range(1, 10**9))
            count_lock = threading.Lock()

            def work(client: RemoteClient) -> None:
                assert client.agent_id is not None
                done = results.setdefault(client.agent_id, [])
                for n in range(calls):
                    done.append(client.call("task_delegate", task_type="build",
                                            description=f"{client.agent_id}:{n}"))
                    with count_lock:
                        now = next(answered)
                    if now in cut_after:
                        assert proxy.cut()

            def send() -> None:
                for n in range(messages):
                    for client in workers:
                        sent = sender.call("a2a_send_message", to_agent=str(client.agent_id),
                                           content={"n": n})
                        assert sent["success"], sent

            def read(client: RemoteClient) -> None:
                got = inboxes.setdefault(str(client.agent_id), [])
                while len(got) < messages and not stop.is_set():
                    message = client.receive(timeout=10.0)  # simulated: 1 s of wall time
                    if message is not None and "n" in message.content:
                        got.append(int(message.content["n"]))

            working = [threading.Thread(target=work, args=(c,)) for c in workers]
            threads = list(working)
            threads += [threading.Thread(target=read, args=(c,)) for c in workers]
            threads += [threading.Thread(target=send)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(90)
            stop.set()
            assert not any(t.is_alive() for t in threads)

            # every cut dropped the connections open then, and each came back
            assert proxy.cuts == 8, (proxy.cuts, {k: len(v) for k, v in results.items()})
            assert sum(c.reconnects for c in [*workers, sender]) >= proxy.cuts
            for agent_id, done in results.items():
                assert [r["success"] for r in done] == [True] * calls, (agent_id, done)
            # every call ran exactly once: one task per description
            queue = workers[0].call("task_get_queue", filter={"status": "all"})
            descriptions = sorted(t["description"] for t in queue["tasks"])
            assert queue["total"] == len(workers) * calls
            assert descriptions == sorted(f"{c.agent_id}:{n}" for c in workers
                                          for n in range(calls))
            # every message arrived exactly once, in order
            for client in workers:
                assert inboxes[str(client.agent_id)] == list(range(messages))
            for client in [*workers, sender]:
                client.close()
        finally:
            stop.set()
            proxy.close()
