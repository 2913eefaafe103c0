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

Pairs of texts (``token_type_ids`` marking a second text) go through ESIM's pair head instead (``esim_elmo.py``),
the task model of the paper's SNLI result; the regression, single- and multi-label losses are the same.

The head calls its [`ElmoModel`] (``self.elmo``) once per forward pass and reads its outputs (the word ``mask``
and the mix), as ``BertForSequenceClassification`` calls ``self.bert``. What trains is decided by
``requires_grad`` alone: ``freeze_bilm()`` sets it (after ``__init__`` and again after loading, from
``config.freeze_bilm``), and the biLM runs without autograd only when none of its parameters requires grad.
The biLM may run in another precision than the head (``model.elmo.to(torch.bfloat16)``, ``quantize_int8(model)``):
the mix is cast to the head's own dtype (its classifier's); ``hidden_states`` come back as the biLM gives them.

Shapes: B sentences, W words (after padding), C characters per word (50), P = projection_dim,
H = classifier_hidden_size, K = num_labels.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from transformers.modeling_outputs import SequenceClassifierOutput
from transformers.utils import can_return_tuple

from .configuration_elmo import ElmoConfig
from .esim_elmo import ElmoEsimHead
from .graph_path_elmo import in_graph
from .modeling_elmo import ElmoModel, ElmoPreTrainedModel
from .modeling_elmo_tagging import IGNORE_INDEX, ElmoTagEncoder
from .pairs_elmo import pair_layout, split_pairs, split_texts

PROBLEM_TYPES = ("regression", "single_label_classification", "multi_label_classification")


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
        # -inf on padding so that it never wins; a sentence without words would keep -inf: it gets zeros.
        best = states.masked_fill(~keep, float("-inf")).amax(dim=1) if states.shape[1] else states.sum(dim=1)
        pooled.append(best.masked_fill(counts.eq(0), 0.0))
    if pooling in ("max_mean", "mean"):
        pooled.append(states.masked_fill(~keep, 0.0).sum(dim=1) / counts.clamp(min=1).to(states.dtype))
    return torch.cat(pooled, dim=-1) if len(pooled) > 1 else pooled[0]


