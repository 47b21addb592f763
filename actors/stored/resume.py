"""What the services held when a stored run stopped, folded from its log: a realtime resume.

A realtime run cannot be re-executed (its interleaving came from the operating
system's threads), so an interrupted one resumes from its state: :func:`image_of`
folds the whole log into an :class:`~barnraise.actors.stored.image.Image`, each service's share
of each session at the last committed record, and ``Simulation.restore`` hands every
service its share (their ``restore`` methods) before any agent is let in.

Each service folds its own share, beside it (their module docs say what the log gives
and where from): the sessions, members, owners and checkpoint index
(:class:`barnraise.actors.coordinator_log.CoordinatorFold`); the canvas, blueprint, claims, shaders,
cartridges and what each checkpoint kept of them
(:class:`barnraise.actors.regions_log.RegionsFold`); the tasks and their checkpoints
(:class:`barnraise.actors.taskqueue_log.TasksFold`); the locks and barriers
(:class:`barnraise.actors.coordination_log.CoordinationFold`). This module is the pass that drives
them: one loop over the log's rows, the log's one decoder and pairing of calls with
answers (:mod:`barnraise.sim.log`), and the routing of each record to the fold of the service it
concerns: an operation by the service it asks (the coordinator's operations to every
service by regions' copy), an answer by the tool it answers, an event by its type.

Every answer the fold uses is checked against the call it was paired with (same
region, same task: each service's ``matches``); one that does not fit makes the image
unsupported. What the fold cannot give is refused by
:meth:`~barnraise.actors.stored.image.Image.unsupported` rather than guessed: a run under a fault
plan (lost and doubled letters break the pairing of calls and answers), a log whose
calls and answers do not pair. Role tokens are secrets the log keeps only stand-ins of:
a restored session has a new invite token and no role tokens.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable
from typing import Any, Final

from barnraise.actors import coordination_log, coordinator_log, regions_log, taskqueue_log
from barnraise.actors.coordination_log import CoordinationFold
from barnraise.actors.coordinator_log import CoordinatorFold
from barnraise.actors.regions_log import RegionsFold
from barnraise.actors.service import CHECKPOINT, ROLLBACK
from barnraise.actors.stored.image import Image, SessionImage
from barnraise.actors.taskqueue_log import TasksFold
from barnraise.sim.log import ANSWER, CALL, RESUMED, Calls, decode, is_answer, is_call
from barnraise.sim.store import StoredLog
from barnraise.sim.tools import SERVICES
from barnraise.sim.trace import DELIVER, EVENT, TraceRecord

__all__ = ["Image", "SessionImage", "fold", "image_of"]

#: Each service's check that an answer fits its call, by the tools whose answers it folds.
_MATCHES: Final[dict[str, Callable[[Any, dict[str, Any], dict[str, Any]], bool]]] = {
    tool: module.matches for module in (coordinator_log, regions_log, taskqueue_log)
    for tool in module.ANSWERS}
#: The tools whose answers the folds read (to any other call's answer the fold does
#: nothing, whatever the answer says).
_ANSWERS_USED: Final = frozenset(_MATCHES)
#: The record types the fold reads (the log holds others: status updates, heartbeats...).
_FOLDED: Final = frozenset({CALL, ANSWER, RESUMED, *taskqueue_log.LETTERS,
                            *coordinator_log.EVENTS, *regions_log.EVENTS,
                            *taskqueue_log.EVENTS, *coordination_log.EVENTS})


def _matches(tool: Any, args: dict[str, Any], answer: dict[str, Any]) -> bool:
    """Does a successful ``answer`` fit a call of ``tool`` with ``args``? (Each answer the
    fold uses names what its call was about: a check of the pairing, by the service
    that answers.)"""
    check = _MATCHES.get(tool) if isinstance(tool, str) else None
    return True if check is None else check(tool, args, answer)


class _Fold:
    def __init__(self, calls: Calls[tuple[int, Any]] | None = None) -> None:
        self.sessions: dict[str, SessionImage] = {}
        #: Each agent's calls to each service not yet answered: (seq, decoded body). The
        #: task queue's tools are not all synchronous (``task_accept`` asks regions
        #: first), but an agent waits for each answer before its next call to the queue;
        #: a pairing is only used where the answer names what the call made (a task
        #: id), which checks it (each service's ``matches``).
        self.calls: Calls[tuple[int, Any]] = Calls() if calls is None else calls
        self.serials: dict[str, int] = {"regions": 0, "tasks": 0, "coordinator": 0}
        self.problems: list[str] = []
        self.coordinator = CoordinatorFold(self.sessions, self.serials)
        self.regions = RegionsFold(self.sessions, self.serials)
        self.tasks = TasksFold(self.sessions, self.serials, self.calls)
        self.coordination = CoordinationFold()
        #: The folds that answer each tool's calls.
        self.answers: dict[str, Callable[[TraceRecord, str, dict[str, Any], dict[str, Any]],
                                         None]] = {}
        #: The folds that read each event type, in order.
        self.events: dict[str, list[Callable[[SessionImage, TraceRecord, dict[str, Any]],
                                             None]]] = {}
        for tools, answered in ((coordinator_log.ANSWERS, self.coordinator.answered),
                                (regions_log.ANSWERS, self.regions.answered),
                                (taskqueue_log.ANSWERS, self.tasks.answered)):
            self.answers.update(dict.fromkeys(tools, answered))
        for kinds, event in ((coordinator_log.EVENTS, self.coordinator.event),
                             (regions_log.EVENTS, self.regions.event),
                             (taskqueue_log.EVENTS, self.tasks.event),
                             (coordination_log.EVENTS, self.coordination.event)):
            for kind in kinds:
                self.events.setdefault(kind, []).append(event)

    @property
    def completions(self) -> dict[str, int]:
        return self.tasks.completions

    def session(self, sid: Any) -> SessionImage | None:
        return self.sessions.get(sid) if isinstance(sid, str) else None

    # -- deliveries ------------------------------------------------------------------------

    def fold_rows(self, rows: Iterable[tuple[Any, ...]], upto: int | None) -> tuple[int, float]:
        """Fold ``rows`` (a stored log's rows: seq, t, kind, sender, recipient, type,
        content, packed), those before seq ``upto``; (the seq after the last one, its
        time).

        One loop over plain tuples: a record the fold passes over costs a comparison or
        two, and the two kinds most of a log is made of (a call to a service, queued to
        pair with its answer, and the answer) are handled here without a record object.
        """
        calls = self.calls
        placed = self.regions.placed
        seq, at = 0, 0.0
        for rseq, t, kind, sender, recipient, rtype, content, packed in rows:
            if upto is not None and rseq >= upto:
                break
            seq, at = rseq + 1, t
            if packed:
                content = zlib.decompress(content)
            if kind == DELIVER:
                if rtype == ANSWER:
                    if not is_answer(kind, rtype, sender, recipient):
                        continue
                    paired = calls.answer(sender, recipient)
                    if paired is None:
                        continue
                    call = paired[1]
                    tool = call.get("tool") if type(call) is dict else None
                    if type(tool) is not str or tool not in _ANSWERS_USED:
                        continue  # answered() would do nothing with it: not even decoded
                    answer = decode(content)
                    if not placed(recipient, call, answer):
                        self.answered(TraceRecord(rseq, t, kind, sender, recipient, rtype,
                                                  content), call, answer)
                elif rtype == CALL:
                    body = decode(content)
                    if is_call(kind, rtype, sender, recipient):
                        calls.call(recipient, sender, (rseq, body))
                    elif sender in SERVICES and isinstance(body, dict):
                        self.internal(recipient, body)
                elif rtype in taskqueue_log.LETTERS and sender == "tasks":
                    self.tasks.letter(rtype, decode(content))
            elif kind == EVENT:
                self.event(TraceRecord(rseq, t, kind, sender, recipient, rtype, content))
        return seq, at

    def internal(self, recipient: str, content: dict[str, Any]) -> None:
        """An operation a service asked of ``recipient``: to the fold of the service asked
        (the coordinator's operations go to every service: regions' copy serves)."""
        op = content.get("op")
        if recipient == "tasks":
            if op in (CHECKPOINT, ROLLBACK):
                self.tasks.op(op, content)
        elif recipient == "regions":
            if op in coordinator_log.OPS:
                made = self.coordinator.op(op, content)
                if made is not None:
                    self.regions.on_session(made)
            else:
                self.regions.op(op, content)

    def answered(self, r: TraceRecord, call: dict[str, Any], answer: Any) -> None:
        if not isinstance(answer, dict) or not answer.get("success"):
            return
        tool, args = call.get("tool"), call.get("args") or {}
        if not _matches(tool, args, answer):
            self.problems.append(f"the answer at record {r.seq} does not fit the call it was "
                                 f"paired with ({tool} of {r.recipient}): the log's calls "
                                 "and answers cannot be paired")
            return
        fold = self.answers.get(tool) if isinstance(tool, str) else None
        if fold is not None:
            fold(r, str(tool), args, answer)

    def resumed(self) -> None:
        """The log goes on with a resumed run: what the stopped run left unanswered is
        never answered (its services are gone), so a later answer to the same agent is
        paired with that agent's calls from here on, not with a stale one."""
        self.tasks.resumed()
        self.calls.clear()

    # -- events --------------------------------------------------------------------------------

    def event(self, r: TraceRecord) -> None:
        kind = r.type
        if kind == RESUMED:
            self.resumed()
            return
        folds = self.events.get(kind)
        if folds is None or r.sender not in SERVICES:
            return  # (an agent's event of a service's type moved no service's state)
        body = decode(r.content)
        if not isinstance(body, dict):
            return
        s = self.session(body.get("session_id"))
        if s is None:
            return
        for fold_event in folds:
            fold_event(s, r, body)


