"""Data for training the biLM: plain text -> word windows -> batches for [`ElmoForPreTraining`].

Not part of the model code that travels with a saved folder (it needs ``datasets``).

Pipeline::

    text files --load_dataset("text")--> lines --tokenizer.tokenize--> words
    (or a dataset's text column: load_text_datasets)
        --build_vocab--> bilm-tf vocabulary (<S>, </S>, <UNK>, then by descending frequency)
        --make_windows--> {"words": <= max_words words, "labels": their vocabulary ids,
                            "boundary_labels": [target before the window, target after it]}
        --ElmoLMCollator--> input_ids (B, W, 50), attention_mask (B, W), labels (B, W) (-100 padding),
                            boundary_labels (B, 2)

The dataset keeps words, not character ids (50 ints per word): the collator computes those per batch.
"""

from __future__ import annotations

import contextlib
import os
import random
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch

from ..characters import word_to_char_ids
from ..softmax_elmo import IGNORE_INDEX
from ..tokenization_elmo import BILM_SPECIAL_WORDS, BOS_TOKEN, EOS_TOKEN, UNK_TOKEN

TEXT_FORMATS = ("sentences", "raw")


def build_vocab(sentences: Iterable[Sequence[str]], min_count: int = 1, max_vocab: int | None = None) -> list[str]:
    """A bilm-tf vocabulary: ``<S>``, ``</S>``, ``<UNK>``, then the words by descending count.

    Ties are broken alphabetically, so the result does not depend on the order of the corpus (and every
    process of a distributed run builds the same one).

    Args:
        sentences: lists of words.
        min_count: keep words seen at least this often.
        max_vocab: at most this many entries, the three special words included (``None``: no limit).

    Returns:
        The words by id.
    """
    if min_count < 1:
        raise ValueError(f"min_count must be >= 1, got {min_count}")
    if max_vocab is not None and max_vocab < len(BILM_SPECIAL_WORDS) + 1:
        raise ValueError(f"max_vocab must be at least {len(BILM_SPECIAL_WORDS) + 1} (the special words and one word)")
    counts: Counter[str] = Counter()
    for words in sentences:
        counts.update(words)
    for special in BILM_SPECIAL_WORDS:
        counts.pop(special, None)
    ranked = sorted((word for word, n in counts.items() if n >= min_count), key=lambda w: (-counts[w], w))
    if max_vocab is not None:
        ranked = ranked[: max_vocab - len(BILM_SPECIAL_WORDS)]
    return list(BILM_SPECIAL_WORDS) + ranked


def write_vocab(words: Sequence[str], path: str | os.PathLike) -> None:
    """Write a vocabulary as a bilm-tf vocabulary file (one word per line, by id)."""
    bad = [word for word in words if "\n" in word or "\r" in word or not word]
    if bad:
        raise ValueError(f"vocabulary words cannot be empty or contain line breaks: {bad[:3]!r}")
    with open(path, "w", encoding="utf-8", newline="") as handle:
        handle.write("".join(word + "\n" for word in words))


def make_windows(
    sentences: Sequence[Sequence[str]],
    vocab: dict[str, int],
    max_words: int = 20,
    stream: bool = False,
) -> dict[str, list]:
    """Cut sentences into training windows of at most ``max_words`` words.

    Args:
        sentences: lists of words (empty ones are skipped).
        vocab: word -> id, with ``<S>``, ``</S>``, ``<UNK>``; unknown words get ``<UNK>``'s id.
        max_words: words per window (20 as the original).
        stream: False: each sentence is cut on its own (a sentence of 45 words gives windows of 20,
            20 and 5). True (raw text): the sentences are one stream of words, cut every ``max_words``.

    Returns:
        Columns ``words``, ``labels`` (ids of the words) and ``boundary_labels`` (per window, the id of the
        word before it and of the word after it; ``<S>``/``</S>`` at the ends of a sentence or stream), the
        targets of the backward direction at the window's first word and of the forward one at its last.
    """
    if max_words < 1:
        raise ValueError(f"max_words must be >= 1, got {max_words}")
    unk, bos, eos = vocab[UNK_TOKEN], vocab[BOS_TOKEN], vocab[EOS_TOKEN]
    pieces = [list(words) for words in sentences if len(words)]
    if stream:
        pieces = [[word for words in pieces for word in words]] if pieces else []
    out: dict[str, list] = {"words": [], "labels": [], "boundary_labels": []}
    for words in pieces:
        ids = [vocab.get(word, unk) for word in words]
        for start in range(0, len(words), max_words):
            end = min(start + max_words, len(words))
            out["words"].append(words[start:end])
            out["labels"].append(ids[start:end])
            out["boundary_labels"].append([ids[start - 1] if start else bos, ids[end] if end < len(words) else eos])
    return out


