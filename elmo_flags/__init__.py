"""The ``elmo`` subcommands' flags: one module per subcommand, each with ``add_arguments(parser)``.

They import neither torch nor transformers nor ``modeling_elmo`` (whose import registers the package with
transformers: seconds): ``elmo_cli`` parses a subcommand's flags with them first, so that ``elmo SUBCOMMAND --help``
and a mistyped flag answer at once, and imports the package and the subcommand's module
(``modeling_elmo/commands/``, its ``run(args)``) only for valid arguments. Each module of ``modeling_elmo/commands/``
takes its flags from here (``from elmo_flags.embed import add_arguments``); nothing here imports those modules.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable


class CommandParser(argparse.ArgumentParser):
    """argparse's parser, whose error for a missing required flag ends with that flag's ``missing_hint``, where
    ``add_arguments`` gave its action one (``parser.add_argument(...).missing_hint = "try --model demo"``)."""

    def error(self, message: str):
        if message.startswith("the following arguments are required"):
            named = set(message.partition(":")[2].replace(",", " ").split())
            hints = [
                hint
                for action in self._actions
                if (hint := getattr(action, "missing_hint", None)) and named & {*action.option_strings, action.dest}
            ]
            message = "; ".join([message, *hints])
        super().error(message)


def new_parser(prog: str, add_arguments: Callable[[argparse.ArgumentParser], None]) -> argparse.ArgumentParser:
    """A subcommand's parser: ``add_arguments``'s flags, and no abbreviations (``--train_fil`` is an error, not
    ``--train_file``: a flag added later would silently change what an abbreviation means)."""
    parser = CommandParser(prog=prog, allow_abbrev=False)
    add_arguments(parser)
    return parser


def positive_int(text: str) -> int:
    """argparse's ``type`` for a count that must be at least 1 (a batch size): a usage error at parsing, exit 2."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def port_number(text: str) -> int:
    """argparse's ``type`` for a TCP port, 1 to 65535."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, got {text!r}") from None
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 1 to 65535, got {value}")
    return value


def add_precision_argument(parser) -> None:
    """``--precision``, for the commands that embed text."""
    parser.add_argument(
        "--precision",
        choices=["auto", "float32", "bfloat16", "int8"],
        help="auto: the fastest precision whose error this CPU (or GPU) keeps within the documented bound, said on "
        "stderr (docs/speed.md); or one by name (default: float32)",
    )
