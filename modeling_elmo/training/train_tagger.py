"""Fine-tune an ELMo sequence tagger (e.g. CoNLL-2003 NER) with the Hugging Face Trainer, and tag raw text.

Train (from a converted or self-trained ``ElmoModel`` folder, or ``--no_elmo`` for the word-embedding baseline)::

    python -m modeling_elmo.training.train_tagger --bilm elmo-small --train_file train.txt --eval_file dev.txt \\
        --output_dir ner-elmo --epochs 3

Tag raw sentences with the saved folder (prints ``word<TAB>tag``, a blank line between sentences)::

    python -m modeling_elmo.training.train_tagger --predict ner-elmo "EU rejects German call to boycott British lamb."

CoNLL files: one word per line, the word in the first column and its tag in the last (so both the
two-column form and the four-column CoNLL-2003 form work); blank lines end sentences; ``-DOCSTART-``
lines are skipped. Tags in the IOB1 scheme (``I-X`` opens an entity, ``B-X`` only between two
entities of the same type) are converted to BIO (IOB2), so the CRF's BIO constraints apply and the
saved model predicts BIO tags. Entity-level precision/recall/F1 are computed with ``seqeval``.

This module imports ``datasets`` and ``seqeval`` (the ``[train]`` extra); the model code does not.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import torch

from ..model_card import hub_model_id, metric_results, write_model_card
from .checkpoints import checkpoint_problem, newest_complete_checkpoint
from .checks import MAX_SEED, POSITIVE, check_fraction, check_numbers

DOCSTART = "-DOCSTART-"
IGNORE_INDEX = -100


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
# Model, data and metrics
# ---------------------------------------------------------------------------------------------


def _no_elmo_bilm_config() -> dict[str, Any]:
    # The word-embedding baseline never runs the biLM; it only needs a valid (tiny) one in the config.
    return {
        "char_embedding_dim": 1,
        "char_cnn_filters": [[1, 1]],
        "n_highway": 0,
        "lstm_dim": 1,
        "projection_dim": 1,
        "n_layers": 1,
    }


def _has_tokenizer(folder: str | os.PathLike) -> bool:
    return any((Path(folder) / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json"))


def build_model_and_tokenizer(args: argparse.Namespace, labels: list[str], train_sentences: list[list[str]]):
    """The tagger (biLM weights from ``args.bilm`` unless ``--no_elmo``) and its tokenizer."""
    from ..configuration_elmo import ElmoConfig
    from ..modeling_elmo_tagging import ElmoForTokenClassification
    from ..tokenization_elmo import ElmoTokenizer

    id2label = dict(enumerate(labels))
    label2id = {label: i for i, label in id2label.items()}
    word_input = None if args.word_input == "none" else args.word_input
    head = {
        "id2label": id2label,
        "label2id": label2id,
        "tagger_word_input": word_input,
        "tagger_word_embedding_dim": args.word_dim,
        "tagger_hidden_size": args.hidden_size,
        "tagger_num_layers": args.num_layers,
        "tagger_dropout": args.dropout,
        "use_crf": not args.no_crf,
        "freeze_bilm": not args.fine_tune_bilm,
    }
    if args.no_elmo:
        head.update(tagger_elmo_input=False, tagger_elmo_output=False)
    else:
        head.update(
            tagger_elmo_input=not args.no_elmo_input,
            tagger_elmo_output=args.elmo_output,
            elmo_dropout=args.elmo_dropout,
            scalar_mix_l2_coef=args.l2_coef,
            scalar_mix_layer_norm=None if args.layer_norm == "none" else args.layer_norm,
            stateful=False,
        )

    base_tokenizer = None
    if args.bilm and _has_tokenizer(args.bilm):
        base_tokenizer = ElmoTokenizer.from_pretrained(args.bilm)
    if word_input == "embedding":
        # The embedding's vocabulary comes from the training data; the tokenizer saved with the model holds it.
        settings = {}
        if base_tokenizer is not None:
            settings = {
                "max_characters_per_token": base_tokenizer.max_characters_per_token,
                "split_punctuation": base_tokenizer.split_punctuation,
            }
        tokenizer = ElmoTokenizer(vocab=build_word_vocab(train_sentences, args.min_word_freq), **settings)
        head["tagger_word_vocab_size"] = len(tokenizer)
    else:
        tokenizer = base_tokenizer or ElmoTokenizer()

    if args.no_elmo:
        model = ElmoForTokenClassification(ElmoConfig(**_no_elmo_bilm_config(), **head))
    else:
        model = ElmoForTokenClassification.from_pretrained(args.bilm, **head)
    if model.config.max_characters_per_token != tokenizer.max_characters_per_token:
        raise ValueError(
            f"the tokenizer writes {tokenizer.max_characters_per_token} characters per word but the biLM reads "
            f"{model.config.max_characters_per_token}"
        )
    return model, tokenizer


def encode_dataset(dataset, tokenizer, label2id: dict[str, int] | None, vocab_ids: bool, max_words: int | None):
    """Tokenize a ``datasets.Dataset`` with ``tokens`` (and ``tags``) columns into model features.

    One word is one token (``is_split_into_words=True``), so word-level tags are the labels as they are.
    """

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


def make_compute_metrics(id2label: dict[int, str], scheme: str):
    """``compute_metrics`` for Trainer: entity-level precision/recall/F1 (seqeval) and word accuracy.

    Predictions are tag ids per word (Viterbi with a CRF), ``-100`` where the label is ``-100``.
    """
    from seqeval.metrics import accuracy_score, f1_score, precision_score, recall_score

    def compute_metrics(eval_prediction) -> dict[str, float]:
        predictions, labels = eval_prediction.predictions, eval_prediction.label_ids
        if isinstance(predictions, tuple):
            predictions = predictions[0]
        gold, guessed = [], []
        for row_pred, row_gold in zip(predictions, labels, strict=True):
            keep = row_gold != IGNORE_INDEX
            gold.append([id2label[int(t)] for t in row_gold[keep]])
            guessed.append([id2label[int(t)] for t in row_pred[keep]])
        metrics = {"accuracy": float(accuracy_score(gold, guessed))}
        if scheme != "other":  # entity F1 only means something for chunk tags
            metrics.update(
                precision=float(precision_score(gold, guessed, zero_division=0)),
                recall=float(recall_score(gold, guessed, zero_division=0)),
                f1=float(f1_score(gold, guessed, zero_division=0)),
            )
        return metrics

    return compute_metrics


def make_preprocess_logits(model):
    """Turn a batch's logits into tag ids before Trainer gathers them (Viterbi with a CRF, argmax without).

    The labels give the mask: word-level labels are ``-100`` only on padding.
    """

    def preprocess(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        if isinstance(logits, tuple):
            logits = logits[0]
        mask = labels.ne(IGNORE_INDEX)
        if model.crf is not None:
            return model.crf.viterbi_tags(logits, mask)
        return logits.argmax(dim=-1).masked_fill(~mask, IGNORE_INDEX)

    return preprocess


def _tagger_trainer_class():
    """``Trainer`` whose length-grouped training order depends only on ``--seed`` and the epoch.

    The stock ``LengthGroupedSampler`` draws each epoch's order from the global RNG when the epoch starts, i.e.
    after the previous epoch's dropout: a run resumed in its second epoch (global RNG restored only later, at
    the checkpoint's step) drew another order, and its losses differed from an uninterrupted run's.
    """
    from transformers import Trainer
    from transformers.trainer_pt_utils import LengthGroupedSampler, get_length_grouped_indices

    class EpochSeededLengthGroupedSampler(LengthGroupedSampler):
        """Length-grouped order from a generator seeded with ``seed + epoch`` (``set_epoch`` is called by the
        Trainer through accelerate's dataloader at every epoch, also after resuming)."""

        def __init__(self, batch_size: int, lengths: list[int], seed: int):
            super().__init__(batch_size, lengths=lengths)
            self.seed = seed
            self.epoch = 0

        def set_epoch(self, epoch: int) -> None:
            self.epoch = int(epoch)

        def __iter__(self):
            generator = torch.Generator().manual_seed(self.seed + self.epoch)
            return iter(get_length_grouped_indices(self.lengths, self.batch_size, generator=generator))

    class TaggerTrainer(Trainer):
        def _get_train_sampler(self, train_dataset=None):
            sampler = super()._get_train_sampler(train_dataset)
            if type(sampler) is LengthGroupedSampler:
                return EpochSeededLengthGroupedSampler(sampler.batch_size, sampler.lengths, self.args.seed)
            return sampler

    return TaggerTrainer


def _time_budget_callback(seconds: float):
    from transformers import TrainerCallback

    class TimeBudget(TrainerCallback):
        """Stop training once ``seconds`` of training have passed (checked after every step)."""

        def on_train_begin(self, args, state, control, **kwargs):
            self.start = time.monotonic()

        def on_step_end(self, args, state, control, **kwargs):
            if time.monotonic() - self.start >= seconds:
                control.should_training_stop = True

    return TimeBudget()


# ---------------------------------------------------------------------------------------------
# Commands
# ---------------------------------------------------------------------------------------------


def train(args: argparse.Namespace) -> dict[str, Any]:
    """Train, evaluate and save; returns the final metrics (``eval_*``, ``train_*``, ``tokens_per_second``)."""
    from datasets import Dataset
    from transformers import DataCollatorForTokenClassification, TrainingArguments, set_seed

    set_seed(args.seed)
    train_sentences, train_tags = read_conll(args.train_file)
    if args.max_train_sentences:
        train_sentences, train_tags = (
            train_sentences[: args.max_train_sentences],
            train_tags[: args.max_train_sentences],
        )
    scheme = detect_scheme(train_tags)
    eval_sentences = eval_tags = None
    if args.eval_file:
        eval_sentences, eval_tags = read_conll(args.eval_file)
        if args.max_eval_sentences:
            eval_sentences, eval_tags = eval_sentences[: args.max_eval_sentences], eval_tags[: args.max_eval_sentences]
        if scheme == "IOB1" or (scheme == "BIO" and detect_scheme(eval_tags) == "IOB1"):
            scheme = "IOB1"
    if scheme == "IOB1":  # one scheme for training, evaluation and the saved model: BIO
        train_tags = [iob1_to_bio(t) for t in train_tags]
        eval_tags = [iob1_to_bio(t) for t in eval_tags] if eval_tags is not None else None
    labels = sort_labels(t for tags in train_tags for t in tags)
    print(
        f"{len(train_sentences)} training sentences, {sum(map(len, train_sentences))} words; tag scheme {scheme}"
        f"{' (converted to BIO)' if scheme == 'IOB1' else ''}; {len(labels)} labels: {' '.join(labels)}",
        flush=True,
    )

    model, tokenizer = build_model_and_tokenizer(args, labels, train_sentences)
    needs_vocab_ids = model.needs_vocab_ids
    uses_bilm = model.uses_bilm
    if uses_bilm and model.config.freeze_bilm:
        # A frozen character encoder gives every word a fixed vector: compute each once.
        words = {w for sentence in train_sentences + (eval_sentences or []) for w in sentence}
        model.elmo.build_token_cache(sorted(words), progress=not args.no_progress)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    print(f"model: {sum(p.numel() for p in model.parameters()):,} parameters, {trainable:,} trained", flush=True)

    def encode(sentences: list[list[str]], tags: list[list[str]]):
        data = Dataset.from_dict({"tokens": sentences, "tags": tags})
        return encode_dataset(data, tokenizer, model.config.label2id, needs_vocab_ids, args.max_words)

    train_data = encode(train_sentences, train_tags)
    eval_data = encode(eval_sentences, eval_tags) if eval_sentences is not None else None
    eval_strategy = args.eval_strategy if eval_data is not None else "no"
    training_args = TrainingArguments(
        output_dir=args.output_dir,
        per_device_train_batch_size=args.batch_size,
        per_device_eval_batch_size=args.eval_batch_size,
        learning_rate=args.learning_rate,
        lr_scheduler_type=args.lr_scheduler,
        warmup_steps=args.warmup_steps,
        max_grad_norm=args.max_grad_norm,
        num_train_epochs=args.epochs,
        max_steps=args.max_steps if args.max_steps else -1,
        eval_strategy=eval_strategy,
        eval_steps=args.eval_steps,
        save_strategy=args.save_strategy,
        save_steps=args.save_steps,
        save_total_limit=args.save_total_limit,
        logging_strategy="steps",
        logging_steps=args.logging_steps,
        seed=args.seed,
        train_sampling_strategy="group_by_length",  # similar lengths per batch: less padding
        include_num_input_tokens_seen="non_padding",  # words (3-D ids would count 50 per word)
        use_cpu=args.cpu,
        disable_tqdm=args.no_progress,
        report_to="none",
        dataloader_num_workers=0,
        dataloader_pin_memory=False,
    )
    trainer = _tagger_trainer_class()(
        model=model,
        args=training_args,
        train_dataset=train_data,
        eval_dataset=eval_data,
        data_collator=DataCollatorForTokenClassification(tokenizer),
        processing_class=tokenizer,
        compute_metrics=make_compute_metrics(model.config.id2label, scheme) if eval_data is not None else None,
        preprocess_logits_for_metrics=make_preprocess_logits(model),
        callbacks=[_time_budget_callback(args.time_budget)] if args.time_budget else None,
    )
    resume = args.resume_from_checkpoint
    if resume == "last":
        # The newest folder may be half-written (a run killed while saving): take the newest complete one.
        resume = newest_complete_checkpoint(args.output_dir, logging.getLogger("modeling_elmo.training.train_tagger"))
        if resume is None:
            raise ValueError(f"--resume_from_checkpoint last: no complete checkpoint in {args.output_dir}")
        print(f"resuming from {resume}", flush=True)
    elif resume:
        problem = checkpoint_problem(resume) if Path(resume).is_dir() else "not a folder"
        if problem:
            raise ValueError(f"--resume_from_checkpoint: {resume} is incomplete: {problem}")
    started = time.monotonic()
    result = trainer.train(resume_from_checkpoint=resume)
    train_seconds = time.monotonic() - started
    metrics: dict[str, Any] = dict(result.metrics)
    words_seen = int(trainer.state.num_input_tokens_seen)
    metrics.update(
        train_seconds=round(train_seconds, 2),
        train_words_seen=words_seen,
        train_words_per_second=round(words_seen / max(train_seconds, 1e-9), 1),
        train_steps=trainer.state.global_step,
        tag_scheme=scheme,
    )
    if eval_data is not None:
        started = time.monotonic()
        eval_metrics = trainer.evaluate()
        eval_seconds = time.monotonic() - started
        eval_words = sum(map(len, eval_sentences))
        metrics.update(eval_metrics)
        metrics.update(eval_seconds=round(eval_seconds, 2), eval_words_per_second=round(eval_words / eval_seconds, 1))
    trainer.save_model(args.output_dir)  # the model, its config (labels) and the tokenizer
    if trainer.is_world_process_zero():
        scores = [
            ("f1", "Entity F1 (seqeval)", "eval_f1"),
            ("precision", "Entity precision (seqeval)", "eval_precision"),
            ("recall", "Entity recall (seqeval)", "eval_recall"),
        ]
        measured = [(kind, name, 100 * metrics[key]) for kind, name, key in scores if key in metrics]
        write_model_card(
            args.output_dir,
            trainer.model.config,
            how_made=_how_made(args, metrics),
            eval_results=metric_results("token-classification", "Sequence tagging", [args.eval_file], measured)
            if args.eval_file and measured
            else None,
            base_model=None if args.no_elmo else hub_model_id(args.bilm),
        )
    trainer.save_metrics("all", metrics)
    print(json.dumps({k: v for k, v in metrics.items() if not isinstance(v, (list, dict))}, indent=1), flush=True)
    return metrics


def _how_made(args: argparse.Namespace, metrics: dict[str, Any]) -> str:
    """The model card's provenance paragraph: the biLM, the data, the recipe and the dev F1."""
    if args.no_elmo:
        source = "without ELMo (word embeddings only, the baseline)"
    else:
        source = f"on the {'fine-tuned' if args.fine_tune_bilm else 'frozen'} biLM of `{args.bilm}`"
    text = (
        f"A tagger trained {source} with `python -m modeling_elmo.training.train_tagger` (the `modeling_elmo` package) "
        f"on `{os.path.basename(args.train_file)}` ({metrics['tag_scheme']} tags, predicted as BIO): "
        f"{metrics['train_steps']} steps of {args.batch_size} sentences, word input `{args.word_input}`, "
        f"{'a CRF' if not args.no_crf else 'a per-word softmax'}."
    )
    if "eval_f1" in metrics:
        text += (
            f" Entity-level F1 on `{os.path.basename(args.eval_file)}` (seqeval): {100 * metrics['eval_f1']:.2f} "
            f"(precision {100 * metrics['eval_precision']:.2f}, recall {100 * metrics['eval_recall']:.2f})."
        )
    return text


def load_tagger(model_dir: str | os.PathLike):
    """``(model, tokenizer)`` of a saved tagger folder, the model in eval mode."""
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    from .. import ElmoTokenizer  # noqa: F401  (importing the package registers the ELMo Auto classes)

    model = AutoModelForTokenClassification.from_pretrained(model_dir).eval()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    return model, tokenizer


def predict_sentences(
    model, tokenizer, sentences: Sequence[str] | Sequence[Sequence[str]], batch_size: int = 32
) -> list[list[tuple[str, str]]]:
    """Tag sentences: raw strings (split into words by the tokenizer) or lists of words.

    Returns, per sentence, ``(word, tag)`` pairs with the tag names of ``model.config.id2label``.
    """
    results: list[list[tuple[str, str]]] = []
    for start in range(0, len(sentences), batch_size):
        chunk = list(sentences[start : start + batch_size])
        split = not isinstance(chunk[0], str)
        encoding = tokenizer(
            chunk,
            is_split_into_words=split,
            padding=True,
            return_tensors="pt",
            return_vocab_ids=model.needs_vocab_ids,
            return_offsets_mapping=not split,
        )
        offsets = encoding.pop("offset_mapping", None)
        inputs = {key: value.to(model.device) for key, value in encoding.items()}
        tags = model.predict(**inputs)
        for row, (sentence, row_tags) in enumerate(zip(chunk, tags, strict=True)):
            if split:
                words = list(sentence)
            else:
                spans = offsets[row][: len(row_tags)].tolist()
                words = [sentence[a:b] for a, b in spans]
            results.append(list(zip(words, row_tags, strict=True)))
    return results


def predict(args: argparse.Namespace) -> int:
    """Print ``word<TAB>tag`` for each word of each sentence, a blank line after each sentence."""
    model, tokenizer = load_tagger(args.predict)
    sentences = list(args.sentences)
    if args.input_file:
        with open(args.input_file, encoding="utf-8") as f:
            sentences += [line.strip() for line in f if line.strip()]
    if not sentences:
        sentences = [line.strip() for line in sys.stdin if line.strip()]
    if not sentences:
        print("error: no sentences to tag (give them as arguments, with --input_file, or on stdin)", file=sys.stderr)
        return 2
    for tagged in predict_sentences(model, tokenizer, sentences, args.eval_batch_size):
        for word, tag in tagged:
            print(f"{word}\t{tag}")
        print()
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m modeling_elmo.training.train_tagger",
        description="Fine-tune an ELMo sequence tagger (biLSTM-CRF over scalar mixes of a frozen biLM) on CoNLL "
        "files with the Hugging Face Trainer, or tag raw sentences with a saved one (--predict).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    io = parser.add_argument_group("data and model")
    io.add_argument("--bilm", help="an ElmoModel folder (converted or trained); its biLM is the tagger's")
    io.add_argument("--no_elmo", action="store_true", help="baseline without ELMo: word embeddings only")
    io.add_argument("--train_file", help="CoNLL training file (word ... tag per line)")
    io.add_argument("--eval_file", help="CoNLL evaluation (dev) file")
    io.add_argument("--output_dir", help="where checkpoints and the final model go")
    io.add_argument("--max_train_sentences", type=int, default=0, help="use only the first N (0: all)")
    io.add_argument("--max_eval_sentences", type=int, default=0, help="use only the first N (0: all)")
    io.add_argument("--max_words", type=int, default=0, help="cut longer sentences (0: no limit)")

    head = parser.add_argument_group("tagger")
    head.add_argument(
        "--word_input",
        choices=["embedding", "bilm", "none"],
        default="embedding",
        help="x_k: a word embedding over the training vocabulary, the biLM's layer 0, or nothing",
    )
    head.add_argument("--min_word_freq", type=int, default=2, help="rarer training words share <UNK>'s embedding")
    head.add_argument("--word_dim", type=int, default=100, help="word embedding size")
    head.add_argument("--no_elmo_input", action="store_true", help="no ELMo mix at the BiLSTM's input")
    head.add_argument("--elmo_output", action="store_true", help="a second ELMo mix at the BiLSTM's output")
    head.add_argument("--hidden_size", type=int, default=200, help="task BiLSTM size per direction")
    head.add_argument("--num_layers", type=int, default=2, help="task BiLSTM layers (0: none)")
    head.add_argument("--dropout", type=float, default=0.5, help="dropout in the tagger")
    head.add_argument("--elmo_dropout", type=float, default=0.5, help="dropout on the ELMo mixes")
    head.add_argument("--l2_coef", type=float, default=0.001, help="L2 penalty on the mix weights")
    head.add_argument(
        "--layer_norm",
        choices=["none", "token", "batch"],
        default="none",
        help="normalise the biLM layers before mixing",
    )
    head.add_argument("--no_crf", action="store_true", help="per-word softmax instead of a CRF")
    head.add_argument("--fine_tune_bilm", action="store_true", help="train the biLM too (default: frozen)")

    opt = parser.add_argument_group("training")
    opt.add_argument("--epochs", type=float, default=3.0)
    opt.add_argument("--max_steps", type=int, default=0, help="stop after this many steps (0: use --epochs)")
    opt.add_argument("--time_budget", type=float, default=0, help="stop training after this many seconds (0: none)")
    opt.add_argument("--batch_size", type=int, default=32)
    opt.add_argument("--eval_batch_size", type=int, default=64)
    opt.add_argument("--learning_rate", type=float, default=1e-3)
    opt.add_argument("--lr_scheduler", default="linear", help="Trainer lr_scheduler_type (linear, constant, ...)")
    opt.add_argument("--warmup_steps", type=int, default=0)
    opt.add_argument("--max_grad_norm", type=float, default=5.0)
    opt.add_argument("--eval_strategy", choices=["no", "steps", "epoch"], default="epoch")
    opt.add_argument("--eval_steps", type=int, default=500)
    opt.add_argument("--save_strategy", choices=["no", "steps", "epoch"], default="steps")
    opt.add_argument("--save_steps", type=int, default=500)
    opt.add_argument("--save_total_limit", type=int, default=2)
    opt.add_argument("--logging_steps", type=int, default=50)
    opt.add_argument("--resume_from_checkpoint", help="a checkpoint folder, or 'last' for the latest in --output_dir")
    opt.add_argument("--seed", type=int, default=42)
    opt.add_argument("--cpu", action="store_true", help="train on the CPU even if a GPU is present")
    opt.add_argument("--num_threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    opt.add_argument("--no_progress", action="store_true", help="no progress bars")

    pred = parser.add_argument_group("prediction")
    pred.add_argument("--predict", metavar="MODEL_DIR", help="tag sentences with a saved tagger instead of training")
    pred.add_argument("--input_file", help="with --predict: a file of raw sentences, one per line")
    pred.add_argument("sentences", nargs="*", help="with --predict: raw sentences (default: read stdin)")
    return parser


def _check_train_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.sentences or args.input_file:
        parser.error("sentences and --input_file go with --predict MODEL_DIR")
    for name in ("train_file", "output_dir"):
        if not getattr(args, name):
            parser.error(f"--{name} is required for training")
    if args.no_elmo and args.word_input != "embedding":
        parser.error("--no_elmo is the word-embedding baseline: it needs --word_input embedding")
    if not args.no_elmo and not args.bilm:
        parser.error("give --bilm PATH (an ElmoModel folder), or --no_elmo for the baseline without ELMo")
    if args.bilm and not Path(args.bilm).is_dir():
        parser.error(f"--bilm {args.bilm}: not a folder")
    if args.time_budget < 0 or (args.time_budget and not math.isfinite(args.time_budget)):
        parser.error("--time_budget must be a non-negative number of seconds")
    check_numbers(parser, args, TRAIN_NUMBER_RULES)
    check_fraction(parser, args, "dropout", "elmo_dropout")


# Numeric flags of training: (lowest, highest, what the bounds mean); see checks.check_numbers.
TRAIN_NUMBER_RULES: dict[str, tuple] = {
    "max_train_sentences": (0, None, "0: all"),
    "max_eval_sentences": (0, None, "0: all"),
    "max_words": (0, None, "0: no limit"),
    "min_word_freq": (1, None, ""),
    "word_dim": (1, None, ""),
    "hidden_size": (1, None, ""),
    "num_layers": (0, None, "0: no task BiLSTM"),
    "l2_coef": (0, None, ""),
    "epochs": (POSITIVE, None, ""),
    "max_steps": (0, None, "0: use --epochs"),
    "batch_size": (1, None, ""),
    "eval_batch_size": (1, None, ""),
    "learning_rate": (POSITIVE, None, ""),
    "warmup_steps": (0, None, ""),
    "max_grad_norm": (0, None, "0: no clipping"),
    "eval_steps": (1, None, ""),
    "save_steps": (1, None, ""),
    "save_total_limit": (1, None, ""),
    "logging_steps": (1, None, ""),
    "seed": (0, MAX_SEED, ""),
    "num_threads": (0, None, "0: torch's default"),
}


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the exit status (1 with one ``error:`` line for bad input)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.predict:
        check_numbers(parser, args, {"eval_batch_size": (1, None, "")})
    else:
        _check_train_args(parser, args)
    try:
        if args.predict:
            return predict(args)
        if args.num_threads:
            torch.set_num_threads(args.num_threads)
        train(args)
    except (ValueError, OSError) as error:  # bad files, models or values: one line, no traceback
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
