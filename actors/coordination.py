"""The coordination service: named locks (leases) and barriers, per session.

Both are keyed by a caller-chosen id within a session; ids never clash across
sessions. Times are simulation seconds. Every answer is ``success`` True unless
the call itself is wrong (``invalid_argument``, ``lock_not_held``, ...): a lock
not granted or a barrier not released is an ordinary outcome, not an error.

Locks (``a2a_lock_acquire``, ``a2a_lock_renew``, ``a2a_lock_release``)
    A lock is free, or held by one member under a lease that lives as long as its
    holder. ``lease`` seconds after it is granted or renewed (its term) the service
    looks at the holder (``SessionService.holder_live``): a live holder gets another
    term (a ``lock_granted`` to it again); a gone one's lease expires and the lock
    passes to the first waiter or becomes free (``lease=0``: held until released).
    Acquiring a lock one already holds, or ``a2a_lock_renew``, starts a new term now.
    With ``wait > 0`` a caller refused now queues (first come, first served) and
    is answered when it is granted the lock or when ``wait`` runs out, whichever
    comes first. Each answer has ``granted``, ``lock_id``, ``holder`` (agent id,
    or None), ``expires_at`` (the holder's lease end, None for no lease) and
    ``waited``; a grant also has ``renewed``, a refusal a ``reason``: ``held``
    (``wait=0``), ``timeout``, ``member_left``.

Barriers (``a2a_barrier_enter``)
    A barrier waits for ``expected_count`` arrivals, or for every agent of
    ``expected_agents`` (ids or names of members; the caller must be one). The
    first arrival fixes what the barrier expects; a later arrival that expects
    something else is refused (``invalid_argument``). When the last expected
    agent arrives every waiter is answered ``released`` True with the same
    ``arrived`` list (agent ids in arrival order), and the id starts a new
    generation: the next arrival begins a fresh barrier.

    Each waiter has its own ``timeout`` (0: do not wait; answered at once unless
    its arrival releases the barrier). A waiter whose timeout runs out is
    answered ``released`` False and leaves the barrier; the others keep waiting
    for it to come back until their own timeouts. ``arrived`` and ``missing``
    in that answer describe the barrier as it stood when the wait ended, the
    caller still counted. When no one is left waiting the barrier is forgotten,
    so the next arrival may expect something else.

    Every answer has ``released``, ``barrier_id``, ``generation`` (1 for the
    first use of the id, +1 per release), ``arrived``, ``expected_count``,
    ``missing_count`` (arrivals still needed) and ``waited``; with
    ``expected_agents`` also ``missing``, the expected ids not arrived, in the
    order given. Not released also gives ``reason``: ``timeout`` or
    ``member_left``.

Membership
    A member that leaves gives up what it holds: its locks pass on (event
    ``lock_released`` with reason ``member_left``), its waits for locks and at
    barriers end (answered not granted / not released, reason ``member_left``),
    and it is struck from the ``expected_agents`` of every barrier, which
    releases if everyone still expected is there. When a session closes, calls
    still waiting are answered ``session_not_found`` and its state is dropped.

Events (``session:<id>:events``): ``lock_granted`` {lock_id, holder,
expires_at, waited}, ``lock_released`` {lock_id, holder, next_holder, reason},
``lock_expired`` {lock_id, holder, next_holder}, ``barrier_released``
{barrier_id, generation, arrived}.

Deferred answers: a tool that cannot answer yet keeps the request message and
returns :data:`barnraise.actors.service.DEFERRED`; the service answers the message itself
later (grant, release, timeout, leave) with ``_answer``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from barnraise.actors.service import DEFERRED, Call, Deferred, SessionInfo, SessionService
from barnraise.sim.dispatch import Timer
from barnraise.sim.events import BarrierReleased, LockExpired, LockGranted, LockReleased
from barnraise.sim.messages import Message
from barnraise.sim.tools import ToolError, fail, ok
from barnraise.sim.views import BarrierView, CoordinationPart, LockView

if TYPE_CHECKING:
    from barnraise.actors.stored.image import SessionImage

__all__ = ["BARRIER_LIST_LIMIT", "CoordinationService"]

#: The longest ``arrived`` or ``missing`` list in a barrier's answer; past it the answer
#: adds ``arrived_count`` and ``truncated: true`` (each waiter hears it: uncapped, a
#: crew of n would cost n * n ids).
BARRIER_LIST_LIMIT: Final = 100





@dataclass(slots=True, eq=False)
class _LockWaiter:
    agent_id: str
    message: Message
    lease: float
    since: float
    timer: Timer | None = None


@dataclass(slots=True, eq=False)
class _Lock:
    lock_id: str
    holder: str
    expires_at: float | None
    #: Bumped on every grant and renewal: a lease timer acts only for its own grant.
    grant: int = 0
    #: the lease's term in seconds (0: held until released): a live holder's lease
    #: grows by this much each time it runs out
    lease: float = 0.0
    lease_timer: Timer | None = None
    waiters: deque[_LockWaiter] = field(default_factory=deque)


@dataclass(slots=True, eq=False)
class _BarrierWaiter:
    agent_id: str
    message: Message
    since: float
    timer: Timer | None = None


@dataclass(slots=True, eq=False)
class _Barrier:
    barrier_id: str
    generation: int
    expected_count: int
    #: Expected agent ids in the order given; None when only a count is expected.
    expected_agents: list[str] | None
    waiters: list[_BarrierWaiter] = field(default_factory=list)
    #: The waiters' agent ids: a repeat arrival is found without a pass over them all.
    here: set[str] = field(default_factory=set)

    def arrived(self) -> list[str]:
        return [w.agent_id for w in self.waiters]

    def complete(self) -> bool:
        if self.expected_agents is None:
            return len(self.waiters) >= self.expected_count
        here = {w.agent_id for w in self.waiters}
        return all(agent in here for agent in self.expected_agents)


@dataclass(slots=True)
class _SessionState:
    locks: dict[str, _Lock] = field(default_factory=dict)
    barriers: dict[str, _Barrier] = field(default_factory=dict)
    #: Releases so far per barrier id: the next use of the id is generation + 1.
    releases: dict[str, int] = field(default_factory=dict)


class CoordinationService(SessionService):
    """Named locks and barriers; see the module docstring for the contract."""

    service_name = "coordination"

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._state: dict[str, _SessionState] = {}

    def on_session(self, info: SessionInfo) -> None:
        self._state[info.session_id] = _SessionState()

    def restore_session(self, image: SessionImage, serials: Mapping[str, int]) -> None:
        """The locks ``image`` has held, with their leases (one already past expires at
        once), and each barrier's releases so far. Waits for a lock or at a barrier were
        the stopped run's agents': they are not restored (their callers are gone)."""
        state = self._state[image.session_id]
        state.releases = dict(image.barrier_releases)
        for lock_id, held in image.locks.items():
            lock = _Lock(lock_id, held["holder"], held["expires_at"], grant=1,
                         lease=float(held.get("lease") or 0.0))
            if lock.expires_at is not None:
                lock.lease_timer = self.dispatcher.call_later(
                    max(0.0, lock.expires_at - self.now), self, self._lease_expired,
                    image.session_id, lock, lock.grant, daemon=True)
            state.locks[lock_id] = lock

    def view_of(self, session_id: str) -> CoordinationPart:
        """This service's part of a :class:`~barnraise.sim.views.WorldView`: locks held, barriers
        waited at, each by id. LookupError for an unknown session. Call it in this
        actor's own context: ``barnraise.actors.world.Simulation.view`` does."""
        if session_id not in self.sessions:
            raise LookupError(f"no session {session_id!r} in the coordination service")
        state = self._state.get(session_id) or _SessionState()
        locks = tuple(LockView(lock.lock_id, lock.holder, lock.expires_at,
                               tuple(w.agent_id for w in lock.waiters))
                      for _, lock in sorted(state.locks.items()))
        barriers = tuple(BarrierView(
            b.barrier_id, b.generation, b.expected_count,
            None if b.expected_agents is None else tuple(b.expected_agents), tuple(b.arrived()))
            for _, b in sorted(state.barriers.items()))
        return CoordinationPart(locks, barriers)

    def _session(self, session_id: str) -> _SessionState:
        # A session is announced before any call reaches us; setdefault only
        # guards against a replica that was (re)built without the announcement.
        return self._state.setdefault(session_id, _SessionState())

    # -- locks ------------------------------------------------------------------------

    def tool_a2a_lock_acquire(self, call: Call) -> dict[str, Any] | Deferred:
        args = call.args
        lock_id: str = args["lock_id"]
        wait: float = args["wait"]
        lease: float = args["lease"]
        state = self._session(call.session_id)
        lock = state.locks.get(lock_id)
        if lock is None:
            lock = _Lock(lock_id, call.caller, None)
            state.locks[lock_id] = lock
            self._grant(call.session_id, lock, call.caller, lease, waited=0.0)
            return self._granted(lock, waited=0.0, renewed=False)
        if lock.holder == call.caller:
            self._grant(call.session_id, lock, call.caller, lease, waited=0.0)
            return self._granted(lock, waited=0.0, renewed=True)
        if wait == 0:
            return self._refused(lock, waited=0.0, reason="held")
        if any(w.agent_id == call.caller for w in lock.waiters):
            raise ToolError("invalid_argument", f"lock_id: {call.caller} is already waiting "
                            f"for lock {lock_id!r}", field="lock_id")
        waiter = _LockWaiter(call.caller, call.message, lease, self.now)
        waiter.timer = self.dispatcher.call_later(
            wait, self, self._lock_wait_timed_out, call.session_id, lock, waiter)
        lock.waiters.append(waiter)
        return DEFERRED

    def tool_a2a_lock_release(self, call: Call) -> dict[str, Any]:
        lock_id: str = call.args["lock_id"]
        lock = self._session(call.session_id).locks.get(lock_id)
        if lock is None or lock.holder != call.caller:
            raise ToolError("lock_not_held", f"{call.caller} does not hold lock {lock_id!r}",
                            lock_id=lock_id, holder=None if lock is None else lock.holder)
        next_holder = self._pass_on(call.session_id, lock, "released")
        return ok(released=True, lock_id=lock_id, next_holder=next_holder)

    def tool_a2a_lock_renew(self, call: Call) -> dict[str, Any]:
        """Start a new term of the caller's lock ``lock_id`` now: ``lease`` seconds, or
        the lock's own term when not given (0: held until released).

        Result: lock_id, holder, expires_at, lease. Anyone but the holder is refused
        lock_not_held (with the ``holder``), and nothing changes."""
        lock_id: str = call.args["lock_id"]
        lock = self._session(call.session_id).locks.get(lock_id)
        if lock is None or lock.holder != call.caller:
            raise ToolError("lock_not_held", f"{call.caller} does not hold lock {lock_id!r}; "
                            "only its holder may renew it", lock_id=lock_id,
                            holder=None if lock is None else lock.holder)
        given = call.args.get("lease")
        lease = float(given) if given is not None else lock.lease
        self._grant(call.session_id, lock, call.caller, lease, waited=0.0)
        return ok(lock_id=lock_id, holder=lock.holder, expires_at=lock.expires_at,
                  lease=lock.lease)

    def _grant(self, session_id: str, lock: _Lock, agent_id: str, lease: float,
               waited: float) -> None:
        """Give ``lock`` to ``agent_id`` (or renew its lease) for ``lease`` seconds."""
        if lock.lease_timer is not None:
            lock.lease_timer.cancel()
            lock.lease_timer = None
        lock.holder = agent_id
        lock.grant += 1
        lock.expires_at = self.now + lease if lease > 0 else None
        lock.lease = lease if lease > 0 else 0.0
        if lease > 0:
            # Daemon: an unused lease ending is upkeep, not something the run
            # must stay alive for. A waiter's own timer keeps the run going.
            lock.lease_timer = self.dispatcher.call_later(
                lease, self, self._lease_expired, session_id, lock, lock.grant, daemon=True)
        self.emit_event(LockGranted(session_id=session_id, lock_id=lock.lock_id, holder=agent_id,
                                    expires_at=lock.expires_at, waited=waited))

    def _pass_on(self, session_id: str, lock: _Lock, reason: str | None) -> str | None:
        """The holder lets go (``reason``: why it released it; None: its lease expired):
        ``lock_released`` or ``lock_expired`` says so, then the first waiter gets the lock.

        The release is announced before the grant, so the event log never shows
        two holders at once. With nobody waiting the lock becomes free.
        """
        if lock.lease_timer is not None:
            lock.lease_timer.cancel()
            lock.lease_timer = None
        next_holder = lock.waiters[0].agent_id if lock.waiters else None
        self.emit_event(
            LockExpired(session_id=session_id, lock_id=lock.lock_id, holder=lock.holder,
                        next_holder=next_holder) if reason is None else
            LockReleased(session_id=session_id, lock_id=lock.lock_id, holder=lock.holder,
                         next_holder=next_holder, reason=reason))
        if not lock.waiters:
            self._session(session_id).locks.pop(lock.lock_id, None)
            return None
        waiter = lock.waiters.popleft()
        if waiter.timer is not None:
            waiter.timer.cancel()
        waited = self.now - waiter.since
        self._grant(session_id, lock, waiter.agent_id, waiter.lease, waited)
        self._answer(waiter.message, self._granted(lock, waited=waited, renewed=False))
        return waiter.agent_id

    def _lease_expired(self, session_id: str, lock: _Lock, grant: int) -> None:
        state = self._state.get(session_id)
        if state is None or state.locks.get(lock.lock_id) is not lock or lock.grant != grant:
            return  # released, renewed or passed on since this timer was set
        lock.lease_timer = None
        if lock.lease > 0 and self.holder_live(session_id, lock.holder):
            # the holder lives: another term, recorded as a grant to it (as a renewal is)
            self._grant(session_id, lock, lock.holder, lock.lease, waited=0.0)
        else:
            self._pass_on(session_id, lock, None)

    def _lock_wait_timed_out(self, session_id: str, lock: _Lock, waiter: _LockWaiter) -> None:
        state = self._state.get(session_id)
        if state is None or state.locks.get(lock.lock_id) is not lock \
                or waiter not in lock.waiters:
            return  # granted or withdrawn meanwhile
        lock.waiters.remove(waiter)
        self._answer(waiter.message,
                     self._refused(lock, waited=self.now - waiter.since, reason="timeout"))

    @staticmethod
    def _granted(lock: _Lock, *, waited: float, renewed: bool) -> dict[str, Any]:
        return ok(granted=True, lock_id=lock.lock_id, holder=lock.holder,
                  expires_at=lock.expires_at, waited=waited, renewed=renewed)

    @staticmethod
    def _refused(lock: _Lock, *, waited: float, reason: str) -> dict[str, Any]:
        return ok(granted=False, lock_id=lock.lock_id, holder=lock.holder,
                  expires_at=lock.expires_at, waited=waited, reason=reason)

    # -- barriers ---------------------------------------------------------------------

    def tool_a2a_barrier_enter(self, call: Call) -> dict[str, Any] | Deferred:
        args = call.args
        barrier_id: str = args["barrier_id"]
        count: int | None = args.get("expected_count")
        agents: list[str] | None = args.get("expected_agents")
        if count is None and agents is None:
            raise ToolError("invalid_argument", "expected_count: give expected_count or "
                            "expected_agents", field="expected_count")
        if count is not None and agents is not None:
            raise ToolError("invalid_argument", "expected_agents: give expected_count or "
                            "expected_agents, not both", field="expected_agents")
        expected = None if agents is None else self._expected_ids(call, agents)
        # Exactly one of the two is given (checked above).
        expected_count = len(expected) if expected is not None else count
        assert expected_count is not None
        state = self._session(call.session_id)
        barrier = state.barriers.get(barrier_id)
        if barrier is None:
            barrier = _Barrier(barrier_id, state.releases.get(barrier_id, 0) + 1,
                               expected_count, expected)
        else:
            self._check_same_expectation(barrier, count, expected, call.caller)
        state.barriers[barrier_id] = barrier
        waiter = _BarrierWaiter(call.caller, call.message, self.now)
        barrier.waiters.append(waiter)
        barrier.here.add(call.caller)
        if barrier.complete():
            self._release_barrier(call.session_id, barrier)
            return DEFERRED  # the release answered every waiter, the caller included
        timeout: float = args["timeout"]
        if timeout == 0:
            return self._leave_barrier(call.session_id, barrier, waiter, "timeout")
        waiter.timer = self.dispatcher.call_later(
            timeout, self, self._barrier_timed_out, call.session_id, barrier, waiter)
        return DEFERRED

    def _expected_ids(self, call: Call, agents: list[str]) -> list[str]:
        """Resolve ``expected_agents`` (ids or names) to member ids, first mention kept."""
        members = self.members.get(call.session_id, {})
        by_name = {m.name: m.agent_id for m in members.values()}
        ids: list[str] = []
        for who in agents:
            agent_id = who if who in members else by_name.get(who)
            if agent_id is None:
                raise ToolError("invalid_argument", f"expected_agents: {who!r} is not a "
                                f"member of {call.session_id}", field="expected_agents")
            if agent_id not in ids:
                ids.append(agent_id)
        if call.caller not in ids:
            raise ToolError("invalid_argument", f"expected_agents: the caller {call.caller} "
                            "is not among the expected agents", field="expected_agents")
        return ids

    @staticmethod
    def _check_same_expectation(barrier: _Barrier, count: int | None,
                                expected: list[str] | None, caller: str) -> None:
        """Refuse an arrival that is a repeat, or expects other than the barrier does."""
        if caller in barrier.here:
            raise ToolError("invalid_argument", f"barrier_id: {caller} is already waiting at "
                            f"barrier {barrier.barrier_id!r}", field="barrier_id")
        if barrier.expected_agents is None:
            if count != barrier.expected_count:
                name = "expected_count" if count is not None else "expected_agents"
                raise ToolError("invalid_argument", f"{name}: barrier {barrier.barrier_id!r} "
                                f"expects a count of {barrier.expected_count}", field=name,
                                expected_count=barrier.expected_count)
        elif expected is None or set(expected) != set(barrier.expected_agents):
            name = "expected_agents" if expected is not None else "expected_count"
            raise ToolError("invalid_argument", f"{name}: barrier {barrier.barrier_id!r} "
                            f"expects the agents {barrier.expected_agents}", field=name,
                            expected_agents=list(barrier.expected_agents))

    def _release_barrier(self, session_id: str, barrier: _Barrier) -> None:
        state = self._session(session_id)
        state.barriers.pop(barrier.barrier_id, None)
        state.releases[barrier.barrier_id] = barrier.generation
        arrived = barrier.arrived()
        for waiter in barrier.waiters:
            if waiter.timer is not None:
                waiter.timer.cancel()
            self._answer(waiter.message, self._barrier_result(
                barrier, arrived, released=True, waited=self.now - waiter.since))
        self.emit_event(BarrierReleased(
            session_id=session_id, barrier_id=barrier.barrier_id,
            generation=barrier.generation, arrived=arrived))

    def _leave_barrier(self, session_id: str, barrier: _Barrier, waiter: _BarrierWaiter,
                       reason: str) -> dict[str, Any]:
        """Take ``waiter`` off ``barrier``; return its answer (the barrier as it stood)."""
        result = self._barrier_result(barrier, barrier.arrived(), released=False,
                                      waited=self.now - waiter.since, reason=reason)
        if waiter.timer is not None:
            waiter.timer.cancel()
        barrier.waiters.remove(waiter)
        barrier.here.discard(waiter.agent_id)
        if not barrier.waiters:
            # Nobody waits: forget it, so the next arrival may expect anything.
            self._session(session_id).barriers.pop(barrier.barrier_id, None)
        return result

    def _barrier_timed_out(self, session_id: str, barrier: _Barrier,
                           waiter: _BarrierWaiter) -> None:
        state = self._state.get(session_id)
        if state is None or state.barriers.get(barrier.barrier_id) is not barrier \
                or waiter not in barrier.waiters:
            return  # released or withdrawn meanwhile
        waiter.timer = None
        self._answer(waiter.message, self._leave_barrier(session_id, barrier, waiter, "timeout"))

    @staticmethod
    def _barrier_result(barrier: _Barrier, arrived: list[str], *, released: bool,
                        waited: float, reason: str | None = None) -> dict[str, Any]:
        # Every waiter hears the barrier: its lists are capped (BARRIER_LIST_LIMIT, with
        # arrived_count and truncated), or a crew of n would be answered n * n ids.
        result = ok(released=released, barrier_id=barrier.barrier_id,
                    generation=barrier.generation, arrived=arrived[:BARRIER_LIST_LIMIT],
                    expected_count=barrier.expected_count, waited=waited)
        missing: list[str] = []
        if barrier.expected_agents is not None:
            here = barrier.here
            missing = [a for a in barrier.expected_agents if a not in here]
            result["missing"] = missing[:BARRIER_LIST_LIMIT]
            result["missing_count"] = len(missing)
        else:
            result["missing_count"] = max(0, barrier.expected_count - len(arrived))
        if len(arrived) > BARRIER_LIST_LIMIT or len(missing) > BARRIER_LIST_LIMIT:
            result["arrived_count"] = len(arrived)
            result["truncated"] = True
        if reason is not None:
            result["reason"] = reason
        return result

    # -- membership and sessions ---------------------------------------------------------

    def op_member_left(self, content: Mapping[str, Any]) -> None:
        """Drop the leaver's waits, pass its locks on, strike it from barriers."""
        super().op_member_left(content)
        session_id: str = content["session_id"]
        agent_id: str = content["agent_id"]
        state = self._state.get(session_id)
        if state is None:
            return
        # Sorted ids: what happens (and is traced) does not depend on dict history.
        for lock_id in sorted(state.locks):
            lock = state.locks[lock_id]
            for queued in [w for w in lock.waiters if w.agent_id == agent_id]:
                lock.waiters.remove(queued)
                if queued.timer is not None:
                    queued.timer.cancel()
                self._answer(queued.message, self._refused(
                    lock, waited=self.now - queued.since, reason="member_left"))
            if lock.holder == agent_id:
                self._pass_on(session_id, lock, "member_left")
        for barrier_id in sorted(state.barriers):
            barrier = state.barriers[barrier_id]
            for waiter in [w for w in barrier.waiters if w.agent_id == agent_id]:
                self._answer(waiter.message,
                             self._leave_barrier(session_id, barrier, waiter, "member_left"))
            if barrier.expected_agents is not None and agent_id in barrier.expected_agents:
                barrier.expected_agents.remove(agent_id)
                barrier.expected_count = len(barrier.expected_agents)
                # Everyone still expected may be here already: let them go.
                if barrier.waiters and barrier.complete():
                    self._release_barrier(session_id, barrier)

    def op_session_closed(self, content: Mapping[str, Any]) -> None:
        """Forget the session; calls still waiting are answered ``session_not_found``."""
        session_id: str = content["session_id"]
        self.sessions.pop(session_id, None)
        self.members.pop(session_id, None)
        state = self._state.pop(session_id, None)
        if state is None:
            return
        closed = fail("session_not_found", f"session {session_id} was closed")
        timers: list[Timer | None] = []
        waiting: list[Message] = []
        for lock in state.locks.values():
            timers.append(lock.lease_timer)
            timers.extend(w.timer for w in lock.waiters)
            waiting.extend(w.message for w in lock.waiters)
        for barrier in state.barriers.values():
            timers.extend(w.timer for w in barrier.waiters)
            waiting.extend(w.message for w in barrier.waiters)
        for timer in timers:
            if timer is not None:
                timer.cancel()
        for message in waiting:
            self._answer(message, dict(closed))
