"""The run options every metric of ``xk.evaluate`` shares, typed once.

A metric's own options are keyword-only parameters of its signature; the options of the run
(the seed, the engine's batch, the framework, the model's output and keyword arguments, the
method's options) come through ``**run: Unpack[RunOptions]`` (PEP 692), described and defaulted
here once (``Unpack`` is importable at run time from here, so that
``typing.get_type_hints`` resolves the signatures). Inside, :class:`RunSettings` holds them, defaults filled in, for the private helpers.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, TypedDict

if sys.version_info >= (3, 11):
    from typing import Unpack
else:  # pragma: no cover - torch, TensorFlow and Keras all require typing_extensions
    from typing_extensions import Unpack

__all__ = ["RUN_DEFAULTS", "RUN_OPTIONS", "BaseRunOptions", "RunOptions", "RunSettings", "Unpack"]


class BaseRunOptions(TypedDict, total=False):
    """The run options of a metric that calls the model with ``x`` alone (the robustness
    metrics): :class:`RunOptions` without ``model_kwargs``."""

    seed: int
    max_batch: int | str
    framework: str | None
    output: int | str
    method_options: dict[str, Any] | None


class RunOptions(BaseRunOptions, total=False):
    """The run options every metric that runs a model takes by keyword (``**run``), spelled and
    defaulted the same everywhere. Every key is optional; its default is in brackets.

    Attributes:
        seed: the seed of every random draw of the metric and of the method's own noise, for
            methods that draw any (``0``).
        max_batch: rows per forward/backward pass of the method and the metric, or ``"auto"``
            (``"auto"``).
        framework: ``"torch"`` or ``"tf"`` for a model that is a plain function (``None``: told
            from the model).
        output: which model output to explain (and to score, for the metrics that score the
            model's output) when the model returns several: an index, a dict key or an
            attribute name such as ``"logits"`` (``0``).
        model_kwargs: extra keyword arguments of the model's forward pass; a value with the
            batch as first axis is sliced and stacked with the rows (``None``).
        method_options: options of the explanation method (``nsamples``, ``layer``, ...),
            passed to :func:`xaikit.xai.explain`; the keys the metric sets itself
            (``target``, ``seed``, ...) are refused. A metric of maps (``saliency``) uses the
            run options to compute the maps only when ``saliency`` is a method name, and
            refuses ``method_options`` with maps (``None``).

    Example:
        >>> import torch, xaikit as xk
        >>> model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 2))
        >>> run: xk.evaluate.RunOptions = {"seed": 3, "method_options": {"nsamples": 8, "baseline": "zeros"}}
        >>> r = xk.evaluate.completeness(model, torch.rand(2, 1, 4, 4), **run)
        >>> r.summary["max_abs"] < 1e-5  # the same as seed=3, method_options={...}
        True
    """

    model_kwargs: dict[str, Any] | None


@dataclass(frozen=True)
class RunSettings:
    """The run options of one call, every default filled in (not yet checked): what the public
    functions pass to their private helpers. Its field defaults are the one place of the
    defaults of :class:`RunOptions`."""

    seed: int = 0
    max_batch: int | str = "auto"
    framework: str | None = None
    output: int | str = 0
    model_kwargs: dict[str, Any] | None = None
    method_options: dict[str, Any] | None = None

    @classmethod
    def of(cls, run: Mapping[str, Any]) -> RunSettings:
        """The settings of the keyword arguments ``run`` (keys of :class:`RunOptions`), checked
        (:meth:`checked`)."""
        return cls(**run).checked()

    def checked(self) -> RunSettings:
        """These settings with ``seed``, ``max_batch`` and ``output`` checked (a clear error for
        a wrong one); the rest are checked where they are used."""
        from xaikit.backend.outputs import check_output
        from xaikit.checks import check_int
        from xaikit.xai.internal import check_max_batch

        seed = check_int(self.seed, "seed", 0)
        return replace(
            self, seed=seed, max_batch=check_max_batch(self.max_batch), output=check_output(self.output)
        )


#: each run option and its default, in the order of the signatures
RUN_DEFAULTS: dict[str, Any] = {f.name: f.default for f in fields(RunSettings)}

#: the TypedDicts a public function's ``**run: Unpack[...]`` may name, by name
RUN_OPTIONS: dict[str, type] = {"RunOptions": RunOptions, "BaseRunOptions": BaseRunOptions}
