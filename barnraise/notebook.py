"""The notebook's two entry points: :func:`show` (a run's view inline) and :func:`explore`.

:func:`show` is :func:`barnraise.view.inline.show`; :func:`explore` makes a
:class:`barnraise.explorer.Explorer`, which needs ``ipywidgets`` (the
``barnraise[notebook]`` extra): without it, :func:`explore` raises ImportError saying
what to install, and nothing else in barnraise needs it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from barnraise.view.inline import InlineView, show

if TYPE_CHECKING:
    from barnraise.explorer import Explorer

__all__ = ["InlineView", "explore", "show"]


def explore(scenario: str, *, seed: int = 0) -> Explorer:
    """A widget to explore ``scenario`` (a shipped name or a file): its parameters as
    controls within its bounds, a seed, and ``.run(**params)`` (:mod:`barnraise.explorer`).
    ScenarioError for an unknown scenario."""
    try:
        from barnraise.explorer import Explorer
    except ImportError as exc:
        raise ImportError(f"barnraise.explore needs ipywidgets ({exc}): "
                          "pip install 'barnraise[notebook]'") from exc
    return Explorer(scenario, seed=seed)
