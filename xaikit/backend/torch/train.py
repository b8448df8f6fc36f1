"""PyTorch training facet (``get_backend(model).train``): optimizers, weights I/O, the step.

The step runs eagerly. Training: ``model.train()``, every forward op, then one optimizer step
per ``(model, loss key)`` update (gradients of all losses are computed first, then applied, so
several models can be updated from one graph). Eval, test and infer: ``model.eval()`` under
``torch.no_grad()``.

Channel layout: images come from the pipeline channel-last ``(B, H, W, C)``; a model input is
moved to the model's layout by the rule of :mod:`xaikit.layout` (a view in ``channels_last``
memory format, which convolutions on CPU run fast).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from xaikit.backend.facets import Step, Stepper, TrainFacet, optimizer_factory
from xaikit.backend.registry import load_backend
from xaikit.errors import XaikitValueError, describe
from xaikit.files import atomic_path
from xaikit.layout import model_move

_OPTIMIZERS: dict[str, Callable[..., Any]] = {
    "adam": lambda p: torch.optim.Adam(p, lr=1e-3),
    "adamw": lambda p: torch.optim.AdamW(p, lr=1e-3),
    "sgd": lambda p: torch.optim.SGD(p, lr=0.01),
    "rmsprop": lambda p: torch.optim.RMSprop(p, lr=1e-3),
    "adagrad": lambda p: torch.optim.Adagrad(p, lr=1e-3),
}


class Train(TrainFacet):
    """The training facet of the torch backend."""

    def is_model(self, obj: Any) -> bool:
        return isinstance(obj, torch.nn.Module)

    def make_optimizer(self, model: Any, optimizer_fn: Any) -> Any:
        if optimizer_fn is None:
            return None
        return optimizer_factory(optimizer_fn, _OPTIMIZERS)(model.parameters())

    def get_lr(self, model: Any) -> float:
        return float(model.optimizer.param_groups[0]["lr"])

    def set_lr(self, model: Any, lr: float) -> None:
        for group in model.optimizer.param_groups:
            group["lr"] = float(lr)

    def get_weights(self, model: Any) -> dict[str, Any]:
        return {k: v.detach().clone() for k, v in model.state_dict().items()}

    def set_weights(self, model: Any, weights: Any) -> None:
        model.load_state_dict(weights)

    def save_model(self, model: Any, path: str) -> str:
        if os.path.isdir(path):
            path = os.path.join(path, f"{getattr(model, 'model_name', 'model')}.pt")
        with atomic_path(path) as tmp:
            torch.save(model.state_dict(), tmp)
        return path

    def load_model(self, model: Any, path: str) -> None:
        model.load_state_dict(torch.load(path, map_location=_device(model), weights_only=True))

    def stepper(self) -> Stepper:
        return TorchStepper()


def _device(model: Any) -> Any:
    for p in model.parameters():
        return p.device
    return torch.device("cpu")


def to_model_layout(model: Any, x: Any) -> Any:
    """One input tensor in the model's layout (the rule of :mod:`xaikit.layout`)."""
    if x.ndim != 4 or not x.is_floating_point():
        return x
    how = model_move(tuple(x.shape), load_backend("torch").model_layout(model))
    if how is None:
        return x
    order = [0, 1, 2, 3]
    order.insert(how[1], order.pop(how[0]))
    return x.permute(*order)


# ---- what the framework-neutral ops call ---------------------------------------------------------
class Functions:
    """Tensor functions that TensorOps use (the same names exist for TF)."""

    name = "torch"

    @staticmethod
    def call_model(model: Any, inputs: Sequence[Any], trainable: bool, training: bool = True) -> Any:
        xs = []
        for x in inputs:
            if not x.is_floating_point():
                x = x.float()
            xs.append(to_model_layout(model, x))
        if trainable:
            return model(*xs)
        with torch.no_grad():
            return model(*xs)

    @staticmethod
    def cross_entropy(y_pred: Any, y_true: Any, from_logits: bool, average: bool) -> Any:
        eps = 1e-7
        if y_pred.ndim == 1 or y_pred.shape[-1] == 1:  # binary
            p = y_pred.reshape(-1)
            t = y_true.reshape(-1).to(p.dtype)
            if from_logits:
                loss = torch.nn.functional.binary_cross_entropy_with_logits(p, t, reduction="none")
            else:
                p = p.clamp(eps, 1 - eps)
                loss = -(t * torch.log(p) + (1 - t) * torch.log(1 - p))
        else:
            logp = torch.log_softmax(y_pred, dim=-1) if from_logits else torch.log(y_pred.clamp(eps, 1 - eps))
            if y_true.shape == y_pred.shape:  # one-hot / soft labels
                loss = -(y_true.to(logp.dtype) * logp).sum(dim=-1)
            else:
                idx = y_true.reshape(-1).long()
                loss = -logp.gather(1, idx[:, None])[:, 0]
        return loss.mean() if average else loss

    @staticmethod
    def reduce_mean(x: Any) -> Any:
        return x.float().mean() if not x.is_floating_point() else x.mean()


def _as_tensor(value: Any, device: Any) -> Any:
    if isinstance(value, torch.Tensor):
        t = value
    else:
        arr = np.asarray(value)
        if arr.dtype == np.float64:
            arr = arr.astype(np.float32)
        if arr.dtype.kind not in "biuf":
            raise XaikitValueError(f"batch values fed to the network must be numeric; got {describe(arr)}")
        t = torch.from_numpy(np.ascontiguousarray(arr))
    return t.to(device)


def _to_numpy(t: Any) -> Any:
    if isinstance(t, torch.Tensor):
        t = t.detach()
        if t.dtype == torch.bfloat16:
            t = t.float()
        return t.cpu().numpy()
    return t


class TorchStepper(Stepper):
    """Eager steps: nothing to cache between batches."""

    def run_step(self, step: Step) -> dict[str, Any]:
        training, mode, updates = step.training, step.mode, step.updates
        device = _device(step.models[0]) if step.models else torch.device("cpu")
        data = {k: _as_tensor(step.batch[k], device) for k in step.needed}
        for m in step.models:
            if m.training != training:
                m.train(training)
        written: list[str] = []
        state = {"mode": mode, "fw": Functions, "training": training}
        with torch.set_grad_enabled(training):
            for op in step.ops:
                ins = [data[k] for k in op.inputs]
                out = op.forward(ins[0] if len(ins) == 1 else ins, state)
                outs = [out] if len(op.outputs) == 1 else list(out)
                for k, v in zip(op.outputs, outs):
                    data[k] = v
                    if k not in written:
                        written.append(k)
        if training and updates:
            grads = []
            for i, (model, loss_key) in enumerate(updates):
                loss = data[loss_key]
                if loss.ndim > 0:
                    loss = loss.mean()
                params = [p for p in model.parameters() if p.requires_grad]
                g = torch.autograd.grad(loss, params, retain_graph=i < len(updates) - 1, allow_unused=True)
                grads.append((model, params, g))
            for model, params, g in grads:
                model.optimizer.zero_grad(set_to_none=True)
                for p, gi in zip(params, g):
                    p.grad = gi
                model.optimizer.step()
        return {k: _to_numpy(data[k]) for k in written}
