"""Sequence tagging (e.g. NER) on top of a frozen ELMo biLM, as in Peters et al. (2018), section 3.3 and 5.

The recipe, per word ``k`` of a sentence::

    x_k       context-independent word vector: a trainable word embedding (``vocab_ids``) or the biLM's layer 0
    ELMo_k    a learned scalar mix of the biLM's L + 1 layers (ElmoScalarMix, dropout on its output)
    h_k       = task BiLSTM([x_k; ELMo_k])                       (tagger_elmo_input)
    h_k       = [h_k; ELMo'_k], a second mix                     (tagger_elmo_output, optional)
    emissions = Linear(dropout(h_k))                              (B, W, K)
    logits    = the CRF's max-marginals of the emissions (the best path's score through each tag), or the emissions
    decoding  = CRF (Viterbi, BIO constraints) or a per-word softmax: in both, the per-word argmax of ``logits``
    loss      = CRF NLL or cross-entropy  +  scalar_mix_l2_coef * sum ||w||^2 of the mixes

The head calls its [`ElmoModel`] (``self.elmo``) once per forward pass and reads its outputs (the word
``mask``, layer 0 from ``hidden_states``, the mixes), as ``BertForTokenClassification`` calls ``self.bert``. The
base model is built with the number of mixes the head uses; the config is not changed. What trains is decided by
``requires_grad`` alone: ``freeze_bilm()`` sets it (after ``__init__`` and again after loading, from
``config.freeze_bilm``), and the biLM runs without autograd only when none of its parameters requires grad.

The biLM may run in another precision than the head, e.g. a float32 tagger with ``model.elmo.to(torch.bfloat16)``
or ``quantize_int8(model)``: the biLM outputs the head reads (layer 0, the mixes) are cast to the head's own dtype
(its classifier's), and ``hidden_states`` come back as the biLM gives them.

Shapes: B sentences, W words (after padding), C characters per word (50), P = projection_dim,
K = num_labels, H = tagger_hidden_size.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers import initialization as init
from transformers.modeling_outputs import TokenClassifierOutput
from transformers.utils import can_return_tuple

from .checks_elmo import check_conventional_arguments
from .configuration_elmo import ElmoConfig
from .crf import ConditionalRandomField, bio_allowed_transitions
from .graph_path_elmo import in_graph
from .modeling_elmo import ElmoModel, ElmoPreTrainedModel
from .task_lstm_elmo import ElmoTaskLstm

IGNORE_INDEX = -100


@dataclass
class ElmoTokenClassifierOutput(TokenClassifierOutput):
    """[`TokenClassifierOutput`] plus ``emissions`` ``(B, W, K)``, the classifier's per-word scores.

    With a CRF, ``logits`` are the CRF's max-marginals: for each word and tag, the score of the best tag sequence
    through that tag (``ConditionalRandomField.max_marginals``). Their per-word argmax is the Viterbi path, so every
    consumer that takes an argmax (transformers' token-classification pipeline, ``Trainer`` metrics, an exported
    graph) decodes as [`ElmoForTokenClassification.predict`]. Without a CRF ``logits`` are the emissions.
    """

    emissions: torch.FloatTensor | None = None


def _label_names(config: ElmoConfig) -> list[str]:
    return [config.id2label[i] for i in range(config.num_labels)]


def crf_transitions_for(config: ElmoConfig) -> list[tuple[int, int]] | None:
    """The CRF's allowed transitions for ``config.crf_constraints`` and ``config.id2label``.

    ``"BIO"``: BIO constraints (an error if a label is not ``O``/``B-X``/``I-X``); ``"auto"``: BIO
    constraints when every label is a BIO label, else none; ``None``: none.
    """
    mode = config.crf_constraints
    if mode is None:
        return None
    try:
        return bio_allowed_transitions(_label_names(config))
    except ValueError as error:
        if mode == "auto":  # e.g. POS tags, or the LABEL_0.. placeholders of a config without labels
            return None
        raise ValueError(f"crf_constraints='BIO' but the labels are not BIO labels: {error}") from error


class ElmoTagEncoder(nn.Module):
    """The task's BiLSTM over word features: [`ElmoTaskLstm`], packed in eager mode (no work on padding).

    Input ``(B, W, F)`` and lengths ``(B,)``; output ``(B, W, 2H)``.
    """

    def __init__(self, input_size: int, hidden_size: int, num_layers: int, dropout: float):
        super().__init__()
        self.lstm = ElmoTaskLstm(input_size, hidden_size, num_layers, dropout if num_layers > 1 else 0.0)

    def forward(self, features: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        return self.lstm(features, lengths)


class ElmoForTokenClassification(ElmoPreTrainedModel):
    r"""ELMo sequence tagger: word-level tags (e.g. CoNLL NER) from a (by default frozen) biLM.

    ``self.elmo`` is an [`ElmoModel`] (``base_model_prefix = "elmo"``), so a converted or trained
    ``ElmoModel`` folder loads straight into it; the head is new (transformers' load report lists it as newly
    initialised, until it is trained and saved):

    ```python
    model = ElmoForTokenClassification.from_pretrained(
        "elmo-small", id2label={0: "O", 1: "B-PER", 2: "I-PER"}, label2id={"O": 0, "B-PER": 1, "I-PER": 2}
    )
    ```

    What is built follows the config (see [`ElmoConfig`]): ``tagger_word_input`` (the ``x_k`` source:
    ``"embedding"`` over the tokenizer's vocabulary, ``"bilm"`` layer 0, or ``None``),
    ``tagger_elmo_input``/``tagger_elmo_output`` (where scalar mixes are concatenated; the biLM is built
    with exactly that many mixes, ``num_elmo_mixes``; ``config.num_output_representations`` is not used),
    ``tagger_hidden_size``, ``tagger_num_layers``, ``tagger_dropout``, ``use_crf``, ``crf_constraints``,
    ``freeze_bilm``. The mixes' L2 penalty (``scalar_mix_l2_coef``) is added to the loss.

    With ``config.freeze_bilm`` (default) the character encoder and the biLSTM layers get
    ``requires_grad=False`` after ``__init__`` and again after ``from_pretrained``; they then run without
    autograd. The scalar mixes are trained. After loading, ``model.requires_grad_(True)`` (or
    ``model.freeze_bilm(False)``) trains the whole biLM too; gradient checkpointing of its layers then works.
    """

    # A tagger built from a biLM folder (converted, or written by `elmo train-lm`): its head (word_embeddings, encoder,
    # classifier, crf) is new and NOT declared, so that transformers' load report says that the tagger is untrained
    # (`elmo train-tagger` asks for the loading info instead). Declared: only what is optional in the base model, as
    # ElmoModel declares it: the scalar mixes, which the released biLMs do not have and which start as the plain
    # average of the layers; in excess, other mixes or an LM softmax. Also declared: the CRF's constraint_mask, a
    # buffer derived from the labels (recomputed by _init_weights), which no training changes.
    _keys_to_ignore_on_load_missing = [r"(^|\.)scalar_mixes\.", r"^crf\.constraint_mask$"]
    _keys_to_ignore_on_load_unexpected = [r"(^|\.)scalar_mixes\.", r"^softmax\."]

    def __init__(self, config: ElmoConfig):
        super().__init__(config)
        config.validate_tagger()
        if config.stateful and self._uses_bilm(config):
            raise ValueError(
                "a tagger needs a stateless biLM (stateful=True makes tags depend on earlier batches): "
                "load it with stateful=False"
            )
        self.num_labels = config.num_labels
        # The biLM computes exactly the mixes the head uses: one for the input, one for the output.
        self.elmo = ElmoModel(config, num_output_representations=self.num_elmo_mixes)

        elmo_size = config.hidden_size  # 2P, the width of every biLM layer and mix
        word_size = {"embedding": config.tagger_word_embedding_dim, "bilm": config.projection_dim, None: 0}[
            config.tagger_word_input
        ]
        if config.tagger_word_input == "embedding":
            self.word_embeddings = nn.Embedding(config.tagger_word_vocab_size, config.tagger_word_embedding_dim)
        self.dropout = nn.Dropout(config.tagger_dropout)
        input_size = word_size + (elmo_size if config.tagger_elmo_input else 0)
        if config.tagger_num_layers > 0:
            self.encoder = ElmoTagEncoder(
                input_size, config.tagger_hidden_size, config.tagger_num_layers, config.tagger_dropout
            )
            output_size = 2 * config.tagger_hidden_size + (elmo_size if config.tagger_elmo_output else 0)
        else:
            self.encoder = None
            output_size = input_size
        self.classifier = nn.Linear(output_size, config.num_labels)
        self.crf = None
        if config.use_crf:
            # from_pretrained builds the model on the meta device, where the CRF cannot check its constraint
            # mask (it reads values): build this small module on the CPU; loading moves it with the rest.
            with torch.device("cpu"):
                self.crf = ConditionalRandomField(config.num_labels, crf_transitions_for(config))
        self.post_init()
        self.apply_freezing()

    @staticmethod
    def _uses_bilm(config: ElmoConfig) -> bool:
        return config.tagger_elmo_input or config.tagger_elmo_output or config.tagger_word_input == "bilm"

    @property
    def uses_bilm(self) -> bool:
        """Whether the head reads the biLM at all (a mix, or layer 0 as the word input)."""
        return bool(self._uses_bilm(self.config))

    @property
    def num_elmo_mixes(self) -> int:
        """The scalar mixes the head uses: one at the task BiLSTM's input, one at its output (each optional)."""
        return int(bool(self.config.tagger_elmo_input)) + int(bool(self.config.tagger_elmo_output))

    def apply_freezing(self) -> None:
        """``freeze_bilm(config.freeze_bilm)``: run after ``__init__`` and, by ``from_pretrained``, after loading."""
        self.freeze_bilm(self.config.freeze_bilm)

    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, ConditionalRandomField):
            # Every parameter and buffer a checkpoint may lack must be set here (from_pretrained builds on meta).
            init.zeros_(module.transitions)
            if module.include_start_end:
                init.zeros_(module.start_transitions)
                init.zeros_(module.end_transitions)
            init.copy_(module.constraint_mask, module.build_constraint_mask(module.constraint_mask.device))
        else:
            super()._init_weights(module)

    def get_input_embeddings(self) -> nn.Module:
        return self.elmo.get_input_embeddings()

    def freeze_bilm(self, freeze: bool = True) -> None:
        """Freeze (or unfreeze) the character encoder and the biLSTM layers; the scalar mixes stay trainable.

        Only ``requires_grad`` changes: the config is left alone. A saved model is frozen again on loading
        when its ``config.freeze_bilm`` is true; whoever builds the config records the choice (``train_tagger
        --fine_tune_bilm`` sets ``freeze_bilm=False``), or set ``model.config.freeze_bilm`` before saving.
        """
        for module in (self.elmo.char_cnn, self.elmo.bilm):
            for parameter in module.parameters():
                parameter.requires_grad_(not freeze)

    @property
    def needs_vocab_ids(self) -> bool:
        """Whether ``forward`` needs ``vocab_ids`` (``tokenizer(..., return_vocab_ids=True)``): for the tagger's word
        embedding, or for a biLM with a word input (ELMoForManyLangs)."""
        return self.config.tagger_word_input == "embedding" or self.elmo.needs_vocab_ids

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        vocab_ids: torch.LongTensor | None = None,
        labels: torch.LongTensor | None = None,
        output_hidden_states: bool | None = None,
        token_type_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        head_mask: torch.Tensor | None = None,
        output_attentions: bool | None = None,
    ) -> ElmoTokenClassifierOutput:
        r"""
        Args:
            input_ids: ``(B, W, C)`` character ids from [`ElmoTokenizer`] (rows of zeros for padding).
            attention_mask: ``(B, W)``, 1 for words, right-padded. Default: the non-zero rows of ``input_ids``.
            vocab_ids: ``(B, W)`` ids of the words in the tokenizer's vocabulary, from
                ``tokenizer(..., return_vocab_ids=True)``; negative (``-100``) on padding. Needed
                when ``config.tagger_word_input == "embedding"``, ignored otherwise.
            labels: ``(B, W)`` tag ids per word, ``-100`` where there is no label (padding). With
                the CRF, the labelled words of a sentence must be its first words (a prefix).
            output_hidden_states: return the biLM's layers as ``hidden_states`` (default
                ``config.output_hidden_states``): the ``L + 1`` layers, or only layer 0 for a tagger that reads
                no mix; ``None`` for a tagger that does not use the biLM.
            token_type_ids, inputs_embeds, position_ids, head_mask, output_attentions: as in [`ElmoModel.forward`]
                (passed down to the biLM, which uses ``token_type_ids`` for pairs of texts and refuses the rest by
                name unless ``None``).

        Returns:
            [`ElmoTokenClassifierOutput`] with ``loss`` (with ``labels``; CRF negative log-likelihood per
            sentence or mean cross-entropy per word, plus the mixes' L2 penalty), ``logits`` ``(B, W, K)`` (with
            ``use_crf`` the CRF's max-marginals, 0 at padding: their argmax per word is the Viterbi tag) and
            ``emissions`` ``(B, W, K)`` (the classifier's scores, which the CRF reads; [`decode`] takes them).
        """
        if labels is not None and not isinstance(labels, torch.Tensor):  # before the biLM runs, as the heads do
            raise TypeError(f"labels must be a torch.Tensor (e.g. torch.tensor(labels)), got {type(labels).__name__}")
        config = self.config
        if output_hidden_states is None:
            output_hidden_states = config.output_hidden_states
        hidden_states = None
        mixes: tuple[torch.Tensor, ...] = ()
        if self.uses_bilm:
            # Down into the biLM once: the mask, layer 0 and the mixes come back (only layer 0 without mixes).
            base = self.elmo(
                input_ids,
                attention_mask=attention_mask,
                output_hidden_states=True,
                token_layer_only=self.num_elmo_mixes == 0,
                return_dict=True,
                vocab_ids=vocab_ids,
                token_type_ids=token_type_ids,
                inputs_embeds=inputs_embeds,
                position_ids=position_ids,
                head_mask=head_mask,
                output_attentions=output_attentions,
            )
            # In the head's dtype: the biLM may run in bfloat16 (or int8) under a float32 head.
            dtype = self.classifier.weight.dtype
            mask = base.mask.bool()  # (B, W)
            mixes = tuple(mix.to(dtype) for mix in base.elmo_representations)  # (B, W, 2P) each
            layer0 = base.hidden_states[0][..., : config.projection_dim].to(dtype)  # [x; x] -> x, (B, W, P)
            hidden_states = base.hidden_states if output_hidden_states else None
        else:
            check_conventional_arguments(input_ids, inputs_embeds, position_ids, head_mask, output_attentions)
            mask = self.elmo.word_mask(input_ids, attention_mask)  # (B, W) bool, validated

        features = []
        if config.tagger_word_input == "embedding":
            features.append(self.dropout(self.word_embeddings(self._check_vocab_ids(vocab_ids, mask))))
        elif config.tagger_word_input == "bilm":
            features.append(self.dropout(layer0))
        if config.tagger_elmo_input:
            features.append(mixes[0])
        hidden = torch.cat(features, dim=-1) if len(features) > 1 else features[0]  # (B, W, F)
        if self.encoder is not None:
            hidden = self.encoder(hidden, mask.sum(dim=1))  # (B, W, 2H)
            if config.tagger_elmo_output:
                hidden = torch.cat([hidden, mixes[-1]], dim=-1)
        emissions = self.classifier(self.dropout(hidden))  # (B, W, K)

        loss = None
        if labels is not None:
            loss = self._tagging_loss(emissions, labels, mask)
            if mixes:
                loss = loss + self.elmo.mix_l2_penalty()
        logits = emissions if self.crf is None else self.crf.max_marginals(emissions, mask).to(emissions.dtype)
        return ElmoTokenClassifierOutput(loss=loss, logits=logits, emissions=emissions, hidden_states=hidden_states)

    def _check_vocab_ids(self, vocab_ids: torch.Tensor | None, mask: torch.Tensor) -> torch.Tensor:
        if vocab_ids is None:
            raise ValueError(
                "this tagger embeds words by their vocabulary id (tagger_word_input='embedding'): pass vocab_ids, "
                "from tokenizer(..., return_vocab_ids=True) with the tokenizer saved with the model"
            )
        if tuple(vocab_ids.shape) != tuple(mask.shape):
            raise ValueError(
                f"vocab_ids must have shape (batch, words) = {tuple(mask.shape)}, got {tuple(vocab_ids.shape)}"
            )
        ids = vocab_ids.masked_fill(~mask | vocab_ids.lt(0), 0)  # padding (-100) -> any valid row, masked later
        size = self.config.tagger_word_vocab_size
        if in_graph():
            torch._assert_async(ids.lt(size).all(), f"vocab_ids must be below the word embedding's {size} rows")
        elif ids.numel() and int(ids.max()) >= size:
            raise ValueError(
                f"vocab_ids up to {int(ids.max())} but the word embedding has {size} rows: use the tokenizer saved "
                "with this model (its vocabulary was built with it)"
            )
        return ids

    def _tagging_loss(self, logits: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        if tuple(labels.shape) != tuple(mask.shape):
            raise ValueError(
                f"labels must be word-level with shape (batch, words) = {tuple(mask.shape)}, got {tuple(labels.shape)}"
            )
        labelled = labels.ne(IGNORE_INDEX) & mask
        outside = ((labels < 0) | (labels >= self.num_labels)) & labelled
        if in_graph():  # checked when the graph runs (RuntimeError), without reading values into Python
            torch._assert_async(outside.logical_not().all(), f"labels must be in [0, {self.num_labels}) or -100")
        elif bool(outside.any()):
            raise ValueError(
                f"labels must be in [0, {self.num_labels}) or -100, got {labels[labelled].unique().tolist()}"
            )
        if self.crf is None:
            return F.cross_entropy(
                logits.reshape(-1, self.num_labels), labels.masked_fill(~labelled, IGNORE_INDEX).reshape(-1)
            )
        prefix = torch.arange(labelled.shape[1], device=labelled.device) < labelled.sum(dim=1, keepdim=True)
        if in_graph():
            torch._assert_async(labelled.eq(prefix).all(), "with use_crf, the labelled words must come first")
        elif not torch.equal(labelled, prefix):
            raise ValueError(
                "with use_crf, the labelled words of each sentence must come first (-100 only after them): "
                "a CRF scores whole tag sequences"
            )
        return self.crf(logits, labels, labelled, reduction="mean")

    @torch.no_grad()
    def decode(self, emissions: torch.Tensor, mask: torch.Tensor | None = None) -> list[list[int]]:
        """Best tag ids per sentence: Viterbi with the CRF (constraints respected), argmax without.

        Args:
            emissions: ``(B, W, K)``, ``forward``'s ``emissions``.
            mask: ``(B, W)`` words (right-padded); default: all positions.

        Returns:
            ``B`` lists of ``mask[b].sum()`` tag ids.
        """
        if mask is None:
            mask = torch.ones(emissions.shape[:2], dtype=torch.bool, device=emissions.device)
        mask = mask.bool()
        if self.crf is not None:
            return self.crf.viterbi_decode(emissions, mask)
        best = emissions.argmax(dim=-1).tolist()
        return [row[:n] for row, n in zip(best, mask.sum(dim=1).tolist(), strict=True)]

    @torch.no_grad()
    def predict(
        self,
        input_ids: torch.LongTensor,
        attention_mask: torch.Tensor | None = None,
        vocab_ids: torch.LongTensor | None = None,
    ) -> list[list[str]]:
        """Tag names per sentence (``config.id2label``), in eval mode; inputs as in ``forward``.

        Example: ``model.predict(**tokenizer(words, is_split_into_words=True, padding=True,
        return_tensors="pt", return_vocab_ids=model.needs_vocab_ids))``.
        """
        was_training = self.training
        self.eval()
        try:
            emissions = self(input_ids=input_ids, attention_mask=attention_mask, vocab_ids=vocab_ids).emissions
        finally:
            self.train(was_training)
        mask = self.elmo.word_mask(input_ids, attention_mask)
        return [[self.config.id2label[t] for t in row] for row in self.decode(emissions, mask)]


__all__ = [
    "ElmoForTokenClassification",
    "ElmoTagEncoder",
    "ElmoTokenClassifierOutput",
    "crf_transitions_for",
]