def make_stream_windows(
    sentences: Sequence[Sequence[str]],
    vocab: dict[str, int],
    rows: int,
    max_words: int = 20,
) -> dict[str, list]:
    """The original's training data: the corpus as ``rows`` token streams, cut into windows of ``max_words``.

    The forward stream is the text left to right, every sentence as inputs ``<S> w_1 .. w_n`` with targets
    ``w_1 .. w_n </S>``; the backward stream is the text right to left, every sentence as ``</S> w_n .. w_1``
    with targets ``w_n .. w_1 <S>``. Each stream is split into ``rows`` equal, contiguous pieces (row ``r``
    reads the ``r``-th piece), and each piece into windows of ``max_words`` tokens (the tail that does not
    fill a window in every row is dropped). Batch ``j`` of ``rows`` windows (items ``j * rows`` to
    ``j * rows + rows - 1``, in order) holds window ``j`` of every row, so that a model that carries its
    LSTM states from batch to batch, row by row, reads each row's piece without a break.

    Args:
        sentences: lists of words, in corpus order (empty ones are skipped).
        vocab: word -> id, with ``<S>``, ``</S>``, ``<UNK>``; unknown words get ``<UNK>``'s id.
        rows: windows per batch (the batch size), the number of parallel streams.
        max_words: tokens per window (20 as the original).

    Returns:
        Columns ``words``/``labels`` (forward inputs and their target ids) and ``backward_words``/
        ``backward_labels``, one window per item, ``max_words`` tokens each.
    """
    if rows < 1 or max_words < 1:
        raise ValueError(f"rows and max_words must be >= 1, got {rows} and {max_words}")
    unk = vocab[UNK_TOKEN]
    forward_words: list[str] = []  # inputs: <S> w_1 .. w_n, sentence after sentence
    target_words: list[str] = []  # what each predicts: w_1 .. w_n </S>
    for words in sentences:
        if len(words):
            forward_words += [BOS_TOKEN, *words]
            target_words += [*words, EOS_TOKEN]
    # Right to left, the inputs are the forward targets reversed (</S> w_n .. w_1) and predict the forward
    # inputs reversed (w_n .. w_1 <S>).
    backward_words = target_words[::-1]
    forward_targets = [vocab.get(word, unk) for word in target_words]
    backward_targets = [vocab.get(word, unk) for word in forward_words[::-1]]

    windows = len(forward_words) // rows // max_words
    if windows == 0:
        raise ValueError(
            f"the training text has {len(forward_words)} tokens: too few for {rows} streams of windows of "
            f"{max_words} (give more text, or a smaller batch size or --max_words)"
        )
    piece = len(forward_words) // rows
    out: dict[str, list] = {"words": [], "labels": [], "backward_words": [], "backward_labels": []}
    for j in range(windows):
        for r in range(rows):
            start = r * piece + j * max_words
            span = slice(start, start + max_words)
            out["words"].append(forward_words[span])
            out["labels"].append(forward_targets[span])
            out["backward_words"].append(backward_words[span])
            out["backward_labels"].append(backward_targets[span])
    return out


