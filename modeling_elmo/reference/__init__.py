"""A plain, step-by-step ELMo biLM: one sentence, one word, one gate at a time.

It follows the original formulas literally (``[x; h] @ W_0`` with the TensorFlow gate order, the
forget bias, the clips, the residual), keeps no batch, sorting or reversal tricks, and exists to
test and benchmark the batched [`ElmoModel`] against. It reads the weights of a model; it is not
meant for use (it is slow).
"""

from __future__ import annotations

import torch

from ..characters import begin_of_sentence_ids, end_of_sentence_ids

# [direction][layer] -> (h (P,), c (D,))
ReferenceState = list[list[tuple[torch.Tensor, torch.Tensor]]]


def _lstm_weights(layer, direction: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``W_0 (2P, 4D)``, ``B (4D,)`` and ``W_P (D, P)`` of one direction, in the original layout."""
    w0 = torch.cat([layer.input_kernel[direction], layer.state_kernel[direction]], dim=0)
    return w0, layer.bias[direction], layer.projection[direction]


def _lstm_step(layer, direction, x, h, c):
    w0, b, wp = _lstm_weights(layer, direction)
    gates = torch.cat([x, h]) @ w0 + b
    i, j, f, o = gates.chunk(4)
    c = torch.sigmoid(f + 1.0) * c + torch.sigmoid(i) * torch.tanh(j)
    if layer.cell_clip is not None:
        c = c.clamp(-layer.cell_clip, layer.cell_clip)
    h = (torch.sigmoid(o) * torch.tanh(c)) @ wp
    if layer.proj_clip is not None:
        h = h.clamp(-layer.proj_clip, layer.proj_clip)
    return h, c


def zero_state(model) -> ReferenceState:
    cfg = model.config
    zeros = (torch.zeros(cfg.projection_dim), torch.zeros(cfg.lstm_dim))
    return [[zeros for _ in range(cfg.n_layers)] for _ in range(2)]


@torch.no_grad()
def reference_forward(
    model, char_ids: torch.Tensor, state: ReferenceState | None = None
) -> tuple[torch.Tensor, ReferenceState]:
    """The biLM layers of ONE sentence, computed step by step.

    Args:
        model: an [`ElmoModel`] (its weights are read, its forward is not used).
        char_ids: ``(n, C)`` character ids of the sentence's ``n >= 1`` words (no boundaries).
        state: the carried states to start from (stateful mode); zeros when ``None``.

    Returns:
        ``(L + 1, n, 2P)``: ``[x; x]`` then ``[forward_h; backward_h]`` per layer; and the final states.
    """
    cfg = model.config
    state = zero_state(model) if state is None else state
    chars = cfg.max_characters_per_token
    rows = [torch.tensor(begin_of_sentence_ids(chars)), *char_ids, torch.tensor(end_of_sentence_ids(chars))]
    tokens = [model.char_cnn(row.unsqueeze(0))[0] for row in rows]  # <S> w_1 .. w_n </S>

    final: ReferenceState = [[], []]
    per_direction = []
    for d in range(2):  # forward, then backward (reading the sentence reversed)
        inputs = tokens if d == 0 else tokens[::-1]
        outputs = []
        for k, layer in enumerate(model.bilm.layers):
            h, c = state[d][k]
            layer_out = []
            for x in inputs:
                h, c = _lstm_step(layer, d, x, h, c)
                layer_out.append(h + x if layer.residual else h)
            final[d].append((h, c))
            inputs = layer_out
            outputs.append(layer_out if d == 0 else layer_out[::-1])
        per_direction.append(outputs)

    n = len(char_ids)
    result = [torch.stack([torch.cat([tokens[t], tokens[t]]) for t in range(1, n + 1)])]
    for fwd, bwd in zip(*per_direction, strict=True):
        result.append(torch.stack([torch.cat([fwd[t], bwd[t]]) for t in range(1, n + 1)]))
    return torch.stack(result), final
