"""The one reader of a stored log (sim/log.py): its pairing of calls with answers, and the
readers that use it (the resume fold, the world's fold, the scenarios' calls_before)
pairing alike on a real log."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from barnraise import open_run
from barnraise.actors.stored.rebuild import pair_writes
from barnraise.actors.stored.resume import _Fold
from barnraise.runner import check_request, open_store, run_request
from barnraise.sim.log import RESUMED, Calls, decode, is_answer, is_call, paired
from barnraise.sim.trace import TraceRecord


def _log(*rows: tuple[str, str, str, str, Any]) -> list[TraceRecord]:
    return [TraceRecord(seq, float(seq), kind, sender, recipient, type_,
                        msgspec.json.encode(body))
            for seq, (kind, sender, recipient, type_, body) in enumerate(rows)]


def _call(agent: str, service: str, tool: str = "t") -> tuple[str, str, str, str, Any]:
    return ("deliver", agent, service, "coordination_request", {"tool": tool, "args": {}})


def _answer(service: str, agent: str, n: int = 0) -> tuple[str, str, str, str, Any]:
    return ("deliver", service, agent, "coordination_response", {"success": True, "n": n})


def _pairs(log: list[TraceRecord]) -> list[tuple[int, int | None]]:
    """(answer seq, the seq of the call it answers) for every answer of ``log``."""
    return [(r.seq, None if call is None else call.seq) for r, call in paired(log)
            if is_answer(r.kind, r.type, r.sender, r.recipient)]


def test_each_agents_calls_to_each_service_pair_with_its_answers_in_order() -> None:
    log = _log(_call("a", "regions"),         # 0
               _call("b", "regions"),         # 1
               _call("a", "regions"),         # 2
               _call("a", "tasks"),           # 3
               _answer("tasks", "a"),         # 4: a's call to tasks
               _answer("regions", "b"),       # 5: b's only call
               _answer("regions", "a"),       # 6: a's first call to regions
               _answer("regions", "a"))       # 7: a's second
    assert _pairs(log) == [(4, 3), (5, 1), (6, 0), (7, 2)]
    assert [r.seq for r, _ in paired(log)] == list(range(8))  # every record, in order


def test_an_answer_with_no_call_waiting_pairs_with_nothing() -> None:
    log = _log(_answer("regions", "a"), _call("a", "regions"), _answer("regions", "a"),
               _answer("regions", "a"))
    assert _pairs(log) == [(0, None), (2, 1), (3, None)]


def test_a_resumed_run_pairs_afresh_from_its_mark() -> None:
    log = _log(_call("a", "regions"),                                     # 0: never answered
               ("event", "system", "system", RESUMED, {"after_seq": 1}),  # 1
               _call("a", "regions"),                                     # 2
               _answer("regions", "a"))                                   # 3
    assert _pairs(log) == [(3, 2)]
    assert _pairs([r for r in log if r.type != RESUMED]) == [(3, 0)]


def test_what_services_tell_each_other_and_the_supervisors_notices_pair_with_nothing() -> None:
    log = _log(("deliver", "coordinator", "regions", "coordination_request", {"op": "x"}),
               ("deliver", "supervisor", "tasks", "coordination_request", {"op": "y"}),
               _call("a", "tasks"),
               ("deliver", "regions", "coordinator", "coordination_response", {}),
               _answer("tasks", "a"))
    assert not is_call("deliver", "coordination_request", "coordinator", "regions")
    assert is_call("deliver", "coordination_request", "supervisor", "tasks")
    assert not is_answer("deliver", "coordination_response", "regions", "coordinator")
    assert not is_call("event", "coordination_request", "a", "tasks")
    assert _pairs(log) == [(4, 2)]  # the supervisor's notice waits apart from a's calls


def test_calls_keeps_each_senders_calls_apart_and_clears() -> None:
    calls: Calls[int] = Calls()
    calls.call("regions", "a", 1)
    calls.call("regions", "a", 2)
    calls.call("tasks", "a", 3)
    assert calls.oldest("regions", "a") == 1 and calls.unanswered() == 3
    assert calls.answer("regions", "a") == 1
    assert calls.answer("regions", "b") is None and calls.oldest("tasks", "b") is None
    calls.clear()
    assert calls.unanswered() == 0 and calls.answer("regions", "a") is None


class _Watched(Calls[tuple[int, Any]]):
    """The resume fold's pairing, with every call it paired an answer with kept."""

    def __init__(self) -> None:
        super().__init__()
        self.paired: list[int | None] = []

    def answer(self, service: str, agent: str) -> tuple[int, Any] | None:
        call = super().answer(service, agent)
        self.paired.append(None if call is None else call[0])
        return call


def test_the_resume_fold_the_worlds_fold_and_paired_pair_a_real_log_alike(
        tmp_path: Path) -> None:
    """barnraise.actors.stored.resume goes through raw rows for speed and drives the pairing itself:
    on a
    realtime run's log it pairs every answer with the call paired() does, and the
    writes pair_writes finds succeeded are those whose paired answer says so."""
    request = check_request("kernel_build", 0, "realtime", grid_size=60, block=30,
                            builders=3, testers=1)
    result = run_request(request, store=open_store(request, tmp_path / "run.db"), record=False)
    assert result.success, result.summary
    run = open_run(tmp_path / "run.db")
    records = list(run.records())
    want = [(r.seq, None if call is None else call.seq) for r, call in paired(records)
            if is_answer(r.kind, r.type, r.sender, r.recipient)]
    assert len(want) > 100 and all(call is not None for _, call in want)

    watched = _Watched()
    fold = _Fold(watched)
    rows = run.rows()
    try:
        fold.fold_rows(rows, None)
    finally:
        rows.close()
    assert watched.paired == [call for _, call in want]

    writes = {call for seq, call in want
              if decode(records[seq].content).get("success") is True
              and decode(records[call].content).get("tool") in ("builder_place_tile",
                                                                 "builder_place_tiles")}
    pairing = pair_writes(records)
    assert set(pairing.placed) == writes and len(writes) > 10 and pairing.unanswered == 0
