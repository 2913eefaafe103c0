"""``elmo export-vectors``: the context-independent layer-0 vectors of a vocabulary, in word2vec format.

    elmo export-vectors --vocab_file vocab.txt --output_file vectors.txt [--binary] [--model M] [--overwrite]

Python: ``modeling_elmo.inference.static_vectors.export_word2vec``. The file is published by ``output_files``.
"""

from __future__ import annotations

import argparse
import os
import sys

from .common import (
    CliError,
    check_device_name,
    check_model_name,
    describe_model,
    load_model,
    resolve_device,
    run_command,
)
from .output_files import check_output, writing

COMMAND = "export-vectors"
PROG = "elmo export-vectors"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Write ELMo's context-independent vectors (layer 0: the character CNN, highway layers and projection, "
        "before the biLSTMs) of every word of a vocabulary file in word2vec format, for tools that read word2vec "
        "or GloVe vectors (gensim's KeyedVectors.load_word2vec_format, spaCy's init vectors). Each vector has "
        "projection_dim values (the model's layer 0 is that vector twice, [x; x])."
    )
    parser.epilog = "Without --model, the bundled demo model (a toy-sized biLM, not the released ELMo) is used."
    parser.add_argument("--vocab_file", required=True, help="UTF-8 text file, one word per line (e.g. bilm-tf's)")
    parser.add_argument(
        "--output_file",
        required=True,
        help="the word2vec file to write (e.g. vectors.txt), published when complete; never the vocabulary file",
    )
    parser.add_argument("--binary", action="store_true", help="word2vec's binary format (float32) instead of text")
    parser.add_argument(
        "--model", help="model folder, Hub id, released model's name, or demo (default: the bundled demo model)"
    )
    parser.add_argument("--device", default="auto", help="auto (CUDA if available), cpu, cuda, cuda:1, mps")
    parser.add_argument("--batch_size", type=int, default=1024, help="words per batch (default: %(default)s)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing output file")
    parser.add_argument("--disable_tqdm", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    """``elmo export-vectors``: see ``--help``. Errors: [`CliError`] (vocabulary, output, model)."""
    if args.batch_size < 1:
        raise CliError(f"--batch_size must be positive, got {args.batch_size}")
    if not os.path.isfile(args.vocab_file):
        raise CliError(f"--vocab_file {args.vocab_file}: no such file")
    check_output(args.output_file, args.overwrite, inputs=[args.vocab_file], flag="--output_file")
    check_device_name(args.device)
    model_name = None if args.model == "demo" else args.model
    check_model_name(model_name)

    from ..inference.static_vectors import export_word2vec, read_word_list

    try:
        words = read_word_list(args.vocab_file)
    except UnicodeDecodeError as err:
        raise CliError(f"{args.vocab_file} is not UTF-8 text ({err})") from err
    except ValueError as err:
        raise CliError(str(err)) from err
    with writing(args.output_file, COMMAND, args.overwrite, [args.vocab_file], flag="--output_file") as temp:
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
