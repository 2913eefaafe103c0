"""Embed a corpus of any size with bounded memory: length-bucketed batches, results in input order.

    from modeling_elmo import ElmoModel, ElmoTokenizer
    from modeling_elmo.inference.embed_corpus import embed_corpus

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

import ctypes
import functools
import sys
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


def _char_array(ids: list[list[int]], chars: int, dtype: type = np.int16) -> np.ndarray:
    """A sentence's character ids, ``words`` lists of ``chars`` ints, as a ``(words, chars)`` array (int16 unless
    a per-model character set needs more)."""
    array = np.asarray(ids, dtype=dtype)
    return array.reshape(0, chars) if array.size == 0 else array


def _release_freed_memory() -> None:
    """Give the memory freed by a batch back to the system (glibc's ``malloc_trim``; elsewhere nothing).

    Batches have many shapes, so their freed buffers leave holes of many sizes in the C heap, which glibc keeps
    resident (buffers up to 32 MiB come from the heap once glibc's mmap threshold has risen): trimmed once per
    chunk, the resident set still crept up chunk after chunk (issue 26, 17); once per batch it stays flat, for
    ~5-10 ms a call; the CPU time rose by ~10% on the small model (the trimmed pages fault back in).
    """
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _malloc_trim():
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None).malloc_trim  # glibc only (not musl)
    except (OSError, AttributeError):
        return None


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
    bar: tqdm | None = None,
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
        bar: a progress bar of the caller's to advance by each batch's sentences, in place of one of this
            function's own (``progress`` and ``total`` are then not used); left open (e.g. one bar over the many
            calls of [`embed_dataset`], one per ``Dataset.map`` batch).
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
        total, ordered, word_cache and token_cache_size(model) == 0, bar,
    )  # fmt: skip


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
    bar: tqdm | None = None,
) -> Iterator[tuple[int, np.ndarray]]:
    """The generator of [`embed_corpus`], on checked arguments; ``cache_chunks``: build a token cache per chunk;
    ``bar``: the caller's progress bar (not closed here), else one of its own."""
    device = model.device
    chars = model.config.max_characters_per_token
    id_dtype = np.int16 if model.config.n_characters <= np.iinfo(np.int16).max else np.int32
    needs_word_ids = getattr(model, "needs_vocab_ids", False)
    own_bar = bar is None
    if own_bar:
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
            # Each sentence's character ids as one (words, C) array: as lists of ints they took ~10x the memory
            # (a 56-byte list and 8-byte pointers per word), ~50 MB for a chunk of 4096 sentences.
            encoded = [tokenizer(item, is_split_into_words=is_split_into_words) for item in chunk]
            words = [_char_array(item["input_ids"], chars, id_dtype) for item in encoded]
            # A model with a word input (ELMoForManyLangs) also reads each word's id: its rows end with it.
            word_ids = [np.asarray(item["vocab_ids"], np.int32) for item in encoded] if needs_word_ids else None
            chunk_size_read = len(chunk)
            del chunk, encoded  # the text is not needed any more
            if cache_chunks:
                rows = (
                    words
                    if word_ids is None
                    else [np.column_stack([w, i]) for w, i in zip(words, word_ids, strict=True)]
                )
                width = model.boundary_ids.shape[-1]  # C, or C + 1 with the word id
                distinct = np.unique(
                    np.concatenate([*rows, np.zeros((0, width), rows[0].dtype if rows else id_dtype)]), axis=0
                )
                table = torch.cat([torch.from_numpy(distinct).long(), model.boundary_ids.cpu()])
                with torch.inference_mode():
                    build_token_cache(model, table, progress=False)
                del distinct, table, rows
            results: list[np.ndarray | None] = [None] * chunk_size_read if ordered else []
            for batch in _batches([len(w) for w in words], batch_size, max_batch_words):
                features = {"input_ids": [words[i].tolist() for i in batch]}
                if word_ids is not None:
                    features["vocab_ids"] = [word_ids[i].tolist() for i in batch]
                encoded = tokenizer.pad(features, return_tensors="pt")
                inputs = {k: v.to(device) for k, v in encoded.items()}
                with torch.inference_mode():  # not a decorator: torch's generator wrapper holds the last result
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
                out = per_row = inputs = encoded = value = None  # the batch's buffers, freed before the trim
                _release_freed_memory()
                if not ordered:
                    for i, value in results:
                        yield start + i, value
                    results.clear()
            # Nothing of this chunk outlives it: the cache and the word arrays go before the next chunk is read
            # (before, they lived on while it was read and tokenized, so two chunks' worth coexisted).
            if cache_chunks:
                model.token_cache = None
            del words
            if ordered:
                for offset in range(chunk_size_read):
                    value, results[offset] = results[offset], None  # the caller holds it, if anyone
                    yield start + offset, value
                    del value
            results = per_row = out = inputs = encoded = value = None
            _release_freed_memory()
            start += chunk_size_read
    finally:
        if own_bar:
            bar.close()
        if cache_chunks:
            model.token_cache = None


__all__ = ["OUTPUTS", "embed_corpus", "resolve_output"]
