"""Async delegation: hand work to another member, keep working, get each result exactly once.

A :class:`DelegationLedger` belongs to one delegator (an agent allowed to call
``task_delegate``: an architect, under the default policy)::

    ledger = DelegationLedger(agent)
    did = await ledger.delegate("builder-2", "build", payload={"job": "lint"})
    ...                                   # the delegator goes on with its own work
    for done in ledger.take():            # at the start of each of its turns
        use(done.delegation_id, done.status, done.result)
    rest = await ledger.wait()            # or: nothing else to do, wait for the next

How it works. :meth:`DelegationLedger.delegate` is one ``task_delegate`` call:
it returns as soon as the task queue has recorded the task (the delegation id
names it), never waiting for the work. When the delegate reports the task, the
task queue sends the delegator a ``task_result``; a delegate may also tell its
delegator directly (:func:`tell_delegator`: an A2A ``task_result`` through
``a2a_send_message``, as an at-least-once delegate would). A collector behaviour
on the delegator's actor takes every such message for a delegation of its
ledger, from the ``tasks`` queue or from that delegation's delegate only:

* the first settles the delegation (``completed``; ``failed`` for a failed or
  cancelled task, a missed deadline included), publishes ``delegation.completed``
  or ``delegation.failed`` on the session's event topic at once, and queues the
  delegation for delivery;
* any later one (a duplicated message, a second report) is counted in
  :attr:`DelegationLedger.duplicates` and dropped: dedupe by delegation id.

Under a fault plan a result letter may be lost: :meth:`DelegationLedger.wait`, with
nothing heard for ``4 x retry`` simulated seconds, settles the pending delegations whose
tasks have finished from the task queue's records (:meth:`DelegationLedger.read_back`),
and a letter that comes after is a duplicate.

Delivery is the delegator's own doing: :meth:`take` hands over what settled
since the last take, each delegation once in its life (its ``delivered_at`` is
set); :meth:`wait` suspends until one settles. Both run in the delegator's own
behaviour, so a result reaches it on its next turn, never in the middle of one.

After a crash (``Agent.resuming``) a delegator's next incarnation has no ledger:
:meth:`DelegationLedger.recover` takes its delegations back from the task queue
(the tasks it delegated, in the order it made them, under the same ids), settles
those that finished from the tasks' records and waits for the others as before.
The events the stopped incarnation had published are named by the caller (a
resumed run reads them from the stored log) and are not published again.

Built over ``task_delegate`` / ``task_report`` rather than bare A2A messages:
the task queue already owns the task's state machine (a task completes or fails
once; a second report is refused), enforces who may delegate to whom, keeps
deadlines and retries, and shows every delegation in ``task_get_queue``. The
ledger adds only what the queue cannot know: the delegator's ids, the dedupe
and the delivery.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from barnraise.actors.agents.alerts import events_topic
from barnraise.actors.agents.participant import FINISHED, Participant, accept_next, my_delegations
from barnraise.actors.base import Agent
from barnraise.actors.errors import WaitTimeout
from barnraise.sim.events import DelegationCompleted, DelegationFailed
from barnraise.sim.messages import Message

__all__ = [
    "DELEGATION_COMPLETED",
    "DELEGATION_FAILED",
    "Delegation",
    "DelegationError",
    "DelegationLedger",
    "delegate_worker",
    "tell_delegator",
]

DELEGATION_COMPLETED: Final = DelegationCompleted.kind
DELEGATION_FAILED: Final = DelegationFailed.kind

_WAKE: Final = "delegation_ready"


class DelegationError(RuntimeError):
    """``task_delegate`` refused the delegation; ``result`` is its failure result."""

    def __init__(self, result: Mapping[str, Any]) -> None:
        super().__init__(f"task_delegate refused: {result.get('error')}: {result.get('message')}")
        self.result = dict(result)


@dataclass
class Delegation:
    """One delegation as its delegator sees it."""

    delegation_id: str
    task_id: str
    delegate: str
    task_type: str
    description: str
    delegated_at: float
    status: str = "pending"  # pending | completed | failed
    result: dict[str, Any] = field(default_factory=dict)
    message: str = ""
    reported_by: str = ""
    settled_at: float | None = None
    delivered_at: float | None = None
    duplicates: int = 0

    @property
    def settled(self) -> bool:
        return self.status != "pending"

    def to_dict(self) -> dict[str, Any]:
        return {"delegation_id": self.delegation_id, "task_id": self.task_id,
                "delegate": self.delegate, "task_type": self.task_type,
                "status": self.status, "result": dict(self.result), "message": self.message,
                "reported_by": self.reported_by, "delegated_at": self.delegated_at,
                "settled_at": self.settled_at, "delivered_at": self.delivered_at,
                "duplicates": self.duplicates}


class DelegationLedger:
    """A delegator's delegations: ids, settlement (deduped), delivery exactly once.

    ``collect`` (default True) starts the collector behaviour at the first
    delegation, so results settle (and their events go out) while the
    delegator is busy. With ``collect=False`` the owner feeds messages itself:
    it includes :meth:`wants` in its own ``receive`` and passes what it gets to
    :meth:`settle` (the plan runner does, to wait for results and approvals at
    once). ``queue`` is the task queue's actor name.
    """

    def __init__(self, agent: Agent, *, collect: bool = True, queue: str = "tasks",
                 events: bool = True) -> None:
        self.agent = agent
        self.collect = collect
        self.queue = queue
        self.events = events
        self.name = f"ledger-{agent.next_serial('delegation-ledger')}"
        self.records: dict[str, Delegation] = {}
        self._by_task: dict[str, str] = {}
        self._ready: deque[str] = deque()
        self._wakes = itertools.count(1)
        self._waiting: str | None = None
        self._collecting = False
        #: Messages dropped because their delegation had settled already.
        self.duplicates = 0

    # -- delegating -----------------------------------------------------------------------

    async def delegate(self, target: str, task_type: str = "build", *,
                       payload: Mapping[str, Any] | None = None,
                       region: Mapping[str, int] | None = None, description: str = "",
                       priority: str = "medium", deadline: float | None = None,
                       max_retries: int = 0) -> str:
        """Create the task and return the delegation id at once; DelegationError if refused."""
        args: dict[str, Any] = {"target_agent_id": target, "task_type": task_type,
                                "description": description, "priority": priority,
                                "payload": dict(payload or {}), "max_retries": max_retries}
        if region is not None:
            args["region"] = dict(region)
        if deadline is not None:
            args["deadline"] = deadline
        created = await self.agent.call("task_delegate", **args)
        if not created.get("success"):
            raise DelegationError(created)
        delegation_id = f"dlg-{self.agent.name}-{self.agent.next_serial('delegation')}"
        task_id = str(created["task_id"])
        self.records[delegation_id] = Delegation(
            delegation_id, task_id, str(created.get("assigned_to", target)), task_type,
            description, self.agent.now)
        self._by_task[task_id] = delegation_id
        if self.collect and not self._collecting:
            self._collecting = True
            self.agent.start_behaviour(_collect, self, name=f"{self.name}-collector")
        return delegation_id

    async def recover(self, *, published: Iterable[str] = ()) -> list[Delegation]:
        """The resume hook: take back the delegations this agent made before a crash.

        They are the tasks it delegated (``participant.my_delegations``), numbered in
        the order it made them, so each gets the id it had (one ledger per delegator;
        call this before the first :meth:`delegate`). One that finished meanwhile is
        settled from its task's record, not from a message (the task queue sends a
        result once, and a letter to the stopped incarnation died with it): its
        ``delegation.*`` event is published unless its id is in ``published`` (the
        stopped incarnation published it), and the next :meth:`take` hands it to
        this incarnation, whose memory starts empty. Results of the others come as
        usual. Returns them in order.
        """
        if self.records:
            raise RuntimeError("recover() takes back a restarted delegator's delegations; "
                               "this ledger has delegated already")
        published = set(published)
        back = []
        for task in await my_delegations(self.agent):
            delegation_id = f"dlg-{self.agent.name}-{self.agent.next_serial('delegation')}"
            record = Delegation(delegation_id, str(task["task_id"]), str(task["assigned_to"]),
                                str(task["type"]), str(task["description"]),
                                float(task["created_at"]))
            self.records[delegation_id] = record
            self._by_task[record.task_id] = delegation_id
            back.append(record)
            if task["status"] in FINISHED:
                self._settle(record, task["status"], task.get("result"), task.get("message"),
                             self.queue, publish=delegation_id not in published)
        if self.collect and self.pending and not self._collecting:
            self._collecting = True
            self.agent.start_behaviour(_collect, self, name=f"{self.name}-collector")
        return back

    # -- settling -------------------------------------------------------------------------

    def wants(self, message: Message) -> bool:
        """Is this a result for one of this ledger's delegations (duplicates included)?"""
        if message.message_type != "task_result":
            return False
        delegation_id = self._by_task.get(str(message.content.get("task_id")))
        if delegation_id is None:
            return False
        sender = message.from_agent
        return sender == self.queue or sender == self.records[delegation_id].delegate

    def wants_task(self, task_id: str) -> bool:
        """Is ``task_id`` the task of one of this ledger's delegations?"""
        return task_id in self._by_task

    def settle(self, message: Message) -> Delegation | None:
        """Record a result :meth:`wants`; the delegation if it settled now, None if a duplicate."""
        content = message.content
        delegation_id = self._by_task[str(content["task_id"])]
        record = self.records[delegation_id]
        if record.settled:
            record.duplicates += 1
            self.duplicates += 1
            return None
        if record.delegate == "any" and content.get("assigned_to"):
            record.delegate = str(content["assigned_to"])  # whoever accepted it
        self._settle(record, content.get("status"), content.get("result"),
                     content.get("message"), message.from_agent)
        return record

    def _settle(self, record: Delegation, status: Any, result: Any, message: Any,
                reported_by: str, publish: bool = True) -> None:
        record.status = "completed" if status == "completed" else "failed"
        record.result = dict(result) if isinstance(result, Mapping) else {}
        record.message = str(message or "")
        if record.status == "failed" and not record.message:
            record.message = f"task {status or 'failed'}"
        record.reported_by = reported_by
        record.settled_at = self.agent.now
        self._ready.append(record.delegation_id)
        if self.events and publish:
            self._publish(record)
        if self._waiting is not None:
            # The owner is suspended in wait(): wake it (a message to itself).
            self.agent.send(self.agent.name, "status_update",
                            {"kind": _WAKE, "ledger": self.name, "wake": self._waiting})
            self._waiting = None

    def _publish(self, record: Delegation) -> None:
        sid = self.agent.session_id
        if sid is None:
            return
        event: DelegationCompleted | DelegationFailed
        if record.status == "completed":
            event = DelegationCompleted(
                session_id=sid, delegation_id=record.delegation_id, task_id=record.task_id,
                delegator=self.agent.name, delegate=record.delegate,
                task_type=record.task_type, status=record.status,
                reported_by=record.reported_by, result=record.result)
        else:
            event = DelegationFailed(
                session_id=sid, delegation_id=record.delegation_id, task_id=record.task_id,
                delegator=self.agent.name, delegate=record.delegate,
                task_type=record.task_type, status=record.status,
                reported_by=record.reported_by, error=record.message)
        self.agent.emit(events_topic(sid), event)

    # -- delivering -----------------------------------------------------------------------

    def take(self, only: Iterable[str] | None = None) -> list[Delegation]:
        """Delegations settled and not yet handed over (of ``only``, if given), oldest first.

        Each delegation is handed over once in its life.
        """
        wanted = None if only is None else set(only)
        taken: list[Delegation] = []
        kept: deque[str] = deque()
        while self._ready:
            delegation_id = self._ready.popleft()
            if wanted is not None and delegation_id not in wanted:
                kept.append(delegation_id)
                continue
            record = self.records[delegation_id]
            record.delivered_at = self.agent.now
            taken.append(record)
        self._ready = kept
        return taken

    async def wait(self, only: Iterable[str] | None = None,
                   timeout: float | None = None) -> list[Delegation]:
        """Suspend until a delegation (of ``only``) has settled, then :meth:`take` them.

        Returns at once if one is ready, and ``[]`` if none is pending. Raises
        WaitTimeout after ``timeout`` simulated seconds without a result.

        Under a fault plan a result letter may be lost: with none come for ``4 *
        retry`` simulated seconds, the ledger reads its open delegations' tasks from the
        task queue and settles those that finished from their records (as the
        architect does, docs/reliability.md); a letter that comes after is a duplicate.
        """
        wanted = None if only is None else set(only)
        faults = self.agent.dispatcher.faults
        poll = None if faults is None else 4 * faults.retry
        until = None if timeout is None else self.agent.now + timeout
        while not self._has_ready(wanted):
            if not any(not self.records[d].settled for d in (wanted or self.records)):
                return []
            token = f"{self.name}-{next(self._wakes)}"
            self._waiting = token
            left = None if until is None else max(0.0, until - self.agent.now)
            patience = left if poll is None else (poll if left is None else min(poll, left))
            try:
                message = await self.agent.receive(
                    lambda m: self.wants(m) or self._is_wake(m), timeout=patience,
                    description=f"a delegation result ({self.name})")
            except WaitTimeout:
                if poll is None or (until is not None and self.agent.now >= until):
                    raise
                await self.read_back()
                continue
            finally:
                self._waiting = None
            if self.wants(message):
                self.settle(message)
            # else a wake (this one, or a stale one): look again
        return self.take(wanted)

    async def gather(self, ids: Iterable[str],
                     timeout: float | None = None) -> dict[str, Delegation]:
        """Wait until every delegation of ``ids`` has settled; hand them over, by id."""
        wanted = list(ids)
        while any(not self.records[d].settled for d in wanted):
            await self.wait(wanted, timeout=timeout)
        self.take(wanted)
        return {d: self.records[d] for d in wanted}

    async def read_back(self) -> list[Delegation]:
        """Settle the pending delegations whose tasks have finished, from the task queue's
        records (what their ``task_result`` letters said); the ones settled now.

        What a delegator does under faults when a result letter may have been lost; a
        letter that comes after is a duplicate and dropped.
        """
        pending = {r.task_id: r for r in self.pending}
        if not pending:
            return []
        queue = await self.agent.call("task_get_queue", filter={"status": "all"})
        settled = []
        for task in queue.get("tasks", ()):
            record = pending.get(str(task.get("task_id")))
            if record is None or record.settled or task.get("status") not in FINISHED:
                continue
            if record.delegate == "any" and task.get("assigned_to"):
                record.delegate = str(task["assigned_to"])
            self._settle(record, task["status"], task.get("result"), task.get("message"),
                         self.queue)
            settled.append(record)
        return settled

    def _has_ready(self, wanted: set[str] | None) -> bool:
        if wanted is None:
            return bool(self._ready)
        return any(d in wanted for d in self._ready)

    def _is_wake(self, message: Message) -> bool:
        content = message.content
        return (message.from_agent == self.agent.name and content.get("kind") == _WAKE
                and content.get("ledger") == self.name)

    # -- views ----------------------------------------------------------------------------

    @property
    def pending(self) -> list[Delegation]:
        """Delegations not settled yet, in delegation order."""
        return [r for r in self.records.values() if not r.settled]

    @property
    def undelivered(self) -> list[Delegation]:
        """Settled and not yet handed over."""
        return [self.records[d] for d in self._ready]

    def __len__(self) -> int:
        return len(self.records)

    def summary(self) -> dict[str, Any]:
        """Counts: delegations, pending, completed, failed, delivered, duplicates."""
        records = list(self.records.values())
        return {"delegations": len(records),
                "pending": sum(1 for r in records if not r.settled),
                "completed": sum(1 for r in records if r.status == "completed"),
                "failed": sum(1 for r in records if r.status == "failed"),
                "delivered": sum(1 for r in records if r.delivered_at is not None),
                "duplicates": self.duplicates}


