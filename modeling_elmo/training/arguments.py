"""Command-line parsing shared by the training commands, as transformers' example scripts do it.

Each command declares its options as dataclasses (its own ``ModelArguments`` and ``DataArguments``, and a
``TrainingArguments`` subclass that only changes defaults) and parses them with [`ElmoArgumentParser`], a
``transformers.HfArgumentParser`` that also:

- reads every option from one JSON or YAML file (``elmo train-lm run.json``), as ``run_mlm.py`` does, under its
  field's name or one of its ``aliases``;
- keeps old flag names working for one release: they are rewritten to the new names with a note on stderr,
  and do not appear in ``--help``;
- takes ``--flag`` alone as ``--flag true`` for every ``bool | None`` field too (``--disable_tqdm``), which
  ``HfArgumentParser`` would refuse ("expected one argument");
- reports a usage error in one line (``PROG: error: ... (see PROG --help)``, exit 2) instead of argparse's
  full usage block;
- keeps ``--help`` short with ``short_help``: of transformers' ``TrainingArguments`` it lists only the common ones
  and those the command's subclass declares, and ``--help-all`` lists every option. (A dataclass that names an
  ``_argument_group_name`` is listed under that heading, HfArgumentParser's argument groups, in the order given.)

A value that the dataclasses themselves refuse (their ``__post_init__`` checks) raises ``ValueError``, from
flags and from a config file alike: the command reports it as one ``error:`` line (exit 1).
"""

from __future__ import annotations

import argparse
import copy
import inspect
import json
import sys
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import Field, fields
from pathlib import Path
from types import MappingProxyType
from typing import Any

from transformers import HfArgumentParser, TrainingArguments

CONFIG_SUFFIXES = {".json": "json", ".yaml": "yaml", ".yml": "yaml"}
# The TrainingArguments that a training command's --help lists (with those its subclass declares), for
# ``short_help``: the ones most runs set, and those the docs name. --help-all lists the other hundred or so.
COMMON_TRAINING_ARGUMENTS = frozenset(
    {
        "output_dir",
        "overwrite_output_dir",
        "num_train_epochs",
        "max_steps",
        "per_device_train_batch_size",
        "per_device_eval_batch_size",
        "gradient_accumulation_steps",
        "learning_rate",
        "lr_scheduler_type",
        "warmup_steps",
        "weight_decay",
        "optim",
        "max_grad_norm",
        "eval_strategy",
        "eval_steps",
        "save_steps",
        "save_total_limit",
        "logging_steps",
        "log_level",
        "report_to",
        "seed",
        "bf16",
        "fp16",
        "use_cpu",
        "disable_tqdm",
        "resume_from_checkpoint",
        "push_to_hub",
        "hub_model_id",
        "ddp_backend",
        "dataloader_num_workers",
    }
)


