"""Choosing and checking the model output that an explanation differentiates.

A model may return a tensor, a tuple/list of tensors, a dict of tensors, or an object whose
attributes hold tensors (a Hugging Face-style output with ``.logits``). ``output`` picks one:
an index, a dict key or an attribute name. The picked output is a (batch, classes) matrix of
class scores, or a (batch,) vector of one score per row (regression, binary logit), which the
engine explains as class 0 of a one-column matrix (:func:`as_matrix`).

The same rule runs eagerly and inside a traced TensorFlow step: it only looks at Python types
and static shapes.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from xaikit.errors import XaikitTypeError, XaikitValueError, describe


def check_output(output: Any) -> int | str:
    """``output`` if it is an index (int) or a key / attribute name (str), else a clear error.

    Example:
        >>> check_output("logits"), check_output(1)
        ('logits', 1)
    """
    if isinstance(output, bool) or not isinstance(output, (int, str)):
        raise XaikitTypeError(
            "output must be an index (int), a dict key or an attribute name (str) of the model "
            f"output to explain, e.g. output=1 or output='logits'; got {describe(output)}"
        )
    return output


def _is_tensor(out: Any) -> bool:
    return getattr(out, "shape", None) is not None and hasattr(out, "dtype")


def _fields(out: Any) -> list[str]:
    """The names of an object's public attributes that hold tensors (dataclass fields first)."""
    names = (
        [f.name for f in dataclasses.fields(out)]
        if dataclasses.is_dataclass(out)
        else [k for k in getattr(out, "__dict__", {}) if not k.startswith("_")]
    )
    return [n for n in names if _is_tensor(getattr(out, n, None))]


def _from_object(out: Any, output: int | str) -> Any:
    """An attribute of an output object: ``output`` names it; the default 0 means ``.logits``."""
    kind = type(out).__name__
    fields = _fields(out)
    if isinstance(output, str):
        if not hasattr(out, output):
            raise XaikitValueError(
                f"the model returned a {kind} object with tensor attributes {fields}; it has no "
                f"attribute {output!r}: pass output= one of them"
            )
        return getattr(out, output)
    if output == 0 and _is_tensor(getattr(out, "logits", None)):
        return out.logits
    if output != 0 and fields:
        raise XaikitValueError(
            f"the model returned a {kind} object with tensor attributes {fields}; its outputs are named, "
            f"not numbered (output={output!r}): pass output= one of those attribute names"
        )
    hint = f"pass output={fields[0]!r}" if fields else "make the model return a tensor of class scores"
    raise XaikitTypeError(
        f"the model must return a tensor of class scores, a tuple/list, a dict or an object with "
        f"tensor attributes; it returned a {kind} object with tensor attributes {fields} and no "
        f"'logits' (output={output!r}): {hint} naming the one to explain"
    )


