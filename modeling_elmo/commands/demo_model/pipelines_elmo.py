"""Token classification pipeline for ELMo taggers: entity spans with character offsets from raw text.

The built-in ``token-classification`` pipeline reads one vocabulary id per token (``int(input_ids[idx])``); ELMo's
``input_ids`` hold 50 character ids per word, so it fails. [`ElmoTokenClassificationPipeline`] takes each word
from the tokenizer's offsets instead, and every token is a whole word (never a sub-word), so
``aggregation_strategy="simple"`` groups B-/I- tagged words into entity spans.

It travels with a saved tagger: the config names it in ``custom_pipelines`` under ``"token-classification"``, so

    pipeline("token-classification", model=folder_or_repo, trust_remote_code=True, aggregation_strategy="simple")

runs it. With this package imported it is also registered as the task ``"elmo-token-classification"`` (no remote
code needed), or pass ``pipeline_class=ElmoTokenClassificationPipeline``.

[`ElmoFeatureExtractionPipeline`] (task ``"elmo-feature-extraction"``) gives one ELMo vector per word, also with
``batch_size > 1``: the stock ``feature-extraction`` pipeline cannot unbatch [`ElmoModel`]'s output (its
``elmo_representations`` is a tuple of mixes, which the pipeline indexes as if it were batch-first) and pads a
shorter sentence's vectors with zero vectors.
"""

from __future__ import annotations

import numpy as np
from transformers import AutoModel, AutoModelForTokenClassification
from transformers.pipelines import PIPELINE_REGISTRY, FeatureExtractionPipeline, TokenClassificationPipeline
from transformers.pipelines.token_classification import AggregationStrategy

from .tokenization_elmo import VOCAB_IDS_PAD

TASK = "elmo-token-classification"
FEATURE_TASK = "elmo-feature-extraction"


def _unpad_character_ids(model_inputs: dict) -> dict:
    """Undo the pipeline batch collation's padding of ELMo inputs, in place.

    With ``batch_size > 1`` a pipeline pads every key of a shorter sentence to the longest: ``input_ids`` with
    ``tokenizer.pad_token_id`` (the ``<pad>`` word's vocabulary id, e.g. 10000, not a character id) and
    ``vocab_ids`` with 0. ELMo pads a word with a row of zero character ids and ``vocab_ids`` with ``-100``, as
    [`ElmoTokenizer`] does; ``attention_mask`` ``(B, W)`` (padded with 0) says which rows are padding.
    """
    mask = model_inputs.get("attention_mask")
    if mask is not None and mask.dim() == 2 and not bool(mask.all()):
        words = mask.bool()
        model_inputs["input_ids"] = model_inputs["input_ids"].masked_fill(~words.unsqueeze(-1), 0)
        if model_inputs.get("vocab_ids") is not None:
            model_inputs["vocab_ids"] = model_inputs["vocab_ids"].masked_fill(~words, VOCAB_IDS_PAD)
    return model_inputs


class ElmoFeatureExtractionPipeline(FeatureExtractionPipeline):
    """``feature-extraction`` for [`ElmoModel`]: per sentence ``(1, words, 2P)``, the model's ``elmo`` mix, the same
    with any ``batch_size`` (no padding vectors).

    ``pipeline("elmo-feature-extraction", model=folder)`` (this package imported), or
    ``pipeline("feature-extraction", model=folder, pipeline_class=ElmoFeatureExtractionPipeline)``.
    """

    def _forward(self, model_inputs):
        mask = model_inputs["attention_mask"]
        output = self.model(**_unpad_character_ids(model_inputs))
        if output.elmo is None:
            raise ValueError("this model computes no ELMo mix (num_output_representations=0)")
        # Batch-first tensors only, so that the pipeline can split a batch into its sentences.
        return {"elmo": output.elmo, "attention_mask": mask}  # (B, W, 2P), (B, W)

    def postprocess(self, model_outputs, return_tensors=False):
        words = int(model_outputs["attention_mask"].sum())
        vectors = model_outputs["elmo"][:, :words]  # (1, words, 2P): the padding's vectors dropped
        return vectors if return_tensors else vectors.tolist()


class ElmoTokenClassificationPipeline(TokenClassificationPipeline):
    """``TokenClassificationPipeline`` for ELMo's ``(batch, words, 50)`` character ids.

    Each result (``aggregation_strategy="simple"``) is ``{"entity_group", "score", "word", "start", "end"}`` with
    ``text[start:end] == word``; without aggregation one dict per word (``"entity"``, ``"index"`` = word index).
    """

    def preprocess(self, sentence, offset_mapping=None, **preprocess_params):
        """As the base class; a tagger with its own word embedding also gets the words' ``vocab_ids``."""
        tokenizer_params = dict(preprocess_params.pop("tokenizer_params", None) or {})
        if getattr(self.model, "needs_vocab_ids", False):
            tokenizer_params.setdefault("return_vocab_ids", True)
        yield from super().preprocess(
            sentence, offset_mapping=offset_mapping, tokenizer_params=tokenizer_params, **preprocess_params
        )

    def _forward(self, model_inputs):
        """As the base class, after undoing the batch collation's padding (``batch_size > 1``) of the ids."""
        return super()._forward(_unpad_character_ids(model_inputs))

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
        """One entry per word: its text (from the offsets), label scores ``(num_labels,)`` and character span.

        ``input_ids`` is ``(words, 50)``; the word is never read from it (it is not a vocabulary id).
        """
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
                {
                    "word": word,
                    "scores": token_scores,
                    "start": start,
                    "end": end,
                    "index": idx,
                    "is_subword": False,  # every ELMo token is a whole word
                }
            )
        return pre_entities

    def save_pretrained(self, save_directory, **kwargs) -> None:
        """Save the model and tokenizer so that the folder runs this pipeline under ``"token-classification"``."""
        from .hub_elmo import PIPELINE_TASK, TOKEN_CLASSIFICATION_PIPELINE

        # Not the base class's way (it names the registry task, "elmo-token-classification"): the standard task
        # name is the one users ask for.
        self.model.config.custom_pipelines = {PIPELINE_TASK: dict(TOKEN_CLASSIFICATION_PIPELINE)}
        self.model.save_pretrained(save_directory, **kwargs)
        if self.tokenizer is not None:
            self.tokenizer.save_pretrained(save_directory, **kwargs)


if TASK not in PIPELINE_REGISTRY.supported_tasks:  # also imported as remote code: register once
    PIPELINE_REGISTRY.register_pipeline(
        TASK,
        pipeline_class=ElmoTokenClassificationPipeline,
        pt_model=AutoModelForTokenClassification,
        type="text",
    )

if FEATURE_TASK not in PIPELINE_REGISTRY.supported_tasks:
    PIPELINE_REGISTRY.register_pipeline(
        FEATURE_TASK, pipeline_class=ElmoFeatureExtractionPipeline, pt_model=AutoModel, type="text"
    )

__all__ = ["ElmoFeatureExtractionPipeline", "ElmoTokenClassificationPipeline"]
