"""``elmo similar``'s flags and built-in examples (the comparison: ``modeling_elmo/commands/similar.py``)."""

from __future__ import annotations

import argparse
from typing import NamedTuple

from . import add_precision_argument


class SimilarExample(NamedTuple):
    """Built-in sentences for ``elmo similar --word WORD``: two per sense, the first sense's first."""

    senses: tuple[str, str]
    sentences: tuple[str, str, str, str]


# The first two sentences of each sense in benchmarks/pick_demo_word.py (its "display set"). The default word is the
# one whose senses the demo biLM separates best on that script's held-out sentences (see its output in the README);
# "bank" is the classic example, which a converted ELMo separates but the toy demo biLM does not.
SIMILAR_EXAMPLES = {
    "record": SimilarExample(
        ("noun", "verb"),
        (
            "The album set a record for sales in its first week .",
            "He broke the world record in the long jump .",
            "They went to London to record their second album .",
            "The band began to record new songs in March .",
        ),
    ),
    "bank": SimilarExample(
        ("river", "money"),
        (
            "He sat on the bank of the river and watched the water .",
            "The boat drifted to the muddy bank of the river .",
            "She went to the bank to open an account .",
            "The bank raised the interest rate on its loans .",
        ),
    ),
}
DEFAULT_SIMILAR_WORD = "record"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Print the cosine similarities of WORD's contextual vectors across sentences: the same word gets "
        "different ELMo vectors in different contexts. Without sentences, compares WORD in two sentences of "
        f"each of two senses, built in for {' and '.join(repr(w) for w in SIMILAR_EXAMPLES)} (default: "
        f"{DEFAULT_SIMILAR_WORD!r}, the word whose senses the demo model separates best, measured by "
        "benchmarks/pick_demo_word.py; with a converted ELMo, try --word bank), and prints the mean "
        "similarity within and across senses."
    )
    parser.add_argument(
        "sentences", nargs="*", help="two or more sentences that contain WORD (default: the built-in examples)"
    )
    parser.add_argument("--word", help=f"the word to compare (default: {DEFAULT_SIMILAR_WORD})")
    parser.add_argument(
        "--layer", default="top", help="top (default), elmo (the scalar mix) or a layer number 0..L (0: characters)"
    )
    parser.add_argument("--model", help="model folder or Hub id (default: the bundled demo model)")
    parser.add_argument("--device", default="auto", help="auto (CUDA if available), cpu, cuda, mps")
    parser.add_argument(
        "--plot",
        metavar="FILE",
        help="also draw the similarity heatmap into FILE; its extension names the format (.png, .svg, .pdf...)",
    )
    parser.add_argument("--overwrite", action="store_true", help="with --plot: replace an existing FILE")
    add_precision_argument(parser)
