"""The ``elmo`` command: its list of subcommands, and the dispatch to the module of each.

It lives outside the ``modeling_elmo`` package because ``import modeling_elmo`` registers the package with
transformers (and so imports torch and transformers: seconds). ``elmo --help``, ``elmo --version``, a mistyped
subcommand (with a suggestion), ``elmo SUBCOMMAND --help`` and a mistyped flag answer without that: each
subcommand's flags are a module of ``elmo_flags`` (beside the package too), and the package is imported only once
the flags parse.

Subcommands (``elmo SUBCOMMAND --help`` for each), one module each in ``modeling_elmo/commands/`` with
``run(args) -> int`` and its flags in the module of the same name in ``elmo_flags/`` (``add_arguments(parser)``);
what they share is in ``commands/common.py`` (model, device and precision checks, errors, input checks, signals)
and ``commands/output_files.py`` (publishing output files):

- ``elmo convert``: original ``options.json`` + HDF5 weights to a model folder (``commands/convert.py``).
- ``elmo download``: a released model by name, downloaded and converted once (``commands/download.py``).
- ``elmo embed``: a text file (or stdin) to an HDF5 file of ELMo vectors, one dataset per sentence
  (``commands/embed.py``).
- ``elmo similar``: cosine similarities of one word's vectors in different sentences (``commands/similar.py``).
- ``elmo export-vectors``: a vocabulary's layer-0 vectors, word2vec format (``commands/export_vectors.py``).
- ``elmo score``: sentence log-probabilities under the biLM's released softmax (``commands/score.py``).
- ``elmo demo``: a web demo in the browser, served on this machine (``commands/demo.py``, Gradio).
- ``elmo train-lm``, ``elmo train-tagger``: the training commands (``modeling_elmo.training``), which take their
  argument list (``main(argv, prog)``).

Without ``--model``, ``embed``, ``similar`` and ``export-vectors`` use the demo model bundled in the package
(``modeling_elmo/demo_models/demo_bilm``): a toy-sized biLM this project trained on WikiText-2, not the released
ELMo. For real use, convert the original weights (``elmo convert``) and pass ``--model FOLDER``.

Exit codes: 0 success; 1 an error the message explains (missing file, unloadable model, bad input...);
2 bad command-line usage; 130 interrupted (Ctrl-C); 143 terminated (SIGTERM, while a command writes a file).
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import importlib.util
import inspect
import os
import sys

from elmo_flags import new_parser

# name: (module, what `elmo --help` says). Each module has run(args); its flags are elmo_flags' module of the same
# name (flags_module), with add_arguments(parser).
COMMANDS = {
    "convert": (
        "modeling_elmo.commands.convert",
        "convert original ELMo weights (options.json + HDF5) to a model folder",
    ),
    "download": (
        "modeling_elmo.commands.download",
        "download a released ELMo model by name (small, medium, original, original-5.5B...), convert it once",
    ),
    "embed": ("modeling_elmo.commands.embed", "embed sentences from a text file or stdin into an HDF5 file"),
    "similar": (
        "modeling_elmo.commands.similar",
        "compare one word's vectors in different sentences (the demo: one word, two senses)",
    ),
    "export-vectors": (
        "modeling_elmo.commands.export_vectors",
        "write the context-independent layer-0 vectors of a vocabulary in word2vec format (text or binary)",
    ),
    "score": (
        "modeling_elmo.commands.score",
        "log-probabilities and perplexity of sentences under the biLM's released softmax (JSON lines)",
    ),
    "demo": (
        "modeling_elmo.commands.demo",
        "a web demo in the browser (Gradio): word senses, tagging, fill-in-the-blank",
    ),
}
# The training commands parse their own argument list: main(argv, prog).
DELEGATED = {
    "train-lm": ("modeling_elmo.training.train_lm", "pretrain or fine-tune the biLM language model"),
    "train-tagger": ("modeling_elmo.training.train_tagger", "train a sequence tagger (e.g. NER) on top of ELMo"),
}
# What `pip install "modeling-elmo[train]"` adds (pyproject.toml): the training commands import them.
TRAIN_EXTRA = ("datasets", "accelerate", "seqeval")
# `elmo convert`'s input files and how its messages name them (modeling_elmo.hub.convert._check_readable).
_CONVERT_INPUTS = {"--options_file": "options file", "--weight_file": "weight file", "--vocab_file": "vocab file"}


def _error(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 1


def convert_input_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with an input file of ``elmo convert`` (parsed ``args``: missing, or a folder), found before the
    converter (torch, transformers: seconds) is imported; ``None`` if nothing. Anything else is left to the
    converter's own checks."""
    if args.manylangs_dir is not None:  # these flags are then a usage error, which the converter names
        return None
    for flag, label in _CONVERT_INPUTS.items():
        path = getattr(args, flag.lstrip("-"))
        if path is None:
            continue
        if not os.path.exists(path):
            return f"{label} not found: {path}"
        if os.path.isdir(path):
            return f"{label} {path} is a folder, not a file ({flag})"
    return None


def import_package() -> None:
    """Import ``modeling_elmo`` (which registers it with transformers, quietly) for a subcommand."""
    importlib.import_module("modeling_elmo")


def flags_module(command: str):
    """The ``elmo_flags`` module of one of ``COMMANDS``: its ``add_arguments(parser)`` (light: no torch)."""
    return importlib.import_module("elmo_flags." + COMMANDS[command][0].rpartition(".")[2])


