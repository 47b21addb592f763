"""Random ids for remote agents (issue 23) at the cost they must have.

The regression: every WebSocket tool call drew its correlation id with its own
``secrets.token_urlsafe`` call, one ``os.urandom`` system call each (which lets go
of the GIL: a thread switch a call), +17% server CPU a call in
``benchmarks/gateway_bench.bench_ws_calls``. :mod:`barnraise.sim.tokens` draws them in bulk:
still random, still never repeated, one draw per :data:`barnraise.sim.tokens.BATCH` ids.
"""

from __future__ import annotations

import itertools
import os
import random
import re
import sys
import threading
from typing import Any

import pytest

from barnraise.sim import tokens
from tests.gateway_support import served
from tests.test_gateway_ws import joined, run

RANDOM_TOKEN = re.compile(r"[A-Za-z0-9_-]{32}")


@pytest.fixture
def draws(monkeypatch: pytest.MonkeyPatch) -> itertools.count[int]:
    """Counts the draws from the OS CSPRNG (``os.urandom``, and the name ``secrets``
    reaches it by, ``random._urandom``) made on threads other than the test's own (the
    server's; the test's WebSocket client masks its frames with some); the draws
    themselves still happen."""
    counted = itertools.count()
    real = os.urandom
    test_thread = threading.get_ident()

    def urandom(n: int) -> bytes:
        if threading.get_ident() != test_thread:
            next(counted)
        return real(n)

    monkeypatch.setattr(os, "urandom", urandom)
    monkeypatch.setattr(random, "_urandom", urandom)
    return counted


def test_ids_are_random_url_safe_tokens_never_repeated() -> None:
    ids = [tokens.random_id() for _ in range(3 * tokens.BATCH + 7)]
    assert all(RANDOM_TOKEN.fullmatch(i) for i in ids), ids[:3]
    assert len(set(ids)) == len(ids)


def test_ids_draw_the_os_once_a_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    sizes: list[int] = []
    real = os.urandom
    monkeypatch.setattr(os, "urandom", lambda n: sizes.append(n) or real(n))
    for _ in range(2 * tokens.BATCH):
        tokens.random_id()
    # At most the rest of a batch under way, then whole batches.
    assert len(sizes) <= 2 and set(sizes) == {tokens.ID_BYTES * tokens.BATCH}, sizes


def test_a_forked_child_does_not_repeat_its_parents_ids() -> None:
    tokens.random_id()  # a batch under way in the parent
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next id, then gone
        try:
            os.write(writer, tokens.random_id().encode())
        finally:
            os._exit(0)
    os.close(writer)
    try:
        child = os.read(reader, 64).decode()
    finally:
        os.close(reader)
        os.waitpid(pid, 0)
    assert RANDOM_TOKEN.fullmatch(child), child
    assert child != tokens.random_id()


def test_websocket_tool_calls_do_not_draw_the_os_each(draws: itertools.count[int]) -> None:
    """The finding: 300 tool calls of a remote agent made 300 ``urandom`` calls."""
    calls = 300
    with served() as server:
        async def scenario() -> None:
            peer, _ = await joined(server, "Bob")
            before = next(draws)
            for _ in range(calls):
                answer: dict[str, Any] = await peer.ask(
                    "region_query", {"region": {"x": 0, "y": 0, "width": 4, "height": 4}})
                assert answer["result"]["success"], answer
            made = next(draws) - before - 1
            assert made <= calls // tokens.BATCH + 2, made
            await peer.ws.close()

        run(scenario())


def test_ids_drawn_on_many_threads_at_once_are_never_repeated() -> None:
    """No lock: an id is one ``list.pop``, and threads that find the list empty at once
    each draw a batch of their own (switching threads as often as the interpreter can)."""
    threads, each = 8, 3 * tokens.BATCH + 5
    got: list[list[str]] = [[] for _ in range(threads)]
    start = threading.Barrier(threads, timeout=10)

    def draw(mine: list[str]) -> None:
        start.wait()
        for _ in range(each):
            mine.append(tokens.random_id())

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        workers = [threading.Thread(target=draw, args=(mine,)) for mine in got]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(30)
    finally:
        sys.setswitchinterval(interval)
    assert not any(worker.is_alive() for worker in workers)
    ids = [i for mine in got for i in mine]
    assert len(ids) == threads * each and len(set(ids)) == len(ids)
    assert all(RANDOM_TOKEN.fullmatch(i) for i in ids), ids[:3]
