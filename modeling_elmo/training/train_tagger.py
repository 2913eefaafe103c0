"""Fine-tune an ELMo sequence tagger (e.g. CoNLL-2003 NER) with the Hugging Face Trainer, and tag raw text.

Train (from a converted or self-trained ``ElmoModel`` folder, or ``--no_elmo`` for the word-embedding baseline)::

    python -m modeling_elmo.training.train_tagger --bilm elmo-small --train_file train.txt --eval_file dev.txt \\
        --output_dir ner-elmo --num_train_epochs 3

The options are parsed as transformers' ``examples/pytorch/token-classification/run_ner.py`` parses them: three
dataclasses (``ModelArguments``, ``DataArguments`` and ``ElmoTaggerTrainingArguments``, a ``TrainingArguments``
that carries the tagger's recipe as its defaults), so every ``TrainingArguments`` flag works under its own name
(``--bf16``, ``--gradient_accumulation_steps``, ``--push_to_hub``, ``--report_to`` ...) and one JSON or YAML file
may hold them all (``elmo train-tagger run.json``). ``--dataset_name`` trains from a Hub dataset (``tokens`` and
``ner_tags`` columns, as ``conll2003``) or a folder holding a saved ``DatasetDict``, instead of CoNLL files.

Tag raw sentences with the saved folder (prints ``word<TAB>tag``, a blank line between sentences)::

    python -m modeling_elmo.training.train_tagger --predict ner-elmo "EU rejects German call to boycott British lamb."

The data (CoNLL files, a dataset, tag schemes: IOB1 is converted to BIO, so the CRF's BIO constraints apply and
the saved model predicts BIO tags) is read by ``modeling_elmo.training.tagging_data``; the ``Trainer`` (its order,
time budget and final evaluation) and the metrics (entity-level precision/recall/F1 with ``seqeval``) are in
``modeling_elmo.training.tagger_trainer``.

Output: status lines go to stderr (logged on the main process only), the final metrics as JSON to stdout.

This module imports ``datasets`` and ``seqeval`` (the ``[train]`` extra); the model code does not.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import logging
import os
import sys
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from transformers import IntervalStrategy, TrainerCallback, TrainingArguments
from transformers.utils import logging as hf_logging

from ..demo_models.model import resolve_model_name
from ..hub.download import close_released_name
from ..hub.model_card import SCALAR_MIX_PLOT, hub_model_id, metric_results, source_name, write_model_card
from ..hub.remote_code import remote_code, save_with_remote_code
from ..inference.token_cache import build_token_cache
from . import tagger_trainer, tagging_data
from .arguments import COMMON_TRAINING_ARGUMENTS, ElmoArgumentParser
from .checkpoints import CHECKPOINT_PATTERN, checkpoint_problem, newest_complete_checkpoint
from .checks import MAX_SEED, POSITIVE, check_fraction, check_numbers
from .distributed import finish_distributed

PROG = "python -m modeling_elmo.training.train_tagger"

logger = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------------------
# Model and tokenizer
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


def build_model_and_tokenizer(args: ModelArguments, labels: list[str], train_sentences: list[list[str]]):
    """The tagger (biLM weights from ``args.bilm`` unless ``--no_elmo``) and its tokenizer.

    The head is new, which transformers' LOAD REPORT would list weight by weight: this command asks for the loading
    info and says it in one status line instead (see [`quiet_transformers`]). What matters is checked by
    ``ElmoForTokenClassification.from_pretrained`` itself: biLM weights that are missing or do not fit the config
    raise ``ValueError``.
    """
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
        tokenizer = ElmoTokenizer(vocab=tagging_data.build_word_vocab(train_sentences, args.min_word_freq), **settings)
        head["tagger_word_vocab_size"] = len(tokenizer)
    else:
        tokenizer = base_tokenizer or ElmoTokenizer()

    if args.no_elmo:
        model = ElmoForTokenClassification(ElmoConfig(**_no_elmo_bilm_config(), **head))
    else:
        with quiet_transformers():
            model, info = ElmoForTokenClassification.from_pretrained(args.bilm, output_loading_info=True, **head)
        new = sorted({key.split(".")[0] for key in info["missing_keys"]})
        logger.info("new in the tagger, trained from scratch: %s", ", ".join(new) or "nothing")
    if model.config.max_characters_per_token != tokenizer.max_characters_per_token:
        raise ValueError(
            f"the tokenizer writes {tokenizer.max_characters_per_token} characters per word but the biLM reads "
            f"{model.config.max_characters_per_token}"
        )
    return model, tokenizer


# ---------------------------------------------------------------------------------------------
# Command-line arguments (as transformers' run_ner.py: three dataclasses, parsed by HfArgumentParser)
# ---------------------------------------------------------------------------------------------


class _Refusal:
    """Stands in for the parser in ``checks.check_numbers``: a value that means nothing is refused with
    ``ValueError`` (one ``error:`` line, exit 1), also when it comes from a config file."""

    @staticmethod
    def error(message: str):
        raise ValueError(message)


@dataclass
class ModelArguments:
    """The biLM the tagger reads, and the tagger's own head."""

    _argument_group_name = "the biLM and the tagger"  # --help's heading (HfArgumentParser's argument groups)

    bilm: str | None = field(
        default=None,
        metadata={
            # train-lm's name for the same thing, so that one spelling works in both commands.
            "aliases": ["--model_name_or_path"],
            "metavar": "PATH",
            "help": "the biLM whose layers the tagger mixes: an ElmoModel folder (converted or trained), a released "
            "model's name (elmo download --list: downloaded and converted on first use) or demo (the bundled toy "
            "biLM); --bilm and --model_name_or_path (train-lm's name) are the same flag, as are the keys bilm and "
            "model_name_or_path of a config file",
        },
    )
    # What --bilm named, for the model card (a released name, demo, or a folder's name), set by parse_args when it
    # turns the name into its folder; not an option.
    bilm_name: str | None = field(default=None, init=False, repr=False)
    no_elmo: bool = field(default=False, metadata={"help": "baseline without ELMo: word embeddings only"})
    word_input: str = field(
        default="embedding",
        metadata={
            "help": "x_k: a word embedding over the training vocabulary, the biLM's layer 0, or nothing",
            "choices": ["embedding", "bilm", "none"],
        },
    )
    min_word_freq: int = field(default=2, metadata={"help": "rarer training words share <UNK>'s embedding"})
    word_dim: int = field(default=100, metadata={"help": "word embedding size"})
    no_elmo_input: bool = field(default=False, metadata={"help": "no ELMo mix at the BiLSTM's input"})
    elmo_output: bool = field(default=False, metadata={"help": "a second ELMo mix at the BiLSTM's output"})
    hidden_size: int = field(default=200, metadata={"help": "task BiLSTM size per direction"})
    num_layers: int = field(default=2, metadata={"help": "task BiLSTM layers (0: none)"})
    dropout: float = field(default=0.5, metadata={"help": "dropout in the tagger"})
    elmo_dropout: float = field(default=0.5, metadata={"help": "dropout on the ELMo mixes"})
    l2_coef: float = field(default=0.001, metadata={"help": "L2 penalty on the mix weights"})
    layer_norm: str = field(
        default="none",
        metadata={"help": "normalise the biLM layers before mixing", "choices": ["none", "token", "batch"]},
    )
    no_crf: bool = field(default=False, metadata={"help": "per-word softmax instead of a CRF"})
    fine_tune_bilm: bool = field(default=False, metadata={"help": "train the biLM too (default: frozen)"})
    remote_code: bool = field(
        default=False,
        metadata={
            "help": "save (and push) the model with its code files, auto_map and pipeline, so that it loads without "
            "this package (trust_remote_code=True); default: a plain folder"
        },
    )

    def __post_init__(self) -> None:
        check_numbers(_Refusal, self, MODEL_NUMBER_RULES)
        check_fraction(_Refusal, self, "dropout", "elmo_dropout")


