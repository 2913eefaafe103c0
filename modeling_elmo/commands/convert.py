"""Convert an original ELMo model (AllenNLP/bilm-tf ``options.json`` + HDF5 weights) to a Hugging Face folder.

Command::

    elmo convert --options_file OPTIONS.json --weight_file WEIGHTS.hdf5 \
        --output_dir OUT [--vocab_file VOCAB.txt] [--overwrite]

or ``python convert_original_weights.py ...`` from a checkout, or ``elmo-convert ...``; from Python,
:func:`convert`. The folder holds ``config.json``,
``model.safetensors`` (float32) and the tokenizer files, and loads with ``ElmoModel.from_pretrained(OUT)``
and ``ElmoTokenizer.from_pretrained(OUT)`` (or the Auto classes once ``modeling_elmo`` is imported).

The folder is written next to ``OUT`` under a temporary name (``.OUT.partial-PID-*``) and renamed at the end, so
a failed conversion leaves nothing behind, and a killed one never a half-written ``OUT`` (only the hidden staging
folder, which the next conversion to ``OUT`` removes).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from ..configuration_elmo import ElmoConfig
from ..model_card import write_model_card
from ..modeling_elmo import ElmoModel
from ..tokenization_elmo import ElmoTokenizer


class ConversionError(ValueError):
    """The inputs cannot be converted; the message says why."""


def _weight_map(config: ElmoConfig) -> Iterator[tuple[str, tuple[int, ...], list[tuple[str, Callable]]]]:
    """For each HDF5 dataset: its path, expected shape, and the ``(parameter, transform)`` pairs it fills.

    A parameter named ``name[d]`` is direction ``d`` of a stacked ``(2, ...)`` biLSTM parameter.
    The original multiplies ``x @ W``; ``nn.Linear`` stores ``W.T``; the biLSTM keeps ``x @ W``.
    """
    cd, p, d, n = config.char_embedding_dim, config.projection_dim, config.lstm_dim, config.n_filters

    def transpose(w):
        return w.T

    def identity(w):
        return w

    def with_padding_row(w):  # character id 0 ("no word") gets a zero row
        return np.concatenate([np.zeros((1, cd), w.dtype), w])

    def conv_kernel(w):  # (1, width, char_dim, count) -> Conv1d's (count, char_dim, width)
        return w[0].transpose(2, 1, 0)

    yield "char_embed", (261, cd), [("char_cnn.char_embedding.weight", with_padding_row)]
    for i, (width, count) in enumerate(config.char_cnn_filters):
        yield f"CNN/W_cnn_{i}", (1, width, cd, count), [(f"char_cnn.convolutions.{i}.weight", conv_kernel)]
        yield f"CNN/b_cnn_{i}", (count,), [(f"char_cnn.convolutions.{i}.bias", identity)]
    for k in range(config.n_highway):
        for part in ("carry", "transform"):
            yield f"CNN_high_{k}/W_{part}", (n, n), [(f"char_cnn.highways.{k}.{part}.weight", transpose)]
            yield f"CNN_high_{k}/b_{part}", (n,), [(f"char_cnn.highways.{k}.{part}.bias", identity)]
    yield "CNN_proj/W_proj", (n, p), [("char_cnn.projection.weight", transpose)]
    yield "CNN_proj/b_proj", (p,), [("char_cnn.projection.bias", identity)]
    for direction in range(2):  # 0 forward, 1 backward
        for layer in range(config.n_layers):
            src = f"RNN_{direction}/RNN/MultiRNNCell/Cell{layer}/LSTMCell"
            dst = f"bilm.layers.{layer}"
            # W_0's first P rows multiply the layer input, the last P the previous output.
            yield (
                f"{src}/W_0",
                (2 * p, 4 * d),
                [
                    (f"{dst}.input_kernel[{direction}]", lambda w: w[:p]),
                    (f"{dst}.state_kernel[{direction}]", lambda w: w[p:]),
                ],
            )
            yield f"{src}/B", (4 * d,), [(f"{dst}.bias[{direction}]", identity)]
            yield f"{src}/W_P_0", (d, p), [(f"{dst}.projection[{direction}]", identity)]


def read_original_weights(
    weight_file: str | os.PathLike, config: ElmoConfig, progress: bool = True
) -> dict[str, torch.Tensor]:
    """Read an original HDF5 weight file into an [`ElmoModel`] state dict (float32).

    Raises [`ConversionError`] naming every missing dataset and every shape that disagrees with
    ``config``, or saying that the file is not readable HDF5.
    """
    import h5py  # converter-only dependency: kept out of the shipped model modules

    weight_file = os.fspath(weight_file)
    entries = list(_weight_map(config))
    try:
        handle = h5py.File(weight_file, "r")
    except OSError as err:
        raise ConversionError(f"cannot read {weight_file} as HDF5 (truncated or not an HDF5 file?): {err}") from err
    with handle:
        problems = []
        for key, shape, _ in entries:
            if key not in handle or not isinstance(handle[key], h5py.Dataset):
                problems.append(f"missing dataset {key!r}")
            elif tuple(handle[key].shape) != shape:
                problems.append(f"{key!r} has shape {tuple(handle[key].shape)}, the options imply {shape}")
        if problems:
            raise ConversionError(
                f"{weight_file} does not match the options: "
                + "; ".join(problems)
                + ". Check that --options_file belongs to this weight file."
            )
        state: dict[str, torch.Tensor] = {}
        stacked: dict[str, list] = {}
        total = sum(handle[key].size * 4 for key, _, _ in entries)
        with tqdm(total=total, unit="B", unit_scale=True, desc="Reading weights", disable=not progress) as bar:
            for key, _, targets in entries:
                try:
                    array = np.asarray(handle[key][()], dtype=np.float32)
                except OSError as err:
                    raise ConversionError(
                        f"cannot read dataset {key!r} of {weight_file} (truncated file?): {err}"
                    ) from err
                if not np.isfinite(array).all():
                    raise ConversionError(f"dataset {key!r} of {weight_file} holds NaN or infinite values")
                for name, transform in targets:
                    value = torch.from_numpy(np.ascontiguousarray(transform(array)))
                    if name.endswith("]"):
                        name, direction = name[:-1].split("[")
                        stacked.setdefault(name, [None, None])[int(direction)] = value
                    else:
                        state[name] = value
                bar.update(array.size * 4)
    state.update({name: torch.stack(pair) for name, pair in stacked.items()})
    return state


def convert(
    options_file: str | os.PathLike,
    weight_file: str | os.PathLike,
    output_dir: str | os.PathLike,
    vocab_file: str | os.PathLike | None = None,
    overwrite: bool = False,
    progress: bool = True,
) -> Path:
    """Convert original ELMo weights to a folder that ``ElmoModel.from_pretrained`` loads.

    Args:
        options_file: the model's ``options.json``.
        weight_file: the model's HDF5 weights.
        output_dir: the folder to create (it must not exist, or be empty, unless ``overwrite``).
        vocab_file: optional bilm-tf vocabulary (``<S>``, ``</S>``, ``<UNK>`` first) for the tokenizer's
            word ids (language-model labels). The character ids do not need it.
        overwrite: replace an existing ``output_dir``.
        progress: show a progress bar while reading the weights.

    Returns:
        The output folder.

    Raises:
        FileNotFoundError: an input file does not exist.
        ConversionError: the inputs are invalid; nothing is written.
    """
    for label, path in (("options file", options_file), ("weight file", weight_file), ("vocab file", vocab_file)):
        if path is not None and not os.path.isfile(path):
            raise FileNotFoundError(f"{label} not found: {os.fspath(path)}")
    output_dir = Path(output_dir)
    if output_dir.exists() and not output_dir.is_dir():
        raise ConversionError(f"output_dir {output_dir} exists and is not a folder")
    if output_dir.is_dir() and any(output_dir.iterdir()) and not overwrite:
        raise ConversionError(f"output_dir {output_dir} exists and is not empty (pass --overwrite to replace it)")
    for parent in output_dir.absolute().parents:
        if parent.exists():
            if not parent.is_dir():
                raise ConversionError(f"cannot create output_dir {output_dir}: {parent} is a file")
            break

    try:
        config = ElmoConfig.from_options(options_file)
    except (ValueError, TypeError) as err:
        raise ConversionError(f"invalid options file {os.fspath(options_file)}: {err}") from err
    state = read_original_weights(weight_file, config, progress=progress)
    try:
        tokenizer = ElmoTokenizer(vocab_file=vocab_file, max_characters_per_token=config.max_characters_per_token)
    except (ValueError, OSError) as err:
        raise ConversionError(f"invalid vocab file {os.fspath(vocab_file)}: {err}") from err

    model = ElmoModel(config)
    # The scalar mixes are not in the original files: keep their neutral start (equal weights, gamma 1).
    state.update({k: v for k, v in model.state_dict().items() if k.startswith("scalar_mixes.")})
    model.load_state_dict(state, strict=True)

    output_dir.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_staging(output_dir)
    staging = Path(tempfile.mkdtemp(prefix=f".{output_dir.name}.partial-{os.getpid()}-", dir=output_dir.parent))
    replaced = None
    try:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        write_model_card(staging, model.config, how_made=_provenance(options_file, weight_file, vocab_file))
        if output_dir.exists():  # moved aside, not deleted, until the new folder is in place
            replaced = Path(
                tempfile.mkdtemp(prefix=f".{output_dir.name}.replaced-{os.getpid()}-", dir=output_dir.parent)
            )
            os.replace(output_dir, replaced / output_dir.name)
        os.replace(staging, output_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        if replaced is not None and not output_dir.exists():
            os.replace(replaced / output_dir.name, output_dir)
        raise
    finally:
        if replaced is not None and output_dir.exists():
            shutil.rmtree(replaced, ignore_errors=True)
    return output_dir


def _provenance(options_file, weight_file, vocab_file) -> str:
    """The model card's "How it was made" paragraph for a converted model."""
    vocab = f", vocabulary `{Path(vocab_file).name}`" if vocab_file is not None else ""
    return (
        f"Converted from the original AllenNLP/bilm-tf release (options `{Path(options_file).name}`, weights "
        f"`{Path(weight_file).name}`{vocab}) with `convert_original_weights.py` of the `modeling_elmo` package, "
        "in float32, without retraining: the character CNN, highway, projection and LSTM weights are the original "
        "ones, and the outputs match the original TensorFlow implementation to about 1e-6. The scalar-mix weights "
        "are new (equal weights, gamma 1), for a task to learn."
    )


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True  # someone else's process (or no way to tell): leave its folder alone
    return True


