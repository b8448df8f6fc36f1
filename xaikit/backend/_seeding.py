"""Seed a framework's global random state (used by the demo and the gallery scripts)."""

from __future__ import annotations

import random

import numpy as np

__all__ = ["limit_threads", "seed_everything"]


def seed_everything(framework: str, seed: int) -> None:
    """Seed Python, numpy and ``framework`` (``"torch"`` or ``"tf"``) from ``seed``."""
    random.seed(seed)
    np.random.seed(seed % (2**32))  # noqa: NPY002 (user code may use the global generator)
    if framework == "torch":
        import torch

        torch.manual_seed(seed)
    elif framework == "tf":
        import keras

        keras.utils.set_random_seed(seed)


def limit_threads(framework: str, threads: int) -> None:
    """Use at most ``threads`` CPU threads for ``framework``'s kernels (call before it starts work)."""
    if framework == "torch":
        import torch

        torch.set_num_threads(threads)
    elif framework == "tf":
        import tensorflow as tf

        try:
            tf.config.threading.set_intra_op_parallelism_threads(threads)
            tf.config.threading.set_inter_op_parallelism_threads(max(threads, 2))
        except RuntimeError:  # TF already initialized: keep its settings
            pass
