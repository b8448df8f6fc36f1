"""How ``explain_dataset`` builds the model: :class:`ModelSpec` (the model itself, a factory,
``"package.module:factory"`` or a model file), picklable so that Ray workers build their own,
with the fingerprint of its weights that every worker checks.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from typing import Any

from xaikit.backend import framework_of
from xaikit.backend.serialized import (
    fingerprint_of_file,
    load_model_file,
    model_file_kind,
    weights_fingerprint,
)
from xaikit.errors import XaikitTypeError, XaikitValueError, describe

__all__ = ["ModelSpec"]


@dataclass
class ModelSpec:
    """How to build the model: ``kind`` is ``"model"`` (the object itself), ``"file"`` (a
    ``.keras`` or TorchScript file), ``"import"`` (``"package.module:factory"``) or
    ``"factory"`` (a callable of no arguments). Picklable when its value is, so that Ray workers
    build their own model.

    Example:
        >>> ModelSpec.of("my_models.nets:lenet").kind
        'import'
    """

    kind: str
    value: Any
    framework: str | None = None

    @classmethod
    def of(cls, model_or_factory: Any, framework: str | None = None) -> ModelSpec:
        """The spec of what ``explain_dataset`` was given, or a clear error."""
        if isinstance(model_or_factory, ModelSpec):
            return model_or_factory
        if isinstance(model_or_factory, (str, os.PathLike)):
            text = os.fspath(model_or_factory)
            if model_file_kind(text) is not None:
                return cls("file", os.path.abspath(text), framework)
            module, sep, name = text.partition(":")
            if sep and module and name.isidentifier():
                return cls("import", text, framework)
            raise XaikitValueError(
                "model_or_factory: a str must be a model file (.keras, or TorchScript .pt/.pth/.ts) or "
                f"'package.module:factory'; got {text!r}"
            )
        if framework_of(model_or_factory) is not None or (
            framework is not None and callable(model_or_factory)
        ):
            return cls("model", model_or_factory, framework)
        if callable(model_or_factory):
            return cls("factory", model_or_factory, framework)
        raise XaikitTypeError(
            "model_or_factory must be a torch or Keras model, a function of no arguments that builds one, "
            f"a model file or 'package.module:factory'; got {describe(model_or_factory)}"
        )

    def build(self) -> Any:
        """The model (the object itself for ``"model"``; a fresh one otherwise)."""
        if self.kind == "model":
            return self.value
        if self.kind == "file":
            return load_model_file(self.value)
        factory = self.value
        if self.kind == "import":
            module, _, name = self.value.partition(":")
            try:
                factory = getattr(importlib.import_module(module), name)
            except (ImportError, AttributeError) as exc:
                raise XaikitValueError(
                    f"model_or_factory: cannot import {self.value!r} ({type(exc).__name__}: {exc})"
                ) from exc
        model = factory()
        if model is None or (framework_of(model) is None and self.framework is None):
            raise XaikitTypeError(
                f"model_or_factory: the factory {self.describe()} must return a torch or Keras model; "
                f"got {describe(model)}"
            )
        return model

    def fingerprint(self, model: Any) -> str:
        """The file's hash for a file, else the hash of the built model's weights."""
        if self.kind == "file":
            return fingerprint_of_file(self.value)
        return weights_fingerprint(model, self.framework)

    def describe(self) -> str:
        if self.kind in ("file", "import"):
            return str(self.value)
        return getattr(self.value, "__qualname__", type(self.value).__qualname__)
