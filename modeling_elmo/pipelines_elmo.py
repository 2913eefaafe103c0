"""Pipelines for ELMo: transformers' token-classification pipeline generalised to word-level character ids, and
a feature-extraction pipeline without padding vectors.

[`ElmoTokenClassificationPipeline`] is transformers' ``TokenClassificationPipeline`` with one generalisation: a
token's ``input_ids`` may be a row of character ids (ELMo's ``(words, 50)`` per sentence) instead of one vocabulary
id. The stock class reads ``int(input_ids[idx])``, which such a row cannot give; this class then takes the word
from the tokenizer's offsets (every ELMo token is a whole word). For 1-D ids (every other model) it runs the stock
code unchanged. ``import modeling_elmo`` registers it for the stock ``"token-classification"`` task with
``PIPELINE_REGISTRY.register_pipeline`` (transformers logs one line saying that the task's class is replaced).

Decoding needs nothing of its own: a CRF tagger's ``logits`` are the CRF's max-marginals (see
``ElmoForTokenClassification``), so the stock per-word softmax and argmax give the Viterbi tags; a word's
``score`` is the softmax of the max-marginals at its tag (how far the best path through that tag is ahead of
the best paths through the others, not a marginal probability).

[`ElmoFeatureExtractionPipeline`] (task ``"elmo-feature-extraction"``) adds what the stock ``"feature-extraction"``
cannot do: one vector per word also with ``batch_size > 1`` (the stock pipeline keeps the zero vectors of a
batch's padding), and the model's scalar mix (``elmo``) rather than its first output field.

Shapes: B sentences, W words (after padding), K labels.
"""

from __future__ import annotations

import numpy as np
from transformers.pipelines import FeatureExtractionPipeline, TokenClassificationPipeline
from transformers.pipelines.token_classification import AggregationStrategy

FEATURE_TASK = "elmo-feature-extraction"


class ElmoFeatureExtractionPipeline(FeatureExtractionPipeline):
    """``feature-extraction`` for [`ElmoModel`]: per sentence ``(1, words, 2P)``, the model's ``elmo`` mix, the same
    with any ``batch_size`` (no padding vectors).

    ``pipeline("elmo-feature-extraction", model=folder)`` (this package imported), or
    ``pipeline("feature-extraction", model=folder, pipeline_class=ElmoFeatureExtractionPipeline)``.
    """

    def _forward(self, model_inputs):
        output = self.model(**model_inputs)  # the model ignores the ids that the batch collation put at padding
        if output.elmo is None:
            raise ValueError("this model computes no ELMo mix (num_output_representations=0)")
        # Batch-first tensors only, so that the pipeline can split a batch into its sentences.
        return {"elmo": output.elmo, "attention_mask": model_inputs["attention_mask"]}  # (B, W, 2P), (B, W)

    def postprocess(self, model_outputs, return_tensors=False):
        words = int(model_outputs["attention_mask"].sum())
        vectors = model_outputs["elmo"][:, :words]  # (1, words, 2P): the padding's vectors dropped
        return vectors if return_tensors else vectors.tolist()


class ElmoTokenClassificationPipeline(TokenClassificationPipeline):
    """transformers' ``TokenClassificationPipeline``, generalised to tokens whose ``input_ids`` are rows of
    character ids (ELMo: ``(words, 50)`` per sentence).

    For such tokens each word comes from the offsets (``text[start:end] == word``) and is never a sub-word; a
    tagger with its own word embedding also gets the words' ``vocab_ids`` from the tokenizer. For every other model
    (1-D ``input_ids``, no ``needs_vocab_ids``) each method runs the stock code.
    """

    def preprocess(self, sentence, offset_mapping=None, **preprocess_params):
        if getattr(self.model, "needs_vocab_ids", False):
            tokenizer_params = dict(preprocess_params.pop("tokenizer_params", None) or {})
            tokenizer_params.setdefault("return_vocab_ids", True)
            preprocess_params["tokenizer_params"] = tokenizer_params
        yield from super().preprocess(sentence, offset_mapping=offset_mapping, **preprocess_params)

    def gather_pre_entities(
        self,
        sentence: str,
        input_ids: np.ndarray,
        scores: np.ndarray,
        offset_mapping: list[tuple[int, int]] | None,
        special_tokens_mask: np.ndarray,
        aggregation_strategy: AggregationStrategy,
        word_ids: list[int | None] | None = None,
        word_to_chars_map: list[tuple[int, int]] | None = None,
    ) -> list[dict]:
        """As the stock method; for ``input_ids`` of one row of character ids per token ``(W, C)``, one entry per
        word with its text from the offsets, its scores ``(K,)`` and its character span."""
        if np.ndim(input_ids) < 2:
            return super().gather_pre_entities(
                sentence,
                input_ids,
                scores,
                offset_mapping,
                special_tokens_mask,
                aggregation_strategy,
                word_ids=word_ids,
                word_to_chars_map=word_to_chars_map,
            )
        pre_entities = []
        for idx, token_scores in enumerate(scores):
            if special_tokens_mask[idx]:
                continue
            if offset_mapping is not None:
                start, end = (int(v) for v in offset_mapping[idx])
                # Pre-split input: offsets are within the word; shift them into the joined sentence.
                if word_ids is not None and word_to_chars_map is not None and word_ids[idx] is not None:
                    shift = word_to_chars_map[word_ids[idx]][0]
                    start, end = start + shift, end + shift
                word = sentence[start:end]
            else:
                start = end = None
                word = self.tokenizer.decode([np.asarray(input_ids[idx]).tolist()])
            pre_entities.append(
                {"word": word, "scores": token_scores, "start": start, "end": end, "index": idx, "is_subword": False}
            )
        return pre_entities


__all__ = ["FEATURE_TASK", "ElmoFeatureExtractionPipeline", "ElmoTokenClassificationPipeline"]
