"""LRP rules and composites, as plain data: what each backend's relevance pass reads
(``bk.relevance.lrp_step``), framework-free.

Conventions (the same in both backends, and the same numbers as zennit's rules):

* Relevance flows backwards as ``R = a * g`` at every tensor ``a`` of the model: the backends
  run one backward pass whose "gradient" ``g`` at each tensor is its relevance divided by its
  value. Operations without a rule (sums of residual branches, concatenation, reshapes, max
  pooling, the ReLU after a layer) then pass relevance on as LRP-0 does: a residual sum
  ``y = a + b`` gives ``a / y`` of ``R_y`` to ``a`` and ``b / y`` to ``b``, with no canonizer.
* ``stab(z) = z + eps * sign(z)``, with sign(0) = +1: every denominator is stabilized so; ``eps``
  is the rule's ``epsilon`` (the epsilon rule) or ``stabilizer`` (every other rule).

For a layer ``z = W x + b`` with output relevance ``R`` (``x`` its input, ``p = R / stab(.)``):

================  ===================================================================
rule              relevance of the input ``R_in``
================  ===================================================================
``epsilon``       ``x * W^T (R / stab(z))``; epsilon = 0 is LRP-0
``zplus``         ``x+ * W+^T p + x- * W-^T p``, ``p = R / stab(W+ x+ + b+ + W- x-)``
``alpha_beta``    ``alpha (x+ W+^T p + x- W-^T p) - beta (x+ W-^T q + x- W+^T q)``,
                  ``p = R / stab(W+ x+ + b+ + W- x-)``, ``q = R / stab(W- x+ + b- + W+ x-)``
``gamma``         ``x+ (W + g W+)^T p + x- (W + g W-)^T p + x+ (W + g W-)^T n + x- (W + g W+)^T n``,
                  ``p = [z > 0] R / stab((W + g W+) x+ + (b + g b+) + (W + g W-) x-)``,
                  ``n = [z < 0] R / stab((W + g W-) x+ + (b + g b-) + (W + g W+) x-)``
``zbox``          ``x * W^T r - l * W+^T r - h * W-^T r``, ``r = R / stab(W x - W+ l - W- h)``
                  (``l``, ``h`` the input's bounds; the bias cancels, as in zennit)
``flat``          ``1^T (R / stab(1 1))`` per receptive field (weights and input ones, no bias)
``wsquare``       ``(W^2)^T (R / stab(W^2 1 + b^2))``
``pass``          ``R`` unchanged (an element-wise layer: activations, BatchNorm not merged)
``norm``          ``x * (R / stab(y))`` for a layer without weights (average pooling, a sum)
``gradient``      the plain gradient (``R_in = x * dy/dx^T (R / y)``): LRP-0 of a linear map
================  ===================================================================

``flat``, ``wsquare`` and ``zbox`` give the relevance of the input itself (not ``x`` times a
gradient): they apply to the layer that reads the model's input only; a backend refuses them
elsewhere.

Example:
    >>> comp = composite("epsilon_plus_flat")
    >>> comp.rule_for("features.0", "conv", first=True).kind, comp.rule_for("fc", "dense", False).kind
    ('flat', 'epsilon')
    >>> composite("epsilon_gamma_box", low=-2.0, high=2.0).first["conv"]
    Rule(kind='zbox', epsilon=1e-06, gamma=0.25, alpha=2.0, beta=1.0, low=-2.0, high=2.0)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from xaikit.checks import check_choice
from xaikit.errors import XaikitTypeError, XaikitValueError, describe

__all__ = [
    "COMPOSITES",
    "KINDS",
    "RULES",
    "AlphaBeta",
    "Composite",
    "Epsilon",
    "Flat",
    "Gamma",
    "Gradient",
    "Norm",
    "Pass",
    "Rule",
    "WSquare",
    "ZBox",
    "ZPlus",
    "Zero",
    "composite",
]

#: the rule kinds
RULES = ("epsilon", "zplus", "alpha_beta", "gamma", "zbox", "flat", "wsquare", "pass", "norm", "gradient")
#: rules that give the relevance of the layer's input directly: only for the layer reading the input
INPUT_RULES = ("zbox", "flat", "wsquare")
#: the layer kinds a composite assigns rules to (each backend sorts its layers into them):
#: convolutions (any: grouped, depthwise, transposed), dense / linear layers, average pooling
#: (global too), max pooling, batch normalization (one not merged by the canonizer),
#: element-wise activations (ReLU, ReLU6, SiLU, GELU, tanh, ...)
KINDS = ("conv", "dense", "avgpool", "maxpool", "batchnorm", "activation")
#: what a kind gets when the composite names no rule for it
DEFAULT_RULES: Mapping[str, str] = MappingProxyType(
    {"activation": "pass", "batchnorm": "pass", "avgpool": "norm", "maxpool": "gradient",
     "conv": "gradient", "dense": "gradient"}
)  # fmt: skip


@dataclass(frozen=True)
class Rule:
    """One LRP rule and its parameters (see the module's table).

    Attributes:
        kind: one of :data:`RULES`.
        epsilon: the epsilon rule's epsilon (0: LRP-0), every other rule's stabilizer.
        gamma: the gamma rule's share of positive weights.
        alpha, beta: the alpha-beta rule's weights (alpha - beta = 1).
        low, high: the z^B rule's input bounds: a number, or one per channel (a sequence).
    """

    kind: str
    epsilon: float = 1e-6
    gamma: float = 0.25
    alpha: float = 2.0
    beta: float = 1.0
    low: Any = None
    high: Any = None

    def __post_init__(self) -> None:
        check_choice(self.kind, "rule kind", RULES)
        for key in ("epsilon", "gamma", "alpha", "beta"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
                raise XaikitValueError(
                    f"{self.kind} rule: {key} must be a number >= 0; got {describe(value)}"
                )
            object.__setattr__(self, key, float(value))
        if self.kind == "alpha_beta" and abs(self.alpha - self.beta - 1.0) > 1e-12:
            raise XaikitValueError(
                f"alpha_beta rule: alpha - beta must be 1 (relevance is conserved); got alpha={self.alpha}, "
                f"beta={self.beta}"
            )
        if self.kind == "zbox":
            for key in ("low", "high"):
                value = getattr(self, key)
                if value is None:
                    raise XaikitValueError(
                        f"zbox rule: {key} is required (the input's lowest / highest possible value, a "
                        "number or one per channel)"
                    )
                if isinstance(value, (list, tuple)):
                    object.__setattr__(self, key, tuple(float(v) for v in value))
                elif isinstance(value, (int, float)) and not isinstance(value, bool):
                    object.__setattr__(self, key, float(value))
                else:
                    raise XaikitTypeError(
                        f"zbox rule: {key} must be a number or a sequence of numbers (one per channel); "
                        f"got {describe(value)}"
                    )

    @property
    def stabilizer(self) -> float:
        """The denominator's stabilizer (the epsilon rule's epsilon)."""
        return self.epsilon

    @property
    def reads_input(self) -> bool:
        """Whether the rule gives the input's relevance directly (only for the layer reading the
        model's input)."""
        return self.kind in INPUT_RULES