@dataclass
class DataArguments:
    """CoNLL files, or a Hub dataset (or a saved ``DatasetDict``) with word and tag columns."""

    _argument_group_name = "data"

    train_file: str | None = field(default=None, metadata={"help": "CoNLL training file (word ... tag per line)"})
    eval_file: str | None = field(default=None, metadata={"help": "CoNLL evaluation (dev) file"})
    dataset_name: str | None = field(
        default=None,
        metadata={
            "help": "a Hub dataset (e.g. conll2003), a local dataset folder, or a folder holding a saved DatasetDict "
            "(save_to_disk), instead of --train_file; its 'train' split trains, its 'validation' split (if any) "
            "evaluates"
        },
    )
    dataset_config_name: str | None = field(default=None, metadata={"help": "the dataset's configuration name"})
    text_column_name: str = field(default="tokens", metadata={"help": "with --dataset_name: the column of words"})
    label_column_name: str = field(
        default="ner_tags", metadata={"help": "with --dataset_name: the column of tags (ClassLabel ids or names)"}
    )
    cache_dir: str | None = field(default=None, metadata={"help": "the datasets cache folder"})
    max_train_sentences: int = field(default=0, metadata={"help": "use only the first N (0: all)"})
    max_eval_sentences: int = field(default=0, metadata={"help": "use only the first N (0: all)"})
    max_words: int = field(default=0, metadata={"help": "cut longer sentences (0: no limit)"})

    def __post_init__(self) -> None:
        check_numbers(_Refusal, self, DATA_NUMBER_RULES)


