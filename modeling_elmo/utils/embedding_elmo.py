"""Embed a corpus of any size with bounded memory: length-bucketed batches, results in input order.

    from modeling_elmo import ElmoModel, ElmoTokenizer
    from modeling_elmo.utils.embedding_elmo import embed_corpus

    for index, layers in embed_corpus(model, tokenizer, open("corpus.txt")):
        ...  # layers: (L + 1, words, 2P) numpy array of sentence `index`

Sentences are read ``chunk_size`` at a time; each chunk is sorted by length and cut into batches of
at most ``batch_size`` sentences and ``max_batch_words`` padded word slots, so that sentences of
similar length share a batch and little work is wasted on padding. Results come back in input
order; this holds one chunk of sentences and its outputs. With ``ordered=False`` each batch's outputs
come back as soon as the batch is done (in length order within a chunk), and only one batch of
outputs is held: the memory then depends on neither the corpus size nor the chunk size.

The character encoder runs once per distinct word of a chunk, not once per batch: while a chunk runs, its words'
vectors are held in the model's token cache (``word_cache``; about 10% of WikiText-2's words are distinct within a
chunk of 4096 sentences).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Iterator

import numpy as np
import torch
from tqdm.auto import tqdm

from .token_cache import build_token_cache, token_cache_size

# AllenNLP's three (``allennlp elmo --all/--top/--average``, same meanings), then this package's two.
OUTPUTS = ("all", "top", "average", "elmo", "sentence_mean")
# The names before AllenNLP's were adopted: still accepted, with a FutureWarning.
DEPRECATED_OUTPUTS = {"layers": "all", "mean": "sentence_mean"}
# The outputs read straight off the biLM layers (no scalar mix needed).
LAYER_OUTPUTS = ("all", "top", "average")


def _batches(lengths: list[int], batch_size: int, max_batch_words: int) -> Iterator[list[int]]:
    """Indices into ``lengths``, sorted by length, cut into batches under both limits."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    batch: list[int] = []
    for i in order:
        longest = max(lengths[i], 1)  # sorted ascending: the newcomer is the longest
        if batch and (len(batch) == batch_size or (len(batch) + 1) * longest > max_batch_words):
            yield batch
            batch = []
        batch.append(i)
    if batch:
        yield batch


def resolve_output(output: str) -> str:
    """``output`` checked against [`OUTPUTS`]; an old name (``"layers"``, ``"mean"``) becomes the new one with a
    ``FutureWarning``."""
    if output in DEPRECATED_OUTPUTS:
        new = DEPRECATED_OUTPUTS[output]
        warnings.warn(
            f"output={output!r} is deprecated and will be removed in the next release; use output={new!r}",
            FutureWarning,
            stacklevel=3,
        )
        return new
    if output not in OUTPUTS:
        raise ValueError(f"output must be one of {OUTPUTS}, got {output!r}")
    return output