class _HelpAll(argparse.Action):
    """``--help-all``: the help with every option, then exit (as ``--help``)."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, help: str | None = None):
        super().__init__(option_strings, dest=dest, default=argparse.SUPPRESS, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        parser.print_help(everything=True)
        parser.exit()


class ElmoArgumentParser(HfArgumentParser):
    """``HfArgumentParser`` with config files, deprecated aliases and one-line usage errors.

    Args:
        dataclass_types: the dataclasses whose fields become flags (in order; the returned tuple follows it).
        prog: the program name for usage lines (``elmo train-lm`` when called through the ``elmo`` command).
        description: the ``--help`` text above the flags.
        deprecated: old flag -> new flag, e.g. ``{"--epochs": "--num_train_epochs", "--cpu": "--use_cpu"}``.
            A value may carry a fixed argument for old switches, e.g. ``{"--no_progress": "--disable_tqdm true"}``.
            A key may be an old flag with one of its old values, for values that changed their name too, e.g.
            ``{"--optimizer adamw": "--optim adamw_torch"}`` (``--optimizer=adamw`` is matched as well).
        short_help: the ``TrainingArguments`` fields that ``--help`` lists besides those the command's subclass
            declares (e.g. [`COMMON_TRAINING_ARGUMENTS`]); the others are listed by ``--help-all``, and all of them
            work either way. ``None``: ``--help`` lists every option.
    """

    def __init__(
        self,
        dataclass_types: Iterable[type],
        prog: str,
        description: str | None = None,
        deprecated: Mapping[str, str] | None = None,
        short_help: Collection[str] | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("allow_abbrev", False)  # --train_fil is an error, not --train_file
        super().__init__(list(dataclass_types), prog=prog, description=description, **kwargs)
        self.deprecated = dict(deprecated or {})
        self.hidden_in_help: list[argparse.Action] = []
        if short_help is not None:
            shown = set(short_help)
            for dtype in self.dataclass_types:
                if issubclass(dtype, TrainingArguments):
                    shown |= set(inspect.get_annotations(dtype))  # the fields the command's subclass declares
            trainer_fields = {f.name for f in fields(TrainingArguments)}
            self.hidden_in_help = [
                action for action in self._actions if action.dest in trainer_fields and action.dest not in shown
            ]
            self.add_argument(
                "--help-all",
                action=_HelpAll,
                help=f"show every option, the {len({a.dest for a in self.hidden_in_help})} other TrainingArguments "
                "included, and exit",
            )

    def format_help(self, everything: bool = False) -> str:
        """The help text: without ``everything``, the options hidden by ``short_help`` are left out."""
        hidden = [] if everything else [(action, action.help) for action in self.hidden_in_help]
        for action, _ in hidden:
            action.help = argparse.SUPPRESS
        try:
            return super().format_help()
        finally:
            for action, text in hidden:
                action.help = text

    def print_help(self, file=None, everything: bool = False) -> None:
        self._print_message(self.format_help(everything=everything), file or sys.stdout)

    @staticmethod
    def _parse_dataclass_field(parser, field: Field) -> None:
        # HfArgumentParser gives ``bool | None`` fields (``disable_tqdm``, ``tf32``...) no ``const``: ``--flag``
        # alone would be a usage error, unlike a ``bool`` field. A copy, so the dataclass itself is left unchanged.
        if field.type == bool | None and field.default is None and "nargs" not in field.metadata:
            field = copy.copy(field)
            field.metadata = MappingProxyType({**field.metadata, "nargs": "?", "const": True})
        HfArgumentParser._parse_dataclass_field(parser, field)

    def error(self, message: str):  # argparse's hook for usage errors
        print(f"{self.prog}: error: {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(2)

    def rename_deprecated(self, argv: Sequence[str]) -> list[str]:
        """``argv`` with old flag names replaced by the new ones; one note on stderr per old name used."""
        out: list[str] = []
        noted: set[str] = set()
        args = list(argv)
        i = 0
        while i < len(args):
            name, sep, value = args[i].partition("=")
            i += 1
            # An old flag with an old value ("--optimizer adamw" or "--optimizer=adamw") first, then the flag alone.
            with_value = f"{name} {value}" if sep else f"{name} {args[i]}" if i < len(args) else None
            if with_value in self.deprecated:
                old, new = with_value, self.deprecated[with_value].split()
                i += 0 if sep else 1
            elif name in self.deprecated:
                old, new = name, self.deprecated[name].split() + ([value] if sep else [])
            else:
                out.append(args[i - 1])
                continue
            if old not in noted:
                print(
                    f"{self.prog}: note: {old} is deprecated and will be removed in the next release; "
                    f"use {' '.join(self.deprecated[old].split())}",
                    file=sys.stderr,
                )
                noted.add(old)
            out.extend(new)
        return out

    def parse(self, argv: Sequence[str] | None = None) -> tuple:
        """Parse ``argv`` (default: ``sys.argv[1:]``) into the dataclasses.

        A single argument ending in ``.json``, ``.yaml`` or ``.yml`` is a config file holding every option under
        its flag name (without dashes); unknown keys in it are refused by name.
        """
        argv = list(sys.argv[1:] if argv is None else argv)
        if len(argv) == 1 and Path(argv[0]).suffix.lower() in CONFIG_SUFFIXES and not argv[0].startswith("-"):
            return self.parse_config_file(argv[0])
        args = self.rename_deprecated(argv)
        # Unknown flags first: building the dataclasses runs their checks, whose refusals would hide the typo.
        _, unknown = self.parse_known_args(args)
        if unknown:
            self.error(f"unrecognized arguments: {' '.join(unknown)}")
        return tuple(self.parse_args_into_dataclasses(args=args, look_for_args_file=False))

    def parse_config_file(self, path: str) -> tuple:
        """The dataclasses from a JSON or YAML file.

        A missing, unreadable or malformed file, a file that is not a mapping, and unknown keys are usage errors; a
        value that the dataclasses refuse raises their ``ValueError``, as the same value given as a flag does.
        """
        kind = CONFIG_SUFFIXES[Path(path).suffix.lower()]
        try:
            text = Path(path).read_text(encoding="utf-8")
            if kind == "json":
                values = json.loads(text)
            else:
                import yaml

                values = yaml.safe_load(text)
        except OSError as err:
            self.error(f"cannot read the config file {path}: {err.strerror or err}")
        except UnicodeDecodeError as err:
            self.error(f"config file {path}: not UTF-8 text ({err.reason})")
        except Exception as err:  # json.JSONDecodeError, yaml.YAMLError
            self.error(f"config file {path}: not valid {kind.upper()}: {' '.join(str(err).split())}")
        if not isinstance(values, dict):
            self.error(f"config file {path}: expected a mapping of option names to values, got {type(values).__name__}")
        for alias, name in field_aliases(*self.dataclass_types).items():  # a flag's other names are keys too
            if alias in values:
                if name in values:
                    self.error(f"config file {path}: {alias} and {name} are the same option; give one")
                values = {name if key == alias else key: value for key, value in values.items()}
        unknown = sorted(set(values) - field_names(*self.dataclass_types))
        if unknown:
            self.error(f"config file {path}: unknown option(s) {', '.join(map(str, unknown))}")
        return self.parse_dict(values, allow_extra_keys=False)


def field_names(*dataclass_types: type) -> set[str]:
    """Every field name of the given dataclasses that a config file may set (``init`` fields)."""
    return {f.name for cls in dataclass_types for f in fields(cls) if f.init}


def field_aliases(*dataclass_types: type) -> dict[str, str]:
    """Other names of fields (``metadata["aliases"]``, e.g. ``--model_name_or_path`` of ``bilm``), without dashes,
    mapped to the field names, for config files."""
    return {
        alias.lstrip("-"): f.name
        for cls in dataclass_types
        for f in fields(cls)
        for alias in (
            [f.metadata["aliases"]] if isinstance(f.metadata.get("aliases"), str) else f.metadata.get("aliases", [])
        )
    }
