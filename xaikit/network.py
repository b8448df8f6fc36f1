"""The model side of training: :func:`build` a model with its optimizer, and a :class:`Network`
of tensor ops that runs one step per batch.

Framework code lives in the backend's training facet (``get_backend(model).train``); this module
is plain Python and loads a framework only when it meets one of its models. It hands the facet
the forward ops and the updates as plain ``(model, loss key)`` pairs.

* TensorFlow: each step (all ops, and in training the optimizer updates) is one
  ``tf.function``, traced once per mode, set of ops and input dtypes/shapes (the batch axis is
  left free); models run with ``training=True`` only in train mode.
* PyTorch: steps run eagerly; ``model.train()`` in train mode, otherwise ``model.eval()`` under
  ``torch.no_grad()``.
* Channel layout (torch): batches come from the pipeline channel-last ``(B, H, W, C)``. A 4-D
  floating input of a ModelOp is moved to the model's layout by the rule of
  :mod:`xaikit.layout` (``(B, C, H, W)`` when the model's first ``Conv2d`` reads ``C`` channels,
  the input's last axis is ``C`` and its axis 1 is not); anything else is passed as it is.
* Dtypes: float64 batch values become float32; integer or bool model inputs are cast to
  float32 (so raw uint8 images work); labels stay integers.
* :meth:`Network.run_step` returns the keys written by the ops, as numpy arrays.

Example:
    >>> import numpy as np, torch
    >>> from xaikit.op.tensorop import CrossEntropy, ModelOp, UpdateOp
    >>> model = build(lambda: torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Softmax(-1)), "sgd")
    >>> net = Network([ModelOp(model, "x", "y_pred"), CrossEntropy(("y_pred", "y"), "ce"),
    ...                UpdateOp(model, "ce")])
    >>> out = net.run_step({"x": np.ones((4, 3), np.float32), "y": np.zeros(4, np.int64)}, "train")
    >>> sorted(out), out["y_pred"].shape
    (['ce', 'y_pred'], (4, 2))
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from xaikit.backend import framework_of, load_backend
from xaikit.backend.facets import Step
from xaikit.errors import XaikitTypeError, XaikitValueError, describe
from xaikit.models import build, get_lr, get_weights, load_model, save_model, set_lr, set_weights
from xaikit.op.op import all_values, resolve
from xaikit.op.tensorop import ModelOp, TensorOp, UpdateOp

__all__ = ["Network", "build", "get_lr", "get_weights", "load_model", "save_model", "set_lr", "set_weights"]


class Network:
    """Tensor ops run once per batch: models, losses and updates.

    Args:
        ops: TensorOps (``ModelOp``, ``CrossEntropy``, ``LambdaOp``, ``UpdateOp``, ...) or
            schedulers of them (anything with ``get_current_value(epoch)``), run in order.

    Raises:
        XaikitTypeError: an op that is not a TensorOp.
        XaikitValueError: models of both frameworks in one network.
    """

    def __init__(self, ops: Iterable[Any]) -> None:
        self.ops = list(ops)
        models: list[Any] = []
        for item in self.ops:
            for op in all_values(item):
                if not isinstance(op, TensorOp):
                    raise XaikitTypeError(
                        f"Network ops must be TensorOps (or schedulers of them); got {describe(op)}"
                    )
                if isinstance(op, (ModelOp, UpdateOp)) and not any(op.model is m for m in models):
                    models.append(op.model)
        self.models = models
        frameworks = {framework_of(m) for m in models}
        if len(frameworks) > 1:
            raise XaikitValueError(
                f"a Network's models must all be of one framework; got {sorted(map(str, frameworks))}"
            )
        self.framework: str | None = frameworks.pop() if frameworks else None
        self._stepper: Any = None
        self._loaded: tuple[str, int, list[Any]] | None = None

    # ---- epochs ---------------------------------------------------------------------------------
    def load_epoch(self, mode: str, epoch: int) -> None:
        """Resolve schedulers and modes for an epoch; later :meth:`run_step` calls use them."""
        self._loaded = (mode, int(epoch), resolve(self.ops, mode, int(epoch)))

    def unload_epoch(self) -> None:
        """Forget the loaded epoch."""
        self._loaded = None

    def get_loss_keys(self) -> set[str]:
        """The keys that UpdateOps minimize (in any epoch)."""
        return {op.loss_name for item in self.ops for op in all_values(item) if isinstance(op, UpdateOp)}

    # ---- steps ------------------------------------------------------------------------------------
    def _ops_for(self, mode: str) -> list[Any]:
        if self._loaded is not None and self._loaded[0] == mode:
            return self._loaded[2]
        epoch = self._loaded[1] if self._loaded is not None else 1
        return resolve(self.ops, mode, epoch)

    def run_step(self, batch: dict[str, Any], mode: str) -> dict[str, Any]:
        """Run the ops of ``mode`` on one batch (training when ``mode == "train"``).

        Returns:
            The keys written by the ops (predictions, losses), as numpy arrays.
        """
        return self._run(self._ops_for(mode), batch, mode)

    def transform(self, batch: dict[str, Any], mode: str = "infer", epoch: int = 1) -> dict[str, Any]:
        """The batch plus the network's outputs, for ad-hoc use (no training unless mode is train)."""
        return {**batch, **self._run(resolve(self.ops, mode, epoch), batch, mode)}

    def _run(self, ops: list[Any], batch: dict[str, Any], mode: str) -> dict[str, Any]:
        if not isinstance(batch, dict):
            raise XaikitTypeError(f"batch must be a dict of arrays; got {describe(batch)}")
        if self.framework is None:
            raise XaikitValueError("the Network has no model (no ModelOp), so it has no framework to run in")
        needed: list[str] = []
        produced: set[str] = set()
        for op in ops:
            for k in op.inputs:
                if k in produced or k in needed:
                    continue
                if k not in batch:
                    raise XaikitValueError(
                        f"{type(op).__name__} reads key {k!r}, which is neither in the batch nor written by "
                        f"an earlier op; batch keys: {sorted(batch)}"
                    )
                needed.append(k)
            produced.update(op.outputs)
        if self._stepper is None:
            self._stepper = load_backend(self.framework).train.stepper()
        forward = [op for op in ops if not isinstance(op, UpdateOp)]
        updates = [(op.model, op.loss_name) for op in ops if isinstance(op, UpdateOp)]
        return dict(self._stepper.run_step(Step(forward, updates, batch, mode, needed, self.models)))

    def __repr__(self) -> str:
        return f"Network({len(self.ops)} ops, models={[getattr(m, 'model_name', '?') for m in self.models]})"
