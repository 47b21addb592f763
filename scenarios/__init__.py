"""Scenario scripts: one module per scenario, and the helpers they share.

A scenario is a module with a docstring, ``PARAMS`` (defaults), ``run(simu, **params)``
and ``check(summary)``; ``barnraise.runner`` finds, runs and summarises them. The two
errors here are how a scenario (or the runner, for it) refuses a request before
anything runs.
"""

__all__ = ["ParamError", "ScenarioError"]


class ScenarioError(ValueError):
    """The run request is wrong (which scenario, which parameters); nothing ran."""


class ParamError(ScenarioError):
    """A scenario's parameters do not fit together or name something missing.

    Scenarios raise it from ``run`` before they start anything, naming the
    parameter; the CLI prints it as one line and exits 2, like any bad request.
    """
