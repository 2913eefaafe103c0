"""``elmo embed``'s flags (the embedding: ``modeling_elmo/commands/embed.py``; with ``--output_dir``, a dataset to
Parquet shards: ``modeling_elmo/commands/embed_parquet.py``)."""

from __future__ import annotations

import argparse
import sys

from . import add_precision_argument, positive_int

# `--output_type`: AllenNLP's three (same meanings as `allennlp elmo --all/--top/--average`), then this package's
# two. Kept equal to modeling_elmo.inference.embed_corpus.OUTPUTS (not imported: it imports torch).
OUTPUT_TYPES = ("all", "top", "average", "elmo", "sentence_mean")
# The old names, accepted with a note for one release.
DEPRECATED_OUTPUT_TYPES = {"layers": "all", "mean": "sentence_mean"}
DEFAULT_EMBED_OUTPUT = "elmo_embeddings.hdf5"

DESCRIPTION = """Embed text into an HDF5 file of ELMo vectors, in the layout of AllenNLP's `allennlp elmo`.

Input: one sentence per line (line i is sentence i; an empty line is a sentence of zero words; an empty file
gives a file of zero sentences, exit 0, with a warning on stderr), UTF-8 (checked before the model loads). Each
line is split into words by the model's tokenizer (punctuation split off, as the released models were trained), or
with --tokenized on whitespace only, keeping your tokens (`I do n't know .` stays 5 words), as AllenNLP and
flair read lines. With --raw: free text, paragraphs (separated by blank lines) split into sentences at . ! ?
followed by a capitalised word (simple rules; abbreviations such as Mr. and e.g. do not end a sentence).

Output (HDF5), beside AllenNLP's `allennlp elmo` file, point by point:
  dataset str(i), float32, for sentence i (0-based)  same names, same dtype
    all:     (L + 1, words, 2P), every biLM layer     = AllenNLP --all (the default here; AllenNLP had none)
    top:     (words, 2P), the last LSTM layer         = AllenNLP --top
    average: (words, 2P), mean of the L + 1 layers    = AllenNLP --average (mean over layers, per word)
    elmo:    (words, 2P), the model's scalar mix      (not in AllenNLP; untrained mix: equal weights)
    sentence_mean: (2P,), mean of the ELMo vectors over the words, zeros for no words  (not in AllenNLP)
  dataset sentence_to_index, shape (1,), a string    same: json.loads(f["sentence_to_index"][0]) gives
    holding the JSON {sentence: "i"}                 {stripped line: str(i)}; a repeated line maps to its
                                                     last index; --forget_sentences leaves it out (as
                                                     AllenNLP's --forget-sentences)
  attribute "words" of each sentence's dataset:      not in AllenNLP (there, the words are line.split())
    its words joined by single spaces
  file attributes output_type, model, num_layers,    not in AllenNLP
    dim, num_sentences, input_format
  empty lines: sentences of zero words, (L + 1, 0, 2P)  AllenNLP refused a file with empty lines
AllenNLP's `allennlp elmo IN OUT --top` is `elmo embed IN OUT --tokenized --output_type top` (--all, --top and
--average are accepted too); its --use-sentence-keys is not supported. The old names --output_type layers and
mean still work (= all, sentence_mean), with a note.

Sentences are batched by length (--batch_size, --max_batch_words). The file is written under a temporary name
(.OUT.embed-partial-PID.tmp) and renamed when complete: a failed, interrupted (Ctrl-C) or terminated (SIGTERM)
run leaves no file, and a run removes the partial files that killed runs (SIGKILL) left for the same output. A
full disk stops the run at the first failed write. A run holds a lock on OUT (.OUT.embed.lock) until it ends: a
second run to the same OUT is refused, with or without --overwrite, and without --overwrite a file that appears
at OUT during the run is never replaced. OUT may not be the input file. sentence_to_index holds every distinct
sentence in memory until the end; for corpora larger than memory, pass --forget_sentences.
Several processes: accelerate launch --multi_gpu --num_processes N -m elmo_cli embed FILE -o OUT
(also on CPU; or torchrun --nproc_per_node N -m elmo_cli embed ...). Each process embeds every
N-th sentence into a part file; process 0 merges them in input order and deletes the parts."""


# ---------------------------------------------------------------------------------------------
# Arguments
# ---------------------------------------------------------------------------------------------


