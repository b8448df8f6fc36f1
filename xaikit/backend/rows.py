"""The rows a backend step is asked about (:class:`Rows`): the one argument that the steps of
the backend and of its facets take for the model, its inputs and what to score on them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Rows"]


@dataclass(frozen=True, eq=False)
class Rows:
    """The rows a backend step is asked about: one chunk of rows of a model and what to score
    on them. Every step that scores rows takes one
    (:meth:`~xaikit.backend.base.Backend.scores`, :meth:`~xaikit.backend.base.Backend.grad_step`,
    the steps of the ``cam``, ``relevance`` and ``attention`` facets).

    Attributes:
        model: the model.
        inputs: one framework tensor per model input, rows first, in the model's layout.
        targets: int64 (rows,): the class of each row; with ``target``, each row's sample index
            instead. None only where a step allows it
            (:meth:`~xaikit.backend.facets.CamFacet.grad_step`: each row's predicted class;
            :meth:`~xaikit.backend.facets.AttentionFacet.attentions` without gradients: no
            score).
        output: which model output to explain when the model returns several (an index or a
            key).
        model_kwargs: extra keyword arguments of the model's call, already cut to the rows.
        target: a target object bound to the device (:class:`xaikit.targets.Bound`) whose
            ``scores(bk, raw, targets)`` are scored instead of the class scores; None for class
            targets.

    Rows are compared by identity (their tensors have no single truth value).

    Example:
        >>> import numpy as np
        >>> rows = Rows(None, [np.zeros((2, 3))], np.array([4, 1]))
        >>> rows.targets.tolist(), rows.output, rows.model_kwargs, rows.target
        ([4, 1], 0, None, None)
    """

    model: Any
    inputs: Sequence[Any]
    targets: Any
    output: int | str = 0
    model_kwargs: dict[str, Any] | None = None
    target: Any = None
