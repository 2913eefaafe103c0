"""Data for training a tagger: CoNLL files or a (Hub) dataset -> sentences and tags -> features for
[`ElmoForTokenClassification`].

Not part of the model code that travels with a saved folder (``encode_dataset`` and ``load_dataset_splits`` need
``datasets``, imported when called).

Pipeline::

    CoNLL files --read_conll--> sentences, tags            (or a dataset's word and tag columns: load_dataset_splits)
        --load_tagging_data--> TaggingData (train, dev, the declared tag names), cut to --max_*_sentences
        --unify_scheme--> one tag scheme: IOB1 (CoNLL-2003's) converted to BIO, so the CRF's BIO constraints apply
        --sort_labels--> the tag names in a stable order (O first, then by type, B- before I-)
        --encode_dataset--> input_ids (one word = one token), attention_mask, vocab_ids, word-level labels

CoNLL files: one word per line, the word in the first column and its tag in the last (so both the two-column form
and the four-column CoNLL-2003 form work); blank lines end sentences; ``-DOCSTART-`` lines are skipped. Tags in the
IOB1 scheme (``I-X`` opens an entity, ``B-X`` only between two entities of the same type) are converted to BIO
(IOB2). ``build_word_vocab`` gives the tagger's word-embedding vocabulary from the training sentences.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DOCSTART = "-DOCSTART-"
IGNORE_INDEX = -100  # a label the loss and the metrics skip (padding)


# ---------------------------------------------------------------------------------------------
# CoNLL reading and tag schemes
# ---------------------------------------------------------------------------------------------


def read_conll(path: str | os.PathLike) -> tuple[list[list[str]], list[list[str]]]:
    """Read a CoNLL file: ``(sentences, tags)``, each a list of per-sentence lists of strings.

    The first column is the word, the last the tag. Raises ``ValueError`` naming the file and line
    for a line with fewer than two columns, and for a file without any sentence.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"CoNLL file not found: {path}")
    sentences: list[list[str]] = []
    tags: list[list[str]] = []
    words: list[str] = []
    labels: list[str] = []
    with path.open(encoding="utf-8") as f:
        try:
            lines = list(f)
        except UnicodeDecodeError as error:
            raise ValueError(f"{path}: not UTF-8 text (byte {error.start}: {error.reason})") from None
        for number, line in enumerate(lines, start=1):
            columns = line.split()
            if not columns or columns[0] == DOCSTART:
                if words:
                    sentences.append(words)
                    tags.append(labels)
                    words, labels = [], []
                continue
            if len(columns) < 2:
                raise ValueError(
                    f"{path}:{number}: expected 'word ... tag' (at least two columns), got {line.rstrip()!r}"
                )
            words.append(columns[0])
            labels.append(columns[-1])
    if words:
        sentences.append(words)
        tags.append(labels)
    if not sentences:
        raise ValueError(f"{path}: no sentences found")
    return sentences, tags


def _split_tag(tag: str) -> tuple[str, str | None]:
    if tag == "O":
        return "O", None
    if len(tag) > 2 and tag[0] in "BI" and tag[1] == "-":
        return tag[0], tag[2:]
    return "", None  # not a BIO/IOB1 tag


def detect_scheme(tag_sequences: Iterable[Sequence[str]]) -> str:
    """``"BIO"`` (IOB2), ``"IOB1"`` or ``"other"`` (tags that are not ``O``/``B-X``/``I-X``, e.g. POS tags).

    IOB1 is recognised by an ``I-X`` that opens an entity (at the start of a sentence or after ``O``
    or another type): BIO never does that.
    """
    iob1 = False
    for sequence in tag_sequences:
        previous = ("O", None)
        for tag in sequence:
            prefix, kind = _split_tag(tag)
            if not prefix:
                return "other"
            if prefix == "I" and (previous[0] == "O" or previous[1] != kind):
                iob1 = True
            previous = (prefix, kind)
    return "IOB1" if iob1 else "BIO"


