"""Runtime benchmarks: barnraise's dispatchers against bare pykka, in one run.

Every figure is the median of ``repeats`` runs; each baseline is written here,
with pykka used as directly as its documentation shows, and measured in the
same process as the barnraise figure it is compared with (except the scale
benchmark, whose two sides run in fresh child processes so that each peak RSS
is its own).
"""

from __future__ import annotations

import gc
import itertools
import json
import random
import resource
import statistics
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable, Coroutine, Generator
from queue import SimpleQueue
from typing import Any

import msgspec
import pykka

from barnraise.actors.base import A2AActor, Agent
from barnraise.actors.registry import Registry
from barnraise.sim.dispatch import Dispatcher, make_dispatcher
from barnraise.sim.messages import Message, Metadata


def interleaved(repeats: int, **sides: Callable[[], float]) -> dict[str, list[float]]:
    """Run each side once per round, rounds repeated: drift on a shared machine
    then lands on every side alike. Garbage is collected before each run."""
    runs: dict[str, list[float]] = {name: [] for name in sides}
    for _ in range(repeats):
        for name, fn in sides.items():
            gc.collect()
            runs[name].append(fn())
    return runs


def _summary(runs: dict[str, list[float]]) -> dict[str, float]:
    return {name: statistics.median(values) for name, values in runs.items()}


# -- throughput ------------------------------------------------------------------------


class _PykkaCounter(pykka.ThreadingActor):
    use_daemon_thread = True

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def on_receive(self, message: Any) -> None:
        self.count += 1

    def total(self) -> int:
        return self.count


class _Counter(A2AActor):
    agent_type = "bench"

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def handle_task_update(self, message: Message) -> None:
        self.count += 1


def _pairs(agents: int, messages: int, seed: int = 1) -> list[tuple[int, int]]:
    rng = random.Random(seed)
    return [(rng.randrange(agents), rng.randrange(agents)) for _ in range(messages)]


def pykka_tell_throughput(agents: int, messages: int) -> float:
    pairs = _pairs(agents, messages)
    refs = [_PykkaCounter.start() for _ in range(agents)]
    try:
        start = time.perf_counter()
        for sender, recipient in pairs:
            refs[recipient].tell({"from": sender, "n": 1})
        # An ask queues behind every tell already in that actor's inbox.
        total = sum(ref.proxy().total().get(timeout=120) for ref in refs)
        elapsed = time.perf_counter() - start
    finally:
        for ref in refs:
            ref.stop()
    assert total == messages, total
    return messages / elapsed


def barnraise_throughput(mode: str, agents: int, messages: int) -> float:
    pairs = _pairs(agents, messages)
    # Unbounded mailboxes, as pykka's are: this measures speed, not overflow.
    dispatcher = make_dispatcher(mode, seed=1, mailbox_capacity=messages + 1)
    names = [f"agent-{i}" for i in range(agents)]
    for name in names:
        dispatcher.spawn(_Counter, name)
    try:
        start = time.perf_counter()
        for sender, recipient in pairs:
            dispatcher.send(dispatcher.message(names[sender], names[recipient], "task_update",
                                               {"n": 1}))
        if mode == "deterministic":
            dispatcher.run()
        else:
            assert dispatcher.wait_idle(timeout=120, settle=0.0)  # type: ignore[attr-defined]
        elapsed = time.perf_counter() - start
        total = sum(dispatcher.actor(n).count for n in names)  # type: ignore[attr-defined]
    finally:
        dispatcher.shutdown()
    assert total == messages, total
    return messages / elapsed


def bench_throughput(agents: int, messages: int, repeats: int) -> dict[str, Any]:
    runs = interleaved(
        repeats,
        pykka_tell=lambda: pykka_tell_throughput(agents, messages),
        realtime=lambda: barnraise_throughput("realtime", agents, messages),
        deterministic=lambda: barnraise_throughput("deterministic", agents, messages),
    )
    med = _summary(runs)
    return {
        "agents": agents, "messages": messages, "unit": "messages/s (median)",
        "pykka_tell": round(med["pykka_tell"]), "realtime": round(med["realtime"]),
        "deterministic": round(med["deterministic"]),
        "ratio_realtime": round(med["realtime"] / med["pykka_tell"], 3),
        "ratio_deterministic": round(med["deterministic"] / med["pykka_tell"], 3),
        "target_realtime": 1.0, "target_deterministic": 1.0,
        "runs": {k: [round(r) for r in v] for k, v in runs.items()},
    }


