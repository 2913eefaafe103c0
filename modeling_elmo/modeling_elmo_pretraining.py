"""The biLM's language-model head: pretrain or fine-tune ELMo with its original objective.

One softmax over a word vocabulary (``ElmoSoftmax``) is shared by both directions. For a sentence
``w_1 .. w_n`` (the model itself reads ``<S> w_1 .. w_n </S>``)::

    forward  direction at word k predicts w_{k+1}   (at w_n: </S>)
    backward direction at word k predicts w_{k-1}   (at w_1: <S>)
    loss = (forward_loss + backward_loss) / 2,   perplexity = exp(loss) per direction and for the mean

Stream training (the original's, ``backward_input_ids`` given): each direction reads the next window of its own
token stream (``<S>``/``</S>`` are tokens of it), continuing from the states of the previous batch; the labels are
the next tokens of each stream, not shifted by the head. The head keeps those states in one [`ElmoLstmState`]
(``self.stream_state``) and passes it to ``ElmoModel.forward`` like any caller would.

Every path goes through ``self.elmo(...)`` once and reads its outputs (``hidden_states[-1]``, ``mask``). The biLM
of this head has no scalar mixes (they play no part in the LM objective): nothing is computed and thrown away,
and data-parallel training has no unused parameters.

Each direction predicts from its own half of the biLM's top layer (``P`` wide), after dropout
(``lm_dropout``), as the original does. In training the softmax is sampled (``lm_num_samples``
log-uniform negatives, corrected for their sampling probabilities, accidental hits removed); in
evaluation, or with ``lm_num_samples=0``, it is the full softmax.

Shapes: B sentences, W words (after padding), C characters per word (50), P = projection_dim,
V = lm_vocab_size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn
from transformers import initialization as init
from transformers.utils import ModelOutput, can_return_tuple

from .checks_elmo import check_conventional_arguments
from .configuration_elmo import ElmoConfig
from .graph_path_elmo import in_graph
from .modeling_elmo import (
    ElmoLstmState,
    ElmoModel,
    ElmoPreTrainedModel,
    init_pretraining_scales,
)
from .softmax_elmo import IGNORE_INDEX, ElmoSoftmax


@dataclass
class ElmoForPreTrainingOutput(ModelOutput):
    """Output of [`ElmoForPreTraining`].

    Args:
        loss: with ``labels``: the mean of the two directions' losses (what is trained). Normalised by
            ``num_items_in_batch`` when the Trainer passes it (then ``(sum_fwd + sum_bwd) / (2 * items)``,
            so that gradient accumulation and data-parallel runs weigh every word the same).
        forward_loss, backward_loss: with ``labels``: each direction's mean cross entropy over its
            targets (sampled softmax in training, full softmax in evaluation); ``exp`` is its perplexity.
        forward_logits, backward_logits: ``(B, W, V)`` full-softmax logits, when asked for
            (``return_logits``); position ``k`` scores the word after (forward) or before (backward) word ``k``.
        hidden_states: with ``output_hidden_states=True``, the ``L + 1`` biLM layers, each ``(B, W, 2P)``.
    """

    loss: torch.Tensor | None = None
    forward_loss: torch.Tensor | None = None
    backward_loss: torch.Tensor | None = None
    forward_logits: torch.Tensor | None = None
    backward_logits: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None


def _require_tensors(**named: object) -> None:
    """``TypeError`` naming the first given value that is no tensor (a list of ids, say), before the biLM runs."""
    for name, value in named.items():
        if value is not None and not isinstance(value, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor (e.g. torch.tensor({name})), got {type(value).__name__}")


def shift_labels(
    labels: torch.Tensor,
    mask: torch.Tensor,
    bos_id: int,
    eos_id: int,
    boundary_labels: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The targets of both directions, from word-aligned ``labels``.

    Args:
        labels: ``(B, W)`` word ids (``-100``: ignored), aligned with the input words.
        mask: ``(B, W)`` bool, True for words (right padding).
        bos_id, eos_id: the vocabulary ids of ``<S>`` and ``</S>``.
        boundary_labels: optional ``(B, 2)``: per sentence, the target of the backward direction at
            the first word and of the forward direction at the last word. Default ``(bos_id, eos_id)``;
            a window cut out of a longer sentence gives the ids of the words just outside it (or -100).

    Returns:
        ``forward_targets (B, W)`` (word k -> ``labels[k + 1]``, last word -> ``eos``) and
        ``backward_targets (B, W)`` (word k -> ``labels[k - 1]``, first word -> ``bos``), ``-100`` at padding.
    """
    batch, words = labels.shape
    lengths = mask.sum(dim=1)
    rows = torch.arange(batch, device=labels.device)
    has_words = lengths > 0
    if boundary_labels is None:
        first_target = labels.new_full((batch,), bos_id)
        last_target = labels.new_full((batch,), eos_id)
    else:
        first_target, last_target = boundary_labels.to(labels.dtype).unbind(dim=1)

    forward = labels.new_full((batch, words), IGNORE_INDEX)
    backward = labels.new_full((batch, words), IGNORE_INDEX)
    if words > 1:
        forward[:, :-1] = labels[:, 1:]
        backward[:, 1:] = labels[:, :-1]
    # Only rows with words have a first and a last word; an empty row keeps -100 everywhere.
    last = (lengths - 1).clamp(min=0)
    forward[rows[has_words], last[has_words]] = last_target[has_words]
    backward[rows[has_words], 0] = first_target[has_words]
    return forward.masked_fill(~mask, IGNORE_INDEX), backward.masked_fill(~mask, IGNORE_INDEX)


