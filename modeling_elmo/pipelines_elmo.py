"""Pipelines for ELMo: entity spans from a tagger (CRF-aware), and one vector per word.

[`ElmoTokenClassificationPipeline`] is the token-classification pipeline for ELMo taggers. The built-in one cannot
serve them: it reads one vocabulary id per token (``int(input_ids[idx])``), where ELMo's ``input_ids`` hold 50
character ids per word, and it takes each word's tag as the argmax of a softmax over the ``logits``, which for a CRF
tagger are emission scores (the transitions are ignored: tags that differ from ``tagger.predict`` and break the BIO
rules). This class takes each word from the tokenizer's offsets (every token is a whole word, never a sub-word) and
decodes as the model does:

- a CRF tagger: the Viterbi path (with the CRF's constraints), the same tags as ``predict``; a word's ``score`` is
  the marginal probability of its tag (forward-backward over all tag paths, ``ConditionalRandomField.marginals``);
- a softmax tagger: the argmax of the softmax, scored by its probability (as the built-in pipeline).

``aggregation_strategy="simple"`` (or ``"first"``, ``"average"``, ``"max"``: the same, since every token is a word)
groups B-/I- tagged words into entity spans, scored by the mean of their words' scores.

How users reach it:

- ``pipeline("token-classification", model=tagger, tokenizer=tokenizer)`` with this package imported: the package
  routes the task to this class for ELMo taggers (every other model still gets transformers' own class, see
  [`ElmoAwareTokenClassificationRouter`]);
- ``pipeline("elmo-token-classification", model=folder_or_tagger)``, or
  ``pipeline_class=ElmoTokenClassificationPipeline``;
- without the package, from a saved tagger folder: its config names this class in ``custom_pipelines``, so
  ``pipeline("token-classification", model=folder_or_repo, trust_remote_code=True)`` runs the folder's copy.

[`ElmoFeatureExtractionPipeline`] (task ``"elmo-feature-extraction"``) gives one ELMo vector per word, also with
``batch_size > 1``, without the zero vectors of the padding that the stock ``feature-extraction`` pipeline keeps in
a batch (the stock pipeline works too: [`ElmoModel`] ignores the ids at padded positions, and its output splits by
sentence).

Shapes: B sentences, W words (after padding), K labels.
"""

from __future__ import annotations

import numpy as np
import torch
from transformers import AutoModel, AutoModelForSequenceClassification, AutoModelForTokenClassification
from transformers.pipelines import (
    PIPELINE_REGISTRY,
    FeatureExtractionPipeline,
    TextClassificationPipeline,
    TokenClassificationPipeline,
)
from transformers.pipelines.token_classification import AggregationStrategy