def fold(records: Iterable[TraceRecord], *, faults: bool = False,
         upto: int | None = None, last: TraceRecord | None = None) -> Image:
    """The :class:`~barnraise.actors.stored.image.Image` after ``records`` (a log from its first
    record; with ``upto``, only its records before seq ``upto``).

    ``last``: the log's last record (before ``upto``), when ``records`` leave some out
    (:func:`image_of` reads only the types the fold uses). The image stands after it,
    not after the last record folded: :attr:`Image.seq` is where the stopped run's log
    ends and the resumed run's begins (``barnraise.scenarios._kit.run_records`` and the
    scenarios' reading of what was done before the kill count on it), whatever type
    the log's last records are of (a ``delegation.*`` event, a status update)."""
    return _folded(((*r, 0) for r in records), faults=faults, upto=upto, last=last)


def _folded(rows: Iterable[tuple[Any, ...]], *, faults: bool, upto: int | None,
            last: TraceRecord | None) -> Image:
    """:func:`fold` of a stored log's rows (:meth:`_Fold.fold_rows`)."""
    f = _Fold()
    if faults:
        f.problems.append("the run had a fault plan: lost and doubled letters break the "
                          "pairing of calls and answers the fold relies on")
    seq, at = f.fold_rows(rows, upto)
    if last is not None and last.seq >= seq and (upto is None or last.seq < upto):
        seq, at = last.seq + 1, max(at, last.t)
    f.tasks.finish(f.problems)
    f.regions.finish()
    f.coordinator.finish()
    f.serials["seq"] = seq
    return Image(seq, at, f.sessions, f.serials, f.problems, f.completions)


def image_of(run: StoredLog, upto: int | None = None) -> Image:
    """Fold every committed record of ``run`` (see the module doc), or those before seq
    ``upto``. The image stands after the log's last record (before ``upto``), of
    whatever type."""
    last = run.last()
    if last is not None and upto is not None and last.seq >= upto:
        tail = run.records(max(0, upto - 1))
        try:
            last = next(tail, None) if upto > 0 else None
        finally:
            tail.close()
    rows = run.rows(types=_FOLDED, upto=upto)
    try:
        faults = bool(run.info is not None and run.info.options.get("faults"))
        return _folded(rows, faults=faults, upto=upto, last=last)
    finally:
        rows.close()