def Epsilon(epsilon: float = 1e-6) -> Rule:
    """The epsilon rule (Bach et al., 2015); ``epsilon=0`` is LRP-0."""
    return Rule("epsilon", epsilon=epsilon)


def Zero() -> Rule:
    """LRP-0: the epsilon rule with epsilon 0 (for a ReLU network: gradient times input)."""
    return Rule("epsilon", epsilon=0.0)


def ZPlus(stabilizer: float = 1e-6) -> Rule:
    """The z+ rule (alpha=1, beta=0; Montavon et al., 2017)."""
    return Rule("zplus", epsilon=stabilizer)


def AlphaBeta(alpha: float = 2.0, beta: float = 1.0, stabilizer: float = 1e-6) -> Rule:
    """The alpha-beta rule (Bach et al., 2015): positive contributions weighted alpha, negative beta."""
    return Rule("alpha_beta", epsilon=stabilizer, alpha=alpha, beta=beta)


def Gamma(gamma: float = 0.25, stabilizer: float = 1e-6) -> Rule:
    """The generalized gamma rule (Montavon et al., 2019; Andéol et al., 2021)."""
    return Rule("gamma", epsilon=stabilizer, gamma=gamma)


def ZBox(low: Any, high: Any, stabilizer: float = 1e-6) -> Rule:
    """The z^B rule for a bounded input (Montavon et al., 2017): ``low``/``high`` the input's bounds."""
    return Rule("zbox", epsilon=stabilizer, low=low, high=high)


