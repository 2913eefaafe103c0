"""The training commands' progress bar: the Trainer's bar, drawn complete once, with no other bar inside it.

The stock ``ProgressCallback`` draws the complete bar up to four times: at the last step, again under each log line
of the end (the last evaluation's metrics, the summary: ``tqdm.write`` draws the bar anew below its line), and when
the bar closes. A terminal shows them on one line, but a captured log (CI, ``2>&1 | tee``, a notebook cell running
the command) shows each. And transformers' own bars (a checkpoint's "Writing model shards") open below the
training bar and move the cursor, leaving the training bar's state behind on its line.
"""

from __future__ import annotations

from transformers import TrainerCallback
from transformers.trainer_callback import ProgressCallback
from transformers.utils import logging as hf_logging


class OneCompleteBar(ProgressCallback):
    """``ProgressCallback`` whose complete bar is drawn once: the last step is counted without drawing, and the bar
    closes (drawing itself complete) before the first log line after the last step, and before the summary."""

    def on_step_end(self, args, state, control, **kwargs):
        if self.training_bar is not None and state.global_step >= state.max_steps:
            self.training_bar.n = self.current_step = state.global_step  # drawn when the bar closes
            return
        super().on_step_end(args, state, control, **kwargs)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.prediction_bar is not None:  # an evaluation's bar (logged before on_evaluate closes it): gone before
            self.prediction_bar.close()  # the metrics' line, which would otherwise share its line (issue 44 F7)
            self.prediction_bar = None
        bar = self.training_bar
        if bar is not None and (bar.n >= state.max_steps or "train_runtime" in (logs or {})):
            bar.close()  # training is over; closing again (on_train_end) does nothing
        super().on_log(args, state, control, logs=logs, **kwargs)


class NoInnerBars(TrainerCallback):
    """transformers' own progress bars (a checkpoint's "Writing model shards", the best model's "Loading weights")
    off while the training bar is on screen, and back as they were when training ends."""

    def __init__(self) -> None:
        self.were_enabled = False

    def on_train_begin(self, args, state, control, **kwargs):
        self.were_enabled = hf_logging.is_progress_bar_enabled()
        hf_logging.disable_progress_bar()

    def on_train_end(self, args, state, control, **kwargs):
        if self.were_enabled:
            hf_logging.enable_progress_bar()


def use_one_bar(trainer, bar: type[OneCompleteBar] = OneCompleteBar) -> None:
    """Give ``trainer`` a ``bar`` instead of its ``ProgressCallback`` (if it shows one: not with ``disable_tqdm``),
    and [`NoInnerBars`]."""
    if trainer.pop_callback(ProgressCallback) is not None:
        trainer.add_callback(bar())
    trainer.add_callback(NoInnerBars())


__all__ = ["NoInnerBars", "OneCompleteBar", "use_one_bar"]