class _HiddenAlias(argparse.Action):
    """A hidden spelling of another flag: stores into that flag's destination and prints a note on stderr."""

    def __init__(self, option_strings, dest, new: str, why: str, shown: str, **kwargs):
        super().__init__(option_strings, dest, **kwargs)
        self.new, self.why, self.shown = new, why, shown

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"{parser.prog}: note: {option_string} is {self.why}; use {self.shown}", file=sys.stderr)
        setattr(namespace, self.dest, self.const if self.nargs == 0 else values)


def _hidden_alias(
    parser,
    old: str,
    new: str,
    const=None,
    why: str = "deprecated and will be removed in the next release",
    shown: str | None = None,
    **kwargs,
) -> None:
    """Accept ``old`` as a spelling of ``new`` without showing it in ``--help`` (a switch when ``const`` is given)."""
    dest = new.lstrip("-").replace("-", "_")
    extra = {"nargs": 0, "const": const} if const is not None else {}
    parser.add_argument(
        old,
        dest=dest,
        action=_HiddenAlias,
        new=new,
        why=why,
        shown=shown or new,
        default=argparse.SUPPRESS,
        help=argparse.SUPPRESS,
        **extra,
        **kwargs,
    )


def _cuda_device(value: str) -> str:
    """AllenNLP's ``--cuda-device N`` as a ``--device``: -1 is the CPU."""
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a GPU number (-1 for the CPU), got {value!r}") from None
    return "cpu" if number < 0 else f"cuda:{number}"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``elmo embed``'s flags, one group each for the input, the output, the model and the batching: a new flag goes
    into its group's function below (or a new group of its own), and shows under that title in ``--help``."""
    parser.description = DESCRIPTION
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    add_input_arguments(parser.add_argument_group("input"))
    add_output_arguments(parser.add_argument_group("output"))
    add_model_arguments(parser.add_argument_group("model"))
    add_batching_arguments(parser.add_argument_group("batching"))
    add_dataset_arguments(parser.add_argument_group("dataset input, Parquet shards output (see the end)"))
    parser.epilog = EPILOG
    # The old dashed spellings (and AllenNLP's): hidden, each with a note.
    _hidden_alias(parser, "--output-type", "--output_type", choices=OUTPUT_TYPES + tuple(DEPRECATED_OUTPUT_TYPES))
    _hidden_alias(parser, "--batch-size", "--batch_size", type=positive_int)
    _hidden_alias(parser, "--max-batch-words", "--max_batch_words", type=positive_int)
    _hidden_alias(parser, "--no-progress", "--disable_tqdm", const=True)
    _hidden_alias(parser, "--forget-sentences", "--forget_sentences", const=True, why="AllenNLP's spelling")
    _hidden_alias(
        parser, "--cuda-device", "--device", type=_cuda_device, why="AllenNLP's spelling", shown="--device cuda:N"
    )


def add_input_arguments(group) -> None:
    group.add_argument("input", nargs="?", default="-", help="UTF-8 text file; - or nothing reads stdin")
    lines = group.add_mutually_exclusive_group()
    lines.add_argument("--tokenized", action="store_true", help="lines are tokenized: split on whitespace only")
    lines.add_argument("--raw", action="store_true", help="input is free text to split into sentences")


def add_output_arguments(group) -> None:
    group.add_argument(
        "output_file",
        nargs="?",
        metavar="output",
        help=f"HDF5 file to write, as AllenNLP's second argument (or -o; default: {DEFAULT_EMBED_OUTPUT})",
    )
    group.add_argument("-o", "--output", help="HDF5 file to write (the same as the second argument)")
    group.add_argument(
        "--output_type",
        choices=OUTPUT_TYPES + tuple(DEPRECATED_OUTPUT_TYPES),
        metavar="{" + ",".join(OUTPUT_TYPES) + "}",
        default="all",
        help="what to store per sentence (default: all; see the table above)",
    )
    for name in ("all", "top", "average"):  # AllenNLP's switches for the same outputs
        group.add_argument(f"--{name}", dest="output_type", action="store_const", const=name, help=argparse.SUPPRESS)
    group.add_argument("--overwrite", action="store_true", help="replace an existing output file")
    group.add_argument(
        "--forget_sentences", action="store_true", help="write no sentence_to_index (AllenNLP's --forget-sentences)"
    )


def add_model_arguments(group) -> None:
    group.add_argument("--model", help="model folder or Hub id (default: the bundled demo model)")
    group.add_argument("--device", default="auto", help="auto (CUDA if available), cpu, cuda, cuda:1, mps")
    group.add_argument(
        "--dtype",
        choices=["float32", "bfloat16", "float16"],
        help="precision of the weights and products; the cell state stays float32, the file float32 "
        "(bfloat16: faster on CPUs with AVX-512 BF16 or AMX; default: float32)",
    )
    group.add_argument(
        "--quantize",
        choices=["int8"],
        help="int8 products (weights per channel, activations per call) on CPU, for a float32 model",
    )
    add_precision_argument(group)


