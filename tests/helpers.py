"""Small helpers shared by the safety tests (plain functions and classes; fixtures live in conftest.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

# The tiny biLM most tests use: the original's structure (filters, highway, 2 residual layers) at toy sizes.
TINY_SIZES = dict(
    char_embedding_dim=4,
    char_cnn_filters=[[1, 4], [2, 8], [3, 8]],
    n_highway=1,
    lstm_dim=16,
    projection_dim=8,
    n_layers=2,
)
# The same with clipping and large initial weights, so that the clips and the cell state really act.
TINY = dict(TINY_SIZES, cell_clip=3.0, proj_clip=3.0, initializer_range=0.3)


def copy_of(saved: Path, tmp_path: Path, name: str = "copy") -> Path:
    """A copy of the folder ``saved`` to damage in a test, as ``tmp_path/name``."""
    folder = tmp_path / name
    shutil.copytree(saved, folder)
    return folder


class PickleBomb:
    """Unpickling this runs code: it creates the file named in the argument (so a test sees whether it ran)."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))
