"""Pretrain an ELMo biLM on your text, or fine-tune a converted/trained one on domain text.

    python -m modeling_elmo.training.train_lm --train_file corpus.txt --eval_file heldout.txt \\
        --preset small --output_dir elmo-mine
    python -m modeling_elmo.training.train_lm --train_file domain.txt --eval_file domain-dev.txt \\
        --model_name_or_path elmo-original --output_dir elmo-domain --learning_rate 0.05
    torchrun --nproc_per_node 2 -m modeling_elmo.training.train_lm ...        # data-parallel, same flags

Built on ``transformers.Trainer`` (progress bar, logging, checkpoints, resuming; accelerate underneath),
``datasets`` (reading and windowing the text) and [`ElmoForPreTraining`]. The output folder loads with
``ElmoModel.from_pretrained`` / ``ElmoTokenizer.from_pretrained`` (embeddings at once) and with
``AutoModelForPreTraining`` (to go on training); it also holds ``eval_results.json`` with the perplexities.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
from collections.abc import Sequence

import torch
from transformers import Trainer, TrainingArguments, set_seed
from transformers.trainer_utils import EvalLoopOutput, get_last_checkpoint

from ..configuration_elmo import ElmoConfig
from ..model_card import hub_model_id, metric_results, write_model_card
from ..modeling_elmo_pretraining import ElmoForPreTraining
from ..tokenization_elmo import BILM_SPECIAL_WORDS, BOS_TOKEN, EOS_TOKEN, ElmoTokenizer
from .checkpoints import checkpoint_problem, newest_complete_checkpoint
from .checks import MAX_SEED, POSITIVE, check_fraction, check_numbers
from .lm_data import TEXT_FORMATS, ElmoLMCollator, ElmoLMStreamCollator, load_lm_datasets

logger = logging.getLogger("modeling_elmo.training.train_lm")

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


class ElmoPreTrainingTrainer(Trainer):
    """A ``Trainer`` whose ``evaluate`` reports the biLM's perplexities, exactly (weighted by words).

    ``trainer.evaluate()`` returns ``eval_loss`` (mean of the directions), ``eval_forward_loss``,
    ``eval_backward_loss``, ``eval_forward_perplexity``, ``eval_backward_perplexity`` and
    ``eval_perplexity`` (``exp`` of the mean loss), computed with the full softmax over every word of the
    evaluation set (per-sentence sums gathered across processes), whatever the training softmax.
    Needs an [`ElmoForPreTraining`] and batches with ``labels`` (e.g. from [`ElmoLMCollator`]).

    Args:
        adagrad_initial_accumulator: train with ``torch.optim.Adagrad`` (``args.learning_rate``,
            ``args.weight_decay``) whose accumulators start at this value, as the original's (1.0); ``None``:
            the optimizer that ``args.optim`` names.
        *args, **kwargs: as ``Trainer``.
    """

    def __init__(self, *args, adagrad_initial_accumulator: float | None = None, **kwargs):
        self.adagrad_initial_accumulator = adagrad_initial_accumulator
        super().__init__(*args, **kwargs)

    def create_optimizer(self, model=None):
        if self.adagrad_initial_accumulator is None or self.optimizer is not None:
            return super().create_optimizer(model)
        # Built here, after the model is on its device, so that Adagrad's state is created there too.
        params = [p for p in (model or self.model).parameters() if p.requires_grad]
        self.optimizer = torch.optim.Adagrad(
            params,
            lr=self.args.learning_rate,
            initial_accumulator_value=self.adagrad_initial_accumulator,
            weight_decay=self.args.weight_decay,
        )
        return self.optimizer

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


def _filters(text: str) -> list[list[int]]:
    try:
        pairs = [[int(x) for x in item.split(":")] for item in text.split(",")]
    except ValueError:
        pairs = []
    if not pairs or any(len(p) != 2 for p in pairs):
        raise argparse.ArgumentTypeError(f"expected width:count pairs like 1:32,2:32,3:64, got {text!r}")
    return pairs


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m modeling_elmo.training.train_lm",
        description="Pretrain an ELMo biLM on plain text, or fine-tune an existing one on domain text, with the "
        "original objective (forward and backward LM, one softmax); reports forward, backward and mean perplexity.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    data = p.add_argument_group("data")
    data.add_argument("--train_file", nargs="+", help="plain-text training file(s), UTF-8")
    data.add_argument("--eval_file", nargs="+", help="held-out text file(s) for perplexity")
    data.add_argument(
        "--text_format",
        choices=TEXT_FORMATS,
        default="sentences",
        help="'sentences': one sentence per line; 'raw': running text, consecutive lines cut into windows",
    )
    data.add_argument(
        "--split_punctuation",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="split punctuation off words (raw text); --no-split_punctuation: split on whitespace only "
        "(already tokenized text)",
    )
    data.add_argument("--max_words", type=int, default=20, help="words per window; longer sentences are cut")
    data.add_argument(
        "--training_mode",
        choices=("sentences", "stream"),
        default="sentences",
        help="'sentences': every window starts from zero state; 'stream': the original's training, the text as "
        "one token stream per batch row cut into --max_words windows, LSTM states carried from batch to batch "
        "(backpropagation cut at window edges)",
    )
    data.add_argument(
        "--vocab_file",
        help="a bilm-tf vocabulary file (one word per line, with <S>, </S>, <UNK> anywhere) instead of building one",
    )
    data.add_argument("--min_count", type=int, default=1, help="building the vocabulary: minimum word count")
    data.add_argument("--max_vocab", type=int, help="building the vocabulary: at most this many words")
    data.add_argument("--max_train_samples", type=int, help="use only the first N training windows")
    data.add_argument("--max_eval_samples", type=int, help="use only the first N evaluation windows")
    data.add_argument("--preprocessing_num_workers", type=int, help="processes for datasets.map")
    data.add_argument("--cache_dir", help="the datasets cache folder")

    model = p.add_argument_group("model (a new biLM from a preset and sizes, or an existing one)")
    model.add_argument("--model_name_or_path", help="an ElmoModel/ElmoForPreTraining folder to fine-tune")
    model.add_argument(
        "--preset",
        choices=sorted(PRESETS),
        default="tiny",
        help="sizes of a new biLM (small/medium/original: released)",
    )
    model.add_argument("--lstm_dim", type=int, help="LSTM cell size (overrides the preset)")
    model.add_argument("--projection_dim", type=int, help="token vector and LSTM projection size")
    model.add_argument("--n_layers", type=int, help="LSTM layers per direction")
    model.add_argument("--n_highway", type=int, help="highway layers")
    model.add_argument("--char_embedding_dim", type=int, help="character embedding size")
    model.add_argument("--char_cnn_filters", type=_filters, help="width:count,... e.g. 1:32,2:32,3:64")
    model.add_argument("--cell_clip", type=float, help="LSTM cell clip")
    model.add_argument("--proj_clip", type=float, help="LSTM projection clip")
    model.add_argument("--use_skip_connections", action=argparse.BooleanOptionalAction, help="residual LSTM layers")
    model.add_argument("--num_samples", type=int, default=8192, help="sampled-softmax negatives; 0: full softmax")
    model.add_argument("--dropout", type=float, default=0.1, help="dropout before the softmax")

    train = p.add_argument_group("training")
    train.add_argument("--output_dir", required=True, help="checkpoints and the final model + tokenizer")
    train.add_argument("--overwrite_output_dir", action="store_true", help="start afresh even if it has checkpoints")
    train.add_argument(
        "--resume_from_checkpoint",
        help="a checkpoint folder, or 'last' for the newest checkpoint-* in --output_dir",
    )
    train.add_argument("--optimizer", choices=("adagrad", "adamw"), default="adagrad", help="adagrad: the original")
    train.add_argument("--learning_rate", type=float, help="default: 0.2 (adagrad, the original) or 1e-3 (adamw)")
    train.add_argument(
        "--adagrad_initial_accumulator", type=float, default=1.0, help="Adagrad's initial accumulator (original: 1)"
    )
    train.add_argument("--weight_decay", type=float, default=0.0)
    train.add_argument("--lr_scheduler_type", help="default: constant (adagrad) or linear (adamw)")
    train.add_argument("--warmup_steps", type=int, default=0)
    train.add_argument("--max_grad_norm", type=float, default=10.0, help="gradient clipping (original: 10)")
    train.add_argument("--num_train_epochs", type=float, default=1.0)
    train.add_argument("--max_steps", type=int, default=-1, help="overrides --num_train_epochs when > 0")
    train.add_argument("--per_device_train_batch_size", type=int, default=64, help="windows per step and process")
    train.add_argument("--per_device_eval_batch_size", type=int, default=64)
    train.add_argument("--gradient_accumulation_steps", type=int, default=1)
    train.add_argument("--seed", type=int, default=42)
    train.add_argument(
        "--shuffle", action=argparse.BooleanOptionalAction, default=True, help="shuffle the training windows"
    )
    train.add_argument("--logging_steps", type=int, default=50)
    train.add_argument("--save_steps", type=int, default=500, help="checkpoint every N steps")
    train.add_argument("--save_total_limit", type=int, default=2)
    train.add_argument("--eval_steps", type=int, help="also evaluate every N steps (default: at the end only)")
    train.add_argument("--gradient_checkpointing", action="store_true")
    train.add_argument("--bf16", action="store_true", help="bfloat16 mixed precision")
    train.add_argument("--dataloader_num_workers", type=int, default=0)
    train.add_argument("--use_cpu", action="store_true", help="train on the CPU even if a GPU is available")
    train.add_argument("--ddp_backend", help="e.g. gloo (CPU) or nccl (GPU); default: chosen by accelerate")
    train.add_argument("--report_to", default="none", help="e.g. tensorboard, wandb; none")
    train.add_argument("--disable_tqdm", action="store_true", help="no progress bars")
    return p


def _word_vocab(tokenizer: ElmoTokenizer) -> dict[str, int]:
    """The tokenizer's word vocabulary (without ``<pad>``, which follows it)."""
    return tokenizer.backend_tokenizer.get_vocab(with_added_tokens=False)