def add_batching_arguments(group) -> None:
    group.add_argument(
        "--batch_size", type=positive_int, default=64, help="most sentences per batch (default: %(default)s)"
    )
    group.add_argument(
        "--max_batch_words",
        type=positive_int,
        default=4096,
        help="most padded word slots per batch (default: %(default)s)",
    )
    # A switch (the training commands' --disable_tqdm also takes a value; here that would swallow the input file).
    group.add_argument("--disable_tqdm", action="store_true", help="no progress bar (as in the training commands)")


# The flags of the dataset path only (without a default): any of them turns it on (and then needs --output_dir).
DATASET_FLAGS = ("dataset_name", "train_file", "data_files", "dataset_config_name", "text_column", "tokens_column",
                 "words_column", "cache_dir")  # fmt: skip

EPILOG = """Dataset input, Parquet output (--output_dir): the split --split (default train) of --dataset_name (a Hub
dataset, with --dataset_config_name; or a folder saved by Dataset.save_to_disk), or of local files (--train_file
FILE or --data_files FILE...: .txt (one row per line), .csv, .tsv, .json, .jsonl, .parquet), embedded row by row
from --text_column (raw strings, split by the model's tokenizer as above) or --tokens_column (lists of words), into
DIR/SPLIT-00000-of-0000N.parquet, --shard_size rows each: the input's columns plus --column (default elmo;
float32, or --vector_dtype float16; output_type all is stored words first, (words, L + 1, 2P)). DIR/elmo_embed.json
records the model (config, weights and tokenizer digests), the output type and the shard plan; a run into a
folder that differs is refused, and so is a folder of other files (nothing the command did not write is ever
replaced) or one inside the input. DIR/README.md, the dataset card, names every shard file and, once all are
there, holds the dataset_info (the number of rows): datasets.load_dataset(DIR) reads the folder and checks both (an
unfinished folder, or one that lost a shard, is an error, not fewer rows; load_dataset("parquet", data_dir=DIR)
reads whatever shards are there). A shard is written as .NAME.tmp and renamed to the hidden .NAME when complete,
then to NAME once all are and the card is complete: the same command again skips the complete shards and redoes
the others, and keeps the card as it is (edit it freely).
Several processes or machines: torchrun --nproc_per_node N -m elmo_cli embed --dataset_name ... --output_dir DIR
(or accelerate launch): process RANK writes the shards i with i % WORLD_SIZE == RANK; nothing is merged."""


def add_dataset_arguments(group) -> None:
    """The flags of the dataset input and the Parquet output (``--output_dir`` turns this path on)."""
    group.add_argument(
        "--dataset_name", metavar="NAME", help="a Hub dataset id, or a folder saved by Dataset.save_to_disk"
    )
    group.add_argument("--dataset_config_name", help="the Hub dataset's configuration (e.g. wikitext-2-raw-v1)")
    group.add_argument(
        "--split",
        default="train",
        help="the split to embed, optionally sliced (default: %(default)s; e.g. train[:1%%]); local files are read "
        "as this split",
    )
    group.add_argument("--train_file", metavar="FILE", help="a local .txt, .csv, .tsv, .json, .jsonl or .parquet file")
    group.add_argument("--data_files", nargs="+", metavar="FILE", help="several local files (or globs), one kind")
    group.add_argument("--cache_dir", help="where datasets keeps downloads and prepared splits (default: its own)")
    columns = group.add_mutually_exclusive_group()
    columns.add_argument("--text_column", help="the column of raw strings (default: text, if there is one)")
    columns.add_argument("--tokens_column", help="or the column of lists of words, embedded as they are")
    group.add_argument("--output_dir", metavar="DIR", help="the folder of Parquet shards to write (or to finish)")
    group.add_argument("--shard_size", type=positive_int, default=4096, help="rows per shard (default: %(default)s)")
    group.add_argument("--column", default="elmo", help="the name of the vectors' column (default: %(default)s)")
    group.add_argument(
        "--vector_dtype",
        choices=["float32", "float16"],
        default="float32",
        help="how the vectors are stored (float16: half the disk; default: %(default)s)",
    )
    group.add_argument("--words_column", help="with --text_column: also store each row's words under this name")
    group.add_argument(
        "--chunk_size",
        type=positive_int,
        default=4096,
        help="rows sorted by length and cached together, from each shard's start (default: %(default)s)",
    )