@dataclass
class ElmoTaggerTrainingArguments(TrainingArguments):
    """``TrainingArguments`` with the tagger's recipe as defaults (Adam 1e-3, batch 32, clipping at 5, length-grouped
    batches, evaluation every epoch), plus a training-time budget and the CPU thread count."""

    _argument_group_name = "training (transformers' TrainingArguments, the tagger's recipe as defaults)"

    # Required (checked after parsing, so that unknown flags are reported first): "" instead of transformers' None,
    # which it would turn into ./trainer_output.
    output_dir: str | None = field(default="", metadata={"help": "where checkpoints and the final model go"})
    num_train_epochs: float = field(default=3.0, metadata={"help": "Total number of training epochs to perform."})
    per_device_train_batch_size: int = field(default=32, metadata={"help": "Sentences per step and device."})
    per_device_eval_batch_size: int = field(default=64, metadata={"help": "Sentences per evaluation batch."})
    learning_rate: float = field(default=1e-3, metadata={"help": "The initial learning rate (Adam)."})
    max_grad_norm: float = field(default=5.0, metadata={"help": "Gradient clipping (0: none)."})
    eval_strategy: IntervalStrategy | str = field(
        default="epoch",
        metadata={
            "help": "When to evaluate on the dev set during training: no, steps or epoch (without a dev set: no). "
            "The dev set is also evaluated once at the end (not twice: an evaluation of the final step is reused)."
        },
    )
    eval_steps: float | None = field(default=500, metadata={"help": "Evaluate every N steps (--eval_strategy steps)."})
    save_steps: float = field(default=500, metadata={"help": "Save a checkpoint every N steps."})
    save_total_limit: int | None = field(default=2, metadata={"help": "Keep at most this many checkpoints."})
    logging_steps: float = field(default=50, metadata={"help": "Log the loss every N steps."})
    train_sampling_strategy: str = field(
        default="group_by_length",
        metadata={
            "help": "Sampler for training (similar lengths per batch: less padding).",
            "choices": ["random", "sequential", "group_by_length", "batch_rebalance"],
        },
    )
    # Declared as str: HfArgumentParser reads transformers' `str | bool` as a bool and refuses "non_padding".
    include_num_input_tokens_seen: str = field(
        default="non_padding",
        metadata={
            "help": "Count the input tokens seen: non_padding counts words (for train_words_per_second; 'all' would "
            "count 50 character ids per word), no: none.",
            "choices": ["no", "all", "non_padding"],
        },
    )
    dataloader_pin_memory: bool = field(default=False, metadata={"help": "Pin memory in data loaders."})
    time_budget: float = field(
        default=0.0,
        metadata={
            "help": "stop training after this many seconds of TRAINING (0: no limit): the training loop's time "
            "(checkpoints included) without any evaluation of the dev set (during training or the final one), and "
            "without start-up and the final save. With the default --eval_strategy epoch and a budget shorter than an "
            "epoch, a run takes start-up + the budget + one evaluation; each evaluation during training adds its time"
        },
    )
    num_threads: int = field(default=0, metadata={"help": "torch CPU threads (0: torch's default)"})
    overwrite_output_dir: bool = field(
        default=False, metadata={"help": "start afresh even if --output_dir has checkpoints"}
    )

    def __post_init__(self) -> None:
        check_numbers(_Refusal, self, TRAINING_NUMBER_RULES)
        # Progress bars obey transformers' switch (transformers.utils.logging.disable_progress_bar()).
        if self.disable_tqdm is None and not hf_logging.is_progress_bar_enabled():
            self.disable_tqdm = True
        super().__post_init__()


# Numeric options: (lowest, highest, what the bounds mean); see checks.check_numbers. A bad value is refused with
# one error line naming the option.
MODEL_NUMBER_RULES: dict[str, tuple] = {
    "min_word_freq": (1, None, ""),
    "word_dim": (1, None, ""),
    "hidden_size": (1, None, ""),
    "num_layers": (0, None, "0: no task BiLSTM"),
    "l2_coef": (0, None, ""),
}
DATA_NUMBER_RULES: dict[str, tuple] = {
    "max_train_sentences": (0, None, "0: all"),
    "max_eval_sentences": (0, None, "0: all"),
    "max_words": (0, None, "0: no limit"),
}
TRAINING_NUMBER_RULES: dict[str, tuple] = {
    "num_train_epochs": (POSITIVE, None, ""),
    "max_steps": (-1, None, "-1 or 0: use --num_train_epochs"),
    "per_device_train_batch_size": (1, None, ""),
    "per_device_eval_batch_size": (1, None, ""),
    "gradient_accumulation_steps": (1, None, ""),
    "learning_rate": (POSITIVE, None, ""),
    "weight_decay": (0, None, ""),
    "warmup_steps": (0, None, ""),
    "max_grad_norm": (0, None, "0: no clipping"),
    "eval_steps": (POSITIVE, None, ""),
    "save_steps": (POSITIVE, None, ""),
    "save_total_limit": (1, None, ""),
    "logging_steps": (POSITIVE, None, ""),
    "seed": (0, MAX_SEED, ""),
    "time_budget": (0, None, "seconds of training; 0: no limit"),
    "num_threads": (0, None, "0: torch's default"),
}