def _training_arguments(args: argparse.Namespace) -> TrainingArguments:
    adagrad = args.optimizer == "adagrad"
    kwargs = dict(
        output_dir=args.output_dir,
        learning_rate=args.learning_rate if args.learning_rate is not None else (0.2 if adagrad else 1e-3),
        weight_decay=args.weight_decay,
        lr_scheduler_type=args.lr_scheduler_type or ("constant" if adagrad else "linear"),
        warmup_steps=args.warmup_steps,
        max_grad_norm=args.max_grad_norm,
        num_train_epochs=args.num_train_epochs,
        max_steps=args.max_steps,
        per_device_train_batch_size=args.per_device_train_batch_size,
        per_device_eval_batch_size=args.per_device_eval_batch_size,
        gradient_accumulation_steps=args.gradient_accumulation_steps,
        seed=args.seed,
        # Stream windows must come in order: batch j holds window j of every row (shuffled sentences instead).
        train_sampling_strategy="random" if args.shuffle and args.training_mode == "sentences" else "sequential",
        logging_steps=args.logging_steps,
        save_strategy="steps",
        save_steps=args.save_steps,
        save_total_limit=args.save_total_limit,
        eval_strategy="steps" if args.eval_steps and args.eval_file else "no",
        eval_steps=args.eval_steps,
        gradient_checkpointing=args.gradient_checkpointing,
        bf16=args.bf16,
        dataloader_num_workers=args.dataloader_num_workers,
        report_to=args.report_to,
        disable_tqdm=args.disable_tqdm,
        # The collator needs the "words" column, which is not a forward argument.
        remove_unused_columns=False,
        # The LM head has no scalar mixes: every parameter gets a gradient, also in a fine-tuned saved folder.
        ddp_find_unused_parameters=False,
        # Count words (attention_mask), not the 50 character ids of each: train_words_per_second.
        include_num_input_tokens_seen="non_padding",
    )
    if args.optimizer == "adamw":
        kwargs["optim"] = "adamw_torch"
    if args.ddp_backend:
        kwargs["ddp_backend"] = args.ddp_backend
    # Several processes without a GPU (torchrun/accelerate launch on CPUs): accelerate runs data-parallel on the
    # CPU only when told so; without it every process would train on its own.
    if args.use_cpu or (int(os.environ.get("WORLD_SIZE", "1")) > 1 and not torch.cuda.is_available()):
        kwargs["use_cpu"] = True
    return TrainingArguments(**kwargs)