def Flat(stabilizer: float = 1e-6) -> Rule:
    """The flat rule: relevance spread evenly over each output's receptive field."""
    return Rule("flat", epsilon=stabilizer)


def WSquare(stabilizer: float = 1e-6) -> Rule:
    """The w-square rule (Montavon et al., 2017): relevance by squared weights."""
    return Rule("wsquare", epsilon=stabilizer)


def Pass() -> Rule:
    """Relevance passed unchanged (element-wise layers)."""
    return Rule("pass")


def Norm(stabilizer: float = 1e-6) -> Rule:
    """LRP-0 of a layer without weights (average pooling): ``x * R / stab(y)``."""
    return Rule("norm", epsilon=stabilizer)


def Gradient() -> Rule:
    """The layer's plain gradient."""
    return Rule("gradient")


def _rules(value: Any, what: str, keys: tuple[str, ...] | None) -> Mapping[str, Rule]:
    if value is None:
        return MappingProxyType({})
    if not isinstance(value, Mapping):
        raise XaikitTypeError(f"Composite {what} must be a dict {{name: Rule}}; got {describe(value)}")
    for k, v in value.items():
        if not isinstance(k, str):
            raise XaikitTypeError(f"Composite {what}: keys must be str; got {describe(k)}")
        if keys is not None and k not in keys:
            raise XaikitValueError(f"Composite {what}: {k!r} is not a layer kind; the kinds are {keys}")
        if not isinstance(v, Rule):
            raise XaikitTypeError(
                f"Composite {what}[{k!r}] must be a rule (xk.xai.rules.Epsilon(), ZPlus(), ...); got {describe(v)}"
            )
    return MappingProxyType(dict(value))


@dataclass(frozen=True)
class Composite:
    """Which rule each layer gets.

    Attributes:
        layers: a rule per layer kind (:data:`KINDS`), e.g. ``{"conv": ZPlus(), "dense": Epsilon()}``.
        first: rules for the first layer of these kinds that the model's input reaches (its
            first convolution or dense layer), e.g. ``{"conv": Flat(), "dense": Flat()}``.
        names: rules by layer name (a torch ``named_modules`` path, a Keras layer name); they win
            over ``first`` and ``layers``.
        name: a label for tables and errors.
        canonize: merge each BatchNorm into the convolution or dense layer whose output it
            normalizes (computed on the fly: the model is not changed), so that the pair gets one
            rule with the merged weights (what zennit's canonizers do).

    Example:
        >>> c = Composite({"conv": ZPlus(), "dense": Epsilon(0.1)}, names={"fc2": Zero()})
        >>> c.rule_for("fc2", "dense", False).epsilon, c.rule_for("fc1", "dense", False).epsilon
        (0.0, 0.1)
        >>> c.rule_for("relu", "activation", False).kind
        'pass'
    """

    layers: Mapping[str, Rule] = field(default_factory=dict)
    first: Mapping[str, Rule] = field(default_factory=dict)
    names: Mapping[str, Rule] = field(default_factory=dict)
    name: str = "custom"
    canonize: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "layers", _rules(self.layers, "layers", KINDS))
        object.__setattr__(self, "first", _rules(self.first, "first", ("conv", "dense")))
        object.__setattr__(self, "names", _rules(self.names, "names", None))
        if not isinstance(self.canonize, bool):
            raise XaikitTypeError(f"Composite canonize must be True or False; got {describe(self.canonize)}")

    def rule_for(self, name: str, kind: str | None, first: bool) -> Rule:
        """The rule of a layer: by its name, else (the first conv/dense layer) ``first``, else by
        its kind, else the kind's default (:data:`DEFAULT_RULES`; a layer of no kind: its
        gradient)."""
        if name in self.names:
            return self.names[name]
        if first and kind is not None and kind in self.first:
            return self.first[kind]
        if kind is not None and kind in self.layers:
            return self.layers[kind]
        return Rule(DEFAULT_RULES.get(kind or "", "gradient"))

    def with_canonize(self, canonize: bool) -> Composite:
        """This composite with ``canonize`` set."""
        return Composite(dict(self.layers), dict(self.first), dict(self.names), self.name, canonize)

    def with_names(self, names: Mapping[str, Rule]) -> Composite:
        """This composite with rules for these layer names added (they win over the ones it had).

        Example:
            >>> composite("epsilon_plus_flat").with_names({"conv1": Gradient()}).rule_for("conv1", "conv", True).kind
            'gradient'
        """
        return Composite(
            dict(self.layers), dict(self.first), {**self.names, **names}, self.name, self.canonize
        )


