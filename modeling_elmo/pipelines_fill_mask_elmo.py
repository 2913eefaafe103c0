"""``pipeline("elmo-fill-mask", model=FOLDER)``: fill ``[MASK]`` with the biLM and its released softmax, LAMA's way.

A word ``w`` at the masked word ``i`` of ``<S> w_1 .. w_n </S>`` is ranked by the mean of two log-probabilities
(LAMA's ``elmo_connector``): the forward one from the top layer's forward half just before the mask, the backward one
from its backward half just after it, both through the one softmax ``(W, b)``::

    s(w) = (log softmax(W h_f(i - 1) + b)[w] + log softmax(W h_b(i + 1) + b)[w]) / 2
    score(w) = softmax over the V words of s

At the first word ``h_f`` is read at ``<S>``, at the last ``h_b`` at ``</S>``; neither reads the masked word
itself (each direction only sees one side), so what fills it does not matter. As in LAMA the biLM reads ``<UNK>``
there, which only matters for the other masks of a text with several. Every vocabulary word is a candidate,
``<S>``, ``</S>`` and ``<UNK>`` included (pass ``targets`` to restrict them).

Output, ``top_k`` and ``targets`` are those of transformers' ``fill-mask`` pipeline: per mask a list of
``{"score", "token", "token_str", "sequence"}``, best first (a list of such lists for a text with several masks);
with ``targets`` the scores are the same probabilities, read at the targets only.
"""

from __future__ import annotations

import logging
import os

import torch
from transformers import Pipeline
from transformers.pipelines import FillMaskPipeline

from .modeling_elmo import ElmoPreTrainedModel
from .scoring_elmo import folder_has_softmax, top_layer_with_boundaries

FILL_MASK_TASK = "elmo-fill-mask"
MASK = "[MASK]"
MASK_INPUT_WORD = "<UNK>"  # what the biLM reads at a mask, as LAMA feeds it

logger = logging.getLogger(__name__)


class ElmoFillMaskPipeline(Pipeline):
    """Fill-in-the-blank with an ``ElmoForPreTraining`` that holds a real softmax (see the module docstring).

    ``pipeline("elmo-fill-mask", model=folder)(text, top_k=5, targets=None)``; ``text`` holds ``[MASK]`` (one or
    more) and is split into words by the model's tokenizer around the masks.
    """

    _load_processor = False
    _load_image_processor = False
    _load_feature_extractor = False
    _load_tokenizer = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if not hasattr(self.model, "softmax") or not getattr(self.model.config, "lm_vocab_size", 0):
            raise ValueError("elmo-fill-mask needs an ElmoForPreTraining with its softmax")
        source = getattr(self.model, "name_or_path", None)
        if source and os.path.isdir(source) and not folder_has_softmax(source):
            raise ValueError(
                f"{source} holds no language-model softmax (softmax.weight): the pipeline would rank words with a "
                "random one. Convert the released model with --softmax_weight_file and --vocab_file"
            )

    def _sanitize_parameters(self, top_k=None, targets=None, **kwargs):
        postprocess = {}
        if top_k is not None:
            if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
                raise ValueError(f"top_k must be a positive int, got {top_k!r}")
            postprocess["top_k"] = top_k
        if targets is not None:
            postprocess["target_ids"] = self.get_target_ids(targets)
        return {}, {}, postprocess

    def get_target_ids(self, targets) -> torch.Tensor:
        """Vocabulary ids of ``targets`` (a word or a list of words), each once; words outside it are dropped with a
        warning (they would all be ``<UNK>``)."""
        if isinstance(targets, str):
            targets = [targets]
        vocab = self.tokenizer.get_vocab()
        ids, unknown = [], []
        for word in targets:
            if word in vocab and word != self.tokenizer.pad_token:
                if vocab[word] not in ids:
                    ids.append(vocab[word])
            else:
                unknown.append(word)
        if unknown:
            logger.warning("targets not in the vocabulary, left out: %s", ", ".join(map(repr, unknown)))
        if not ids:
            raise ValueError("no target is a word of the vocabulary: at least one must be")
        return torch.tensor(ids)

    def preprocess(self, inputs, **kwargs):
        if not isinstance(inputs, str):
            raise TypeError(f"elmo-fill-mask takes text (str) with {MASK}, got {type(inputs).__name__}")
        pieces = inputs.split(MASK)
        if len(pieces) < 2:
            raise ValueError(f"no {MASK} in the input {inputs!r}")
        words, masks = [], []
        for k, piece in enumerate(pieces):
            if k:
                masks.append(len(words))
                words.append(MASK_INPUT_WORD)
            words.extend(self.tokenizer.tokenize(piece) if piece.strip() else [])
        encoded = self.tokenizer(words, is_split_into_words=True, return_tensors="pt")
        flags = torch.zeros(1, len(words), dtype=torch.long)
        flags[0, masks] = 1
        return {
            "input_ids": encoded["input_ids"],
            "attention_mask": encoded["attention_mask"],
            "mask_flags": flags,  # (1, W): 1 at the masks; a batch pads it with 0 like the attention mask
            "text": inputs,
        }

    def _forward(self, model_inputs):
        model = self.model
        flags = model_inputs["mask_flags"].bool()  # (B, W)
        top, _ = top_layer_with_boundaries(model.elmo, model_inputs["input_ids"], model_inputs["attention_mask"])
        forward, backward = top.to(model.softmax.weight.dtype).chunk(2, dim=-1)  # (B, T, P), <S> at position 0
        rows, words = flags.nonzero(as_tuple=True)  # word i sits at position i + 1
        hidden = torch.cat([forward[rows, words], backward[rows, words + 2]])  # (2K, P): just before and after
        log_probs = torch.log_softmax(model.softmax(hidden).float(), dim=-1)  # (2K, V)
        count = rows.numel()
        mean = (log_probs[:count] + log_probs[count:]) / 2  # (K, V), LAMA's combination
        # Batch-first for the pipeline's unbatching: (B, most masks of a text, V), and each text's count.
        counts = flags.sum(dim=1)
        slots = torch.cumsum(flags.long(), dim=1)[rows, words] - 1
        per_text = mean.new_zeros(flags.shape[0], int(counts.max()), mean.shape[-1])
        per_text[rows, slots] = mean
        return {"mean_log_probs": per_text, "mask_counts": counts, "text": model_inputs["text"]}

    def postprocess(self, model_outputs, top_k=5, target_ids=None):
        count = int(model_outputs["mask_counts"][0])
        probs = torch.softmax(model_outputs["mean_log_probs"][0, :count], dim=-1)  # (M, V)
        if target_ids is not None:
            probs = probs[:, target_ids]
            top_k = min(top_k, target_ids.numel())
        values, indices = probs.topk(min(top_k, probs.shape[-1]), dim=-1)
        text = model_outputs["text"]
        text = text if isinstance(text, str) else text[0]  # a batch of one keeps the list of the collation
        pieces = text.split(MASK)
        words = self.tokenizer.convert_ids_to_tokens
        result = []
        for m, (row_values, row_indices) in enumerate(zip(values.tolist(), indices.tolist(), strict=True)):
            row = []
            for value, index in zip(row_values, row_indices, strict=True):
                token = int(target_ids[index]) if target_ids is not None else index
                word = words(token)
                sequence = MASK.join(pieces[: m + 1]) + word + MASK.join(pieces[m + 1 :])
                row.append({"score": value, "token": token, "token_str": word, "sequence": sequence})
            result.append(row)
        return result[0] if len(result) == 1 else result


