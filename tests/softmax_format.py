"""Write random language-model heads in the RELEASED layout (bilm-tf's softmax HDF5 and vocabulary file).

Written here from SOFTMAX_FACTS (section 2, 3), not from the converter: ``softmax/W`` ``(V, P)`` with row i scoring
line i of the vocabulary, ``softmax/b`` ``(V,)``, one pair for both directions; the vocabulary one word per line,
``<S>``, ``</S>`` and ``<UNK>`` somewhere among them (found by name).
"""

from __future__ import annotations

import os
from pathlib import Path

import h5py
import numpy as np

SOFTMAX_NAME = "softmax_weights.hdf5"
VOCAB_NAME = "vocab.txt"


def vocabulary(size: int, specials_at: tuple[int, int, int] = (0, 1, 2), words: list[str] | None = None) -> list[str]:
    """``size`` words: ``words`` first (then ``word0``, ``word1``...), with ``<S>``, ``</S>``, ``<UNK>`` put on the
    lines ``specials_at``."""
    others = list(words or [])
    others += [f"word{i}" for i in range(size - 3 - len(others))]
    result: list[str | None] = [None] * size
    for line, special in zip(specials_at, ("<S>", "</S>", "<UNK>"), strict=True):
        result[line] = special
    rest = iter(others)
    return [word if word is not None else next(rest) for word in result]


def write_vocab(path: str | os.PathLike, words: list[str]) -> Path:
    path = Path(path)
    path.write_text("\n".join(words) + "\n", encoding="utf-8")
    return path


def write_softmax(
    path: str | os.PathLike,
    vocab_size: int,
    projection_dim: int,
    seed: int = 0,
    scale: float = 1.0,
    dtype: str = "float32",
    chunk_rows: int = 1 << 16,
) -> Path:
    """A random ``softmax/W`` (entries ``normal * scale / sqrt(P)``) and ``softmax/b`` (``0.1 * normal``), written
    in row blocks (a 793,471 x 512 file never sits in memory whole)."""
    path = Path(path)
    rng = np.random.default_rng(seed)
    with h5py.File(path, "w") as handle:
        weight = handle.create_dataset("softmax/W", shape=(vocab_size, projection_dim), dtype=dtype)
        for start in range(0, vocab_size, chunk_rows):
            rows = min(chunk_rows, vocab_size - start)
            block = rng.standard_normal((rows, projection_dim), dtype=np.float32)
            weight[start : start + rows] = block * np.float32(scale / np.sqrt(projection_dim))
        handle.create_dataset("softmax/b", data=(0.1 * rng.standard_normal(vocab_size)).astype(dtype))
    return path