async def _collect(agent: Agent, ledger: DelegationLedger) -> None:
    while True:
        message = await agent.receive(ledger.wants, daemon=True,
                                      description=f"delegation results ({ledger.name})")
        ledger.settle(message)


# -- the delegate's side --------------------------------------------------------------------

async def tell_delegator(agent: Agent, task: Mapping[str, Any], status: str,
                         result: Mapping[str, Any] | None = None,
                         message: str = "") -> dict[str, Any]:
    """Send the delegator a ``task_result`` directly (A2A), beside the task queue's.

    What an at-least-once delegate does; the delegator's ledger keeps the first
    of the two and drops the other.
    """
    return await agent.call(
        "a2a_send_message", to_agent=str(task["delegated_by"]), message_type="task_result",
        content={"session_id": task.get("session_id"), "task_id": task["task_id"],
                 "status": status, "result": dict(result or {}), "message": message,
                 "reported_by": agent.name})


WORK_TYPES: Final = frozenset({"build", "test", "review", "evolve", "assemble", "migrate"})


async def _accept(agent: Participant, task: dict[str, Any]) -> dict[str, Any]:
    return await agent.call("task_accept", task_id=task["task_id"])


async def delegate_worker(agent: Participant) -> None:
    """A generic delegate: accepts any task, works on it a while, reports.

    The task's ``payload``: ``job`` (a name), ``work`` (simulated seconds it
    takes; default ``params["work"]``, else 1), ``fail`` (report it failed).
    ``params["echo"]`` makes it an at-least-once delegate: it also tells the
    delegator directly (:func:`tell_delegator`) and reports a second time
    (which the task queue refuses). Outcome: ``done``, ``failed``,
    ``echoes``, ``refused_reports``.
    """
    params = agent.params
    outcome = agent.outcome
    outcome.update(done=0, failed=0, echoes=0, refused_reports=0)
    while True:
        task, accepted = await accept_next(agent, WORK_TYPES, _accept)
        if not accepted.get("success"):
            continue
        payload = task.get("payload", {})
        await agent.sleep(float(payload.get("work", params.get("work", 1.0))))
        if payload.get("fail"):
            status, result, note = "failed", {"job": payload.get("job")}, "could not do it"
            outcome["failed"] += 1
        else:
            answer = int(agent.rng.integers(0, 1000))
            status, result, note = "completed", {"job": payload.get("job"), "answer": answer}, ""
            outcome["done"] += 1
        await agent.call("task_report", task_id=task["task_id"], status=status, result=result,
                         message=note)
        if params.get("echo"):
            await tell_delegator(agent, task, status, result, note)
            outcome["echoes"] += 1
            again = await agent.call("task_report", task_id=task["task_id"], status=status,
                                     result=result, message=note)
            if not again.get("success"):
                outcome["refused_reports"] += 1
