"""``elmo score``'s flags (the scoring: ``modeling_elmo/commands/score.py``)."""

from __future__ import annotations

import argparse

from . import positive_int


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Score sentences with the biLM's language model (its released softmax): per line of FILE, one JSON "
        "object with forward_logprob (the words and </S>, each given the words before, from <S>), "
        "backward_logprob (the mirror image, down to <S>), natural logs, and perplexity = "
        "exp(-(forward_logprob + backward_logprob) / (2 (n + 1))) for n words. Words outside the vocabulary "
        "count as <UNK>."
    )
    parser.add_argument("input", help="UTF-8 text, one sentence per line: a file, a pipe, or - for stdin")
    model = parser.add_argument(
        "--model",
        required=True,
        help="a folder converted with --softmax_weight_file, original-lm / original-5.5B-lm (downloaded once), or "
        "demo (the bundled toy biLM and its softmax: offline, a first try)",
    )
    model.missing_hint = (
        "--model demo scores with the bundled toy biLM and its softmax (offline); --model original-lm with the "
        "released ELMo's"
    )
    parser.add_argument(
        "-o",
        "--output",
        help="write the JSON lines to this file, published when complete (default: stdout); never the input",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --output file")
    parser.add_argument("--tokenized", action="store_true", help="lines are tokenized: split on whitespace only")
    parser.add_argument(
        "--stateful",
        action="store_true",
        help="carry the LSTM states from batch to batch, row by row (as AllenNLP's biLM); default stateless",
    )
    parser.add_argument(
        "--batch_size", type=positive_int, default=32, help="sentences per batch (default: %(default)s)"
    )
    parser.add_argument(
        "--softmax_dtype",
        choices=["float32", "bfloat16", "float16"],
        default="float32",
        help="dtype of the softmax products (log-sum-exp sums stay float32; see docs/language-model.md for the "
        "measured error; default: %(default)s)",
    )
    parser.add_argument("--device", default="auto", help="auto (CUDA if available), cpu, cuda, cuda:1, mps")
    parser.add_argument("--disable_tqdm", action="store_true", help="no progress bar")
