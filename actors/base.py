"""The actor base, by its parts (kept importable as one module).

The pieces live in their own modules: ``actors.errors`` (the errors a wait
raises), ``actors.effects`` (what behaviours await), ``actors.actor``
(:class:`A2AActor`) and ``actors.agent`` (:class:`Agent`).
"""

from actors.actor import A2AActor
from actors.agent import Agent
from actors.effects import DEFAULT_TIMEOUT, Behaviour
from actors.errors import DeliveryError, RequestError, WaitTimeout

__all__ = [
    "DEFAULT_TIMEOUT",
    "A2AActor",
    "Agent",
    "Behaviour",
    "DeliveryError",
    "RequestError",
    "WaitTimeout",
]
