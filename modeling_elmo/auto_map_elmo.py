"""The code a remote-code folder maps: every Auto class the package registers, and the token-classification pipeline.

A folder saved with its code (``modeling_elmo.hub.remote_code.save_with_remote_code``) maps every Auto class that
``import modeling_elmo`` registers (``AUTO_MAP``), so that someone without the package can load any head from it with
``trust_remote_code=True`` (``AutoModelForTokenClassification`` from a converted biLM, to fine-tune a tagger), and
names the ELMo token-classification pipeline (``CUSTOM_PIPELINES``), which the stock ``"token-classification"`` task
then runs. Each value is ``"<module>.<Class>"``, the module flat beside this one, as transformers expects.

This module ships with the code (``modeling_elmo.py`` imports it, and it imports the pipeline's module, so both
travel with every model's code): a save of a model loaded from a remote-code folder, where the package is not
installed (``Trainer.save_model`` after fine-tuning), runs [`code_for_save`] too. The folder it writes names only code
that it holds (transformers copies the saved class's module and what that imports relatively), and keeps the pipeline.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from .pipelines_elmo import ElmoTokenClassificationPipeline

# One line per Auto class that `import modeling_elmo` registers; a new head adds its line here.
# tests/test_remote_code_clean_env.py checks that these and the package's registrations agree.
AUTO_MAP = {
    "AutoConfig": "configuration_elmo.ElmoConfig",
    "AutoModel": "modeling_elmo.ElmoModel",
    "AutoModelForPreTraining": "modeling_elmo_pretraining.ElmoForPreTraining",
    "AutoModelForTokenClassification": "modeling_elmo_tagging.ElmoForTokenClassification",
    "AutoModelForSequenceClassification": "modeling_elmo_classification.ElmoForSequenceClassification",
    "AutoModelForQuestionAnswering": "modeling_elmo_qa.ElmoForQuestionAnswering",
    "AutoModelForMaskedLM": "pipelines_fill_mask_elmo.ElmoForMaskedLM",  # raises, naming "elmo-fill-mask"
    "AutoTokenizer": ["tokenization_elmo.ElmoTokenizer", None],  # (slow, fast), as transformers writes it
}

# The config's ``custom_pipelines``, as ``Pipeline.save_pretrained`` writes it: the stock task runs ELMo's class.
CUSTOM_PIPELINES = {
    "token-classification": {
        "impl": f"pipelines_elmo.{ElmoTokenClassificationPipeline.__name__}",
        "pt": ["AutoModelForTokenClassification"],
        "type": "text",
    }
}

# The config fields that name code files.
CODE_FIELDS = ("auto_map", "custom_pipelines")


def code_file(reference: str | list | tuple | dict) -> str:
    """The file that defines an ``auto_map`` or ``custom_pipelines`` value:
    ``"modeling_elmo_qa.ElmoForQuestionAnswering"`` -> ``"modeling_elmo_qa.py"``; for a tokenizer's ``[slow, fast]``
    pair, the first one given; for a pipeline, its ``"impl"``."""
    if isinstance(reference, dict):
        reference = reference["impl"]
    if isinstance(reference, (list, tuple)):
        reference = next(r for r in reference if r)
    return reference.rsplit(".", 1)[0] + ".py"


def files_saved_with(obj) -> set[str]:
    """The names of the code files that transformers' ``custom_object_save`` copies for ``obj`` (a model or config
    registered with ``register_for_auto_class``): its class's module and every module that one imports relatively."""
    from transformers.dynamic_module_utils import get_relative_import_files

    module_file = getattr(sys.modules.get(type(obj).__module__), "__file__", None)
    if module_file is None:
        return set()
    return {Path(module_file).name, *(Path(f).name for f in get_relative_import_files(module_file))}


@contextlib.contextmanager
def code_for_save(model, save_directory: str | os.PathLike) -> Iterator[None]:
    """Within the block (``model.save_pretrained``), ``model.config``'s ``auto_map`` and ``custom_pipelines`` keep
    only the entries whose code the folder will hold: none for a plain save (``model`` not registered with
    ``register_for_auto_class``); for a save with code, the files already in ``save_directory`` and those copied for
    the model and its config. Entries naming another repository's code (``"owner/name--module.Class"``) stay. The
    config's own values come back when the block ends."""
    config = model.config
    before = {key: vars(config)[key] for key in CODE_FIELDS if key in vars(config)}
    holds = set()
    if getattr(model, "_auto_class", None) is not None:
        holds = files_saved_with(model) | files_saved_with(config)
        if os.path.isdir(save_directory):
            holds |= set(os.listdir(save_directory))
    try:
        for key, value in before.items():
            kept = {k: v for k, v in (value or {}).items() if "--" in str(v) or code_file(v) in holds}
            delattr(config, key)
            if kept:
                setattr(config, key, kept)
        yield
    finally:
        for key in CODE_FIELDS:
            if key in vars(config):
                delattr(config, key)
        for key, value in before.items():
            setattr(config, key, value)


__all__ = ["AUTO_MAP", "CODE_FIELDS", "CUSTOM_PIPELINES", "code_file", "code_for_save", "files_saved_with"]
