"""Sentence classification (e.g. sentiment) on top of a frozen ELMo biLM: ``ElmoForSequenceClassification``.

The recipe, per sentence of ``n`` words::

    ELMo_k    a learned scalar mix of the biLM's L + 1 layers (ElmoScalarMix, dropout on its output)
    h_k       = BiLSTM(ELMo_1 .. ELMo_n)                          (classifier_hidden_size per direction)
    s         = [max_k h_k; mean_k h_k]                           (classifier_pooling: "max_mean", "max", "mean")
    logits    = Linear(dropout(s))                                (B, K)
    loss      = MSE / cross-entropy / BCE-with-logits by ``problem_type``  +  scalar_mix_l2_coef * sum ||w||^2

This is the simplest faithful way to use ELMo for a sentence task: the vectors feed a task encoder whose states
are pooled. The paper's SST-5 result (section 4, Table 1) used a larger model, the biattentive classification
network (BCN) of McCann et al. (2017), which is not built here.

With ``config.classifier_head="pair"`` the model reads pairs of texts (``token_type_ids`` marking the second text)
with ESIM's pair head instead (``esim_elmo.py``), the task model of the paper's SNLI result; the regression, single-
and multi-label losses are the same. A model holds one head, so every weight it holds trains on every valid batch
(``DistributedDataParallel`` with gradient checkpointing stops on a weight without a gradient).

The head calls its [`ElmoModel`] (``self.elmo``) once per forward pass and reads its outputs (the word ``mask``
and the mix), as ``BertForSequenceClassification`` calls ``self.bert``. What trains is decided by
``requires_grad`` alone: ``freeze_bilm()`` sets it (after ``__init__`` and again after loading, from
``config.freeze_bilm``), and the biLM runs without autograd only when none of its parameters requires grad.
The biLM may run in another precision than the head (``model.elmo.to(torch.bfloat16)``, ``quantize_int8(model)``):
the mix is cast to the head's own dtype (its output layer's); ``hidden_states`` come back as the biLM gives them.

Shapes: B rows (sentences, or pairs of texts), W words (after padding), C characters per word (50), P = projection_dim,
H = classifier_hidden_size, K = num_labels.
"""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F
from torch import nn
from transformers.modeling_outputs import SequenceClassifierOutput
from transformers.utils import can_return_tuple, logging

from .checks_elmo import checkpoint_files
from .configuration_elmo import ElmoConfig
from .esim_elmo import ElmoEsimHead
from .graph_path_elmo import in_graph
from .modeling_elmo import ElmoModel, ElmoPreTrainedModel
from .modeling_elmo_tagging import IGNORE_INDEX, ElmoTagEncoder
from .pairs_elmo import check_token_type_ids, pair_layout, split_pairs, split_texts

logger = logging.get_logger(__name__)

PROBLEM_TYPES = ("regression", "single_label_classification", "multi_label_classification")
# The weights of each head (config.classifier_head) besides the shared encoder, by key prefix.
HEAD_PREFIXES = {"sentence": "classifier.", "pair": "pair_head."}
HEAD_NAMES = {"sentence": "the sentence head (classifier.*)", "pair": "ESIM's pair head (pair_head.*)"}


def pool_words(states: torch.Tensor, mask: torch.Tensor, pooling: str) -> torch.Tensor:
    """One vector per sentence from its words' vectors: max and/or mean over the words.

    Args:
        states: ``(B, W, F)`` word vectors (anything past a sentence's end is ignored).
        mask: ``(B, W)`` bool, True for words.
        pooling: ``"max_mean"`` (``[max; mean]``), ``"max"`` or ``"mean"``.

    Returns:
        ``(B, 2F)`` for ``"max_mean"``, else ``(B, F)``; zero for a sentence without words.
    """
    keep = mask.unsqueeze(-1)  # (B, W, 1)
    counts = mask.sum(dim=1, keepdim=True)  # (B, 1)
    pooled = []
    if pooling in ("max_mean", "max"):
        # -inf on padding so that it never wins; a sentence without words would keep -inf: it gets zeros. max, not
        # amax, whose gradient divides by the count of entries equal to the max (0 in inductor's bfloat16 kernels).
        best = states.masked_fill(~keep, float("-inf")).max(dim=1).values if states.shape[1] else states.sum(dim=1)
        pooled.append(best.masked_fill(counts.eq(0), 0.0))
    if pooling in ("max_mean", "mean"):
        pooled.append(states.masked_fill(~keep, 0.0).sum(dim=1) / counts.clamp(min=1).to(states.dtype))
    return torch.cat(pooled, dim=-1) if len(pooled) > 1 else pooled[0]