def iob1_to_bio(tags: Sequence[str]) -> list[str]:
    """Convert one sentence's IOB1 tags to BIO: an ``I-X`` that opens an entity becomes ``B-X``."""
    converted = []
    previous = ("O", None)
    for tag in tags:
        prefix, kind = _split_tag(tag)
        if prefix == "I" and (previous[0] == "O" or previous[1] != kind):
            tag = f"B-{kind}"
        converted.append(tag)
        previous = (prefix, kind)
    return converted


def sort_labels(labels: Iterable[str]) -> list[str]:
    """Tag names in a stable order: ``O`` first, then by entity type, ``B-`` before ``I-``."""

    def key(tag: str) -> tuple:
        prefix, kind = _split_tag(tag)
        return (tag != "O", kind or tag, prefix)

    return sorted(set(labels), key=key)


def build_word_vocab(sentences: Iterable[Sequence[str]], min_freq: int = 1) -> dict[str, int]:
    """A word vocabulary for the tagger's word embedding: ``<S>``, ``</S>``, ``<UNK>``, then the words seen
    at least ``min_freq`` times, most frequent first. Rarer words map to ``<UNK>``, which so gets trained."""
    counts = Counter(word for sentence in sentences for word in sentence)
    vocab = {"<S>": 0, "</S>": 1, "<UNK>": 2}
    for word, count in sorted(counts.items(), key=lambda item: (-item[1], item[0])):
        if count >= min_freq and word not in vocab:
            vocab[word] = len(vocab)
    return vocab


# ---------------------------------------------------------------------------------------------
# Training data: CoNLL files or a (Hub) dataset
# ---------------------------------------------------------------------------------------------


@dataclass
class TaggingData:
    """Sentences and their tags as strings, for training and (optionally) evaluation."""

    train_sentences: list[list[str]]
    train_tags: list[list[str]]
    eval_sentences: list[list[str]] | None = None
    eval_tags: list[list[str]] | None = None
    label_names: list[str] | None = None  # all tag names the dataset declares (a ClassLabel), seen or not
    source: str = ""  # what the model card names as the data


def load_dataset_splits(data_args: Any) -> TaggingData:
    """The ``train`` and (if present) ``validation`` splits of ``--dataset_name``, tags as names.

    ``--dataset_name`` is a folder holding a saved ``DatasetDict`` (``save_to_disk``), read with ``load_from_disk``,
    or anything ``datasets.load_dataset`` takes (a Hub id, a local dataset folder). Integer tags are mapped to names
    with the column's ``ClassLabel``.
    """
    import datasets

    name = data_args.dataset_name
    try:
        if Path(name).is_dir() and (Path(name) / "dataset_dict.json").is_file():
            splits = datasets.load_from_disk(name)
        else:
            splits = datasets.load_dataset(name, data_args.dataset_config_name, cache_dir=data_args.cache_dir)
    except (OSError, ValueError) as error:
        raise type(error)(f"--dataset_name {name}: {error}") from error
    if not isinstance(splits, datasets.DatasetDict) or "train" not in splits:
        found = list(splits) if isinstance(splits, datasets.DatasetDict) else "one Dataset, no splits"
        raise ValueError(f"--dataset_name {name}: no 'train' split (found: {found})")

    def columns(split: str) -> tuple[list[list[str]], list[list[str]], list[str] | None]:
        data = splits[split]
        for option, column in (("text", data_args.text_column_name), ("label", data_args.label_column_name)):
            if column not in data.column_names:
                raise ValueError(
                    f"--dataset_name {name}: the {split} split has no column {column!r} (--{option}_column_name); "
                    f"its columns: {', '.join(data.column_names)}"
                )
        feature = getattr(data.features[data_args.label_column_name], "feature", None)
        names = list(feature.names) if isinstance(feature, datasets.ClassLabel) else None
        sentences = [list(map(str, words)) for words in data[data_args.text_column_name]]
        tags = [[names[t] if names else str(t) for t in row] for row in data[data_args.label_column_name]]
        return sentences, tags, names

    train_sentences, train_tags, names = columns("train")
    eval_sentences = eval_tags = None
    if "validation" in splits:
        eval_sentences, eval_tags, _ = columns("validation")
    return TaggingData(train_sentences, train_tags, eval_sentences, eval_tags, names, source=name)


