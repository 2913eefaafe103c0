"""``elmo embed --output_dir DIR``: a dataset (the Hub, a ``datasets`` folder, or local files) to Parquet shards.

The flags that choose the input and the folder, and the run: load the split with ``datasets``, check it before the
model loads, then ``modeling_elmo.inference.parquet_shards.write_shards`` (the shard plan, the writing, the resume,
the metadata and the refusals live there). Under ``torchrun`` or ``accelerate launch`` each process writes its own
shards (``RANK``/``WORLD_SIZE``) and talks to no other.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys

from .common import (
    CliError,
    UsageError,
    check_device_name,
    check_model_name,
    check_precision_flags,
    describe_model,
    load_model,
    resolve_device,
    resolve_precision,
    signals_unwind,
)

# The `datasets` builder of a local file, by its extension.
BUILDERS = {
    ".txt": "text",
    ".text": "text",
    ".csv": "csv",
    ".tsv": "csv",
    ".json": "json",
    ".jsonl": "json",
    ".parquet": "parquet",
    ".arrow": "arrow",
}

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
folder that differs is refused. DIR/README.md (written when all shards are there) holds the dataset_info:
datasets.load_dataset("parquet", data_dir=DIR) or load_dataset(DIR) reads the folder. A shard is written as
.NAME.tmp and renamed when complete: the same command again skips the complete shards and redoes the others.
Several processes or machines: torchrun --nproc_per_node N -m elmo_cli embed --dataset_name ... --output_dir DIR
(or accelerate launch): process RANK writes the shards i with i % WORLD_SIZE == RANK; nothing is merged."""


def add_dataset_arguments(group) -> None:
    """The flags of the dataset input and the Parquet output (``--output_dir`` turns this path on)."""
    group.add_argument(
        "--dataset_name", metavar="NAME", help="a Hub dataset id, or a folder saved by Dataset.save_to_disk"
    )
    group.add_argument("--dataset_config_name", help="the Hub dataset's configuration (e.g. wikitext-2-raw-v1)")
    group.add_argument("--split", default="train", help="the split to embed (default: %(default)s; e.g. train[:1%%])")
    group.add_argument("--train_file", metavar="FILE", help="a local .txt, .csv, .tsv, .json, .jsonl or .parquet file")
    group.add_argument("--data_files", nargs="+", metavar="FILE", help="several local files (or globs), one kind")
    group.add_argument("--cache_dir", help="where datasets keeps downloads and prepared splits (default: its own)")
    columns = group.add_mutually_exclusive_group()
    columns.add_argument("--text_column", help="the column of raw strings (default: text, if there is one)")
    columns.add_argument("--tokens_column", help="or the column of lists of words, embedded as they are")
    group.add_argument("--output_dir", metavar="DIR", help="the folder of Parquet shards to write (or to finish)")
    group.add_argument("--shard_size", type=int, default=4096, help="rows per shard (default: %(default)s)")
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
        type=int,
        default=4096,
        help="rows sorted by length and cached together, from each shard's start (default: %(default)s)",
    )


def wants_dataset(args: argparse.Namespace) -> bool:
    """Whether the flags ask for the dataset path (any of its input or output flags)."""
    return args.output_dir is not None or any(getattr(args, name, None) is not None for name in DATASET_FLAGS)


def check_flags(args: argparse.Namespace) -> None:
    """[`UsageError`] for flags that do not go together on the dataset path."""
    sources = [f"--{n}" for n in ("dataset_name", "train_file", "data_files") if getattr(args, n) is not None]
    if args.output_dir is None:
        given = [f"--{n}" for n in DATASET_FLAGS if getattr(args, n) is not None]
        raise UsageError(f"{given[0]} is for Parquet shards: give the folder, --output_dir DIR")
    if len(sources) != 1:
        raise UsageError(
            "--output_dir needs one input: --dataset_name NAME, --train_file FILE or --data_files FILE..."
            + (f" (got {' and '.join(sources)})" if sources else "")
        )
    if args.input != "-":
        raise UsageError(f"with --output_dir, give the input as --train_file {args.input}, not as a positional file")
    unused = [
        flag
        for flag, given in (
            ("-o/--output", args.output is not None or args.output_file is not None),
            ("--tokenized", args.tokenized),
            ("--raw", args.raw),
            ("--forget_sentences", args.forget_sentences),
            ("--overwrite", args.overwrite),
        )
        if given
    ]
    if unused:
        raise UsageError(
            f"{', '.join(unused)}: for the HDF5 file only, not with --output_dir (a rerun goes on from the complete "
            "shards; delete the folder to start again; pre-tokenized rows: --tokens_column)"
        )
    for name in ("shard_size", "chunk_size", "batch_size", "max_batch_words"):
        if getattr(args, name) < 1:
            raise UsageError(f"--{name} must be positive, got {getattr(args, name)}")
    if args.dataset_name is None and args.dataset_config_name is not None:
        raise UsageError("--dataset_config_name goes with --dataset_name")


