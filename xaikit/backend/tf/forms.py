"""The forms a TensorFlow model comes in, as xaikit's messages name them.

A Keras model built in memory, saved to ``.keras`` and loaded, cloned, or written as a
subclass of ``keras.Model`` is one model to xaikit: every method runs the model's own call (the
class-activation maps capture the chosen layer's output while the whole model runs, see
``cam.py``). An exported artifact (``model.export(path)``, read back with
``keras.layers.TFSMLayer`` or ``tf.saved_model.load``) keeps the model's computation but not
its layers: the gradient, perturbation and model-agnostic methods work on it, the
class-activation maps (and the rule-based methods) cannot.
"""

from __future__ import annotations

from typing import Any

from xaikit.backend.tf.layers import all_layers, sublayers
from xaikit.errors import XaikitTypeError

__all__ = [
    "NO_LAYER_METHODS",
    "exported_artifact",
    "input_shapes",
    "model_form",
    "not_callable",
    "refuse_layerless",
]

#: the methods that need no inner layer (the gradient, perturbation and model-agnostic methods,
#: as ``xaikit.xai.registry`` lists them; tests/test_model_forms_keras.py keeps the two in step)
NO_LAYER_METHODS = (
    "vanilla",
    "smoothgrad",
    "integrated",
    "smint",
    "vargrad",
    "input_x_gradient",
    "expected_gradients",
    "blur_ig",
    "guided_ig",
    "xrai",
    "occlusion",
    "rise",
    "feature_ablation",
    "shapley_sampling",
    "kernel_shap",
    "lime",
    "sobol",
    "hsic",
)


def _named(model: Any) -> str:
    name = getattr(model, "name", None)
    return f" {name!r}" if isinstance(name, str) and name else ""


def model_form(model: Any) -> str:
    """How a message names ``model``'s form, e.g. ``"Sequential model 'sequential'"``,
    ``"functional model 'm'"``, ``"subclassed Keras model Net 'net'"``, ``"TFSMLayer (an exported
    SavedModel)"``, ``"TensorFlow function 'serve'"``."""
    import keras

    cls = type(model).__name__
    if isinstance(model, keras.Sequential):
        return f"Sequential model{_named(model)}"
    if isinstance(model, keras.Model):
        if _is_functional(model):
            return f"functional model{_named(model)}"
        return f"subclassed Keras model {cls}{_named(model)}"
    if isinstance(model, keras.layers.TFSMLayer):
        return "TFSMLayer (an exported SavedModel)"
    if isinstance(model, keras.layers.Layer):
        return f"Keras layer {cls}{_named(model)}"
    if cls == "RestoredFunction" or cls.startswith("_UserObject"):
        kind = "function" if cls == "RestoredFunction" else "object"
        return f"SavedModel {kind} loaded with tf.saved_model.load"
    if cls in ("Function", "PolymorphicFunction", "ConcreteFunction"):
        return f"TensorFlow function{_named(model)}"
    return f"{cls} (not a Keras model)"


def _is_functional(model: Any) -> bool:
    try:
        from keras.src.models.functional import Functional
    except ImportError:  # pragma: no cover - another Keras layout: a model with declared inputs
        return getattr(model, "_is_graph_network", False) or hasattr(model, "_operations")
    return isinstance(model, Functional)


def exported_artifact(model: Any) -> bool:
    """Whether ``model`` is an exported SavedModel (or one of its functions): its computation is
    there, its Keras layers are not."""
    import keras

    cls = type(model).__name__
    return (
        isinstance(model, keras.layers.TFSMLayer)
        or cls == "RestoredFunction"
        or cls.startswith("_UserObject")
    )


def refuse_layerless(model: Any, what: str, rules: str) -> None:
    """A model without a Keras layer (a ``tf.function``, a Python function, a bare object) has
    nothing to give ``what``'s rules to (``rules`` says what gets one): refused, saying what to
    pass instead. Without it a rule-based method would run the plain gradient: a nested
    ``tf.function`` runs its ops in a graph of its own, out of the search for unreached ones."""
    if any(not sublayers(la) for la in all_layers(model)):
        return
    hint = "; for tf.function(model), pass model" if "Function" in type(model).__name__ else ""
    raise XaikitTypeError(
        f"{what} needs a Keras model with layers ({rules}); got a {model_form(model)}. Pass the Keras "
        f"model itself (the model in memory, or keras.models.load_model('model.keras'){hint}), or use a "
        "method that needs no layer"
    )


def not_callable(model: Any) -> str:
    """The message for a TF object that cannot be called, with the functions it holds (a
    SavedModel loaded with ``tf.saved_model.load`` is called through one of them)."""
    import tensorflow as tf

    functions = []
    for name in dir(model):
        if name.startswith("_") or name in ("signatures",):
            continue
        try:
            value = getattr(model, name)
        except Exception:
            continue
        if isinstance(value, tf.types.experimental.GenericFunction):
            functions.append(name)
    hint = (
        f"; pass one of its functions instead, e.g. loaded.{functions[0]} (its functions: "
        f"{', '.join(functions)}), or load it with keras.layers.TFSMLayer(path, call_endpoint="
        f"{functions[0]!r})"
        if functions
        else "; pass a Keras model, a tf.function or a Python function that takes the input batch"
    )
    return f"the model must be callable on the input batch; got a {model_form(model)}, which is not callable{hint}"


def input_shapes(model: Any) -> list[tuple[int | None, ...]] | None:
    """The input shapes a Keras model declares (``None``: any size), or None when it declares
    none (a subclassed model, a function)."""
    try:
        inputs = getattr(model, "inputs", None)
    except (AttributeError, ValueError):
        return None
    if not isinstance(inputs, (list, tuple)) or not inputs:
        return None
    shapes = []
    for t in inputs:
        shape = getattr(t, "shape", None)
        if shape is None:
            return None
        shapes.append(tuple(None if d is None else int(d) for d in shape))
    return shapes
