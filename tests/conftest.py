"""Shared fixtures: a dispatcher per runtime, and no actor left running after a test."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pykka
import pytest
from hypothesis import settings

from barnraise.sim.dispatch import Dispatcher, make_dispatcher

# `python -m pytest --hypothesis-profile=long` runs the property tests and the bad-input
# campaign (tests/test_campaign.py) twenty times deeper than the default CI run.
settings.register_profile("long", max_examples=2000, stateful_step_count=50)

MODES = ("deterministic", "realtime")

# Realtime tests run simulated time 50x faster than the wall clock: a 1 s
# simulated sleep takes 20 ms. Idle detection waits 0.1 s of wall time.
REALTIME_OPTIONS: dict[str, Any] = {"time_scale": 50.0, "idle_timeout": 0.1}


def new_dispatcher(mode: str, seed: int = 7, **options: Any) -> Dispatcher:
    if mode == "realtime":
        options = {**REALTIME_OPTIONS, **options}
    return make_dispatcher(mode, seed, **options)


@pytest.fixture(autouse=True)
def _stop_every_actor(request: pytest.FixtureRequest) -> Iterator[None]:
    """Every actor a test started is stopped after it; a module whose one server keeps
    its actors across its tests says ``MODULE_SERVER = True`` and stops them with it."""
    yield
    if not getattr(request.module, "MODULE_SERVER", False):
        pykka.ActorRegistry.stop_all(timeout=5)


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def dispatcher(mode: str) -> Iterator[Dispatcher]:
    d = new_dispatcher(mode)
    yield d
    d.shutdown(timeout=5)


@pytest.fixture
def det() -> Iterator[Dispatcher]:
    d = new_dispatcher("deterministic")
    yield d
    d.shutdown()
