"""Supervision: restart crashed agents with backoff, within limits, or give up and say so.

A :class:`Supervisor` is an actor that owns a group of children (agents it
started with :meth:`Supervisor.start_child`, or other supervisors made with
:meth:`Supervisor.child_supervisor`). When a child crashes (a behaviour error
it does not handle, an injected crash, or an agent the registry marks offline:
all go through ``Dispatcher.crash``), its supervisor:

1. counts the restart against its *intensity limit*: at most ``max_restarts``
   in any ``within`` simulated seconds. One more, and it *escalates*: its own
   supervisor restarts the whole group (counting that against its own limit),
   and the top supervisor, with nobody to ask, reports (a ``supervisor_gave_up``
   event) and stops the group for good;
2. waits a *backoff*: ``base * factor ** n`` simulated seconds for the child's
   own n-th restart in the window (its siblings' do not count), at most ``cap``,
   times a jitter in ``[1 - jitter, 1 + jitter]`` drawn from the supervisor's own
   seeded stream (so a run replays);
3. restarts, by its *strategy*: ``one_for_one`` builds a fresh child from the
   arguments it was first started with; ``all_for_one`` first crashes the
   rest of the group too, and restarts them all.

A restarted agent has nothing of the old one: no mailbox, no memory, no
subscriptions. Its ``incarnation`` is one more than before, so its behaviours
know to resume from the world's state (``Agent.resuming``). The world meanwhile
treats its work as lost: its tasks in progress go back to pending (with their
claims released) so that it, or anyone, does them again; the task queue's state
machine lets each be completed only once.

A behaviour error that crashes a role agent (``crash_on_error``, the default for
``Participant``) is reported first, as any error is, and then handled as any crash.
The tree keeps one :class:`Recovery` per such error (:attr:`Supervisor.recoveries`,
shared by every supervisor of the tree, the one owner of the fact): the failure,
the child, and whether a restart followed. The runner reads it to excuse, under a
fault plan, errors whose agent came back (``barnraise.runner.errors_excused``).

Death watch is the dispatcher's (``Dispatcher.watch``): a child the group gives
up on is stopped for good, and its watchers get their ``terminated`` notice.
Every decision is a domain event on the ``supervision`` topic:
``child_crashed``, ``child_restarted``, ``supervisor_escalated``,
``supervisor_gave_up``.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from barnraise.actors.actor import A2AActor
from barnraise.sim.events import ChildCrashed, ChildRestarted, SupervisorEscalated, SupervisorGaveUp
from barnraise.sim.failures import Failure
from barnraise.sim.messages import Priority

__all__ = ["MAX_ERROR_RESTARTS", "ROOT", "Backoff", "Recoveries", "Recovery", "Supervisor"]

#: Behaviour errors after which a supervised child is restarted, in a whole run; the next
#: leaves it stopped (:attr:`Recoveries.retired`): a behaviour that fails the same way in
#: every life would otherwise restart for ever when each life outlasts the window the
#: intensity limit counts restarts in.
MAX_ERROR_RESTARTS: Final = 5

#: The name of the top supervisor a Simulation starts (``simu.supervisor``).
ROOT: Final = "supervisor"

#: The topic of the supervisors' events.
TOPIC: Final = "supervision"

Strategy = Literal["one_for_one", "all_for_one"]


@dataclass(frozen=True, slots=True)
class Backoff:
    """Exponential backoff with jitter: ``min(cap, base * factor ** n)`` times a draw
    from ``U(1 - jitter, 1 + jitter)``."""

    base: float = 0.5
    factor: float = 2.0
    cap: float = 30.0
    jitter: float = 0.2

    def __post_init__(self) -> None:
        if not (self.base > 0 and self.factor >= 1 and self.cap >= self.base
                and 0 <= self.jitter < 1):
            raise ValueError(f"backoff needs base > 0, factor >= 1, cap >= base and "
                             f"0 <= jitter < 1; got {self}")

    def delay(self, attempt: int, draw: float) -> float:
        """The wait before restart number ``attempt`` (0, 1, ...); ``draw`` is uniform in [0, 1)."""
        plain = min(self.cap, self.base * self.factor ** attempt)
        return plain * (1 - self.jitter + 2 * self.jitter * draw)


@dataclass(slots=True)
class Recovery:
    """One behaviour error that crashed a supervised child, and whether a restart followed."""

    failure: Failure
    child: str
    restarted: bool = False


class Recoveries:
    """The tree's record of the errors that crashed its children (module docstring)."""

    def __init__(self) -> None:
        #: One per error, in the order the supervisors heard of them.
        self.entries: list[Recovery] = []
        self._waiting: dict[str, list[Recovery]] = {}  # child -> not restarted yet
        self._by_child: dict[str, int] = {}  # child -> errors that crashed it, in the run
        #: Children left stopped after MAX_ERROR_RESTARTS errors (their code fails each
        #: life: a restart would only fail again).
        self.retired: list[str] = []

    def crashed(self, child: str, failure: Failure) -> int:
        """``failure`` crashed ``child``: recorded as not (yet) followed by a restart.
        Returns how many errors have crashed ``child`` in the run, this one included."""
        entry = Recovery(failure, child)
        self.entries.append(entry)
        self._waiting.setdefault(child, []).append(entry)
        self._by_child[child] = self._by_child.get(child, 0) + 1
        return self._by_child[child]

    def came_back(self, child: str) -> None:
        """``child`` was restarted: every error that crashed it since is recovered from."""
        for entry in self._waiting.pop(child, ()):
            entry.restarted = True

    @property
    def restarted(self) -> int:
        """How many of the errors were followed by a restart of their agent."""
        return sum(entry.restarted for entry in self.entries)


