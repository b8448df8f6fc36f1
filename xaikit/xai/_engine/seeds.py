"""Seeded random streams: every random draw of a method (noise, random baselines, reference draws,
masks) comes from a stream derived from the call's seed and a key, so that results do not depend
on the chunking.
"""

from __future__ import annotations

import numpy as np


def stream_seed(seed: int, *key: int) -> int:
    """A 63-bit seed for one random stream, derived from the call's seed and a key."""
    state = np.random.SeedSequence([int(seed) % (2**63), *key]).generate_state(2, np.uint32)
    return int(state[0]) << 31 | int(state[1]) >> 1