def check_text_file(path: str | os.PathLike, chunk_bytes: int = 1 << 20) -> None:
    """Raise ``ValueError`` naming ``path`` unless it is UTF-8 text with at least one non-blank line.

    Read once, in chunks (memory does not grow with the file). Catches what ``datasets`` would report as an
    unexplained ``DatasetGenerationError`` (an empty, binary or non-UTF-8 file) or as an empty training set.
    """
    import codecs

    decoder = codecs.getincrementaldecoder("utf-8")()
    offset = 0
    has_text = False
    with open(path, "rb") as handle:
        while True:
            chunk = handle.read(chunk_bytes)
            if not chunk:
                break
            nul = chunk.find(b"\0")
            if nul >= 0:
                raise ValueError(f"{path}: not a text file (a NUL byte at byte {offset + nul})")
            try:
                text = decoder.decode(chunk)
            except UnicodeDecodeError as error:
                raise ValueError(f"{path}: not UTF-8 text (byte {offset + error.start}: {error.reason})") from None
            has_text = has_text or (bool(text) and not text.isspace())
            offset += len(chunk)
    try:
        decoder.decode(b"", final=True)
    except UnicodeDecodeError as error:
        raise ValueError(f"{path}: not UTF-8 text (it ends inside a character: {error.reason})") from None
    if offset == 0:
        raise ValueError(f"{path}: the file is empty")
    if not has_text:
        raise ValueError(f"{path}: no text, only blank lines")


@contextlib.contextmanager
def _datasets_bars_follow_transformers() -> Iterator[None]:
    """``datasets``' progress bars (loading, ``map``) off while transformers' are off
    (``transformers.utils.logging.disable_progress_bar()``, or a training command's ``--disable_tqdm``)."""
    import datasets
    from transformers.utils import logging as hf_logging

    if hf_logging.is_progress_bar_enabled() or not datasets.is_progress_bar_enabled():
        yield
        return
    datasets.disable_progress_bars()
    try:
        yield
    finally:
        datasets.enable_progress_bars()


def _is_saved_dataset(path: str) -> bool:
    """Whether ``path`` is a folder written by ``Dataset.save_to_disk`` / ``DatasetDict.save_to_disk``."""
    folder = Path(path)
    return folder.is_dir() and ((folder / "dataset_dict.json").is_file() or (folder / "state.json").is_file())


def load_text_datasets(
    name: str,
    config_name: str | None = None,
    train_split: str | None = "train",
    eval_split: str | None = "validation",
    text_column: str | None = None,
    cache_dir: str | None = None,
):
    """A dataset's text as ``datasets.DatasetDict`` with splits ``"train"``/``"validation"`` and one ``"text"`` column.

    Args:
        name: a Hub dataset id or a local dataset folder (``datasets.load_dataset``), or a folder written by
            ``save_to_disk`` (``datasets.load_from_disk``; a single ``Dataset`` there is the training split).
        config_name: the dataset's configuration (``load_dataset``'s second argument).
        train_split, eval_split: the dataset's split names to train and evaluate on (``None``: none). A missing
            training split is an error; a missing evaluation split is skipped unless it was the only one asked for.
        text_column: the column holding the text (default: ``"text"``, or the dataset's only string column).
        cache_dir: the ``datasets`` cache.

    Each row is one line of text, as a line of a text file (``text_format`` says what a line is).
    """
    import datasets

    with _datasets_bars_follow_transformers():
        if _is_saved_dataset(name):
            if config_name:
                raise ValueError(
                    f"--dataset_config_name {config_name}: {name} is a saved dataset, without configurations"
                )
            loaded = datasets.load_from_disk(name)
        else:
            loaded = datasets.load_dataset(name, config_name, cache_dir=cache_dir)
    if isinstance(loaded, datasets.Dataset):
        loaded = datasets.DatasetDict({"train": loaded})
    wanted = {"train": train_split, "validation": eval_split}
    out = {}
    for ours, theirs in wanted.items():
        if not theirs:
            continue
        if theirs not in loaded:
            if ours == "train" or not train_split:
                raise ValueError(f"dataset {name} has no split {theirs!r} (its splits: {', '.join(loaded)})")
            continue
        split = loaded[theirs]
        strings = [c for c, f in split.features.items() if getattr(f, "dtype", None) in ("string", "large_string")]
        column = text_column or ("text" if "text" in strings else strings[0] if len(strings) == 1 else None)
        if column is None or column not in strings:
            what = f"no text column {column!r}" if column else "several text columns"
            raise ValueError(
                f"dataset {name}, split {theirs}: {what} (text columns: {', '.join(strings) or 'none'}); "
                "name one with --text_column_name"
            )
        split = split.select_columns([column])
        out[ours] = split.rename_column(column, "text") if column != "text" else split
    return datasets.DatasetDict(out)