# Old flag names, kept for one release (hidden; a note on stderr says the new name).
DEPRECATED_FLAGS = {
    "--epochs": "--num_train_epochs",
    "--batch_size": "--per_device_train_batch_size",
    "--eval_batch_size": "--per_device_eval_batch_size",
    "--lr_scheduler": "--lr_scheduler_type",
    "--cpu": "--use_cpu",
    "--no_progress": "--disable_tqdm true",
}

TRAIN_DESCRIPTION = (
    "Fine-tune an ELMo sequence tagger (biLSTM-CRF over scalar mixes of a frozen biLM) on CoNLL files or a Hub "
    "dataset with the Hugging Face Trainer; every TrainingArguments option works under its transformers name, and "
    "one JSON or YAML file may hold all options ({prog} run.json). Status lines go to stderr, the final metrics as "
    "JSON to stdout. To tag raw sentences with a saved tagger: {prog} --predict MODEL_DIR [--input_file FILE] "
    "[SENTENCE ...] (see {prog} --predict MODEL_DIR --help)."
)


TRAIN_USAGE = (
    "%(prog)s (--bilm MODEL | --no_elmo) (--train_file FILE [--eval_file FILE] | --dataset_name NAME) "
    "--output_dir DIR [OPTION ...]\n"
    "       %(prog)s CONFIG.json|CONFIG.yaml\n"
    "       %(prog)s --predict MODEL_DIR [--input_file FILE] [SENTENCE ...]"
)


def build_parser(prog: str | None = None) -> ElmoArgumentParser:
    """The training command's parser: ``(ModelArguments, DataArguments, ElmoTaggerTrainingArguments)``."""
    prog = prog or PROG
    return ElmoArgumentParser(
        (ModelArguments, DataArguments, ElmoTaggerTrainingArguments),
        prog=prog,
        usage=TRAIN_USAGE,
        description=TRAIN_DESCRIPTION.format(prog=prog),
        deprecated=DEPRECATED_FLAGS,
        short_help=COMMON_TRAINING_ARGUMENTS,
    )