def remove_stale_staging(output_dir: str | os.PathLike) -> list[Path]:
    """Delete what a killed conversion to ``output_dir`` left next to it; return the folders removed.

    A conversion writes into ``.NAME.partial-PID-*`` and renames it to ``NAME`` only when complete, so
    ``NAME`` is never half-written; a ``SIGKILL`` can only leave such a hidden staging folder behind.
    Those of processes that no longer run are removed here (each conversion does this first); a folder
    ``.NAME.replaced-PID-*`` (a previous ``NAME`` being replaced with ``--overwrite``) only once ``NAME``
    exists again.
    """
    output_dir = Path(output_dir)
    removed = []
    if not output_dir.parent.is_dir():
        return removed
    prefix = f".{output_dir.name}."
    for path in output_dir.parent.iterdir():
        if not path.name.startswith(prefix):
            continue
        kind, _, rest = path.name[len(prefix) :].partition("-")
        pid = rest.partition("-")[0]
        if kind not in ("partial", "replaced") or not pid.isdigit() or not path.is_dir() or _pid_alive(int(pid)):
            continue
        if kind == "replaced" and not output_dir.exists():
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Convert original ELMo weights (options.json + HDF5) to a Hugging Face model folder."
    )
    parser.add_argument("--options_file", required=True, help="the model's options.json")
    parser.add_argument("--weight_file", required=True, help="the model's HDF5 weights")
    parser.add_argument("--output_dir", required=True, help="folder to write (must not exist or be empty)")
    parser.add_argument("--vocab_file", help="optional bilm-tf vocabulary file, for word ids (LM labels)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing output_dir")
    parser.add_argument("--no_progress", action="store_true", help="do not show a progress bar")
    args = parser.parse_args(argv)
    try:
        out = convert(
            args.options_file,
            args.weight_file,
            args.output_dir,
            vocab_file=args.vocab_file,
            overwrite=args.overwrite,
            progress=not args.no_progress,
        )
    except (FileNotFoundError, ConversionError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except OSError as err:  # writing failed: permissions, disk full...; nothing was left behind
        print(f"error: could not write {args.output_dir}: {err}", file=sys.stderr)
        return 1
    print(f"Converted to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