def _tell_all(refs: list[pykka.ActorRef[Any]], pairs: list[tuple[int, int]]) -> float:
    """pykka's sending loop; returns the sending thread's CPU seconds."""
    start = time.thread_time()
    for sender, recipient in pairs:
        refs[recipient].tell({"from": sender, "n": 1})
    return time.thread_time() - start


def _send_all(dispatcher: Dispatcher, names: list[str], pairs: list[tuple[int, int]]) -> float:
    """barnraise's sending loop (as barnraise_throughput's); the sending thread's CPU s."""
    start = time.thread_time()
    for sender, recipient in pairs:
        dispatcher.send(dispatcher.message(names[sender], names[recipient], "task_update",
                                           {"n": 1}))
    return time.thread_time() - start


def realtime_cpu(side: str, agents: int, messages: int) -> tuple[float, float, float]:
    """One throughput run of ``side`` (``pykka_tell`` or ``realtime``), as
    :func:`bench_throughput` runs it: µs per message of wall time, of the process's CPU
    (every thread) and of the sending thread's CPU."""
    pairs = _pairs(agents, messages)
    if side == "pykka_tell":
        refs = [_PykkaCounter.start() for _ in range(agents)]
        try:
            wall, cpu = time.perf_counter(), time.process_time()
            sending = _tell_all(refs, pairs)
            total = sum(ref.proxy().total().get(timeout=120) for ref in refs)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        finally:
            for ref in refs:
                ref.stop()
    else:
        dispatcher = make_dispatcher("realtime", seed=1, mailbox_capacity=messages + 1)
        names = [f"agent-{i}" for i in range(agents)]
        for name in names:
            dispatcher.spawn(_Counter, name)
        try:
            wall, cpu = time.perf_counter(), time.process_time()
            sending = _send_all(dispatcher, names, pairs)
            assert dispatcher.wait_idle(timeout=120, settle=0.0)  # type: ignore[attr-defined]
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            total = sum(dispatcher.actor(n).count for n in names)  # type: ignore[attr-defined]
        finally:
            dispatcher.shutdown()
    assert total == messages, total
    return wall / messages * 1e6, cpu / messages * 1e6, sending / messages * 1e6


def send_side_cpu(side: str, agents: int, messages: int) -> float:
    """The sending thread's CPU µs per message with nobody taking the letters out:
    pykka's ``tell`` into actors never started, barnraise's send into realtime actors
    held by ``start_together``, and ``floor``: a checked Message with a fresh id and
    its content encoded, into a deque with a token in a SimpleQueue for the reader
    (what a priority mailbox level does) and a count of letters offered."""
    pairs = _pairs(agents, messages)
    if side == "pykka_tell":
        refs: list[pykka.ActorRef[Any]] = [_PykkaCounter().actor_ref for _ in range(agents)]
        return _tell_all(refs, pairs) / messages * 1e6
    if side == "realtime":
        dispatcher = make_dispatcher("realtime", seed=1, mailbox_capacity=messages + 1)
        names = [f"agent-{i}" for i in range(agents)]
        try:
            with dispatcher.start_together():  # type: ignore[attr-defined]
                for name in names:
                    dispatcher.spawn(_Counter, name)
                sending = _send_all(dispatcher, names, pairs)
                for name in names:
                    dispatcher.stop_actor(name)
        finally:
            dispatcher.shutdown()
        return sending / messages * 1e6
    encode = msgspec.json.Encoder(order="sorted").encode
    names = [f"agent-{i}" for i in range(agents)]
    boxes = [(deque[tuple[Message, bytes]](), SimpleQueue[None]()) for _ in range(agents)]
    ids, offered = itertools.count(), itertools.count()
    no_metadata = Metadata()
    start = time.thread_time()
    for sender, recipient in pairs:
        content = {"n": 1}
        level, tokens = boxes[recipient]
        level.append((Message(f"m{next(ids)}", 0.0, names[sender], names[recipient],
                              "task_update", 5, content, no_metadata, None, None),
                      encode(content)))
        tokens.put(None)
        next(offered)
    elapsed = time.thread_time() - start
    assert sum(len(level) for level, _ in boxes) == messages
    return elapsed / messages * 1e6


