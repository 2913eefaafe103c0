"""Remote code on request (transformers' ``register_for_auto_class`` convention), and the commands' Hub check.

Saved ELMo folders are plain by default: config, weights, tokenizer (and a card when a command writes them), loaded
with this package installed. A folder that should load without the package, with ``trust_remote_code=True``, is
asked for: [`save_with_remote_code`] copies every module that defines a registered class (with everything they
import relatively), registers the model, its config and the tokenizer for their Auto classes, and transformers' own
``save_pretrained`` writes ``auto_map``: every Auto class the package registers (``auto_map_elmo.AUTO_MAP``), so that
any head loads from the folder (``AutoModelForTokenClassification`` from a converted biLM, to fine-tune a tagger), and
``custom_pipelines``: [`ElmoTokenClassificationPipeline`] for the stock ``"token-classification"`` task.
``elmo convert --remote_code`` and the training commands' ``--remote_code`` use it.
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from ..auto_map_elmo import AUTO_MAP, CODE_FIELDS, CUSTOM_PIPELINES, code_file

logger = logging.getLogger(__name__)

# The Auto class that a saved model of each class is registered for (from AUTO_MAP: add a head there).
AUTO_CLASSES = {
    reference.rsplit(".", 1)[1]: auto_class
    for auto_class, reference in AUTO_MAP.items()
    if auto_class.startswith("AutoModel")
}

# The modules a remote-code folder holds: those that define the mapped classes, and the pipeline.
ENTRY_MODULES = tuple(
    dict.fromkeys([*(code_file(value)[: -len(".py")] for value in AUTO_MAP.values()), "pipelines_elmo"])
)

# Libraries that only the converter and the training commands use: a shipped module that imports one of them
# would make it a requirement for everyone who loads the model from the Hub.
FORBIDDEN_IMPORTS = ("h5py", "datasets", "accelerate", "seqeval", "modeling_elmo", "convert_original_weights")

_UNSET = object()

# Seconds to wait for the Hugging Face Hub in the commands' check before loading a Hub id (``hub_local_files_only``).
HUB_PROBE_TIMEOUT = 5.0


def shipped_files() -> list[Path]:
    """The code files that a remote-code folder holds: the entry modules and everything they import relatively
    (``from .x import y``), as transformers finds them, in a stable order."""
    from transformers.dynamic_module_utils import get_relative_import_files

    source = Path(__file__).resolve().parent.parent
    found: dict[str, Path] = {}
    for name in ENTRY_MODULES:
        path = source / f"{name}.py"
        found.setdefault(path.name, path)
        for needed in map(Path, get_relative_import_files(path)):
            found.setdefault(needed.name, needed)
    return [found[name] for name in sorted(found)]


@contextlib.contextmanager
def remote_code(model, tokenizer=None) -> Iterator[None]:
    """Within the block, saves (``save_pretrained``, ``push_to_hub``) of ``model``, its config and ``tokenizer`` carry
    their code: each is registered with ``register_for_auto_class`` (the model for the Auto class of its class), and
    the config's ``auto_map`` and ``custom_pipelines`` name every Auto class of ``AUTO_MAP`` and the pipeline, as far
    as the saved folder holds their code (a folder of [`save_with_remote_code`] holds it all; a push from here, the
    saved class's module and what it imports: the base model, the pipeline, the config).

    transformers' registration is class-wide (``_auto_class`` is a class attribute): the classes' earlier settings,
    and the config's ``auto_map`` and ``custom_pipelines``, come back when the block ends, so that later saves in this
    process stay plain.
    """
    name = type(model).__name__
    if name not in AUTO_CLASSES:
        raise ValueError(f"no Auto class for {name}: remote code is for {', '.join(AUTO_CLASSES)}")
    classes = [type(model), type(model.config)] + ([type(tokenizer)] if tokenizer is not None else [])
    before = [cls.__dict__.get("_auto_class", _UNSET) for cls in classes]
    fields = {key: vars(model.config)[key] for key in CODE_FIELDS if key in vars(model.config)}
    try:
        model.register_for_auto_class(AUTO_CLASSES[name])
        model.config.register_for_auto_class()
        if tokenizer is not None:
            tokenizer.register_for_auto_class()
        # The model's save keeps the entries whose code its folder holds (auto_map_elmo.code_for_save).
        model.config.auto_map = copy.deepcopy(AUTO_MAP)
        model.config.custom_pipelines = copy.deepcopy(CUSTOM_PIPELINES)
        yield
    finally:
        for cls, value in zip(classes, before, strict=True):
            if value is _UNSET:
                delattr(cls, "_auto_class")
            else:
                cls._auto_class = value
        for key in CODE_FIELDS:
            if key in vars(model.config):
                delattr(model.config, key)
        for key, value in fields.items():
            setattr(model.config, key, value)


def save_with_remote_code(model, tokenizer, folder: str | os.PathLike) -> None:
    """Save ``model`` and ``tokenizer`` into ``folder`` with the code of every class in ``AUTO_MAP`` and of the
    token-classification pipeline: it loads without this package (``trust_remote_code=True``) through any of those
    Auto classes, and the stock ``"token-classification"`` task runs ELMo's pipeline class on it. The config then
    holds the ``auto_map`` and ``custom_pipelines`` written there.

    Everything is written into a new hidden folder inside ``folder``, then moved to its name with ``os.replace``: a
    symbolic link in ``folder`` under a name of the save (a module's, ``config.json``...) is replaced by the file,
    and its target, maybe outside the folder, is never written."""
    os.makedirs(folder, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".elmo-save-", dir=folder)
    try:
        for path in shipped_files():  # first: the model's save keeps the auto_map entries whose code the folder holds
            shutil.copyfile(path, Path(staging) / path.name)
        with remote_code(model, tokenizer):
            model.save_pretrained(staging)
            tokenizer.save_pretrained(staging)
        for name in sorted(os.listdir(staging)):
            os.replace(os.path.join(staging, name), os.path.join(folder, name))  # a link there goes, not its target
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    # As transformers' own save with code leaves it: the config names the code of the folder it was saved to (its
    # card says how to load it; a later plain save leaves these out, see auto_map_elmo.code_for_save).
    saved = json.loads((Path(folder) / "config.json").read_text(encoding="utf-8"))
    for key in CODE_FIELDS:
        if key in saved:
            setattr(model.config, key, saved[key])


def _is_hub_id(name: str) -> bool:
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(name)
    except HFValidationError:
        return False
    return True


def hub_local_files_only(
    name: str, local_files_only: bool = False, revision: str | None = None, cache_dir=None
) -> bool:
    """The commands' check before loading ``name``, which is no local path, as a Hugging Face Hub id; says whether
    to load it from the local cache only (``local_files_only``).

    Offline (``HF_HUB_OFFLINE=1``, or ``local_files_only``) the model must be in the cache. Online, the Hub is
    probed once with a ``HUB_PROBE_TIMEOUT`` s request (through the same proxies as the downloads); if it cannot
    be reached, a cached copy is used, else the error comes at once instead of after minutes of retries.

    Raises:
        OSError: ``name`` is no folder and not a Hub id; or it is not cached and cannot be downloaded.
    """
    from huggingface_hub import constants, try_to_load_from_cache

    if not _is_hub_id(name):
        raise OSError(f"no such folder {name} (and not a Hugging Face Hub id such as owner/name)")
    try:
        cached = isinstance(try_to_load_from_cache(name, "config.json", cache_dir=cache_dir, revision=revision), str)
    except Exception:  # an unusual revision or cache layout: let the download decide
        cached = False
    if local_files_only or constants.is_offline_mode():
        if not cached:
            raise OSError(
                f"no such folder {name}, and the Hub id {name} is not in the local Hugging Face cache (offline: "
                "HF_HUB_OFFLINE or local_files_only is set)"
            )
        return True
    from huggingface_hub.utils import get_session

    try:
        get_session().head(constants.ENDPOINT, timeout=HUB_PROBE_TIMEOUT)
    except Exception as error:  # DNS, refused, timeout, proxy, TLS: any answer at all would do
        if cached:
            logger.warning(f"cannot reach {constants.ENDPOINT} ({error}): loading {name} from the local cache")
            return True
        raise OSError(
            f"no such folder {name}, and the Hugging Face Hub ({constants.ENDPOINT}) cannot be reached to download "
            f"it as a Hub id ({type(error).__name__}: {error}). Check the path, or the network (HF_HUB_OFFLINE=1 "
            "loads only from the local cache)"
        ) from error
    return False


__all__ = [
    "AUTO_CLASSES",
    "ENTRY_MODULES",
    "FORBIDDEN_IMPORTS",
    "hub_local_files_only",
    "remote_code",
    "save_with_remote_code",
    "shipped_files",
]
