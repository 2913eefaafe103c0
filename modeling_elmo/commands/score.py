"""``elmo score``: one JSON object per sentence with its log-probabilities under the biLM and its released softmax.

Command::

    elmo score [--model M] [--tokenized] [--stateful] [--batch_size N] [--softmax_dtype bfloat16] FILE [-o OUT]

``--model`` is a folder converted with ``elmo convert --softmax_weight_file`` (an ``ElmoForPreTraining``), a
released LM name (``original-lm``, ``original-5.5B-lm``: downloaded and converted on first use), or ``demo``: the
bundled toy demo biLM with its softmax, where the package has it (see ``modeling_elmo.demo_models.language_model``).
FILE holds one sentence per line: a file, a pipe (``<(zcat corpus.gz)``) or ``-`` for stdin. Each output line is
``{"tokens", "forward_logprob", "backward_logprob", "perplexity"}`` (see ``modeling_elmo.scoring_elmo``), on stdout
or published whole to OUT by ``output_files``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import stat
import sys
from collections.abc import Iterator
from typing import TextIO

from elmo_flags.score import add_arguments

from ..inference.new_files import create_new
from .common import CliError, UsageError, check_text_line, quiet_loading, resolve_device, run_command, scan_text_file
from .output_files import check_output, model_files, writing

COMMAND = "score"
PROG = "elmo score"


def _check_input(path: str) -> int | None:
    """Lines of ``path`` if it is a regular file (read once here, before the model loads: UTF-8, no NUL), ``None``
    for stdin or a pipe, which can be read only once. [`CliError`] if it cannot be read."""
    if path == "-":
        return None
    try:
        mode = os.stat(path).st_mode
    except OSError as err:
        raise CliError(f"cannot read {path}: {err.strerror or err}") from None
    if stat.S_ISDIR(mode):
        raise CliError(f"cannot read {path}: it is a folder, not a text file")
    return scan_text_file(path) if stat.S_ISREG(mode) else None


def _lines(stream: TextIO, source: str) -> Iterator[str]:
    for number, line in enumerate(stream, 1):
        check_text_line(source, number, line)
        yield line.rstrip("\n").rstrip("\r")


def _utf8_stdin(stack: contextlib.ExitStack) -> TextIO:
    """stdin decoded as strict UTF-8, whatever the locale says (a C locale would let bad bytes through as
    surrogates); left open when the stack closes."""
    buffer = getattr(sys.stdin, "buffer", None)
    if buffer is None:  # a text stream put in its place (tests)
        return sys.stdin
    stream = io.TextIOWrapper(buffer, encoding="utf-8")
    stack.callback(stream.detach)
    return stream


def _load(args, device):
    """The scorer of ``--model`` on ``device``; [`CliError`] if it cannot be loaded."""
    from ..demo_models.language_model import DEMO_NAME, load_demo_language_model
    from ..hub.download import resolve_pretrained
    from ..scoring_elmo import ElmoSentenceScorer, load_language_model

    try:
        if args.model.lower() == DEMO_NAME and not os.path.exists(args.model):  # a folder called demo wins
            with quiet_loading():
                model, tokenizer = load_demo_language_model()
            model = model.to(device)
        else:
            folder = resolve_pretrained(args.model, progress=not args.disable_tqdm)  # a download shows its bar
            with quiet_loading():
                model, tokenizer = load_language_model(folder, device)
        return ElmoSentenceScorer(model, tokenizer, stateful=args.stateful, softmax_dtype=args.softmax_dtype)
    except (OSError, ValueError, RuntimeError) as err:
        raise CliError(f"cannot load {args.model} for scoring: {err}") from err


def run(args: argparse.Namespace) -> int:
    """``elmo score``: see ``--help``. Errors: [`CliError`] (input, output, model), [`UsageError`]."""
    if args.batch_size < 1:
        raise UsageError("--batch_size must be at least 1")
    if args.overwrite and args.output is None:
        raise UsageError("--overwrite needs -o/--output FILE")
    total = _check_input(args.input)  # before the model loads and before the output is touched
    if args.output is not None:
        check_output(args.output, args.overwrite, inputs=[args.input, *model_files(args.model)])
    device = resolve_device(args.device)
    source = "stdin" if args.input == "-" else args.input
    with contextlib.ExitStack() as stack:
        out = sys.stdout
        if args.output is not None:  # closed before it is published: the stack unwinds in reverse
            inputs = [args.input, *model_files(args.model)]
            temp = stack.enter_context(writing(args.output, COMMAND, args.overwrite, inputs=inputs))
            out = stack.enter_context(create_new(temp, binary=False))  # never through a link of that name
        scorer = _load(args, device)
        if args.input == "-":
            stream = _utf8_stdin(stack)
        else:
            try:
                stream = stack.enter_context(open(args.input, encoding="utf-8"))
            except OSError as err:
                raise CliError(f"cannot read {args.input}: {err.strerror or err}") from None
        results = scorer.score(
            _lines(stream, source),
            tokenized=args.tokenized,
            batch_size=args.batch_size,
            progress=not args.disable_tqdm,
            total=total,
        )
        try:
            for result in results:
                out.write(json.dumps(result, ensure_ascii=False) + "\n")
        except UnicodeDecodeError as err:  # a pipe or stdin: not checked beforehand
            raise CliError(f"{source} is not UTF-8 text ({err}); convert it, e.g. with iconv") from None
    return 0


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    return run_command(add_arguments, run, argv, prog)


if __name__ == "__main__":
    sys.exit(main())