def pick_output(out: Any, output: int | str) -> Any:
    """The one output ``output`` names among what a model call returned, its shape unchecked
    (:func:`select_output` checks it; a target object, :mod:`xaikit.targets`, reads outputs of
    any shape: segmentation maps, embeddings).

    Args:
        out: what the model returned: a tensor, a tuple/list of tensors, a dict of tensors or an
            object with tensor attributes (e.g. a Hugging Face output with ``.logits``).
        output: index (tuple/list; a dict's keys in order), key (dict) or attribute name
            (object, named tuple). The default 0 means a dict's ``"logits"`` key when it has one
            (else its first entry) and an object's ``logits`` attribute.

    Example:
        >>> import numpy as np
        >>> pick_output((np.zeros((2, 3, 4, 4)), np.zeros(2)), 0).shape
        (2, 3, 4, 4)
    """
    if isinstance(out, dict):
        if isinstance(output, int) and output == 0 and "logits" in out and 0 not in out:
            output = "logits"  # a Hugging Face-style dict: the default means its logits
        if output not in out:
            key = output if isinstance(output, str) else None
            if key is None and isinstance(output, int) and 0 <= output < len(out):
                key = list(out)[output]
            if key is None or key not in out:
                raise XaikitValueError(
                    f"the model returned a dict with keys {list(map(str, out))} (in the order it "
                    f"returned them: output=i picks the i-th); output {output!r} is not one of them: "
                    "pass output= one of those keys or indexes"
                )
            output = key
        out = out[output]
    elif isinstance(out, (tuple, list)):
        if isinstance(output, str) and hasattr(out, output):  # a named tuple
            out = getattr(out, output)
        elif not isinstance(output, int) or not -len(out) <= output < len(out):
            raise XaikitValueError(
                f"the model returned {len(out)} outputs in a {type(out).__name__}; output index "
                f"{output!r} is out of range: pass output= an index in [0, {len(out) - 1}]"
            )
        else:
            out = out[output]
    elif _is_tensor(out):
        if output not in (0, -1):
            raise XaikitValueError(
                f"the model returned a single tensor; output {output!r} does not exist (an index, key "
                "or attribute name selects among several outputs): leave output at 0"
            )
    elif out is not None:
        out = _from_object(out, output)
    return out


def select_output(out: Any, output: int | str, rows: int) -> Any:
    """Pick one output of a model call and check that it is (rows, classes) or (rows,).

    Args:
        out: what the model returned: a tensor, a tuple/list of tensors, a dict of tensors or an
            object with tensor attributes (e.g. a Hugging Face output with ``.logits``).
        output: index (tuple/list; a dict's keys in order), key (dict) or attribute name
            (object, named tuple) of the output to explain. The default 0 means a dict's
            ``"logits"`` key when it has one (else its first entry) and an object's ``logits``
            attribute.
        rows: the number of input rows, which the output's first axis must match.

    Returns:
        The selected (rows, classes) or (rows,) tensor.

    Raises:
        XaikitValueError: the output is missing or is not a (rows, classes) matrix or (rows,) vector.
        XaikitTypeError: the model returned something that holds no tensor to explain.

    Example:
        >>> import numpy as np
        >>> select_output({"loss": np.zeros(()), "logits": np.zeros((2, 3))}, "logits", 2).shape
        (2, 3)
    """
    out = pick_output(out, output)
    shape = getattr(out, "shape", None)
    if shape is None:
        raise XaikitTypeError(
            "the model must return a tensor of class scores (or a tuple/list, dict or object holding "
            f"one); it returned {describe(out)}"
            + (f" as output {output!r}" if output != 0 else "")
            + ": pass output= the index, key or attribute name of the scores to explain, or make "
            "the model return them"
        )
    if len(shape) not in (1, 2):
        raise XaikitValueError(
            "the model output to explain must have shape (batch, classes) = "
            f"({rows}, classes), or ({rows},) for one score per row; it returned {describe(out)}: "
            "pass output= another output, or wrap the model so that it returns one score per class "
            "and row (e.g. the last step or the mean of a per-step output, a pixel's or a region's "
            "score of a segmentation map)"
        )
    if shape[0] is not None and int(shape[0]) != rows:
        raise XaikitValueError(
            "the model output to explain must have one row per input row, shape "
            f"({rows}, classes) or ({rows},); it returned {describe(out)}: the model must keep the "
            "batch axis (inputs are batches (batch, ...); a model written for one unbatched sample "
            "needs a batched version, e.g. torch.func.vmap), or pass output= another output"
        )
    return out


def as_matrix(scores: Any) -> Any:
    """A (rows,) score vector as a (rows, 1) matrix (class 0 is the score); a matrix unchanged.

    Example:
        >>> import numpy as np
        >>> as_matrix(np.arange(3.0)).shape, as_matrix(np.zeros((3, 2))).shape
        ((3, 1), (3, 2))
    """
    return scores[:, None] if len(scores.shape) == 1 else scores
