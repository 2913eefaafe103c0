"""Checks of the ELMo models' inputs (``check_inputs``, issue #13) and loads (safetensors only, floating and finite
weights, a clear error for a source that cannot be a model: run by ``ElmoPreTrainedModel.from_pretrained`` before
and after transformers' own load).

Only documented means: these functions read the files' headers and the loaded model; the load itself is
transformers' (``PreTrainedModel.from_pretrained``), and no network call is made here (a Hub download's files are
found in the local cache, where transformers put them).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import torch
from torch import nn

from .characters import NUM_CHARACTERS
from .configuration_elmo import check_model_name
from .graph_path_elmo import in_graph


def check_conventional_arguments(
    input_ids: torch.Tensor | None,
    inputs_embeds: torch.Tensor | None = None,
    position_ids: torch.Tensor | None = None,
    head_mask: torch.Tensor | None = None,
    output_attentions: bool | None = None,
) -> None:
    """Refuse, by name and with the fix, the arguments that transformers' models take by convention and ELMo has no
    use for (PEFT's wrappers and the pipelines pass them as keywords, mostly as ``None``).

    Raises:
        ValueError: ``inputs_embeds`` (ELMo's first layer is a character CNN, not an embedding lookup),
            ``position_ids`` (the LSTMs read the order), ``head_mask`` and ``output_attentions=True`` (no attention
            heads), or no ``input_ids`` at all.
    """
    if inputs_embeds is not None:
        raise ValueError(
            "ELMo reads characters: pass input_ids, the (batch, words, 50) character ids from ElmoTokenizer. "
            "inputs_embeds is not supported (the first layer is a character CNN, not an embedding lookup)"
        )
    if input_ids is None:
        raise ValueError("input_ids is required: the (batch, words, 50) character ids from ElmoTokenizer")
    if position_ids is not None:
        raise ValueError(
            "ELMo has no position embeddings (its LSTMs read the word order): leave position_ids out (None)"
        )
    if head_mask is not None:
        raise ValueError("ELMo has no attention heads to mask (its contextual layers are LSTMs): leave head_mask out")
    if output_attentions:
        raise ValueError(
            "ELMo has no attention layers (its contextual layers are LSTMs), so output_attentions=True has nothing "
            "to return: use output_hidden_states=True for the biLM's layers"
        )


def check_inputs(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None,
    max_characters_per_token: int,
    n_characters: int = NUM_CHARACTERS,
) -> torch.Tensor:
    """Validate a batch for [`ElmoModel`] and return its word mask ``(B, W)`` bool.

    Args:
        input_ids: ``(B, W, C)`` int64 or int32 character ids in ``[0, n_characters)`` (262, or the model's own
            count for an ELMoForManyLangs model; ``C = max_characters_per_token``), as [`ElmoTokenizer`] makes
            them; a padded word is a row of zeros.
        attention_mask: ``None`` (then the words are the non-zero character rows), or a ``(B, W)`` tensor of
            bool or integer dtype holding only 0 and 1, right-padded (each sentence's words first, then
            padding). Floating-point masks are refused by name, as are lists and arrays: 0.5, 2, -1 or NaN
            have no meaning as a mask, and a float mask is easily a mask of weights rather than of words.
            With a mask, the ids are checked at the words only: padded positions may hold any id (the model
            ignores them, as transformers models do), e.g. a pipeline's collation pads with the tokenizer's
            ``pad_token_id``.

    Raises:
        TypeError: ``attention_mask`` is not a tensor.
        ValueError: naming ``input_ids`` or ``attention_mask`` and what is wrong (shape, dtype, values, padding).
    """
    chars = max_characters_per_token
    if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 3 or input_ids.shape[-1] != chars:
        shape = tuple(input_ids.shape) if isinstance(input_ids, torch.Tensor) else type(input_ids).__name__
        raise ValueError(
            f"input_ids must be a (batch, words, {chars}) tensor of character ids from ElmoTokenizer, got {shape}"
        )
    if input_ids.dtype not in (torch.int64, torch.int32):
        raise ValueError(f"input_ids must hold integer character ids (int64 or int32), got dtype {input_ids.dtype}")
    if attention_mask is None:
        mask = input_ids.ne(0).any(dim=-1)
        if in_graph():
            _assert_in_graph(input_ids, mask, None, n_characters)
        else:
            check_character_ids(input_ids, n_characters)
        return mask
    if not isinstance(attention_mask, torch.Tensor):
        raise TypeError(
            f"attention_mask must be a torch.Tensor of 0/1 (bool or integer dtype), got {type(attention_mask).__name__}"
        )
    if tuple(attention_mask.shape) != tuple(input_ids.shape[:2]):
        raise ValueError(
            f"attention_mask must have shape (batch, words) = {tuple(input_ids.shape[:2])}, "
            f"got {tuple(attention_mask.shape)}"
        )
    if attention_mask.dtype != torch.bool and (attention_mask.is_floating_point() or attention_mask.is_complex()):
        raise ValueError(
            f"attention_mask must have a bool or integer dtype (1 for words, 0 for padding), got "
            f"{attention_mask.dtype}; pass mask.long() or mask.bool() if it holds only 0 and 1"
        )
    if in_graph():
        mask = attention_mask.bool()
        _assert_in_graph(input_ids, mask, attention_mask, n_characters)
        return mask
    if attention_mask.dtype != torch.bool:
        bad = attention_mask.ne(0) & attention_mask.ne(1)
        if bad.any():
            where = tuple(bad.nonzero()[0].tolist())
            raise ValueError(
                f"attention_mask must hold only 0 (padding) and 1 (words), got {attention_mask[where].item()} "
                f"at {where}"
            )
    mask = attention_mask.bool()
    prefix = torch.arange(mask.shape[1], device=mask.device) < mask.sum(dim=1, keepdim=True)
    if not torch.equal(mask, prefix):
        raise ValueError("attention_mask must be right-padded: the words of a sentence first, then padding")
    # Only the words' ids: padded positions may hold anything (a pipeline pads input_ids with the tokenizer's
    # word-level pad id, e.g. 10000), and the model reads zeros there instead (ElmoModel.forward).
    check_character_ids(input_ids[mask], n_characters)
    return mask


def _assert_in_graph(
    input_ids: torch.Tensor, mask: torch.Tensor, attention_mask: torch.Tensor | None, n_characters: int
) -> None:
    """The value checks of [`check_inputs`] inside a compiled or exported graph, which cannot read tensor values
    into Python: ``torch._assert_async`` (no host sync, no graph break; ``RuntimeError`` with the same messages,
    raised when the graph runs). Shapes and dtypes are checked in Python as in eager: they are known when tracing."""
    if attention_mask is not None:
        if attention_mask.dtype != torch.bool:
            binary = (attention_mask.eq(0) | attention_mask.eq(1)).all()
            torch._assert_async(binary, "attention_mask must hold only 0 (padding) and 1 (words)")
        prefix = torch.arange(mask.shape[1], device=mask.device) < mask.sum(dim=1, keepdim=True)
        torch._assert_async(
            mask.eq(prefix).all(), "attention_mask must be right-padded: the words of a sentence first, then padding"
        )
    bad = (input_ids.lt(0) | input_ids.ge(n_characters)) & mask.unsqueeze(-1)  # only the words' ids
    torch._assert_async(
        bad.logical_not().all(), f"character ids must be in [0, {n_characters}); is this the output of ElmoTokenizer?"
    )


def check_character_ids(ids: torch.Tensor, n_characters: int = NUM_CHARACTERS) -> None:
    """Refuse character ids outside ``[0, n_characters)`` (``ids`` of any shape)."""
    if ids.numel() and (ids.min() < 0 or ids.max() >= n_characters):
        raise ValueError(f"character ids must be in [0, {n_characters}); is this the output of ElmoTokenizer?")


_SAFETENSORS_INDEX_SUFFIX = ".safetensors.index.json"


def _check_safetensors_indexes(folder: str) -> None:
    """Refuse an index (``*.safetensors.index.json`` in ``folder``) that names any file but a ``.safetensors`` file
    of that folder: transformers would open a ``pytorch_model.bin`` it names with ``torch.load`` (a pickle)."""
    for name in sorted(os.listdir(folder)):
        if not name.endswith(_SAFETENSORS_INDEX_SUFFIX):
            continue
        index = os.path.join(folder, name)
        try:
            with open(index, encoding="utf-8") as handle:
                weight_map = json.load(handle).get("weight_map")
        except (OSError, UnicodeDecodeError, ValueError, AttributeError, RecursionError) as error:
            raise OSError(f"cannot read the safetensors index {index}: {error}") from error
        if not isinstance(weight_map, dict):
            raise OSError(f"the safetensors index {index} has no weight_map object")
        for shard in sorted({repr(v) if not isinstance(v, str) else v for v in weight_map.values()}):
            # a plain name: no folder part (another folder, an absolute path, a Windows path), not "." or ".."
            plain = os.path.basename(shard) == shard and "\\" not in shard and shard not in (".", "..")
            if not (plain and shard.endswith(".safetensors")):
                raise OSError(
                    f"the safetensors index {index} names {shard!r}: an index may name only .safetensors files in "
                    "its own folder (pickled weights such as pytorch_model.bin are never loaded)"
                )


def _floating_names(model: nn.Module) -> set[str]:
    """The state-dict names of ``model``'s floating tensors, also with the base model's prefix added and removed
    (a head loads a base checkpoint and the other way round)."""
    prefix = getattr(model, "base_model_prefix", "") + "."
    names = {name for name, tensor in model.state_dict().items() if tensor.is_floating_point()}
    return names | {prefix + name for name in names} | {name.removeprefix(prefix) for name in names}


def _check_checkpoint_dtypes(files: Sequence[str], floating: set[str]) -> None:
    """Refuse checkpoint files other than safetensors, and non-floating tensors for the model's floating ones.

    Reads only the files' headers. Integer or bool weights would be cast to the model's dtype and give
    all-zero or meaningless outputs; complex ones would lose their imaginary part. Tensors the model keeps in
    another dtype (the CRF's bool ``constraint_mask``), or does not load at all, are not checked.
    """
    from safetensors import safe_open

    for file in files:
        if not os.fspath(file).endswith(".safetensors"):
            raise OSError(
                f"{os.fspath(file)} is not a .safetensors file: ELMo weights load only from safetensors (is it named "
                f"by a {_SAFETENSORS_INDEX_SUFFIX}?)"
            )
        with safe_open(file, framework="pt") as handle:
            dtypes = {key: handle.get_slice(key).get_dtype() for key in handle.keys() if key in floating}
        bad = [f"{key} ({dtype})" for key, dtype in sorted(dtypes.items()) if not dtype.startswith(("F", "BF"))]
        if bad:
            shown = ", ".join(bad[:8]) + (f" and {len(bad) - 8} more" if len(bad) > 8 else "")
            raise ValueError(
                f"{os.fspath(file)} holds weights of a non-floating dtype: {shown}; ELMo weights must be "
                "floating point (F16, BF16, F32 or F64)"
            )


def _floating_or_not_a_tensor(value) -> bool:
    return not isinstance(value, torch.Tensor) or value.is_floating_point()  # other values: transformers decides


def _check_finite(model: nn.Module, source: str) -> None:
    """Refuse NaN or infinite values in a loaded model's floating weights and buffers (one pass over them)."""
    bad = [
        name
        for name, tensor in model.state_dict().items()
        if tensor.is_floating_point() and tensor.device.type != "meta" and not bool(torch.isfinite(tensor).all())
    ]
    if bad:
        shown = ", ".join(bad[:8]) + (f" and {len(bad) - 8} more" if len(bad) > 8 else "")
        raise ValueError(f"the weights in {source} hold NaN or infinite values: {shown}")


def follow_umask(paths: Iterable[Path]) -> None:
    """Give ``paths`` the mode a new file gets under the user's umask: transformers writes the weights privately
    (0600), so a folder saved to share or package would hold weights that only its owner can read."""
    umask = os.umask(0)
    os.umask(umask)
    for path in paths:
        path.chmod(0o666 & ~umask)


def check_source(name, kwargs: dict) -> None:
    """Checks before the load of ``from_pretrained(name, **kwargs)``; ``kwargs`` gets ``use_safetensors=True``.

    Raises:
        ValueError: ``use_safetensors=False``; a file that is not ``.safetensors``.
        OSError: a folder without ``config.json`` (unless ``config`` is given) or without safetensors weights, an
            index naming anything but its folder's safetensors files, a name that is no path and no Hub id.
    """
    if kwargs.get("use_safetensors") is False:
        raise ValueError(
            "ELMo models load only from safetensors (pickled weights can run code): use_safetensors=False "
            "is not supported; convert the checkpoint with save_pretrained or convert_original_weights.py"
        )
    kwargs["use_safetensors"] = True
    if not isinstance(name, (str, os.PathLike)):
        return
    if os.path.isfile(name) and not os.fspath(name).endswith(".safetensors"):
        raise ValueError(f"{os.fspath(name)} is not a .safetensors file: ELMo weights load only from safetensors")
    if os.path.isdir(name):
        folder = os.path.join(name, kwargs["subfolder"]) if kwargs.get("subfolder") else os.fspath(name)
        files = set(os.listdir(folder)) if os.path.isdir(folder) else set()
        if kwargs.get("config") is None and "config.json" not in files:
            raise OSError(
                f"{folder} is not a folder with config.json: an ELMo model folder (made by save_pretrained, "
                "`elmo convert` or `elmo train-lm`) holds config.json and model.safetensors"
            )
        if not any(f.endswith(".safetensors") or f.endswith(_SAFETENSORS_INDEX_SUFFIX) for f in files):
            pickles = sorted(f for f in files if f.endswith((".bin", ".pt", ".pth", ".ckpt", ".pkl")))
            found = f" (found {', '.join(pickles)}: pickled weights are never loaded)" if pickles else ""
            raise OSError(f"no model.safetensors in {folder}{found}")
        _check_safetensors_indexes(folder)
    else:
        check_model_name(name)
        _check_cached_hub_index(os.fspath(name), kwargs)


def _check_cached_hub_index(name: str, kwargs: dict) -> None:
    """For a Hub id whose safetensors index is in the local cache (no network): the index check of a folder."""
    from huggingface_hub import try_to_load_from_cache

    subfolder = kwargs.get("subfolder") or ""
    filename = "model" + _SAFETENSORS_INDEX_SUFFIX
    try:
        index = try_to_load_from_cache(
            name,
            os.path.join(subfolder, filename) if subfolder else filename,
            cache_dir=kwargs.get("cache_dir"),
            revision=kwargs.get("revision"),
        )
    except Exception:  # an unusual revision or cache layout: transformers decides
        return
    if isinstance(index, str):
        _check_safetensors_indexes(os.path.dirname(index))


def checkpoint_files(name, kwargs: dict) -> list[str]:
    """The weight files a finished load of ``name`` read: a folder's, or a Hub id's in the local cache (no network)."""
    if not isinstance(name, (str, os.PathLike)):
        return []
    if os.path.isfile(name):
        return [os.fspath(name)]
    subfolder = kwargs.get("subfolder") or ""
    if os.path.isdir(name):
        folder = os.path.join(name, subfolder)
        return [os.path.join(folder, f) for f in sorted(os.listdir(folder)) if f.endswith(".safetensors")]
    from huggingface_hub import try_to_load_from_cache

    def cached(filename: str) -> str | None:
        path = try_to_load_from_cache(
            os.fspath(name),
            os.path.join(subfolder, filename) if subfolder else filename,
            cache_dir=kwargs.get("cache_dir"),
            revision=kwargs.get("revision"),
        )
        return path if isinstance(path, str) else None

    single = cached("model.safetensors")
    if single is not None:
        return [single]
    index = cached("model" + _SAFETENSORS_INDEX_SUFFIX)
    if index is None:
        return []
    with open(index, encoding="utf-8") as handle:
        shards = sorted(set(json.load(handle).get("weight_map", {}).values()))
    return [path for path in map(cached, shards) if path is not None]


def mismatched_shapes(cls, name, kwargs: dict) -> list[str]:
    """``"key: checkpoint (shape), config (shape)"`` for each weight of the checkpoint of ``name`` (its files, local
    or in the Hub cache) whose shape differs from what ``cls`` builds from the config; read from the files' headers
    and a model on the meta device (no weights, no network)."""
    from safetensors import safe_open

    config = kwargs.get("config")
    if config is None:
        config_kwargs = {k: v for k, v in kwargs.items() if k not in ("state_dict", "dtype", "use_safetensors")}
        config, _ = cls.config_class.from_pretrained(name, return_unused_kwargs=True, **config_kwargs)
    with torch.device("meta"):
        expected = {k: tuple(v.shape) for k, v in cls(config).state_dict().items()}
    prefix, core = cls.base_model_prefix + ".", ("char_cnn.", "bilm.")
    found, seen = [], set()
    for file in checkpoint_files(name, kwargs):
        with safe_open(file, framework="pt") as handle:
            for key in handle.keys():
                shape = tuple(handle.get_slice(key).get_shape())
                for candidate in (key, prefix + key, key.removeprefix(prefix)):
                    if candidate in expected:
                        seen.add(candidate)
                        if expected[candidate] != shape:
                            found.append(f"{candidate}: checkpoint {shape}, config {expected[candidate]}")
                        break
                else:
                    if key.removeprefix(prefix).startswith(core):  # the biLM's weights must all fit
                        found.append(f"{key}: not in the model")
    found += [
        f"{k}: not in the checkpoint" for k in expected if k not in seen and k.removeprefix(prefix).startswith(core)
    ]
    return sorted(found)


def check_loaded(model: nn.Module, info: dict, name, kwargs: dict) -> None:
    """Checks after transformers' load: the biLM's weights all came from the checkpoint, which holds floating
    weights only, all finite.

    Raises:
        ValueError: naming the biLM weights (``char_cnn.*``, ``bilm.*``) missing from the checkpoint or in excess,
            the non-floating tensors of the checkpoint (or of a given ``state_dict``), or the NaN/infinite weights.
    """
    source = os.fspath(name) if isinstance(name, (str, os.PathLike)) else "the given state_dict"
    prefix, core = model.base_model_prefix + ".", ("char_cnn.", "bilm.")
    # from_pretrained(None, config=..., state_dict=...): the caller chose the weights, missing ones are initialised
    kinds = ("missing_keys", "unexpected_keys") if name is not None else ("unexpected_keys",)
    problems = [
        f"{key}: {'not in the checkpoint' if kind == 'missing_keys' else 'not in the model'}"
        for kind in kinds
        for key in sorted(info[kind])
        if key.removeprefix(prefix).startswith(core)
    ]
    if problems:
        shown = "; ".join(problems[:8]) + (f"; and {len(problems) - 8} more" if len(problems) > 8 else "")
        raise ValueError(
            f"the weights in {source} do not fit the config (wrong layer counts in config.json or in "
            f"from_pretrained arguments?): {shown}"
        )
    floating = _floating_names(model)
    state_dict = kwargs.get("state_dict")
    if state_dict:  # the given tensors' own dtypes, for the model's floating weights
        bad = sorted(k for k, v in state_dict.items() if k in floating and not _floating_or_not_a_tensor(v))
        if bad:
            raise ValueError(f"state_dict holds weights of a non-floating dtype: {', '.join(bad[:8])}")
    _check_checkpoint_dtypes(checkpoint_files(name, kwargs), floating)
    _check_finite(model, source)


__all__ = [
    "mismatched_shapes",
    "check_character_ids",
    "check_inputs",
    "check_loaded",
    "check_source",
    "checkpoint_files",
    "follow_umask",
]
