"""ELMo for Hugging Face transformers: config, tokenizer, biLM and heads.

Importing this package is light (no torch, no transformers): the classes load on first use
(``from modeling_elmo import ElmoModel``, PEP 562), so that the ``elmo`` command answers ``--help`` at once.

The package still registers its classes with transformers' Auto classes (``AutoConfig``, ``AutoModel``,
``AutoModelForPreTraining``, ``AutoModelForTokenClassification``, ``AutoModelForSequenceClassification``,
``AutoTokenizer``) and its pipelines (``"elmo-token-classification"``, ``"elmo-feature-extraction"``, ``"elmo-text-
classification"``, and the stock ``"token-classification"`` task for ELMo taggers), so that after ``import
modeling_elmo``, ``AutoModel.from_pretrained(folder)`` works as for a built-in model. The registration runs when it
is first needed: at once if transformers' Auto classes (or pipelines) are already imported, otherwise right after
transformers imports them (``from transformers import AutoModel`` and the like), and in any case when a class of
this package is first used.
"""

from __future__ import annotations

import importlib
import importlib.abc
import sys
import threading
from typing import TYPE_CHECKING, Any

# Public name -> the submodule that defines it.
_LAZY_NAMES = {
    "word_to_char_ids": "characters",
    "ElmoConfig": "configuration_elmo",
    "ElmoBiLm": "modeling_elmo",
    "ElmoCharacterEncoder": "modeling_elmo",
    "ElmoLstmState": "modeling_elmo",
    "ElmoModel": "modeling_elmo",
    "ElmoModelOutput": "modeling_elmo",
    "ElmoPreTrainedModel": "modeling_elmo",
    "ElmoScalarMix": "modeling_elmo",
    "ElmoForPreTraining": "modeling_elmo_pretraining",
    "ElmoForPreTrainingOutput": "modeling_elmo_pretraining",
    "ElmoForTokenClassification": "modeling_elmo_tagging",
    "ElmoForSequenceClassification": "modeling_elmo_classification",
    "ElmoTextClassificationPipeline": "pipelines_elmo",
    "ElmoTokenClassificationPipeline": "pipelines_elmo",
    "ElmoTokenizer": "tokenization_elmo",
}

__all__ = [  # the keys of _LAZY_NAMES
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

if TYPE_CHECKING:  # for type checkers and IDEs: the names as if imported eagerly
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
    from .pipelines_elmo import ElmoTextClassificationPipeline, ElmoTokenClassificationPipeline
    from .tokenization_elmo import ElmoTokenizer


def __getattr__(name: str) -> Any:
    module_name = _LAZY_NAMES.get(name)
    if module_name is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module_name}", __name__), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


# ---------------------------------------------------------------------------------------------
# Registration with transformers, when transformers' Auto classes or pipelines are imported
# ---------------------------------------------------------------------------------------------

# The modules whose import makes a registration useful, and whether it is done.
_AUTO_MODULE = "transformers.models.auto.configuration_auto"
_PIPELINES_MODULE = "transformers.pipelines"
_done = {_AUTO_MODULE: False, _PIPELINES_MODULE: False}
# Whose imports are followed, and (per thread, ``.names``) those of them under way, the innermost last.
_WATCHED = ("transformers.", f"{__name__}.")
_importing = threading.local()


def _register_auto_classes() -> None:
    from transformers import (
        AutoConfig,
        AutoModel,
        AutoModelForPreTraining,
        AutoModelForSequenceClassification,
        AutoModelForTokenClassification,
        AutoTokenizer,
    )

    from .configuration_elmo import ElmoConfig
    from .modeling_elmo import ElmoModel
    from .modeling_elmo_classification import ElmoForSequenceClassification
    from .modeling_elmo_pretraining import ElmoForPreTraining
    from .modeling_elmo_tagging import ElmoForTokenClassification
    from .tokenization_elmo import ElmoTokenizer

    AutoConfig.register("elmo", ElmoConfig, exist_ok=True)
    AutoModel.register(ElmoConfig, ElmoModel, exist_ok=True)
    AutoModelForPreTraining.register(ElmoConfig, ElmoForPreTraining, exist_ok=True)
    AutoModelForTokenClassification.register(ElmoConfig, ElmoForTokenClassification, exist_ok=True)
    AutoModelForSequenceClassification.register(ElmoConfig, ElmoForSequenceClassification, exist_ok=True)
    AutoTokenizer.register(ElmoConfig, fast_tokenizer_class=ElmoTokenizer, exist_ok=True)


def _register_pipelines() -> None:
    # The module registers the tasks "elmo-token-classification", "elmo-feature-extraction" and
    # "elmo-text-classification", and routes the stock "token-classification" for ELMo taggers, when imported.
    importlib.import_module(".pipelines_elmo", __name__)
    _register_fill_mask_pipeline()


def _register_fill_mask_pipeline() -> None:
    # The task "elmo-fill-mask" (issue 28: fill-in-the-blank from the released softmax), kept apart to merge simply.
    importlib.import_module(".pipelines_fill_mask_elmo", __name__).register_fill_mask_pipeline()


def _register_what_is_due() -> None:
    """Register with what transformers has imported so far; runs when an import of transformers or of this package
    ends and no other is under way in this thread (so that every module the registration imports is complete)."""
    for module_name, register in ((_AUTO_MODULE, _register_auto_classes), (_PIPELINES_MODULE, _register_pipelines)):
        if not _done[module_name] and module_name in sys.modules:
            _done[module_name] = True  # first: the imports below end in this function again
            try:
                register()
            except BaseException:
                _done[module_name] = False
                raise
    if all(_done.values()) and _FINDER in sys.meta_path:
        sys.meta_path.remove(_FINDER)


class _AfterImports(importlib.abc.MetaPathFinder):
    """Calls [`_register_what_is_due`] whenever the outermost import of a module of transformers or of this package
    ends: how a light ``import modeling_elmo`` still registers before the user's first ``AutoModel.from_pretrained``.

    A finder in ``sys.meta_path`` that leaves the finding to the other finders and wraps the loader they return,
    so that every module's code runs unchanged. Waiting for the outermost import matters: transformers imports its
    Auto classes in the middle of importing ``modeling_utils`` (through its quantizers), when ``PreTrainedModel``,
    which the ELMo models subclass, does not exist yet. It leaves ``sys.meta_path`` once everything is registered.
    """

    def find_spec(self, fullname: str, path=None, target=None):
        if not fullname.startswith(_WATCHED):
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _ThenRegister(spec.loader)
        return spec


class _ThenRegister(importlib.abc.Loader):
    """Runs ``loader``, then [`_register_what_is_due`] if no other watched import is under way in this thread.
    The module keeps ``loader`` as its own."""

    def __init__(self, loader) -> None:
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module) -> None:
        module.__loader__ = self.loader  # importlib.resources, inspect... see the real loader
        if getattr(module, "__spec__", None) is not None:
            module.__spec__.loader = self.loader
        stack = _importing.__dict__.setdefault("names", [])
        stack.append(module.__name__)
        try:
            self.loader.exec_module(module)
        finally:
            stack.pop()
        if not stack:
            _register_what_is_due()

    def __getattr__(self, name: str):
        return getattr(self.loader, name)


_FINDER = _AfterImports()
sys.meta_path.insert(0, _FINDER)
_register_what_is_due()  # transformers' Auto classes may be imported already
