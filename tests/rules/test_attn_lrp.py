"""AttnLRP's transformer rules (torch): a self-attention block's relevance equals the rules
written out by hand in float64 numpy (softmax rule, uniform rule of the two attention products,
LayerNorm with its scale constant, LRP-0 of the linear layers), and a ViT of ``transformers``
gets relevance through ``explain(method="lrp")``."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from xaikit.backend.torch.attn_rules import TransformerRules  # noqa: E402

N, D, K = 5, 4, 3


class Block(torch.nn.Module):
    """Tokens (B, N, D) -> self-attention with a residual, LayerNorm, mean over tokens, a head."""

    def __init__(self, sdpa: bool = False) -> None:
        super().__init__()
        self.q = torch.nn.Linear(D, D, bias=False)
        self.k = torch.nn.Linear(D, D, bias=False)
        self.v = torch.nn.Linear(D, D, bias=False)
        self.ln = torch.nn.LayerNorm(D)
        self.head = torch.nn.Linear(D, K, bias=False)
        self.sdpa = sdpa

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.q(x), self.k(x), self.v(x)
        if self.sdpa:
            o = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        else:
            o = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(D), dim=-1) @ v
        return self.head(self.ln(x + o).mean(dim=1))


def _lin(x: np.ndarray, w: np.ndarray, r: np.ndarray) -> np.ndarray:
    """LRP-0 of z = x @ w.T (no bias): R_x = x * (R / z) @ w."""
    z = x @ w.T
    return x * ((r / z) @ w)


def _bilinear(
    a: np.ndarray, b: np.ndarray, r: np.ndarray, scale: float = 1.0
) -> tuple[np.ndarray, np.ndarray]:
    """Uniform rule of y = scale * a @ b: each term's share of R, half to each operand."""
    terms = scale * a[:, :, None] * b[None, :, :]  # (n, m, k)
    y = terms.sum(axis=1)
    share = terms / y[:, None, :] * r[:, None, :]
    return 0.5 * share.sum(axis=2), 0.5 * share.sum(axis=0)


def _reference(block: Block, x: np.ndarray, target: int) -> np.ndarray:
    """AttnLRP of one sample (N, D), every rule written out."""
    p = {k: v.detach().double().numpy() for k, v in block.state_dict().items()}
    q, k, v = x @ p["q.weight"].T, x @ p["k.weight"].T, x @ p["v.weight"].T
    s = q @ k.T / math.sqrt(D)
    a = np.exp(s - s.max(axis=1, keepdims=True))
    a /= a.sum(axis=1, keepdims=True)
    o = a @ v
    h = x + o
    mu, sd = h.mean(axis=1, keepdims=True), np.sqrt(h.var(axis=1, keepdims=True) + block.ln.eps)
    y = (h - mu) / sd * p["ln.weight"] + p["ln.bias"]
    m = y.mean(axis=0)
    out = m @ p["head.weight"].T
    r_out = np.zeros(K)
    r_out[target] = out[target]
    r_m = m * ((r_out / out) @ p["head.weight"])
    r_y = y / N / m * r_m  # the mean: LRP-0
    # LayerNorm, scale constant: y_i = sum_j (delta_ij - 1/D) / sd * w_i * h_j + b_i (LRP-0, bias absorbs)
    r_h = np.zeros_like(h)
    for n in range(N):
        lin = (np.eye(D) - 1.0 / D) / sd[n] * p["ln.weight"][:, None]  # (i, j)
        r_h[n] = h[n] * ((r_y[n] / y[n]) @ lin)
    r_x = x / h * r_h  # the residual sum
    r_o = o / h * r_h
    r_a, r_v = _bilinear(a, v, r_o)
    r_s = s * (r_a - a * r_a.sum(axis=1, keepdims=True))  # the softmax rule
    r_q, r_kt = _bilinear(q, k.T, r_s, 1.0 / math.sqrt(D))
    r_k = r_kt.T
    return r_x + _lin(x, p["v.weight"], r_v) + _lin(x, p["q.weight"], r_q) + _lin(x, p["k.weight"], r_k)


@pytest.mark.parametrize("sdpa", [False, True])
def test_attention_block_equals_the_written_out_rules(sdpa: bool) -> None:
    torch.manual_seed(0)
    block = Block(sdpa).double().eval()
    torch.nn.init.normal_(block.ln.weight, 1.0, 0.2)
    torch.nn.init.normal_(block.ln.bias, 0.0, 0.2)
    x = torch.randn(3, N, D, dtype=torch.float64, requires_grad=True)
    rules = TransformerRules()
    with rules:
        out = block(x)
    (g,) = torch.autograd.grad(out[:, 1].sum(), x)
    got = (x * g).detach().numpy()  # LRP-0 of the linear layers is their gradient times input
    want = np.stack([_reference(block, x[i].detach().numpy(), 1) for i in range(3)])
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)
    assert rules.calls == ({"attention": 1} if sdpa else {"product": 2}) | {"layer_norm": 1}
    # the plain gradient x input differs: the rules changed the pass
    (plain,) = torch.autograd.grad(block(x)[:, 1].sum(), x)
    assert np.abs((x * plain).detach().numpy() - want).max() > 1e-3 * np.abs(want).max()


def test_gates_and_products_of_weights() -> None:
    """A gate (operands of different shapes) passes relevance to the gated signal only; a product
    with a weight is a linear map, left as it is."""
    x = torch.rand(2, 3, 4, 4, dtype=torch.float64, requires_grad=True)
    w = torch.nn.Parameter(torch.rand(3, 1, 1, dtype=torch.float64))
    with TransformerRules() as rules:
        gate = torch.sigmoid(x.mean(dim=(2, 3), keepdim=True))
        y = (x * gate) * w
    (g,) = torch.autograd.grad(y.sum(), x)
    np.testing.assert_allclose((x * g).detach().numpy(), y.detach().numpy(), rtol=1e-12)  # R_x = R_y
    assert rules.calls == {"activation": 1, "gate": 1}
