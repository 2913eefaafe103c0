"""Command-line parsing shared by the training commands, as transformers' example scripts do it.

Each command declares its options as dataclasses (its own ``ModelArguments`` and ``DataArguments``, and a
``TrainingArguments`` subclass that only changes defaults) and parses them with [`ElmoArgumentParser`], a
``transformers.HfArgumentParser`` that also:

- reads every option from one JSON or YAML file (``elmo train-lm run.json``), as ``run_mlm.py`` does;
- keeps old flag names working for one release: they are rewritten to the new names with a note on stderr,
  and do not appear in ``--help``;
- reports a usage error in one line (``PROG: error: ... (see PROG --help)``, exit 2) instead of argparse's
  full usage block.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

from transformers import HfArgumentParser

CONFIG_SUFFIXES = {".json": "json", ".yaml": "yaml", ".yml": "yaml"}


class ElmoArgumentParser(HfArgumentParser):
    """``HfArgumentParser`` with config files, deprecated aliases and one-line usage errors.

    Args:
        dataclass_types: the dataclasses whose fields become flags (in order; the returned tuple follows it).
        prog: the program name for usage lines (``elmo train-lm`` when called through the ``elmo`` command).
        description: the ``--help`` text above the flags.
        deprecated: old flag -> new flag, e.g. ``{"--epochs": "--num_train_epochs", "--cpu": "--use_cpu"}``.
            A value may carry a fixed argument for old switches, e.g. ``{"--no_progress": "--disable_tqdm true"}``.
    """

    def __init__(
        self,
        dataclass_types: Iterable[type],
        prog: str,
        description: str | None = None,
        deprecated: Mapping[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(list(dataclass_types), prog=prog, description=description, **kwargs)
        self.deprecated = dict(deprecated or {})

    def error(self, message: str):  # argparse's hook for usage errors
        print(f"{self.prog}: error: {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(2)

    def rename_deprecated(self, argv: Sequence[str]) -> list[str]:
        """``argv`` with old flag names replaced by the new ones; one note on stderr per old name used."""
        out: list[str] = []
        noted: set[str] = set()
        for arg in argv:
            name, sep, value = arg.partition("=")
            if name in self.deprecated:
                new = self.deprecated[name].split()
                if name not in noted:
                    print(
                        f"{self.prog}: note: {name} is deprecated and will be removed in the next release; "
                        f"use {' '.join(new)}",
                        file=sys.stderr,
                    )
                    noted.add(name)
                out.extend(new)
                if sep:
                    out.append(value)
            else:
                out.append(arg)
        return out

    def parse(self, argv: Sequence[str] | None = None) -> tuple:
        """Parse ``argv`` (default: ``sys.argv[1:]``) into the dataclasses.

        A single argument ending in ``.json``, ``.yaml`` or ``.yml`` is a config file holding every option under
        its flag name (without dashes); unknown keys in it are refused by name.
        """
        argv = list(sys.argv[1:] if argv is None else argv)
        if len(argv) == 1 and Path(argv[0]).suffix.lower() in CONFIG_SUFFIXES and not argv[0].startswith("-"):
            return self.parse_config_file(argv[0])
        parsed = self.parse_args_into_dataclasses(
            args=self.rename_deprecated(argv), look_for_args_file=False, return_remaining_strings=True
        )
        *dataclasses, unknown = parsed
        if unknown:
            self.error(f"unrecognized arguments: {' '.join(unknown)}")
        return tuple(dataclasses)

    def parse_config_file(self, path: str) -> tuple:
        """The dataclasses from a JSON or YAML file; a missing, unreadable or malformed file is a usage error."""
        kind = CONFIG_SUFFIXES[Path(path).suffix.lower()]
        try:
            if kind == "json":
                return self.parse_json_file(path, allow_extra_keys=False)
            return self.parse_yaml_file(path, allow_extra_keys=False)
        except OSError as err:
            self.error(f"cannot read the config file {path}: {err.strerror or err}")
        except ValueError as err:  # bad JSON/YAML, unknown keys, wrong types
            self.error(f"config file {path}: {err}")
        except Exception as err:  # yaml.YAMLError is not a ValueError
            self.error(f"config file {path}: {type(err).__name__}: {err}")


def field_names(*dataclass_types: type) -> set[str]:
    """Every field name of the given dataclasses (the keys a config file may hold)."""
    return {f.name for cls in dataclass_types for f in fields(cls)}
