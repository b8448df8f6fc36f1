"""Run xaikit traces in a plain PyTorch training loop.

Example:
    >>> from xaikit.integrations.torch import TorchTraceRunner
    >>> from xaikit.trace.metric import Accuracy
    >>> runner = TorchTraceRunner([Accuracy(true_key="y", pred_key="y_pred")], batch_keys=("x", "y"))
    >>> runner.on_begin()  # doctest: +SKIP
    >>> for epoch in range(2):  # doctest: +SKIP
    ...     runner.on_epoch_begin("train")
    ...     for x, y in train_loader:
    ...         y_pred = model(x); loss = F.cross_entropy(y_pred, y); ...
    ...         runner.on_batch_end((x, y), {"y_pred": y_pred, "ce": loss})
    ...     runner.on_epoch_end()
    ...     model.eval(); runner.on_epoch_begin("eval")
    ...     with torch.no_grad():
    ...         for x, y in val_loader:
    ...             runner.on_batch_end((x, y), {"y_pred": model(x)})
    ...     print(runner.on_epoch_end())          # {'accuracy': ...}
    >>> outputs = runner.on_end()  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from xaikit.errors import XaikitValueError
from xaikit.integrations.runner import TraceRunner

__all__ = ["TorchTraceRunner"]


class TorchTraceRunner(TraceRunner):
    """:class:`~xaikit.integrations.TraceRunner` that also takes DataLoader tuples.

    Batches may be dicts or the tuples/lists a ``DataLoader`` yields; tuple elements are named by
    ``batch_keys``. Tensors are detached and copied to the host once per batch (traces work on
    numpy arrays), so your graph and device tensors are left alone. Images stay in the layout
    you give them (channel-first is fine: the Saliency trace and ``ImgData`` detect it).

    Args:
        traces: traces or schedulers of traces.
        batch_keys: names of the elements of tuple batches, e.g. ``("x", "y")``.
        total_epochs: for traces that read ``system.total_epochs``.
        network: for traces that read ``system.network``.
    """

    def __init__(
        self,
        traces: Any,
        batch_keys: Sequence[str] = ("x", "y"),
        total_epochs: int = 1,
        network: Any = None,
    ) -> None:
        super().__init__(traces, total_epochs=total_epochs, network=network)
        self.batch_keys = list(batch_keys)

    def named(self, batch: Any) -> Mapping[str, Any]:
        """The batch as a mapping: a dict as it is, a tuple/list or tensor named by ``batch_keys``."""
        if isinstance(batch, Mapping):
            return batch
        if isinstance(batch, (tuple, list)):
            if len(batch) > len(self.batch_keys):
                raise XaikitValueError(
                    f"the batch has {len(batch)} elements but batch_keys names {len(self.batch_keys)}: {self.batch_keys}"
                )
            return dict(zip(self.batch_keys, batch))
        if isinstance(batch, torch.Tensor):
            return {self.batch_keys[0]: batch}
        return batch  # the base class reports what it is

    def on_batch_begin(self, batch: Any) -> dict[str, Any]:
        return super().on_batch_begin(self.named(batch))

    def on_batch_end(self, batch: Any, predictions: Mapping[str, Any] | None = None) -> dict[str, Any]:
        return super().on_batch_end(self.named(batch), predictions)