def unknown_command(name: str) -> int:
    """``elmo NAME`` for a NAME that is no subcommand: a usage error, with the closest subcommand's name."""
    close = difflib.get_close_matches(name, [*COMMANDS, *DELEGATED], n=1, cutoff=0.6)
    hint = f": did you mean {close[0]!r}?" if close else ""
    print(f"elmo: error: unknown subcommand {name!r}{hint} (elmo --help lists them)", file=sys.stderr)
    return 2


def _import_command(command: str, module_name: str):
    """The subcommand's module, the package imported first; ``ImportError`` with a message for the user."""
    try:
        import_package()
        return importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        if err.name == module_name:
            raise ImportError(
                f"`elmo {command}` needs {module_name}, which this installation does not have "
                "(update the package: pip install -e .)"
            ) from err
        if err.name is not None and importlib.util.find_spec(err.name.partition(".")[0]) is None:
            raise ImportError(f"`elmo {command}` needs the package {err.name!r}, which is not installed") from err
        cause = err  # an installed package failed to import: name what went wrong, first
        while cause.__cause__ is not None or cause.__context__ is not None:
            cause = cause.__cause__ or cause.__context__
        raise ImportError(f"`elmo {command}` could not be loaded: {type(cause).__name__}: {cause}") from err


def run_subcommand(command: str, argv: list[str]) -> int:
    """Run ``elmo COMMAND ARGV``: light checks first, then the command's module; returns the exit code."""
    if command in DELEGATED:  # the training commands need the [train] extra; say so before transformers does
        missing = [name for name in TRAIN_EXTRA if importlib.util.find_spec(name) is None]
        if missing:
            return _error(
                f"`elmo {command}` needs {', '.join(missing)} (the [train] extra): "
                'pip install "modeling-elmo[train]" (from a checkout: pip install -e ".[train]")'
            )
    args = None
    if command in COMMANDS:  # the flags first: --help and usage errors without importing the package
        add_arguments = flags_module(command).add_arguments
        try:
            args = new_parser(f"elmo {command}", add_arguments).parse_args(argv)
        except SystemExit as exit_:
            return exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 2)
        problem = convert_input_problem(args) if command == "convert" else None
        if problem is not None:
            return _error(problem)
    module_name = COMMANDS[command][0] if command in COMMANDS else DELEGATED[command][0]
    try:
        module = _import_command(command, module_name)
    except ImportError as err:
        return _error(str(err))
    if command in COMMANDS:
        from modeling_elmo.commands.common import run_command

        return run_command(add_arguments, module.run, argv, prog=f"elmo {command}", args=args)
    main_function = getattr(module, "main", None)
    if main_function is None:
        return _error(f"{module_name} has no main(argv) function")
    # The training commands name themselves `elmo train-lm` etc. in usage lines and notes when they take `prog`.
    takes_prog = "prog" in inspect.signature(main_function).parameters
    try:
        code = main_function(argv, prog=f"elmo {command}") if takes_prog else main_function(argv)
    except SystemExit as exit_:  # argparse's --help and usage errors
        code = exit_.code
    if code is None:
        return 0
    return code if isinstance(code, int) else 1


def build_parser(with_arguments: bool = True) -> argparse.ArgumentParser:
    """The ``elmo`` parser with a subparser per subcommand. ``with_arguments``: each of ``COMMANDS`` gets its flags
    (from ``elmo_flags``: nothing heavy is imported); without, only their names and one-line help, which is all
    ``elmo --help`` shows."""
    parser = argparse.ArgumentParser(
        prog="elmo",
        allow_abbrev=False,
        description="ELMo from the command line: convert weights, embed text, compare words in context, train.",
        epilog=(
            "Without --model, embed and similar use the bundled demo model (a toy-sized biLM trained on "
            "WikiText-2 by this project, not the released ELMo). A subcommand's options: elmo SUBCOMMAND --help. "
            "Exit codes: 0 ok, 1 error, 2 usage."
        ),
    )
    parser.add_argument("--version", action="store_true", help="print the package version and exit")
    sub = parser.add_subparsers(dest="command", metavar="SUBCOMMAND")
    for name, (_, help_text) in {**COMMANDS, **DELEGATED}.items():
        if with_arguments and name in COMMANDS:
            flags_module(name).add_arguments(sub.add_parser(name, help=help_text, allow_abbrev=False))
        else:
            sub.add_parser(name, help=help_text, add_help=False, allow_abbrev=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``elmo`` command; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv and (argv[0] in COMMANDS or argv[0] in DELEGATED):
            return run_subcommand(argv[0], argv[1:])
        if argv and not argv[0].startswith("-"):
            return unknown_command(argv[0])
        parser = build_parser(with_arguments=False)
        try:
            args = parser.parse_args(argv)
        except SystemExit as exit_:
            return exit_.code if isinstance(exit_.code, int) else 2
        if args.version:
            from importlib.metadata import PackageNotFoundError, version

            try:
                print(f"elmo {version('modeling-elmo')}")
            except PackageNotFoundError:
                print("elmo (package not installed)")
            return 0
        parser.print_help(sys.stderr)
        return 2
    except OSError as err:  # while importing, or in a training command
        return _error(str(err))
    except KeyboardInterrupt:  # while importing; the commands say so themselves
        print("interrupted", file=sys.stderr)
        return 130


def convert_main() -> int:
    """Entry point of ``elmo-convert``: the same as ``elmo convert`` (and as quiet)."""
    return main(["convert", *sys.argv[1:]])


if __name__ == "__main__":
    sys.exit(main())