def load_lm_datasets(
    tokenizer,
    train_files: Sequence[str] | None,
    eval_files: Sequence[str] | None = None,
    vocab: dict[str, int] | None = None,
    text_format: str = "sentences",
    max_words: int = 20,
    min_count: int = 1,
    max_vocab: int | None = None,
    num_proc: int | None = None,
    cache_dir: str | None = None,
    main_process_first=None,
    stream_rows: int | None = None,
    stream_seed: int | None = None,
    raw_datasets=None,
):
    """Read text files (or a dataset's text) into window datasets (see the module docstring).

    Args:
        tokenizer: an [`ElmoTokenizer`]; its ``tokenize`` splits lines into words.
        train_files, eval_files: plain-text files (UTF-8).
        vocab: word -> id; ``None``: built from the training files (``build_vocab``).
        text_format: ``"sentences"`` (one sentence per line) or ``"raw"`` (lines are running text: the
            words of consecutive lines, per ``datasets.map`` batch of 1000 lines, are one stream cut into windows).
        max_words, min_count, max_vocab: see ``make_windows`` and ``build_vocab``.
        num_proc: processes for ``datasets.map``.
        cache_dir: the ``datasets`` cache.
        main_process_first: a context manager factory (``TrainingArguments.main_process_first``) so that
            in a distributed run the main process fills the cache first.
        stream_rows: the original's stream training: the training split becomes ``make_stream_windows`` with
            this many rows (the batch size), built in memory; the sentences are shuffled once with
            ``stream_seed`` (``None``: corpus order). The validation split stays sentence windows.
        raw_datasets: instead of files, a ``datasets.DatasetDict`` with ``"train"`` and/or ``"validation"`` and a
            ``"text"`` column, one line per row (``load_text_datasets``).

    Progress bars follow transformers' switch (``transformers.utils.logging.disable_progress_bar()``).

    Returns:
        ``(datasets.DatasetDict with "train" and/or "validation", vocab as a list of words by id)``.
    """
    from contextlib import nullcontext

    with _datasets_bars_follow_transformers():
        return _load_lm_datasets(
            tokenizer,
            train_files,
            eval_files,
            vocab,
            text_format,
            max_words,
            min_count,
            max_vocab,
            num_proc,
            cache_dir,
            main_process_first or (lambda desc="": nullcontext()),
            stream_rows,
            stream_seed,
            raw_datasets,
        )


def _load_lm_datasets(
    tokenizer,
    train_files,
    eval_files,
    vocab,
    text_format,
    max_words,
    min_count,
    max_vocab,
    num_proc,
    cache_dir,
    first,
    stream_rows,
    stream_seed,
    raw_datasets,
):
    import datasets

    if text_format not in TEXT_FORMATS:
        raise ValueError(f"text_format must be one of {TEXT_FORMATS}, got {text_format!r}")
    data_files = {}
    for split, files in (("train", train_files), ("validation", eval_files)):
        if files:
            missing = [f for f in files if not os.path.isfile(f)]
            if missing:
                raise FileNotFoundError(f"{split} file(s) not found: {', '.join(missing)}")
            for f in files:
                check_text_file(f)
            data_files[split] = list(files)
    if raw_datasets is not None:
        if data_files:
            raise ValueError("give text files or a dataset, not both")
        data_files = {split: [] for split in raw_datasets}
    if not data_files:
        raise ValueError("no text files given")

    def split_words(batch: dict[str, list]) -> dict[str, list]:
        return {"words": [tokenizer.tokenize(line) for line in batch["text"]]}

    with first(desc="reading and splitting the text"):
        if raw_datasets is None:
            raw = datasets.load_dataset("text", data_files=data_files, cache_dir=cache_dir)
        else:
            raw = raw_datasets
        words = raw.map(split_words, batched=True, num_proc=num_proc, remove_columns=["text"], desc="Splitting words")

    if vocab is None:
        if "train" not in words:
            raise ValueError("building a vocabulary needs training files (or give a vocabulary file)")
        vocab_words = build_vocab(
            (w for batch in words["train"].iter(batch_size=10_000) for w in batch["words"]), min_count, max_vocab
        )
        vocab = {word: index for index, word in enumerate(vocab_words)}
    else:
        vocab_words = sorted(vocab, key=vocab.__getitem__)

    def windows(batch: dict[str, list]) -> dict[str, list]:
        return make_windows(batch["words"], vocab, max_words=max_words, stream=text_format == "raw")

    with first(desc="cutting windows"):
        windowed = words.map(windows, batched=True, num_proc=num_proc, remove_columns=["words"], desc="Windows")
    for split, windowed_split in windowed.items():
        if len(windowed_split) == 0:  # e.g. lines the tokenizer splits into no words at all
            source = f"file(s) {', '.join(data_files[split])}" if data_files[split] else "text of the dataset"
            raise ValueError(f"the {split} {source} give no words")
    if stream_rows and "train" in words:
        sentences = list(words["train"]["words"])
        if stream_seed is not None:
            random.Random(stream_seed).shuffle(sentences)
        windowed["train"] = datasets.Dataset.from_dict(make_stream_windows(sentences, vocab, stream_rows, max_words))
    return windowed, vocab_words