TASK = "elmo-token-classification"
FEATURE_TASK = "elmo-feature-extraction"
STOCK_TASK = "token-classification"
_STOCK_IMPLS = (TokenClassificationPipeline, "transformers.pipelines.token_classification.TokenClassificationPipeline")


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
    """``TokenClassificationPipeline`` for ELMo taggers: ``(batch, words, 50)`` character ids, and CRF decoding.

    Each result (``aggregation_strategy="simple"``) is ``{"entity_group", "score", "word", "start", "end"}`` with
    ``text[start:end] == word``; without aggregation one dict per word (``"entity"``, ``"score"``, ``"index"`` =
    word index, ``"word"``, ``"start"``, ``"end"``). Tags are the model's own decoding (Viterbi for a CRF, as
    ``predict``); a word's score is the probability of its tag (the CRF's marginal, or the softmax).
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
        """As the base class, plus per word the decoded tag ``tags`` ``(B, W)`` and the label probabilities
        ``scores`` ``(B, W, K)``, computed on the whole batch (one Viterbi and one forward-backward per batch)."""
        mask = model_inputs.get("attention_mask")
        # Padded positions: the batch collation pads attention_mask with 0 (the model ignores the ids there).
        mask = model_inputs["input_ids"].ne(0).any(dim=-1) if mask is None else mask.bool()
        outputs = super()._forward(model_inputs)
        outputs["scores"], outputs["tags"] = self.word_scores(outputs["logits"], mask)
        return outputs

    @torch.no_grad()
    def word_scores(self, logits: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Label probabilities ``(B, W, K)`` float32 and decoded tags ``(B, W)`` long from ``logits`` ``(B, W, K)``.

        With the model's CRF (``model.crf``): the marginals ``p(y_k = j | sentence)`` and the Viterbi path, exactly
        as the model's ``decode``/``predict`` (``-100`` at padding). Without: the softmax and its argmax.
        """
        crf = getattr(self.model, "crf", None)
        if crf is not None:
            return crf.marginals(logits, mask).float(), crf.viterbi_tags(logits, mask)
        scores = logits.float().softmax(dim=-1)
        return scores, scores.argmax(dim=-1)

    def postprocess(self, all_outputs, aggregation_strategy=AggregationStrategy.NONE, ignore_labels=None):
        """As the base class, with the scores and tags of [`word_scores`] instead of an argmax over the logits."""
        if ignore_labels is None:
            ignore_labels = ["O"]
        sentence = all_outputs[0]["sentence"]
        word_to_chars_map = all_outputs[0].get("word_to_chars_map")
        all_entities = []
        for model_outputs in all_outputs:
            offset_mapping = model_outputs["offset_mapping"]
            tags = model_outputs["tags"][0].tolist()
            pre_entities = self.gather_pre_entities(
                sentence,
                model_outputs["input_ids"][0],
                model_outputs["scores"][0].numpy(),  # (W, K)
                offset_mapping[0] if offset_mapping is not None else None,
                model_outputs["special_tokens_mask"][0].numpy(),
                aggregation_strategy,
                word_ids=model_outputs.get("word_ids"),
                word_to_chars_map=word_to_chars_map,
            )
            for pre_entity in pre_entities:
                pre_entity["tag"] = tags[pre_entity["index"]]
            all_entities.extend(
                entity
                for entity in self.aggregate(pre_entities, aggregation_strategy)
                if entity.get("entity") not in ignore_labels and entity.get("entity_group") not in ignore_labels
            )
        if len(all_outputs) > 1:
            all_entities = self.aggregate_overlapping_entities(all_entities)
        return all_entities

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

    def aggregate(self, pre_entities: list[dict], aggregation_strategy: AggregationStrategy) -> list[dict]:
        """One entity per word, with its decoded tag (``pre_entity["tag"]``; the argmax of its scores when absent)
        and that tag's probability; grouped into B-/I- spans unless ``aggregation_strategy`` is ``"none"``.

        Every ELMo token is a whole word, so ``"first"``, ``"average"`` and ``"max"`` (which reconcile the sub-words
        of a word) give the same words as ``"simple"``; never the argmax of the scores, which for a CRF is not the
        decoded path.
        """
        id2label = self.model.config.id2label
        entities = []
        for pre_entity in pre_entities:
            tag = pre_entity.get("tag")
            tag = int(pre_entity["scores"].argmax()) if tag is None else int(tag)
            entity = {"entity": id2label[tag], "score": pre_entity["scores"][tag], "index": pre_entity["index"]}
            if aggregation_strategy not in (AggregationStrategy.NONE, AggregationStrategy.SIMPLE):
                del entity["index"]  # as the base class's word aggregation
            entity.update(word=pre_entity["word"], start=pre_entity["start"], end=pre_entity["end"])
            entities.append(entity)
        if aggregation_strategy == AggregationStrategy.NONE:
            return entities
        return self.group_entities(entities)

    def save_pretrained(self, save_directory, **kwargs) -> None:
        """Save the model and tokenizer so that the folder runs this pipeline under ``"token-classification"``."""
        from .hub_elmo import PIPELINE_TASK, TOKEN_CLASSIFICATION_PIPELINE

        # Not the base class's way (it names the registry task, "elmo-token-classification"): the standard task
        # name is the one users ask for.
        self.model.config.custom_pipelines = {PIPELINE_TASK: dict(TOKEN_CLASSIFICATION_PIPELINE)}
        self.model.save_pretrained(save_directory, **kwargs)
        if self.tokenizer is not None:
            self.tokenizer.save_pretrained(save_directory, **kwargs)


