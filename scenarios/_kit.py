"""The helpers the shipped scenarios share, one function per job: the authoring kit.

Public as :mod:`barnraise.kit` (the same objects; docs/writing.md shows them in use). A
scenario of one's own hosts a session (:func:`host_session`) and puts agents in it
(:func:`spawn`), each a :class:`Participant` that joins and then runs a behaviour: an
``async def`` taking the agent, a shipped one (:data:`ROLE_BEHAVIOURS`) or one's own.

Sessions and crews
    :func:`host_session` (create a session from a client that does not join it),
    :func:`spawn` (start a participant), :class:`Participant` (what a behaviour is
    given), :data:`Behaviour` (its type), :data:`ROLE_BEHAVIOURS`, :func:`total`,
    :func:`restored_canvas` and :func:`rows_built` (where a row-by-row builder had got
    to, for one that resumes), :func:`placed_before` and :func:`placed_at` (what it had
    been told, and when).
Seeded data
    :func:`rng_for` (the script's own random stream), :func:`kernel_blueprint`,
    :func:`seeded_tiles`.
Rectangles
    :func:`box` (a region dict), :func:`overlapping_pairs`.
Reading what a run recorded
    :func:`session_events` and :func:`deliveries` (from the trace; in a resumed run
    the stopped run's stored log first, as :func:`run_records` reads the whole log;
    :func:`resumed_at` is where the resumed run began), :func:`calls_before` and
    :func:`answered_before` (what an agent of a resumed run asked and was told
    before the kill), :func:`delivered_before` (what reached it), :class:`Replay`
    (going through it again), :func:`count`,
    :func:`mark` (an agent's timeline), :func:`max_concurrent`, :func:`min_gap`,
    :func:`mean`, :func:`percentile`.

The world itself (claims, canvas, tasks, progress) is read with
``simu.view(session_id)``, the frozen read API of ``barnraise.actors.world.Simulation``;
nothing here reads a service's private state. The leading underscore keeps this
module out of the scenario list.
"""

from __future__ import annotations

import inspect
import itertools
import math
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Final, TypeVar

import numpy as np

from barnraise.actors.agents import Participant, architect, builder, observer, tester
from barnraise.actors.agents.builder import rows_built
from barnraise.actors.agents.participant import Behaviour
from barnraise.actors.stored.run import StoredRun
from barnraise.actors.world import Client, Simulation
from barnraise.sim.canvas import Tile
from barnraise.sim.dispatch import seed_for
from barnraise.sim.geometry import Rect
from barnraise.sim.log import RESUMED, decode, is_call, paired
from barnraise.sim.messages import Message, message_type
from barnraise.sim.policy import DEFAULT_MATRIX
from barnraise.sim.trace import TraceRecord

__all__ = [
    "PATIENCE",
    "ROLE_BEHAVIOURS",
    "Behaviour",
    "Participant",
    "Replay",
    "answered_before",
    "box",
    "calls_before",
    "count",
    "delivered_before",
    "deliveries",
    "host_session",
    "kernel_blueprint",
    "mark",
    "max_concurrent",
    "mean",
    "message_type",
    "min_gap",
    "overlapping_pairs",
    "percentile",
    "placed_at",
    "placed_before",
    "restored_canvas",
    "resumed_at",
    "rng_for",
    "rows_built",
    "run_records",
    "seeded_tiles",
    "session_events",
    "spawn",
    "total",
]

#: Seconds a barrier or a lock wait is allowed in the flow scenarios: far longer
#: than any of them needs, so a timeout means something is wrong.
PATIENCE: Final = 600.0

ROLE_BEHAVIOURS: Final[dict[str, Behaviour]] = {
    "architect": architect, "builder": builder, "tester": tester, "observer": observer,
}


# -- sessions and crews ----------------------------------------------------------------------


