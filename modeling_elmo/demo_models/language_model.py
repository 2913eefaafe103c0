"""The bundled demo model's language model: its biLM with an LM softmax (``ElmoForPreTraining``).

The demo folder (``demo_model/``) holds the ``ElmoModel`` part only, as every embedding command loads it. The
softmax (10,000 words x 64, plus the bias) ships beside it, in ``demo_model_lm/softmax.safetensors``: ``W`` in
float16 to keep the package small, ``b`` in float32, and the SHA-256 of the biLM file it belongs to. The shipped
biLM came from a run that kept no softmax, so ``scripts/fit_demo_softmax.py`` fitted this one afresh on the
frozen biLM (its test perplexity, in ``demo_model_lm/fit_results.json``, is above the jointly trained one's).
Without the file [`has_demo_language_model`] is False, ``elmo demo`` shows fill-in-the-blank as unavailable and
``elmo score --model demo`` says how to get one.

[`load_demo_language_model`] joins the two in memory; [`demo_language_model_path`] writes the pair once into the
cache as an ordinary ``ElmoForPreTraining`` folder, for what takes a folder (``pipeline("elmo-fill-mask", ...)``),
with a record of the size and SHA-256 of each file it wrote (``.elmo-demo-lm.json``): a later call checks them, and
writes the folder again if anything differs.

Shapes: V = 10,000 words (``<S>``, ``</S>``, ``<UNK>`` first), P = 64 (the projection).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

from .model import DEMO_MODEL_DIR

DEMO_LM_DIR = Path(__file__).resolve().parent / "demo_softmax"
DEMO_SOFTMAX_FILE = DEMO_LM_DIR / "softmax.safetensors"
DEMO_NAME = "demo"  # what --model accepts for it (an existing folder of that name wins)
RECORD_NAME = ".elmo-demo-lm.json"  # in the cached folder: the size and SHA-256 of each file written there


def has_demo_language_model() -> bool:
    """Whether this install has the demo biLM and its softmax (a checkout that has not trained them has neither)."""
    return (DEMO_MODEL_DIR / "model.safetensors").is_file() and DEMO_SOFTMAX_FILE.is_file()


def _require() -> None:
    if not has_demo_language_model():
        raise FileNotFoundError(
            f"the demo model's language model is missing ({DEMO_MODEL_DIR / 'model.safetensors'} and "
            f"{DEMO_SOFTMAX_FILE} are both needed): fit the softmax with scripts/fit_demo_softmax.py"
        )


def demo_bilm_for_pretraining():
    """An ``ElmoForPreTraining`` in eval mode holding the demo biLM's weights and a new (random) softmax.

    What ``scripts/fit_demo_softmax.py`` fits the softmax on, and what [`load_demo_language_model`] fills.
    """
    if not (DEMO_MODEL_DIR / "model.safetensors").is_file():
        raise FileNotFoundError(f"{DEMO_MODEL_DIR / 'model.safetensors'} is missing")
    from safetensors.torch import load_file

    from ..configuration_elmo import ElmoConfig
    from ..modeling_elmo_pretraining import ElmoForPreTraining

    config = ElmoConfig.from_pretrained(DEMO_MODEL_DIR)
    config.architectures = ["ElmoForPreTraining"]
    model = ElmoForPreTraining(config)
    bilm = load_file(DEMO_MODEL_DIR / "model.safetensors")
    wanted = model.elmo.state_dict()
    missing = sorted(set(wanted) - set(bilm))
    if missing:
        raise ValueError(f"{DEMO_MODEL_DIR / 'model.safetensors'} lacks {', '.join(missing)}")
    # The demo ElmoModel also holds scalar mixes, which the LM head does not build.
    model.elmo.load_state_dict({name: bilm[name] for name in wanted})
    return model.eval()


def load_demo_language_model():
    """``(ElmoForPreTraining, ElmoTokenizer)``: the demo biLM under its shipped softmax (float32), in eval mode.

    The biLM's weights are those of ``ElmoModel.from_pretrained(demo_model_path())``, unchanged; the softmax's
    ``W`` is the shipped float16 one, widened to float32. ``ValueError`` if the softmax file names another biLM.
    """
    _require()
    import torch
    from safetensors import safe_open
    from safetensors.torch import load_file

    from ..tokenization_elmo import ElmoTokenizer

    model = demo_bilm_for_pretraining()
    with safe_open(DEMO_SOFTMAX_FILE, framework="pt") as handle:
        paired = (handle.metadata() or {}).get("bilm_sha256")
    if paired != hashlib.sha256((DEMO_MODEL_DIR / "model.safetensors").read_bytes()).hexdigest():
        raise ValueError(
            f"{DEMO_SOFTMAX_FILE} was not trained with the biLM in {DEMO_MODEL_DIR} (their SHA-256 do not match): "
            "fit it again with scripts/fit_demo_softmax.py"
        )
    softmax = load_file(DEMO_SOFTMAX_FILE)
    expected = {"softmax.weight": tuple(model.softmax.weight.shape), "softmax.bias": tuple(model.softmax.bias.shape)}
    found = {name: tuple(tensor.shape) for name, tensor in softmax.items()}
    if found != expected:
        raise ValueError(f"{DEMO_SOFTMAX_FILE} holds {found}, expected {expected}")
    with torch.no_grad():
        model.softmax.weight.copy_(softmax["softmax.weight"].float())
        model.softmax.bias.copy_(softmax["softmax.bias"].float())
    return model.eval(), ElmoTokenizer.from_pretrained(DEMO_MODEL_DIR)


def _fingerprint() -> str:
    """Twelve hex digits of the SHA-256 of the two weight files: a new package version with other weights gets a new
    cache folder, never a stale one."""
    digest = hashlib.sha256()
    for path in (DEMO_MODEL_DIR / "model.safetensors", DEMO_SOFTMAX_FILE):
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def _file_record(folder: Path) -> dict[str, dict]:
    """Name -> ``{"size", "sha256"}`` of each file of ``folder`` but the record itself."""
    record = {}
    for path in sorted(folder.iterdir()):
        if path.name != RECORD_NAME and path.is_file() and not path.is_symlink():
            data = path.read_bytes()
            record[path.name] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    return record


def _is_sound(folder: Path) -> bool:
    """Whether ``folder`` holds every file its record names, each of the recorded size and SHA-256 (the demo's files
    are a few MB: hashing them takes milliseconds). A folder without a record (or one not read) is not sound."""
    try:
        record = json.loads((folder / RECORD_NAME).read_bytes())
        if not isinstance(record, dict) or "config.json" not in record:
            return False
        for name, expected in record.items():
            path = folder / name
            if Path(name).name != name or path.is_symlink() or path.stat().st_size != expected["size"]:
                return False
            if hashlib.sha256(path.read_bytes()).hexdigest() != expected["sha256"]:
                return False
    except (OSError, ValueError, TypeError, KeyError):
        return False
    return True


def demo_language_model_path(cache_dir: str | os.PathLike | None = None) -> Path:
    """The demo language model as an ``ElmoForPreTraining`` folder, written once into the cache.

    ``cache_dir`` defaults to the package's cache (``ELMO_CACHE_DIR``, see ``elmo download``). The folder,
    ``demo-lm-<hash of the weights>``, is written in a staging folder with a record of its files' sizes and SHA-256
    (``.elmo-demo-lm.json``) and renamed into place, so a reader never sees it half-written; two processes building
    it at once both end with the same folder. A later call checks the folder against its record and writes it
    again when it is damaged (a file missing, cut short or changed) or has no record.

    ```python
    from transformers import pipeline

    from modeling_elmo.demo_models.language_model import demo_language_model_path

    fill = pipeline("elmo-fill-mask", model=demo_language_model_path())
    ```
    """
    _require()
    from ..hub.download_core import default_cache_dir

    cache = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    target = cache / f"demo-lm-{_fingerprint()}"
    if target.is_symlink():
        raise FileExistsError(f"{target} is a symbolic link, not a folder this package wrote: delete it")
    if _is_sound(target):
        return target
    cache.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".demo-lm.", dir=cache))
    try:
        model, tokenizer = load_demo_language_model()
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        (staging / RECORD_NAME).write_text(json.dumps(_file_record(staging), indent=1) + "\n", encoding="utf-8")
        staging.chmod(0o755)  # mkdtemp makes it private; a cache folder is as readable as the others
        if os.path.lexists(target):  # damaged: set aside (another process may have done so), then replaced
            _set_aside(target, cache)
        try:
            staging.rename(target)
        except OSError:
            if not _is_sound(target):  # not another process's finished folder: a real failure
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _set_aside(target: Path, cache: Path) -> None:
    """Move the damaged ``target`` out of the way (a hidden name in ``cache``) and delete it."""
    aside = Path(tempfile.mkdtemp(prefix=".demo-lm.damaged.", dir=cache))
    try:
        with contextlib.suppress(FileNotFoundError):  # another process set it aside first
            os.rename(target, aside / "folder")
    finally:
        shutil.rmtree(aside, ignore_errors=True)


__all__ = [
    "DEMO_LM_DIR",
    "DEMO_NAME",
    "DEMO_SOFTMAX_FILE",
    "RECORD_NAME",
    "demo_bilm_for_pretraining",
    "demo_language_model_path",
    "has_demo_language_model",
    "load_demo_language_model",
]
