"""Embed a dataset into a folder of Parquet shards: resumable, written by one process or many, with nothing merged.

    from modeling_elmo.inference.parquet_shards import write_shards

    run = write_shards(model, tokenizer, dataset, "wiki-elmo", text_column="text", output_type="elmo")
    # then: datasets.load_dataset("parquet", data_dir="wiki-elmo")["train"]

The folder, for a split ``train`` of 10,000 rows in shards of 4,096:

- ``train-00000-of-00003.parquet``, ``train-00001-of-00003.parquet``, ``train-00002-of-00003.parquet``: the rows
  ``[0, 4096)``, ``[4096, 8192)``, ``[8192, 10000)``, with the input's columns and the ELMo column (the features of
  [`embed_dataset`], kept in each file's schema, where `datasets` reads them). Each file's schema also holds
  ``elmo_embed``: its shard number, its rows and a SHA-256 of its input texts.
- ``elmo_embed.json``: what the folder holds and must keep holding: the model's identity ([`model_identity`]:
  config, weights and tokenizer digests), the output type, the vectors' dtype, the column names, the features and
  the shard plan (rows, shard size, number of shards). A run into a folder whose file differs in any of these is
  refused ([`ShardFolderError`], naming each difference), so that one folder never mixes two models or outputs.
- ``README.md``: a dataset card whose YAML holds ``dataset_info`` (features, number of rows) and ``configs`` (the
  files of the split), written once every shard is there: ``load_dataset(FOLDER)`` reads it.

A shard is written under the hidden name ``.NAME.tmp`` and renamed into place (``os.replace``) when complete, so
a shard that exists is complete. A rerun skips the shards that exist (after checking that their rows and input
are the same) and rewrites the others. A failed write (a full disk) removes the shard's temporary file and leaves
the complete shards as they are.

Several processes (``torchrun``, ``accelerate launch``, on one machine or many): process ``RANK`` of
``WORLD_SIZE`` takes the shards ``i`` with ``i % WORLD_SIZE == RANK``; no process waits for or talks to another,
and no file is merged. While it writes a shard a process holds an exclusive ``flock`` on its temporary file, so two
processes (say, two runs started by mistake) never write one shard: the second one stops with an error. The card
is written by the process that finds every shard complete when its own are done. Each shard's rows are embedded in
chunks counted from the shard's first row, so the vectors do not depend on the number of processes; with the
shard size a multiple of ``chunk_size`` (the defaults) they are those of `elmo embed`'s HDF5 file, bit for bit.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from transformers.utils import logging

from .embed_dataset import BatchEmbedder, DatasetInputError, check_input, model_identity
from .hdf5_file import EmbeddingFileError, remove_file

logger = logging.get_logger(__name__)

METADATA_NAME = "elmo_embed.json"
CARD_NAME = "README.md"
FORMAT = "modeling_elmo parquet shards"
FORMAT_VERSION = 1
# The shard's own entry in its Parquet schema's key-value metadata (beside `datasets`' "huggingface").
SHARD_KEY = b"elmo_embed"
# Row groups of at most this many bytes of vectors (readers load a row group at a time).
ROW_GROUP_BYTES = 64 << 20


class ShardFolderError(ValueError):
    """The output folder holds another run's shards (another model, output type or plan), files that are not
    shards, or a shard that another process is writing now."""


class ShardWriteError(EmbeddingFileError):
    """Writing a shard failed (a full disk, a quota, a file size limit); its temporary file was removed."""


@dataclass(frozen=True)
class ShardPlan:
    """Rows ``[i * shard_size, (i + 1) * shard_size)`` of a split of ``num_rows`` rows make shard ``i``."""

    split: str
    num_rows: int
    shard_size: int

    def __post_init__(self) -> None:
        if not re.fullmatch(r"\w+(\.\w+)*", self.split):
            raise ValueError(f"a split name is letters, digits and _ (split names of datasets), got {self.split!r}")
        if self.num_rows < 1:
            raise DatasetInputError("the dataset has no rows: nothing to embed")
        if not isinstance(self.shard_size, int) or self.shard_size < 1:
            raise ValueError(f"shard_size must be a positive integer, got {self.shard_size!r}")

    @property
    def num_shards(self) -> int:
        return math.ceil(self.num_rows / self.shard_size)

    def rows(self, index: int) -> range:
        return range(index * self.shard_size, min((index + 1) * self.shard_size, self.num_rows))

    def name(self, index: int) -> str:
        """The file name, in the Hub's pattern (`datasets` reads the split from it)."""
        return f"{self.split}-{index:05d}-of-{self.num_shards:05d}.parquet"

    def owned_by(self, rank: int, world: int) -> list[int]:
        """The shards process ``rank`` of ``world`` writes."""
        return list(range(rank, self.num_shards, world))

    def to_dict(self) -> dict:
        return {
            "split": self.split,
            "num_rows": self.num_rows,
            "shard_size": self.shard_size,
            "num_shards": self.num_shards,
        }


