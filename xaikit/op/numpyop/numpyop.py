"""Pipeline ops: numpy transforms applied to batches before they reach the model.

Every op works on a whole batch at once: each input is an array whose first axis indexes the
samples of the batch (so images are ``(B, H, W, C)`` channel-last). Random ops draw their
parameters *per sample* from the generator that the pipeline passes in (seeded from the
pipeline's seed and the epoch), so the result is the same as transforming the samples one by
one, only faster.

To write a custom op, subclass :class:`NumpyOp` and implement either ``forward(data, state)``
(one sample at a time, like the reference: ``data`` is one array per input, or the array
itself when there is one input; ``state["rng"]`` is the generator) or, for speed,
``forward_batch(data, rng)`` (a list of batch arrays in, a list out).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from xaikit.checks import check_number
from xaikit.errors import XaikitTypeError, XaikitValueError, describe
from xaikit.op.op import Keys, Op

__all__ = ["LambdaOp", "NumpyOp", "Sometimes"]


class NumpyOp(Op):
    """Base of pipeline ops (see the module docstring for the two ways to implement one).

    Takes :class:`~xaikit.op.op.Op`'s ``inputs``, ``outputs`` and ``mode``; ``outputs``
    defaults to the inputs (the op works in place).
    """

    def __init__(self, inputs: Keys = None, outputs: Keys = None, mode: Keys = None) -> None:
        super().__init__(inputs, inputs if outputs is None else outputs, mode)

    def forward(self, data: Any, state: dict[str, Any]) -> Any:
        """Transform one sample (override this or :meth:`forward_batch`)."""
        raise NotImplementedError(f"{type(self).__name__} must implement forward or forward_batch")

    def forward_batch(self, data: list[np.ndarray], rng: np.random.Generator) -> list[np.ndarray]:
        """Transform a batch: one array per input in, one array per output out.

        The default calls :meth:`forward` on each sample and stacks the results.
        """
        n = len(data[0]) if data else 0
        state = {"rng": rng}
        rows: list[list[Any]] = []
        for i in range(n):
            sample = [d[i] for d in data]
            out = self.forward(sample[0] if len(sample) == 1 else sample, state)
            rows.append([out] if len(self.outputs) == 1 else list(out))
        if not rows:
            return [np.asarray(d) for d in data[: len(self.outputs)]]
        return [np.stack([np.asarray(r[j]) for r in rows]) for j in range(len(self.outputs))]


class LambdaOp(NumpyOp):
    """Apply a function to whole batch arrays: ``fn(*inputs) -> output or tuple of outputs``.

    Example:
        >>> op = LambdaOp(lambda x: x * 2, inputs="x", outputs="x2")
        >>> op.forward_batch([np.array([1, 2])], np.random.default_rng(0))[0].tolist()
        [2, 4]
    """

    def __init__(
        self,
        fn: Any,
        inputs: str | Iterable[str] | None = None,
        outputs: str | Iterable[str] | None = None,
        mode: str | Iterable[str] | None = None,
    ) -> None:
        if not callable(fn):
            raise XaikitTypeError(f"fn must be callable; got {describe(fn)}")
        super().__init__(inputs, outputs, mode)
        self.fn = fn

    def forward_batch(self, data: list[np.ndarray], rng: np.random.Generator) -> list[np.ndarray]:
        out = self.fn(*data)
        return [out] if len(self.outputs) == 1 else list(out)


class Sometimes(NumpyOp):
    """Apply an op to a random subset of the samples: each sample with probability ``prob``.

    Samples that are skipped keep their inputs unchanged, so the inner op must write as many
    outputs as it reads, each with the shape of its input (a flip, a dropout, a colour change).

    Args:
        numpy_op: the op to apply sometimes.
        prob: the probability, per sample, of applying it.
        mode: modes; by default those of the inner op.

    Example:
        >>> from xaikit.op.numpyop import HorizontalFlip
        >>> op = Sometimes(HorizontalFlip(inputs="x"), prob=0.5)
        >>> out = op.forward_batch([np.arange(8).reshape(4, 1, 2, 1)], np.random.default_rng(1))[0]
        >>> out[:, 0, :, 0].tolist()
        [[0, 1], [2, 3], [5, 4], [6, 7]]
    """

    def __init__(self, numpy_op: NumpyOp, prob: float = 0.5, mode: str | Iterable[str] | None = None) -> None:
        if not isinstance(numpy_op, NumpyOp):
            raise XaikitTypeError(f"numpy_op must be a NumpyOp; got {describe(numpy_op)}")
        check_number(prob, "prob", low=0, high=1)
        if len(numpy_op.inputs) != len(numpy_op.outputs):
            raise XaikitValueError(
                f"Sometimes needs an op with as many outputs as inputs; {type(numpy_op).__name__} has "
                f"inputs {numpy_op.inputs} and outputs {numpy_op.outputs}"
            )
        super().__init__(numpy_op.inputs, numpy_op.outputs, None)
        self.mode = numpy_op.mode if mode is None else Op(mode=mode).mode
        self.numpy_op = numpy_op
        self.prob = float(prob)

    def forward_batch(self, data: list[np.ndarray], rng: np.random.Generator) -> list[np.ndarray]:
        n = len(data[0])
        chosen = np.flatnonzero(rng.random(n) < self.prob)
        changed = self.numpy_op.forward_batch([d[chosen] for d in data], rng) if chosen.size else None
        outs = []
        for j, d in enumerate(data):
            if changed is None:
                outs.append(d.copy())
                continue
            new = np.asarray(changed[j])
            if new.shape[1:] != d.shape[1:]:
                raise XaikitValueError(
                    f"Sometimes({type(self.numpy_op).__name__}) changed the shape of {self.inputs[j]!r} "
                    f"from {d.shape[1:]} to {new.shape[1:]} per sample; it must keep shapes"
                )
            out = d.astype(np.result_type(d, new), copy=True)
            out[chosen] = new
            outs.append(out)
        return outs
