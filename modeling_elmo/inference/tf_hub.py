"""Inference helpers over an [`ElmoModel`]: TF-Hub's named outputs for a tokenized batch, and sentence or word
vectors from text (``embed_sentences``), without gradients.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


@torch.no_grad()
def tf_hub_outputs(
    model,
    input_ids: torch.LongTensor,
    attention_mask: torch.Tensor | None = None,
    vocab_ids: torch.LongTensor | None = None,
) -> dict[str, torch.Tensor]:
    """The outputs of TF-Hub's ELMo module, by the names it uses, for one tokenized batch.

    An inference helper, as the TF-Hub module with ``trainable=False``: it runs without gradients (no tensor
    requires grad); the model's mode (``eval()`` / ``train()``, i.e. dropout) is the caller's. To train through
    ELMo, call the model itself (``model(**batch).elmo``). [`embed_sentences`] does the same from text, batch by
    batch, and returns one of these outputs.

    Args:
        model: an [`ElmoModel`] (a head's base model: ``tagger.elmo``).
        input_ids: ``(B, W, C)`` character ids from [`ElmoTokenizer`].
        attention_mask: ``(B, W)``, 1 for words (right padding); default: the non-empty character rows.
        vocab_ids: ``(B, W)`` word ids, for a model with a word input (ELMoForManyLangs).

    Returns:
        A dict of tensors, zero at padded words:

        - ``word_emb``: ``(B, W, P)``, layer 0, the character-based word vectors (not doubled).
        - ``lstm_outputs1``, ``lstm_outputs2`` (one per LSTM layer, ``lstm_outputs{k}``): ``(B, W, 2P)``,
          ``[forward_h; backward_h]`` of layer ``k``.
        - ``elmo``: ``(B, W, 2P)``, the first scalar mix (the learned weighted sum of the layers, as TF-Hub's
          trainable ``elmo``); a model without mixes (``num_output_representations=0``) uses equal weights.
        - ``default``: ``(B, 2P)``, the mean of ``elmo`` over each sentence's words (an empty sentence gets
          zeros): TF-Hub's fixed mean-pooled sentence vector.
        - ``sequence_len``: ``(B,)`` words per sentence.
    """
    out = model(
        input_ids, attention_mask=attention_mask, output_hidden_states=True, return_dict=True, vocab_ids=vocab_ids
    )
    mask, layers = out.mask.bool(), out.hidden_states
    elmo = out.elmo if out.elmo is not None else torch.stack(layers).mean(dim=0)
    lengths = mask.sum(dim=1)
    outputs = {"word_emb": layers[0][..., : model.config.projection_dim]}
    outputs.update({f"lstm_outputs{k}": layer for k, layer in enumerate(layers[1:], start=1)})
    outputs["elmo"] = elmo
    # Masked mean: padded positions are exactly zero, so a sum over words divided by the count.
    outputs["default"] = elmo.sum(dim=1) / lengths.clamp(min=1).unsqueeze(-1).to(elmo.dtype)
    outputs["sequence_len"] = lengths
    return outputs


def embed_sentences(
    model,
    sentences: Sequence[str] | Sequence[Sequence[str]],
    tokenizer=None,
    output: str = "default",
    batch_size: int = 32,
    is_split_into_words: bool | None = None,
) -> torch.Tensor | list[torch.Tensor]:
    """Embed sentences (raw text, or lists of words): one output of [`tf_hub_outputs`], in eval mode and without
    gradients, tokenized and batched here.

    Unlike [`tf_hub_outputs`], which returns a dict of every output for one tokenized batch, this returns the
    one output asked for, without padding: a tensor of sentence vectors for ``"default"``, else one tensor per
    sentence.

    Args:
        model: an [`ElmoModel`].
        sentences: strings (split into words by the tokenizer) or lists of words.
        tokenizer: an [`ElmoTokenizer`] (e.g. ``ElmoTokenizer.from_pretrained(path)``; any one works: character
            ids do not depend on a vocabulary). Required: the model code does not import the tokenizer.
        output: a key of [`tf_hub_outputs`]: ``"default"`` (sentence vectors), ``"word_emb"``,
            ``"lstm_outputs1"``, ``"lstm_outputs2"``, ``"elmo"``.
        batch_size: sentences per forward pass.
        is_split_into_words: default: True when the first sentence is a list of words.

    Returns:
        ``output="default"``: a ``(N, 2P)`` tensor. Otherwise a list of ``N`` tensors ``(words_i, width)``.
    """
    valid = ("default", "word_emb", "elmo") + tuple(f"lstm_outputs{k}" for k in range(1, model.config.n_layers + 1))
    if output not in valid:
        raise ValueError(f"output must be one of {valid}, got {output!r}")
    if isinstance(sentences, str):
        raise TypeError("embed_sentences takes a list of sentences; wrap a single sentence in a list")
    sentences = list(sentences)
    if tokenizer is None:
        raise TypeError(
            "embed_sentences needs the tokenizer: embed_sentences(model, sentences, tokenizer=ElmoTokenizer()) "
            "or ElmoTokenizer.from_pretrained(path)"
        )
    if is_split_into_words is None:
        is_split_into_words = bool(sentences) and not isinstance(sentences[0], str)
    was_training = model.training
    model.eval()
    results: list[torch.Tensor] = []
    try:
        with torch.no_grad():
            for start in range(0, len(sentences), batch_size):
                chunk = sentences[start : start + batch_size]
                batch = tokenizer(chunk, is_split_into_words=is_split_into_words, padding=True, return_tensors="pt")
                ids = batch["input_ids"].to(model.device)
                if ids.dim() != 3:  # a chunk of empty sentences pads to (n, 0)
                    ids = ids.reshape(len(chunk), -1, model.config.max_characters_per_token)
                mask = batch["attention_mask"].to(model.device).reshape(ids.shape[:2])
                vocab_ids = batch.get("vocab_ids")
                vocab_ids = None if vocab_ids is None else vocab_ids.to(model.device).reshape(ids.shape[:2])
                out = tf_hub_outputs(model, ids, mask, vocab_ids)[output]
                if output == "default":
                    results.append(out)
                else:
                    results.extend(row[:n] for row, n in zip(out, mask.sum(dim=1).tolist(), strict=True))
    finally:
        model.train(was_training)
    if output == "default":
        width = 2 * model.config.projection_dim
        return torch.cat(results) if results else torch.zeros(0, width, dtype=model.dtype, device=model.device)
    return results


__all__ = ["embed_sentences", "tf_hub_outputs"]
