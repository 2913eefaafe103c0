"""Pairs of texts in one row (premise and hypothesis, question and context), each read by the biLM on its own.

The paper's task models for two texts (ESIM for SNLI, BiDAF for SQuAD) ran ELMo over each text separately: the
biLM never read across the boundary, and each text had its own ``<S>``/``</S>`` and fresh LSTM states. The
tokenizer gives a pair as one row (the first text's words, then the second's) with ``token_type_ids`` 0 and 1. This
module splits such rows into ``2B`` left-aligned rows (all first texts, then all second texts), so that the biLM
reads every text in one batched pass, and puts each word's vectors back at its position afterwards.

Everything is index arithmetic on tensors (``index_select`` with computed indices; no Python loop over rows, no
``.tolist()``, no boolean indexing) and the split keeps the width ``W``, so shapes do not depend on the data; only
[`check_token_type_ids`] inspects values, to refuse bad input (in a graph, as ``torch._assert_async``).

Shapes: B rows, W words (after padding), C characters per word, H any feature width.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch

from .graph_path_elmo import in_graph


class PairLayout(NamedTuple):
    """Where each word of a batch of pairs goes when its texts are split apart, and where it comes back from.

    Attributes:
        source: ``(2B, W)`` int64: for slot ``(r, j)`` of the split batch (row ``r < B``: row ``r``'s first text;
            row ``B + b``: row ``b``'s second text), the flat index ``b * W + w`` of the word it holds in the pair
            batch (clamped where the slot is empty).
        split_mask: ``(2B, W)`` bool, True where the slot holds a word: each text left-aligned in its row.
        target: ``(B, W)`` int64: for word ``(b, w)`` of the pair batch, the flat index ``r * W + j`` of its slot.
        mask: ``(B, W)`` bool, the pair batch's word mask.
    """

    source: torch.Tensor
    split_mask: torch.Tensor
    target: torch.Tensor
    mask: torch.Tensor


def check_token_type_ids(token_type_ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Validate ``token_type_ids`` ``(B, W)`` against the word mask ``(B, W)`` bool; returns them as int64, 0 at
    padding (whatever the tokenizer's pad value).

    Raises:
        ValueError: another shape than the mask's, a float dtype, a value other than 0 and 1 at a word, or a row
            where a first-text word (0) follows a second-text word (1): a pair is the first text's words, then the
            second's.
    """
    if not isinstance(token_type_ids, torch.Tensor) or token_type_ids.shape != mask.shape:
        shape = tuple(token_type_ids.shape) if isinstance(token_type_ids, torch.Tensor) else type(token_type_ids)
        raise ValueError(
            f"token_type_ids must be a (batch, words) tensor like attention_mask {tuple(mask.shape)}, got {shape}"
        )
    if token_type_ids.is_floating_point() or token_type_ids.is_complex():  # .long() would read 0.7 as 0
        raise ValueError(f"token_type_ids must be integers (0 or 1), got {token_type_ids.dtype}")
    types = token_type_ids.long().masked_fill(~mask, 0)
    binary = (types == 0) | (types == 1)  # (B, W)
    # 0s then 1s over each row's words: a word below the running maximum is a first-text word after a second-text
    # one (a running maximum, not a comparison of neighbours, whose W - 1 slices torch.export cannot size).
    ordered = types.eq(types.cummax(dim=1).values) | ~mask  # (B, W)
    if in_graph():  # torch.compile / torch.export: checked when the graph runs (RuntimeError, no host read)
        torch._assert_async(binary.all(), "token_type_ids must be 0 or 1 at every word")
        torch._assert_async(ordered.all(), "token_type_ids must be 0s, then 1s, in every row")
        return types
    if not bool(binary.all()):
        raise ValueError(
            "token_type_ids must be 0 (first text) or 1 (second text) at every word, got "
            f"{types[~binary].unique()[:8].tolist()}"
        )
    if not bool(ordered.all()):
        raise ValueError(
            "token_type_ids must mark the first text's words (0) before the second text's (1) in every row, as "
            "ElmoTokenizer(text, text_pair) gives them; a row has a first-text word after a second-text word"
        )
    return types


def pair_layout(token_type_ids: torch.Tensor, mask: torch.Tensor) -> PairLayout:
    """The [`PairLayout`] of a batch of pairs: ``token_type_ids`` ``(B, W)`` (checked, see
    [`check_token_type_ids`]) and the word mask ``(B, W)`` bool. A row without second-text words gives an empty
    second row (it is a single text)."""
    types = check_token_type_ids(token_type_ids, mask)
    batch, words = mask.shape
    device = mask.device
    first_lengths = (mask & types.eq(0)).sum(dim=1)  # (B,)
    second_lengths = (mask & types.eq(1)).sum(dim=1)  # (B,)
    lengths = torch.cat([first_lengths, second_lengths])  # (2B,)
    starts = torch.cat([torch.zeros_like(first_lengths), first_lengths])  # (2B,) where each text starts in its row
    positions = torch.arange(words, device=device)  # (W,)
    owners = torch.arange(2 * batch, device=device) % batch  # (2B,) the pair row of each split row
    split_mask = positions.unsqueeze(0) < lengths.unsqueeze(1)  # (2B, W)
    column = (starts.unsqueeze(1) + positions.unsqueeze(0)).clamp(max=max(words - 1, 0))
    source = owners.unsqueeze(1) * words + column  # (2B, W)
    # Word (b, w) of text t sits in split row t * B + b at position w - t * first_lengths[b].
    split_row = types * batch + torch.arange(batch, device=device).unsqueeze(1)  # (B, W)
    split_column = (positions.unsqueeze(0) - types * first_lengths.unsqueeze(1)).clamp(min=0)
    target = split_row * words + split_column  # (B, W)
    return PairLayout(source=source, split_mask=split_mask, target=target, mask=mask)


def split_pairs(values: torch.Tensor, layout: PairLayout) -> torch.Tensor:
    """``(B, W, ...)`` values of a batch of pairs -> ``(2B, W, ...)``: the first texts (rows ``0..B-1``), then the
    second texts (rows ``B..2B-1``), each left-aligned; zero at empty slots."""
    batch, words = layout.mask.shape
    flat = values.reshape(batch * words, *values.shape[2:])
    split = flat.index_select(0, layout.source.reshape(-1)).reshape(2 * batch, words, *values.shape[2:])
    keep = layout.split_mask.reshape(*layout.split_mask.shape, *([1] * (values.dim() - 2)))
    return split * keep.to(split.dtype)


def merge_pairs(values: torch.Tensor, layout: PairLayout) -> torch.Tensor:
    """The inverse of [`split_pairs`]: ``(2B, W, ...)`` -> ``(B, W, ...)``, each word's values back at its position
    in its pair's row; zero at padding."""
    batch, words = layout.mask.shape
    flat = values.reshape(2 * batch * words, *values.shape[2:])
    merged = flat.index_select(0, layout.target.reshape(-1)).reshape(batch, words, *values.shape[2:])
    keep = layout.mask.reshape(*layout.mask.shape, *([1] * (values.dim() - 2)))
    return merged * keep.to(merged.dtype)


def split_texts(values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(2B, ...)`` values of a split batch -> the first texts' ``(B, ...)`` and the second texts' ``(B, ...)``.

    Not ``chunk(2)``: ``torch.export`` cannot prove that ``chunk`` of a symbolic ``2B`` gives two pieces, and would fix
    the batch size."""
    return values.unflatten(0, (2, -1)).unbind(0)


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Softmax of ``scores`` over ``dim`` among the positions where ``mask`` (broadcast to ``scores``) is True.

    Masked positions get weight 0. Where no position is True (an empty text) the weights are uniform over the
    masked positions, which hold zero vectors in every use here, so the result is 0 and never NaN.
    """
    return torch.softmax(scores.masked_fill(~mask, torch.finfo(scores.dtype).min), dim=dim)


def pair_layers(
    compute_layers: Callable[[torch.Tensor, torch.Tensor, None], list[torch.Tensor]],
    input_ids: torch.Tensor,
    mask: torch.Tensor,
    token_type_ids: torch.Tensor,
    state: object | None,
) -> list[torch.Tensor]:
    """The biLM layers of a batch of pairs, each text read on its own, in one batched pass.

    Args:
        compute_layers: ``ElmoModel._compute_layers``: ``(R, W, C)`` ids and ``(R, W)`` mask -> ``L + 1`` layers
            ``(R, W, 2P)``, zero at padding.
        input_ids: ``(B, W, C)`` character ids (zero rows at padding).
        mask: ``(B, W)`` bool word mask.
        token_type_ids: ``(B, W)``, 0 for the first text's words, 1 for the second's.
        state: must be ``None``: each text starts from fresh LSTM states, as in the paper's task models.

    Returns:
        ``L + 1`` tensors ``(B, W, 2P)``: each word's vectors as when its text is encoded alone.
    """
    if state is not None:
        raise ValueError(
            "a pair of texts (token_type_ids) is read with fresh LSTM states for each text: do not pass lstm_state "
            "or return_lstm_state=True, and load the model with stateful=False"
        )
    layout = pair_layout(token_type_ids, mask)
    layers = compute_layers(split_pairs(input_ids, layout), layout.split_mask, None)
    return [merge_pairs(layer, layout) for layer in layers]


__all__ = [
    "PairLayout",
    "check_token_type_ids",
    "masked_softmax",
    "merge_pairs",
    "pair_layers",
    "pair_layout",
    "split_pairs",
]
