"""``elmo export-vectors``: the context-independent layer-0 vectors of a vocabulary, in word2vec format.

    elmo export-vectors --vocab_file vocab.txt --output_file vectors.txt [--binary] [--model M]

Python: ``modeling_elmo.inference.static_vectors.export_word2vec``.
"""

from __future__ import annotations

import argparse
import os
import sys

from elmo_cli import CliError, check_device_name, describe_model, load_model, resolve_device


def build_parser(prog: str = "elmo export-vectors") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description=(
            "Write ELMo's context-independent vectors (layer 0: the character CNN, highway layers and projection, "
            "before the biLSTMs) of every word of a vocabulary file in word2vec format, for tools that read word2vec "
            "or GloVe vectors (gensim's KeyedVectors.load_word2vec_format, spaCy's init vectors). Each vector has "
            "projection_dim values (the model's layer 0 is that vector twice, [x; x])."
        ),
        epilog="Without --model, the bundled demo model (a toy-sized biLM, not the released ELMo) is used.",
    )
    parser.add_argument("--vocab_file", required=True, help="UTF-8 text file, one word per line (e.g. bilm-tf's)")
    parser.add_argument("--output_file", required=True, help="the word2vec file to write (e.g. vectors.txt)")
    parser.add_argument("--binary", action="store_true", help="word2vec's binary format (float32) instead of text")
    parser.add_argument(
        "--model", help="model folder, Hub id, released model's name, or demo (default: the bundled demo model)"
    )
    parser.add_argument("--device", default="auto", help="auto (CUDA if available), cpu, cuda, cuda:1, mps")
    parser.add_argument("--batch_size", type=int, default=1024, help="words per batch (default: %(default)s)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing output file")
    parser.add_argument("--disable_tqdm", action="store_true", help="no progress bar")
    return parser


def main(argv: list[str] | None = None, prog: str = "elmo export-vectors") -> int:
    args = build_parser(prog).parse_args(argv)
    if args.batch_size < 1:
        raise CliError(f"--batch_size must be positive, got {args.batch_size}")
    if not os.path.isfile(args.vocab_file):
        raise CliError(f"--vocab_file {args.vocab_file}: no such file")
    if os.path.isdir(args.output_file):
        raise CliError(f"--output_file {args.output_file} is a folder; give a file name such as vectors.txt")
    folder = os.path.dirname(os.path.abspath(args.output_file))
    if not os.path.isdir(folder):
        raise CliError(f"--output_file {args.output_file}: the folder {folder} does not exist")
    if os.path.exists(args.output_file) and not args.overwrite:
        raise CliError(f"{args.output_file} exists; pass --overwrite to replace it")
    check_device_name(args.device)

    from ..inference.static_vectors import export_word2vec, read_word_list

    try:
        words = read_word_list(args.vocab_file)
    except UnicodeDecodeError as err:
        raise CliError(f"{args.vocab_file} is not UTF-8 text ({err})") from err
    except ValueError as err:
        raise CliError(str(err)) from err
    model_name = None if args.model == "demo" else args.model
    tokenizer, model = load_model(model_name, resolve_device(args.device))
    try:
        count = export_word2vec(
            model,
            tokenizer,
            words,
            args.output_file,
            binary=args.binary,
            batch_size=args.batch_size,
            progress=not args.disable_tqdm,
            overwrite=args.overwrite,
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


if __name__ == "__main__":
    from elmo_cli import main as cli_main

    sys.exit(cli_main(["export-vectors", *sys.argv[1:]]))