def agent_send_cpu(message_type: str, messages: int, agents: int = 100) -> float:
    """An agent's own ``send`` (``Sending.send``: the checked Message, the type's check,
    the route into the deterministic heap), CPU µs per message, nobody taking the letters
    out: the send path a type of one's own takes. ``message_type`` a built-in type
    (``task_update``), one of one's own, or one declared with a schema beforehand
    (:func:`barnraise.sim.messages.message_type`); the content is ``{"n": 1}``."""
    dispatcher = make_dispatcher("deterministic", seed=1, mailbox_capacity=messages + 1)
    names = [f"agent-{i}" for i in range(agents)]
    for name in names:
        dispatcher.spawn(Agent, name)
    sender = dispatcher.spawn(Agent, "sender")
    targets = [names[i % agents] for i in range(messages)]
    send = sender.send
    try:
        start = time.process_time()
        for to in targets:
            send(to, message_type, {"n": 1})
        return (time.process_time() - start) / messages * 1e6
    finally:
        dispatcher.shutdown()


def bench_realtime_cpu(agents: int, messages: int, repeats: int) -> dict[str, Any]:
    """Where realtime throughput's time goes, in CPU (steadier than wall time on a
    shared machine): per message, the whole process and the sending thread, pykka
    against barnraise, interleaved; then the sending side alone against its floor."""
    whole = interleaved_tuples(repeats, {s: (lambda s=s: realtime_cpu(s, agents, messages))
                                         for s in ("pykka_tell", "realtime")})
    sending = interleaved(repeats, **{s: (lambda s=s: send_side_cpu(s, agents, messages))
                                      for s in ("pykka_tell", "realtime", "floor")})
    out: dict[str, Any] = {"agents": agents, "messages": messages,
                           "unit": "µs per message (median)"}
    for side, runs in whole.items():
        out[side] = {
            "wall": round(statistics.median(r[0] for r in runs), 2),
            "cpu": round(statistics.median(r[1] for r in runs), 2),
            "cpu_sending_thread": round(statistics.median(r[2] for r in runs), 2),
            "cpu_actor_threads": round(statistics.median(r[1] - r[2] for r in runs), 2),
        }
    out["ratio_cpu"] = round(out["pykka_tell"]["cpu"] / out["realtime"]["cpu"], 3)
    out["send_side_alone_cpu"] = {k: round(statistics.median(v), 2) for k, v in sending.items()}
    out["runs"] = {k: [[round(x, 2) for x in r] for r in v] for k, v in whole.items()}
    return out


def interleaved_tuples(
    repeats: int, sides: dict[str, Callable[[], tuple[float, ...]]],
) -> dict[str, list[tuple[float, ...]]]:
    """:func:`interleaved` for sides that return several figures a run."""
    runs: dict[str, list[tuple[float, ...]]] = {name: [] for name in sides}
    for _ in range(repeats):
        for name, fn in sides.items():
            gc.collect()
            runs[name].append(fn())
    return runs


# -- request / reply ---------------------------------------------------------------------


class _PykkaEcho(pykka.ThreadingActor):
    use_daemon_thread = True

    def on_receive(self, message: Any) -> Any:
        return message


class _PykkaAsker(pykka.ThreadingActor):
    use_daemon_thread = True

    def __init__(self, peer: pykka.ActorRef[Any]) -> None:
        super().__init__()
        self.peer = peer

    def round_trips(self, n: int) -> int:
        for i in range(n):
            self.peer.ask({"i": i}, timeout=30)
        return n


def pykka_ask_rate(round_trips: int) -> float:
    echo = _PykkaEcho.start()
    asker = _PykkaAsker.start(echo)
    try:
        start = time.perf_counter()
        asker.proxy().round_trips(round_trips).get(timeout=300)
        return round_trips / (time.perf_counter() - start)
    finally:
        asker.stop()
        echo.stop()


