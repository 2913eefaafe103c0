"""``elmo score``: one JSON object per sentence with its log-probabilities under the biLM and its released softmax.

Command::

    elmo score [--model M] [--tokenized] [--stateful] [--batch_size N] [--softmax_dtype bfloat16] FILE [-o OUT]

``--model`` is a folder converted with ``elmo convert --softmax_weight_file`` (an ``ElmoForPreTraining``), a
released LM name (``original-lm``, ``original-5.5B-lm``: downloaded and converted on first use), or ``demo``: the
bundled toy demo biLM with its softmax, where the package has it (see ``modeling_elmo.demo_models.language_model``).
FILE holds one sentence per line (``-``: stdin). Each output line is ``{"tokens", "forward_logprob", "backward_logprob",
"perplexity"}`` (see ``modeling_elmo.scoring_elmo``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys


def main(argv: list[str] | None = None, prog: str = "elmo score") -> int:
    parser = argparse.ArgumentParser(
        prog=prog,
        description=(
            "Score sentences with the biLM's language model (its released softmax): per line of FILE, one JSON "
            "object with forward_logprob (the words and </S>, each given the words before, from <S>), "
            "backward_logprob (the mirror image, down to <S>), natural logs, and perplexity = "
            "exp(-(forward_logprob + backward_logprob) / (2 (n + 1))) for n words. Words outside the vocabulary "
            "count as <UNK>."
        ),
    )
    parser.add_argument("input", help="UTF-8 text, one sentence per line; - reads stdin")
    parser.add_argument(
        "--model",
        required=True,
        help="a folder converted with --softmax_weight_file, original-lm / original-5.5B-lm (downloaded once), or "
        "demo (the bundled toy biLM, once its softmax ships: modeling_elmo/demo_models/demo_softmax)",
    )
    parser.add_argument("-o", "--output", help="write the JSON lines here (default: stdout)")
    parser.add_argument("--tokenized", action="store_true", help="lines are tokenized: split on whitespace only")
    parser.add_argument(
        "--stateful",
        action="store_true",
        help="carry the LSTM states from batch to batch, row by row (as AllenNLP's biLM); default stateless",
    )
    parser.add_argument("--batch_size", type=int, default=32, help="sentences per batch (default: %(default)s)")
    parser.add_argument(
        "--softmax_dtype",
        choices=["float32", "bfloat16", "float16"],
        default="float32",
        help="dtype of the softmax products (log-sum-exp sums stay float32; see docs/language-model.md for the "
        "measured error; default: %(default)s)",
    )
    parser.add_argument("--device", default="auto", help="auto (CUDA if available), cpu, cuda, cuda:1, mps")
    parser.add_argument("--disable_tqdm", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    if args.batch_size < 1:
        parser.error("--batch_size must be at least 1")

    from elmo_cli import CliError, resolve_device

    from ..demo_models.language_model import DEMO_NAME, load_demo_language_model
    from ..hub.download import resolve_pretrained
    from ..scoring_elmo import ElmoSentenceScorer, load_language_model

    try:
        device = resolve_device(args.device)
    except CliError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    try:
        if args.model.lower() == DEMO_NAME and not os.path.exists(args.model):  # a folder called demo wins
            model, tokenizer = load_demo_language_model()
            model = model.to(device)
        else:
            folder = resolve_pretrained(args.model, progress=not args.disable_tqdm)
            model, tokenizer = load_language_model(folder, device)
        scorer = ElmoSentenceScorer(model, tokenizer, stateful=args.stateful, softmax_dtype=args.softmax_dtype)
    except (OSError, ValueError, RuntimeError) as err:
        print(f"error: cannot load {args.model} for scoring: {err}", file=sys.stderr)
        return 1

    try:
        stream = sys.stdin if args.input == "-" else open(args.input, encoding="utf-8")  # noqa: SIM115
    except OSError as err:
        print(f"error: cannot read {args.input}: {err.strerror or err}", file=sys.stderr)
        return 1
    out = sys.stdout if args.output is None else open(args.output, "w", encoding="utf-8")  # noqa: SIM115
    try:
        total = None
        if stream is not sys.stdin:
            total = sum(1 for _ in stream)
            stream.seek(0)
        lines = (line.rstrip("\n").rstrip("\r") for line in stream)
        for result in scorer.score(
            lines, tokenized=args.tokenized, batch_size=args.batch_size, progress=not args.disable_tqdm, total=total
        ):
            out.write(json.dumps(result, ensure_ascii=False) + "\n")
    except UnicodeDecodeError as err:
        print(f"error: {args.input} is not UTF-8 text ({err})", file=sys.stderr)
        return 1
    finally:
        if stream is not sys.stdin:
            stream.close()
        if out is not sys.stdout:
            out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
