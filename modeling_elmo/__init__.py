"""ELMo for Hugging Face transformers: config, tokenizer, biLM and heads.

Importing this package registers the classes with the Auto classes, so that
``AutoConfig``/``AutoModel``/``AutoTokenizer.from_pretrained`` work on converted checkpoints.
"""

from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForPreTraining,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
    AutoTokenizer,
)

from .characters import word_to_char_ids
from .configuration_elmo import ElmoConfig
from .modeling_elmo import (
    ElmoBiLm,
    ElmoCharacterEncoder,
    ElmoLstmState,
    ElmoModel,
    ElmoModelOutput,
    ElmoPreTrainedModel,
    ElmoScalarMix,
)
from .modeling_elmo_classification import ElmoForSequenceClassification
from .modeling_elmo_pretraining import ElmoForPreTraining, ElmoForPreTrainingOutput
from .modeling_elmo_tagging import ElmoForTokenClassification
from .tokenization_elmo import ElmoTokenizer

AutoConfig.register("elmo", ElmoConfig, exist_ok=True)
AutoModel.register(ElmoConfig, ElmoModel, exist_ok=True)
AutoModelForPreTraining.register(ElmoConfig, ElmoForPreTraining, exist_ok=True)
AutoModelForTokenClassification.register(ElmoConfig, ElmoForTokenClassification, exist_ok=True)
AutoModelForSequenceClassification.register(ElmoConfig, ElmoForSequenceClassification, exist_ok=True)
AutoTokenizer.register(ElmoConfig, fast_tokenizer_class=ElmoTokenizer, exist_ok=True)
# The tokenizer's save then writes its auto_map and copies its code for trust_remote_code (the models' save
# does the same, through ElmoPreTrainedModel.save_pretrained: see hub_elmo.py).
ElmoTokenizer.register_for_auto_class("AutoTokenizer")
# Registers the tasks "elmo-token-classification" and "elmo-text-classification" (a tagger's or a classifier's saved
# config also names its pipeline for "token-classification" or "text-classification").
from .pipelines_elmo import ElmoTextClassificationPipeline, ElmoTokenClassificationPipeline  # noqa: E402

__all__ = [
    "ElmoBiLm",
    "ElmoCharacterEncoder",
    "ElmoConfig",
    "ElmoForPreTraining",
    "ElmoForPreTrainingOutput",
    "ElmoForSequenceClassification",
    "ElmoForTokenClassification",
    "ElmoLstmState",
    "ElmoModel",
    "ElmoModelOutput",
    "ElmoPreTrainedModel",
    "ElmoScalarMix",
    "ElmoTextClassificationPipeline",
    "ElmoTokenClassificationPipeline",
    "ElmoTokenizer",
    "word_to_char_ids",
]
