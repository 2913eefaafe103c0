"""``elmo export-vectors``: the context-independent layer-0 vectors of a vocabulary, in word2vec format.

    elmo export-vectors --vocab_file vocab.txt --output_file vectors.txt [--binary] [--model M] [--overwrite]

Python: ``modeling_elmo.inference.static_vectors.export_word2vec``. The file is published by ``output_files``.
"""

from __future__ import annotations

import argparse
import os
import sys

from elmo_flags.export_vectors import add_arguments

from .common import (
    CliError,
    check_device_name,
    check_model_name,
    describe_model,
    load_model,
    resolve_device,
    run_command,
)
from .output_files import check_output, model_files, writing

COMMAND = "export-vectors"
PROG = "elmo export-vectors"


def run(args: argparse.Namespace) -> int:
    """``elmo export-vectors``: see ``--help``. Errors: [`CliError`] (vocabulary, output, model)."""
    if args.batch_size < 1:
        raise CliError(f"--batch_size must be positive, got {args.batch_size}")
    if not os.path.isfile(args.vocab_file):
        raise CliError(f"--vocab_file {args.vocab_file}: no such file")
    check_device_name(args.device)
    model_name = None if args.model == "demo" else args.model
    inputs = [args.vocab_file, *model_files(model_name)]
    check_output(args.output_file, args.overwrite, inputs=inputs, flag="--output_file")
    check_model_name(model_name)

    from ..inference.static_vectors import export_word2vec, read_word_list

    try:
        words = read_word_list(args.vocab_file)
    except UnicodeDecodeError as err:
        raise CliError(f"{args.vocab_file} is not UTF-8 text ({err})") from err
    except ValueError as err:
        raise CliError(str(err)) from err
    with writing(args.output_file, COMMAND, args.overwrite, inputs, flag="--output_file") as temp:
        tokenizer, model = load_model(model_name, resolve_device(args.device))
        try:
            # the library writes `temp` whole (its own temporary name beside it); `writing` publishes it
            count = export_word2vec(
                model,
                tokenizer,
                words,
                temp,
                binary=args.binary,
                batch_size=args.batch_size,
                progress=not args.disable_tqdm,
            )
        except ValueError as err:
            raise CliError(str(err)) from err
    kind = "binary" if args.binary else "text"
    print(
        f"Wrote {count} vectors of {model.config.projection_dim} values ({kind} word2vec, layer 0 of "
        f"{describe_model(model_name)}) to {args.output_file}",
        file=sys.stderr,
    )
    return 0


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    return run_command(add_arguments, run, argv, prog)


if __name__ == "__main__":
    sys.exit(main())
