"""Model-level operations, the same call for torch and Keras: :func:`build` a model with its
optimizer and name, read and set its learning rate, copy its weights in memory, and save or
load them (atomically) on disk.

Each call goes to the backend's training facet (``get_backend(model).train``). This module sits
just above ``xaikit.backend``, so that traces (``BestModelSaver``, ``LRScheduler``, the
essential logger) reach models without importing the training loop above them;
:mod:`xaikit.network` re-exports every name.

Example:
    >>> import torch
    >>> model = build(lambda: torch.nn.Linear(3, 2), "sgd", model_name="lin")
    >>> model.model_name, get_lr(model)
    ('lin', 0.01)
    >>> set_lr(model, 0.1); get_lr(model)
    0.1
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from xaikit.backend import Backend, framework_of, load_backend
from xaikit.backend.facets import TrainFacet
from xaikit.checks import check_number
from xaikit.errors import XaikitTypeError, XaikitValueError, describe

__all__ = ["build", "get_lr", "get_weights", "load_model", "save_model", "set_lr", "set_weights"]

_NAMES = itertools.count()


def _backend_of(model: Any) -> Backend:
    fw = framework_of(model)
    if fw is None:
        raise XaikitTypeError(f"model must be a torch.nn.Module or a Keras model; got {describe(model)}")
    return load_backend(fw)


def _train_of(model: Any) -> TrainFacet:
    return _backend_of(model).train


def build(
    model_fn: Callable[[], Any],
    optimizer_fn: str | Callable[..., Any] | None = "adam",
    model_name: str | None = None,
) -> Any:
    """Make a model and give it an optimizer (``model.optimizer``) and a name (``model.model_name``).

    Args:
        model_fn: makes the model (a ``torch.nn.Module`` or a Keras model), e.g. ``LeNet``.
        optimizer_fn: ``"adam"``, ``"adamw"``, ``"sgd"``, ``"rmsprop"``, ``"adagrad"`` (framework
            defaults; SGD with lr 0.01), a callable (torch: ``lambda params: torch.optim.Adam(params,
            lr=...)``; TF: ``lambda: tf.keras.optimizers.Adam(...)``), or None for no optimizer.
        model_name: a name for logs and saved files (default ``"model"``, then ``"model1"``, ...).

    Returns:
        The model, with ``optimizer`` and ``model_name`` attributes.
    """
    if not callable(model_fn):
        raise XaikitTypeError(f"model_fn must be a function that makes the model; got {describe(model_fn)}")
    model = model_fn()
    if framework_of(model) is None or not _train_of(model).is_model(model):
        raise XaikitTypeError(
            f"model_fn must return a torch.nn.Module or a Keras model; got {describe(model)}"
        )
    model.optimizer = _train_of(model).make_optimizer(model, optimizer_fn)
    if model_name is None:
        n = next(_NAMES)
        model_name = "model" if n == 0 else f"model{n}"
    model.model_name = str(model_name)
    return model


def _check_optimizer(model: Any) -> None:
    if getattr(model, "optimizer", None) is None:
        raise XaikitValueError(
            f"the model has no optimizer; make it with xk.build(...); got {describe(model)}"
        )


def get_lr(model: Any) -> float:
    """The learning rate of the model's optimizer."""
    _check_optimizer(model)
    return float(_train_of(model).get_lr(model))


def set_lr(model: Any, lr: float) -> None:
    """Set the learning rate of the model's optimizer."""
    _check_optimizer(model)
    _train_of(model).set_lr(model, check_number(lr, "lr", low=0))


def get_weights(model: Any) -> Any:
    """An exact in-memory copy of the model's weights (and buffers), for :func:`set_weights`."""
    return _train_of(model).get_weights(model)


def set_weights(model: Any, weights: Any) -> None:
    """Restore weights from :func:`get_weights`."""
    _train_of(model).set_weights(model, weights)


def save_model(model: Any, path: str) -> str:
    """Write the model's weights to ``path`` atomically and return the file path.

    ``path`` may be a folder: the file is then ``<model_name>.pt`` (torch) or
    ``<model_name>.weights.h5`` (Keras; Keras file names must end that way).
    """
    return str(_train_of(model).save_model(model, str(path)))


def load_model(model: Any, path: str) -> None:
    """Load weights written by :func:`save_model` into the model."""
    _train_of(model).load_model(model, str(path))
