"""ELMo for Hugging Face transformers: config, tokenizer, biLM and heads, registered with transformers at import.

``import modeling_elmo`` registers, with transformers' public calls and nothing else:

- the config, the models and the tokenizer with the Auto classes (``AutoConfig.register``, ``AutoModel.register``
  and the ``AutoModelFor*`` of each head, ``AutoTokenizer.register``), so that ``AutoModel.from_pretrained(folder)``
  works on an ELMo folder as on a built-in model, without ``trust_remote_code``;
- [`ElmoTokenClassificationPipeline`] for the stock ``"token-classification"`` task
  (``PIPELINE_REGISTRY.register_pipeline``, which replaces the task's class; transformers' notice of the replacement
  is left out, with its public verbosity switch, and the user's level restored),
  the stock class generalised to ELMo's character ids and unchanged for every other model;
- the task ``"elmo-feature-extraction"`` ([`ElmoFeatureExtractionPipeline`]);
- the task ``"elmo-question-answering"`` ([`ElmoQuestionAnsweringPipeline`]): extractive answers as character spans,
  as transformers 4's ``"question-answering"`` gave them (transformers 5 removed that task);
- the task ``"elmo-fill-mask"`` ([`ElmoFillMaskPipeline`]): fill-in-the-blank from a biLM's released softmax, as LAMA
  did (the stock ``"fill-mask"`` expects a masked LM's one output per position, not two directions' predictions).

The stock ``"feature-extraction"`` and ``"text-classification"`` pipelines serve ELMo folders as they are. The
``elmo`` command does not import this package until a subcommand runs (``elmo --help`` stays quick).

The layout's rule: the top of this folder holds exactly what a saved folder's code may need (the modules that
``hub.remote_code.shipped_files`` copies into a remote-code folder), besides ``__init__.py`` and ``__main__.py``
(``python -m modeling_elmo SCRIPT``). Everything else is a tool and lives in a sub-package named for what it does:
``commands``, ``training``, ``inference``, ``hub``, ``compat``, ``integrations``, ``demo_models``, ``plots``,
``pipelines`` (the ``"elmo-question-answering"`` pipeline, which no saved folder carries), ``reference`` (the
step-by-step biLM the tests compare against). ``tests/test_packaging.py`` checks it.
"""

from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForMaskedLM,
    AutoModelForPreTraining,
    AutoModelForQuestionAnswering,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
    AutoTokenizer,
)
from transformers.pipelines import PIPELINE_REGISTRY
from transformers.utils import logging as _hf_logging

from .characters import word_to_char_ids
from .configuration_elmo import ElmoConfig
from .demo_models.language_model import demo_language_model_path
from .demo_models.model import demo_model_path
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
from .modeling_elmo_qa import ElmoForQuestionAnswering
from .modeling_elmo_tagging import ElmoForTokenClassification, ElmoTokenClassifierOutput
from .pipelines.question_answering import QA_TASK, ElmoQuestionAnsweringPipeline
from .pipelines_elmo import FEATURE_TASK, ElmoFeatureExtractionPipeline, ElmoTokenClassificationPipeline
from .pipelines_fill_mask_elmo import FILL_MASK_TASK, ElmoAwareFillMaskPipeline, ElmoFillMaskPipeline, ElmoForMaskedLM
from .tokenization_elmo import ElmoTokenizer

AutoConfig.register("elmo", ElmoConfig, exist_ok=True)
AutoModel.register(ElmoConfig, ElmoModel, exist_ok=True)
AutoModelForPreTraining.register(ElmoConfig, ElmoForPreTraining, exist_ok=True)
AutoModelForTokenClassification.register(ElmoConfig, ElmoForTokenClassification, exist_ok=True)
AutoModelForSequenceClassification.register(ElmoConfig, ElmoForSequenceClassification, exist_ok=True)
AutoModelForQuestionAnswering.register(ElmoConfig, ElmoForQuestionAnswering, exist_ok=True)
AutoTokenizer.register(ElmoConfig, fast_tokenizer_class=ElmoTokenizer, exist_ok=True)
# No masked LM: a class that raises, naming "elmo-fill-mask", where the stock "fill-mask" task would say only
# "Unrecognized configuration class".
AutoModelForMaskedLM.register(ElmoConfig, ElmoForMaskedLM, exist_ok=True)

# The stock task keeps its default model; only the class changes (to one that is the stock class for other models).
# transformers warns that the task is "already registered": that replacement is this call's documented purpose, so
# its verbosity is at ERROR for this one call (its public switch), and the user's level comes back after it.
_stock = PIPELINE_REGISTRY.supported_tasks["token-classification"]
_stock_fill = PIPELINE_REGISTRY.supported_tasks["fill-mask"]
_verbosity = _hf_logging.get_verbosity()
_hf_logging.set_verbosity(_hf_logging.ERROR)
try:
    PIPELINE_REGISTRY.register_pipeline(
        "token-classification",
        pipeline_class=ElmoTokenClassificationPipeline,
        pt_model=AutoModelForTokenClassification,
        default=_stock.get("default"),
        type=_stock.get("type", "text"),
    )
    # A model instance of ELMo in the stock "fill-mask" gets the message naming "elmo-fill-mask" (a folder gets it
    # from ElmoForMaskedLM); every other model runs the stock class.
    PIPELINE_REGISTRY.register_pipeline(
        "fill-mask",
        pipeline_class=ElmoAwareFillMaskPipeline,
        pt_model=AutoModelForMaskedLM,
        default=_stock_fill.get("default"),
        type=_stock_fill.get("type", "text"),
    )
finally:
    _hf_logging.set_verbosity(_verbosity)
PIPELINE_REGISTRY.register_pipeline(
    FEATURE_TASK, pipeline_class=ElmoFeatureExtractionPipeline, pt_model=AutoModel, type="text"
)
PIPELINE_REGISTRY.register_pipeline(
    FILL_MASK_TASK, pipeline_class=ElmoFillMaskPipeline, pt_model=AutoModelForPreTraining, type="text"
)
PIPELINE_REGISTRY.register_pipeline(
    QA_TASK, pipeline_class=ElmoQuestionAnsweringPipeline, pt_model=AutoModelForQuestionAnswering, type="text"
)
del _stock, _stock_fill, _verbosity

__all__ = [
    "ElmoBiLm",
    "ElmoCharacterEncoder",
    "ElmoConfig",
    "ElmoFeatureExtractionPipeline",
    "ElmoFillMaskPipeline",
    "ElmoForPreTraining",
    "ElmoForPreTrainingOutput",
    "ElmoForQuestionAnswering",
    "ElmoForSequenceClassification",
    "ElmoForTokenClassification",
    "ElmoLstmState",
    "ElmoQuestionAnsweringPipeline",
    "ElmoModel",
    "ElmoModelOutput",
    "ElmoPreTrainedModel",
    "ElmoScalarMix",
    "ElmoTokenClassificationPipeline",
    "ElmoTokenClassifierOutput",
    "ElmoTokenizer",
    "demo_language_model_path",
    "demo_model_path",
    "word_to_char_ids",
]
