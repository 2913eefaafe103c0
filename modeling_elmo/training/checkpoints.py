"""Finding the checkpoint to resume from: the newest COMPLETE ``checkpoint-N`` folder of a training run.

A run killed while it writes a checkpoint (SIGKILL, a full disk) leaves a folder that the Trainer cannot resume
from; the newest folder is then not the one to pick. A checkpoint is complete when it has

- ``trainer_state.json`` that parses (the Trainer writes it last),
- model weights that open: ``model.safetensors``, or ``model.safetensors.index.json`` and every shard it names
  (the safetensors header is read, which also checks that the file is as long as the header says),
- ``optimizer.pt`` and ``scheduler.pt``, not empty.
"""

from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path

CHECKPOINT_PATTERN = re.compile(r"^checkpoint-(\d+)$")
WEIGHTS_NAME = "model.safetensors"
WEIGHTS_INDEX_NAME = "model.safetensors.index.json"
STATE_FILES = ("optimizer.pt", "scheduler.pt")


def _weights_problem(folder: Path) -> str | None:
    from safetensors import safe_open

    if (folder / WEIGHTS_NAME).is_file():
        files = [folder / WEIGHTS_NAME]
    elif (folder / WEIGHTS_INDEX_NAME).is_file():
        try:
            index = json.loads((folder / WEIGHTS_INDEX_NAME).read_text(encoding="utf-8"))
            files = [folder / name for name in sorted(set(index["weight_map"].values()))]
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
            return f"{WEIGHTS_INDEX_NAME} is unreadable ({error})"
    else:
        return f"no {WEIGHTS_NAME}"
    for path in files:
        try:
            with safe_open(str(path), framework="pt") as weights:
                weights.keys()
        except Exception as error:  # safetensors raises its own error types for a damaged file
            return f"{path.name} is unreadable ({type(error).__name__}: {error})"
    return None


def checkpoint_problem(folder: str | os.PathLike) -> str | None:
    """Why ``folder`` cannot be resumed from (``None``: it is complete). See the module docstring."""
    folder = Path(folder)
    try:
        json.loads((folder / "trainer_state.json").read_text(encoding="utf-8"))
    except FileNotFoundError:
        return "no trainer_state.json"
    except (OSError, ValueError) as error:
        return f"trainer_state.json is unreadable ({error})"
    problem = _weights_problem(folder)
    if problem:
        return problem
    for name in STATE_FILES:
        path = folder / name
        if not path.is_file():
            return f"no {name}"
        if path.stat().st_size == 0:
            return f"{name} is empty"
    return None


def newest_complete_checkpoint(output_dir: str | os.PathLike, logger: logging.Logger | None = None) -> str | None:
    """The newest (highest step) complete ``checkpoint-N`` folder of ``output_dir``, or ``None``.

    Each newer folder that is skipped is logged (a warning) with the reason, e.g. ``checkpoint-8: no
    optimizer.pt``.
    """
    output_dir = Path(output_dir)
    if not output_dir.is_dir():
        return None
    found = []
    for path in output_dir.iterdir():
        match = CHECKPOINT_PATTERN.match(path.name)
        if match and path.is_dir():
            found.append((int(match.group(1)), path))
    for _, path in sorted(found, reverse=True):
        problem = checkpoint_problem(path)
        if problem is None:
            return str(path)
        if logger is not None:
            logger.warning("skipping %s, it is incomplete: %s", path.name, problem)
    return None
