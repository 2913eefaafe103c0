"""``elmo convert``'s flags (the conversion: ``modeling_elmo/commands/convert.py``)."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = "Convert original ELMo weights (options.json + HDF5) to a Hugging Face model folder."
    parser.add_argument("--options_file", help="the model's options.json")
    parser.add_argument("--weight_file", help="the model's HDF5 weights")
    parser.add_argument(
        "--manylangs_dir",
        help="instead: an ELMoForManyLangs model folder (char.dic, word.dic, encoder.pkl, token_embedder.pkl, "
        "config.json), converted with its own characters and word embedding",
    )
    parser.add_argument("--output_dir", required=True, help="folder to write (must not exist or be empty)")
    parser.add_argument("--vocab_file", help="optional bilm-tf vocabulary file, for word ids (LM labels)")
    parser.add_argument(
        "--softmax_weight_file",
        help="the released LM softmax (HDF5 softmax/W, softmax/b; needs --vocab_file): writes an ElmoForPreTraining "
        "folder that `elmo score` and the elmo-fill-mask pipeline use",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace an existing output_dir")
    parser.add_argument("--disable_tqdm", action="store_true", help="no progress bars (transformers' flag name)")
    parser.add_argument("--no_progress", action="store_true", help=argparse.SUPPRESS)  # the old name
    parser.add_argument(
        "--push_to_hub",
        metavar="REPO",
        help="then publish the folder to this Hub model repository (owner/name; created if needed; your saved "
        "token or HF_TOKEN)",
    )
    parser.add_argument("--private", action="store_true", help="with --push_to_hub: create the repository private")
    parser.add_argument(
        "--remote_code",
        action="store_true",
        help="also write the model's code files and auto_map, so that the folder loads without this package "
        "(trust_remote_code=True); default: a plain folder (config, weights, tokenizer, card)",
    )