def _builder(files: list[str]) -> str:
    kinds = {os.path.splitext(f.removesuffix(".gz"))[1].lower() for f in files}
    builders = {BUILDERS.get(kind) for kind in kinds}
    if None in builders or len(builders) != 1:
        raise CliError(
            f"cannot read {', '.join(files)}: give files of one kind among {', '.join(sorted(BUILDERS))} "
            "(or a Hub dataset, --dataset_name)"
        )
    return builders.pop()


def load_input(args: argparse.Namespace):
    """The split to embed, as a ``datasets.Dataset``, and the description of its source for the metadata."""
    import datasets

    if args.dataset_name is not None:
        source = {"dataset_name": args.dataset_name, "dataset_config_name": args.dataset_config_name}
        source["split"] = args.split
        saved = os.path.isdir(args.dataset_name) and any(
            os.path.exists(os.path.join(args.dataset_name, name)) for name in ("state.json", "dataset_dict.json")
        )
        if saved:
            try:
                loaded = datasets.load_from_disk(args.dataset_name)
            except (OSError, ValueError) as err:
                raise CliError(f"--dataset_name {args.dataset_name}: cannot load the saved dataset ({err})") from err
            if isinstance(loaded, datasets.DatasetDict):
                if args.split not in loaded:
                    raise CliError(
                        f"--dataset_name {args.dataset_name} has no split {args.split!r}: its splits are "
                        f"{', '.join(loaded)} (--split)"
                    )
                loaded = loaded[args.split]
            return loaded, source
        return _load(
            args.dataset_name, source, args.split, name=args.dataset_config_name, cache_dir=args.cache_dir
        ), source
    files = [args.train_file] if args.train_file is not None else list(args.data_files)
    for pattern in files:
        if not any(ch in pattern for ch in "*?[") and not os.path.isfile(pattern):
            what = "is a folder (give its files, or --dataset_name FOLDER)" if os.path.isdir(pattern) else "not found"
            raise CliError(f"input file {pattern} {what}")
    source = {"data_files": [os.path.abspath(f) for f in files]}
    builder = _builder(files)
    tabs = {"sep": "\t"} if all(f.removesuffix(".gz").lower().endswith(".tsv") for f in files) else {}
    return _load(builder, source, "train", data_files=files, cache_dir=args.cache_dir, **tabs), source


def _load(path: str, source: dict, split: str, **kwargs):
    import datasets
    import datasets.arrow_writer

    what = source.get("dataset_name") or ", ".join(source.get("data_files", []))
    try:
        return datasets.load_dataset(path, split=split, **kwargs)
    except ValueError as err:  # e.g. an unknown split, a missing config, or nothing at all
        if "corresponds to no data" in str(err):  # datasets' words for an empty file or split
            raise CliError(f"{what}: the dataset has no rows: nothing to embed ({err})") from err
        raise CliError(f"cannot load {what}: {err}") from err
    except datasets.exceptions.DatasetGenerationError as err:  # reading the files failed
        cause = err.__cause__
        if isinstance(cause, datasets.arrow_writer.SchemaInferenceError):  # not one row to learn the columns from
            raise CliError(f"{what}: the dataset has no rows: nothing to embed") from err
        raise CliError(f"cannot read {what}: {cause or err}") from err
    except (OSError, datasets.exceptions.DatasetNotFoundError) as err:
        hint = " (offline? HF_HUB_OFFLINE=1 reads only the local cache)" if "dataset_name" in source else ""
        raise CliError(f"cannot load {what}: {err}{hint}") from err