@torch.no_grad()
def init_bilm_for_pretraining(elmo: ElmoModel) -> None:
    """Re-initialise a whole biLM with the original (bilm-tf) training scales (see [`init_pretraining_scales`]).

    A new [`ElmoForPreTraining`] needs no call: its biLM is built with ``pretraining_init=True``, so
    ``__init__`` and every re-initialisation path (``init_weights``, weights missing in ``from_pretrained``)
    give these scales.
    """
    for module in elmo.modules():
        init_pretraining_scales(elmo, module)


class ElmoForPreTraining(ElmoPreTrainedModel):
    r"""ELMo's biLM with its language-model softmax, for pretraining and for fine-tuning on domain text.

    ``self.elmo`` is an [`ElmoModel`] (``base_model_prefix = "elmo"``): a converted or trained
    ``ElmoModel`` folder loads into this head (the softmax is then new), and this head's saved folder
    loads back into ``ElmoModel.from_pretrained`` (the softmax is then left out). Loadable with
    ``AutoModelForPreTraining``.

    The config needs ``lm_vocab_size`` (V, the number of words of the tokenizer's vocabulary, e.g. of
    ``ElmoTokenizer.from_vocab_file(...)``: ``len(tokenizer.get_vocab()) - 1``, ``<pad>`` excluded).
    ``lm_bos_vocab_id``/``lm_eos_vocab_id`` are the ids of ``<S>``/``</S>`` (0 and 1, the first lines of
    a bilm-tf vocabulary file), ``lm_num_samples`` the negatives of the sampled softmax in training
    (8192 as the original; 0: full softmax), ``lm_dropout`` the dropout before the softmax.

    The biLM runs statelessly (``stateful=True`` is refused) and is built without scalar mixes, which play
    no part in the LM objective (``ElmoModel.from_pretrained`` of this head's folder adds fresh ones). A new
    head's biLM starts at the original's scales ([`init_pretraining_scales`], its ``_init_weights`` policy).

    ```python
    tokenizer = ElmoTokenizer.from_vocab_file("vocab.txt")
    model = ElmoForPreTraining.from_pretrained("elmo-small", lm_vocab_size=len(tokenizer.get_vocab()) - 1)
    batch = tokenizer(["The cat sat ."], padding=True, return_vocab_ids=True, return_tensors="pt")
    out = model(batch["input_ids"], batch["attention_mask"], labels=batch["vocab_ids"])
    out.loss, out.forward_loss.exp(), out.backward_loss.exp()  # loss and per-direction perplexities
    ```
    """

    # The loss can be normalised by the Trainer's `num_items_in_batch` (all labels of the accumulated,
    # all-process batch): the gradients then do not depend on how the batch is split.
    accepts_loss_kwargs = True
    # A converted or trained ElmoModel folder may have scalar mixes, which this head does not build. A softmax missing
    # from the checkpoint is not declared: it is new (fine-tuning on domain text) and transformers' load report says
    # so; `elmo train-lm` reads it from the loading info.
    _keys_to_ignore_on_load_unexpected = [r"(^|\.)scalar_mixes\."]

    def __init__(self, config: ElmoConfig):
        super().__init__(config)
        vocab_size = getattr(config, "lm_vocab_size", 0)
        if not isinstance(vocab_size, int) or vocab_size < 1:
            raise ValueError(
                "ElmoForPreTraining needs an LM softmax, config.lm_vocab_size >= 1: the number of words of the LM "
                f"vocabulary (e.g. ElmoForPreTraining.from_pretrained(path, lm_vocab_size=V)), got {vocab_size!r}"
            )
        if config.stateful:
            raise ValueError("ElmoForPreTraining trains a stateless biLM: load it with stateful=False")
        for name in ("lm_bos_vocab_id", "lm_eos_vocab_id"):
            value = getattr(config, name)
            if not 0 <= value < vocab_size:
                raise ValueError(f"config.{name}={value} is not an id of the LM vocabulary (size {vocab_size})")
        # The LM objective uses no mix; a new biLM starts at the original's training scales.
        self.elmo = ElmoModel(config, num_output_representations=0, pretraining_init=True)
        self.dropout = nn.Dropout(config.lm_dropout)
        self.softmax = ElmoSoftmax(vocab_size, config.projection_dim)
        # Stream training: the LSTM states after the previous batch, B rows (see forward).
        self.stream_state = ElmoLstmState()
        self.post_init()

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, ElmoSoftmax):
            # As ElmoSoftmax.reset_parameters: logits of unit variance for unit-variance inputs.
            init.normal_(module.weight, mean=0.0, std=1.0 / math.sqrt(module.hidden_size))
            init.zeros_(module.bias)
        else:
            super()._init_weights(module)

    def get_output_embeddings(self) -> ElmoSoftmax:
        """The LM softmax ``(V, P)`` over the word vocabulary (not tied to the input, a character table)."""
        return self.softmax

    def set_output_embeddings(self, new_embeddings: ElmoSoftmax) -> None:
        """Replace the LM softmax by another [`ElmoSoftmax`] of the same ``(V, P)`` (``config.lm_vocab_size``,
        ``projection_dim``); for another vocabulary, load with ``lm_vocab_size=V, ignore_mismatched_sizes=True``."""
        expected = (self.config.lm_vocab_size, self.config.projection_dim)
        shape = tuple(getattr(getattr(new_embeddings, "weight", None), "shape", ()))
        if not isinstance(new_embeddings, ElmoSoftmax) or shape != expected:
            raise ValueError(
                f"the LM softmax must be an ElmoSoftmax of (lm_vocab_size, projection_dim) = {expected}, got "
                f"{type(new_embeddings).__name__} {shape}: for another word vocabulary, load the model with "
                "from_pretrained(folder, lm_vocab_size=V, ignore_mismatched_sizes=True)"
            )
        self.softmax = new_embeddings

    def _direction_states(self, top_layer: torch.Tensor) -> torch.Tensor:
        """``(B, W, 2P)`` ``[forward_h; backward_h]`` -> ``(2, B, W, P)`` (index 0 forward), with dropout, in the
        softmax's dtype (the biLM may run in bfloat16 or int8 under a float32 softmax)."""
        forward, backward = top_layer.to(self.softmax.weight.dtype).chunk(2, dim=-1)
        return self.dropout(torch.stack([forward, backward]))

    def _check_labels(self, labels: torch.Tensor, mask: torch.Tensor, boundary_labels: torch.Tensor | None) -> None:
        if tuple(labels.shape) != tuple(mask.shape):
            raise ValueError(
                f"labels must be (batch, words) = {tuple(mask.shape)}, aligned with input_ids' words, "
                f"got {tuple(labels.shape)}"
            )
        if labels.dtype.is_floating_point:
            raise ValueError(f"labels must be integer word ids, got dtype {labels.dtype}")
        vocab_size = self.config.lm_vocab_size
        # In a graph, no boolean indexing (its size depends on the values): the padding is marked ignored instead.
        words = labels.masked_fill(~mask, IGNORE_INDEX) if in_graph() else labels[mask]
        for values in [words] if boundary_labels is None else [words, boundary_labels.flatten()]:
            bad = ((values < 0) & (values != IGNORE_INDEX)) | (values >= vocab_size)
            if in_graph():  # checked when the graph runs (RuntimeError), without reading values into Python
                torch._assert_async(bad.logical_not().all(), f"labels must be word ids in [0, {vocab_size}) or -100")
            elif bool(bad.any()):
                raise ValueError(
                    f"labels must be word ids in [0, {vocab_size}) (config.lm_vocab_size) or {IGNORE_INDEX}, "
                    f"got {values[bad][:5].tolist()}: does the tokenizer's vocabulary match the model's?"
                )
        if boundary_labels is not None and tuple(boundary_labels.shape) != (mask.shape[0], 2):
            raise ValueError(f"boundary_labels must be (batch, 2), got {tuple(boundary_labels.shape)}")

    def lm_targets(
        self, labels: torch.Tensor, mask: torch.Tensor, boundary_labels: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``(2, B, W)`` targets of the forward (index 0) and backward direction; see [`shift_labels`]."""
        self._check_labels(labels, mask, boundary_labels)
        cfg = self.config
        return torch.stack(shift_labels(labels, mask, cfg.lm_bos_vocab_id, cfg.lm_eos_vocab_id, boundary_labels))

    def word_losses(
        self, states: torch.Tensor, targets: torch.Tensor, logits: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Per-word cross entropies ``(2, B, W)`` (0 where the target is ignored).

        ``states`` ``(2, B, W, P)``, ``targets`` ``(2, B, W)``. Sampled softmax in training mode with
        ``lm_num_samples > 0`` (one draw of negatives shared by both directions); full softmax otherwise
        (from ``logits (2, B, W, V)`` if already computed). Only the sampled path avoids a ``(B, W, V)`` tensor.
        """
        num_samples = self.config.lm_num_samples
        if self.training and num_samples > 0:
            return self.softmax.sampled_loss(states, targets, num_samples, reduction="none")
        if logits is None:
            return self.softmax.full_loss(states, targets, reduction="none")
        flat = logits.reshape(-1, logits.shape[-1])
        losses = nn.functional.cross_entropy(flat, targets.reshape(-1), ignore_index=IGNORE_INDEX, reduction="none")
        return losses.view(targets.shape)

    def _reduce(
        self, losses: torch.Tensor, targets: torch.Tensor, num_items_in_batch: int | torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(loss, forward_loss, backward_loss)`` from per-token ``losses`` and ``targets``, both ``(2, B, T)``."""
        sums = losses.flatten(1).sum(dim=1)  # (2,)
        counts = targets.ne(IGNORE_INDEX).flatten(1).sum(dim=1)  # (2,)
        # A direction with nothing to predict contributes 0 rather than NaN.
        means = sums / counts.clamp(min=1).to(sums.dtype)
        if num_items_in_batch is not None:
            loss = sums.sum() / (2 * torch.as_tensor(num_items_in_batch, device=sums.device).to(sums.dtype))
        else:
            loss = means.mean()
        return loss, means[0], means[1]

    @staticmethod
    def _output(loss, forward_loss, backward_loss, logits, hidden_states=None) -> ElmoForPreTrainingOutput:
        """The output, with ``logits (2, B, T, V)`` (or ``None``) split by direction."""
        return ElmoForPreTrainingOutput(
            loss=loss,
            forward_loss=forward_loss,
            backward_loss=backward_loss,
            forward_logits=logits[0] if logits is not None else None,
            backward_logits=logits[1] if logits is not None else None,
            hidden_states=hidden_states,
        )

    # -----------------------------------------------------------------------------------------
    # Stream training (the original's): windows of token streams, states carried between batches
    # -----------------------------------------------------------------------------------------

    def reset_stream_states(self) -> None:
        """Forget the LSTM states that stream training carries from one batch to the next (``stream_state``)."""
        self.stream_state.reset()

    def stream_hidden_states(self, input_ids: torch.Tensor, backward_input_ids: torch.Tensor) -> torch.Tensor:
        """Top-layer outputs of both directions over the next window of their own token streams.

        Each direction runs left to right over its own stream (the backward stream is the text reversed), from
        the states the previous call left in the same row, and hands its states on to the next call
        (detached: backpropagation stops at the window's first token). No ``<S>``/``</S>`` are added: they
        are tokens of the streams. The first call, or a call with another number of rows, starts from zero.
        It is ``ElmoModel.forward``'s stream mode with ``lstm_state=self.stream_state``.

        Args:
            input_ids, backward_input_ids: ``(B, T, C)`` character ids of each direction's tokens; full
                windows (no padding).

        Returns:
            ``(2, B, T, P)``: index 0 the forward direction, 1 the backward one, position by position of
            their own streams.
        """
        base = self._stream_base(input_ids, backward_input_ids)
        return torch.stack(base.hidden_states[-1].chunk(2, dim=-1))  # (2, B, T, P)

    def _stream_base(self, input_ids: torch.Tensor, backward_input_ids: torch.Tensor):
        """``ElmoModel.forward`` in stream mode, carrying ``self.stream_state`` (all layers returned)."""
        batch = input_ids.shape[0] if isinstance(input_ids, torch.Tensor) else 0
        if self.stream_state.num_rows != batch:  # the first call, or another number of rows: start from zero
            self.stream_state.reset()
        base = self.elmo(
            input_ids,
            backward_input_ids=backward_input_ids,
            lstm_state=self.stream_state,
            output_hidden_states=True,
            return_dict=True,
        )
        return base

    def _stream_forward(
        self,
        input_ids: torch.Tensor,
        backward_input_ids: torch.Tensor,
        labels: torch.Tensor | None,
        backward_labels: torch.Tensor | None,
        return_logits: bool,
        num_items_in_batch: int | torch.Tensor | None,
        output_hidden_states: bool,
    ) -> ElmoForPreTrainingOutput:
        if (labels is None) != (backward_labels is None):
            raise ValueError("stream training needs both labels and backward_labels, or neither")
        base = self._stream_base(input_ids, backward_input_ids)
        states = self._direction_states(base.hidden_states[-1])  # (2, B, T, P)
        logits = self.softmax.logits(states) if return_logits else None
        loss = forward_loss = backward_loss = None
        if labels is not None:
            mask = base.mask.bool()
            self._check_labels(labels, mask, None)
            self._check_labels(backward_labels, mask, None)
            targets = torch.stack([labels, backward_labels])  # labels are the next tokens already: no shifting
            loss, forward_loss, backward_loss = self._reduce(
                self.word_losses(states, targets, logits), targets, num_items_in_batch
            )
        return self._output(
            loss, forward_loss, backward_loss, logits, base.hidden_states if output_hidden_states else None
        )

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        boundary_labels: torch.LongTensor | None = None,
        return_logits: bool | None = None,
        output_hidden_states: bool | None = None,
        num_items_in_batch: int | torch.Tensor | None = None,
        backward_input_ids: torch.LongTensor | None = None,
        backward_labels: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        head_mask: torch.Tensor | None = None,
        output_attentions: bool | None = None,
    ) -> ElmoForPreTrainingOutput:
        r"""
        Args:
            input_ids: ``(B, W, C)`` character ids from [`ElmoTokenizer`].
            attention_mask: ``(B, W)``, 1 for words (right padding). Default: the non-empty character rows.
            labels: ``(B, W)`` vocabulary ids of the input words themselves (``tokenizer(...,
                return_vocab_ids=True)["vocab_ids"]``; ``-100``: ignored); the head shifts them.
            boundary_labels: ``(B, 2)`` targets at the sentence edges (see [`shift_labels`]); default
                ``<S>`` for the backward direction at the first word, ``</S>`` for the forward one at the last.
            return_logits: return the full-softmax logits ``(B, W, V)`` of each direction. Default: only
                when there are no ``labels``. Costs a ``(B, W, V)`` tensor per direction.
            output_hidden_states: also return the biLM's ``L + 1`` layers (default ``config.output_hidden_states``;
                in stream training, the layers of stream mode, see ``ElmoModel.forward``).
            num_items_in_batch: passed by the Trainer: normalise the summed loss by this count instead of
                taking each direction's mean over this batch.
            backward_input_ids: ``(B, T, C)``: stream training (the original's; ``lm_data.make_stream_windows``
                and ``ElmoLMStreamCollator`` make the batches). ``input_ids`` and ``backward_input_ids`` are then
                the next full windows of each row's forward and backward token streams, ``labels`` and
                ``backward_labels`` ``(B, T)`` the ids of the tokens they predict (not shifted), and the LSTM
                states carry over from the previous batch (see [`stream_hidden_states`]).
            inputs_embeds, position_ids, head_mask, output_attentions: transformers' conventional arguments,
                refused by name unless ``None`` (see [`ElmoModel.forward`]). A language model reads one text:
                there are no ``token_type_ids``.

        Returns:
            [`ElmoForPreTrainingOutput`]; with ``return_dict=False`` a tuple of its non-``None`` fields.
        """
        check_conventional_arguments(input_ids, inputs_embeds, position_ids, head_mask, output_attentions)
        _require_tensors(labels=labels, boundary_labels=boundary_labels, backward_labels=backward_labels)
        if return_logits is None:
            return_logits = labels is None
        if output_hidden_states is None:
            output_hidden_states = self.config.output_hidden_states
        if backward_input_ids is not None:
            return self._stream_forward(
                input_ids,
                backward_input_ids,
                labels,
                backward_labels,
                return_logits,
                num_items_in_batch,
                output_hidden_states,
            )
        if backward_labels is not None:
            raise ValueError("backward_labels are for stream training: give backward_input_ids too")
        base = self.elmo(input_ids, attention_mask=attention_mask, output_hidden_states=True, return_dict=True)
        mask = base.mask.bool()
        states = self._direction_states(base.hidden_states[-1])  # (2, B, W, P)
        logits = self.softmax.logits(states) if return_logits else None  # (2, B, W, V)

        loss = forward_loss = backward_loss = None
        if labels is not None:
            targets = self.lm_targets(labels, mask, boundary_labels)
            losses = self.word_losses(states, targets, logits)  # (2, B, W)
            loss, forward_loss, backward_loss = self._reduce(losses, targets, num_items_in_batch)
        return self._output(
            loss, forward_loss, backward_loss, logits, base.hidden_states if output_hidden_states else None
        )

    @torch.no_grad()
    def sentence_losses(
        self,
        input_ids: torch.LongTensor,
        attention_mask: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        boundary_labels: torch.LongTensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Summed full-softmax losses and target counts per sentence and direction, for exact perplexities.

        Always the full softmax and no dropout (the evaluation objective), whatever the mode.

        Returns:
            ``sums (B, 2)`` and ``counts (B, 2)`` (column 0 forward, 1 backward). Perplexity of a corpus:
            ``exp(sums.sum(0) / counts.sum(0))``.
        """
        if labels is None:
            raise ValueError("sentence_losses needs labels (the word ids of the input words)")
        _require_tensors(labels=labels, boundary_labels=boundary_labels)
        was_training = self.training
        self.eval()
        try:
            base = self.elmo(input_ids, attention_mask=attention_mask, output_hidden_states=True, return_dict=True)
            states = self._direction_states(base.hidden_states[-1])
            targets = self.lm_targets(labels, base.mask.bool(), boundary_labels)
            losses = self.softmax.full_loss(states, targets, reduction="none")
        finally:
            self.train(was_training)
        return losses.sum(dim=2).t(), targets.ne(IGNORE_INDEX).sum(dim=2).t()


__all__ = ["ElmoForPreTraining", "ElmoForPreTrainingOutput", "init_bilm_for_pretraining", "shift_labels"]
