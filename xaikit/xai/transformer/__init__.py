"""Attention methods for vision transformers: attention rollout and gradient-weighted
attention relevance (:mod:`xaikit.xai.transformer.attention`)."""

from xaikit.xai.transformer import attention  # noqa: F401  (registers the records)
