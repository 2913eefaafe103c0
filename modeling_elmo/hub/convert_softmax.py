"""The released softmax (``softmax/W``, ``softmax/b``) read in chunks and written as safetensors shards.

bilm-tf's LM output layer is one HDF5 file with ``softmax/W`` ``(V, P)`` (row i = line i of the vocabulary file) and
``softmax/b`` ``(V,)``, shared by both directions. The original model's is 793,471 x 512 (1.6 GB in float32), so it
is never held whole: [`check_softmax_file`] reads only metadata, [`write_lm_folder`] copies ``W`` row block by row
block into a safetensors file whose header it writes itself. The folder is an ``ElmoForPreTraining`` one:

    model-00001-of-00002.safetensors   elmo.* (the biLM) and softmax.bias
    model-00002-of-00002.safetensors   softmax.weight (V, P)
    model.safetensors.index.json       transformers' index of the shards

Shapes: V vocabulary words, P projection_dim.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from huggingface_hub.errors import StrictDataclassError
from tqdm.auto import tqdm

from ..configuration_elmo import SIZE_LIMITS, ElmoConfig
from ..tokenization_elmo import BILM_SPECIAL_WORDS, load_bilm_vocab
from .errors import ConversionError, listing, quote
from .hdf5 import open_hdf5, storage_problems, walk_hdf5

SOFTMAX_DATASETS = ("softmax/W", "softmax/b")
INDEX_NAME = "model.safetensors.index.json"
BILM_SHARD = "model-00001-of-00002.safetensors"
SOFTMAX_SHARD = "model-00002-of-00002.safetensors"
# Rows of W per read: 16384 x 512 float32 = 32 MiB, what bounds the peak memory of the copy.
DEFAULT_CHUNK_ROWS = 16384


# bilm-tf's and lm_1b's vocabulary readers skip this line without giving it an id (bilm-tf data.py Vocabulary).
MAXTERMID = "!!!MAXTERMID"


@dataclass(frozen=True)
class SoftmaxInfo:
    """What [`check_softmax_file`] found: the vocabulary (word -> row of W), its size, the width and the special
    words' ids."""

    vocab: dict
    vocab_size: int
    hidden_size: int
    bos_id: int
    eos_id: int
    unk_id: int


def load_softmax_vocab(vocab_file: str | os.PathLike) -> tuple[dict[str, int], int]:
    """The vocabulary of a softmax: word -> row of ``W``, and the number of lines skipped.

    As ``load_bilm_vocab`` (one word per line, ``<S>``, ``</S>``, ``<UNK>`` found by name), except that a line
    ``!!!MAXTERMID`` gets no id and the lines after it move up by one, as bilm-tf's and lm_1b's readers do.
    """
    vocab = load_bilm_vocab(vocab_file)
    if MAXTERMID not in vocab:
        return vocab, 0
    skipped = vocab.pop(MAXTERMID)
    return {word: index - (index > skipped) for word, index in vocab.items()}, 1


def check_softmax_file(softmax_file: str | os.PathLike, vocab_file: str | os.PathLike, projection_dim: int):
    """Check a released softmax file against its vocabulary and the biLM's width, reading metadata only.

    Raises ``ConversionError`` naming the problem: not HDF5, more rows than an LM vocabulary may have
    (``SIZE_LIMITS["lm_vocab_size"]``, checked first: a file beyond it is refused before its vocabulary is read),
    links or unsafe storage, missing or extra datasets, shapes (``W`` must be ``(V, projection_dim)``, ``b``
    ``(V,)``), a vocabulary whose line count is not ``V``, or one without ``<S>``, ``</S>``, ``<UNK>`` (found by
    name, on any line). A ``!!!MAXTERMID`` line is skipped.
    """
    softmax_file = os.fspath(softmax_file)
    with open_hdf5(softmax_file) as handle:
        found, unsafe = walk_hdf5(handle)
        weight = found.get("softmax/W")
        rows = weight.shape[0] if weight is not None and weight.shape else 0
        if rows > SIZE_LIMITS["lm_vocab_size"]:
            raise ConversionError(
                f"softmax/W of {softmax_file} has {rows} rows, more than the {SIZE_LIMITS['lm_vocab_size']} words an "
                "LM vocabulary may have (lm_vocab_size)"
            )
        unsafe += storage_problems(found)
        if unsafe:
            raise ConversionError(f"refusing {softmax_file}: {listing(unsafe)}")
        missing = [name for name in SOFTMAX_DATASETS if name not in found]
        extra = sorted(set(found) - set(SOFTMAX_DATASETS))
        if missing or extra:
            what = [f"missing dataset {name!r}" for name in missing]
            what += [f"unexpected dataset {quote(name)}" for name in extra[:10]]
            raise ConversionError(
                f"{softmax_file} is not a released softmax file (datasets softmax/W and softmax/b): {listing(what)}"
            )
        w_shape, b_shape = tuple(found["softmax/W"].shape), tuple(found["softmax/b"].shape)
    if len(w_shape) != 2 or w_shape[1] != projection_dim:
        raise ConversionError(
            f"softmax/W of {softmax_file} has shape {w_shape}; the options imply (V, {projection_dim}) "
            "(projection_dim): does the softmax belong to this model?"
        )
    if b_shape != (w_shape[0],):
        raise ConversionError(f"softmax/b of {softmax_file} has shape {b_shape}, softmax/W {w_shape}: expected (V,)")
    try:
        vocab, skipped = load_softmax_vocab(vocab_file)
    except (ValueError, OSError, UnicodeDecodeError) as err:
        raise ConversionError(f"invalid vocab file {os.fspath(vocab_file)}: {err}") from err
    if len(vocab) != w_shape[0]:
        note = f" besides its {MAXTERMID} line" if skipped else ""
        raise ConversionError(
            f"the vocab file {os.fspath(vocab_file)} has {len(vocab)} words (lines){note}, but softmax/W of "
            f"{softmax_file} has {w_shape[0]} rows: row i of W scores line i of the vocabulary, so they must be equal "
            "(is it the vocabulary of this softmax?)"
        )
    bos, eos, unk = (vocab[word] for word in BILM_SPECIAL_WORDS)
    return SoftmaxInfo(vocab, w_shape[0], w_shape[1], bos, eos, unk)