def is_elmo_model(model) -> bool:
    """Whether ``model`` is an ELMo model (this package's class or a remote-code copy: compared by model type)."""
    return getattr(getattr(model, "config", None), "model_type", None) == "elmo"


class ElmoAwareTokenClassificationRouter(TokenClassificationPipeline):
    """transformers' ``"token-classification"`` (and ``"ner"``) task once this package is imported: it builds an
    [`ElmoTokenClassificationPipeline`] for an ELMo tagger, and transformers' own ``TokenClassificationPipeline``,
    unchanged, for any other model. It only chooses: no instance of this class is ever made.

    Why a router: ``pipeline()`` picks the class by task name alone (``PIPELINE_REGISTRY``), and a config's
    ``custom_pipelines`` would require ``trust_remote_code=True`` even with this package installed.
    """

    def __new__(cls, *args, **kwargs):
        model = kwargs["model"] if "model" in kwargs else (args[0] if args else None)
        target = ElmoTokenClassificationPipeline if is_elmo_model(model) else TokenClassificationPipeline
        return target(*args, **kwargs)  # not an instance of cls: Python does not call __init__ again


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

# Route the stock task only while it holds transformers' own class: never replace someone else's choice, and
# register once when a remote-code copy of this module is imported too.
_stock = PIPELINE_REGISTRY.supported_tasks.get(STOCK_TASK)
if _stock is not None and any(_stock["impl"] is impl or _stock["impl"] == impl for impl in _STOCK_IMPLS):
    _stock["impl"] = ElmoAwareTokenClassificationRouter

# ---------------------------------------------------------------------------------------------
# Sentence classification (ElmoForSequenceClassification)
# ---------------------------------------------------------------------------------------------

TEXT_TASK = "elmo-text-classification"


class ElmoTextClassificationPipeline(TextClassificationPipeline):
    """``text-classification`` for ELMo sentence classifiers: ``{"label", "score"}`` per text, as the stock pipeline.

    The model ignores the ids that batch collation puts at padded words (``attention_mask`` 0), so any
    ``batch_size`` works.
    It travels with a saved classifier (its config names it in ``custom_pipelines`` under ``"text-classification"``):
    ``pipeline("text-classification", model=folder_or_repo, trust_remote_code=True)``; with this package imported,
    also as the task ``"elmo-text-classification"``.
    """

    def check_model_type(self, supported_models) -> None:
        # transformers' list of sequence classifiers holds only its own models: it would log an error for ELMo's.
        if not is_elmo_model(self.model):
            super().check_model_type(supported_models)

    def save_pretrained(self, save_directory, **kwargs) -> None:
        """Save the model and tokenizer so that the folder runs this pipeline under ``"text-classification"``."""
        from .hub_elmo import TEXT_CLASSIFICATION_PIPELINE, TEXT_PIPELINE_TASK

        self.model.config.custom_pipelines = {TEXT_PIPELINE_TASK: dict(TEXT_CLASSIFICATION_PIPELINE)}
        self.model.save_pretrained(save_directory, **kwargs)
        if self.tokenizer is not None:
            self.tokenizer.save_pretrained(save_directory, **kwargs)


if TEXT_TASK not in PIPELINE_REGISTRY.supported_tasks:  # also imported as remote code: register once
    PIPELINE_REGISTRY.register_pipeline(
        TEXT_TASK,
        pipeline_class=ElmoTextClassificationPipeline,
        pt_model=AutoModelForSequenceClassification,
        type="text",
    )

__all__ = [
    "ElmoAwareTokenClassificationRouter",
    "ElmoFeatureExtractionPipeline",
    "ElmoTextClassificationPipeline",
    "ElmoTokenClassificationPipeline",
    "is_elmo_model",
]
