"""Choosing and checking the model output that an explanation differentiates."""

from __future__ import annotations

from typing import Any

from xaikit.errors import XaikitTypeError, XaikitValueError, describe


def select_output(out: Any, output: int | str, rows: int) -> Any:
    """Pick one output of a model call and check that it is (rows, classes).

    Args:
        out: what the model returned: a tensor, a tuple/list of tensors or a dict of tensors.
        output: index (tuple/list) or key (dict) of the output to explain.
        rows: the number of input rows, which the output's first axis must match.

    Returns:
        The selected (rows, classes) tensor.

    Raises:
        XaikitValueError: the output is missing or is not a (rows, classes) matrix.
    """
    if isinstance(out, dict):
        if output not in out:
            key = output if isinstance(output, str) else None
            if key is None and isinstance(output, int) and 0 <= output < len(out):
                key = list(out)[output]
            if key is None or key not in out:
                raise XaikitValueError(
                    f"the model returned a dict with keys {sorted(out)}; output {output!r} is not one of them"
                )
            output = key
        out = out[output]
    elif isinstance(out, (tuple, list)):
        if not isinstance(output, int) or not -len(out) <= output < len(out):
            raise XaikitValueError(
                f"the model returned {len(out)} outputs; output index {output!r} is out of range"
            )
        out = out[output]
    elif output not in (0, -1):
        raise XaikitValueError(f"the model returned a single tensor; output {output!r} does not exist")
    shape = getattr(out, "shape", None)
    if shape is None:
        raise XaikitTypeError(f"the model must return a tensor of class scores; it returned {describe(out)}")
    if len(shape) != 2 or (shape[0] is not None and int(shape[0]) != rows):
        raise XaikitValueError(
            "the model output to explain must have shape (batch, classes) = "
            f"({rows}, classes); it returned {describe(out)}"
        )
    return out
