"""The scalar mix of ELMo (Peters et al., 2018, eq. 1): ``ELMo_k = gamma * sum_j softmax(w)_j h_{k,j}``, a task's
learned weighting of the biLM's ``L + 1`` layers. [`ElmoModel`] holds one per output representation."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn


class ElmoScalarMix(nn.Module):
    """A task's learned mix of the biLM layers: ``gamma * sum_j softmax(w)_j * norm(h_j)``, then dropout.

    Args:
        num_layers: layers to mix (``L + 1``: the token layer and the L biLSTM layers).
        layer_norm: ``None``; ``"batch"``: normalise each layer with the mean and variance of all
            its unmasked elements in the batch, as the original does (the result then depends on
            the rest of the batch); ``"token"``: normalise each word vector on its own.
        dropout: dropout on the mixed vector.

    ``l2_penalty()`` is ``||w||^2``; heads add ``lambda * l2_penalty()`` to their loss.
    """

    def __init__(self, num_layers: int, layer_norm: str | None = None, dropout: float = 0.0):
        super().__init__()
        if layer_norm not in (None, "batch", "token"):
            raise ValueError(f"layer_norm must be None, 'batch' or 'token', got {layer_norm!r}")
        self.scalar_parameters = nn.Parameter(torch.zeros(num_layers))
        self.gamma = nn.Parameter(torch.ones(1))
        self.layer_norm = layer_norm
        self.dropout = nn.Dropout(dropout)

    def forward(self, layers: Sequence[torch.Tensor], mask: torch.Tensor) -> torch.Tensor:
        """Mix ``layers`` (each ``(B, W, H)``) under ``mask`` ``(B, W)``; returns ``(B, W, H)``, zero where masked."""
        if len(layers) != self.scalar_parameters.numel():
            raise ValueError(f"expected {self.scalar_parameters.numel()} layers to mix, got {len(layers)}")
        weights = torch.softmax(self.scalar_parameters, dim=0)
        keep = mask.unsqueeze(-1).to(layers[0].dtype)
        mixed = sum(w * self._normalize(layer, keep) for w, layer in zip(weights, layers, strict=True))
        return self.dropout(self.gamma * mixed) * keep

    def _normalize(self, layer: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        if self.layer_norm == "token":
            return F.layer_norm(layer, layer.shape[-1:], eps=1e-12)
        if self.layer_norm == "batch":
            count = (keep.sum() * layer.shape[-1]).clamp(min=1)
            mean = (layer * keep).sum() / count
            variance = (((layer - mean) * keep) ** 2).sum() / count
            return (layer - mean) / torch.sqrt(variance + 1e-12)
        return layer

    def l2_penalty(self) -> torch.Tensor:
        """``||w||^2`` of the (pre-softmax) mixing weights."""
        return (self.scalar_parameters**2).sum()


__all__ = ["ElmoScalarMix"]