class ElmoLMCollator:
    """Batches of windows for [`ElmoForPreTraining`].

    Features: dicts with ``words`` (list of str), ``labels`` (their vocabulary ids) and optionally
    ``boundary_labels`` (2 ids). Returns ``input_ids (B, W, C)``, ``attention_mask (B, W)``, ``labels (B, W)``
    padded with -100, and ``boundary_labels (B, 2)`` when the features have them.
    """

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        words = [list(f["words"]) for f in features]
        encoded = self.tokenizer(words, is_split_into_words=True, padding=True, return_tensors="pt")
        input_ids = encoded["input_ids"]
        if input_ids.dim() != 3:  # only empty windows: (B, 0)
            input_ids = input_ids.reshape(len(words), -1, self.tokenizer.max_characters_per_token)
        attention_mask = encoded["attention_mask"].reshape(input_ids.shape[:2])
        labels = torch.full(input_ids.shape[:2], IGNORE_INDEX, dtype=torch.long)
        for row, feature in enumerate(features):
            ids = list(feature["labels"])
            if len(ids) != len(words[row]):
                raise ValueError(f"feature {row}: {len(words[row])} words but {len(ids)} labels")
            labels[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        batch = {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}
        if features and "boundary_labels" in features[0]:
            batch["boundary_labels"] = torch.tensor([list(f["boundary_labels"]) for f in features], dtype=torch.long)
        return batch


class ElmoLMStreamCollator:
    """Batches of stream windows (``make_stream_windows``) for [`ElmoForPreTraining`]'s stream training.

    Returns ``input_ids``/``backward_input_ids`` ``(B, T, C)`` (character ids of each direction's input tokens,
    ``<S>``/``</S>`` included), ``attention_mask`` ``(B, T)`` (all ones: stream windows are full) and
    ``labels``/``backward_labels`` ``(B, T)`` (the ids of the tokens each input predicts).
    """

    def __init__(self, max_characters_per_token: int = 50):
        self.max_characters_per_token = max_characters_per_token

    def _chars(self, windows: list[list[str]]) -> torch.Tensor:
        chars = self.max_characters_per_token
        return torch.tensor([[word_to_char_ids(word, chars) for word in window] for window in windows])

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        lengths = {len(f[key]) for f in features for key in ("words", "labels", "backward_words", "backward_labels")}
        if len(lengths) != 1:
            raise ValueError(f"stream windows must all have the same number of tokens, got lengths {sorted(lengths)}")
        input_ids = self._chars([list(f["words"]) for f in features])
        return {
            "input_ids": input_ids,
            "attention_mask": torch.ones(input_ids.shape[:2], dtype=torch.long),
            "labels": torch.tensor([list(f["labels"]) for f in features], dtype=torch.long),
            "backward_input_ids": self._chars([list(f["backward_words"]) for f in features]),
            "backward_labels": torch.tensor([list(f["backward_labels"]) for f in features], dtype=torch.long),
        }


__all__ = [
    "ElmoLMCollator",
    "ElmoLMStreamCollator",
    "TEXT_FORMATS",
    "build_vocab",
    "check_text_file",
    "load_lm_datasets",
    "make_stream_windows",
    "make_windows",
    "write_vocab",
]