class _Echo(Agent):
    def handle_task_assignment(self, message: Message) -> None:
        self.reply(message, "task_result", message.content)


def barnraise_request_rate(round_trips: int) -> float:
    async def asker(agent: Agent) -> None:
        for i in range(round_trips):
            await agent.request("echo", "task_assignment", {"i": i})

    dispatcher = make_dispatcher("deterministic", seed=1)
    dispatcher.spawn(_Echo, "echo")
    start = time.perf_counter()
    dispatcher.spawn(Agent, "asker", behaviours=(asker,))
    report = dispatcher.run()
    elapsed = time.perf_counter() - start
    assert report.reason == "quiescent", report
    dispatcher.shutdown()
    return round_trips / elapsed


class _Await:
    """An awaitable made as barnraise's effects are: a generator that yields itself."""

    __slots__ = ("content", "to")

    def __init__(self, to: str, content: dict[str, Any]) -> None:
        self.to = to
        self.content = content

    def __await__(self) -> Generator[_Await, Any, Any]:
        return (yield self)


def request_floor_rate(round_trips: int) -> float:
    """Round trips/s of the steps no deterministic request/reply can leave out, in one
    flat loop: the asker's coroutine awaiting an effect that ``request`` makes and
    resumed with the reply; per message a fresh id, a checked :class:`Message` (the
    request's with its correlation id in a :class:`Metadata`), its content encoded
    once, a pass through a FIFO queue and a trace record; the handler found by the
    message's type and called, answering through a ``reply`` call; the reply matched
    to its waiter by correlation id. No dispatcher, actor, mailbox bound, timeout or
    live-work count: the most any runtime that keeps these steps could reach."""
    encode = msgspec.json.Encoder(order="sorted").encode
    queue: deque[tuple[str, Message, bytes]] = deque()
    records: list[tuple[float, str, str, str, str, bytes]] = []
    waiting: dict[str | None, Coroutine[Any, Any, None]] = {}
    ids = itertools.count()
    now = 0.0

    def request(to: str, content: dict[str, Any]) -> _Await:
        return _Await(to, content)

    def reply(asked: Message, content: dict[str, Any]) -> None:
        queue.append((asked.from_agent,
                      Message(f"m{next(ids)}", now, "echo", asked.from_agent, "task_result",
                              asked.priority, content, asked.metadata, None, None),
                      encode(content)))

    def echo(message: Message) -> None:
        reply(message, message.content)

    handlers = {"task_assignment": echo}

    async def asker() -> None:
        for i in range(round_trips):
            await request("echo", {"i": i})

    coro = asker()
    start = time.perf_counter()
    effect = coro.send(None)
    while True:
        message_id = f"m{next(ids)}"
        queue.append((effect.to, Message(message_id, now, "asker", effect.to, "task_assignment",
                                         5, effect.content, Metadata(None, (), message_id),
                                         None, None), encode(effect.content)))
        waiting[message_id] = coro
        while queue:
            name, message, encoded = queue.popleft()
            records.append((now, "deliver", message.from_agent, name, message.message_type,
                            encoded))
            if name != "asker":
                handlers[message.message_type](message)
                continue
            try:
                effect = waiting.pop(message.metadata.correlation_id).send(message)
            except StopIteration:
                assert len(records) == 2 * round_trips
                return round_trips / (time.perf_counter() - start)


def bench_request_reply(round_trips: int, repeats: int) -> dict[str, Any]:
    runs = interleaved(repeats, pykka_ask=lambda: pykka_ask_rate(round_trips),
                       deterministic=lambda: barnraise_request_rate(round_trips),
                       floor=lambda: request_floor_rate(round_trips))
    med = _summary(runs)
    # pykka's ask has a slow and a fast regime on this machine (docs/benchmarks.md),
    # and the target holds in every round: each round's ratio, and the least.
    ratios = [b / p for p, b in zip(runs["pykka_ask"], runs["deterministic"], strict=True)]
    return {
        "round_trips": round_trips, "unit": "round trips/s (median)",
        "pykka_ask": round(med["pykka_ask"]), "deterministic": round(med["deterministic"]),
        "ratio": round(med["deterministic"] / med["pykka_ask"], 2), "target": 5.0,
        "ratio_per_round": [round(r, 2) for r in ratios],
        "ratio_min": round(min(ratios), 2),
        "us_per_round_trip": round(1e6 / med["deterministic"], 2),
        # the unavoidable steps alone (request_floor_rate): what the path could reach
        "floor": round(med["floor"]), "floor_us_per_round_trip": round(1e6 / med["floor"], 2),
        "ratio_floor": round(med["floor"] / med["pykka_ask"], 2),
        "runs": {k: [round(r) for r in v] for k, v in runs.items()},
    }