class _PredictParser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, as ElmoArgumentParser
        print(f"{self.prog}: error: {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(2)


def build_predict_parser(prog: str | None = None) -> argparse.ArgumentParser:
    """The parser of ``--predict MODEL_DIR``: tag raw sentences with a saved tagger."""
    parser = _PredictParser(
        prog=prog or PROG,
        usage="%(prog)s --predict MODEL_DIR [--input_file FILE] [--per_device_eval_batch_size N] [SENTENCE ...]",
        description="Tag raw sentences with a saved tagger: prints word<TAB>tag per word, a blank line after each "
        "sentence.",
    )
    parser.add_argument("--predict", metavar="MODEL_DIR", required=True, help="a tagger folder saved by training")
    parser.add_argument("--input_file", metavar="FILE", help="a file of raw sentences, one per line")
    parser.add_argument("--per_device_eval_batch_size", metavar="N", type=int, default=64, help="sentences per batch")
    parser.add_argument("sentences", metavar="SENTENCE", nargs="*", help="raw sentences (default: read stdin)")
    return parser


def _is_predict(argv: Sequence[str]) -> bool:
    return any(arg == "--predict" or arg.startswith("--predict=") for arg in argv)


def _rename_deprecated(argv: Sequence[str], deprecated: dict[str, str], prog: str) -> list[str]:
    """``argv`` with old flag names replaced (for the prediction parser, which is no ``ElmoArgumentParser``)."""
    out = []
    for arg in argv:
        name, sep, value = arg.partition("=")
        if name in deprecated:
            print(f"{prog}: note: {name} is deprecated and will be removed in the next release; use "
                  f"{deprecated[name]}", file=sys.stderr)  # fmt: skip
            arg = deprecated[name] + sep + value
        out.append(arg)
    return out


def check_run(model_args: ModelArguments, data_args: DataArguments, training_args: TrainingArguments) -> None:
    """Refuse option combinations that mean nothing, and a re-run over a previous run's checkpoints
    (``ValueError``: one error line, exit 1)."""
    if not training_args.output_dir:
        raise ValueError("--output_dir is required for training")
    if bool(data_args.train_file) == bool(data_args.dataset_name):
        raise ValueError("give the training data as --train_file FILE (CoNLL) or --dataset_name NAME, one of them")
    if data_args.eval_file and not data_args.train_file:
        raise ValueError("--eval_file goes with --train_file; a --dataset_name brings its own 'validation' split")
    for path in (data_args.train_file, data_args.eval_file):
        if path and not Path(path).is_file():
            raise FileNotFoundError(f"CoNLL file not found: {path}")
    if model_args.no_elmo and model_args.word_input != "embedding":
        raise ValueError("--no_elmo is the word-embedding baseline: it needs --word_input embedding")
    if not model_args.no_elmo and not model_args.bilm:
        raise ValueError(
            "give --bilm PATH (or --model_name_or_path PATH: an ElmoModel folder, a released model's name or demo), or "
            "--no_elmo for the baseline without ELMo"
        )
    if model_args.bilm and not Path(model_args.bilm).is_dir():
        suggestion = close_released_name(model_args.bilm)
        hint = f": did you mean {suggestion}? (`elmo download --list`)" if suggestion else ""
        raise ValueError(f"--bilm {model_args.bilm}: not a folder{hint}")
    resume = training_args.resume_from_checkpoint
    if resume is None and not training_args.overwrite_output_dir:
        output_dir = Path(training_args.output_dir)
        found = sorted(
            (int(match.group(1)), path.name)
            for path in (output_dir.iterdir() if output_dir.is_dir() else [])
            if (match := CHECKPOINT_PATTERN.match(path.name)) and path.is_dir()
        )
        if found:
            raise ValueError(
                f"{output_dir} already has checkpoints ({found[-1][1]}): pass --resume_from_checkpoint last to go "
                "on, or --overwrite_output_dir to start afresh"
            )


def parse_args(argv: Sequence[str] | None = None, prog: str | None = None):
    """``(ModelArguments, DataArguments, ElmoTaggerTrainingArguments)`` from the command line (or a JSON/YAML file),
    checked. ``--bilm`` may name a released model (downloaded and converted on first use) or ``demo`` (the bundled
    demo biLM): ``model_args.bilm`` is then its folder, and ``model_args.bilm_name`` the name given. Raises
    ``ValueError`` for refused values, ``OSError`` for a failed download, ``SystemExit(2)`` for usage errors."""
    model_args, data_args, training_args = build_parser(prog).parse(argv)
    if model_args.bilm:  # "demo" or a released model's name (`elmo download --list`): its folder
        model_args.bilm_name = model_args.bilm
        model_args.bilm = resolve_model_name(model_args.bilm)
    check_run(model_args, data_args, training_args)
    return model_args, data_args, training_args


# ---------------------------------------------------------------------------------------------
# Logging, as in transformers' example scripts
# ---------------------------------------------------------------------------------------------


class _StderrHandler(logging.StreamHandler):
    """Writes to the current ``sys.stderr`` (which a caller, or pytest, may have replaced since)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:  # StreamHandler sets it; the property always answers sys.stderr
        pass


def setup_logging(training_args: TrainingArguments) -> None:
    """As ``run_ner.py``: transformers and datasets log at ``training_args.get_process_log_level()``; this command's
    status lines go to stderr, on the main process only (other processes: warnings and worse)."""
    import datasets

    log_level = training_args.get_process_log_level()
    hf_logging.set_verbosity(log_level)
    datasets.utils.logging.set_verbosity(log_level)
    logger.setLevel(logging.INFO if training_args.should_log and training_args.log_level == "passive" else log_level)
    logger.propagate = False  # printed once, by its own handler, whatever the caller's root logging does
    if not any(isinstance(handler, _StderrHandler) for handler in logger.handlers):
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    """transformers' verbosity at ERROR for the duration, then as it was: for the command's own load of a biLM folder
    into a new tagger, whose head transformers' LOAD REPORT would list as missing (the loading info says it, in one
    line). Left as it is when set to INFO or DEBUG (``--log_level info``). transformers' own switch, as an application
    sets it: no logger of transformers gets a level or a filter of its own (a level on transformers.modeling_utils'
    logger arms its tensor-parallel plan check: "The following layers were not sharded: crf.constraint_mask, ...").
    """
    before = hf_logging.get_verbosity()
    if before < hf_logging.WARNING:
        yield
        return
    hf_logging.set_verbosity(hf_logging.ERROR)
    try:
        yield
    finally:
        hf_logging.set_verbosity(before)


@contextlib.contextmanager
def progress_bars(enabled: bool) -> Iterator[None]:
    """transformers' and datasets' progress bars (loading, saving, ``Dataset.map``) on or off for the duration, then
    as they were: ``--disable_tqdm`` silences them all, as ``transformers.utils.logging.disable_progress_bar()``
    (the default of ``--disable_tqdm``) does."""
    from datasets.utils import logging as ds_logging

    switches = [
        (ds_logging.is_progress_bar_enabled(), ds_logging.enable_progress_bar, ds_logging.disable_progress_bar),
        (hf_logging.is_progress_bar_enabled(), hf_logging.enable_progress_bar, hf_logging.disable_progress_bar),
    ]
    for _, enable, disable in switches:
        (enable if enabled else disable)()
    try:
        yield
    finally:
        for was, enable, disable in switches:
            (enable if was else disable)()


def _resume_checkpoint(training_args: TrainingArguments) -> str | None:
    """The checkpoint to resume from: ``last`` is the newest complete one in ``--output_dir``."""
    resume = training_args.resume_from_checkpoint
    if resume == "last":
        # The newest folder may be half-written (a run killed while saving): take the newest complete one.
        resume = newest_complete_checkpoint(training_args.output_dir, logger)
        if resume is None:
            raise ValueError(f"--resume_from_checkpoint last: no complete checkpoint in {training_args.output_dir}")
        logger.info("resuming from %s", resume)
    elif resume:
        problem = checkpoint_problem(resume) if Path(resume).is_dir() else "not a folder"
        if problem:
            raise ValueError(f"--resume_from_checkpoint: {resume} is incomplete: {problem}")
    return resume


# ---------------------------------------------------------------------------------------------
# Commands
# ---------------------------------------------------------------------------------------------


def train(
    model_args: ModelArguments,
    data_args: DataArguments,
    training_args: TrainingArguments,
    callbacks: Sequence[TrainerCallback] | None = None,
) -> dict[str, Any]:
    """Train, evaluate (once, at the end) and save; returns the final metrics (``eval_*``, ``train_*``).

    ``train_seconds`` is training time without evaluation (what ``--time_budget`` bounds), and
    ``train_words_per_second`` the words of this run over it. ``callbacks`` are added to the Trainer.
    """
    with progress_bars(not training_args.disable_tqdm):
        return _train(model_args, data_args, training_args, callbacks)


def _train(
    model_args: ModelArguments,
    data_args: DataArguments,
    training_args: TrainingArguments,
    callbacks: Sequence[TrainerCallback] | None,
) -> dict[str, Any]:
    """[`train`] with the progress bars set."""
    from datasets import Dataset
    from transformers import DataCollatorForTokenClassification, set_seed

    set_seed(training_args.seed)
    data = tagging_data.load_tagging_data(data_args)
    scheme = tagging_data.unify_scheme(data)  # one scheme for training, evaluation and the saved model: BIO
    # The dataset's declared tag names too (a ClassLabel), so that tags rare enough to miss the training cut work.
    labels = tagging_data.sort_labels([t for tags in data.train_tags for t in tags] + list(data.label_names or []))
    logger.info(
        "%d training sentences, %d words; tag scheme %s%s; %d labels: %s",
        len(data.train_sentences),
        sum(map(len, data.train_sentences)),
        scheme,
        " (converted to BIO)" if scheme == "IOB1" else "",
        len(labels),
        " ".join(labels),
    )

    progress = not training_args.disable_tqdm
    model, tokenizer = build_model_and_tokenizer(model_args, labels, data.train_sentences)
    if model.uses_bilm and model.config.freeze_bilm:
        # A frozen character encoder gives every word a fixed vector: compute each once.
        words = {w for sentence in data.train_sentences + (data.eval_sentences or []) for w in sentence}
        build_token_cache(model.elmo, sorted(words), progress=progress)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    logger.info("model: %s parameters, %s trained", f"{model.num_parameters():,}", f"{trainable:,}")

    def encode(sentences: list[list[str]], tags: list[list[str]]):
        dataset = Dataset.from_dict({"tokens": sentences, "tags": tags})
        label2id, max_words = model.config.label2id, data_args.max_words
        return tagging_data.encode_dataset(dataset, tokenizer, label2id, model.needs_vocab_ids, max_words)

    train_data = encode(data.train_sentences, data.train_tags)
    eval_data = encode(data.eval_sentences, data.eval_tags) if data.eval_sentences is not None else None
    # The tokenizer's special ids in the config: the Trainer would align them itself, with a warning on every run.
    for name in ("bos_token_id", "eos_token_id", "pad_token_id"):
        if getattr(tokenizer, name) is not None:
            setattr(model.config, name, getattr(tokenizer, name))
    if eval_data is None:
        training_args.eval_strategy = IntervalStrategy.NO
    compute_metrics = None if eval_data is None else tagger_trainer.make_compute_metrics(model.config.id2label, scheme)
    trainer = tagger_trainer.tagger_trainer_class()(
        model=model,
        args=training_args,
        train_dataset=train_data,
        eval_dataset=eval_data,
        data_collator=DataCollatorForTokenClassification(tokenizer),
        processing_class=tokenizer,
        compute_metrics=compute_metrics,
        preprocess_logits_for_metrics=tagger_trainer.make_preprocess_logits(model),
        callbacks=list(callbacks or []),
        time_budget=getattr(training_args, "time_budget", 0.0),
    )
    resume = _resume_checkpoint(training_args)
    result = trainer.train(resume_from_checkpoint=resume)
    train_seconds = trainer.clock.seconds
    words_seen = int(trainer.state.num_input_tokens_seen) - trainer.budget.words_at_start
    metrics: dict[str, Any] = dict(result.metrics)
    metrics.update(
        train_seconds=round(train_seconds, 2),
        train_words_seen=words_seen,
        train_words_per_second=round(words_seen / max(train_seconds, 1e-9), 1),
        train_steps=trainer.state.global_step,
        train_stopped_on_time_budget=trainer.budget.stopped_on_budget,
        tag_scheme=scheme,
    )
    if trainer.budget.stopped_on_budget:
        logger.info("training stopped on --time_budget %s s after %d steps", training_args.time_budget,
                    trainer.state.global_step)  # fmt: skip
    if eval_data is not None:
        eval_metrics, eval_seconds = tagger_trainer.final_evaluation(trainer)
        eval_words = sum(map(len, data.eval_sentences))
        metrics.update(eval_metrics)
        metrics.update(eval_seconds=round(eval_seconds, 2), eval_words_per_second=round(eval_words / eval_seconds, 1))
    scores = [
        ("f1", "Entity F1 (seqeval)", "eval_f1"),
        ("precision", "Entity precision (seqeval)", "eval_precision"),
        ("recall", "Entity recall (seqeval)", "eval_recall"),
    ]
    measured = [(kind, name, 100 * metrics[key]) for kind, name, key in scores if key in metrics]
    eval_source = data_args.dataset_name or data_args.eval_file
    hub_dataset = hub_model_id(data_args.dataset_name) if data_args.dataset_name else None

    def write_card() -> None:  # after the model is saved: the card reads its config's architectures
        write_scalar_mix_plot(trainer.model, training_args.output_dir)  # before the card, which shows it
        write_model_card(
            training_args.output_dir,
            trainer.model.config,
            how_made=_how_made(model_args, data_args, training_args, metrics),
            eval_results=metric_results("token-classification", "Sequence tagging", [eval_source], measured)
            if eval_source and measured
            else None,
            datasets=[hub_dataset] if hub_dataset else None,
            base_model=None if model_args.no_elmo else hub_model_id(model_args.bilm),
        )

    trainer.write_card = write_card
    trainer.save_metrics("all", metrics)
    trainer.save_state()  # trainer_state.json: the log history, every evaluation included
    with remote_code(trainer.model, tokenizer) if model_args.remote_code else contextlib.nullcontext():
        if model_args.remote_code and trainer.is_world_process_zero():
            # The code files, auto_map and the token-classification pipeline (custom_pipelines) first.
            save_with_remote_code(trainer.model, tokenizer, training_args.output_dir)
        if training_args.push_to_hub:
            trainer.push_to_hub(commit_message="End of training")  # saves the model, writes the card, uploads
        else:
            trainer.save_model(training_args.output_dir)  # the model, its config (labels) and the tokenizer
            trainer.create_model_card()
    if trainer.is_world_process_zero():
        print(json.dumps({k: v for k, v in metrics.items() if not isinstance(v, (list, dict))}, indent=1), flush=True)
    finish_distributed(trainer)  # as train_lm: a barrier, the DDP wrapper let go, the process group destroyed
    return metrics


def write_scalar_mix_plot(model, output_dir: str | os.PathLike) -> Path | None:
    """Plot the tagger's learned scalar-mix weights into ``output_dir`` (none without ELMo mixes or matplotlib)."""
    from ..plots import save_scalar_mix_plot, scalar_mix_weights

    mixes = scalar_mix_weights(model)
    if not mixes:
        return None
    config = model.config
    names = ["input mix"] * bool(config.tagger_elmo_input) + ["output mix"] * bool(config.tagger_elmo_output)
    try:
        return save_scalar_mix_plot(Path(output_dir) / SCALAR_MIX_PLOT, mixes, names)
    except ImportError as err:  # matplotlib comes with the [train] extra; training itself does not need it
        logger.warning("no plot of the scalar-mix weights: %s", err)
        return None