@dataclass
class ShardRun:
    """What one process did: the shards it wrote and skipped (complete already), the sentences and words it
    embedded, the seconds it took, and whether the folder is complete (every shard there, the card written)."""

    written: list[int] = field(default_factory=list)
    skipped: list[int] = field(default_factory=list)
    sentences: int = 0
    words: int = 0
    seconds: float = 0.0
    complete: bool = False


def process_rank_and_world(environ=None) -> tuple[int, int]:
    """``(RANK, WORLD_SIZE)`` as ``torchrun`` and ``accelerate launch`` set them; ``(0, 1)`` without."""
    environ = os.environ if environ is None else environ
    try:
        world = int(environ.get("WORLD_SIZE") or 1)
        rank = int(environ.get("RANK") or 0)
    except ValueError as err:
        raise ValueError(f"RANK and WORLD_SIZE must be integers: {err}") from None
    if world < 1 or not 0 <= rank < world:
        raise ValueError(f"RANK must be in [0, WORLD_SIZE): got RANK={rank}, WORLD_SIZE={world}")
    return rank, world


def split_name(split: str) -> str:
    """The split name for the file names: ``train[:10%]`` is ``train``."""
    match = re.match(r"\w+(\.\w+)*", split)
    if match is None:
        raise ValueError(f"cannot name shards after the split {split!r}: start it with a letter or digit")
    return match.group(0)


# --------------------------------------------------------------------------------------------------
# The folder's metadata: what it holds, checked at every run

# The entries of elmo_embed.json that two runs into one folder must share (the others describe, e.g. the source).
_MUST_MATCH = (
    ("format_version",),
    ("model", "model_type"),
    ("model", "config_sha256"),
    ("model", "weights_sha256"),
    ("model", "tokenizer_sha256"),
    ("model", "precision"),
    ("output_type",),
    ("vector_dtype",),
    ("column",),
    ("words_column",),
    ("input", "text_column"),
    ("input", "tokens_column"),
    ("shards", "split"),
    ("shards", "num_rows"),
    ("shards", "shard_size"),
    ("shards", "num_shards"),
    ("features",),
)


def _entry(metadata: dict, path: tuple[str, ...]):
    for key in path:
        metadata = metadata.get(key) if isinstance(metadata, dict) else None
    return metadata


def differences(old: dict, new: dict) -> list[str]:
    """The entries in which two runs' metadata differ, as ``name: X in the folder, Y in this run``."""
    found = []
    for path in _MUST_MATCH:
        before, now = _entry(old, path), _entry(new, path)
        if before != now:
            if path == ("features",):
                found.append("features (the input's columns and types, or the vectors' shape)")
            else:
                found.append(f"{'.'.join(path)}: {before!r} in the folder, {now!r} in this run")
    return found


