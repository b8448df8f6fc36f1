"""TensorFlow's bfloat16 matmul under a capped oneDNN instruction set.

``make test-numerics`` reruns the numerics tests with ``ONEDNN_MAX_CPU_ISA`` held below the
CPU's own (SSE41 by default). On a CPU with AVX-512 BF16 (an AMD EPYC of this project's CI pool),
TensorFlow 2.21's bfloat16 ``MatMul`` then dies with a segmentation fault: plain
``tf.matmul`` of two bfloat16 tensors, no xaikit involved, also under ``AVX2``; it runs under
``AVX512_CORE`` and with no cap. A crash takes the pytest worker with it (and can hang
pytest-xdist's controller), so the TF bfloat16 tests ask :func:`skip_if_tf_bfloat16_crashes`
first: one throw-away process per test session tries the matmul under the current environment.
With no cap nothing is probed and nothing is skipped.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys

import pytest

_PROBE = (
    "import tensorflow as tf\n"
    "a = tf.ones((4, 5), tf.bfloat16)\n"
    "print(float(tf.reduce_sum(tf.cast(tf.matmul(a, tf.ones((5, 3), tf.bfloat16)), tf.float32))))\n"
)


@functools.lru_cache(maxsize=1)
def tf_bfloat16_crash() -> str | None:
    """Why TF's bfloat16 matmul cannot run in this environment, or None when it runs (or no
    oneDNN cap is set, where it always has)."""
    isa = os.environ.get("ONEDNN_MAX_CPU_ISA", "").strip().upper()
    if isa in ("", "DEFAULT", "ALL"):
        return None
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    try:
        done = subprocess.run(
            [sys.executable, "-c", _PROBE], env=env, capture_output=True, timeout=300, check=False
        )
    except subprocess.TimeoutExpired:
        return f"a bfloat16 tf.matmul did not finish in 300 s under ONEDNN_MAX_CPU_ISA={isa}"
    if done.returncode == 0 and done.stdout.strip().endswith(b"60.0"):
        return None
    return (
        f"TensorFlow's bfloat16 tf.matmul crashes under ONEDNN_MAX_CPU_ISA={isa} on this CPU "
        f"(exit status {done.returncode}, a TensorFlow/oneDNN fault, not xaikit's; it runs with no cap)"
    )


def skip_if_tf_bfloat16_crashes() -> None:
    """Skip (with the reason) a TF bfloat16 test where TF's bfloat16 matmul crashes."""
    reason = tf_bfloat16_crash()
    if reason is not None:
        pytest.skip(reason)
