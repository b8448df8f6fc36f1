"""Network ops: run on framework tensors inside the network's step, the same code for both
frameworks (framework work goes through ``state["fw"]``, the backend's tensor functions)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from xaikit.errors import XaikitTypeError, XaikitValueError, describe
from xaikit.op.op import Op

__all__ = ["CrossEntropy", "LambdaOp", "ModelOp", "TensorOp", "UpdateOp"]

Keys = str | Iterable[str] | None


class TensorOp(Op):
    """Base of network ops. Subclasses implement ``forward(data, state)``: ``data`` is the input
    tensor (or a list of them for several inputs); ``state`` holds ``"mode"``, ``"training"``
    and ``"fw"`` (framework functions: ``call_model``, ``cross_entropy``, ``reduce_mean``)."""

    def forward(self, data: Any, state: dict[str, Any]) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must implement forward(data, state)")


class ModelOp(TensorOp):
    """Call a model: ``outputs = model(inputs)``.

    For torch models, channel-last image batches are moved to channel-first when the model's
    first convolution asks for it (see :mod:`xaikit.network`).

    Args:
        model: a model made by :func:`xaikit.network.build`.
        inputs: key (or keys, for a model of several inputs) fed to the model.
        outputs: key (or keys, for a model with several outputs) written.
        mode: modes the op runs in.
        trainable: False freezes the model in this op (inference mode, no gradients).
    """

    def __init__(
        self, model: Any, inputs: Keys, outputs: Keys, mode: Keys = None, trainable: bool = True
    ) -> None:
        super().__init__(inputs, outputs, mode)
        if not self.inputs or not self.outputs:
            raise XaikitValueError(f"ModelOp needs inputs and outputs; got {self.inputs} and {self.outputs}")
        if callable(model) is False:
            raise XaikitTypeError(f"model must be a torch or Keras model; got {describe(model)}")
        self.model = model
        self.trainable = bool(trainable)

    def forward(self, data: Any, state: dict[str, Any]) -> Any:
        xs = data if len(self.inputs) > 1 else [data]
        out = state["fw"].call_model(self.model, xs, self.trainable, state["training"])
        if len(self.outputs) > 1:
            if isinstance(out, dict):
                return [out[k] for k in self.outputs]
            if not isinstance(out, (list, tuple)) or len(out) != len(self.outputs):
                raise XaikitValueError(
                    f"ModelOp has {len(self.outputs)} outputs {self.outputs} but the model returned "
                    f"{describe(out)}"
                )
            return list(out)
        return out


class CrossEntropy(TensorOp):
    """Cross-entropy between predictions and labels.

    Labels may be class indices (``(B,)`` or ``(B, 1)`` ints), one-hot/soft labels with the
    predictions' shape, or 0/1 targets for a single-output (binary) model.

    Args:
        inputs: ``(y_pred, y_true)`` keys.
        outputs: key of the loss.
        mode: modes the op runs in.
        from_logits: whether ``y_pred`` are logits; the default False expects probabilities
            (the bundled LeNets end in softmax), clipped to ``[1e-7, 1 - 1e-7]``.
        average_loss: True for the batch mean (a scalar); False for the per-sample loss (B,).
    """

    def __init__(
        self,
        inputs: Keys,
        outputs: Keys,
        mode: Keys = None,
        from_logits: bool = False,
        average_loss: bool = True,
    ) -> None:
        super().__init__(inputs, outputs, mode)
        if len(self.inputs) != 2 or len(self.outputs) != 1:
            raise XaikitValueError(
                "CrossEntropy needs inputs (y_pred, y_true) and one output; "
                f"got {self.inputs} and {self.outputs}"
            )
        self.from_logits = bool(from_logits)
        self.average_loss = bool(average_loss)

    def forward(self, data: Any, state: dict[str, Any]) -> Any:
        y_pred, y_true = data
        return state["fw"].cross_entropy(y_pred, y_true, self.from_logits, self.average_loss)


class LambdaOp(TensorOp):
    """Apply a function to tensors: ``outputs = fn(*inputs)`` (e.g. ``xk.backend.reduce_mean``)."""

    def __init__(
        self, fn: Callable[..., Any], inputs: Keys = None, outputs: Keys = None, mode: Keys = None
    ) -> None:
        super().__init__(inputs, outputs, mode)
        if not callable(fn):
            raise XaikitTypeError(f"fn must be callable; got {describe(fn)}")
        self.fn = fn

    def forward(self, data: Any, state: dict[str, Any]) -> Any:
        if len(self.inputs) > 1:
            return self.fn(*data)
        return self.fn(data) if self.inputs else self.fn()


class UpdateOp(TensorOp):
    """Minimize ``loss_name`` with the model's optimizer (a vector loss is averaged first).

    Runs only in training. The network applies all updates after the step's other ops, with
    gradients computed before any weight changes.
    """

    def __init__(self, model: Any, loss_name: str, mode: Keys = "train") -> None:
        if not isinstance(loss_name, str):
            raise XaikitTypeError(f"loss_name must be a key name; got {describe(loss_name)}")
        super().__init__(loss_name, None, mode)
        self.model = model
        self.loss_name = loss_name
        if getattr(model, "optimizer", None) is None:
            raise XaikitValueError(
                "UpdateOp needs a model with an optimizer; make it with xk.build(model_fn, optimizer_fn=...)"
            )

    def runs_in(self, mode: str) -> bool:
        return mode == "train" and super().runs_in(mode)