def _write_atomically(path: str, text: str, replace: bool = True) -> bool:
    """Write ``text`` to ``path`` through a temporary file and a rename. ``replace=False``: never replace a file
    that exists (``os.link`` fails then); returns whether this call created ``path``."""
    folder, name = os.path.split(path)
    temp = os.path.join(folder, f".{name}.{os.getpid()}.tmp")
    try:
        with open(temp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        if replace:
            os.replace(temp, path)
            return True
        try:
            os.link(temp, path)
        except FileExistsError:
            return False
        return True
    except OSError as err:
        raise ShardWriteError(f"could not write {path}: {err.strerror or err} (errno {err.errno})") from err
    finally:
        remove_file(temp)


def open_folder(output_dir: str, metadata: dict) -> None:
    """Create ``output_dir`` with ``metadata`` as its ``elmo_embed.json``, or check that the one there agrees.

    Raises:
        ShardFolderError: the folder's file differs (each difference named), or the folder holds Parquet files
            but no ``elmo_embed.json``.
    """
    os.makedirs(output_dir, exist_ok=True)
    path = os.path.join(output_dir, METADATA_NAME)
    text = json.dumps(metadata, indent=2, sort_keys=True) + "\n"
    if not os.path.exists(path):
        strangers = sorted(n for n in os.listdir(output_dir) if n.endswith(".parquet") and not n.startswith("."))
        if strangers:
            raise ShardFolderError(
                f"{output_dir} holds Parquet files that `elmo embed` did not write ({', '.join(strangers[:3])}"
                f"{', ...' if len(strangers) > 3 else ''}) and no {METADATA_NAME}: write into a new or empty folder"
            )
        if _write_atomically(path, text, replace=False):
            return
        # Another process of this run created it first: it must agree like any earlier run's.
    try:
        with open(path, encoding="utf-8") as f:
            old = json.load(f)
    except (OSError, ValueError) as err:
        raise ShardFolderError(f"{path} cannot be read ({err}): delete the folder to start again") from err
    if old.get("format") != FORMAT:
        raise ShardFolderError(f"{path} was not written by `elmo embed` (no format {FORMAT!r}): use another folder")
    found = differences(old, json.loads(text))  # as JSON reads it back (tuples become lists)
    if found:
        raise ShardFolderError(
            f"{output_dir} holds shards of another run, which this one must not mix with: "
            + "; ".join(found)
            + ". Write into another folder, or delete this one to start again"
        )


def run_metadata(
    model,
    tokenizer,
    plan: ShardPlan,
    features,
    *,
    output_type: str,
    vector_dtype: str,
    column: str,
    words_column: str | None,
    text_column: str | None,
    tokens_column: str | None,
    chunk_size: int,
    batch_size: int,
    max_batch_words: int,
    model_name: str | None = None,
    precision: str | None = None,
    source: dict | None = None,
) -> dict:
    """The content of ``elmo_embed.json`` for this run (see the module's docstring)."""
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "model": {"name": model_name, "precision": precision, **model_identity(model, tokenizer)},
        "output_type": output_type,
        "vector_dtype": vector_dtype,
        "column": column,
        "words_column": words_column,
        "input": {"text_column": text_column, "tokens_column": tokens_column, "source": source or {}},
        "shards": plan.to_dict(),
        "batching": {"chunk_size": chunk_size, "batch_size": batch_size, "max_batch_words": max_batch_words},
        "features": features.to_dict(),
    }


# --------------------------------------------------------------------------------------------------
# One shard


def _part_digest(part, column: str) -> str:
    """SHA-256 of a column's values in ``part`` (a dataset; strings, or lists of strings), length-prefixed so that
    no two inputs collide."""
    digest = hashlib.sha256()
    for table in part.select_columns([column]).with_format("arrow").iter(batch_size=4096):
        for value in table.column(column).to_pylist():
            items = [value] if isinstance(value, str) else ["\0list", str(len(value)), *value]
            for item in items:
                data = item.encode("utf-8", "surrogatepass")
                digest.update(len(data).to_bytes(8, "little") + data)
    return digest.hexdigest()


def shard_info(path: str) -> dict:
    """The ``elmo_embed`` entry of a shard file's schema (its shard number, rows and input digest)."""
    import pyarrow.parquet as pq

    metadata = pq.read_schema(path).metadata or {}
    if SHARD_KEY not in metadata:
        raise ShardFolderError(f"{path} is not a shard written by `elmo embed` (no {SHARD_KEY.decode()} entry)")
    return json.loads(metadata[SHARD_KEY])