def _preset(name: str, epsilon: float, stabilizer: float, gamma: float, low: Any, high: Any) -> Composite:
    dense = {"dense": Epsilon(epsilon)}
    flat = {"conv": Flat(stabilizer), "dense": Flat(stabilizer)}
    if name == "epsilon_plus":
        return Composite({"conv": ZPlus(stabilizer), **dense}, name=name)
    if name == "epsilon_plus_flat":
        return Composite({"conv": ZPlus(stabilizer), **dense}, flat, name=name)
    if name == "epsilon_alpha2_beta1":
        return Composite({"conv": AlphaBeta(2.0, 1.0, stabilizer), **dense}, name=name)
    if name == "epsilon_alpha2_beta1_flat":
        return Composite({"conv": AlphaBeta(2.0, 1.0, stabilizer), **dense}, flat, name=name)
    if name == "epsilon_gamma_box":
        if low is None or high is None:
            raise XaikitValueError(
                "composite 'epsilon_gamma_box' needs the input's bounds: pass low= and high= (a number "
                "or one per channel, e.g. the normalized values of pixel 0 and 255)"
            )
        return Composite(
            {"conv": Gamma(gamma, stabilizer), **dense}, {"conv": ZBox(low, high, stabilizer)}, name=name
        )
    if name == "epsilon":
        return Composite({"conv": Epsilon(epsilon), "dense": Epsilon(epsilon)}, name=name)
    raise XaikitValueError(f"composite must be one of {COMPOSITES} or a Composite; got {name!r}")


#: the named composites (zennit's presets of the same names)
COMPOSITES = (
    "epsilon_plus_flat",
    "epsilon_plus",
    "epsilon_gamma_box",
    "epsilon_alpha2_beta1",
    "epsilon_alpha2_beta1_flat",
    "epsilon",
)


def composite(
    value: Any = "epsilon_plus_flat",
    *,
    epsilon: float = 1e-6,
    stabilizer: float = 1e-6,
    gamma: float = 0.25,
    low: Any = None,
    high: Any = None,
    canonize: bool = True,
) -> Composite:
    """A composite by name (:data:`COMPOSITES`, ``-`` and ``_`` alike) or a :class:`Composite`
    as it is (``canonize`` then set on it)."""
    if isinstance(value, Composite):
        return value.with_canonize(canonize)
    if not isinstance(value, str):
        raise XaikitTypeError(f"composite must be a name {COMPOSITES} or a Composite; got {describe(value)}")
    return _preset(value.lower().replace("-", "_"), epsilon, stabilizer, gamma, low, high).with_canonize(
        canonize
    )
