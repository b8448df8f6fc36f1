"""Extra forward arguments (``model_kwargs=``), captum's ``additional_forward_args`` by keyword.

The rule: a tensor or array whose first axis is the batch size B holds one value per sample
(*per-sample*): every chunk of rows gets, for each row, its own sample's value (sliced and
repeated with the rows, on the model's device; a numpy array becomes a framework tensor of
its own dtype). Anything else (a scalar, a tensor of another first size, a string, None, a
tuple) is *fixed*: passed unchanged to every chunk. On a path (Integrated Gradients) a
per-sample value is not interpolated: every row of sample b gets b's value, at the input and at
the baseline alike.

Tensors are copied where they share the caller's memory (once per call): a model that writes one
in place is refused (see the backend's version check) and the caller's values stay as they were.

A Python list of exactly B items is refused: it looks per-sample but would be passed unchanged
to chunks of other sizes; the message says how to say which is meant.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from xaikit.backend import Backend
from xaikit.errors import XaikitTypeError, XaikitValueError, describe

__all__ = ["ModelKwargs", "check_model_kwargs", "merge_model_kwargs"]


@dataclass
class ModelKwargs:
    """Checked ``model_kwargs`` of one call: per-sample tensors (first axis B, on the model's
    device) and fixed values.

    Example:
        >>> import torch
        >>> from xaikit.backend import get_backend
        >>> kw = check_model_kwargs(get_backend(torch.zeros(1)), {"scale": torch.arange(3.0), "flag": True}, 3, None)
        >>> sorted(kw.per_sample), kw.fixed
        (['scale'], {'flag': True})
        >>> kw.rows(np.array([2, 0, 2]))["scale"].tolist()
        [2.0, 0.0, 2.0]
    """

    bk: Backend
    batch: int
    per_sample: dict[str, Any] = field(default_factory=dict)
    fixed: dict[str, Any] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.per_sample or self.fixed)

    def rows(self, samples: np.ndarray) -> dict[str, Any]:
        """The keyword arguments of a chunk whose rows belong to ``samples`` (one sample index
        per row, in row order)."""
        out = dict(self.fixed)
        if not self.per_sample:
            return out
        samples = np.asarray(samples, dtype=np.int64)
        whole = len(samples) == self.batch and np.array_equal(samples, np.arange(self.batch))
        for key, value in self.per_sample.items():
            if whole:
                out[key] = value
            else:
                out[key] = self.bk.gather(value, self.bk.index(samples, getattr(value, "device", None)))
        return out

    def span(self, r0: int, r1: int, rows: int | None = None) -> dict[str, Any]:
        """The keyword arguments of rows [r0, r1) of a row space ordered sample fastest (row r
        belongs to sample r % B), padded to ``rows`` rows by repeating the first one."""
        samples = np.arange(r0, r1) % self.batch
        if rows is not None and rows > len(samples):
            samples = np.concatenate([samples, np.full(rows - len(samples), samples[0])])
        return self.rows(samples)


def check_model_kwargs(bk: Backend, model_kwargs: Any, batch: int, device: Any) -> ModelKwargs:
    """Check ``model_kwargs`` and split it into per-sample and fixed values (see the module).

    Args:
        bk: the model's backend.
        model_kwargs: None or a dict ``{argument name: value}``.
        batch: the number of samples B.
        device: the model's device (per-sample values are moved there).

    Raises:
        XaikitTypeError: not a dict, or a key that is not a string.
        XaikitValueError: a list of exactly B items (say per-sample or fixed explicitly).
    """
    out = ModelKwargs(bk, int(batch))
    if model_kwargs is None:
        return out
    if not isinstance(model_kwargs, Mapping):
        raise XaikitTypeError(
            "model_kwargs must be a dict {argument name: value} of extra keyword arguments of the "
            f"model's forward call; got {describe(model_kwargs)}"
        )
    for key, value in model_kwargs.items():
        if not isinstance(key, str) or not key.isidentifier():
            raise XaikitTypeError(
                f"model_kwargs keys must be argument names (str); got key {key!r} ({type(key).__name__})"
            )
        if isinstance(value, list) and len(value) == batch and batch > 1:
            raise XaikitValueError(
                f"model_kwargs[{key!r}] is a list of {len(value)} items, one per sample (batch size "
                f"{batch}), but only tensors and arrays follow the rows (a list would be passed "
                "unchanged to chunks of other sizes): pass np.asarray(value) or a tensor to give each "
                "row its sample's value, or tuple(value) to pass it unchanged to every chunk"
            )
        if _per_sample(bk, value, batch):
            host = value if bk.is_tensor(value) else np.asarray(value)
            out.per_sample[key] = bk.unshared(bk.as_tensor(host, device, None), host)
        elif bk.is_tensor(value):  # a copy, so that a model writing it cannot reach the caller's
            out.fixed[key] = bk.unshared(value, value)
        else:
            out.fixed[key] = value
    return out


def _per_sample(bk: Backend, value: Any, batch: int) -> bool:
    if not (bk.is_tensor(value) or isinstance(value, np.ndarray)):
        return False
    shape = tuple(getattr(value, "shape", ()))
    return len(shape) >= 1 and shape[0] is not None and int(shape[0]) == batch


def merge_model_kwargs(base: Any, call: Any) -> dict[str, Any] | None:
    """A net's ``model_kwargs`` updated by a call's (the call wins key by key); None when both are."""
    if base is None and call is None:
        return None
    merged: dict[str, Any] = {}
    for given in (base, call):
        if given is None:
            continue
        if not isinstance(given, Mapping):
            raise XaikitTypeError(
                "model_kwargs must be a dict {argument name: value} of extra keyword arguments of the "
                f"model's forward call; got {describe(given)}"
            )
        merged.update(given)
    return merged
