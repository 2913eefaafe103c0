"""Pretrain an ELMo biLM on your text, or fine-tune a converted/trained one on domain text.

    elmo train-lm --train_file corpus.txt --eval_file heldout.txt --preset small --output_dir elmo-mine
    elmo train-lm --train_file domain.txt --eval_file domain-dev.txt \\
        --model_name_or_path elmo-original --output_dir elmo-domain --learning_rate 0.05
    elmo train-lm --dataset_name wikitext --dataset_config_name wikitext-2-raw-v1 --output_dir elmo-wiki
    elmo train-lm run.json                                    # every option from a JSON (or YAML) file
    torchrun --nproc_per_node 2 -m modeling_elmo.training.train_lm ...        # data-parallel, same flags

Built as transformers' ``examples/pytorch/language-modeling/run_mlm.py``: the options are three dataclasses
(``ModelArguments``, ``DataArguments`` and ``ElmoLMTrainingArguments``, a ``TrainingArguments`` with the
original's recipe as defaults) parsed by ``HfArgumentParser`` (through [`ElmoArgumentParser`]), so every
``TrainingArguments`` flag works under its own name; ``transformers.Trainer`` trains (progress bar, logging,
checkpoints, resuming, ``--push_to_hub``; accelerate underneath), ``datasets`` reads and windows the text (files,
or a Hub dataset with ``--dataset_name``) and [`ElmoForPreTraining`] is the model. Only the JSON result goes to
stdout; logs, progress bars and notes go to stderr. The output folder loads with ``ElmoModel.from_pretrained`` /
``ElmoTokenizer.from_pretrained`` (embeddings at once) and with ``AutoModelForPreTraining`` (to go on training);
it also holds ``eval_results.json`` with the perplexities.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import torch
from transformers import Trainer, TrainingArguments, set_seed
from transformers.trainer_utils import EvalLoopOutput, SchedulerType, get_last_checkpoint
from transformers.training_args import OptimizerNames
from transformers.utils import logging as hf_logging

from ..configuration_elmo import ElmoConfig
from ..hub.download import resolve_pretrained
from ..hub.model_card import hub_model_id, metric_results, write_model_card
from ..hub.remote_code import remote_code, save_with_remote_code
from ..modeling_elmo_pretraining import ElmoForPreTraining
from ..tokenization_elmo import BILM_SPECIAL_WORDS, BOS_TOKEN, EOS_TOKEN, ElmoTokenizer
from .arguments import COMMON_TRAINING_ARGUMENTS, ElmoArgumentParser
from .checkpoints import checkpoint_problem, newest_complete_checkpoint
from .checks import MAX_SEED, POSITIVE, check_fraction, check_numbers
from .distributed import finish_distributed
from .lm_data import ElmoLMCollator, ElmoLMStreamCollator, load_lm_datasets, load_text_datasets
from .progress import use_one_bar

logger = logging.getLogger("modeling_elmo.training.train_lm")

PROG = "python -m modeling_elmo.training.train_lm"

# The released models' sizes (bilm-tf options files); "tiny" is this package's quick/demo size.
PRESETS: dict[str, dict] = {
    "tiny": {
        "lstm_dim": 256,
        "projection_dim": 64,
        "n_highway": 1,
        "char_cnn_filters": [[1, 32], [2, 32], [3, 64], [4, 128], [5, 128]],
    },
    "small": {"lstm_dim": 1024, "projection_dim": 128, "n_highway": 1},
    "medium": {"lstm_dim": 2048, "projection_dim": 256, "n_highway": 1},
    "original": {"lstm_dim": 4096, "projection_dim": 512, "n_highway": 2},
}
SIZE_ARGUMENTS = (
    "lstm_dim",
    "projection_dim",
    "n_layers",
    "n_highway",
    "char_embedding_dim",
    "char_cnn_filters",
    "cell_clip",
    "proj_clip",
    "use_skip_connections",
)

# The sampled softmax against the full one, one training batch (2 x 64 windows x 20 words, forward + backward of the
# loss) on this project's 2-core AMD EPYC, 1 thread, P = 64, V = 1,000 / 5,000 / 10,000: sampled/full time 0.11-0.25x
# at S = V/10, 0.23-0.35x at V/5, 0.35-0.58x at 0.3 V, 0.73-0.98x at V/2, 0.85-1.45x at 0.6 V, 1.4-1.8x at 0.8 V.
# Drawing S distinct log-uniform ids costs more and more draws as S nears V, so from S = V/2 the full softmax (exact,
# too) is the faster choice. End to end (preset tiny, batch 64, WikiText-2 valid.txt, 10,000 words, 12 steps, two
# runs each): --num_samples 8192 sampled 243-283 training words/s, the same flag now (full softmax) 359-404, the new
# default (1,000 samples) 747-816.
FULL_SOFTMAX_FRACTION = 0.5
# --num_samples auto: the original's 8192, at most a tenth of the vocabulary (about 0.1x the full softmax's cost);
# below this many samples (vocabularies under 1,000 words) the full softmax, cheap there, is used instead.
ORIGINAL_NUM_SAMPLES = 8192
AUTO_SAMPLES_FRACTION = 0.1
MIN_AUTO_SAMPLES = 100

# Old flag names (the argparse version of this command) -> the new ones; they work for one release, with a note.
DEPRECATED_FLAGS = {
    "--optimizer adamw": "--optim adamw_torch",
    "--optimizer": "--optim",
    "--no-split_punctuation": "--no_split_punctuation",
    "--no-use_skip_connections": "--use_skip_connections false",
    "--shuffle": "--train_sampling_strategy random",
    "--no-shuffle": "--train_sampling_strategy sequential",
    "--gradient_checkpointing": "--activation_checkpointing",
}


class _Refuse:
    """Stands in for a parser in ``checks``: a refused value is a ``ValueError`` (one ``error:`` line, exit 1)."""

    @staticmethod
    def error(message: str):
        raise ValueError(message)


def _check(arguments, rules: dict[str, tuple]) -> None:
    check_numbers(_Refuse, arguments, {name: rule for name, rule in rules.items() if hasattr(arguments, name)})


def _parse_filters(value: str | list | None) -> list[list[int]] | None:
    """``"1:32,2:32"`` (a flag) or ``[[1, 32], [2, 32]]`` (a config file) -> ``[[1, 32], [2, 32]]``."""
    if value is None or isinstance(value, list):
        pairs = value
    else:
        try:
            pairs = [[int(x) for x in item.split(":")] for item in str(value).split(",")]
        except ValueError:
            pairs = None
    if not pairs or any(not isinstance(p, (list, tuple)) or len(p) != 2 for p in pairs):
        if value is None:
            return None
        raise ValueError(f"--char_cnn_filters: expected width:count pairs like 1:32,2:32,3:64, got {value!r}")
    for width, count in pairs:
        if not isinstance(width, int) or not isinstance(count, int) or width < 1 or count < 1:
            raise ValueError(f"--char_cnn_filters: widths and counts must be >= 1, got {width}:{count}")
    return [list(p) for p in pairs]


# Numeric options: (lowest, highest, what the bounds mean); see checks.check_numbers. Each dataclass checks its own.
NUMBER_RULES: dict[str, tuple] = {
    "max_words": (1, None, ""),
    "min_count": (1, None, ""),
    "max_vocab": (len(BILM_SPECIAL_WORDS) + 1, None, "the special words and one word"),
    "max_train_samples": (1, None, ""),
    "max_eval_samples": (1, None, ""),
    "preprocessing_num_workers": (1, None, ""),
    "lstm_dim": (1, None, ""),
    "projection_dim": (1, None, ""),
    "n_layers": (1, None, ""),
    "n_highway": (0, None, ""),
    "char_embedding_dim": (1, None, ""),
    "cell_clip": (POSITIVE, None, ""),
    "proj_clip": (POSITIVE, None, ""),
    "num_samples": (0, None, "0: full softmax"),
    "learning_rate": (POSITIVE, None, ""),
    "adagrad_initial_accumulator": (0, None, ""),
    "weight_decay": (0, None, ""),
    "warmup_steps": (0, None, ""),
    "max_grad_norm": (0, None, "0: no clipping"),
    "num_train_epochs": (POSITIVE, None, ""),
    "max_steps": (-1, None, "-1: train for --num_train_epochs"),
    "per_device_train_batch_size": (1, None, ""),
    "per_device_eval_batch_size": (1, None, ""),
    "gradient_accumulation_steps": (1, None, ""),
    "seed": (0, MAX_SEED, ""),
    # Below 1: a fraction of the training steps, as in transformers.
    "logging_steps": (POSITIVE, None, ""),
    "save_steps": (POSITIVE, None, ""),
    "save_total_limit": (1, None, ""),
    "eval_steps": (POSITIVE, None, ""),
    "dataloader_num_workers": (0, None, ""),
}


@dataclass
class ModelArguments:
    """Which biLM: an existing one to fine-tune, or the sizes of a new one; and its LM head."""

    model_name_or_path: str | None = field(
        default=None, metadata={"help": "An ElmoModel/ElmoForPreTraining folder or Hub id to fine-tune."}
    )
    preset: Literal["tiny", "small", "medium", "original"] = field(
        default="tiny", metadata={"help": "Sizes of a new biLM (small/medium/original: the released ones)."}
    )
    lstm_dim: int | None = field(default=None, metadata={"help": "LSTM cell size (overrides the preset)."})
    projection_dim: int | None = field(default=None, metadata={"help": "Token vector and LSTM projection size."})
    n_layers: int | None = field(default=None, metadata={"help": "LSTM layers per direction."})
    n_highway: int | None = field(default=None, metadata={"help": "Highway layers."})
    char_embedding_dim: int | None = field(default=None, metadata={"help": "Character embedding size."})
    char_cnn_filters: str | None = field(
        default=None, metadata={"help": "Character CNN filters as width:count,... e.g. 1:32,2:32,3:64."}
    )
    cell_clip: float | None = field(default=None, metadata={"help": "LSTM cell clip."})
    proj_clip: float | None = field(default=None, metadata={"help": "LSTM projection clip."})
    use_skip_connections: bool | None = field(default=None, metadata={"help": "Residual LSTM layers (true/false)."})
    num_samples: int | None = field(
        default=None,
        metadata={
            "help": "Sampled-softmax negatives in training (0: the full softmax). Default: 8192 (the original's) or "
            "a tenth of the vocabulary, whichever is smaller; the full softmax under 1,000 words. A value of at "
            "least half the vocabulary trains with the full softmax, which is faster there."
        },
    )
    dropout: float = field(default=0.1, metadata={"help": "Dropout before the softmax."})
    remote_code: bool = field(
        default=False,
        metadata={
            "help": "Save (and push) the model with its code files and auto_map, so that it loads without this "
            "package (trust_remote_code=True); default: a plain folder."
        },
    )

    def __post_init__(self):
        self.char_cnn_filters = _parse_filters(self.char_cnn_filters)
        _check(self, NUMBER_RULES)
        check_fraction(_Refuse, self, "dropout")


@dataclass
class DataArguments:
    """What to train and evaluate on, and how the text becomes windows and a vocabulary."""

    train_file: list[str] | None = field(default=None, metadata={"help": "Plain-text training file(s), UTF-8."})
    eval_file: list[str] | None = field(default=None, metadata={"help": "Held-out text file(s) for perplexity."})
    dataset_name: str | None = field(
        default=None,
        metadata={
            "help": "A dataset to train on instead of files: a Hub id (through datasets.load_dataset), a local "
            "dataset folder, or a folder written by DatasetDict.save_to_disk."
        },
    )
    dataset_config_name: str | None = field(default=None, metadata={"help": "The dataset's configuration name."})
    text_column_name: str | None = field(
        default=None, metadata={"help": "The dataset's text column (default: 'text', or its only text column)."}
    )
    train_split_name: str = field(
        default="train", metadata={"help": "The dataset's split to train on ('': none, evaluate only)."}
    )
    eval_split_name: str = field(
        default="validation", metadata={"help": "The dataset's split for perplexity ('': none; skipped if absent)."}
    )
    text_format: Literal["sentences", "raw"] = field(
        default="sentences",
        metadata={
            "help": "'sentences': one sentence per line; 'raw': running text, consecutive lines cut into windows."
        },
    )
    split_punctuation: bool = field(
        default=True,
        metadata={
            "help": "Split punctuation off words (raw text); --no_split_punctuation: split on whitespace only "
            "(already tokenized text)."
        },
    )
    max_words: int = field(default=20, metadata={"help": "Words per window; longer sentences are cut."})
    training_mode: Literal["sentences", "stream"] = field(
        default="sentences",
        metadata={
            "help": "'sentences': every window starts from zero state; 'stream': the original's training, the text "
            "as one token stream per batch row cut into --max_words windows, LSTM states carried from batch to batch "
            "(backpropagation cut at window edges)."
        },
    )
    vocab_file: str | None = field(
        default=None,
        metadata={
            "help": "A bilm-tf vocabulary file (one word per line, <S>, </S>, <UNK> anywhere) instead of building one."
        },
    )
    min_count: int = field(default=1, metadata={"help": "Building the vocabulary: minimum word count."})
    max_vocab: int | None = field(default=None, metadata={"help": "Building the vocabulary: at most this many words."})
    max_train_samples: int | None = field(default=None, metadata={"help": "Use only the first N training windows."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Use only the first N evaluation windows."})
    preprocessing_num_workers: int | None = field(default=None, metadata={"help": "Processes for datasets.map."})
    cache_dir: str | None = field(default=None, metadata={"help": "The datasets cache folder."})

    def __post_init__(self):
        _check(self, NUMBER_RULES)


@dataclass
class ElmoLMTrainingArguments(TrainingArguments):
    """``TrainingArguments`` with the original biLM recipe as defaults (every other field is transformers' own).

    Adagrad (``--optim adagrad``) with accumulators starting at ``adagrad_initial_accumulator`` (1.0, as the original;
    transformers' own Adagrad starts them at 0, which makes the first steps huge), learning rate 0.2, a constant
    schedule and gradient clipping at norm 10. ``--optim adamw_torch`` (or any other ``optim``) uses the Trainer's
    optimizer, with learning rate 1e-3 and a linear schedule unless given. ``dataloader_pin_memory`` defaults to
    whether an accelerator is there (pinning without one only warns).
    """

    output_dir: str | None = field(
        default=None, metadata={"help": "Checkpoints, the final model + tokenizer, and the results (required)."}
    )
    overwrite_output_dir: bool = field(
        default=False, metadata={"help": "Start afresh even if --output_dir has checkpoints."}
    )
    optim: OptimizerNames | str = field(
        default="adagrad",
        metadata={"help": "The optimizer: adagrad (the original's, default) or any transformers optimizer."},
    )
    adagrad_initial_accumulator: float = field(
        default=1.0, metadata={"help": "Adagrad's initial accumulator value (the original's: 1)."}
    )
    learning_rate: float | None = field(
        default=None, metadata={"help": "Default: 0.2 with adagrad (the original), 1e-3 with another optimizer."}
    )
    lr_scheduler_type: str | None = field(
        default=None,
        metadata={
            "help": "Default: constant with adagrad (the original), linear with another optimizer.",
            "choices": [s.value for s in SchedulerType],
        },
    )
    max_grad_norm: float = field(default=10.0, metadata={"help": "Gradient clipping (the original's: 10)."})
    num_train_epochs: float = field(default=1.0, metadata={"help": "Passes over the training windows."})
    per_device_train_batch_size: int = field(default=64, metadata={"help": "Windows per step and process."})
    per_device_eval_batch_size: int = field(default=64, metadata={"help": "Windows per evaluation batch."})
    logging_steps: float = field(default=50, metadata={"help": "Log every N steps."})
    save_steps: float = field(default=500, metadata={"help": "Checkpoint every N steps."})
    save_total_limit: int | None = field(default=2, metadata={"help": "Keep at most N checkpoints."})
    report_to: None | str | list[str] = field(
        default="none", metadata={"help": "e.g. tensorboard, wandb; 'none' (default) or 'all'."}
    )
    # The collator needs the "words" column, which is not a forward argument.
    remove_unused_columns: bool = field(default=False, metadata={"help": "Keep it false: the collator needs 'words'."})
    # The LM head has no scalar mixes: every parameter gets a gradient, also in a fine-tuned saved folder.
    ddp_find_unused_parameters: bool | None = field(default=False, metadata={"help": "See TrainingArguments."})
    # Count words (attention_mask), not the 50 character ids of each: train_words_per_second.
    include_num_input_tokens_seen: str = field(
        default="non_padding",
        metadata={
            "help": "Count the input words seen: non_padding (default), all or no.",
            "choices": ["no", "all", "non_padding"],
        },
    )
    dataloader_pin_memory: bool | None = field(
        default=None, metadata={"help": "Pin batches in memory (default: when an accelerator is there)."}
    )

    def __post_init__(self):
        if not self.output_dir:  # transformers would write to ./trainer_output
            raise ValueError("--output_dir is required (checkpoints, the model and the results go there)")
        _check(self, NUMBER_RULES)
        if self.max_steps == 0:
            raise ValueError("--max_steps must be -1 (train for --num_train_epochs) or >= 1, got 0")
        adagrad = self.optim in (OptimizerNames.ADAGRAD, OptimizerNames.ADAGRAD.value)
        if self.learning_rate is None:
            self.learning_rate = 0.2 if adagrad else 1e-3
        if self.lr_scheduler_type is None:
            self.lr_scheduler_type = "constant" if adagrad else "linear"
        if self.eval_steps and self.eval_strategy in ("no", None):
            self.eval_strategy = "steps"  # --eval_steps N alone: evaluate every N steps
        if self.dataloader_pin_memory is None:
            self.dataloader_pin_memory = _has_accelerator() and not self.use_cpu
        # Several processes without a GPU (torchrun/accelerate launch on CPUs): accelerate runs data-parallel on the
        # CPU only when told so; without it every process would train on its own.
        if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not torch.cuda.is_available():
            self.use_cpu = True
        super().__post_init__()

    def optimizer_cls_and_kwargs(self) -> tuple[type[torch.optim.Optimizer], dict] | None:
        """For ``Trainer(optimizer_cls_and_kwargs=...)``: the original's Adagrad, or ``None`` (the Trainer's own)."""
        if self.optim not in (OptimizerNames.ADAGRAD, OptimizerNames.ADAGRAD.value):
            return None
        # Trainer's Adagrad (lr, and lr_decay/eps/weight_decay from --optim_args), plus the initial accumulator.
        optimizer_cls, kwargs = Trainer.get_optimizer_cls_and_kwargs(self)
        return optimizer_cls, {**kwargs, "initial_accumulator_value": self.adagrad_initial_accumulator}


def _has_accelerator() -> bool:
    accelerator = getattr(torch, "accelerator", None)  # torch >= 2.6
    if accelerator is not None:
        return accelerator.is_available()
    return torch.cuda.is_available()


def build_parser(prog: str = PROG) -> ElmoArgumentParser:
    """The command's parser: ``(ModelArguments, DataArguments, ElmoLMTrainingArguments)`` plus the old flag names."""
    return ElmoArgumentParser(
        (ModelArguments, DataArguments, ElmoLMTrainingArguments),
        prog=prog,
        description="Pretrain an ELMo biLM on plain text, or fine-tune an existing one on domain text, with the "
        "original objective (forward and backward LM, one softmax); reports forward, backward and mean perplexity. "
        "Every transformers TrainingArguments option works under its own name; a single JSON or YAML file may hold "
        "all options (elmo train-lm run.json).",
        deprecated=DEPRECATED_FLAGS,
        short_help=COMMON_TRAINING_ARGUMENTS,
    )


class ElmoPreTrainingTrainer(Trainer):
    """A ``Trainer`` whose ``evaluate`` reports the biLM's perplexities, exactly (weighted by words).

    ``trainer.evaluate()`` returns ``eval_loss`` (mean of the directions), ``eval_forward_loss``,
    ``eval_backward_loss``, ``eval_forward_perplexity``, ``eval_backward_perplexity`` and
    ``eval_perplexity`` (``exp`` of the mean loss), computed with the full softmax over every word of the
    evaluation set (per-sentence sums gathered across processes), whatever the training softmax.
    Needs an [`ElmoForPreTraining`] and batches with ``labels`` (e.g. from [`ElmoLMCollator`]).
    The original's Adagrad: ``optimizer_cls_and_kwargs=ElmoLMTrainingArguments.optimizer_cls_and_kwargs()``.
    """

    def create_model_card(self, *args, **kwargs) -> None:
        # The model's save_pretrained writes the card, and the command rewrites it with the measured perplexities in
        # its model-index; transformers' generic card (push_to_hub calls this) would replace it.
        return None

    def evaluation_loop(
        self,
        dataloader,
        description: str,
        prediction_loss_only: bool | None = None,
        ignore_keys: list[str] | None = None,
        metric_key_prefix: str = "eval",
    ) -> EvalLoopOutput:
        model = self.accelerator.unwrap_model(self.model)
        if not hasattr(model, "sentence_losses"):
            raise TypeError(f"ElmoPreTrainingTrainer evaluates an ElmoForPreTraining, got {type(model).__name__}")
        sums = torch.zeros(2, dtype=torch.float64)
        counts = torch.zeros(2, dtype=torch.float64)
        num_samples = 0
        for inputs in dataloader:
            inputs = self._prepare_inputs(inputs)
            if "labels" not in inputs:
                raise ValueError("evaluation batches need labels (the word ids of the input words)")
            sentence_sums, sentence_counts = model.sentence_losses(
                inputs["input_ids"],
                inputs.get("attention_mask"),
                inputs["labels"],
                inputs.get("boundary_labels"),
            )
            # gather_for_metrics drops the samples that the last batch of a sharded set repeats.
            stats = torch.cat([sentence_sums.double(), sentence_counts.double()], dim=1)  # (B, 4)
            stats = self.accelerator.gather_for_metrics(stats).cpu()
            sums += stats[:, :2].sum(dim=0)
            counts += stats[:, 2:].sum(dim=0)
            num_samples += stats.shape[0]
        losses = (sums / counts.clamp(min=1)).tolist()
        mean = sum(losses) / 2
        metrics = {
            f"{metric_key_prefix}_loss": mean,
            f"{metric_key_prefix}_forward_loss": losses[0],
            f"{metric_key_prefix}_backward_loss": losses[1],
            f"{metric_key_prefix}_forward_perplexity": math.exp(losses[0]),
            f"{metric_key_prefix}_backward_perplexity": math.exp(losses[1]),
            f"{metric_key_prefix}_perplexity": math.exp(mean),
            f"{metric_key_prefix}_words": int(counts[0]),
        }
        return EvalLoopOutput(predictions=None, label_ids=None, metrics=metrics, num_samples=num_samples)


class _StreamOrSentences:
    """Collates stream windows (training) and sentence windows (evaluation), whichever it is given."""

    def __init__(self, tokenizer: ElmoTokenizer):
        self.sentences = ElmoLMCollator(tokenizer)
        self.stream = ElmoLMStreamCollator(tokenizer.max_characters_per_token)

    def __call__(self, features):
        return (self.stream if features and "backward_words" in features[0] else self.sentences)(features)


def _word_vocab(tokenizer: ElmoTokenizer) -> dict[str, int]:
    """The tokenizer's word vocabulary (without ``<pad>``, which follows it)."""
    return tokenizer.backend_tokenizer.get_vocab(with_added_tokens=False)


def _check_args(model_args: ModelArguments, data_args: DataArguments, training_args: ElmoLMTrainingArguments) -> None:
    """Checks across the dataclasses (each checks its own values); a refusal is a ``ValueError`` naming the flags."""
    files = bool(data_args.train_file or data_args.eval_file)
    if data_args.dataset_name and files:
        raise ValueError("give either --dataset_name or --train_file/--eval_file, not both")
    if not data_args.dataset_name and not files:
        raise ValueError("give --train_file (to train) and/or --eval_file (to evaluate), or --dataset_name")
    if not _trains(data_args) and not model_args.model_name_or_path:
        raise ValueError("evaluating only (no training text) needs --model_name_or_path")
    if model_args.model_name_or_path:
        _check_model_path(model_args.model_name_or_path)
        given = [f"--{name}" for name in SIZE_ARGUMENTS if getattr(model_args, name) is not None]
        if given:
            raise ValueError(
                f"{', '.join(given)} set the sizes of a new biLM; they cannot change --model_name_or_path's"
            )


def _check_model_path(name: str) -> None:
    """Refuse a ``--model_name_or_path`` that is neither a model folder nor a possible Hub id, by name: a missing
    folder would otherwise reach the Hub client, whose error speaks of repo ids."""
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    where = f"--model_name_or_path {name}"
    if os.path.isdir(name):
        if not os.path.isfile(os.path.join(name, "config.json")):
            raise ValueError(f"{where}: the folder has no config.json (a model folder from `elmo convert` or train-lm)")
        return
    if os.path.exists(name):
        raise ValueError(f"{where}: not a folder (give a model folder, a Hub id or a released model's name)")
    try:
        validate_repo_id(name)
    except HFValidationError:
        raise ValueError(
            f"{where}: no such folder (and not a Hub id owner/name or a released model's name, `elmo download --list`)"
        ) from None


def _stream_order(data_args: DataArguments, training_args: ElmoLMTrainingArguments) -> int | None:
    """Stream mode: the Trainer must feed the windows in order (batch j holds window j of every row), so the
    sampling becomes sequential; the sentences are shuffled once instead, with the returned seed (``None``: corpus
    order, with ``--train_sampling_strategy sequential``). Sentence mode: nothing changes, ``None``."""
    if data_args.training_mode != "stream":
        return None
    shuffle = training_args.train_sampling_strategy != "sequential"
    training_args.train_sampling_strategy = "sequential"
    return training_args.seed if shuffle else None


def _trains(data_args: DataArguments) -> bool:
    return bool(data_args.train_file) or bool(data_args.dataset_name and data_args.train_split_name)


def _resume_checkpoint(data_args: DataArguments, training_args: ElmoLMTrainingArguments) -> str | None:
    """The checkpoint to resume from, or ``None``; refuses (``ValueError``) what cannot go on."""
    output_dir, resume = training_args.output_dir, training_args.resume_from_checkpoint
    last = get_last_checkpoint(output_dir) if os.path.isdir(output_dir) else None
    if resume == "last":
        if last is None:
            raise ValueError(f"--resume_from_checkpoint last: no checkpoint-* folder in {output_dir}")
        # The newest folder may be half-written (a run killed while saving): take the newest complete one.
        complete = newest_complete_checkpoint(output_dir, logger)
        if complete is None:
            raise ValueError(f"--resume_from_checkpoint last: no complete checkpoint in {output_dir}")
        return complete
    if resume:
        if not os.path.isdir(resume):
            raise ValueError(f"--resume_from_checkpoint: {resume} is not a folder")
        problem = checkpoint_problem(resume)
        if problem:
            raise ValueError(f"--resume_from_checkpoint: {resume} is incomplete: {problem}")
        return resume
    if last is not None and not training_args.overwrite_output_dir and _trains(data_args):
        raise ValueError(
            f"{output_dir} already has checkpoints ({os.path.basename(last)}): pass "
            "--resume_from_checkpoint last to go on, or --overwrite_output_dir to start afresh"
        )
    return None


def _tokenizer_and_vocab(
    model_args: ModelArguments, data_args: DataArguments
) -> tuple[ElmoTokenizer, dict[str, int] | None]:
    """The tokenizer to split words with, and the vocabulary if it is fixed already (None: build it)."""
    if data_args.vocab_file:
        tokenizer = ElmoTokenizer.from_vocab_file(data_args.vocab_file, split_punctuation=data_args.split_punctuation)
        return tokenizer, _word_vocab(tokenizer)
    if model_args.model_name_or_path:
        config = ElmoConfig.from_pretrained(model_args.model_name_or_path)
        try:
            tokenizer = ElmoTokenizer.from_pretrained(model_args.model_name_or_path)
        except OSError:
            tokenizer = None
        # A trained LM's own vocabulary goes with its softmax: keep both.
        if tokenizer is not None and config.lm_vocab_size and len(_word_vocab(tokenizer)) == config.lm_vocab_size:
            return tokenizer, _word_vocab(tokenizer)
        if not _trains(data_args):
            raise ValueError(
                f"{model_args.model_name_or_path} has no LM vocabulary (lm_vocab_size={config.lm_vocab_size}): "
                "give --vocab_file or training text"
            )
    return ElmoTokenizer(split_punctuation=data_args.split_punctuation), None


def effective_num_samples(num_samples: int | None, vocab_size: int) -> int:
    """The sampled-softmax negatives to train with (0: the full softmax) for ``--num_samples`` and a vocabulary.

    ``None`` (the default): ``min(8192, V // 10)``, or the full softmax when that is under 100. A given value of at
    least half the vocabulary gives the full softmax too: measured on this package's CPU, a sampled softmax that
    draws that many distinct ids is as slow as the full one or slower (see ``FULL_SOFTMAX_FRACTION``).
    """
    if num_samples is None:
        auto = min(ORIGINAL_NUM_SAMPLES, int(vocab_size * AUTO_SAMPLES_FRACTION))
        return auto if auto >= MIN_AUTO_SAMPLES else 0
    if num_samples >= FULL_SOFTMAX_FRACTION * vocab_size:
        return 0
    return num_samples


def _build_model(model_args: ModelArguments, data_args: DataArguments, vocab: dict[str, int]) -> ElmoForPreTraining:
    num_samples = effective_num_samples(model_args.num_samples, len(vocab))
    if model_args.num_samples and not num_samples:
        logger.info(
            "--num_samples %d is at least half the vocabulary (%d words), where the sampled softmax is no faster "
            "than the full one: training with the full softmax",
            model_args.num_samples,
            len(vocab),
        )
    else:
        logger.info(
            "softmax: %s over %d words",
            f"{num_samples} sampled negatives" if num_samples else "full",
            len(vocab),
        )
    lm = dict(
        lm_vocab_size=len(vocab),
        lm_num_samples=num_samples,
        lm_dropout=model_args.dropout,
        lm_bos_vocab_id=vocab[BOS_TOKEN],
        lm_eos_vocab_id=vocab[EOS_TOKEN],
    )
    if model_args.model_name_or_path:
        old = ElmoConfig.from_pretrained(model_args.model_name_or_path)
        # A new vocabulary means a new softmax: the old one (if any) cannot load.
        new_softmax = old.lm_vocab_size not in (0, len(vocab))
        if new_softmax:
            logger.warning(
                "the vocabulary (%d words) differs from the checkpoint's softmax (%d): a new softmax is trained",
                len(vocab),
                old.lm_vocab_size,
            )
        model, info = ElmoForPreTraining.from_pretrained(
            model_args.model_name_or_path,
            stateful=False,
            ignore_mismatched_sizes=new_softmax,
            output_loading_info=True,
            **lm,
        )
        missing = [name for name in info["missing_keys"] if name.startswith("softmax.")]
        if missing and not _trains(data_args):
            # Evaluating a random softmax would report a meaningless perplexity that changes with --seed.
            raise ValueError(
                f"{model_args.model_name_or_path} has no trained softmax ({', '.join(sorted(missing))} missing from "
                "its weights, e.g. a model saved as ElmoModel): its perplexity cannot be evaluated; train the softmax "
                "first with training text"
            )
        return model
    sizes = dict(PRESETS[model_args.preset])
    sizes.update({name: getattr(model_args, name) for name in SIZE_ARGUMENTS if getattr(model_args, name) is not None})
    return ElmoForPreTraining(ElmoConfig(**sizes, **lm))


def _setup_logging(training_args: ElmoLMTrainingArguments) -> None:
    """As transformers' examples: the process's log level (main process: ``--log_level``, replicas:
    ``--log_level_replica``) for transformers, datasets and this command, on stderr; progress bars follow one switch.

    With the default ``--log_level passive`` the libraries keep their level (warnings) and this command's own
    messages are shown on the main process.
    """
    import datasets

    logging.basicConfig(
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%Y-%m-%d %H:%M:%S",
        handlers=[logging.StreamHandler(sys.stderr)],
    )
    log_level = training_args.get_process_log_level()
    if training_args.log_level == "passive" and training_args.should_log:
        logging.getLogger("modeling_elmo").setLevel(min(log_level, logging.INFO))
    else:
        logging.getLogger("modeling_elmo").setLevel(log_level)
    hf_logging.set_verbosity(log_level)
    datasets.utils.logging.set_verbosity(log_level)
    # One switch for every bar: --disable_tqdm, or transformers.utils.logging.disable_progress_bar() from Python.
    if not hf_logging.is_progress_bar_enabled():
        training_args.disable_tqdm = True
    if training_args.disable_tqdm:
        hf_logging.disable_progress_bar()
        datasets.disable_progress_bars()


@contextlib.contextmanager
def _global_state_restored():
    """Puts back what the run changes process-wide (log levels, progress bars) when it ends: ``main`` may be called
    from Python, again and again."""
    import datasets

    levels = {name: logging.getLogger(name).level for name in ("modeling_elmo",)}
    hf_level, datasets_level = hf_logging.get_verbosity(), datasets.utils.logging.get_verbosity()
    hf_bars, datasets_bars = hf_logging.is_progress_bar_enabled(), datasets.is_progress_bar_enabled()
    try:
        yield
    finally:
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)
        hf_logging.set_verbosity(hf_level)
        datasets.utils.logging.set_verbosity(datasets_level)
        (hf_logging.enable_progress_bar if hf_bars else hf_logging.disable_progress_bar)()
        (datasets.enable_progress_bars if datasets_bars else datasets.disable_progress_bars)()


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    """Run the command; returns the exit status.

    0 on success; 1 with one ``error:`` line on stderr for bad input (files, models, values); 2 with one usage line
    for flags that do not parse. ``prog`` names the command in messages (``elmo train-lm`` from the ``elmo`` command).
    """
    try:
        with _global_state_restored():
            return _main(argv, prog or PROG)
    except SystemExit as exit_:  # --help (0) and usage errors (2, one line from the parser)
        return exit_.code if isinstance(exit_.code, int) else 2
    except (ValueError, OSError) as error:  # bad files, models or values: one line, no traceback
        print(f"error: {' '.join(str(error).split())}", file=sys.stderr)
        return 1