def lm_config(config: ElmoConfig, info: SoftmaxInfo) -> ElmoConfig:
    """``config`` for an ``ElmoForPreTraining`` with this softmax (ids of ``<S>``/``</S>`` as found by name).

    The config is validated here, before anything is copied: a vocabulary beyond ``lm_vocab_size``'s bound, or a
    softmax that makes the model larger than ``MAX_PARAMETERS``, is a ``ConversionError`` now rather than a failure
    of ``save_pretrained`` after the whole of ``softmax/W`` was written.
    """
    config.lm_vocab_size = info.vocab_size
    config.lm_bos_vocab_id = info.bos_id
    config.lm_eos_vocab_id = info.eos_id
    config.architectures = ["ElmoForPreTraining"]
    try:
        config.validate()
    except StrictDataclassError as err:
        cause = err.__cause__ if err.__cause__ is not None else err
        raise ConversionError(f"the softmax does not fit an ElmoForPreTraining config: {cause}") from None
    return config


def _safetensors_header(entries: dict[str, tuple[str, tuple[int, ...], int]]) -> bytes:
    """The 8-byte length and JSON header of a safetensors file; ``entries``: name -> (dtype, shape, nbytes), in
    the order of the data."""
    header: dict = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, (dtype, shape, nbytes) in entries.items():
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned
    return struct.pack("<Q", len(text)) + text


def copy_softmax_weight(
    dataset, path: Path, chunk_rows: int = DEFAULT_CHUNK_ROWS, progress: bool = True, name: str = "softmax.weight"
) -> None:
    """Write ``dataset`` (an HDF5 ``(V, P)`` array) as the only tensor of the safetensors file ``path``, float32,
    ``chunk_rows`` rows at a time (the peak memory is one chunk). Raises ``ConversionError`` on NaN/inf values."""
    rows, width = dataset.shape
    with open(path, "wb") as out:
        out.write(_safetensors_header({name: ("F32", (rows, width), rows * width * 4)}))
        with tqdm(total=rows, unit="row", unit_scale=True, desc="Copying softmax/W", disable=not progress) as bar:
            for start in range(0, rows, chunk_rows):
                try:
                    block = np.asarray(dataset[start : start + chunk_rows], dtype="<f4")
                except OSError as err:
                    raise ConversionError(f"cannot read softmax/W rows from {start} (truncated file?): {err}") from err
                if not np.isfinite(block).all():
                    raise ConversionError(f"softmax/W holds NaN or infinite values (rows {start}..)")
                out.write(np.ascontiguousarray(block).tobytes())
                bar.update(block.shape[0])


def write_lm_folder(
    folder: Path,
    elmo_state: dict[str, torch.Tensor],
    softmax_file: str | os.PathLike,
    config: ElmoConfig,
    progress: bool = True,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
) -> None:
    """Write an ``ElmoForPreTraining`` folder (weights in two shards, index, config, code files, model card).

    ``elmo_state`` is the biLM's state dict (``ElmoModel`` names, as the converter reads it); ``config`` has the
    ``lm_*`` fields set (see [`lm_config`]). The tokenizer is written by the caller.
    """
    from safetensors.torch import save_file

    from ..modeling_elmo_pretraining import ElmoForPreTraining

    folder.mkdir(parents=True)
    with open_hdf5(softmax_file) as handle:
        bias = torch.from_numpy(np.asarray(handle["softmax/b"][()], dtype=np.float32))
        if not bool(torch.isfinite(bias).all()):
            raise ConversionError("softmax/b holds NaN or infinite values")
        first = {f"elmo.{name}": value.contiguous() for name, value in elmo_state.items()}
        first["softmax.bias"] = bias
        # The names and shapes must be exactly the head's: built on the meta device, it costs no memory.
        with torch.device("meta"):
            expected = {k: tuple(v.shape) for k, v in ElmoForPreTraining(config).state_dict().items()}
        written = {k: tuple(v.shape) for k, v in first.items()} | {"softmax.weight": tuple(handle["softmax/W"].shape)}
        if written != expected:
            differ = sorted(set(written.items()) ^ set(expected.items()))
            raise ConversionError(f"internal error: the LM folder's tensors differ from ElmoForPreTraining's: {differ}")
        save_file(first, os.fspath(folder / BILM_SHARD), metadata={"format": "pt"})
        copy_softmax_weight(handle["softmax/W"], folder / SOFTMAX_SHARD, chunk_rows=chunk_rows, progress=progress)
    total = sum(v.numel() * 4 for v in first.values()) + config.lm_vocab_size * config.projection_dim * 4
    weight_map = {name: BILM_SHARD for name in sorted(first)} | {"softmax.weight": SOFTMAX_SHARD}
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    (folder / INDEX_NAME).write_text(json.dumps(index, indent=2) + "\n", encoding="utf-8")
    config.save_pretrained(folder)  # a plain folder: config, weights (the tokenizer and card are the caller's)


__all__ = [
    "SoftmaxInfo",
    "check_softmax_file",
    "copy_softmax_weight",
    "lm_config",
    "load_softmax_vocab",
    "write_lm_folder",
]
