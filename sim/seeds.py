"""One root seed, split by name: every actor's (and scenario's) own random stream.

A stream is keyed by a name, not by the order of creation, so adding an actor
does not shift the draws of the others, and the key is a SHA-256 of the name,
so it does not depend on ``PYTHONHASHSEED``.
"""

from __future__ import annotations

import hashlib

import numpy as np

__all__ = ["seed_for"]


def seed_for(root_seed: int, name: str) -> np.random.SeedSequence:
    """The seed sequence of the actor called ``name``: stable across processes."""
    key = int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big")
    return np.random.SeedSequence(entropy=root_seed, spawn_key=(key,))
