"""Extractive question answering on top of a frozen ELMo biLM: ``ElmoForQuestionAnswering``, a BiDAF-style head.

The paper's SQuAD result (section 4, Table 1) added ELMo to BiDAF (Seo et al., ICLR 2017). Per (question, context)
pair, given as ``tokenizer(question, context)`` (``token_type_ids`` 0 for the question's words, 1 for the
context's), each text goes through the biLM on its own and the scalar mix; then, with ``d =
classifier_hidden_size``::

    u_j, h_t   = BiLSTM(ELMo)                                      contextual layer, shared by both texts (2d)
    S_tj       = w_S . [h_t; u_j; h_t * u_j]                       similarity (trilinear)
    ~u_t       = sum_j softmax_j(S_tj) u_j                         context-to-question attention
    ~h         = sum_t softmax_t(max_j S_tj) h_t                   question-to-context attention (tiled over t)
    g_t        = [h_t; ~u_t; h_t * ~u_t; h_t * ~h]                 (8d)
    m_t        = BiLSTM_2(g_t)                                     modelling layer, two layers (2d)
    start_t    = w_1 . [g_t; m_t],   end_t = w_2 . [g_t; BiLSTM(m_t)]

The logits are returned in transformers' layout, ``(B, W)`` over the row's words (the question's, then the
context's), as ``BertForQuestionAnswering`` gives them over its tokens: real scores at the context's words, the
dtype's lowest value at the question's words and at padding, so that a span can only be read from the context
(run_qa.py's post-processing also skips positions without an offset). The loss is transformers' (cross-entropy on
``start_positions`` and ``end_positions``, word indices in the row, averaged); a position outside the context (run_qa
labels a feature whose window misses the answer with position 0) is not trained on.

The head calls its [`ElmoModel`] (``self.elmo``) once per forward pass, as ``BertForQuestionAnswering`` calls
``self.bert``. With ``config.freeze_bilm`` (default) the biLM's character encoder and LSTMs do not train.

Shapes: B pairs, W words in a row (after padding), C characters per word, P = projection_dim, d =
classifier_hidden_size.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from transformers import initialization as init
from transformers.modeling_outputs import QuestionAnsweringModelOutput
from transformers.utils import can_return_tuple

from .configuration_elmo import ElmoConfig
from .modeling_elmo import ElmoModel, ElmoPreTrainedModel
from .modeling_elmo_tagging import ElmoTagEncoder
from .pairs_elmo import masked_softmax, merge_pairs, pair_layout, split_pairs, split_texts


class ElmoBidafAttention(nn.Module):
    """BiDAF's attention flow layer: context ``h`` ``(B, T, 2d)`` and question ``u`` ``(B, J, 2d)`` (with their
    masks ``(B, T)``, ``(B, J)`` bool) -> ``g`` ``(B, T, 8d)`` ``[h; ~u; h * ~u; h * ~h]``."""

    def __init__(self, width: int):
        super().__init__()
        self.context_weight = nn.Linear(width, 1)  # w_S on h (its bias is the similarity's)
        self.question_weight = nn.Linear(width, 1, bias=False)  # w_S on u
        self.product_weight = nn.Parameter(torch.zeros(width))  # w_S on h * u

    def forward(self, h: torch.Tensor, u: torch.Tensor, h_mask: torch.Tensor, u_mask: torch.Tensor) -> torch.Tensor:
        similarity = (  # (B, T, J)
            self.context_weight(h)
            + self.question_weight(u).transpose(1, 2)
            + torch.bmm(h * self.product_weight, u.transpose(1, 2))
        )
        attended_u = torch.bmm(masked_softmax(similarity, u_mask.unsqueeze(1), dim=2), u)  # (B, T, 2d): ~u
        # max, not amax: amax's gradient divides by the count of entries equal to the max, which inductor's bfloat16
        # kernels (the entries recomputed in float32) can make 0, and compiled training under autocast got NaN.
        best = similarity.masked_fill(~u_mask.unsqueeze(1), torch.finfo(similarity.dtype).min).max(dim=2).values
        attended_h = torch.bmm(masked_softmax(best, h_mask, dim=1).unsqueeze(1), h)  # (B, 1, 2d): ~h
        return torch.cat([h, attended_u, h * attended_u, h * attended_h], dim=-1)


class ElmoForQuestionAnswering(ElmoPreTrainedModel):
    r"""ELMo extractive question answering: the answer span's start and end word in the context, with a BiDAF-style
    head (see the module's docstring) on a (by default frozen) biLM.

    ``self.elmo`` is an [`ElmoModel`] (``base_model_prefix = "elmo"``) with one scalar mix, so a biLM folder loads
    straight into it; the head is new::

        model = AutoModelForQuestionAnswering.from_pretrained(folder)
        batch = tokenizer(question, context, return_tensors="pt")  # token_type_ids: 0 question, 1 context
        out = model(**batch)  # start_logits, end_logits: (B, W), over the context's words

    ``classifier_hidden_size`` (d) sets the LSTMs' width per direction and ``classifier_dropout`` the dropout.
    """

    def __init__(self, config: ElmoConfig):
        super().__init__(config)
        if config.stateful:
            raise ValueError("question answering needs a stateless biLM: load it with stateful=False")
        hidden = config.classifier_hidden_size
        self.elmo = ElmoModel(config, num_output_representations=1)
        self.encoder = ElmoTagEncoder(config.hidden_size, hidden, 1, 0.0)  # contextual layer, both texts
        self.attention = ElmoBidafAttention(2 * hidden)
        self.modelling = ElmoTagEncoder(8 * hidden, hidden, 2, config.classifier_dropout)
        self.end_encoder = ElmoTagEncoder(2 * hidden, hidden, 1, 0.0)
        self.start_output = nn.Linear(10 * hidden, 1)
        self.end_output = nn.Linear(10 * hidden, 1)
        self.dropout = nn.Dropout(config.classifier_dropout)
        self.post_init()
        self.apply_freezing()

    def apply_freezing(self) -> None:
        """Freeze the biLM's character encoder and LSTMs when ``config.freeze_bilm`` (after ``__init__`` and after
        loading); the scalar mix and the head train."""
        for module in (self.elmo.char_cnn, self.elmo.bilm):
            for parameter in module.parameters():
                parameter.requires_grad_(not self.config.freeze_bilm)

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, ElmoBidafAttention):  # its bare weight vector; the Linear layers are transformers'
            init.normal_(module.product_weight, mean=0.0, std=self.config.initializer_range)
        else:
            super()._init_weights(module)

    def get_input_embeddings(self) -> nn.Module:
        return self.elmo.get_input_embeddings()

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        start_positions: torch.Tensor | None = None,
        end_positions: torch.Tensor | None = None,
        output_hidden_states: bool | None = None,
        vocab_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        head_mask: torch.Tensor | None = None,
        output_attentions: bool | None = None,
    ) -> QuestionAnsweringModelOutput:
        r"""
        Args:
            input_ids: ``(B, W, C)`` character ids of ``tokenizer(question, context)`` (rows of zeros for padding).
            attention_mask: ``(B, W)``, 1 for words, right-padded.
            token_type_ids: ``(B, W)``, 0 for the question's words, 1 for the context's (required).
            start_positions, end_positions: ``(B,)`` word indices in the row of the answer's first and last word;
                rows whose positions are not context words add no loss.
            output_hidden_states, vocab_ids, inputs_embeds, position_ids, head_mask, output_attentions: as in
                [`ElmoModel.forward`].

        Returns:
            [`QuestionAnsweringModelOutput`]: ``start_logits``, ``end_logits`` ``(B, W)`` (the lowest value of the
            dtype outside the context), and ``loss`` with the positions.
        """
        if token_type_ids is None:
            raise ValueError(
                "question answering reads a (question, context) pair: encode it with tokenizer(question, context), "
                "whose token_type_ids (0 question, 1 context) the model needs. Under PEFT, TaskType.QUESTION_ANS's "
                "wrapper (PeftModelForQuestionAnswering) drops token_type_ids before the model sees them: wrap the "
                "head without a task_type (LoraConfig(task_type=None, modules_to_save=[...]), docs/training.md)"
            )
        self._check_positions(start_positions, end_positions, token_type_ids.shape[0])
        base = self.elmo(
            input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            output_hidden_states=output_hidden_states,
            vocab_ids=vocab_ids,
            inputs_embeds=inputs_embeds,
            position_ids=position_ids,
            head_mask=head_mask,
            output_attentions=output_attentions,
            return_dict=True,
        )
        mask = base.mask.bool()  # (B, W)
        layout = pair_layout(token_type_ids, mask)  # questions in rows 0..B-1, contexts in rows B..2B-1
        mix = split_pairs(base.elmo.to(self.start_output.weight.dtype), layout)  # (2B, W, 2P)
        encoded = self.encoder(mix, layout.split_mask.sum(dim=1))  # the mix has its dropout  # (2B, W, 2d)
        u, h = split_texts(encoded)
        u_mask, h_mask = split_texts(layout.split_mask)
        lengths = h_mask.sum(dim=1)
        g = self.attention(h, u, h_mask, u_mask)  # (B, W, 8d)
        m = self.modelling(g, lengths)  # (B, W, 2d)
        m_end = self.end_encoder(self.dropout(m), lengths)  # (B, W, 2d)
        start = self.start_output(self.dropout(torch.cat([g, m], dim=-1))).squeeze(-1)  # (B, W) in context words
        end = self.end_output(self.dropout(torch.cat([g, m_end], dim=-1))).squeeze(-1)
        context = layout.mask & token_type_ids.eq(1)  # (B, W): the context's words in the row
        lowest = torch.finfo(start.dtype).min
        # Back from context positions to the row's positions (the question's rows of the split are zeros).
        start_logits, end_logits = (
            merge_pairs(torch.cat([torch.zeros_like(x), x]), layout).masked_fill(~context, lowest) for x in (start, end)
        )

        loss = None
        if start_positions is not None and end_positions is not None:
            loss = (
                self._span_loss(start_logits, start_positions, context)
                + self._span_loss(end_logits, end_positions, context)
            ) / 2
            loss = loss + self.elmo.mix_l2_penalty()
        return QuestionAnsweringModelOutput(
            loss=loss, start_logits=start_logits, end_logits=end_logits, hidden_states=base.hidden_states
        )

    @staticmethod
    def _check_positions(start: torch.Tensor | None, end: torch.Tensor | None, batch: int) -> None:
        """Refuse ``start_positions``/``end_positions`` that are not ``(B,)`` or ``(B, 1)`` integer word indices."""
        for name, positions in (("start_positions", start), ("end_positions", end)):
            if positions is None:
                continue
            shape = tuple(positions.shape)
            if shape not in ((batch,), (batch, 1)) or positions.is_floating_point() or positions.is_complex():
                raise ValueError(
                    f"{name} must be ({batch},) (or ({batch}, 1)) integer word indices, one per row of the batch, "
                    f"got {shape} {positions.dtype}"
                )

    @staticmethod
    def _span_loss(logits: torch.Tensor, positions: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
        """Cross-entropy of ``logits`` ``(B, W)`` at ``positions`` ``(B,)`` (or ``(B, 1)``), averaged over the rows
        whose position is a context word (``context`` ``(B, W)`` bool); 0 when there is none."""
        positions = positions.reshape(-1).to(logits.device).long()
        inside = (positions >= 0) & (positions < logits.shape[1])
        index = positions.clamp(0, max(logits.shape[1] - 1, 0))
        valid = inside & context.gather(1, index.unsqueeze(1)).squeeze(1)
        targets = torch.where(valid, index, torch.full_like(index, -100))  # -100: cross_entropy's ignore_index
        return F.cross_entropy(logits, targets, reduction="sum") / valid.sum().clamp(min=1)


__all__ = ["ElmoBidafAttention", "ElmoForQuestionAnswering"]