def _main(argv: Sequence[str] | None, prog: str) -> int:
    parser = build_parser(prog)
    model_args, data_args, training_args = parser.parse(argv)
    if model_args.model_name_or_path:  # a released model's name (`elmo download --list`): its converted folder
        model_args.model_name_or_path = resolve_pretrained(model_args.model_name_or_path)
    _check_args(model_args, data_args, training_args)
    _setup_logging(training_args)
    resume = _resume_checkpoint(data_args, training_args)
    # Everything the libraries print (the Trainer's log dicts and metric tables) goes to stderr; stdout holds only
    # the JSON result.
    with contextlib.redirect_stdout(sys.stderr):
        result = _run(model_args, data_args, training_args, resume)
    if result is not None and training_args.process_index == 0:
        print(json.dumps(result))
    return 0


def _run(
    model_args: ModelArguments,
    data_args: DataArguments,
    training_args: ElmoLMTrainingArguments,
    resume: str | None,
) -> dict | None:
    """Data, model, training, evaluation, card and upload; returns the result to print."""
    tokenizer, vocab = _tokenizer_and_vocab(model_args, data_args)
    stream = data_args.training_mode == "stream"
    stream_seed = _stream_order(data_args, training_args)
    raw = None
    if data_args.dataset_name:
        raw = load_text_datasets(
            data_args.dataset_name,
            data_args.dataset_config_name,
            train_split=data_args.train_split_name or None,
            eval_split=data_args.eval_split_name or None,
            text_column=data_args.text_column_name,
            cache_dir=data_args.cache_dir,
        )
    windows, vocab_words = load_lm_datasets(
        tokenizer,
        data_args.train_file,
        data_args.eval_file,
        vocab=vocab,
        max_words=data_args.max_words,
        text_format=data_args.text_format,
        min_count=data_args.min_count,
        max_vocab=data_args.max_vocab,
        num_proc=data_args.preprocessing_num_workers,
        cache_dir=data_args.cache_dir,
        main_process_first=training_args.main_process_first,
        # One stream per row of the global batch. Data-parallel, process p gets global batches p, p + N, ... (the
        # dataloader shards whole batches), i.e. window j of rows p * B .. p * B + B - 1: its rows stay its own.
        stream_rows=training_args.per_device_train_batch_size * training_args.world_size if stream else None,
        stream_seed=stream_seed,
        raw_datasets=raw,
    )
    if vocab is None:
        vocab = {word: index for index, word in enumerate(vocab_words)}
        tokenizer = ElmoTokenizer(vocab=vocab, split_punctuation=data_args.split_punctuation)
    logger.info("vocabulary: %d words", len(vocab))
    train_set = windows.get("train")
    eval_set = windows.get("validation")
    if train_set is not None and data_args.max_train_samples:
        train_set = train_set.select(range(min(data_args.max_train_samples, len(train_set))))
    if eval_set is not None and data_args.max_eval_samples:
        eval_set = eval_set.select(range(min(data_args.max_eval_samples, len(eval_set))))
    if eval_set is None and training_args.eval_strategy != "no":
        raise ValueError(f"--eval_strategy {training_args.eval_strategy.value} needs evaluation text (--eval_file)")

    set_seed(training_args.seed)  # a new biLM starts from the same weights in every run (and every process)
    model = _build_model(model_args, data_args, vocab)
    # The config takes the tokenizer's special ids now, as Trainer would do with a notice on every run.
    for name in ("pad_token_id", "bos_token_id", "eos_token_id"):
        setattr(model.config, name, getattr(tokenizer, name))
    trainer = ElmoPreTrainingTrainer(
        model=model,
        args=training_args,
        train_dataset=train_set,
        eval_dataset=eval_set,
        data_collator=_StreamOrSentences(tokenizer) if stream else ElmoLMCollator(tokenizer),
        processing_class=tokenizer,
        optimizer_cls_and_kwargs=training_args.optimizer_cls_and_kwargs(),
    )
    use_one_bar(trainer)  # its bar drawn complete once, no checkpoint's bar inside it

    printed = None
    if train_set is not None:
        result = trainer.train(resume_from_checkpoint=resume)
        # Words of this run (all processes); a resumed run counts from where it resumed.
        words = trainer.state.num_input_tokens_seen - getattr(trainer, "_initial_num_input_tokens_seen", 0)
        result.metrics["train_words"] = int(words)
        result.metrics["train_words_per_second"] = round(words / max(result.metrics["train_runtime"], 1e-9), 1)
        with remote_code(trainer.model, tokenizer) if model_args.remote_code else contextlib.nullcontext():
            if model_args.remote_code and trainer.is_world_process_zero():
                # The code of every Auto class (auto_map_elmo.AUTO_MAP) first, as train-tagger does: the save below
                # keeps the auto_map entries whose code the folder holds (issue 49: before, only the LM's classes).
                save_with_remote_code(trainer.model, tokenizer, training_args.output_dir)
            trainer.save_model()  # model + tokenizer (with vocab.txt) in --output_dir, on the main process
        trainer.log_metrics("train", result.metrics)
        trainer.save_metrics("train", result.metrics)
        trainer.save_state()
        printed = {key: result.metrics[key] for key in ("train_loss", "train_words", "train_words_per_second")}
    metrics = None
    if eval_set is not None:
        metrics = trainer.evaluate()
        trainer.log_metrics("eval", metrics)
        trainer.save_metrics("eval", metrics)
        printed = {
            "forward_perplexity": metrics["eval_forward_perplexity"],
            "backward_perplexity": metrics["eval_backward_perplexity"],
            "perplexity": metrics["eval_perplexity"],
        }
    if train_set is not None and trainer.is_world_process_zero():
        scores = [
            ("perplexity", "Perplexity (mean of both directions)", "eval_perplexity"),
            ("perplexity", "Perplexity (forward LM)", "eval_forward_perplexity"),
            ("perplexity", "Perplexity (backward LM)", "eval_backward_perplexity"),
        ]
        measured = [(kind, name, metrics[key]) for kind, name, key in scores if metrics and key in metrics]
        eval_source = data_args.eval_file or ([data_args.dataset_name] if data_args.dataset_name else None)
        write_model_card(
            training_args.output_dir,
            trainer.model.config,
            how_made=_how_made(model_args, data_args, trainer, len(vocab), metrics),
            repo_id=training_args.hub_model_id if training_args.push_to_hub else None,
            eval_results=metric_results(
                "text-generation", "Language modeling (forward and backward)", eval_source, measured
            )
            if eval_source and measured
            else None,
            base_model=hub_model_id(model_args.model_name_or_path),
        )
    if train_set is not None and training_args.push_to_hub:
        with remote_code(trainer.model, tokenizer) if model_args.remote_code else contextlib.nullcontext():
            trainer.push_to_hub(commit_message="End of training")  # the folder as it is, with the card above
    # Every process waits for the last writes, then the process group really ends here, on every process (the
    # Trainer's DDP wrapper let go first): not in the interpreter's shutdown, where gloo's threads abort or block.
    finish_distributed(trainer)
    return printed


