"""Models as files and as fingerprints: load a serialized model (a Keras ``.keras`` file or a
TorchScript file) and hash a model's weights, for ``xk.xai.explain_dataset``.

The framework is imported only when a file of its kind is loaded or a model of it is hashed.

Example:
    >>> import numpy as np
    >>> fingerprint_of_file.__name__, model_file_kind("model.keras"), model_file_kind("net.pt")
    ('fingerprint_of_file', 'keras', 'torchscript')
"""

from __future__ import annotations

import hashlib
import os
import warnings
from typing import Any

import numpy as np

from xaikit.errors import XaikitValueError

__all__ = [
    "MODEL_FILE_SUFFIXES",
    "fingerprint_of_file",
    "load_model_file",
    "model_file_kind",
    "to_accelerator",
    "weights_fingerprint",
]

#: file suffix -> kind of serialized model
MODEL_FILE_SUFFIXES = {
    ".keras": "keras",
    ".pt": "torchscript",
    ".pth": "torchscript",
    ".ts": "torchscript",
}


def model_file_kind(path: str | os.PathLike[str]) -> str | None:
    """``"keras"``, ``"torchscript"`` or None (not a model file name), judged from the suffix."""
    return MODEL_FILE_SUFFIXES.get(os.path.splitext(os.fspath(path))[1].lower())


def load_model_file(path: str | os.PathLike[str]) -> Any:
    """Load a serialized model: a Keras ``.keras`` file, a TorchScript file (``.pt``, ``.pth``,
    ``.ts``; loaded on the CPU; torch's deprecation notice of TorchScript is silenced, the file
    was chosen by the caller).

    Raises:
        XaikitValueError: no such file, or a suffix that is neither.
    """
    path = os.fspath(path)
    kind = model_file_kind(path)
    if kind is None:
        raise XaikitValueError(
            f"model file must end in {', '.join(MODEL_FILE_SUFFIXES)} (a Keras file or a TorchScript "
            f"file); got {path!r}"
        )
    if not os.path.isfile(path):
        raise XaikitValueError(f"model file {path!r} does not exist")
    if kind == "keras":
        from xaikit.backend.registry import load_backend

        load_backend("tf")
        import keras

        return keras.models.load_model(path, compile=False)
    from xaikit.backend.registry import load_backend

    load_backend("torch")
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        model = torch.jit.load(path, map_location="cpu")
    model.eval()
    return model


def fingerprint_of_file(path: str | os.PathLike[str]) -> str:
    """The SHA-256 of a file's bytes (read in 1 MiB blocks), as ``"sha256:<hex>"``."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return f"sha256:{digest.hexdigest()}"


def weights_fingerprint(model: Any, framework: str | None = None) -> str:
    """A SHA-256 of a model's class and every weight (parameters and buffers of a torch module,
    variables of a Keras model: shapes, dtypes and bytes, in the model's order), as
    ``"sha256:<hex>"``. A plain function (no weights) hashes its qualified name.

    Example:
        >>> def f(x):
        ...     return x
        >>> weights_fingerprint(f) == weights_fingerprint(f)
        True
    """
    from xaikit.backend.registry import framework_of, load_backend

    name = framework or framework_of(model)
    digest = hashlib.sha256()
    cls = type(model)
    digest.update(f"{cls.__module__}.{cls.__qualname__}".encode())
    if name is None:
        digest.update(getattr(model, "__qualname__", repr(model)).encode())
        return f"sha256:{digest.hexdigest()}"
    bk = load_backend(name)
    for _, value in bk.eval.snapshot(model):
        array = np.ascontiguousarray(bk.to_numpy(value) if bk.is_tensor(value) else np.asarray(value))
        digest.update(f"{array.dtype.str}{array.shape}".encode())
        digest.update(array.tobytes())
    return f"sha256:{digest.hexdigest()}"


def to_accelerator(model: Any) -> Any:
    """The model on the process's GPU when it has one: a torch module is moved to ``cuda``
    (Keras places its work on a visible GPU by itself); returned unchanged otherwise."""
    from xaikit.backend.registry import framework_of

    if framework_of(model) != "torch":
        return model
    import torch

    return model.to("cuda") if torch.cuda.is_available() else model