def _fsync_folder(folder: str) -> None:
    with contextlib.suppress(OSError):  # not every system opens folders
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextlib.contextmanager
def _shard_lock(temp: str):
    """Hold an exclusive ``flock`` on the shard's temporary file (created if missing) while it is written; a
    process that died released its lock, so its leftover file is taken over. Yields the open descriptor."""
    fd = os.open(temp, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            import fcntl

            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except ImportError:  # not POSIX: no lock
            pass
        except BlockingIOError:
            raise ShardFolderError(
                f"{temp} is being written by another process (another `elmo embed` into this folder?): "
                "two runs must not write one shard; wait for it, or stop it"
            ) from None
        except OSError:  # a file system without locks
            pass
        yield fd
    finally:
        os.close(fd)


def _row_group_size(table) -> int:
    return max(1, min(table.num_rows, ROW_GROUP_BYTES * table.num_rows // max(table.nbytes, 1)))


def _write_shard(embedder: BatchEmbedder, part, schema, path: str, index: int, rows: range, chunk_size: int) -> bool:
    """Embed ``part`` (the shard's rows) into ``path`` via its temporary file; ``False`` if another process
    finished the shard meanwhile (nothing written)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder, name = os.path.split(path)
    temp = os.path.join(folder, f".{name}.tmp")
    with _shard_lock(temp) as fd:
        if os.path.exists(path):  # completed by another process since this one looked: leave it
            remove_file(temp)
            return False
        writer = None
        try:
            os.ftruncate(fd, 0)
            digest = _part_digest(part, embedder.source)
            info = {"shard": index, "rows": [rows.start, rows.stop], "input_sha256": digest}
            schema = schema.with_metadata({**schema.metadata, SHARD_KEY: json.dumps(info).encode()})
            # No dictionary, no min/max statistics and no compression for the vectors (floats that do not repeat and
            # do not compress, 1% smaller for 15% more write time); the input's (flat) columns keep the defaults.
            inputs = [name for name in schema.names if name not in embedder.features]
            writer = pq.ParquetWriter(
                temp,
                schema,
                use_dictionary=inputs,
                write_statistics=inputs,
                compression={name: "snappy" for name in inputs},
            )
            offset = rows.start
            for table in part.with_format("arrow").iter(batch_size=chunk_size):
                out = embedder(table, range(offset, offset + table.num_rows))
                out = pa.Table.from_arrays(out.columns, schema=schema)
                writer.write_table(out, row_group_size=_row_group_size(out))
                offset += table.num_rows
            writer.close()
            writer = None
            os.fsync(fd)
            os.replace(temp, path)
            _fsync_folder(folder)
        except BaseException as err:
            if writer is not None:
                with contextlib.suppress(Exception):
                    writer.close()
            remove_file(temp)
            if isinstance(err, OSError) and not isinstance(err, EmbeddingFileError):
                reason = os.strerror(err.errno) if err.errno else str(err)  # pyarrow's message wraps the reason
                raise ShardWriteError(
                    f"could not write shard {index} ({name}): {reason} (errno {err.errno}); its temporary file was "
                    "removed and the complete shards were kept: free some space and run the same command again to "
                    "go on"
                ) from err
            raise
    return True


def _check_complete_shard(path: str, index: int, rows: range, part, source: str) -> None:
    """A shard that exists must be the one this run would write: same rows, same input."""
    info = shard_info(path)
    if info.get("shard") != index or info.get("rows") != [rows.start, rows.stop]:
        raise ShardFolderError(f"{path} holds rows {info.get('rows')}, not [{rows.start}, {rows.stop})")
    digest = _part_digest(part, source)
    if info.get("input_sha256") != digest:
        raise ShardFolderError(
            f"{path} was embedded from other input than rows [{rows.start}, {rows.stop}) of this dataset (the "
            "dataset changed since?): write into another folder, or delete this one to start again"
        )


# --------------------------------------------------------------------------------------------------
# The folder's card, once every shard is there


def _card_text(output_dir: str, plan: ShardPlan, features, metadata: dict) -> str:
    import pyarrow.parquet as pq
    from datasets.info import DatasetInfo, DatasetInfosDict
    from datasets.splits import SplitDict, SplitInfo
    from huggingface_hub import DatasetCardData

    paths = [os.path.join(output_dir, plan.name(i)) for i in range(plan.num_shards)]
    num_bytes = 0
    for path in paths:
        meta = pq.ParquetFile(path).metadata
        num_bytes += sum(meta.row_group(g).total_byte_size for g in range(meta.num_row_groups))
    files_size = sum(os.path.getsize(p) for p in paths)
    info = DatasetInfo(
        features=features,
        splits=SplitDict({plan.split: SplitInfo(plan.split, num_bytes=num_bytes, num_examples=plan.num_rows)}),
        download_size=files_size,
        dataset_size=num_bytes,
    )
    card = DatasetCardData()
    DatasetInfosDict({"default": info}).to_dataset_card_data(card)
    card["configs"] = [
        {"config_name": "default", "data_files": [{"split": plan.split, "path": f"{plan.split}-*.parquet"}]}
    ]
    model = metadata["model"]
    shape = {
        "all": "(words, L + 1, 2P): every biLM layer, words first",
        "sentence_mean": "(2P,): the ELMo vectors averaged over the words",
    }.get(metadata["output_type"], "(words, 2P)")
    source = metadata["input"]["text_column"] or metadata["input"]["tokens_column"]
    return (
        f"---\n{card.to_yaml()}\n---\n\n# ELMo vectors\n\n"
        f"Column `{metadata['column']}`: the `{metadata['output_type']}` vectors of column `{source}`, "
        f"{metadata['vector_dtype']}, shape {shape}, written by `elmo embed` (modeling_elmo) with the model "
        f"`{model.get('name')}` (weights SHA-256 {model['weights_sha256'][:16]}...). {plan.num_rows} rows in "
        f"{plan.num_shards} shards; `{METADATA_NAME}` says how they were made.\n\n"
        "```python\nfrom datasets import load_dataset\n\n"
        f'vectors = load_dataset("parquet", data_dir="path/to/this/folder")["{plan.split}"].with_format("numpy")\n'
        "```\n"
    )


def finish_folder(output_dir: str, plan: ShardPlan, features, metadata: dict) -> bool:
    """Write the card if every shard is there (and the card says anything new); returns whether all are there."""
    if not all(os.path.exists(os.path.join(output_dir, plan.name(i))) for i in range(plan.num_shards)):
        return False
    text = _card_text(output_dir, plan, features, metadata)
    path = os.path.join(output_dir, CARD_NAME)
    with contextlib.suppress(OSError):
        with open(path, encoding="utf-8") as f:
            if f.read() == text:
                return True
    _write_atomically(path, text)
    return True


# --------------------------------------------------------------------------------------------------
# The whole run of one process


def write_shards(
    model,
    tokenizer,
    dataset,
    output_dir: str,
    *,
    text_column: str | None = None,
    tokens_column: str | None = None,
    output_type: str = "elmo",
    vector_dtype: str = "float32",
    column: str = "elmo",
    words_column: str | None = None,
    split: str = "train",
    shard_size: int = 4096,
    batch_size: int = 64,
    max_batch_words: int = 4096,
    chunk_size: int = 4096,
    rank: int | None = None,
    world: int | None = None,
    progress: bool = True,
    model_name: str | None = None,
    precision: str | None = None,
    source: dict | None = None,
    log: Callable[[str], None] | None = None,
) -> ShardRun:
    """Embed this process's shards of ``dataset`` (a ``datasets.Dataset``) into ``output_dir``.

    Args:
        model, tokenizer, text_column, tokens_column, output_type, vector_dtype, column, words_column, batch_size,
            max_batch_words: as [`embed_dataset`].
        split: the split's name, in the file names (``train-00000-of-00004.parquet``).
        shard_size: rows per shard (the last one may hold fewer).
        chunk_size: rows sorted by length and cached together, counted from each shard's first row.
        rank, world: this process and the number of processes; default ``RANK`` and ``WORLD_SIZE`` from the
            environment (``torchrun``, ``accelerate launch``), else one process.
        progress: a progress bar (sentences, sentences/s) over this process's shards.
        model_name, precision, source: what the metadata says of the model's name and precision and of the input
            (descriptions only: the model is identified by its digests).
        log: where the lines about each shard (written, skipped) go; default this module's logger (info).

    Returns:
        A [`ShardRun`].

    Raises:
        DatasetInputError: a missing column, a column of non-strings, an empty dataset.
        ShardFolderError: the folder holds another run's shards, foreign Parquet files, or a shard being written.
        ShardWriteError: a write failed (full disk); the complete shards stay, a rerun goes on from them.
    """
    import datasets
    from tqdm.auto import tqdm

    started = time.perf_counter()
    log = log or logger.info
    if not isinstance(dataset, datasets.Dataset):
        raise TypeError(
            f"write_shards needs a datasets.Dataset (with a length, to plan the shards), got {type(dataset).__name__}"
        )
    if rank is None or world is None:
        rank, world = process_rank_and_world()
    for name, value in (("chunk_size", chunk_size), ("batch_size", batch_size), ("max_batch_words", max_batch_words)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    text_column, tokens_column, words_column = check_input(dataset, text_column, tokens_column, column, words_column)
    source_column = text_column if text_column is not None else tokens_column
    plan = ShardPlan(split_name(split), len(dataset), shard_size)
    embedder = BatchEmbedder(
        model, tokenizer, text_column, tokens_column, output_type, batch_size, max_batch_words, vector_dtype, column,
        words_column,
    )  # fmt: skip
    features = datasets.Features({**dataset.features, **embedder.features})
    metadata = run_metadata(
        model, tokenizer, plan, features, output_type=embedder.output_type, vector_dtype=vector_dtype, column=column,
        words_column=words_column, text_column=text_column, tokens_column=tokens_column, chunk_size=chunk_size,
        batch_size=batch_size, max_batch_words=max_batch_words, model_name=model_name, precision=precision,
        source=source,
    )  # fmt: skip
    open_folder(output_dir, metadata)
    run = ShardRun()
    pending = []
    for index in plan.owned_by(rank, world):
        rows = plan.rows(index)
        path = os.path.join(output_dir, plan.name(index))
        if os.path.exists(path):
            _check_complete_shard(path, index, rows, dataset.select(rows), source_column)
            run.skipped.append(index)
            log(f"shard {index} ({plan.name(index)}) is complete: skipped")
        else:
            pending.append(index)
    total = sum(len(plan.rows(i)) for i in pending)
    embedder.bar = tqdm(total=total, unit="sent", desc="Embedding", disable=not progress or not total)
    try:
        for index in pending:
            rows = plan.rows(index)
            path = os.path.join(output_dir, plan.name(index))
            if _write_shard(embedder, dataset.select(rows), features.arrow_schema, path, index, rows, chunk_size):
                run.written.append(index)
                run.sentences += len(rows)
                log(f"shard {index} ({plan.name(index)}): wrote rows {rows.start}-{rows.stop - 1}")
            else:
                run.skipped.append(index)
                log(f"shard {index} ({plan.name(index)}) was completed by another process: skipped")
    finally:
        embedder.bar.close()
    run.words = embedder.words
    run.complete = finish_folder(output_dir, plan, features, metadata)
    run.seconds = time.perf_counter() - started
    return run


__all__ = [
    "CARD_NAME",
    "METADATA_NAME",
    "ShardFolderError",
    "ShardPlan",
    "ShardRun",
    "ShardWriteError",
    "differences",
    "finish_folder",
    "open_folder",
    "process_rank_and_world",
    "run_metadata",
    "shard_info",
    "split_name",
    "write_shards",
]