# Numeric flags: (lowest, highest, what the bounds mean); see checks.check_numbers.
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
    "logging_steps": (1, None, ""),
    "save_steps": (1, None, ""),
    "save_total_limit": (1, None, ""),
    "eval_steps": (1, None, ""),
    "dataloader_num_workers": (0, None, ""),
}


def _check_args(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    if not args.train_file and not args.eval_file:
        parser.error("give --train_file (to train) and/or --eval_file (to evaluate)")
    if not args.train_file and not args.model_name_or_path:
        parser.error("evaluating only (no --train_file) needs --model_name_or_path")
    if args.model_name_or_path:
        given = [f"--{name}" for name in SIZE_ARGUMENTS if getattr(args, name) is not None]
        if given:
            parser.error(f"{', '.join(given)} set the sizes of a new biLM; they cannot change --model_name_or_path's")
    check_numbers(parser, args, NUMBER_RULES)
    check_fraction(parser, args, "dropout")
    if args.max_steps == 0:
        parser.error("--max_steps must be -1 (train for --num_train_epochs) or >= 1, got 0")
    for width, count in args.char_cnn_filters or []:
        if width < 1 or count < 1:
            parser.error(f"--char_cnn_filters: widths and counts must be >= 1, got {width}:{count}")


def _resume_checkpoint(args: argparse.Namespace, parser: argparse.ArgumentParser) -> str | None:
    last = get_last_checkpoint(args.output_dir) if os.path.isdir(args.output_dir) else None
    if args.resume_from_checkpoint == "last":
        if last is None:
            parser.error(f"--resume_from_checkpoint last: no checkpoint-* folder in {args.output_dir}")
        # The newest folder may be half-written (a run killed while saving): take the newest complete one.
        complete = newest_complete_checkpoint(args.output_dir, logger)
        if complete is None:
            parser.error(f"--resume_from_checkpoint last: no complete checkpoint in {args.output_dir}")
        return complete
    if args.resume_from_checkpoint:
        if not os.path.isdir(args.resume_from_checkpoint):
            parser.error(f"--resume_from_checkpoint: {args.resume_from_checkpoint} is not a folder")
        problem = checkpoint_problem(args.resume_from_checkpoint)
        if problem:
            parser.error(f"--resume_from_checkpoint: {args.resume_from_checkpoint} is incomplete: {problem}")
        return args.resume_from_checkpoint
    if last is not None and not args.overwrite_output_dir and args.train_file:
        parser.error(
            f"{args.output_dir} already has checkpoints ({os.path.basename(last)}): pass "
            "--resume_from_checkpoint last to go on, or --overwrite_output_dir to start afresh"
        )
    return None


def _tokenizer_and_vocab(args: argparse.Namespace) -> tuple[ElmoTokenizer, dict[str, int] | None]:
    """The tokenizer to split words with, and the vocabulary if it is fixed already (None: build it)."""
    if args.vocab_file:
        tokenizer = ElmoTokenizer.from_vocab_file(args.vocab_file, split_punctuation=args.split_punctuation)
        return tokenizer, _word_vocab(tokenizer)
    if args.model_name_or_path:
        config = ElmoConfig.from_pretrained(args.model_name_or_path)
        try:
            tokenizer = ElmoTokenizer.from_pretrained(args.model_name_or_path)
        except OSError:
            tokenizer = None
        # A trained LM's own vocabulary goes with its softmax: keep both.
        if tokenizer is not None and config.lm_vocab_size and len(_word_vocab(tokenizer)) == config.lm_vocab_size:
            return tokenizer, _word_vocab(tokenizer)
        if not args.train_file:
            raise ValueError(
                f"{args.model_name_or_path} has no LM vocabulary (lm_vocab_size={config.lm_vocab_size}): "
                "give --vocab_file or --train_file"
            )
    return ElmoTokenizer(split_punctuation=args.split_punctuation), None


def _build_model(args: argparse.Namespace, vocab: dict[str, int]) -> ElmoForPreTraining:
    lm = dict(
        lm_vocab_size=len(vocab),
        lm_num_samples=args.num_samples,
        lm_dropout=args.dropout,
        lm_bos_vocab_id=vocab[BOS_TOKEN],
        lm_eos_vocab_id=vocab[EOS_TOKEN],
    )
    if args.model_name_or_path:
        old = ElmoConfig.from_pretrained(args.model_name_or_path)
        # A new vocabulary means a new softmax: the old one (if any) cannot load.
        new_softmax = old.lm_vocab_size not in (0, len(vocab))
        if new_softmax:
            logger.warning(
                "the vocabulary (%d words) differs from the checkpoint's softmax (%d): a new softmax is trained",
                len(vocab),
                old.lm_vocab_size,
            )
        model, info = ElmoForPreTraining.from_pretrained(
            args.model_name_or_path,
            stateful=False,
            ignore_mismatched_sizes=new_softmax,
            output_loading_info=True,
            **lm,
        )
        missing = [name for name in info["missing_keys"] if name.startswith("softmax.")]
        if missing and not args.train_file:
            # Evaluating a random softmax would report a meaningless perplexity that changes with --seed.
            raise ValueError(
                f"{args.model_name_or_path} has no trained softmax ({', '.join(sorted(missing))} missing from its "
                "weights, e.g. a model saved as ElmoModel): its perplexity cannot be evaluated; train the softmax "
                "first with --train_file"
            )
        return model
    sizes = dict(PRESETS[args.preset])
    sizes.update({name: getattr(args, name) for name in SIZE_ARGUMENTS if getattr(args, name) is not None})
    return ElmoForPreTraining(ElmoConfig(**sizes, **lm))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; returns the exit status (0 on success, 1 with one ``error:`` line for bad input)."""
    try:
        return _main(argv)
    except (ValueError, OSError) as error:  # bad files, models or values: one line, no traceback
        print(f"error: {error}", file=sys.stderr)
        return 1


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    _check_args(args, parser)
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    resume = _resume_checkpoint(args, parser)
    training_args = _training_arguments(args)

    tokenizer, vocab = _tokenizer_and_vocab(args)
    windows, vocab_words = load_lm_datasets(
        tokenizer,
        args.train_file,
        args.eval_file,
        vocab=vocab,
        max_words=args.max_words,
        text_format=args.text_format,
        min_count=args.min_count,
        max_vocab=args.max_vocab,
        num_proc=args.preprocessing_num_workers,
        cache_dir=args.cache_dir,
        main_process_first=training_args.main_process_first,
        # One stream per row of the global batch. Data-parallel, process p gets global batches p, p + N, ... (the
        # dataloader shards whole batches), i.e. window j of rows p * B .. p * B + B - 1: its rows stay its own.
        stream_rows=args.per_device_train_batch_size * training_args.world_size
        if args.training_mode == "stream"
        else None,
        stream_seed=args.seed if args.shuffle else None,
    )
    if vocab is None:
        vocab = {word: index for index, word in enumerate(vocab_words)}
        tokenizer = ElmoTokenizer(vocab=vocab, split_punctuation=args.split_punctuation)
    logger.info("vocabulary: %d words", len(vocab))
    train_set = windows.get("train")
    eval_set = windows.get("validation")
    if train_set is not None and args.max_train_samples:
        train_set = train_set.select(range(min(args.max_train_samples, len(train_set))))
    if eval_set is not None and args.max_eval_samples:
        eval_set = eval_set.select(range(min(args.max_eval_samples, len(eval_set))))

    set_seed(args.seed)  # a new biLM starts from the same weights in every run (and every process)
    model = _build_model(args, vocab)
    trainer = ElmoPreTrainingTrainer(
        model=model,
        args=training_args,
        train_dataset=train_set,
        eval_dataset=eval_set,
        data_collator=ElmoLMCollator(tokenizer) if args.training_mode == "sentences" else _StreamOrSentences(tokenizer),
        processing_class=tokenizer,
        # The original's Adagrad starts its accumulators at 1 (torch's default 0 makes the first steps huge).
        adagrad_initial_accumulator=args.adagrad_initial_accumulator if args.optimizer == "adagrad" else None,
    )

    if train_set is not None:
        result = trainer.train(resume_from_checkpoint=resume)
        # Words of this run (all processes); a resumed run counts from where it resumed.
        words = trainer.state.num_input_tokens_seen - getattr(trainer, "_initial_num_input_tokens_seen", 0)
        result.metrics["train_words"] = int(words)
        result.metrics["train_words_per_second"] = round(words / max(result.metrics["train_runtime"], 1e-9), 1)
        trainer.save_model()  # model + tokenizer (with vocab.txt) in --output_dir, on the main process
        trainer.log_metrics("train", result.metrics)
        trainer.save_metrics("train", result.metrics)
        trainer.save_state()
    metrics = None
    if eval_set is not None:
        metrics = trainer.evaluate()
        trainer.log_metrics("eval", metrics)
        trainer.save_metrics("eval", metrics)
        if trainer.is_world_process_zero():
            print(
                json.dumps(
                    {
                        "forward_perplexity": metrics["eval_forward_perplexity"],
                        "backward_perplexity": metrics["eval_backward_perplexity"],
                        "perplexity": metrics["eval_perplexity"],
                    }
                )
            )
    if train_set is not None and trainer.is_world_process_zero():
        scores = [
            ("perplexity", "Perplexity (mean of both directions)", "eval_perplexity"),
            ("perplexity", "Perplexity (forward LM)", "eval_forward_perplexity"),
            ("perplexity", "Perplexity (backward LM)", "eval_backward_perplexity"),
        ]
        measured = [(kind, name, metrics[key]) for kind, name, key in scores if metrics and key in metrics]
        write_model_card(
            args.output_dir,
            trainer.model.config,
            how_made=_how_made(args, trainer, len(vocab), metrics),
            eval_results=metric_results(
                "text-generation", "Language modeling (forward and backward)", args.eval_file, measured
            )
            if args.eval_file and measured
            else None,
            base_model=hub_model_id(args.model_name_or_path),
        )
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        # Every process waits for the last writes, then leaves together: a gloo process that exits with its
        # process group alive can abort at interpreter shutdown ("terminate called without an active exception").
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
    return 0


def _how_made(args: argparse.Namespace, trainer: Trainer, vocab_size: int, metrics: dict | None) -> str:
    """The model card's provenance paragraph: what was trained on what, and how well it does."""
    files = ", ".join(f"`{os.path.basename(f)}`" for f in args.train_file)
    start = f"fine-tuned from `{args.model_name_or_path}`" if args.model_name_or_path else "trained from scratch"
    text = (
        f"A biLM {start} with `python -m modeling_elmo.training.train_lm` (the `modeling_elmo` package) on {files}: "
        f"{trainer.state.global_step} steps of {args.per_device_train_batch_size} windows of up to {args.max_words} "
        f"words per device, {args.training_mode} mode, {args.optimizer} (learning rate "
        f"{trainer.args.learning_rate:g}, gradient clipping {args.max_grad_norm:g}), a {vocab_size}-word vocabulary, "
        f"{'the full softmax' if not args.num_samples else f'a {args.num_samples}-sample sampled softmax'}."
    )
    if metrics:
        held_out = ", ".join(f"`{os.path.basename(f)}`" for f in args.eval_file)
        text += (
            f" Perplexity on {held_out} ({metrics['eval_words']} words, full softmax): forward "
            f"{metrics['eval_forward_perplexity']:.1f}, backward {metrics['eval_backward_perplexity']:.1f}, "
            f"mean {metrics['eval_perplexity']:.1f}."
        )
    return text


if __name__ == "__main__":
    sys.exit(main())
