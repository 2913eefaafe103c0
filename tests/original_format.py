"""Write random ELMo models in the ORIGINAL (AllenNLP/bilm-tf) format, for the converter tests.

The layout follows ``ELMO_FACTS.md`` ("Weight file layout"), written out here by hand and not taken
from the converter, so that the tests compare the converter with an independent reading of the format::

    char_embed                                        (261, char_dim)
    CNN/W_cnn_{i}                                     (1, width_i, char_dim, count_i)
    CNN/b_cnn_{i}                                     (count_i,)
    CNN_high_{k}/W_carry, W_transform                 (n_filters, n_filters)      used as x @ W
    CNN_high_{k}/b_carry, b_transform                 (n_filters,)
    CNN_proj/W_proj                                   (n_filters, projection_dim)
    CNN_proj/b_proj                                   (projection_dim,)
    RNN_{d}/RNN/MultiRNNCell/Cell{l}/LSTMCell/W_0     (2 * projection_dim, 4 * lstm_dim)   d=0 forward, d=1 backward
    RNN_{d}/RNN/MultiRNNCell/Cell{l}/LSTMCell/B       (4 * lstm_dim,)                    gates i, j, f, o
    RNN_{d}/RNN/MultiRNNCell/Cell{l}/LSTMCell/W_P_0   (lstm_dim, projection_dim)

Weights are ``normal / sqrt(fan_in)`` and biases ``0.1 * normal`` (character embeddings ``normal``), so
that every layer's output is of order one: neither saturated nor vanishing, at any size.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import h5py
import numpy as np

OPTIONS_NAME = "options.json"
WEIGHTS_NAME = "lm_weights.hdf5"

# Keys of real options files that the converter has no use for: they must be ignored.
_TRAINING_OPTIONS = {
    "bidirectional": True,
    "dropout": 0.1,
    "all_clip_norm_val": 10.0,
    "n_epochs": 10,
    "n_train_tokens": 768648884,
    "batch_size": 128,
    "n_tokens_vocab": 793471,
    "unroll_steps": 20,
    "n_negative_samples_batch": 8192,
}


def lstm_prefix(direction: int, layer: int) -> str:
    """HDF5 group of one LSTM cell: direction 0 is forward, 1 backward."""
    return f"RNN_{direction}/RNN/MultiRNNCell/Cell{layer}/LSTMCell"


def original_shapes(
    *, lstm_dim: int, projection_dim: int, n_layers: int, filters, char_dim: int, n_highway: int
) -> Iterator[tuple[str, tuple[int, ...], int | None]]:
    """``(dataset path, shape, fan_in)`` of every dataset of an original weight file; ``fan_in`` None for biases."""
    n_filters = sum(count for _, count in filters)
    yield "char_embed", (261, char_dim), 1
    for i, (width, count) in enumerate(filters):
        yield f"CNN/W_cnn_{i}", (1, width, char_dim, count), width * char_dim
        yield f"CNN/b_cnn_{i}", (count,), None
    for k in range(n_highway):
        for part in ("carry", "transform"):
            yield f"CNN_high_{k}/W_{part}", (n_filters, n_filters), n_filters
            yield f"CNN_high_{k}/b_{part}", (n_filters,), None
    yield "CNN_proj/W_proj", (n_filters, projection_dim), n_filters
    yield "CNN_proj/b_proj", (projection_dim,), None
    for direction in range(2):
        for layer in range(n_layers):
            prefix = lstm_prefix(direction, layer)
            yield f"{prefix}/W_0", (2 * projection_dim, 4 * lstm_dim), 2 * projection_dim
            yield f"{prefix}/B", (4 * lstm_dim,), None
            yield f"{prefix}/W_P_0", (lstm_dim, projection_dim), lstm_dim


def original_options(
    *,
    lstm_dim: int,
    projection_dim: int,
    n_layers: int = 2,
    filters,
    char_dim: int,
    n_highway: int,
    use_skip_connections: bool = True,
    cell_clip: float | None = 3,
    proj_clip: float | None = 3,
    activation: str = "relu",
    n_characters: int = 262,
    max_characters_per_token: int = 50,
) -> dict:
    """An ``options.json`` dict as bilm-tf writes it (a clip of None leaves its key out)."""
    lstm = {
        "use_skip_connections": use_skip_connections,
        "projection_dim": projection_dim,
        "dim": lstm_dim,
        "n_layers": n_layers,
    }
    if cell_clip is not None:
        lstm["cell_clip"] = cell_clip
    if proj_clip is not None:
        lstm["proj_clip"] = proj_clip
    char_cnn = {
        "activation": activation,
        "filters": [list(pair) for pair in filters],
        "n_highway": n_highway,
        "embedding": {"dim": char_dim},
        "n_characters": n_characters,
        "max_characters_per_token": max_characters_per_token,
    }
    return {"lstm": lstm, "char_cnn": char_cnn, **_TRAINING_OPTIONS}


def write_original_model(
    folder: str | os.PathLike,
    *,
    lstm_dim: int,
    projection_dim: int,
    n_layers: int = 2,
    filters,
    char_dim: int,
    n_highway: int,
    use_skip_connections: bool = True,
    cell_clip: float | None = 3,
    proj_clip: float | None = 3,
    activation: str = "relu",
    n_characters: int = 262,
    seed: int = 0,
    dtype: str = "float32",
) -> tuple[Path, Path]:
    """Write ``options.json`` and ``lm_weights.hdf5`` of a random model into ``folder`` (created if needed).

    Returns ``(options_path, weight_path)``. ``dtype`` is the HDF5 storage type (values are drawn in float32).
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    options = original_options(
        lstm_dim=lstm_dim,
        projection_dim=projection_dim,
        n_layers=n_layers,
        filters=filters,
        char_dim=char_dim,
        n_highway=n_highway,
        use_skip_connections=use_skip_connections,
        cell_clip=cell_clip,
        proj_clip=proj_clip,
        activation=activation,
        n_characters=n_characters,
    )
    options_path = folder / OPTIONS_NAME
    options_path.write_text(json.dumps(options, indent=2), encoding="utf-8")

    rng = np.random.default_rng(seed)
    weight_path = folder / WEIGHTS_NAME
    shapes = original_shapes(
        lstm_dim=lstm_dim,
        projection_dim=projection_dim,
        n_layers=n_layers,
        filters=filters,
        char_dim=char_dim,
        n_highway=n_highway,
    )
    with h5py.File(weight_path, "w") as handle:
        for name, shape, fan_in in shapes:
            values = rng.standard_normal(shape, dtype=np.float32)
            values *= np.float32(0.1 if fan_in is None else 1.0 / np.sqrt(fan_in))
            handle.create_dataset(name, data=values.astype(dtype, copy=False))
    return options_path, weight_path


def read_original_weights(weight_path: str | os.PathLike) -> dict[str, np.ndarray]:
    """Every dataset of an HDF5 file, by path, as float64 numpy arrays."""
    arrays: dict[str, np.ndarray] = {}

    def visit(name, item):
        if isinstance(item, h5py.Dataset):
            arrays[name] = np.asarray(item[()], dtype=np.float64)

    with h5py.File(weight_path, "r") as handle:
        handle.visititems(visit)
    return arrays
