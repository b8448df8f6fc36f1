"""Seeded random streams: every random draw of a method (noise, random baselines, reference draws,
masks) comes from a stream derived from the call's seed and a key, so that results do not depend
on the chunking.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from xaikit.checks import check_int
from xaikit.errors import XaikitTypeError


def check_seed(seed: Any, name: str = "seed") -> int | None:
    """A call's seed: an int >= 0, or None (fresh randomness); anything else is an error naming
    ``name`` (a float or a string is not silently truncated or parsed)."""
    return check_int(seed, name, 0, allow_none=True, kind=XaikitTypeError)  # type: ignore[no-any-return]


def stream_seed(seed: int, *key: int) -> int:
    """A 63-bit seed for one random stream, derived from the call's seed and a key."""
    state = np.random.SeedSequence([int(seed) % (2**63), *key]).generate_state(2, np.uint32)
    return int(state[0]) << 31 | int(state[1]) >> 1