def host_session(simu: Simulation, *, host: Client | None = None,
                 **session: Any) -> tuple[Client, str]:
    """Create a session; the host and the session's id.

    ``session``: ``session_create``'s arguments (``session_name``, ``grid_size``,
    ``max_agents`` (default 10), ``blueprint``, ``config``, ...; ``simu.tools`` has the
    schema). The host is a client that does not join: ``host`` if given (one host can
    create several sessions), else a new client called ``host-N``. RuntimeError, with
    session_create's answer (its ``error`` and ``message``), when it refuses.

    ``simu.guest_seats`` more agents than ``max_agents`` may join (none by default).
    """
    if host is None:
        host = simu.client(f"host-{len(simu.clients) + 1}")
    if simu.restored is not None:
        found = _resumed_session(simu, host, session)
        if found is not None:
            return host, found
    if simu.guest_seats:  # room for outsiders beside the crew (a served scenario)
        session["max_agents"] = session.get("max_agents", 10) + simu.guest_seats
    created = host.call("session_create", **session)
    if not created.get("success"):
        raise RuntimeError(f"session_create failed: {created}")
    return host, str(created["session_id"])


def _resumed_session(simu: Simulation, host: Client, create: Mapping[str, Any]) -> str | None:
    """In a resumed run: the stored session this ``session_create`` made the first time
    (the next one the same host made with that name, in the order they were made), or
    None when the stopped run had not made it yet (it is made now)."""
    assert simu.restored is not None
    taken = simu.restored.taken
    for session in simu.restored.sessions.values():
        if (session.owner == host.agent_id and session.session_id not in taken
                and session.info.get("session_name") == create.get("session_name")):
            taken.add(session.session_id)
            return session.session_id
    return None


def spawn(simu: Simulation, session_id: str, agent_id: str, role: str, *, crew: int,
          behaviour: Behaviour | None = None, mailbox: int | None = None,
          **params: Any) -> Participant:
    """Start one agent in session ``session_id``: it joins as ``agent_id`` (also its
    display name) in ``role``, then runs ``behaviour``; returns the agent.

    ``role``: one of the session's roles (``architect``, ``builder``, ``tester``,
    ``observer``; it decides which tools the agent may call). ``behaviour``: an ``async
    def`` taking the agent (a :class:`Participant`); by default the role's shipped one
    (:data:`ROLE_BEHAVIOURS`). ``crew``: how many agents the scenario starts in this
    session, observers aside: each waits at the session barrier ``ready`` until that
    many have joined, so none asks a member that has not joined yet (1: start at once).
    ``params``: the behaviour's inputs, as ``agent.params``; it reports in
    ``agent.outcome``, which the scenario reads after ``simu.run()``.

    ValueError or TypeError, naming what is wrong, before anything is started or
    granted: an unknown role, no behaviour for a role without a shipped one, a behaviour
    that is not an ``async def``, a crew below 1. LookupError for an unknown session.

    The scenario is the session's host: it grants the role first, for a role
    the session grants rather than opens (the architect's, by default).
    ``mailbox``: the letters it may hold waiting, in its mailbox and in the stash of
    those its behaviour is not awaiting yet (each 1000 when None, the runtime's default).

    In a resumed run (``simu.restored``) an agent of a session the stopped run had
    made is its name's next incarnation and regroups with its crew (``Participant``),
    and ``params["published_before"]`` names the delegations whose events it had
    published (see ``DelegationLedger.recover``); one of a session made only now
    starts afresh, as in a new run.
    """
    if not isinstance(agent_id, str) or not agent_id:
        raise ValueError(f"spawn: agent_id must be a non-empty string, got {agent_id!r}")
    if isinstance(crew, bool) or not isinstance(crew, int) or crew < 1:
        raise ValueError(f"spawn {agent_id}: crew must be an int of at least 1 (the agents "
                         f"the scenario starts in the session), got {crew!r}")
    if mailbox is not None and (isinstance(mailbox, bool) or not isinstance(mailbox, int)
                                or mailbox < 1):
        raise ValueError(f"spawn {agent_id}: mailbox must be an int of at least 1 (letters "
                         f"it may hold waiting) or None, got {mailbox!r}")
    if role not in DEFAULT_MATRIX:
        raise ValueError(f"spawn {agent_id}: role must be one of "
                         f"{', '.join(sorted(DEFAULT_MATRIX))}, got {role!r}")
    if behaviour is None:
        if role not in ROLE_BEHAVIOURS:
            raise ValueError(f"spawn {agent_id}: role {role!r} has no shipped behaviour "
                             f"(those of {', '.join(sorted(ROLE_BEHAVIOURS))} do): give "
                             "behaviour=")
        behaviour = ROLE_BEHAVIOURS[role]
    elif not inspect.iscoroutinefunction(behaviour):
        raise TypeError(f"spawn {agent_id}: behaviour must be an async def function taking "
                        f"the agent, got {behaviour!r}")
    simu.grant(session_id, agent_id, role)
    restored = simu.restored
    resumed = restored is not None and session_id in restored.sessions
    options: dict[str, Any] = {"regroup": True} if resumed else {}
    if mailbox is not None:
        options.update(mailbox_capacity=mailbox, stash_limit=mailbox)
    if resumed:
        params.setdefault("published_before", _published_before(simu, agent_id))
    agent: Participant = simu.supervisor.start_child(
        Participant, agent_id, session_id=session_id, agent_name=agent_id, role=role,
        behaviour=behaviour, crew=crew, params=params,
        resumed=None if restored is None else resumed, **options)
    return agent