class ElmoForSequenceClassification(ElmoPreTrainedModel):
    r"""ELMo sentence classifier: one label (or several, or a score) per sentence, or per pair of texts, from a (by
    default frozen) biLM.

    ``self.elmo`` is an [`ElmoModel`] (``base_model_prefix = "elmo"``) with one scalar mix, so a converted or
    trained ``ElmoModel`` folder loads straight into it; the encoder and the head are new:

    ```python
    model = ElmoForSequenceClassification.from_pretrained(
        "elmo-small", id2label={0: "negative", 1: "positive"}, label2id={"negative": 0, "positive": 1}
    )
    ```

    A one-layer BiLSTM (``classifier_hidden_size`` per direction) reads the mix. ``config.classifier_head`` chooses
    the head after it, and the model holds that head's weights only:

    - ``"sentence"`` (default): one text per row. The BiLSTM's states are pooled over the words
      (``classifier_pooling``), and a linear layer gives ``num_labels`` logits after dropout (``classifier_dropout``).
      ``token_type_ids`` that mark a second text are refused (``ValueError`` naming the fix); all-zero ones are
      accepted (single sentences, as ``tokenizer(text)`` may give them).
    - ``"pair"``: two texts per row (premise and hypothesis, two questions: ``tokenizer(text, text_pair)``, whose
      ``token_type_ids`` mark the second text), ESIM's pair head (``pair_head``, see ``esim_elmo.py``): the biLM
      reads each text on its own, the mix and the same BiLSTM encode both, then soft alignment, composition, max and
      mean pooling of both texts and an MLP give the logits. A row without a second text (or no ``token_type_ids``)
      is refused. ``from_pretrained(folder, classifier_head="pair")`` builds it on a biLM folder, for NLI and for
      ``pipeline("zero-shot-classification")``.

    The loss follows ``config.problem_type`` as in transformers' heads (when it is ``None``, the first labelled batch
    decides and records it, before the biLM runs, so that a compiled call records it too: one label -> regression,
    integer labels -> single-label, else multi-label), and adds the mix's L2 penalty (``scalar_mix_l2_coef``).

    With ``config.freeze_bilm`` (default) the character encoder and the biLSTM layers get ``requires_grad=False``
    after ``__init__`` and again after ``from_pretrained``; they then run without autograd. The scalar mix, the
    encoder and the head train. ``model.freeze_bilm(False)`` (or ``model.requires_grad_(True)``) after loading
    fine-tunes the whole biLM too.

    Folders saved before ``classifier_head`` existed hold both heads (``classifier.*`` and ``pair_head.*``); they load
    the head their config names (``"sentence"`` unless told otherwise), with a warning that says how to load the
    other. A pair model loaded from a folder without pair-head weights has a new, untrained pair head: the load
    report says so, and the first evaluation-mode call warns (once) until it is trained.
    """

    # A folder saved with both heads (before config.classifier_head) holds the other head's weights too: ignored by
    # transformers' load report, and named by from_pretrained's own message (which head it holds, how to load it).
    _keys_to_ignore_on_load_unexpected = [r"^(elmo\.)?pair_head\.", r"^(elmo\.)?classifier\."]

    def __init__(self, config: ElmoConfig):
        super().__init__(config)
        config.validate_classifier()  # again: the config may have been changed since it was built
        if config.stateful:
            raise ValueError(
                "a sentence classifier needs a stateless biLM (stateful=True makes labels depend on earlier "
                "batches): load it with stateful=False"
            )
        self.num_labels = config.num_labels
        self.head = config.classifier_head  # fixed with the weights: a later change of the config does not apply
        # Set by from_pretrained to the folder when it held no pair-head weights: warn (once) when used untrained.
        self.untrained_pair_head: str | None = None
        # The biLM computes exactly the one mix the head reads (config.num_output_representations is not used).
        self.elmo = ElmoModel(config, num_output_representations=1)
        self.encoder = ElmoTagEncoder(config.hidden_size, config.classifier_hidden_size, 1, 0.0)
        if self.head == "pair":
            # ESIM's inference, composition and MLP (esim_elmo.py) after the encoder.
            self.pair_head = ElmoEsimHead(config.classifier_hidden_size, config.num_labels, config.classifier_dropout)
        else:
            pooled_size = 2 * config.classifier_hidden_size * (2 if config.classifier_pooling == "max_mean" else 1)
            self.dropout = nn.Dropout(config.classifier_dropout)
            self.classifier = nn.Linear(pooled_size, config.num_labels)
        self.post_init()
        self.apply_freezing()

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *model_args, **kwargs):
        """As [`ElmoPreTrainedModel.from_pretrained`]; then, from the checkpoint's key names, a warning when it holds
        another head than ``config.classifier_head`` (or both, as folders saved before that field did), saying how
        to load the other. ``classifier_head="pair"`` among the arguments builds the pair head."""
        want_info = kwargs.pop("output_loading_info", False)
        model, info = super().from_pretrained(
            pretrained_model_name_or_path, *model_args, output_loading_info=True, **kwargs
        )
        model._report_heads(pretrained_model_name_or_path, kwargs)
        return (model, info) if want_info else model

    def _report_heads(self, name, kwargs: dict) -> None:
        """Compare the heads the checkpoint holds with the one built; warn about the difference (see
        [`from_pretrained`])."""
        state_dict = kwargs.get("state_dict")
        if state_dict is not None:
            keys = list(state_dict)
        else:
            from safetensors import safe_open

            keys = []
            for path in checkpoint_files(name, kwargs):
                with safe_open(path, framework="pt") as handle:
                    keys.extend(handle.keys())
        keys = [key.removeprefix(self.base_model_prefix + ".") for key in keys]
        held = [head for head, prefix in HEAD_PREFIXES.items() if any(key.startswith(prefix) for key in keys)]
        source = os.fspath(name) if isinstance(name, (str, os.PathLike)) else "the given state_dict"
        self.untrained_pair_head = source if self.head == "pair" and "pair" not in held else None
        other = "pair" if self.head == "sentence" else "sentence"
        if len(held) == 2:
            logger.warning(
                f"{source} holds two heads, {HEAD_NAMES['sentence']} and {HEAD_NAMES['pair']}, as classifiers saved "
                f"before config.classifier_head existed do; loaded {HEAD_NAMES[self.head]}, as classifier_head="
                f"{self.head!r} says. For the other: from_pretrained(..., classifier_head={other!r}). Only the head "
                "trained on your task (sentences or pairs) is meaningful; save_pretrained keeps the loaded one alone"
            )
        elif held == [other]:
            logger.warning(
                f"{source} holds {HEAD_NAMES[other]} only; loaded with a new, untrained {HEAD_NAMES[self.head]} "
                f"(classifier_head={self.head!r}): fine-tune it, or load the saved head with "
                f"from_pretrained(..., classifier_head={other!r})"
            )

    def apply_freezing(self) -> None:
        """``freeze_bilm(config.freeze_bilm)``: run after ``__init__`` and, by ``from_pretrained``, after loading."""
        self.freeze_bilm(self.config.freeze_bilm)

    def freeze_bilm(self, freeze: bool = True) -> None:
        """Freeze (or unfreeze) the character encoder and the biLSTM layers; the scalar mix stays trainable.

        Only ``requires_grad`` changes: the config is left alone (set ``model.config.freeze_bilm`` before saving to
        have a saved model load unfrozen).
        """
        for module in (self.elmo.char_cnn, self.elmo.bilm):
            for parameter in module.parameters():
                parameter.requires_grad_(not freeze)

    def get_input_embeddings(self) -> nn.Module:
        return self.elmo.get_input_embeddings()

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_hidden_states: bool | None = None,
        vocab_ids: torch.LongTensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        head_mask: torch.Tensor | None = None,
        output_attentions: bool | None = None,
    ) -> SequenceClassifierOutput:
        r"""
        Args:
            input_ids: ``(B, W, C)`` character ids from [`ElmoTokenizer`] (rows of zeros for padding).
            attention_mask: ``(B, W)``, 1 for words, right-padded. Default: the non-zero rows of ``input_ids``.
            labels: by ``config.problem_type``: ``(B,)`` class ids in ``[0, K)``, ``-100`` for a row left out of
                the loss (single-label), ``(B, K)`` 0/1 targets (multi-label), or ``(B,)`` / ``(B, K)`` numbers
                (regression).
            output_hidden_states: return the biLM's ``L + 1`` layers as ``hidden_states`` (default
                ``config.output_hidden_states``).
            vocab_ids: ``(B, W)`` word ids, for a biLM with a word input (ELMoForManyLangs; its tokenizer returns
                them); ignored otherwise.
            token_type_ids: ``(B, W)``, 0 for the first text's words and 1 for the second's. The pair head
                (``classifier_head="pair"``) needs them, with a second text in every row; the sentence head accepts
                them all zero at the words (one text per row).
            inputs_embeds, position_ids, head_mask, output_attentions: as in [`ElmoModel.forward`] (refused by name
                unless ``None``).

        Returns:
            [`SequenceClassifierOutput`] with ``loss`` (with ``labels``) and ``logits`` ``(B, K)``.
        """
        if labels is not None and not isinstance(labels, torch.Tensor):  # before the biLM runs, as the heads do
            raise TypeError(f"labels must be a torch.Tensor (e.g. torch.tensor(labels)), got {type(labels).__name__}")
        if self.head == "pair" and token_type_ids is None:
            raise ValueError(
                "this classifier holds ESIM's pair head (classifier_head='pair'), which reads two texts per row: give "
                "token_type_ids marking the second text (tokenizer(text, text_pair) returns them), or load the "
                "sentence head for single sentences: from_pretrained(..., classifier_head='sentence')"
            )
        # Decided (and recorded in the config) before the biLM runs: torch.compile drops a config change made after
        # the recurrences' scan (measured, torch 2.13), and the decision needs only num_labels and the labels' dtype.
        problem = self._problem_type(labels) if labels is not None else None
        if output_hidden_states is None:
            output_hidden_states = self.config.output_hidden_states
        # Down into the biLM once: the word mask and the mix come back.
        base = self.elmo(
            input_ids,
            attention_mask=attention_mask,
            output_hidden_states=output_hidden_states,
            return_dict=True,
            vocab_ids=vocab_ids,
            token_type_ids=token_type_ids,
            inputs_embeds=inputs_embeds,
            position_ids=position_ids,
            head_mask=head_mask,
            output_attentions=output_attentions,
        )
        mask = base.mask.bool()  # (B, W)
        output = self.pair_head.output if self.head == "pair" else self.classifier
        mix = base.elmo.to(output.weight.dtype)  # (B, W, 2P) in the head's dtype (the biLM's may differ)
        if self.head == "pair":
            logits = self._pair_logits(mix, mask, token_type_ids)  # (B, K)
        else:
            logits = self._sentence_logits(mix, mask, token_type_ids)  # (B, K)

        loss = None
        if labels is not None:
            loss = self._classification_loss(logits, labels, problem) + self.elmo.mix_l2_penalty()
        return SequenceClassifierOutput(loss=loss, logits=logits, hidden_states=base.hidden_states)

    def _sentence_logits(
        self, mix: torch.Tensor, mask: torch.Tensor, token_type_ids: torch.Tensor | None
    ) -> torch.Tensor:
        """``(B, K)`` logits of the sentence head from the mix ``(B, W, 2P)`` and the word mask ``(B, W)`` bool;
        ``token_type_ids`` ``(B, W)``, if given, must mark no second text."""
        if token_type_ids is not None:
            second = check_token_type_ids(token_type_ids, mask).eq(1).any(dim=1)  # (B,)
            message = (
                "token_type_ids mark a second text, but this classifier holds the sentence head "
                "(classifier_head='sentence'), which reads one text per row: for pairs of texts load ESIM's pair "
                "head, from_pretrained(..., classifier_head='pair') (a new head: fine-tune it on pairs; for "
                "transformers' example scripts, --config_name FOLDER of a config with classifier_head='pair', see "
                "docs/training.md), or give single sentences"
            )
            if in_graph():  # checked when the graph runs (RuntimeError), without reading values into Python
                torch._assert_async(second.logical_not().all(), message)
            elif bool(second.any()):
                raise ValueError(f"{message} (rows {second.nonzero().flatten().tolist()[:8]})")
        states = self.encoder(mix, mask.sum(dim=1))  # (B, W, 2H), zero past each sentence's end
        pooled = pool_words(states, mask, self.config.classifier_pooling)  # (B, 2H) or (B, 4H)
        return self.classifier(self.dropout(pooled))

    def _pair_logits(self, mix: torch.Tensor, mask: torch.Tensor, token_type_ids: torch.Tensor) -> torch.Tensor:
        """``(B, K)`` logits of ESIM's pair head (``esim_elmo.py``) from the mix ``(B, W, 2P)``, the word mask
        ``(B, W)`` bool and ``token_type_ids`` ``(B, W)``, which must mark a second text in every row."""
        layout = pair_layout(token_type_ids, mask)  # first texts in rows 0..B-1, second texts in rows B..2B-1
        has_second = split_texts(layout.split_mask)[1].any(dim=1)  # (B,)
        message = (
            "this classifier holds ESIM's pair head (classifier_head='pair'), which reads two texts per row, but a "
            "row has no second text (no word with token_type_ids 1): give every row a pair, tokenizer(text, "
            "text_pair), or load the sentence head for single sentences: from_pretrained(..., "
            "classifier_head='sentence')"
        )
        if in_graph():
            torch._assert_async(has_second.all(), message)
        else:
            if not bool(has_second.all()):
                raise ValueError(f"{message} (rows {has_second.logical_not().nonzero().flatten().tolist()[:8]})")
            self._warn_if_untrained()
        encoded = self.encoder(split_pairs(mix, layout), layout.split_mask.sum(dim=1))  # (2B, W, 2H)
        composed = self.pair_head.compose(encoded, layout.split_mask)  # (2B, W, 2H)
        pooled = pool_words(composed, layout.split_mask, "max_mean")  # (2B, 4H), as ESIM pools
        return self.pair_head.classify(torch.cat(split_texts(pooled), dim=-1))  # (B, K)

    def _warn_if_untrained(self) -> None:
        """Warn once when a pair head that no checkpoint gave (``untrained_pair_head``) predicts; a training-mode
        call with autograd on is its fine-tuning, which clears the flag."""
        if not self.untrained_pair_head:
            return
        if self.training and torch.is_grad_enabled():
            self.untrained_pair_head = None
            return
        logger.warning_once(
            f"ESIM's pair head of this classifier is untrained: {self.untrained_pair_head} held no pair-head weights "
            "(pair_head.*), so its predictions (zero-shot-classification's too) are random. Fine-tune it on pairs "
            "first, or load a folder whose pair head was trained"
        )

    def _problem_type(self, labels: torch.Tensor) -> str:
        """``config.problem_type``, decided and recorded as transformers' heads do when it is None."""
        problem = self.config.problem_type
        if problem is None:
            # As BertForSequenceClassification: recorded in the config, so that a saved model's pipeline applies
            # the matching score function (sigmoid for multi-label, softmax for single-label).
            if self.num_labels == 1:
                problem = "regression"
            elif labels.dtype in (torch.long, torch.int):
                problem = "single_label_classification"
            else:
                problem = "multi_label_classification"
            self.config.problem_type = problem
        return problem

    def _classification_loss(self, logits: torch.Tensor, labels: torch.Tensor, problem: str) -> torch.Tensor:
        """The loss of ``problem`` (``config.problem_type``, see [`_problem_type`]) for ``(B, K)`` logits."""
        batch, k = logits.shape[0], self.num_labels
        if problem == "regression":
            if labels.numel() != logits.numel():
                raise ValueError(
                    f"regression labels must hold one number per output: shape ({batch},) or ({batch}, {k}) for "
                    f"num_labels={k}, got {tuple(labels.shape)}"
                )
            return F.mse_loss(logits.reshape(-1), labels.reshape(-1).to(logits.dtype))
        if problem == "single_label_classification":
            if labels.is_floating_point() or labels.numel() != batch:
                raise ValueError(
                    f"single-label classification labels must be ({batch},) integer class ids, got "
                    f"{tuple(labels.shape)} {labels.dtype}"
                )
            labels = labels.reshape(-1)
            # -100 marks a sentence without a label, left out of the loss as by transformers' heads.
            bad = ((labels < 0) & labels.ne(IGNORE_INDEX)) | (labels >= k)
            if in_graph():  # checked when the graph runs (RuntimeError), without reading values into Python
                torch._assert_async(bad.logical_not().all(), f"labels must be class ids in [0, {k}) or -100")
            elif bool(bad.any()):
                raise ValueError(
                    f"labels must be class ids in [0, {k}), got {labels.unique().tolist()[:8]} ({IGNORE_INDEX} marks "
                    "a sentence without a label)"
                )
            return F.cross_entropy(logits.reshape(-1, k), labels, ignore_index=IGNORE_INDEX)
        if problem == "multi_label_classification":
            if tuple(labels.shape) != tuple(logits.shape):
                raise ValueError(
                    f"multi-label classification labels must be ({batch}, {k}) targets in [0, 1], got "
                    f"{tuple(labels.shape)}"
                )
            # BCE of a target outside [0, 1] (or NaN) is still a number, but no probability: refused, not trained on.
            outside = ~((labels >= 0) & (labels <= 1))
            if in_graph():
                torch._assert_async(outside.logical_not().all(), "multi-label classification targets must be in [0, 1]")
            elif bool(outside.any()):
                raise ValueError(
                    f"multi-label classification targets must be in [0, 1], got {labels[outside][:5].tolist()}"
                )
            return F.binary_cross_entropy_with_logits(logits, labels.to(logits.dtype))
        raise ValueError(f"problem_type must be one of {', '.join(PROBLEM_TYPES)} or None, got {problem!r}")


__all__ = ["ElmoForSequenceClassification", "pool_words"]
