"""Hub-ready folders: the code files that travel with a saved ELMo and the config entries that point at them.

Every ``save_pretrained`` of an ELMo model ends with [`prepare_hub_folder`] (see
``ElmoPreTrainedModel.save_pretrained``): it copies the shipped modules next to ``config.json``, completes
``auto_map`` (and ``custom_pipelines`` for a tagger or a sentence classifier), and writes a model card unless the
folder already has a README of the user's. Someone without this package can then load the folder (or its Hub copy) with
``trust_remote_code=True``. The config itself only writes ``config.json``; ``ELMO_AUTO_MAP`` lives with it
(``configuration_elmo.py``, the ground floor), and is re-exported here.

This module travels with the model itself (the model imports it when saving), so it imports nothing beyond the
standard library, transformers and the configuration.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from typing import Any

from .configuration_elmo import ELMO_AUTO_MAP

logger = logging.getLogger(__name__)

# The token-classification pipeline that a tagger's config names: `pipeline("token-classification", model=...,
# trust_remote_code=True)` then runs it instead of the built-in one (which fails on 3-D character ids).
PIPELINE_TASK = "token-classification"
TOKEN_CLASSIFICATION_PIPELINE: dict[str, Any] = {
    "impl": "pipelines_elmo.ElmoTokenClassificationPipeline",
    "pt": ["AutoModelForTokenClassification"],
    "type": "text",
}
# The same for a sentence classifier (the stock text-classification pipeline cannot batch 3-D character ids).
TEXT_PIPELINE_TASK = "text-classification"
TEXT_CLASSIFICATION_PIPELINE: dict[str, Any] = {
    "impl": "pipelines_elmo.ElmoTextClassificationPipeline",
    "pt": ["AutoModelForSequenceClassification"],
    "type": "text",
}

# Modules a saved folder must hold: those named by auto_map and the pipeline. Their relative imports follow.
ENTRY_MODULES = (
    "configuration_elmo",
    "modeling_elmo",
    "modeling_elmo_pretraining",
    "modeling_elmo_tagging",
    "modeling_elmo_classification",
    "tokenization_elmo",
    "pipelines_elmo",
)

# Libraries that only the converter and the training commands use: a shipped module that imports one of them
# would make it a requirement for everyone who loads the model from the Hub.
FORBIDDEN_IMPORTS = ("h5py", "datasets", "accelerate", "seqeval", "modeling_elmo", "convert_original_weights")


def _module_of(reference: str) -> str:
    return reference.split("--")[-1].split(".")[0]


def shipped_files(source_dir: str | os.PathLike | None = None) -> list[Path]:
    """The code files that travel with a model: the entry modules present in ``source_dir`` and everything
    they import relatively (``from .x import y``), in a stable order.

    ``source_dir`` defaults to the folder of this module (the installed package, or transformers' cache of
    remote code).
    """
    from transformers.dynamic_module_utils import get_relative_import_files

    source = Path(source_dir) if source_dir is not None else Path(__file__).resolve().parent
    found: dict[str, Path] = {}
    for name in ENTRY_MODULES:
        path = source / f"{name}.py"
        if not path.is_file():
            continue
        found.setdefault(path.name, path)
        for needed in get_relative_import_files(path):
            needed = Path(needed)
            if needed.is_file():
                found.setdefault(needed.name, needed)
    return [found[name] for name in sorted(found)]


def _fetch_missing(name: str, origin: str | None) -> Path | None:
    """A code file that this module's folder lacks (remote code is cached file by file): take it from the
    folder or Hub repository the model was loaded from, if it has it."""
    if not origin:
        return None
    local = Path(origin) / name
    if local.is_file():
        return local
    try:
        from transformers.utils import cached_file

        path = cached_file(origin, name, _raise_exceptions_for_missing_entries=False)
    except Exception:  # offline, no such repository, ...: the entry is dropped below
        return None
    return Path(path) if path else None


def copy_shipped_code(save_directory: str | os.PathLike, origin: str | None = None) -> list[str]:
    """Copy the shipped modules into ``save_directory``; return the file names now there.

    Files missing next to this module (when it runs as remote code) are looked for in ``origin``.
    """
    target = Path(save_directory)
    target.mkdir(parents=True, exist_ok=True)
    copied = []
    files = {path.name: path for path in shipped_files()}
    for name in (f"{module}.py" for module in ENTRY_MODULES):
        if name not in files:
            fetched = _fetch_missing(name, origin)
            if fetched is not None:
                files[name] = fetched
                files.update({p.name: p for p in shipped_files(fetched.parent) if p.name not in files})
    for name, path in sorted(files.items()):
        destination = target / name
        if destination.resolve() != path.resolve():
            shutil.copyfile(path, destination)
        copied.append(name)
    return copied


def complete_auto_map(auto_map: dict[str, Any] | None, available: set[str] | None = None) -> dict[str, Any]:
    """``auto_map`` with every ELMo entry; with ``available`` (module names present in the folder), entries
    that point into this folder but whose file is absent are dropped, and repository prefixes (``repo--``,
    added by transformers when loading remote code) are removed from those whose file is present."""
    merged = {**ELMO_AUTO_MAP, **(auto_map or {})}
    if available is None:
        return merged
    result = {}
    for key, reference in merged.items():
        refs = list(reference) if isinstance(reference, (list, tuple)) else [reference]
        kept = []
        for ref in refs:
            if ref is not None and _module_of(ref) in available:
                ref = ref.split("--")[-1]
            elif ref is not None and "--" not in ref:
                ref = None  # its file is not in the folder: the entry would not load
            kept.append(ref)
        if any(ref is not None for ref in kept):
            result[key] = kept if isinstance(reference, (list, tuple)) else kept[0]
        else:
            logger.warning("%s left out of auto_map: its code file is not available to copy", key)
    return result


def is_tagger(config: Any) -> bool:
    return any(name.endswith("ForTokenClassification") for name in (getattr(config, "architectures", None) or []))


def is_sequence_classifier(config: Any) -> bool:
    return any(name.endswith("ForSequenceClassification") for name in (getattr(config, "architectures", None) or []))


def prepare_hub_folder(config: Any, save_directory: str | os.PathLike) -> None:
    """Make ``save_directory`` Hub-ready (see the module docstring): copy the shipped code, complete
    ``config.auto_map`` and, for a tagger or a sentence classifier, ``config.custom_pipelines``, and write the model
    card. The caller writes ``config.json`` afterwards (``config`` is changed here)."""
    from .model_card import write_model_card

    origin = getattr(config, "_name_or_path", None) or None
    copied = copy_shipped_code(save_directory, origin=origin)
    config.auto_map = complete_auto_map(getattr(config, "auto_map", None), {Path(n).stem for n in copied})
    if is_tagger(config) and "pipelines_elmo.py" in copied and not getattr(config, "custom_pipelines", None):
        config.custom_pipelines = {PIPELINE_TASK: dict(TOKEN_CLASSIFICATION_PIPELINE)}
    if (
        is_sequence_classifier(config)
        and "pipelines_elmo.py" in copied
        and not getattr(config, "custom_pipelines", None)
    ):
        config.custom_pipelines = {TEXT_PIPELINE_TASK: dict(TEXT_CLASSIFICATION_PIPELINE)}
    write_model_card(save_directory, config)


__all__ = [
    "ELMO_AUTO_MAP",
    "ENTRY_MODULES",
    "FORBIDDEN_IMPORTS",
    "PIPELINE_TASK",
    "TEXT_CLASSIFICATION_PIPELINE",
    "TEXT_PIPELINE_TASK",
    "TOKEN_CLASSIFICATION_PIPELINE",
    "complete_auto_map",
    "copy_shipped_code",
    "prepare_hub_folder",
    "shipped_files",
]