def load_tagging_data(data_args: Any) -> TaggingData:
    """The training (and dev) sentences and tags, cut to ``--max_*_sentences``.

    ``data_args``: the tagger command's ``DataArguments`` (``train_tagger.py``), or any object with its fields.
    """
    if data_args.dataset_name:
        data = load_dataset_splits(data_args)
    else:
        data = TaggingData(*read_conll(data_args.train_file), source=data_args.train_file)
        if data_args.eval_file:
            data.eval_sentences, data.eval_tags = read_conll(data_args.eval_file)
    if data_args.max_train_sentences:
        data.train_sentences = data.train_sentences[: data_args.max_train_sentences]
        data.train_tags = data.train_tags[: data_args.max_train_sentences]
    if data.eval_sentences is not None and data_args.max_eval_sentences:
        data.eval_sentences = data.eval_sentences[: data_args.max_eval_sentences]
        data.eval_tags = data.eval_tags[: data_args.max_eval_sentences]
    return data


def unify_scheme(data: TaggingData) -> str:
    """The tag scheme of ``data`` (see [`detect_scheme`]): ``"BIO"``, ``"IOB1"`` or ``"other"``. IOB1 tags (in the
    training or the dev sentences) are converted to BIO in place, so that training, evaluation and the saved model
    use one scheme."""
    scheme = detect_scheme(data.train_tags)
    if scheme == "BIO" and data.eval_tags is not None and detect_scheme(data.eval_tags) == "IOB1":
        scheme = "IOB1"
    if scheme == "IOB1":
        data.train_tags = [iob1_to_bio(t) for t in data.train_tags]
        if data.eval_tags is not None:
            data.eval_tags = [iob1_to_bio(t) for t in data.eval_tags]
    return scheme


# ---------------------------------------------------------------------------------------------
# Features for the model
# ---------------------------------------------------------------------------------------------


def encode_dataset(dataset, tokenizer, label2id: dict[str, int] | None, vocab_ids: bool, max_words: int | None):
    """Tokenize a ``datasets.Dataset`` with ``tokens`` (and ``tags``) columns into model features.

    One word is one token (``is_split_into_words=True``), so word-level tags are the labels as they are.
    ``max_words``: cut longer sentences to that many words; ``None`` or 0 for no limit.

    Raises:
        ValueError: ``max_words`` is negative or not an integer (``sentence[:-1]`` would drop the last word).
    """
    # The CLI's --max_words rule (DATA_NUMBER_RULES), for callers from Python too.
    if max_words is not None and (isinstance(max_words, bool) or not isinstance(max_words, int) or max_words < 0):
        raise ValueError(f"max_words must be None, 0 (no limit) or a positive number of words, got {max_words!r}")

    def encode(batch: dict[str, list]) -> dict[str, list]:
        words = [sentence[:max_words] if max_words else sentence for sentence in batch["tokens"]]
        features = tokenizer(words, is_split_into_words=True, return_vocab_ids=vocab_ids)
        features = {key: features[key] for key in ("input_ids", "attention_mask", "vocab_ids") if key in features}
        features["length"] = [len(sentence) for sentence in words]
        if label2id is not None:
            unknown = {tag for tags in batch["tags"] for tag in tags if tag not in label2id}
            if unknown:
                raise ValueError(f"tags not seen in the training data: {sorted(unknown)}")
            features["labels"] = [
                [label2id[tag] for tag in tags[: len(w)]] for tags, w in zip(batch["tags"], words, strict=True)
            ]
        return features

    return dataset.map(encode, batched=True, remove_columns=dataset.column_names, desc="Tokenizing")


__all__ = [
    "DOCSTART",
    "IGNORE_INDEX",
    "TaggingData",
    "build_word_vocab",
    "detect_scheme",
    "encode_dataset",
    "iob1_to_bio",
    "load_dataset_splits",
    "load_tagging_data",
    "read_conll",
    "sort_labels",
    "unify_scheme",
]
