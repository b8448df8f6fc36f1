"""The TensorFlow backend's messages: a gradient that does not reach an input or a layer, and
one readable line from a TensorFlow / Keras error message (for xaikit's own messages).

A gradient that TensorFlow cannot take (``tape.gradient`` gives None) is structural: no
differentiable path leads from that tensor to the explained scores. It is an error that says
which input or layer and why it may be, never a map of zeros.

Keras and TensorFlow messages carry what a person does not need inside another message: the
AutoGraph "in user code:" traceback of a traced step, ANSI bold codes, "Exception encountered
when calling ...", the "Arguments received by ..." list, the dump of a whole input array
("Invalid input shape for input [[[0.21 0.96 ...") and graph-execution node lists.
:func:`error_text` keeps the sentence that says what went wrong. Plain string work: no
TensorFlow import.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["error_text", "ops_out_of_reach", "out_of_reach", "unreachable_inputs", "unreachable_layer"]

_ANSI = re.compile(r"\x1b\[[0-9;]*m|\[1m|\[0m")
#: a printed array or tensor: brackets around numbers, spaces, commas and newlines, long enough
#: not to be an index such as ``In[0]`` or a shape such as ``[2,1024]``
_ARRAY = re.compile(
    r"(?:tf\.Tensor\(\s*)?\[[\d\s.,eE+\-\[\]naif]{24,}\](?:,\s*shape=\([^)]*\),\s*dtype=\w+\))?"
)
_TYPE_LINE = re.compile(r"^\s*(?:[\w.]+\.)?\w+(?:Error|Exception):\s?(.*)$")
_NOISE = (
    "in user code:",
    "File ",
    "Exception encountered when calling",
    "Graph execution error:",
    "Detected at node",
    "Detected unsupported operations",
    "Traceback (most recent call last)",
)
_TAILS = (re.compile(r"\s*\[\[\{\{node [^}]*\}\}\]\]"), re.compile(r"\s*\[Op:[^\]]*\](?:\s*name:\s*\S*)?"))
_FUNCTION_NODE = re.compile(r"\{\{function_node [^}]*\}\}\s*")
MAX_CHARS = 400


def error_text(exc: BaseException) -> str:
    """The line of ``exc``'s message that says what went wrong, without tracebacks, formatting
    codes or array dumps (at most :data:`MAX_CHARS` characters).

    Example:
        >>> msg = "in user code:\\n  File \\"a.py\\", line 3, in f  *\\n    y = g(x)\\n  ValueError: bad shape (2, 16)"
        >>> error_text(ValueError(msg))
        'bad shape (2, 16)'
        >>> error_text(ValueError("Invalid input shape for input [[0.1 0.2 0.3 0.4 0.5 0.6 0.7 0.8]] with name 'x'"))
        "Invalid input shape for input <array> with name 'x'"
    """
    text = _ANSI.sub("", str(getattr(exc, "message", None) or exc))
    text = _ARRAY.sub("<array>", text)
    lines = text.splitlines()
    if any("in user code:" in line for line in lines):  # AutoGraph: the error is after the frames
        last = max((i for i, line in enumerate(lines) if _TYPE_LINE.match(line)), default=None)
        if last is not None:
            match = _TYPE_LINE.match(lines[last])
            lines = [match.group(1) if match else ""] + lines[last + 1 :]
    kept: list[str] = []
    in_frame = False
    for raw in lines:
        line = raw.strip()
        if line.startswith("Arguments received by"):
            break
        if line.startswith("File "):  # a traceback frame; the next indented line is its code
            in_frame = True
            continue
        if in_frame and raw.startswith((" ", "\t")) and not _TYPE_LINE.match(raw):
            in_frame = False
            continue
        in_frame = False
        if not line or line.startswith(_NOISE) or line.startswith("•"):
            continue
        kept.append(line)
    out = " ".join(kept) if kept else str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    out = _FUNCTION_NODE.sub("", out)
    for tail in _TAILS:
        out = tail.sub("", out)
    out = out.strip()
    return out if len(out) <= MAX_CHARS else out[: MAX_CHARS - 1].rstrip() + "…"


def _input_name(model: Any, i: int, n: int) -> str:
    """``"the model's input"``, or ``"model input 1 ('mask')"`` (its Keras name when it was given one)."""
    try:
        inputs = getattr(model, "inputs", None)
    except (AttributeError, ValueError):
        inputs = None
    name = (
        getattr(inputs[i], "name", None) if isinstance(inputs, (list, tuple)) and len(inputs) == n else None
    )
    named = isinstance(name, str) and not name.startswith(("keras_tensor", "input_layer", "input_"))
    if n == 1:
        return f"the model's input {name!r}" if named else "the model's input"
    return f"model input {i} ({name!r})" if named else f"model input {i} (of {n})"


def unreachable_inputs(model: Any, missing: list[int], n: int) -> str:
    """The message for inputs that the scores' gradient does not reach."""
    from xaikit.backend.tf.forms import model_form

    which = " and ".join(_input_name(model, i, n) for i in missing)
    return (
        f"the gradient of the scores does not reach {which} of this {model_form(model)}: no "
        "differentiable path leads from it to the explained output. The model may cast it to an "
        "integer type, compute on it with numpy or another non-TensorFlow function, stop the "
        "gradient (tf.stop_gradient), or not use it at all. The gradient methods need a "
        "differentiable path (a value that is passed to the model but not explained goes in "
        "model_kwargs=); the perturbation methods (occlusion, rise) and the model-agnostic methods "
        "(feature_ablation, shapley_sampling, kernel_shap, lime, sobol, hsic) need none"
    )


def unreachable_layer(model: Any, layer: str, output: int | str) -> str:
    """The message for a layer that the scores' gradient does not reach."""
    from xaikit.backend.tf.forms import model_form

    return (
        f"the gradient of the scores does not reach layer {layer!r} of this {model_form(model)}: "
        f"no differentiable path leads from the layer's output to the explained output "
        f"(output={output!r}); the layer may feed another output only, or the model stops the "
        "gradient after it (tf.stop_gradient, an integer cast, numpy). Choose a layer on the path "
        "to the explained output; Eigen-CAM and Score-CAM need no gradient"
    )


def ops_out_of_reach(ops: Any, types: Any, marker: str) -> list[str]:
    """The names of the ops of ``types`` among ``ops`` (a traced forward pass's) without
    ``marker`` in their name (the name or name scope of the ops xaikit swaps in): the model's own
    ops that a swap of its layers could not reach (an activation called inside a custom layer's
    ``call``, a raw TensorFlow function). A nested ``tf.function``'s ops are in a graph of their
    own and not seen."""
    return [op.name for op in ops if op.type in types and marker not in op.name]


def out_of_reach(lead: str, kind: str, names: list[str], form: str, consequence: str, fix: str) -> str:
    """The refusal for the ops :func:`ops_out_of_reach` found: ``lead`` (what the method
    changes), how many ``kind`` ops of the model (a ``form``) run out of reach and the first
    three names, ``consequence`` (what the map would be) and ``fix``."""
    shown = ", ".join(repr(n) for n in names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    return (
        f"{lead}, and {len(names)} {kind} op(s) of this {form} run where the swap cannot reach them "
        f"({shown}: called inside a custom layer's call, or in a raw TensorFlow function): "
        f"{consequence}. {fix}"
    )