def _published_before(simu: Simulation, agent_id: str) -> list[str]:
    """The delegations whose ``delegation.*`` event ``agent_id`` published before the kill
    (from the stored log): a resumed delegator does not publish them again
    (``DelegationLedger.recover``)."""
    image = simu.restored
    assert image is not None
    return [str(r.content_obj().get("delegation_id")) for r in run_records(simu, "event")
            if r.seq < image.seq and r.sender == agent_id
            and r.type in ("delegation.completed", "delegation.failed")]


P = TypeVar("P", bound=Participant)


def current(agent: P) -> P:
    """``agent``'s current incarnation: after a crash, its supervisor puts a fresh actor
    under the same name (actors/supervisor.py), and the old object is left behind."""
    now = agent.dispatcher.actors.get(agent.name, agent)
    return now if isinstance(now, type(agent)) else agent


def total(agents: Iterable[Participant], key: str) -> Any:
    """The sum of ``outcome[key]`` over ``agents`` (0 where it is missing)."""
    return sum(a.outcome.get(key, 0) for a in agents)


# -- seeded data ------------------------------------------------------------------------------


def rng_for(simu: Simulation, purpose: str) -> np.random.Generator:
    """A random stream for the scenario script itself, from the run's seed."""
    return np.random.default_rng(seed_for(simu.seed, f"scenario:{purpose}"))


