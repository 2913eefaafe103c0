"""Small helpers shared by the safety tests (plain functions and classes; fixtures live in conftest.py)."""

from __future__ import annotations

import shutil
from pathlib import Path


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