NO_MASKED_LM = (
    "ELMo has no masked-LM head (AutoModelForMaskedLM, which the stock 'fill-mask' task loads): its biLM predicts "
    "each word from the words before it and, apart, from the words after it. To fill [MASK] with an ELMo language "
    f"model (a folder with its softmax), use pipeline({FILL_MASK_TASK!r}, model=FOLDER); to load the model, "
    "ElmoForPreTraining.from_pretrained(FOLDER) or AutoModelForPreTraining"
)


class ElmoForMaskedLM(ElmoPreTrainedModel):
    """No model: what ``AutoModelForMaskedLM`` finds for an ELMo config (``AutoModelForMaskedLM.register``), so that
    ``AutoModelForMaskedLM.from_pretrained`` and ``pipeline("fill-mask", model=FOLDER)`` of an ELMo folder raise
    ``ValueError`` naming the task that fills ``[MASK]`` (``"elmo-fill-mask"``) instead of transformers'
    "Unrecognized configuration class". Building it (directly, ``from_config`` or ``from_pretrained``) raises."""

    def __init__(self, config, *args, **kwargs):
        raise ValueError(NO_MASKED_LM)


class ElmoAwareFillMaskPipeline(FillMaskPipeline):
    """transformers' ``FillMaskPipeline``, registered for the stock ``"fill-mask"`` task: unchanged for every other
    model; given an ELMo model instance (``pipeline("fill-mask", model=model)``, which loads nothing, so
    [`ElmoForMaskedLM`] cannot speak), it raises the same ``ValueError`` naming ``"elmo-fill-mask"``."""

    def __init__(self, model, *args, **kwargs):
        if getattr(getattr(model, "config", None), "model_type", None) == "elmo":
            raise ValueError(NO_MASKED_LM)
        super().__init__(model, *args, **kwargs)


__all__ = ["FILL_MASK_TASK", "NO_MASKED_LM", "ElmoAwareFillMaskPipeline", "ElmoFillMaskPipeline", "ElmoForMaskedLM"]