# -- fan-out ---------------------------------------------------------------------------------


def pykka_fanout_rate(subscribers: int, events: int) -> float:
    refs = [_PykkaCounter.start() for _ in range(subscribers)]
    try:
        start = time.perf_counter()
        for i in range(events):
            event = {"event": "tick", "i": i}
            for ref in refs:
                ref.tell(event)
        total = sum(ref.proxy().total().get(timeout=120) for ref in refs)
        elapsed = time.perf_counter() - start
    finally:
        for ref in refs:
            ref.stop()
    assert total == subscribers * events
    return float(total) / elapsed


class _Subscriber(A2AActor):
    agent_type = "bench"

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def on_start(self) -> None:
        self.subscribe("ticks")

    def handle_status_update(self, message: Message) -> None:
        self.count += 1


def barnraise_fanout_rate(subscribers: int, events: int) -> float:
    dispatcher = make_dispatcher("deterministic", seed=1)
    for i in range(subscribers):
        dispatcher.spawn(_Subscriber, f"sub-{i}")
    start = time.perf_counter()
    for i in range(events):
        dispatcher.send(dispatcher.message("publisher", "topic:ticks", "status_update",
                                           {"event": "tick", "i": i}))
        dispatcher.run()
    elapsed = time.perf_counter() - start
    total = sum(a.count for a in dispatcher.actors.values())  # type: ignore[attr-defined]
    dispatcher.shutdown()
    assert total == subscribers * events, total
    return total / elapsed


def bench_fanout(subscribers: int, events: int, repeats: int) -> dict[str, Any]:
    runs = interleaved(repeats,
                       pykka_tell_each=lambda: pykka_fanout_rate(subscribers, events),
                       deterministic=lambda: barnraise_fanout_rate(subscribers, events))
    med = _summary(runs)
    return {
        "subscribers": subscribers, "events": events, "unit": "deliveries/s (median)",
        "pykka_tell_each": round(med["pykka_tell_each"]),
        "deterministic": round(med["deterministic"]),
        "ratio": round(med["deterministic"] / med["pykka_tell_each"], 2), "target": 10.0,
        "runs": {k: [round(r) for r in v] for k, v in runs.items()},
    }


# -- scale -------------------------------------------------------------------------------------


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def scale_pykka(actors: int) -> dict[str, float]:
    """Child-process side: start and stop ``actors`` bare ThreadingActors."""
    start = time.perf_counter()
    refs = [_PykkaCounter.start() for _ in range(actors)]
    for ref in refs:
        ref.stop(block=False)
    for ref in refs:
        ref.actor_stopped.wait(60)
    return {"seconds": time.perf_counter() - start, "peak_rss_mib": _peak_rss_mib()}


def scale_barnraise(agents: int) -> dict[str, float]:
    """Child-process side: spawn, register and stop ``agents`` idle agents."""
    start = time.perf_counter()
    dispatcher: Dispatcher = make_dispatcher("deterministic", seed=1)
    registry = dispatcher.spawn(Registry, "registry")
    for i in range(agents):
        dispatcher.spawn(Agent, f"agent-{i}")
    dispatcher.run()
    registered = len(registry.records)
    for i in range(agents):
        dispatcher.stop_actor(f"agent-{i}")
    dispatcher.run()
    elapsed = time.perf_counter() - start
    assert registered == agents, registered
    assert not registry.records, len(registry.records)
    return {"seconds": elapsed, "peak_rss_mib": _peak_rss_mib()}