def _how_made(
    model_args: ModelArguments, data_args: DataArguments, training_args: TrainingArguments, metrics: dict[str, Any]
) -> str:
    """The model card's provenance paragraph: the biLM, the data, the recipe and the dev F1."""
    if model_args.no_elmo:
        source = "without ELMo (word embeddings only, the baseline)"
    else:
        bilm = source_name(model_args.bilm_name or model_args.bilm)  # never a local absolute path
        source = f"on the {'fine-tuned' if model_args.fine_tune_bilm else 'frozen'} biLM of `{bilm}`"
    if data_args.dataset_name:
        train_data = f"the dataset `{data_args.dataset_name}`"
        eval_data = "its validation split"
    else:
        train_data = f"`{os.path.basename(data_args.train_file)}`"
        eval_data = f"`{os.path.basename(data_args.eval_file or '')}`"
    text = (
        f"A tagger trained {source} with `python -m modeling_elmo.training.train_tagger` (the `modeling_elmo` package) "
        f"on {train_data} ({metrics['tag_scheme']} tags, predicted as BIO): "
        f"{metrics['train_steps']} steps of {training_args.per_device_train_batch_size} sentences, word input "
        f"`{model_args.word_input}`, {'a CRF' if not model_args.no_crf else 'a per-word softmax'}."
    )
    if "eval_f1" in metrics:
        text += (
            f" Entity-level F1 on {eval_data} (seqeval): {100 * metrics['eval_f1']:.2f} "
            f"(precision {100 * metrics['eval_precision']:.2f}, recall {100 * metrics['eval_recall']:.2f})."
        )
    return text