def _rate(count: float, seconds: float, unit: str) -> str:
    return f"{count / seconds:,.0f} {unit}/s" if seconds > 0 else f"- {unit}/s"


def run(args: argparse.Namespace) -> int:
    """``elmo embed --output_dir DIR``. Errors: [`UsageError`] (flags), [`CliError`] (input, folder, model),
    ``OSError`` (a failed write: ``ShardWriteError``)."""
    from ..inference.embed_corpus import DEPRECATED_OUTPUTS
    from ..inference.embed_dataset import DatasetInputError, check_input
    from ..inference.parquet_shards import ShardFolderError, process_rank_and_world, write_shards

    check_flags(args)
    if importlib.util.find_spec("datasets") is None:
        raise CliError(
            '`elmo embed --output_dir` needs datasets (the [train] extra): pip install "modeling-elmo[train]" '
            '(from a checkout: pip install -e ".[train]")'
        )
    try:
        rank, world = process_rank_and_world()
    except ValueError as err:
        raise CliError(str(err)) from err
    local_rank = int(os.environ.get("LOCAL_RANK") or rank)
    prefix = f"[process {rank} of {world}] " if world > 1 else ""
    if args.output_type in DEPRECATED_OUTPUTS:
        new = DEPRECATED_OUTPUTS[args.output_type]
        if rank == 0:
            print(f"elmo embed: note: --output_type {args.output_type} is deprecated; use {new}", file=sys.stderr)
        args.output_type = new
    check_device_name(args.device)
    check_model_name(args.model)
    check_precision_flags(args)
    if args.disable_tqdm:
        import datasets

        datasets.disable_progress_bars()  # its "Generating train split" bars too
    dataset, source = load_input(args)  # before the model loads: a wrong input fails in seconds
    try:
        check_input(dataset, args.text_column, args.tokens_column, args.column, args.words_column)
    except DatasetInputError as err:
        raise CliError(f"{_describe(source)}: {err}") from err
    from tqdm.auto import tqdm

    def log(line: str) -> None:
        tqdm.write(prefix + line, file=sys.stderr)

    with signals_unwind():
        device = resolve_device(args.device, local_rank)
        resolve_precision(args, device, say=rank == 0)
        tokenizer, model = load_model(args.model, device, args.dtype, args.quantize)
        if args.output_type not in ("all", "top", "average") and not model.config.num_output_representations:
            raise CliError(f"--output_type {args.output_type} needs a scalar mix; this model has none")
        try:
            result = write_shards(
                model, tokenizer, dataset, args.output_dir, text_column=args.text_column,
                tokens_column=args.tokens_column, output_type=args.output_type, vector_dtype=args.vector_dtype,
                column=args.column, words_column=args.words_column, split=args.split, shard_size=args.shard_size,
                batch_size=args.batch_size, max_batch_words=args.max_batch_words, chunk_size=args.chunk_size,
                rank=rank, world=world, progress=not args.disable_tqdm and local_rank == 0,
                model_name=describe_model(args.model), precision=args.quantize or args.dtype, source=source, log=log,
            )  # fmt: skip
        except (DatasetInputError, ShardFolderError) as err:
            raise CliError(str(err)) from err
    skipped = f"; skipped {len(result.skipped)} complete shard{'s' * (len(result.skipped) != 1)}"
    print(
        f"{prefix}Wrote {result.sentences} sentences ({result.words} words, {args.output_type}) into "
        f"{len(result.written)} shard{'s' * (len(result.written) != 1)} of {args.output_dir} in "
        f"{result.seconds:.1f} s ({_rate(result.sentences, result.seconds, 'sentences')}, "
        f"{_rate(result.words, result.seconds, 'words')}){skipped if result.skipped else ''}",
        file=sys.stderr,
    )
    if result.complete:
        print(
            f"{prefix}{args.output_dir} is complete: {len(dataset)} rows; read it with "
            f'datasets.load_dataset("parquet", data_dir="{args.output_dir}")',
            file=sys.stderr,
        )
    elif world > 1:
        print(f"{prefix}done; the other processes are still writing their shards", file=sys.stderr)
    return 0


def _describe(source: dict) -> str:
    if "dataset_name" in source:
        return f"--dataset_name {source['dataset_name']} (split {source['split']})"
    return ", ".join(source["data_files"])