def _child(kind: str, count: int) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.runtime", kind, str(count)],
        check=True, capture_output=True, text=True, timeout=900,
    )
    result: dict[str, float] = json.loads(out.stdout)
    return result


def bench_scale(agents: int, pykka_actors: int, repeats: int) -> dict[str, Any]:
    pk_runs = [_child("scale-pykka", pykka_actors) for _ in range(repeats)]
    br_runs = [_child("scale-barnraise", agents) for _ in range(repeats)]
    pk = statistics.median(r["seconds"] for r in pk_runs)
    br = statistics.median(r["seconds"] for r in br_runs)
    rss = max(r["peak_rss_mib"] for r in br_runs)
    return {
        "agents": agents, "pykka_actors": pykka_actors, "unit": "seconds (median)",
        "pykka_start_stop": round(pk, 3), "deterministic_spawn_register_stop": round(br, 3),
        "time_ratio": round(br / pk, 3), "target_time_ratio_max": 2.0,
        "peak_rss_mib": round(rss, 1), "target_peak_rss_mib_max": 1024,
        "runs": {"pykka": [round(r["seconds"], 3) for r in pk_runs],
                 "barnraise": [round(r["seconds"], 3) for r in br_runs]},
    }


# -- the loop and the collector ------------------------------------------------------------


def bench_loop_collector(grid_size: int = 840, repeats: int = 5) -> dict[str, Any]:
    """A full kernel_build (about 100,000 records at grid 840) with the deterministic
    loop's collector threshold as shipped (``LOOP_GC_THRESHOLD``) against Python's
    default of 700 (what the loop ran with before), interleaved, medians; the two runs'
    trace digests must be equal (the collector changes when memory is freed, not what
    a run does)."""
    from barnraise.runner import run as run_scenario
    from barnraise.sim.dispatch import deterministic

    shipped = deterministic.LOOP_GC_THRESHOLD
    params = {"grid_size": grid_size, "block": 30}
    digests: set[str] = set()

    def with_threshold(threshold: int) -> Callable[[], float]:
        def one() -> float:
            deterministic.LOOP_GC_THRESHOLD = threshold
            try:
                start = time.perf_counter()
                result = run_scenario("kernel_build", record=False, **params)
                elapsed = time.perf_counter() - start
            finally:
                deterministic.LOOP_GC_THRESHOLD = shipped
            digests.add(result.trace_digest)
            return elapsed
        return one

    runs = interleaved(repeats, default_700=with_threshold(700), shipped=with_threshold(shipped))
    assert len(digests) == 1, "the collector's threshold changed what the run did"
    medians = _summary(runs)
    return {"scenario": "kernel_build", "params": params, "threshold": shipped,
            "default_700_s": round(medians["default_700"], 3),
            "shipped_s": round(medians["shipped"], 3),
            "ratio": round(medians["shipped"] / medians["default_700"], 3),
            "runs": {k: [round(v, 3) for v in vs] for k, vs in runs.items()}}


def run(quick: bool = False) -> dict[str, Any]:
    if quick:  # a smoke run: the code paths, at sizes that take seconds
        return {
            "throughput": bench_throughput(10, 5_000, 1),
            "realtime_cpu": bench_realtime_cpu(10, 5_000, 1),
            "request_reply": bench_request_reply(500, 1),
            "fanout": bench_fanout(50, 20, 1),
            "scale": bench_scale(2_000, 200, 1),
            "loop_collector": bench_loop_collector(120, 1),
        }
    return {
        "throughput": bench_throughput(100, 200_000, 5),
        "realtime_cpu": bench_realtime_cpu(100, 200_000, 5),
        "request_reply": bench_request_reply(20_000, 5),
        "fanout": bench_fanout(1_000, 200, 3),
        "scale": bench_scale(100_000, 10_000, 3),
        "loop_collector": bench_loop_collector(),
    }


if __name__ == "__main__":
    kind, count = sys.argv[1], int(sys.argv[2])
    if kind == "scale-pykka":
        print(json.dumps(scale_pykka(count)))
    elif kind == "scale-barnraise":
        print(json.dumps(scale_barnraise(count)))
    else:
        raise SystemExit(f"unknown child benchmark {kind!r}")
