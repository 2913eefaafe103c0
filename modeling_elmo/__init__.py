"""ELMo for Hugging Face transformers: config, tokenizer, biLM and heads.

Importing this package registers the classes with the Auto classes, so that
``AutoConfig``/``AutoModel``/``AutoTokenizer.from_pretrained`` work on converted checkpoints.
"""

from transformers import AutoConfig, AutoModel, AutoTokenizer

from .characters import word_to_char_ids
from .configuration_elmo import ElmoConfig
from .modeling_elmo import (
    ElmoBiLm,
    ElmoCharacterEncoder,
    ElmoModel,
    ElmoModelOutput,
    ElmoPreTrainedModel,
    ElmoScalarMix,
)
from .tokenization_elmo import ElmoTokenizer

AutoConfig.register("elmo", ElmoConfig, exist_ok=True)
AutoModel.register(ElmoConfig, ElmoModel, exist_ok=True)
AutoTokenizer.register(ElmoConfig, fast_tokenizer_class=ElmoTokenizer, exist_ok=True)

__all__ = [
    "ElmoBiLm",
    "ElmoCharacterEncoder",
    "ElmoConfig",
    "ElmoModel",
    "ElmoModelOutput",
    "ElmoPreTrainedModel",
    "ElmoScalarMix",
    "ElmoTokenizer",
    "word_to_char_ids",
]