def load_tagger(model_dir: str | os.PathLike):
    """``(model, tokenizer)`` of a saved tagger folder, the model in eval mode. ``ValueError`` for a folder whose
    tagging head was never trained (a biLM folder, say: loading it would give a random head)."""
    from transformers import AutoConfig, AutoModelForTokenClassification, AutoTokenizer

    from .. import ElmoTokenizer  # noqa: F401  (importing the package registers the ELMo Auto classes)

    untrained = (
        f"{model_dir} holds no trained tagger: {{}}; tagging with it would give a random head's tags. Train one "
        f"first: train-tagger --bilm {model_dir} --train_file ... --output_dir TAGGER, then --predict TAGGER"
    )
    architectures = AutoConfig.from_pretrained(model_dir).architectures or []
    if not any(name.endswith("ForTokenClassification") for name in architectures):
        named = ", ".join(architectures) or "none"
        raise ValueError(untrained.format(f"its config's architectures are {named}, no ...ForTokenClassification"))
    model, info = AutoModelForTokenClassification.from_pretrained(model_dir, output_loading_info=True)
    if info["missing_keys"]:
        raise ValueError(untrained.format(f"its weights lack {', '.join(sorted(info['missing_keys'])[:4])}"))
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    return model.eval(), tokenizer


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
    if not Path(args.predict).is_dir() and hub_model_id(args.predict) is None:
        raise FileNotFoundError(f"--predict {args.predict}: no such folder (a tagger folder saved by training)")
    model, tokenizer = load_tagger(args.predict)
    sentences = list(args.sentences)
    if args.input_file:
        with open(args.input_file, encoding="utf-8") as f:
            sentences += [line.strip() for line in f if line.strip()]
    if not sentences:
        sentences = [line.strip() for line in sys.stdin if line.strip()]
    if not sentences:
        raise ValueError("no sentences to tag (give them as arguments, with --input_file, or on stdin)")
    for tagged in predict_sentences(model, tokenizer, sentences, args.per_device_eval_batch_size):
        for word, tag in tagged:
            print(f"{word}\t{tag}")
        print()
    return 0


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    """Command-line entry point; returns the exit status.

    Usage errors (an unknown option, a value of the wrong type) exit with 2 and one line; refusals (a value out of
    range, a combination that means nothing, a re-run over checkpoints, bad files or models) return 1 with one
    ``error:`` line, no traceback and no usage block.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    prog = prog or PROG
    try:
        if _is_predict(argv):
            args = build_predict_parser(prog).parse_args(
                _rename_deprecated(argv, {"--eval_batch_size": "--per_device_eval_batch_size"}, prog)
            )
            check_numbers(_Refusal, args, {"per_device_eval_batch_size": (1, None, "")})
            return predict(args)
        model_args, data_args, training_args = parse_args(argv, prog)
        setup_logging(training_args)
        if training_args.num_threads:
            torch.set_num_threads(training_args.num_threads)
        train(model_args, data_args, training_args)
    except (ValueError, OSError) as error:  # bad values, files or models: one line, no traceback
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


# Moved in 0.2 (name -> its module now): still importable from here for one release, with a warning.
MOVED_NAMES = {
    **{name: tagging_data.__name__ for name in tagging_data.__all__ if name != "unify_scheme"},  # unify_scheme: new
    **dict.fromkeys(
        ("TimeBudget", "TrainingClock", "make_compute_metrics", "make_preprocess_logits"), tagger_trainer.__name__
    ),
}


def __getattr__(name: str) -> Any:
    if name in MOVED_NAMES:
        warnings.warn(
            f"`modeling_elmo.training.train_tagger.{name}` moved to `{MOVED_NAMES[name]}`: import `{name}` from "
            "there (the old path goes in the next release)",
            FutureWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(MOVED_NAMES[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if __name__ == "__main__":
    sys.exit(main())
