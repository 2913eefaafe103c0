"""``elmo export-vectors``' flags (the export: ``modeling_elmo/commands/export_vectors.py``)."""

from __future__ import annotations

import argparse

from . import positive_int


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
    parser.add_argument("--batch_size", type=positive_int, default=1024, help="words per batch (default: %(default)s)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing output file")
    parser.add_argument("--disable_tqdm", action="store_true", help="no progress bar")