def embed_corpus(
    model,
    tokenizer,
    sentences: Iterable[str | list[str]],
    output: str = "all",
    batch_size: int = 64,
    max_batch_words: int = 4096,
    chunk_size: int = 4096,
    is_split_into_words: bool | None = None,
    progress: bool = True,
    total: int | None = None,
    ordered: bool = True,
    word_cache: bool = True,
) -> Iterator[tuple[int, np.ndarray]]:
    """Yield ``(index, array)`` for every sentence, in input order (or, with ``ordered=False``, batch by batch).

    Args:
        model: an [`ElmoModel`] (put it in eval mode and on its device first).
        tokenizer: its [`ElmoTokenizer`].
        sentences: raw text lines (split by the tokenizer) or lists of words. Lines are stripped;
            an empty line is a sentence of zero words.
        output: AllenNLP's three, with its meanings: ``"all"``: ``(L + 1, words, 2P)``, every biLM layer (the
            original's "dump biLM embeddings" layout); ``"top"``: ``(words, 2P)``, the last LSTM layer;
            ``"average"``: ``(words, 2P)``, the mean of the ``L + 1`` layers, word by word. Then this package's:
            ``"elmo"``: ``(words, 2P)``, the model's first scalar mix; ``"sentence_mean"``: ``(2P,)``, the
            mean of the ELMo vectors over the words (TF-Hub's ``default`` sentence vector; zeros for an empty
            sentence). The old names ``"layers"`` (= ``"all"``) and ``"mean"`` (= ``"sentence_mean"``) still
            work, with a ``FutureWarning``.
        batch_size: most sentences per batch (the default is ``elmo embed``'s).
        max_batch_words: most padded word slots (sentences x longest sentence) per batch; a
            longer sentence runs alone. The memory of a batch grows with it: at the original size, float32,
            the resident set rose by 390 MiB during a pass at 2048 or 4096 slots, 530 MiB at 8192
            (``benchmarks/bench_inference.py --embed_sweep``).
        chunk_size: sentences read ahead and sorted by length together.
        is_split_into_words: whether items are word lists; guessed from the first item if ``None``.
        progress: show a progress bar (sentences).
        total: the number of sentences, for the progress bar, when ``sentences`` has no ``len``.
        ordered: yield in input order, which holds the outputs of a whole chunk (``chunk_size`` arrays,
            about 1.2 GiB for 4096 sentences of 25 words with the original model's ``"all"``). ``False``
            yields every batch's outputs when the batch is done: each index still comes exactly once, and a
            chunk is complete before the next one starts, but within a chunk the order is by length.
        word_cache: while a chunk runs, hold the character encoder's vectors of its distinct words (and of
            ``<S>``, ``</S>``) in the model's token cache ([`build_token_cache`]), dropped at the end.
            At the original size a word takes 2 KB in float32: about 20 MB for a chunk of 4096 WikiText-2
            sentences (9,000-10,000 distinct words). The outputs are the same (to float rounding). Not done when
            the model already has a token cache: that one is used as it is, and kept.
    """
    output = resolve_output(output)
    if output not in LAYER_OUTPUTS and not model.config.num_output_representations:
        raise ValueError(f"output={output!r} needs a scalar mix; the model has num_output_representations=0")
    for name, value in (("batch_size", batch_size), ("max_batch_words", max_batch_words), ("chunk_size", chunk_size)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if total is None and hasattr(sentences, "__len__"):
        total = len(sentences)
    # Checked above at the call, not at the first next(); the work is done by the generator below.
    return _embed_chunks(
        model, tokenizer, sentences, output, batch_size, max_batch_words, chunk_size, is_split_into_words, progress,
        total, ordered, word_cache and token_cache_size(model) == 0,
    )  # fmt: skip


@torch.inference_mode()
def _embed_chunks(
    model,
    tokenizer,
    sentences: Iterable[str | list[str]],
    output: str,
    batch_size: int,
    max_batch_words: int,
    chunk_size: int,
    is_split_into_words: bool | None,
    progress: bool,
    total: int | None,
    ordered: bool,
    cache_chunks: bool,
) -> Iterator[tuple[int, np.ndarray]]:
    """The generator of [`embed_corpus`], on checked arguments; ``cache_chunks``: build a token cache per chunk."""
    device = model.device
    bar = tqdm(total=total, unit="sent", desc="Embedding", disable=not progress)
    iterator = iter(sentences)
    start = 0
    try:
        while True:
            chunk = [item for _, item in zip(range(chunk_size), iterator, strict=False)]
            if not chunk:
                return
            if is_split_into_words is None:
                is_split_into_words = not isinstance(chunk[0], str)
            if not is_split_into_words:
                chunk = [line.strip() for line in chunk]
            words = [tokenizer(item, is_split_into_words=is_split_into_words)["input_ids"] for item in chunk]
            if cache_chunks:
                distinct = torch.tensor(list({tuple(word) for item in words for word in item}), dtype=torch.long)
                chars = model.config.max_characters_per_token
                build_token_cache(
                    model, torch.cat([distinct.view(-1, chars), model.boundary_ids.cpu()]), progress=False
                )
            results: list[np.ndarray | None] = [None] * len(chunk) if ordered else []
            for batch in _batches([len(w) for w in words], batch_size, max_batch_words):
                encoded = tokenizer.pad({"input_ids": [words[i] for i in batch]}, return_tensors="pt")
                inputs = {k: v.to(device) for k, v in encoded.items()}
                out = model(**inputs, output_hidden_states=output in LAYER_OUTPUTS)
                if output == "all":
                    per_row = torch.stack(out.hidden_states, dim=1)  # (B, L + 1, W, 2P)
                elif output == "top":
                    per_row = out.hidden_states[-1]  # (B, W, 2P)
                elif output == "average":
                    per_row = torch.stack(out.hidden_states).mean(dim=0)  # (B, W, 2P), as numpy.average(axis=0)
                else:
                    per_row = out.elmo  # (B, W, 2P)
                for row, i in enumerate(batch):
                    n = len(words[i])
                    if output == "all":
                        value = per_row[row, :, :n]
                    elif output == "sentence_mean":  # padding is exactly zero: the masked mean
                        value = per_row[row, :n].mean(dim=0) if n else per_row.new_zeros(per_row.shape[-1])
                    else:
                        value = per_row[row, :n]
                    value = value.float().cpu().numpy()
                    if ordered:
                        results[i] = value
                    else:
                        results.append((i, value))
                bar.update(len(batch))
                if not ordered:
                    for i, value in results:
                        yield start + i, value
                    results.clear()
            if ordered:
                for offset, value in enumerate(results):
                    yield start + offset, value
            start += len(chunk)
    finally:
        bar.close()
        if cache_chunks:
            model.token_cache = None


__all__ = ["OUTPUTS", "embed_corpus", "resolve_output"]
