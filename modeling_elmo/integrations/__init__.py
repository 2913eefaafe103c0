"""ELMo inside other libraries: a sentence-transformers module and a spaCy pipeline component.

Each lives in its own module, which imports its library; this package imports none of them:

- ``modeling_elmo.integrations.sentence_transformers``: ``ElmoModule`` (the ``[sentence-transformers]`` extra).
- ``modeling_elmo.integrations.spacy``: the ``"elmo"`` pipeline factory (the ``[spacy]`` extra).

Static word2vec vectors (for gensim) are written by ``modeling_elmo.inference.static_vectors``.
"""

from __future__ import annotations

import os
import re

# The devices the plug-ins run on. torch.device also accepts "meta" (tensors without data), "xla", "hpu"...: refused
# by name, before the model loads, rather than failing later with torch's error.
_DEVICE = re.compile(r"(?:cpu|mps|cuda)(?::[0-9]+)?")

# The layers a plug-in can hand on, besides a layer number 0..L (0: the character encoder's context-free vectors).
LAYERS = ("elmo", "average", "top")


def resolve_model_path(model: str | os.PathLike | None) -> str:
    """A model folder, Hub id or released model's name as a folder or Hub id; ``None`` or ``"demo"``: the bundled
    demo model (a toy-sized biLM trained on WikiText-2 by this project, not the released ELMo)."""
    if model is None or model == "demo":
        from ..demo_models.model import demo_model_path

        return str(demo_model_path())
    from ..hub.download import resolve_pretrained

    return resolve_pretrained(os.fspath(model))


def check_layer(layer: str | int, n_layers: int, has_mix: bool) -> str | int:
    """``layer`` checked: ``"elmo"`` (the first scalar mix; the model must have one), ``"average"`` (the mean of the
    ``L + 1`` layers), ``"top"`` or a layer number ``0..L``. ``ValueError`` naming the choices otherwise."""
    if isinstance(layer, str) and layer.isdigit():
        layer = int(layer)
    if isinstance(layer, bool) or not (layer in LAYERS or (isinstance(layer, int) and 0 <= layer <= n_layers)):
        raise ValueError(f"layer must be one of {', '.join(LAYERS)} or a layer number 0..{n_layers}, got {layer!r}")
    if layer == "elmo" and not has_mix:
        raise ValueError('layer="elmo" needs a scalar mix; this model has none: use "average", "top" or a number')
    return layer


def check_device(device):
    """``device`` (a name or a ``torch.device``) as a ``torch.device`` that the model can run on here: ``cpu``,
    ``cuda``, ``cuda:N`` or ``mps``, available on this machine. ``ValueError`` saying why otherwise."""
    import torch

    name = str(device)
    if not _DEVICE.fullmatch(name):
        why = " (meta tensors hold no data)" if name.partition(":")[0] == "meta" else ""
        raise ValueError(f"device must be cpu, cuda, cuda:N or mps, got {device!r}{why}")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {name!r}: CUDA is not available here; use cpu")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise ValueError(f"device {name!r}: there are only {torch.cuda.device_count()} CUDA devices (cuda:0...)")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"device {name!r}: MPS is not available here; use cpu")
    return device


def select_layer(out, layer: str | int):
    """The ``(B, W, 2P)`` vectors of ``layer`` from an ``ElmoModelOutput`` computed with ``output_hidden_states``."""
    import torch

    if layer == "elmo":
        return out.elmo
    if layer == "average":
        return torch.stack(out.hidden_states).mean(dim=0)
    if layer == "top":
        return out.hidden_states[-1]
    return out.hidden_states[layer]
