"""``elmo embed --output_dir DIR``: a dataset (the Hub, a ``datasets`` folder, or local files) to Parquet shards.

The flags that choose the input and the folder, and the run: load the split with ``datasets``, check it before the
model loads, then ``modeling_elmo.inference.parquet_shards.write_shards`` (the shard plan, the writing, the resume,
the metadata and the refusals live there). Under ``torchrun`` or ``accelerate launch`` each process writes its own
shards (``RANK``/``WORLD_SIZE``) and talks to no other.
"""

from __future__ import annotations

import argparse
import glob
import importlib.util
import json
import os
import re
import sys

from elmo_flags.embed import DATASET_FLAGS

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

# A split, optionally sliced as `datasets` slices one: train, validation, train[:1000], train[10%:20%].
SPLIT = re.compile(r"\w+(\.\w+)*(\[[^\[\]]*\])?")


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
    if not SPLIT.fullmatch(args.split):
        raise UsageError(
            f"--split {args.split!r}: give a split's name, optionally sliced (train, validation, train[:1000], "
            "train[10%:20%])"
        )
    for flag in ("column", "words_column"):
        value = getattr(args, flag)
        if value is not None and not value.strip():
            raise UsageError(f"--{flag} must name the new column, got {value!r}")


def _glob_regex(pattern: str) -> re.Pattern:
    """The paths a glob pattern of `datasets`' data files matches: ``*`` within a folder, ``**`` across folders."""
    parts, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            parts.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            parts.append(".*")
            i += 2
        elif pattern[i] in "*?":
            parts.append("[^/]*" if pattern[i] == "*" else "[^/]")
            i += 1
        elif pattern[i] == "[" and "]" in pattern[i + 1 :]:
            end = pattern.index("]", i + 1)
            parts.append("[" + re.escape(pattern[i + 1 : end]).replace("\\-", "-") + "]")
            i = end + 1
        else:
            parts.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(parts))


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def check_layout(args: argparse.Namespace) -> None:
    """[`CliError`] for an output folder that the input reads: inside the input folder, holding an input file, or
    matched by a data files pattern. A rerun would read the shards as input rows."""
    if not args.output_dir:
        return
    out = os.path.realpath(args.output_dir)
    clash = None
    if args.dataset_name is not None and os.path.isdir(args.dataset_name):
        if _inside(out, os.path.realpath(args.dataset_name)):
            clash = f"inside the input folder --dataset_name {args.dataset_name}"
    shard = os.path.join(out, "train-00000-of-00001.parquet")
    for pattern in [args.train_file] if args.train_file is not None else list(args.data_files or []):
        if any(_inside(os.path.realpath(p), out) for p in glob.glob(pattern, recursive=True)):
            clash = f"where the input {pattern} is"
        elif any(ch in pattern for ch in "*?[") and _glob_regex(os.path.realpath(pattern)).fullmatch(shard):
            clash = f"where the input pattern {pattern} would find the shards"
    if clash is not None:
        raise CliError(
            f"--output_dir {args.output_dir} is {clash}: the next run would read the shards as input; choose an "
            "output folder outside the input"
        )


def _slice(dataset, split: str, what: str):
    """The rows of ``dataset`` (one split) that ``split``'s slice names (``train[:100]``): as `datasets` slices."""
    import datasets

    from ..inference.parquet_shards import split_name

    if "[" not in split:
        return dataset
    try:
        (instruction,) = datasets.ReadInstruction.from_spec(split).to_absolute({split_name(split): len(dataset)})
    except (ValueError, AssertionError) as err:
        raise CliError(f"{what}: cannot take --split {split}: {err}") from err
    return dataset.select(range(instruction.from_, instruction.to))


def _load_saved(folder: str, split: str):
    """A folder of ``save_to_disk``: its ``Dataset`` (read as ``split``), or the split of its ``DatasetDict``,
    sliced as ``split`` says. [`CliError`] for a missing split, a dataset of no rows, or a folder that cannot be
    read."""
    import datasets

    from ..inference.parquet_shards import split_name

    what = f"--dataset_name {folder}"
    name = split_name(split)
    try:
        if os.path.exists(os.path.join(folder, "dataset_dict.json")):
            with open(os.path.join(folder, "dataset_dict.json"), encoding="utf-8") as f:
                splits = json.load(f)["splits"]
            if name not in splits:
                raise CliError(f"{what} has no split {name!r}: its splits are {', '.join(splits)} (--split)")
            folder = os.path.join(folder, name)
        with open(os.path.join(folder, "state.json"), encoding="utf-8") as f:
            if not json.load(f).get("_data_files"):  # `datasets` cannot load a saved dataset of no rows
                raise CliError(f"{what} (split {name}): the dataset has no rows: nothing to embed")
        loaded = datasets.load_from_disk(folder)
    except (OSError, ValueError, KeyError, TypeError, IndexError) as err:
        raise CliError(f"{what}: cannot load the saved dataset ({err})") from err
    return _slice(loaded, split, what)


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
    if args.dataset_name is not None:
        source = {"dataset_name": args.dataset_name, "dataset_config_name": args.dataset_config_name}
        source["split"] = args.split
        saved = os.path.isdir(args.dataset_name) and any(
            os.path.exists(os.path.join(args.dataset_name, name)) for name in ("state.json", "dataset_dict.json")
        )
        if saved:
            return _load_saved(args.dataset_name, args.split), source
        return _load(
            args.dataset_name, source, args.split, name=args.dataset_config_name, cache_dir=args.cache_dir
        ), source
    files = [args.train_file] if args.train_file is not None else list(args.data_files)
    for pattern in files:
        if not any(ch in pattern for ch in "*?[") and not os.path.isfile(pattern):
            what = "is a folder (give its files, or --dataset_name FOLDER)" if os.path.isdir(pattern) else "not found"
            raise CliError(f"input file {pattern} {what}")
    source = {"data_files": [os.path.abspath(f) for f in files], "split": args.split}
    builder = _builder(files)
    tabs = {"sep": "\t"} if all(f.removesuffix(".gz").lower().endswith(".tsv") for f in files) else {}
    from ..inference.parquet_shards import split_name

    files_of_split = {split_name(args.split): files}  # the files are the split --split names (sliced as it says)
    return _load(builder, source, args.split, data_files=files_of_split, cache_dir=args.cache_dir, **tabs), source


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
    from ..inference.parquet_shards import ShardFolderError, check_folder, process_rank_and_world, write_shards

    check_flags(args)
    check_layout(args)
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
    try:
        check_folder(args.output_dir)  # a folder of the user's files, a dangling link...: before anything loads
    except ShardFolderError as err:
        raise CliError(str(err)) from err
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
        except DatasetInputError as err:  # found as the rows are read (a None value)
            raise CliError(f"{_describe(source)}: {err}") from err
        except ValueError as err:  # ShardFolderError: the folder
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
            f'datasets.load_dataset("{args.output_dir}") (it checks the files and rows against the card)',
            file=sys.stderr,
        )
    elif world > 1:
        print(f"{prefix}done; the other processes are still writing their shards", file=sys.stderr)
    return 0


def _describe(source: dict) -> str:
    if "dataset_name" in source:
        return f"--dataset_name {source['dataset_name']} (split {source['split']})"
    return ", ".join(source["data_files"])
