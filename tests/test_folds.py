"""Each service owns the fold of its own state from a stored log (actors/*_log.py): what
each reads is declared beside it, belongs to it, and the readers in actors/stored/ only
route records to them."""

from __future__ import annotations

from barnraise.actors import coordination_log, coordinator_log, regions_log, taskqueue_log
from barnraise.actors.stored import resume
from barnraise.sim.events import TASK_EVENTS
from barnraise.sim.tools import TOOLS
from tests.test_ops import ROOT, served_operations, spelt_operations

#: Each service's fold, by the service's name in the tool table.
FOLDS = {"coordinator": coordinator_log, "regions": regions_log, "tasks": taskqueue_log,
         "coordination": coordination_log}


def test_each_fold_reads_the_answers_of_its_own_services_tools_only() -> None:
    for service, module in FOLDS.items():
        for tool in getattr(module, "ANSWERS", ()):
            assert TOOLS[tool].service == service, (module.__name__, tool)
    owners = [tool for module in FOLDS.values() for tool in getattr(module, "ANSWERS", ())]
    assert len(owners) == len(set(owners)) == 9  # one fold per tool's answers


def test_the_resume_reads_the_record_types_it_always_read() -> None:
    # Stores already written are read by these types: the split must not have lost one.
    read = resume._FOLDED
    assert read == {
        "coordination_request", "coordination_response", "task_assignment", "task_result",
        "run_resumed", "task_created", "task_accepted", "task_completed", "task_failed",
        "task_cancelled", "task_blocked", "task_unblocked", "task_requeued",
        "task_dependencies_added", "approval_requested", "approval_resolved",
        "region_claimed", "region_renewed", "region_released", "lock_granted", "lock_released",
        "lock_expired", "barrier_released", "checkpoint_created", "conflict_detected"}
    answers = resume._ANSWERS_USED
    assert answers == {
        "session_create", "builder_place_tile", "builder_place_tiles", "builder_load_shader",
        "builder_assemble_cartridge", "build_checkpoint", "task_report", "task_delegate",
        "plan_start"}  # a plan's id is one of the coordinator's draws (since plan_start)


def test_the_world_reads_each_event_type_in_one_services_part() -> None:
    parts = [coordinator_log.WORLD_EVENTS, regions_log.WORLD_EVENTS,
             taskqueue_log.WORLD_EVENTS]
    assert sum(len(p) for p in parts) == len(frozenset().union(*parts))
    assert taskqueue_log.WORLD_EVENTS == TASK_EVENTS
    assert {"agent_joined", "agent_left", "agent_expired"} == coordinator_log.WORLD_EVENTS


def test_no_reader_of_a_stored_log_spells_a_services_operation() -> None:
    # The readers route by the names the services declare; only the services' own
    # modules (and their folds) spell them.
    served = set(served_operations(ROOT))
    stored = ROOT / "actors" / "stored"
    assert sorted(p.name for p in stored.glob("*.py")) == [
        "__init__.py", "image.py", "index.py", "rebuild.py", "resume.py", "run.py"]
    assert spelt_operations(ROOT, served, under="actors/stored") == []
    logs = sorted(p.name for p in (ROOT / "actors").glob("*_log.py"))
    assert logs == ["coordination_log.py", "coordinator_log.py", "regions_log.py",
                    "taskqueue_log.py"]
    found = spelt_operations(ROOT, served, under="actors")
    # the services' own modules spell them (they serve and send them); no fold does
    assert found and not [line for line in found if "_log.py:" in line], found


def test_the_engine_keeps_no_reader_of_a_stored_log_but_the_log() -> None:
    for name in ("restore.py", "rebuild.py", "rebuild_more.py", "stored.py", "ops.py"):
        assert not (ROOT / "sim" / name).exists(), name