class ElmoForSequenceClassification(ElmoPreTrainedModel):
    r"""ELMo sentence classifier: one label (or several, or a score) per sentence from a (by default frozen) biLM.

    ``self.elmo`` is an [`ElmoModel`] (``base_model_prefix = "elmo"``) with one scalar mix, so a converted or
    trained ``ElmoModel`` folder loads straight into it; the encoder and the classifier are new:

    ```python
    model = ElmoForSequenceClassification.from_pretrained(
        "elmo-small", id2label={0: "negative", 1: "positive"}, label2id={"negative": 0, "positive": 1}
    )
    ```

    A one-layer BiLSTM (``classifier_hidden_size`` per direction) reads the mix, its states are pooled over the
    words (``classifier_pooling``), and a linear layer gives ``num_labels`` logits after dropout
    (``classifier_dropout``). The loss follows ``config.problem_type`` as in transformers' heads (when it is
    ``None``, the first labelled batch decides and records it: one label -> regression, integer labels ->
    single-label, else multi-label), and adds the mix's L2 penalty (``scalar_mix_l2_coef``).

    With ``config.freeze_bilm`` (default) the character encoder and the biLSTM layers get ``requires_grad=False``
    after ``__init__`` and again after ``from_pretrained``; they then run without autograd. The scalar mix, the
    encoder and the classifier train. ``model.freeze_bilm(False)`` (or ``model.requires_grad_(True)``) after loading
    fine-tunes the whole biLM too.

    Pairs of texts (premise and hypothesis, two questions: ``tokenizer(text, text_pair)``, whose ``token_type_ids``
    mark the second text) take ESIM's pair head instead (``pair_head``, see ``esim_elmo.py``): the biLM reads each
    text on its own, the mix and the same BiLSTM encode both, then soft alignment, composition, max and mean pooling
    of both texts and an MLP give the logits. Rows without a second text keep the sentence head, so single
    sentences give the same outputs with or without all-zero ``token_type_ids``. The pair head's weights are
    optional at load (``_keys_to_ignore_on_load_missing``): a sentence classifier saved before it existed loads
    silently, as before; its pair head is then untrained, so fine-tune it on pairs before giving it pairs.
    """

    # The ESIM pair head is used only for pairs: a sentence classifier saved without it loads without a report.
    _keys_to_ignore_on_load_missing = [r"(^|\.)pair_head\."]

    def __init__(self, config: ElmoConfig):
        super().__init__(config)
        config.validate_classifier()  # again: the config may have been changed since it was built
        if config.stateful:
            raise ValueError(
                "a sentence classifier needs a stateless biLM (stateful=True makes labels depend on earlier "
                "batches): load it with stateful=False"
            )
        self.num_labels = config.num_labels
        # The biLM computes exactly the one mix the head reads (config.num_output_representations is not used).
        self.elmo = ElmoModel(config, num_output_representations=1)
        self.encoder = ElmoTagEncoder(config.hidden_size, config.classifier_hidden_size, 1, 0.0)
        pooled_size = 2 * config.classifier_hidden_size * (2 if config.classifier_pooling == "max_mean" else 1)
        self.dropout = nn.Dropout(config.classifier_dropout)
        self.classifier = nn.Linear(pooled_size, config.num_labels)
        # Pairs of texts (token_type_ids): ESIM's inference, composition and MLP (esim_elmo.py) after the encoder.
        self.pair_head = ElmoEsimHead(config.classifier_hidden_size, config.num_labels, config.classifier_dropout)
        self.post_init()
        self.apply_freezing()

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
            labels: by ``config.problem_type``: ``(B,)`` class ids in ``[0, K)``, ``-100`` for a sentence left out of
                the loss (single-label), ``(B, K)`` 0/1 targets (multi-label), or ``(B,)`` / ``(B, K)`` numbers
                (regression).
            output_hidden_states: return the biLM's ``L + 1`` layers as ``hidden_states`` (default
                ``config.output_hidden_states``).
            vocab_ids: ``(B, W)`` word ids, for a biLM with a word input (ELMoForManyLangs; its tokenizer returns
                them); ignored otherwise.
            token_type_ids, inputs_embeds, position_ids, head_mask, output_attentions: as in [`ElmoModel.forward`]
                (passed down to the biLM, which uses ``token_type_ids`` for pairs of texts and refuses the rest by
                name unless ``None``).

        Returns:
            [`SequenceClassifierOutput`] with ``loss`` (with ``labels``) and ``logits`` ``(B, K)``.
        """
        if labels is not None and not isinstance(labels, torch.Tensor):  # before the biLM runs, as the heads do
            raise TypeError(f"labels must be a torch.Tensor (e.g. torch.tensor(labels)), got {type(labels).__name__}")
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
        mix = base.elmo.to(self.classifier.weight.dtype)  # (B, W, 2P) in the head's dtype (the biLM's may differ)
        logits = self._logits(mix, mask, token_type_ids)  # (B, K)

        loss = None
        if labels is not None:
            loss = self._classification_loss(logits, labels) + self.elmo.mix_l2_penalty()
        return SequenceClassifierOutput(loss=loss, logits=logits, hidden_states=base.hidden_states)

    def _logits(self, mix: torch.Tensor, mask: torch.Tensor, token_type_ids: torch.Tensor | None) -> torch.Tensor:
        """``(B, K)`` logits from the mix ``(B, W, 2P)``: the sentence head for rows with one text, ESIM's pair head
        (``esim_elmo.py``) for rows whose ``token_type_ids`` ``(B, W)`` mark a second text."""

        def single() -> torch.Tensor:
            states = self.encoder(mix, mask.sum(dim=1))  # (B, W, 2H), zero past each sentence's end
            pooled = pool_words(states, mask, self.config.classifier_pooling)  # (B, 2H) or (B, 4H)
            return self.classifier(self.dropout(pooled))

        if token_type_ids is None:
            return single()
        layout = pair_layout(token_type_ids, mask)  # first texts in rows 0..B-1, second texts in rows B..2B-1
        is_pair = split_texts(layout.split_mask)[1].any(dim=1)  # (B,)
        # Single sentences with all-zero token_type_ids: the sentence head alone (in a graph, which cannot branch on
        # values, both heads run and each row takes its own).
        if not in_graph() and not bool(is_pair.any()):
            return single()
        encoded = self.encoder(split_pairs(mix, layout), layout.split_mask.sum(dim=1))  # (2B, W, 2H)
        composed = self.pair_head.compose(encoded, layout.split_mask)  # (2B, W, 2H)
        pooled = pool_words(composed, layout.split_mask, "max_mean")  # (2B, 4H), as ESIM pools
        logits = self.pair_head.classify(torch.cat(split_texts(pooled), dim=-1))  # (B, K)
        if not in_graph() and bool(is_pair.all()):
            return logits
        return torch.where(is_pair.unsqueeze(1), logits, single())

    def _classification_loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """The loss of ``config.problem_type``, decided and recorded as transformers' heads do when it is None."""
        config, batch, k = self.config, logits.shape[0], self.num_labels
        problem = config.problem_type
        if problem is None:
            # As BertForSequenceClassification: recorded in the config, so that a saved model's pipeline applies
            # the matching score function (sigmoid for multi-label, softmax for single-label).
            if k == 1:
                problem = "regression"
            elif labels.dtype in (torch.long, torch.int):
                problem = "single_label_classification"
            else:
                problem = "multi_label_classification"
            config.problem_type = problem
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
