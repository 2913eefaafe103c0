"""The pair head of [`ElmoForSequenceClassification`] (``config.classifier_head="pair"``): ESIM's local inference and
composition (Chen et al., ACL 2017, "Enhanced LSTM for Natural Language Inference"), the task model the ELMo paper
used for SNLI.

Per pair (premise ``a``, hypothesis ``b``), after each text's words went through the biLM on its own, the scalar mix
and the classifier's input-encoding BiLSTM (``\\bar a_i``, ``\\bar b_j``, both ``2H`` wide)::

    e_ij      = \\bar a_i . \\bar b_j                                    soft alignment (dot products)
    ~a_i      = sum_j softmax_j(e_ij) \\bar b_j,   ~b_j = sum_i softmax_i(e_ij) \\bar a_i
    m_a       = [\\bar a; ~a; \\bar a - ~a; \\bar a * ~a]                   (8H), likewise m_b
    v_a       = BiLSTM(ReLU(F m_a))                                     composition (F: 8H -> H; BiLSTM: 2H)
    v         = [max v_a; mean v_a; max v_b; mean v_b]                  (8H)
    logits    = W_2 dropout(tanh(W_1 dropout(v)))                       the MLP (8H -> H -> K)

[`ElmoEsimHead.compose`] gives ``v_a`` and ``v_b``; the classifier pools them (``pool_words``, ``"max_mean"``
whatever ``classifier_pooling`` says, as ESIM) and [`ElmoEsimHead.classify`] gives the logits. Both texts ride in
one ``2B``-row batch (first texts, then second texts; ``pairs_elmo.split_pairs``), so each LSTM runs once.

Shapes: B pairs, W words, H = classifier_hidden_size, K = num_labels.
"""

from __future__ import annotations

import torch
from torch import nn

from .modeling_elmo_tagging import ElmoTagEncoder
from .pairs_elmo import masked_softmax, split_texts


class ElmoEsimHead(nn.Module):
    """ESIM's inference, composition and MLP over two encoded texts (the input encoding is the classifier's own).

    Args:
        hidden_size: ``H``, per direction of the input encoding (the classifier's BiLSTM) and of the composition.
        num_labels: ``K``.
        dropout: dropout on the enhanced features and on the MLP's input and hidden layer.
    """

    def __init__(self, hidden_size: int, num_labels: int, dropout: float):
        super().__init__()
        self.projection = nn.Linear(8 * hidden_size, hidden_size)  # F
        self.composition = ElmoTagEncoder(hidden_size, hidden_size, 1, 0.0)
        self.hidden = nn.Linear(8 * hidden_size, hidden_size)  # W_1
        self.output = nn.Linear(hidden_size, num_labels)  # W_2
        self.dropout = nn.Dropout(dropout)

    def compose(self, encoded: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Soft alignment and composition.

        Args:
            encoded: ``(2B, W, 2H)``: rows ``0..B-1`` the first texts, rows ``B..2B-1`` the second texts, each
                left-aligned and zero past its end.
            mask: ``(2B, W)`` bool, True for words.

        Returns:
            ``(2B, W, 2H)``: ``v_a`` (rows ``0..B-1``) and ``v_b`` (rows ``B..2B-1``), zero past each text's end.
        """
        a, b = split_texts(encoded)  # (B, W, 2H) each
        mask_a, mask_b = split_texts(mask)  # (B, W) each
        scores = torch.bmm(a, b.transpose(1, 2))  # (B, W_a, W_b): e_ij
        aligned_a = torch.bmm(masked_softmax(scores, mask_b.unsqueeze(1), dim=2), b)  # (B, W, 2H): ~a
        aligned_b = torch.bmm(masked_softmax(scores, mask_a.unsqueeze(2), dim=1).transpose(1, 2), a)  # ~b
        enhanced = torch.cat(
            [torch.cat([x, y, x - y, x * y], dim=-1) for x, y in ((a, aligned_a), (b, aligned_b))]
        )  # (2B, W, 8H)
        projected = torch.relu(self.projection(self.dropout(enhanced)))  # (2B, W, H)
        return self.composition(projected, mask.sum(dim=1)) * mask.unsqueeze(-1).to(projected.dtype)

    def classify(self, pooled: torch.Tensor) -> torch.Tensor:
        """``(B, 8H)`` pooled ``[max v_a; mean v_a; max v_b; mean v_b]`` -> ``(B, K)`` logits."""
        return self.output(self.dropout(torch.tanh(self.hidden(self.dropout(pooled)))))


__all__ = ["ElmoEsimHead"]
