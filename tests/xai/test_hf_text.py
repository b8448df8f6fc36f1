"""A Hugging Face text classifier, built from a config (random weights, nothing downloads),
explained with respect to its token embeddings: a (B, T, H) sequence input, the padding mask as a
per-sample ``model_kwargs`` entry, and the output object's ``.logits``."""

from __future__ import annotations

import numpy as np
import pytest

import xaikit as xk

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
captum_attr = pytest.importorskip("captum.attr")

B, T, H = 3, 6, 16


@pytest.fixture(scope="module")
def bert_case():
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=50, hidden_size=H, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
        max_position_embeddings=T, num_labels=3, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
    )  # fmt: skip
    bert = transformers.BertForSequenceClassification(config).eval()

    class OnEmbeddings(torch.nn.Module):
        """The classifier as a function of the word embeddings (what is explained)."""

        def __init__(self) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, embeds: torch.Tensor, attention_mask: torch.Tensor) -> object:
            return self.bert(inputs_embeds=embeds, attention_mask=attention_mask)

    ids = torch.randint(1, 50, (B, T))
    mask = torch.ones(B, T, dtype=torch.long)
    mask[1, 4:] = 0  # sample 1 is padded after 4 tokens, sample 2 after 2
    mask[2, 2:] = 0
    embeds = bert.bert.embeddings.word_embeddings(ids).detach()
    return OnEmbeddings(), embeds, mask


def test_padding_mask_follows_the_rows(bert_case) -> None:
    model, embeds, mask = bert_case
    target = np.array([0, 1, 2])
    kw = {"attention_mask": mask}
    ig = xk.xai.explain(
        model, embeds, target=target, method="integrated", nsamples=8, baseline="zeros",
        model_kwargs=kw, max_batch=5,  # chunks that cut through the samples
    )  # fmt: skip
    assert ig.shape == (B, T, H)
    # batch == per sample, each with its own mask
    for b in range(B):
        one = xk.xai.explain(
            model, embeds[b : b + 1], target=target[b : b + 1], method="integrated", nsamples=8,
            baseline="zeros", model_kwargs={"attention_mask": mask[b : b + 1]},
        )  # fmt: skip
        np.testing.assert_allclose(ig[b], one[0], rtol=1e-4, atol=1e-6)
    # padded tokens are masked out of attention: they get (almost) nothing
    assert np.abs(ig[2, 2:]).max() < 1e-6 * np.abs(ig[2, :2]).max() + 1e-9

    # captum's additional_forward_args, on the logits
    def logits(e: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
        return model(e, attention_mask=m).logits

    theirs = captum_attr.IntegratedGradients(logits).attribute(
        embeds, baselines=torch.zeros_like(embeds), target=torch.as_tensor(target), n_steps=8,
        method="gausslegendre", additional_forward_args=(mask,),
    ).detach().numpy()  # fmt: skip
    np.testing.assert_allclose(ig, theirs, rtol=1e-4, atol=1e-5 * float(np.abs(theirs).max()))
