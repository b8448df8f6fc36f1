"""Models with known answers for the ``xaikit.evaluate`` tests, in both frameworks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

SIZE = 8
CHANNELS = 3
SQUARE = (slice(2, 5), slice(3, 7))  # rows 2..4, cols 3..6: 12 pixels


#: the weights ``torch.manual_seed(0); LeNet(input_shape=(C, 32, 32), classes=5)`` gives on a CPU
#: with vectorized kernels (AVX2, AVX-512), keys ``c<C>/<state_dict key>``: the LeNets that the
#: recorded Quantus results (tests/data/quantus_*.npz) were computed with. Seeded init is not
#: portable: ATen's scalar uniform_ (ATEN_CPU_CAPABILITY=default) rounds ~40% of the conv weights
#: one unit of 2^-24 differently, so the tests load these instead of re-drawing them.
LENET_WEIGHTS = Path(__file__).parent / "data" / "lenet_seed0.npz"


def seeded_lenet(channels: int, softmax: bool = True) -> Any:
    """The recorded LeNet (5 classes, 32x32, ``channels`` input channels) in eval mode."""
    import torch

    from xaikit.architecture.torch import LeNet

    model = LeNet(input_shape=(channels, 32, 32), classes=5, softmax=softmax)
    with np.load(LENET_WEIGHTS) as data:
        state = {
            k.split("/", 1)[1]: torch.as_tensor(data[k]) for k in data.files if k.startswith(f"c{channels}/")
        }
    model.load_state_dict(state)
    return model.eval()


def square_weights(rng: np.random.Generator, classes: int = 3) -> np.ndarray:
    """Channel-last weights (classes, H, W, C): class 0 looks only at the square (positive,
    distinct magnitudes); the other classes look everywhere."""
    w = rng.normal(size=(classes, SIZE, SIZE, CHANNELS))
    w[0] = 0.0
    region = w[0][SQUARE]
    w[0][SQUARE] = rng.uniform(0.5, 2.0, size=region.shape)
    return w.astype(np.float32)


def square_mask(batch: int) -> np.ndarray:
    m = np.zeros((batch, SIZE, SIZE), dtype=bool)
    m[:, SQUARE[0], SQUARE[1]] = True
    return m


def linear(framework: str, w: np.ndarray) -> Any:
    """f_c(x) = <w_c, x>: a bias-free linear model on images (torch channel-first input,
    Keras channel-last); ``w`` is channel-last (classes, H, W, C)."""
    classes = w.shape[0]
    if framework == "torch":
        import torch

        model = torch.nn.Sequential(
            torch.nn.Flatten(), torch.nn.Linear(SIZE * SIZE * CHANNELS, classes, bias=False)
        )
        with torch.no_grad():
            model[1].weight.copy_(torch.as_tensor(w.transpose(0, 3, 1, 2).reshape(classes, -1)))
        return model
    import tensorflow as tf

    layers = tf.keras.layers
    model = tf.keras.Sequential(
        [layers.Input((SIZE, SIZE, CHANNELS)), layers.Flatten(), layers.Dense(classes, use_bias=False)]
    )
    model.layers[-1].set_weights([w.reshape(classes, -1).T])
    return model


def logit_rounding(w: np.ndarray, x: np.ndarray, spread: float = 0.0) -> float:
    """How far two float32 evaluations of the linear model's logits may lie apart when they
    sum the same n = H*W*C products in another order (another batch size or chunk makes
    oneDNN / Eigen block the sum differently; another CPU picks other kernels): the
    probabilistic rounding bound of Higham and Mary (2019), lambda * sqrt(n) * u * sum |w_i x_i|
    with u = 2^-24 and lambda = 4, for each of the two evaluations. ``spread`` widens |x| for
    perturbed copies of the inputs (noise, imputation) by that much."""
    n = w[0].size
    mags = (
        np.abs(w.astype(np.float64)).reshape(len(w), -1)
        @ (np.abs(x.astype(np.float64)).reshape(len(x), -1) + spread).T
    )  # (classes, B)
    return float(2 * 4 * np.sqrt(n) * 2.0**-24 * mags.max())


def layout(framework: str, x: np.ndarray) -> np.ndarray:
    """Channel-last numpy images -> the framework's layout."""
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2)) if framework == "torch" else x


def contributions(w: np.ndarray, x: np.ndarray, target: int) -> np.ndarray:
    """Per-pixel contributions (B, H, W) of channel-last x to class ``target``."""
    return (w[target][None].astype(np.float64) * x.astype(np.float64)).sum(axis=-1)


def weights_of(framework: str, model: Any) -> list[np.ndarray]:
    if framework == "torch":
        return [t.detach().clone().numpy() for t in list(model.parameters()) + list(model.buffers())]
    return [np.array(v.numpy(), copy=True) for v in model.weights]


def float32_spread(score: Any, model: Any, *arrays: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``score(model, *arrays)`` on the float32 torch model and on a float64 copy of it (arrays
    cast to float64): the float32 scores and how far float32 rounding moves them (|32 - 64|).

    A recorded peer result (computed in float32 on the recording machine's CPU kernels) and ours
    (float32, on this machine's kernels, e.g. ``make test-numerics``'s SSE4.1 oneDNN) each sit
    about that far from the exact value; metrics that divide small differences (a one-pixel score
    drop, a map change under a tiny perturbation) amplify it far past 1e-5. Another CPU's kernels moved such scores by up to ~7x this
    spread (measured under SSE4.1 oneDNN), so tests compare with the peer to
    ``1e-5 + 10 * spread``: 1e-5 where rounding is harmless, wider only where this measurement
    shows it is not.
    """
    import copy

    ours = np.asarray(score(model, *arrays), dtype=np.float64)
    exact = np.asarray(
        score(copy.deepcopy(model).double(), *(np.asarray(a, dtype=np.float64) for a in arrays)),
        dtype=np.float64,
    )
    return ours, np.abs(ours - exact)
