"""Simulated session members and their behaviours.

A :class:`Participant` is an agent that joins a session, waits at the ``ready``
barrier until the whole crew has joined, then runs one behaviour: a plain
``async def behaviour(agent)`` that knows nothing of the dispatcher. The role
behaviours shipped here are :func:`architect`, :func:`builder`, :func:`tester`
and :func:`observer`; scenario authors may pass their own.
"""

from actors.agents.architect import architect, plan_blocks
from actors.agents.builder import builder
from actors.agents.observer import observer
from actors.agents.participant import Participant
from actors.agents.tester import tester

__all__ = ["Participant", "architect", "builder", "observer", "plan_blocks", "tester"]
