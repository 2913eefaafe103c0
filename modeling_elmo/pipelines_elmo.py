"""Token classification pipeline for ELMo taggers: entity spans with character offsets from raw text.

The built-in ``token-classification`` pipeline reads one vocabulary id per token (``int(input_ids[idx])``); ELMo's
``input_ids`` hold 50 character ids per word, so it fails. [`ElmoTokenClassificationPipeline`] takes each word
from the tokenizer's offsets instead, and every token is a whole word (never a sub-word), so
``aggregation_strategy="simple"`` groups B-/I- tagged words into entity spans.

It travels with a saved tagger: the config names it in ``custom_pipelines`` under ``"token-classification"``, so

    pipeline("token-classification", model=folder_or_repo, trust_remote_code=True, aggregation_strategy="simple")

runs it. With this package imported it is also registered as the task ``"elmo-token-classification"`` (no remote
code needed), or pass ``pipeline_class=ElmoTokenClassificationPipeline``.
"""

from __future__ import annotations

import numpy as np
from transformers import AutoModelForTokenClassification
from transformers.pipelines import PIPELINE_REGISTRY, TokenClassificationPipeline
from transformers.pipelines.token_classification import AggregationStrategy

TASK = "elmo-token-classification"


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

__all__ = ["ElmoTokenClassificationPipeline"]
