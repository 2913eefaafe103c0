"""The token cache: layer 0 (the character CNN's word vectors) of a vocabulary, computed once and looked up.

As the original's cached-vocabulary mode: ``build_token_cache(model, words)`` precomputes the vectors of
``words`` and puts the cache on the model (``model.token_cache``), whose ``embed_words`` then looks those words up
instead of running the character CNN on them; other words still go through the CNN, so outputs do not change.
The cache is not saved with the model; it is ignored while the character encoder is being trained, and dropped
(with a warning) at the next call once the encoder's weights differ from those it was built with: after an
optimizer step, ``load_state_dict``, any in-place edit, or moving the model to another device or dtype (build it
after ``.to()``). It keeps a copy of the encoder's weights for that check.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from tqdm.auto import tqdm
from transformers.utils import logging

from ..characters import word_to_char_ids
from ..checks_elmo import check_character_ids

logger = logging.get_logger(__name__)


class TokenCache:
    """Layer-0 vectors ``(N, P)`` of ``N`` distinct words, by their character row, and the character encoder's
    weights they were computed with."""

    def __init__(self, rows: torch.Tensor, vectors: torch.Tensor, weights: list[torch.Tensor]):
        self.slots = {row.numpy().tobytes(): index for index, row in enumerate(rows)}  # character row -> index
        self.key_dtype = rows.dtype
        self.vectors = vectors
        self.weights = weights

    def __len__(self) -> int:
        return len(self.slots)

    def is_current(self, model) -> bool:
        """Whether ``model``'s character encoder still has the weights the cache was built with.

        Compares the weights themselves with the copy taken when building (dtype, device, shape and every value),
        so any change counts: an optimizer step (fused kernels too, which autograd's version counters do not see),
        ``load_state_dict``, in-place edits (also through ``.data``), ``.to()``. The cost is one read of the
        encoder's weights per call (18M values for the original model: ~30 ms on one CPU thread, a few % of what
        the cache saves on a batch of 640 words).
        """
        params = list(model.char_cnn.parameters())
        return len(self.weights) == len(params) and all(
            old.dtype == new.dtype and old.device == new.device and old.shape == new.shape and torch.equal(old, new)
            for old, new in zip(self.weights, params, strict=True)
        )

    def embed(self, model, unique: torch.Tensor) -> torch.Tensor:
        """Layer 0 ``(n, P)`` of ``n`` distinct words ``unique (n, C)``: cached vectors where the cache has the word,
        the character encoder's output elsewhere. A cache that no longer fits ``model`` is dropped first."""
        if not self.is_current(model):
            logger.warning(
                "the token cache was built for other character-encoder weights (they changed, or the model moved "
                "to another device or dtype): dropped it; call build_token_cache again to use one"
            )
            model.token_cache = None
            return model.char_cnn(unique)
        keys = unique.to(self.key_dtype).cpu().numpy()
        slots = torch.tensor([self.slots.get(row.tobytes(), -1) for row in keys], device=unique.device)
        cached = self.vectors.to(device=unique.device, dtype=model.dtype)
        vectors = cached.index_select(0, slots.clamp(min=0))
        missing = slots.lt(0).nonzero().squeeze(1)
        if missing.numel():
            # in the cache's dtype: under torch.autocast the encoder returns bfloat16 or float16
            vectors[missing] = model.char_cnn(unique.index_select(0, missing)).to(vectors.dtype)
        return vectors


@torch.no_grad()
def build_token_cache(model, words: Iterable[str] | torch.Tensor, batch_size: int = 2048, progress: bool = True) -> int:
    """Precompute layer 0 of ``words`` for ``model`` (an [`ElmoModel`]) and set ``model.token_cache``; a new cache
    replaces the old one.

    Args:
        model: an ``ElmoModel`` (a head's base model: ``tagger.elmo``).
        words: e.g. ``tokenizer.get_vocab()`` or the lines of a bilm-tf vocabulary file; or the words'
            character ids ``(N, C)`` as the tokenizer gives them (rows may repeat).
        batch_size: words per character-CNN call.
        progress: show a progress bar.

    Returns:
        The number of distinct words cached.

    Raises:
        ValueError: character ids that are not ``(N, C)`` with ``C = config.max_characters_per_token``, or outside
            the character range (the old cache is then kept).
    """
    chars = model.boundary_ids.shape[-1]  # C, or C + 1 with a word id (a word input: ELMoForManyLangs)
    # int16 holds ELMo's 262 character ids; a per-model character vocabulary or a word id may need more.
    small = model.config.n_characters <= 1 << 15 and not model.needs_vocab_ids
    key_dtype = torch.int16 if small else torch.int32
    if isinstance(words, torch.Tensor):
        if words.dim() != 2 or words.shape[1] != chars:
            raise ValueError(f"character ids must be (words, {chars}), got shape {tuple(words.shape)}")
        check_character_ids(words[:, : model.config.max_characters_per_token], model.config.n_characters)
        table = words.to(device="cpu", dtype=key_dtype)
    elif model.config.char_vocabulary != "elmo":
        raise ValueError(
            "this model reads its own character vocabulary: give build_token_cache the rows of its tokenizer "
            "(input_ids, with vocab_ids as a last column if the model has a word input), not words"
        )
    else:
        table = torch.tensor([word_to_char_ids(w, chars) for w in words], dtype=torch.int16).view(-1, chars)
    table = torch.unique(table, dim=0)  # distinct rows (two long words may share their first C - 2 bytes)
    vectors = []
    bar_off = not progress or not logging.is_progress_bar_enabled()  # transformers' switch too
    for start in tqdm(range(0, len(table), batch_size), desc="Caching word vectors", disable=bar_off):
        vectors.append(model.char_cnn(table[start : start + batch_size].long().to(model.device)))
    model.token_cache = None
    if vectors:
        weights = [p.detach().clone() for p in model.char_cnn.parameters()]
        model.token_cache = TokenCache(table, torch.cat(vectors), weights)
    return len(table)


def token_cache_size(model) -> int:
    """The number of words in ``model``'s token cache (0: there is none)."""
    return len(model.token_cache) if model.token_cache is not None else 0


__all__ = ["TokenCache", "build_token_cache", "token_cache_size"]
