"""The tagger's ``Trainer``: a seeded length-grouped order, a training-time budget, one final evaluation, and the
metrics (entity-level precision, recall and F1 with ``seqeval``, and word accuracy).

Used by the ``train-tagger`` command (``train_tagger.py``); not part of the model code that travels with a saved
folder. ``seqeval`` (the ``[train]`` extra) is imported by [`make_compute_metrics`] when it is called.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from transformers import TrainerCallback

from .distributed import any_process
from .tagging_data import IGNORE_INDEX

# ---------------------------------------------------------------------------------------------
# Metrics
# ---------------------------------------------------------------------------------------------


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
    """Turn a batch's logits into tag ids before Trainer gathers them: the argmax per word, which for a CRF tagger
    (whose ``logits`` are the CRF's max-marginals) is the Viterbi path.

    The labels give the mask: word-level labels are ``-100`` only on padding.
    """

    def preprocess(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        if isinstance(logits, tuple):
            logits = logits[0]
        return logits.argmax(dim=-1).masked_fill(~labels.ne(IGNORE_INDEX), IGNORE_INDEX)

    return preprocess


# ---------------------------------------------------------------------------------------------
# Trainer: seeded length-grouped order, a training-time budget, one final evaluation
# ---------------------------------------------------------------------------------------------


class TrainingClock:
    """Seconds of training since ``start()``, without the time spent evaluating (``exclude``)."""

    def __init__(self) -> None:
        self.started: float | None = None
        self.stopped: float | None = None
        self.excluded = 0.0

    def start(self) -> None:
        self.started, self.stopped, self.excluded = time.monotonic(), None, 0.0

    def stop(self) -> None:
        if self.started is not None and self.stopped is None:
            self.stopped = time.monotonic()

    @property
    def running(self) -> bool:
        return self.started is not None and self.stopped is None

    def exclude(self, seconds: float) -> None:
        """Do not count these seconds (an evaluation during training)."""
        if self.running:
            self.excluded += seconds

    @property
    def seconds(self) -> float:
        if self.started is None:
            return 0.0
        return (self.stopped or time.monotonic()) - self.started - self.excluded


class TimeBudget(TrainerCallback):
    """Stop training once ``budget`` seconds of training (evaluation excluded) have passed; checked after every
    step. ``budget`` 0: no limit (the clock still runs, for ``train_seconds``)."""

    def __init__(self, clock: TrainingClock, budget: float) -> None:
        self.clock = clock
        self.budget = budget
        self.stopped_on_budget = False
        self.words_at_start = 0

    def on_train_begin(self, args, state, control, **kwargs):
        self.clock.start()
        self.words_at_start = int(state.num_input_tokens_seen)  # a resumed run has seen words before

    def on_step_end(self, args, state, control, **kwargs):
        # Several processes decide together, at every step (each has its own clock): one that stopped alone would
        # leave the others waiting in the next step's gradient all-reduce.
        if self.budget and any_process(self.clock.seconds >= self.budget) and not control.should_training_stop:
            control.should_training_stop = True
            self.stopped_on_budget = True

    def on_train_end(self, args, state, control, **kwargs):
        self.clock.stop()


def tagger_trainer_class():
    """``Trainer`` for the tagger.

    - Its length-grouped training order depends only on ``--seed`` and the epoch. The stock
      ``LengthGroupedSampler`` draws each epoch's order from the global RNG when the epoch starts, i.e. after the
      previous epoch's dropout: a run resumed in its second epoch (global RNG restored only later, at the
      checkpoint's step) drew another order, and its losses differed from an uninterrupted run's.
    - It times its evaluations (``evaluations``: step, metrics, seconds), so that the training clock leaves them
      out and the final evaluation is not repeated.
    - The Trainer's log lines (loss, learning rate) go to stderr: stdout carries only the command's JSON result.
    - Its progress bar is drawn complete once, with no checkpoint's bar inside it (``progress.use_one_bar``).
    """
    from transformers import Trainer
    from transformers.trainer_callback import PrinterCallback
    from transformers.trainer_pt_utils import LengthGroupedSampler, get_length_grouped_indices

    from .progress import OneCompleteBar, use_one_bar

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

    class StderrPrinterCallback(PrinterCallback):
        def on_log(self, *args, **kwargs):
            with contextlib.redirect_stdout(sys.stderr):
                super().on_log(*args, **kwargs)

    class StderrProgressCallback(OneCompleteBar):
        def on_log(self, *args, **kwargs):  # tqdm.write prints to stdout
            with contextlib.redirect_stdout(sys.stderr):
                super().on_log(*args, **kwargs)

    class TaggerTrainer(Trainer):
        def __init__(self, *args, time_budget: float = 0.0, **kwargs):
            super().__init__(*args, **kwargs)
            if self.callback_handler.pop_callback(PrinterCallback) is not None:
                self.add_callback(StderrPrinterCallback)
            use_one_bar(self, StderrProgressCallback)
            self.clock = TrainingClock()
            self.budget = TimeBudget(self.clock, time_budget)
            self.add_callback(self.budget)
            self.evaluations: list[tuple[int, dict[str, float], float]] = []
            self.write_card: Callable[[], Any] | None = None

        def evaluate(self, *args, **kwargs) -> dict[str, float]:
            started = time.monotonic()
            metrics = super().evaluate(*args, **kwargs)
            seconds = time.monotonic() - started
            self.clock.exclude(seconds)  # evaluation is not training time
            self.evaluations.append((self.state.global_step, metrics, seconds))
            return metrics

        def create_model_card(self, *args, **kwargs) -> None:
            """Write the command's card (``write_card``, set by the command: ``model_card.write_model_card`` with the
            metadata, the model-index and the recipe) instead of the Trainer's generic one; ``push_to_hub`` calls
            this after saving the model and before uploading the folder."""
            if self.write_card is not None and self.is_world_process_zero():
                self.write_card()

        def _get_train_sampler(self, train_dataset=None):
            sampler = super()._get_train_sampler(train_dataset)
            if type(sampler) is LengthGroupedSampler:
                return EpochSeededLengthGroupedSampler(sampler.batch_size, sampler.lengths, self.args.seed)
            return sampler

    return TaggerTrainer


def final_evaluation(trainer) -> tuple[dict[str, float], float]:
    """The dev-set metrics of the final model and the seconds their evaluation took: the Trainer's own evaluation
    of the last step when it made one (``--eval_strategy epoch`` evaluates at the end of the last, or the
    interrupted, epoch) and the model is still that one; otherwise one evaluation now."""
    if trainer.evaluations:
        step, metrics, seconds = trainer.evaluations[-1]
        best = trainer.state.best_model_checkpoint
        reloaded = trainer.args.load_best_model_at_end and best and Path(best).name != f"checkpoint-{step}"
        if step == trainer.state.global_step and not reloaded:
            return dict(metrics), seconds
    metrics = trainer.evaluate()
    return dict(metrics), trainer.evaluations[-1][2]


__all__ = [
    "TimeBudget",
    "TrainingClock",
    "final_evaluation",
    "make_compute_metrics",
    "make_preprocess_logits",
    "tagger_trainer_class",
]
