"""Bad input gets a clear refusal and changes nothing: the findings of an adversarial pass
(issue 11), each as a class of inputs rather than one example."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from actors.regions import RegionManager, _tile_rows
from actors.world import Simulation
from sim.tools import ToolError
from tests.helpers import box, session_crew

#: Every character str.isdigit() accepts that int() does not (superscripts, circled
#: digits, ...): they once reached int() inside the region manager.
FALSE_DIGITS = [chr(c) for c in range(sys.maxunicode + 1)
                if chr(c).isdigit() and not chr(c).isdecimal()]


@pytest.fixture
def simu() -> Iterator[Simulation]:
    with Simulation(seed=11) as s:
        yield s


def test_every_false_digit_is_an_unknown_tile_not_a_crash() -> None:
    assert len(FALSE_DIGITS) > 100 and "²" in FALSE_DIGITS
    for char in FALSE_DIGITS:
        with pytest.raises(ToolError) as refused:
            _tile_rows([[char, "code"]], "tiles", (1, 2))
        assert refused.value.code == "invalid_argument" and "unknown tile" in str(refused.value)
    # decimal digits of other scripts are digits to int(), but not tile codes here
    for char in ("\u0663", "\u0969", "\uff13"):  # Arabic-Indic, Devanagari, fullwidth 3
        with pytest.raises(ToolError):
            _tile_rows([[char]], "tiles", (1, 1))
    assert _tile_rows([["3", " 2 ", "code"]], "tiles", (1, 3)).tolist() == [[3, 2, 2]]


def test_a_bool_is_never_a_tile(simu: Simulation) -> None:
    c = session_crew(simu)
    assert c.a.region_claim(region=box(0, 0, 2))["success"]
    for tiles in ([[True, 1], [1, 1]], [[1, 1], [1, False]], [[True, True], [True, True]]):
        placed = c.a.builder_place_tiles(region=box(0, 0, 2), tiles=tiles)
        assert (placed["error"], placed["field"]) == ("invalid_argument", "tiles"), placed
    assert c.a.builder_place_tiles(region=box(0, 0, 2), tiles=[[1, 1], [1, 1]])["success"]
    made = c.arch.call("session_create", session_name="bp", grid_size=2,
                       blueprint=[[True, 1], [1, 1]])
    assert made["error"] == "invalid_argument"


def test_a_bad_blueprint_is_refused_at_once_and_leaves_no_session(simu: Simulation) -> None:
    host = simu.client()
    for blueprint in ([["²", 1], [1, 1]], [[1, 1], [1, "①"]], [[1], [1, 1]]):
        made = host.call("session_create", session_name="bp", grid_size=2,
                         blueprint=blueprint)
        assert (made["error"], made["field"]) == ("invalid_argument", "blueprint"), made
    assert simu.now == 0.0  # answered, not timed out
    assert simu.sessions() == []
    assert simu.dispatcher.behaviour_errors == 0


def test_a_handler_that_raises_answers_internal_error_at_once(
        simu: Simulation, monkeypatch: pytest.MonkeyPatch) -> None:
    """The class behind the findings: a bug in a handler left its caller waiting for a
    reply that never came (60 simulated seconds, then no_reply), half the work done."""
    c = session_crew(simu)

    def broken(self: RegionManager, call: object) -> None:
        raise ValueError("a bug")

    monkeypatch.setattr(RegionManager, "tool_region_query", broken)
    monkeypatch.setattr(c.a._simulation.dispatcher.actor("regions"), "_tool_handlers", {})
    answer = c.a.region_query(region=box(0, 0, 3))
    assert answer["error"] == "internal_error" and "ValueError" in answer["message"]
    assert simu.now == 0.0
    assert simu.dispatcher.behaviour_errors == 1
    assert c.a.region_claim(region=box(0, 0, 3))["success"]  # the service goes on