@dataclass(slots=True)
class _Child:
    cls: type[A2AActor] | None  # None: a supervisor of the group
    args: tuple[Any, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)
    incarnation: int = 0


class Supervisor(A2AActor):
    """Owns a group of children; restarts them as its strategy says (module docstring)."""

    def __init__(self, *, strategy: Strategy = "one_for_one", max_restarts: int = 5,
                 within: float = 60.0, backoff: Backoff | None = None,
                 parent: str | None = None,
                 max_error_restarts: int | None = MAX_ERROR_RESTARTS) -> None:
        super().__init__(mailbox_capacity=100_000)
        if strategy not in ("one_for_one", "all_for_one"):
            raise ValueError(f"strategy must be one_for_one or all_for_one, got {strategy!r}")
        if max_restarts < 0 or not within > 0:
            raise ValueError("max_restarts must be >= 0 and within > 0")
        if max_error_restarts is not None and (isinstance(max_error_restarts, bool) or
                                               not isinstance(max_error_restarts, int)
                                               or max_error_restarts < 0):
            raise ValueError("max_error_restarts must be an int >= 0 or None (no bound), "
                             f"got {max_error_restarts!r}")
        #: Behaviour errors a child is restarted after in the whole run (None: no bound).
        self.max_error_restarts = max_error_restarts
        self.strategy = strategy
        self.max_restarts = max_restarts
        self.within = within
        self.backoff = backoff or Backoff()
        self.parent = parent
        self.children: dict[str, _Child] = {}
        #: The restarts in the window: (time, child), oldest first.
        self.restarts: deque[tuple[float, str]] = deque()
        #: Every backoff waited, in order: (child, attempt, seconds). For tests and reports.
        self.delays: list[tuple[str, int, float]] = []
        self.gave_up = False
        self._owners: dict[str, Supervisor] = {}  # the tree's child -> supervisor (shared)
        #: The tree's record of errors that crashed a child (shared by the tree).
        self.recoveries = Recoveries()
        self._restarting: set[str] = set()
        #: A resumed run (``Simulation.restore``): every child started is a next
        #: incarnation of the agent the stored run had under its name.
        self.resumed = False

    # -- building the tree --------------------------------------------------------------

    def install(self) -> None:
        """Make this the top supervisor: the dispatcher's crashes come here."""
        self.dispatcher.crash_handler = self._crashed_anywhere

    def start_child(self, cls: type[A2AActor], name: str, /, *args: Any,
                    resumed: bool | None = None, **kwargs: Any) -> Any:
        """Spawn ``cls(*args, **kwargs)`` as ``name`` under this supervisor; return it.

        In a resumed run (:attr:`resumed`) the child is the next incarnation of the
        agent that had that name, so that it resumes from the world's state.
        ``resumed`` False starts a first incarnation even there (an agent of a
        session the stopped run had not made yet: it has no state to resume from)."""
        spec = _Child(cls, args, dict(kwargs))
        if self.resumed if resumed is None else resumed:
            actor = cls(*args, **kwargs)
            spec.incarnation = actor.incarnation = 1
            self.dispatcher.add(name, actor)
        else:
            actor = self.dispatcher.spawn(cls, name, *args, **kwargs)
        self.children[name] = spec
        self._owners[name] = self
        return actor

    def child_supervisor(self, name: str, **options: Any) -> Supervisor:
        """A supervisor whose group is a child of this one (it escalates to this one)."""
        sup: Supervisor = self.dispatcher.spawn(Supervisor, name, parent=self.name, **options)
        sup._owners = self._owners
        sup.recoveries = self.recoveries
        sup.resumed = self.resumed
        self.children[name] = _Child(None, ())
        self._owners[name] = self
        return sup

    def supervises(self, name: str) -> bool:
        """Is ``name`` a child somewhere in this supervisor's tree, not given up on?"""
        owner = self._owners.get(name)
        return owner is not None and not owner.gave_up

    # -- crashes ---------------------------------------------------------------------------

    def _crashed_anywhere(self, name: str) -> bool:
        owner = self._owners.get(name)
        if owner is None or owner.gave_up:
            return False  # not supervised: it stays down, and its watchers are told
        # Handled in the owner's own context (its thread, in realtime mode).
        self.dispatcher.call_later(0.0, owner, owner._child_crashed, name)
        return True

    def _child_crashed(self, name: str) -> None:
        if self.gave_up or name not in self.children:
            return
        self.emit(TOPIC, ChildCrashed(supervisor=self.name, child=name))
        failure: Failure | None = getattr(self.dispatcher.actor(name), "crashed_by", None)
        errors = 0 if failure is None else self.recoveries.crashed(name, failure)
        self._requeue_work(name)
        if self.max_error_restarts is not None and errors > self.max_error_restarts:
            # Its code raised in every life: a behaviour that fails the same way each time
            # (a wait that always times out) would restart for ever, each life longer than
            # the window the intensity limit counts in. It stays stopped (its watchers are
            # told, as for any end), and the run goes on.
            self.recoveries.retired.append(name)
            del self.children[name]
            self.dispatcher.announce_terminated(name, "too_many_errors")
            return
        if not self._within_limit(name):
            self._escalate()
            return
        names = [name]
        if self.strategy == "all_for_one":
            for other in self.children:
                if other != name and self.children[other].cls is not None:
                    self.dispatcher.crash(other, "all_for_one", supervised=True)
                    self._requeue_work(other)
                    names.append(other)
        attempt = self._attempt(name)
        wait = self.backoff.delay(attempt, float(self.rng.random()))
        self.delays.append((name, attempt, wait))
        for child in names:
            self._restarting.add(child)
        self.call_later(wait, lambda: self._restart(names))

    def _within_limit(self, name: str) -> bool:
        """Count a restart of ``name`` against the group's limit; False: one too many."""
        now = self.now
        while self.restarts and now - self.restarts[0][0] > self.within:
            self.restarts.popleft()
        if len(self.restarts) >= self.max_restarts:
            return False
        self.restarts.append((now, name))
        return True

    def _attempt(self, name: str) -> int:
        """Which restart of ``name`` in the window this is (0 for its first): the backoff
        grows with one child's own restarts, not with its siblings'."""
        return sum(child == name for _, child in self.restarts) - 1

    def _restart(self, names: list[str]) -> None:
        if self.gave_up:
            return
        d = self.dispatcher
        for name in names:
            self._restarting.discard(name)
            spec = self.children[name]
            if spec.cls is None or not d.actor(name).stopped:
                continue
            spec.incarnation += 1
            actor = spec.cls(*spec.args, **spec.kwargs)
            actor.incarnation = spec.incarnation
            d.respawn(name, actor)
            self.recoveries.came_back(name)
            if d.injector is not None:
                d.injector.restarts += 1
            self.emit(TOPIC, ChildRestarted(supervisor=self.name, child=name,
                                            incarnation=spec.incarnation))

    def _requeue_work(self, name: str) -> None:
        """The world forgets the crashed agent's work in progress (see the module docstring)."""
        d = self.dispatcher
        if "tasks" in d.actors:
            # From the top supervisor, whose name the services trust (see SessionService).
            d.send(d.seal(d.message(ROOT, "tasks", "coordination_request",
                                    {"op": "_agent_crashed", "agent_id": name},
                                    priority=Priority.HIGH)))

    def _escalate(self) -> None:
        self.emit(TOPIC, SupervisorEscalated(supervisor=self.name, parent=self.parent))
        parent = self._owners.get(self.name)
        if parent is not None:
            # To the parent, this whole group is one child that crashed.
            for name, spec in self.children.items():
                if spec.cls is not None:
                    self.dispatcher.crash(name, "escalated", supervised=True)
            self.restarts.clear()
            self.dispatcher.call_later(0.0, parent, parent._group_failed, self.name)
            return
        self.give_up()

    def _group_failed(self, name: str) -> None:
        child = self._owners_group(name)
        if child is None or self.gave_up:
            return
        if not self._within_limit(name):
            child.give_up()
            self._escalate()
            return
        attempt = self._attempt(name)
        wait = self.backoff.delay(attempt, float(self.rng.random()))
        self.delays.append((name, attempt, wait))
        self.dispatcher.call_later(wait, child, child._restart, list(child.children))

    def _owners_group(self, name: str) -> Supervisor | None:
        actor = self.dispatcher.actors.get(name)
        return actor if isinstance(actor, Supervisor) else None

    def give_up(self) -> None:
        """Stop the group for good (its watchers are told) and report it."""
        if self.gave_up:
            return
        self.gave_up = True
        self.emit(TOPIC, SupervisorGaveUp(supervisor=self.name, children=sorted(self.children)))
        d = self.dispatcher
        for name, spec in self.children.items():
            if spec.cls is None:
                sub = self._owners_group(name)
                if sub is not None:
                    sub.give_up()
                continue
            actor = d.actor(name)
            if not actor.stopped:
                d.stop_actor(name, "supervisor_gave_up")
            else:
                d.announce_terminated(name, "supervisor_gave_up")