def _how_made(
    model_args: ModelArguments,
    data_args: DataArguments,
    trainer: Trainer,
    vocab_size: int,
    metrics: dict | None,
) -> str:
    """The model card's provenance paragraph: what was trained on what, and how well it does."""
    args = trainer.args
    if data_args.dataset_name:
        source = f"the `{data_args.dataset_name}` dataset (split `{data_args.train_split_name}`)"
        held_out = f"its `{data_args.eval_split_name}` split"
    else:
        source = ", ".join(f"`{os.path.basename(f)}`" for f in data_args.train_file)
        held_out = ", ".join(f"`{os.path.basename(f)}`" for f in data_args.eval_file or [])
    name = model_args.model_name_or_path
    start = f"fine-tuned from `{name}`" if name else "trained from scratch"
    num_samples = trainer.model.config.lm_num_samples
    optimizer = getattr(args.optim, "value", args.optim)
    text = (
        f"A biLM {start} with `python -m modeling_elmo.training.train_lm` (the `modeling_elmo` package) on {source}: "
        f"{trainer.state.global_step} steps of {args.per_device_train_batch_size} windows of up to "
        f"{data_args.max_words} words per device, {data_args.training_mode} mode, {optimizer} (learning rate "
        f"{args.learning_rate:g}, gradient clipping {args.max_grad_norm:g}), a {vocab_size}-word vocabulary, "
        f"{'the full softmax' if not num_samples else f'a {num_samples}-sample sampled softmax'}."
    )
    if metrics:
        text += (
            f" Perplexity on {held_out} ({metrics['eval_words']} words, full softmax): forward "
            f"{metrics['eval_forward_perplexity']:.1f}, backward {metrics['eval_backward_perplexity']:.1f}, "
            f"mean {metrics['eval_perplexity']:.1f}."
        )
    return text


if __name__ == "__main__":
    sys.exit(main())