def kernel_blueprint(size: int, rng: np.random.Generator,
                     fill: float = 0.8) -> np.ndarray[Any, Any]:
    """A seeded target: a system band on top, then code and data modules in rows."""
    plan = np.zeros((size, size), dtype=np.uint8)
    band = max(1, size // 10)
    plan[:band, :] = Tile.SYSTEM
    y = band
    while y < size:
        h = int(rng.integers(max(2, size // 12), max(3, size // 5)))
        x = 0
        while x < size:
            w = int(rng.integers(max(2, size // 12), max(3, size // 4)))
            if rng.random() < fill:
                plan[y:y + h, x:x + w] = rng.choice([Tile.CODE, Tile.DATA, Tile.NETWORK,
                                                     Tile.STORAGE])
            x += w
        y += h
    return plan


def seeded_tiles(rng: np.random.Generator, height: int, width: int, *, empty: float = 0.0,
                 draw_dtype: type[np.integer[Any]] = np.uint8) -> np.ndarray[Any, Any]:
    """A ``height`` x ``width`` uint8 block of tile codes 1..7, a share ``empty`` of them 0.

    With ``empty`` 0 no cell is empty, so a canvas equal to it is 100% complete.
    ``draw_dtype`` is the integer type numpy draws the codes in: ``np.uint8``
    (the default; the cheapest) and ``np.int64`` give different codes from the
    same seed. Scenarios seeded with the int64 stream keep it, so their traces
    repeat.
    """
    tiles = rng.integers(1, 8, size=(height, width), dtype=draw_dtype).astype(np.uint8,
                                                                              copy=False)
    if empty > 0:
        tiles[rng.random((height, width)) < empty] = 0
    return tiles


# -- rectangles -------------------------------------------------------------------------------


def box(x: int, y: int, width: int, height: int) -> dict[str, int]:
    """A region dict as the tools take it."""
    return {"x": int(x), "y": int(y), "width": int(width), "height": int(height)}


def overlapping_pairs(regions: Sequence[Rect | Mapping[str, int]]) -> list[tuple[int, int]]:
    """Index pairs ``(i, j)``, ``i < j``, of the regions that share at least one cell."""
    rects = [Rect.parse(r, "region") for r in regions]
    return [(i, j) for i in range(len(rects)) for j in range(i + 1, len(rects))
            if rects[i].overlaps(rects[j])]


# -- reading what a run recorded ---------------------------------------------------------------


def resumed_at(simu: Simulation) -> int:
    """The seq (in the run's whole log) of a resumed run's first record: what
    :func:`session_events` and :func:`deliveries` give with a smaller ``seq`` the stopped
    run recorded, and what to add to a trace record's seq for its seq in the whole log.
    0 in a run that is not a resumed one."""
    return simu.store.offset if simu.restored is not None and simu.store is not None else 0


def _placed(simu: Simulation, agent_id: str) -> list[tuple[float, dict[str, Any]]]:
    """The stopped run's successful answers to ``agent_id``'s tile-placing calls: (time,
    answer), from the stored log; none in a run that is not a resumed one."""
    start = resumed_at(simu)
    if not start:
        return []
    return [(d["t"], d["content"])
            for d in deliveries(simu, agent_id, "coordination_response")
            if d["seq"] < start and d["from"] == "regions"
            and d["content"].get("success") and "tiles_placed" in d["content"]]


def placed_at(simu: Simulation, agent_id: str) -> float | None:
    """In a resumed run, when the stopped run answered ``agent_id``'s last successful
    tile-placing call (from the stored log); None when it had none, or in a run that is
    not a resumed one."""
    return max((t for t, _ in _placed(simu, agent_id)), default=None)


def placed_before(simu: Simulation, agent_id: str) -> tuple[int, int]:
    """In a resumed run, the tile-placing calls the stopped run answered ``agent_id`` with
    success and the tiles those answers said were placed, read from the stored log (what
    that agent's last incarnation was told); (0, 0) in a run that is not a resumed one."""
    placed = _placed(simu, agent_id)
    return len(placed), sum(int(a["tiles_placed"]) for _, a in placed)


def restored_canvas(simu: Simulation, session_id: str) -> np.ndarray[Any, Any] | None:
    """In a resumed run, the canvas of ``session_id`` as the stopped run left it (the
    restored world's, read before any agent starts); None for a session made only now, or
    in a run that is not a resumed one. A scenario hands it to builders that resume, which
    cannot read the canvas themselves (a builder may not call ``build_test``)."""
    if simu.restored is None or session_id not in simu.restored.sessions:
        return None
    return simu.view(session_id).canvas


def session_events(simu: Simulation, session_id: str, *types: str,
                   prefix: str = "") -> list[dict[str, Any]]:
    """The session's domain events from the trace, in order.

    Each is the event's payload plus ``seq`` and ``t`` (its trace record's).
    ``types`` keeps the events of those types; ``prefix`` those whose type
    starts with it (``"plan."``); with neither, every event. Read from the trace,
    so it sees everything, whoever subscribed. In a resumed run the stopped run's
    events come first, from its stored log, and ``seq`` is the store's numbering
    (:func:`run_records`).
    """
    topic = f"session:{session_id}:events"
    wanted = set(types)
    out = []
    for record in run_records(simu, "event"):
        if record.recipient != topic or not record.type.startswith(prefix):
            continue
        if wanted and record.type not in wanted:
            continue
        out.append({**record.content_obj(), "seq": record.seq, "t": record.t})
    return out


def deliveries(simu: Simulation, recipient: str, message_type: str) -> list[dict[str, Any]]:
    """Messages of ``message_type`` delivered to ``recipient``: seq, t, from and content
    (in a resumed run, the stopped run's first: :func:`run_records`)."""
    out = []
    for record in run_records(simu, "deliver"):
        if record.recipient == recipient and record.type == message_type:
            out.append({"seq": record.seq, "t": record.t, "from": record.sender,
                        "content": record.content_obj()})
    return out


_STOPPED: weakref.WeakKeyDictionary[Simulation, list[TraceRecord]] = \
    weakref.WeakKeyDictionary()


def run_records(simu: Simulation, kind: str | None = None) -> Iterator[TraceRecord]:
    """The whole run's trace records (of ``kind``), in order.

    In a resumed realtime run (``simu.restored``) that is the stopped run's records,
    read once from the store it left (up to the record the world was restored at),
    then this process's, numbered on from there as the store numbers them: a count
    or an order that spans the kill reads the log, not the crew's memory, which the
    kill took.
    """
    offset = 0
    image, store = simu.restored, simu.store
    if image is not None:
        stopped = _STOPPED.get(simu)
        if stopped is None:  # (no store: an image restored by hand, without its log)
            stopped = _STOPPED[simu] = [] if store is None else [
                r for r in StoredRun(store.path).records() if r.seq < image.seq]
        yield from (r for r in stopped if kind is None or r.kind == kind)
        offset = image.seq
    for record in simu.dispatcher.trace.records(kind):
        yield record._replace(seq=record.seq + offset) if offset else record


def calls_before(simu: Simulation, agent_id: str) -> list[dict[str, Any]]:
    """In a resumed run: the tool calls ``agent_id`` made before the kill, in the order it
    made them ([] in a run that was not resumed), each a dict: ``tool``, ``args`` (as
    sent, defaults filled in), ``asked`` (simulated time), ``seq`` (its record),
    ``answer`` and ``answered`` (None for a call whose answer the log does not hold:
    it never reached the agent, whatever the service did with it), ``until`` (for
    such a call of an earlier incarnation: the seq where the run that made it was
    resumed, with it dead; else None).

    Calls and answers are paired by the log's one pairing (:func:`barnraise.sim.log.paired`), each
    run of a log that was resumed before on its own.
    """
    image = simu.restored
    if image is None:
        return []
    out: list[dict[str, Any]] = []
    made: dict[int, dict[str, Any]] = {}  # by the seq of its record
    for r, asked in paired(run_records(simu)):
        if r.seq >= image.seq:
            break
        if asked is not None:
            call = made.get(asked.seq)
            if call is not None:
                call.update(answer=decode(r.content), answered=r.t)
        elif r.kind == "event" and r.type == RESUMED:  # an earlier resume began
            for call in out:
                if call["answered"] is None and call["until"] is None:
                    call["until"] = r.seq
        elif r.sender == agent_id and is_call(r.kind, r.type, r.sender, r.recipient):
            content = decode(r.content)
            if isinstance(content, dict) and "tool" in content:
                call = {"tool": str(content["tool"]), "args": dict(content.get("args") or {}),
                        "asked": r.t, "seq": r.seq, "answer": None, "answered": None,
                        "until": None}
                made[r.seq] = call
                out.append(call)
    return out


def answered_before(simu: Simulation, agent_id: str) -> list[tuple[str, dict[str, Any], Any]]:
    """In a resumed run: the tool calls ``agent_id`` made before the kill that were
    answered, as (tool, args, answer), in the order it made them (:func:`calls_before`)."""
    return [(c["tool"], c["args"], c["answer"]) for c in calls_before(simu, agent_id)
            if c["answer"] is not None]


def delivered_before(simu: Simulation, agent_id: str, *types: str) -> list[Message]:
    """In a resumed run: the messages of ``types`` delivered to ``agent_id`` before the
    kill (rebuilt from the stored log), in order; [] in a run that was not resumed."""
    image = simu.restored
    if image is None:
        return []
    out = []
    for r in run_records(simu, "deliver"):
        if r.seq >= image.seq:
            break
        if r.recipient == agent_id and r.type in types:
            out.append(Message(message_id=f"logged-{r.seq}", timestamp=r.t, from_agent=r.sender,
                               to_agent=agent_id, message_type=r.type, content=r.content_obj()))
    return out


class Replay:
    """A resumed agent goes through what it did before the kill again, without redoing it.

    For a scripted behaviour whose progress is not in the world's state (how many of
    its rounds it had done, say): its next incarnation runs the same script, calling
    and sleeping through this object. ``calls`` are the stopped incarnations' calls of
    the script's tools (:func:`calls_before`), each with the answer the log gives it;
    while any is left, :meth:`call` returns the next one's answer instead of calling
    (RuntimeError if the script asks for another tool or other arguments: it went
    another way than the log), :meth:`sleep` returns at once, and :attr:`now` is the
    time the log says it was. From the last call, if it has no answer, everything is
    live; a call with no answer before others died with an earlier run, and the
    resume after it made it again (it is left out). The script's random draws must
    come from ``agent.rng`` (its stream is the same in every incarnation), so it
    makes the same choices on the same answers.

    A crash in the run (a fault plan's, say) takes the agent's memory too, and its
    supervisor restarts it on the same script. ``journal``: a list the agent keeps
    where its crash does not reach (what a real agent keeps on its disk): given in its
    params, every incarnation has the same list. Each live call is added to it when
    asked and given its answer when answered, in the form of ``calls``; the next
    incarnation passes it (after the stopped run's ``calls``, in a resumed run) as its
    own ``calls``, so it replays what it was told and goes on live from there. A call
    whose answer the crash took is its last one without an answer, made again live;
    what such a call did in the world is the script's to read back.
    """

    def __init__(self, agent: Participant, calls: Iterable[Mapping[str, Any]] = (),
                 inbox: Iterable[Message] = (),
                 journal: list[dict[str, Any]] | None = None) -> None:
        self.agent = agent
        #: where each live call and its answer are kept (see above); None: nowhere
        self.journal = journal
        given = [dict(c) for c in calls]
        self.calls = [c for i, c in enumerate(given)
                      if c.get("answer") is not None or i == len(given) - 1]
        if self.calls and self.calls[-1].get("answer") is None:
            self.calls.pop()  # the last call was never answered: live from there
        #: messages the stopped incarnations had been delivered (:func:`delivered_before`),
        #: which :meth:`receive` takes before waiting for new ones
        self.inbox = list(inbox)
        self._now: float | None = None
        #: calls answered from the log
        self.replayed = 0

    @property
    def now(self) -> float:
        return self.agent.now if self._now is None else self._now

    async def call(self, tool: str, **args: Any) -> dict[str, Any]:
        if not self.calls:
            self._now = None
            if self.journal is None:
                return await self.agent.call(tool, **args)
            kept: dict[str, Any] = {"tool": tool, "args": dict(args), "asked": self.agent.now,
                                    "answer": None, "answered": None}
            self.journal.append(kept)
            live = await self.agent.call(tool, **args)
            kept.update(answer=live, answered=self.agent.now)
            return live
        logged = self.calls.pop(0)
        wrong = [k for k, v in args.items() if logged["args"].get(k) != v]
        if logged["tool"] != tool or wrong:
            raise RuntimeError(f"{self.agent.name} went another way than its stored log: "
                               f"{tool} {args}, where the log has {logged['tool']} "
                               f"{logged['args']}")
        self._now = float(logged["answered"])
        self.replayed += 1
        answer: dict[str, Any] = logged["answer"]
        return answer

    async def receive(self, match: Callable[[Message], bool], **wait: Any) -> Message:
        """The first message of :attr:`inbox` that ``match`` accepts (taken from it), else
        ``agent.receive(match, **wait)``."""
        for i, message in enumerate(self.inbox):
            if match(message):
                del self.inbox[i]
                return message
        return await self.agent.receive(match, **wait)

    async def sleep(self, seconds: float) -> None:
        if self.calls:
            self._now = float(self.calls[0]["asked"])
            return
        self._now = None
        await self.agent.sleep(seconds)


def count(events: Iterable[Mapping[str, Any]], event: str) -> int:
    """How many of ``events`` have ``event`` as their ``"event"``."""
    return sum(1 for e in events if e.get("event") == event)


def mark(agent: Participant, what: str, **details: Any) -> None:
    """Append ``{"t", "what", ...}`` to the agent's ``outcome["timeline"]``."""
    agent.outcome.setdefault("timeline", []).append(
        {"t": round(agent.now, 6), "what": what, **details})


def max_concurrent(intervals: Iterable[tuple[float, float]]) -> int:
    """The most intervals ``[start, end]`` open at one instant.

    An interval ending at the instant another starts does not overlap it (the
    lock passed from one holder to the next at that instant).
    """
    points: list[tuple[float, int]] = []
    for start, end in intervals:
        points += [(start, 1), (end, -1)]
    points.sort()  # at equal times -1 (an end) sorts before +1 (a start)
    best = current = 0
    for _, step in points:
        current += step
        best = max(best, current)
    return best


def min_gap(times: list[float]) -> float | None:
    """The smallest gap between consecutive times (None for fewer than two)."""
    if len(times) < 2:
        return None
    return round(min(b - a for a, b in itertools.pairwise(times)), 6)


def mean(values: Sequence[float]) -> float:
    """The arithmetic mean (0.0 for no values)."""
    return float(sum(values) / len(values)) if values else 0.0


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile by the nearest-rank method (0.0 for no values)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return float(ordered[rank - 1])
