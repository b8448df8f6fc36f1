"""What one sweep is: a :class:`Job` (B samples, S noise samples, M path steps: one row space),
built by the methods and run by :func:`~xaikit.xai._engine.sweep.sweep` (gradients) or
:func:`~xaikit.xai._engine.chunks.forward_rows` (forward passes only); the chunk plan
(:class:`~xaikit.xai._engine.plan.ChunkPlan`) reads its shapes and settings.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from xaikit.backend import Backend, T
from xaikit.xai._engine.kwargs import ModelKwargs

if TYPE_CHECKING:
    from xaikit.xai._engine.inputs import Inputs
    from xaikit.xai.registry import CallSettings

BaselineFn = Callable[[int], list[T]]
PathFn = Callable[[list[T], np.ndarray], tuple[list[T], list[T]]]


@dataclass
class Job:
    """One row space: B samples x S noise samples x M path steps (row ``r = (s * M + m) * B + b``).

    The gradient methods (:mod:`xaikit.xai.gradient`) build one per sweep;
    :func:`~xaikit.xai._engine.chunks.forward_rows` builds a forward-only one for its chunk plan.
    """

    bk: Backend
    model: Any
    inputs: list[T]  # clean inputs, (B, ...) each, on the model's device
    targets: T  # int64 (B,), the class explained for each sample
    n_noise: int = 1  # S
    sigma: list[T] | None = None  # per-input (B, 1, ...) noise std; None = no noise
    alphas: np.ndarray | None = None  # (M,) path nodes; None = plain gradients at the input
    weights: np.ndarray | None = None  # (M,) quadrature weights
    baselines: BaselineFn | None = None  # s -> one (B, ...) baseline per input
    magnitude: bool = False  # average squared per-path attributions
    seed: int = 0
    output: int | str = 0
    max_batch: int | str = "auto"
    dtype: str = "float32"  # rows and accumulators (float32 for a half-precision model)
    xla: bool = False  # compile the TF step with XLA
    model_kwargs: ModelKwargs | None = None  # extra forward arguments; per-sample ones follow the rows
    forward_only: bool = False  # rows cost a forward pass only (perturbation methods): own plan
    variance: bool = False  # VarGrad: the variance over noise samples instead of the mean
    #: s -> (B,) factors of each sample's path position (Expected Gradients' random points on the
    #: straight path): row = baseline + alpha_m * factor_b * (end - baseline); None: all 1
    row_alpha: Callable[[int], np.ndarray] | None = None
    #: a path that is not a straight line (Blur IG): ``path(ends, steps)`` gives, for the noisy
    #: inputs ``ends`` (one (B, ...) tensor per input) of one noise sample and the step indices
    #: ``steps`` (k,), the rows (k*B, ...) and the per-element multipliers (k*B, ...) of their
    #: gradients (the attribution is the sum over steps of gradient x multiplier); ``path_steps``
    #: is the number of steps M. ``baselines`` then only serves the completeness delta.
    path: PathFn | None = None
    path_steps: int = 1
    #: a custom path's start for the noisy inputs of one noise sample (for the completeness delta)
    path_base: Callable[[list[T]], list[T]] | None = None
    #: told the rows done after each chunk of the sweep (a progress bar's ``advance_to``); no sync
    progress: Callable[[int], None] | None = None
    #: a bound target object (:class:`xaikit.targets.Bound`): ``targets`` then holds each
    #: sample's index, and the backend scores rows through it
    target: Any = None

    @classmethod
    def over(cls, inp: Inputs, targets: T, settings: CallSettings) -> Job:
        """A job over prepared inputs (their backend, model, tensors, working dtype and model
        keyword arguments) explaining ``targets`` with a call's settings (seed, output,
        ``max_batch``, XLA, target object): plain gradients at the inputs until the method sets
        its row space (noise, path, baselines) on it."""
        return cls(
            bk=inp.bk,
            model=inp.model,
            inputs=inp.tensors,
            targets=targets,
            seed=settings.seed,
            output=settings.output,
            max_batch=settings.max_batch,
            dtype=inp.dtype,
            xla=bool(settings.xla),
            model_kwargs=inp.kwargs,
            target=settings.target,
        )

    @property
    def batch(self) -> int:
        return int(self.inputs[0].shape[0])

    @property
    def steps(self) -> int:
        if self.path is not None:
            return self.path_steps
        return 1 if self.alphas is None else len(self.alphas)

    @property
    def rows(self) -> int:
        return self.batch * self.steps * self.n_noise


def device_of(t: T) -> Any:
    """The device a tensor lives on (None where the framework has none)."""
    return getattr(t, "device", None)
