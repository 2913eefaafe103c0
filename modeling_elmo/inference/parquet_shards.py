"""Embed a dataset into a folder of Parquet shards: resumable, written by one process or many, with nothing merged.

    from modeling_elmo.inference.parquet_shards import write_shards

    run = write_shards(model, tokenizer, dataset, "wiki-elmo", text_column="text", output_type="elmo")
    # then: datasets.load_dataset("wiki-elmo")["train"]

The folder, for a split ``train`` of 10,000 rows in shards of 4,096:

- ``train-00000-of-00003.parquet``, ``train-00001-of-00003.parquet``, ``train-00002-of-00003.parquet``: the rows
  ``[0, 4096)``, ``[4096, 8192)``, ``[8192, 10000)``, with the input's columns and the ELMo column (the features of
  [`embed_dataset`], kept in each file's schema, where `datasets` reads them). Each file's schema also holds
  ``elmo_embed``: its shard number, its rows, a SHA-256 of its input texts and one of the run's settings (the
  model's digests, the output type, the plan: those of ``elmo_embed.json``), so that a shard of another run is
  never taken for one of this run.
- ``elmo_embed.json``: what the folder holds and must keep holding: the model's identity ([`model_identity`]:
  config, weights and tokenizer digests), the output type, the vectors' dtype, the column names, the features and
  the shard plan (rows, shard size, number of shards). A run into a folder whose file differs in any of these is
  refused ([`ShardFolderError`], naming each difference), so that one folder never mixes two models or outputs.
- ``README.md``: a dataset card whose YAML names every shard file (``configs``) and, once the folder is complete,
  holds ``dataset_info`` (features, number of rows): ``load_dataset(FOLDER)`` reads it, and checks both.

The folder is new or empty at the first run (a folder of the user's files is refused, so that no file the run did
not write is ever replaced), or an earlier run's (its ``elmo_embed.json``). Once ``elmo_embed.json`` is there, the
card of a folder in progress is written: it names every shard, so ``load_dataset(FOLDER)`` fails on the folder until
it is complete. A shard is written under the hidden name ``.NAME.tmp`` and, when complete, renamed to the hidden
name ``.NAME`` (``os.replace``): `datasets` skips hidden files, so ``load_dataset("parquet", data_dir=FOLDER)``
finds no rows either. Once every shard is complete, the complete card is written, then the shards get their names
``NAME`` one by one: a folder caught between (a killed run, a reader during the renames) lacks a shard its card
names, and ``load_dataset(FOLDER)`` fails instead of reading fewer rows (``data_dir=`` reads whatever files are
there: the card's checks are ``load_dataset(FOLDER)``'s). A rerun skips the complete shards (after checking that
their rows, input and run are the same; a damaged one is named in an error) and writes the others; it keeps a
complete card (edited by the user, maybe) as it is. A failed write (a full disk) removes the shard's temporary file
and leaves the complete shards as they are. The small files (``elmo_embed.json``, the card) are written under new,
unguessable temporary names (``new_files.create_temp``), and a symbolic link under a name of the run's is refused:
nothing is written through a link planted in the folder.

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

from .embed_dataset import BatchEmbedder, DatasetInputError, check_input, check_positive, model_identity
from .hdf5_file import EmbeddingFileError, remove_file
from .new_files import create_temp, is_plain_file, what_is

logger = logging.get_logger(__name__)

METADATA_NAME = "elmo_embed.json"
CARD_NAME = "README.md"
# What the card says of itself: a README.md without it is the user's, never replaced.
CARD_MARK = "written by `elmo embed` (modeling_elmo)"
# What the card of a folder in progress says (the complete card replaces it).
CARD_IN_PROGRESS = "This folder is not complete yet"
FORMAT = "modeling_elmo parquet shards"
FORMAT_VERSION = 2  # 2: complete shards stay hidden until the folder is complete, and carry the run's digest
# The shard's own entry in its Parquet schema's key-value metadata (beside `datasets`' "huggingface").
SHARD_KEY = b"elmo_embed"
# Row groups of at most this many bytes of vectors (readers load a row group at a time).
ROW_GROUP_BYTES = 64 << 20


class ShardFolderError(ValueError):
    """The output folder holds another run's shards (another model, output type or plan), files the command did not
    write, a damaged shard, or a shard that another process is writing now; or the name is no folder."""


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
        check_positive("shard_size", self.shard_size)  # (True is no size)

    @property
    def num_shards(self) -> int:
        return math.ceil(self.num_rows / self.shard_size)

    def rows(self, index: int) -> range:
        return range(index * self.shard_size, min((index + 1) * self.shard_size, self.num_rows))

    def name(self, index: int) -> str:
        """The file name, in the Hub's pattern (`datasets` reads the split from it)."""
        return f"{self.split}-{index:05d}-of-{self.num_shards:05d}.parquet"

    def hidden_name(self, index: int) -> str:
        """The name of a complete shard until every shard is complete (`datasets` does not read hidden files)."""
        return "." + self.name(index)

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


def _link_new(source: str, path: str) -> bool:
    """Give the file ``source`` the name ``path`` too, never replacing a file there (``os.link`` fails then; where
    the file system has no hard links, a check and a rename); returns whether ``path`` was created."""
    try:
        os.link(source, path)
    except FileExistsError:
        return False
    except OSError:  # no hard links here
        if os.path.lexists(path):
            return False
        os.rename(source, path)
    return True


def _write_atomically(path: str, text: str, replace: bool = True) -> bool:
    """Write ``text`` to ``path`` through a temporary file and a rename. ``replace=False``: never replace a file
    that exists; returns whether this call created ``path``."""
    folder, name = os.path.split(path)
    temp = None
    try:
        f, temp = create_temp(folder, f".{name}.", binary=False)  # new: never through a planted link
        with f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        if replace:
            os.replace(temp, path)
            return True
        return _link_new(temp, path)
    except OSError as err:
        raise ShardWriteError(f"could not write {path}: {err.strerror or err} (errno {err.errno})") from err
    finally:
        if temp is not None:
            with contextlib.suppress(OSError):  # (a read-only file system refuses even to remove what is not there)
                remove_file(temp)


# The temporary name of elmo_embed.json while a process of this run writes it (see _write_atomically): a regular
# file; a link of that name is a stranger.
_METADATA_TEMP = re.compile(rf"\.{re.escape(METADATA_NAME)}\.[0-9]+(-[0-9a-f]+)?\.tmp")


def check_folder(output_dir: str) -> None:
    """[`ShardFolderError`] for a name that cannot be the output folder (empty, a file, a dangling symbolic link), or
    a folder that is not empty and is not one of `elmo embed --output_dir` (no ``elmo_embed.json``): files of the
    user's, which the shards and the card must not mix with or replace. Creates nothing."""
    _check_output_dir(output_dir, create=False)
    if os.path.isdir(output_dir):
        _check_strangers(output_dir)


def _check_strangers(output_dir: str) -> bool:
    """[`ShardFolderError`] if ``output_dir`` holds files but no ``elmo_embed.json``; returns whether it is empty
    (the temporary file of ``elmo_embed.json`` that another process of this run writes aside). A symbolic link
    under a name of the run's is no file of the run's: refused too."""
    metadata = os.path.join(output_dir, METADATA_NAME)
    if os.path.lexists(metadata) and not is_plain_file(metadata):
        raise ShardFolderError(
            f"{metadata} is {what_is(metadata)}, not a file that `elmo embed` wrote: the run must not write or read "
            "through it. Give a new or empty folder"
        )
    if os.path.exists(metadata):
        return False
    strangers = sorted(
        name
        for name in os.listdir(output_dir)
        if name != METADATA_NAME
        and not (_METADATA_TEMP.fullmatch(name) and is_plain_file(os.path.join(output_dir, name)))
    )
    if strangers and not os.path.exists(os.path.join(output_dir, METADATA_NAME)):  # (else: another process began)
        raise ShardFolderError(
            f"{output_dir} is not empty ({', '.join(strangers[:3])}{', ...' if len(strangers) > 3 else ''}) and "
            f"is not a folder of `elmo embed --output_dir` (it has no {METADATA_NAME}): the shards and the card "
            "must not mix with, or replace, files that this command did not write. Give a new or empty folder"
        )
    return not strangers


def _check_output_dir(output_dir: str, create: bool = True) -> None:
    """[`ShardFolderError`] for a name that cannot be the output folder; creates the folder if missing."""
    if not output_dir:
        raise ShardFolderError("the output folder's name is empty: give a folder (--output_dir DIR)")
    if os.path.islink(output_dir) and not os.path.exists(output_dir):
        raise ShardFolderError(
            f"{output_dir} is a symbolic link to {os.readlink(output_dir)}, which does not exist: create that "
            "folder, or give another output folder"
        )
    if os.path.exists(output_dir) and not os.path.isdir(output_dir):
        raise ShardFolderError(f"{output_dir} exists and is not a folder: give a new or empty folder")
    if not create:
        return
    try:
        os.makedirs(output_dir, exist_ok=True)
    except OSError as err:
        raise ShardFolderError(f"cannot create the output folder {output_dir}: {err.strerror or err}") from None


def open_folder(output_dir: str, metadata: dict) -> None:
    """Create ``output_dir`` with ``metadata`` as its ``elmo_embed.json``, or check that the one there agrees.

    Raises:
        ShardFolderError: the folder's file differs (each difference named); the folder is not empty and holds no
            ``elmo_embed.json`` (files of the user's, which the shards and the card must not mix with or replace);
            a name that is no folder (empty, a file, a dangling symbolic link) or a folder that cannot be created.
    """
    _check_output_dir(output_dir)
    path = os.path.join(output_dir, METADATA_NAME)
    text = json.dumps(metadata, indent=2, sort_keys=True) + "\n"
    if _check_strangers(output_dir) and _write_atomically(path, text, replace=False):
        return
    # The folder is an earlier run's, or another process of this run created the file first: it must agree.
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


def run_digest(metadata: dict) -> str:
    """SHA-256 of the entries of ``metadata`` that two runs into one folder must share (the model's digests, the
    output type, the plan...): each shard carries it, so that one copied from another run's folder is refused."""
    entries = [_entry(metadata, path) for path in _MUST_MATCH]
    return hashlib.sha256(json.dumps(entries, sort_keys=True, default=str).encode()).hexdigest()


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


def _part_digest(part, column: str, first_row: int = 0) -> str:
    """SHA-256 of a column's values in ``part`` (a dataset; strings, or lists of strings), length-prefixed so that
    no two inputs collide. [`DatasetInputError`] naming the row (counted from ``first_row``) for a None value or
    word."""
    digest = hashlib.sha256()
    row = first_row
    for table in part.select_columns([column]).with_format("arrow").iter(batch_size=4096):
        for value in table.column(column).to_pylist():
            if value is None:
                raise DatasetInputError(f"row {row} has no {column!r} (None): give every row a value")
            items = [value] if isinstance(value, str) else ["\0list", str(len(value)), *value]
            if any(item is None for item in items):
                raise DatasetInputError(f"row {row}'s tokens ({column!r}) hold None: give every word a string")
            for item in items:
                data = item.encode("utf-8", "surrogatepass")
                digest.update(len(data).to_bytes(8, "little") + data)
            row += 1
    return digest.hexdigest()


def shard_info(path: str) -> dict:
    """The ``elmo_embed`` entry of a shard file's schema (its shard number, rows, input and run digests), and its
    number of rows as the file's footer says (``num_rows``). [`ShardFolderError`] for a file that cannot be read
    as a shard (cut short, empty, not Parquet) or was not written by `elmo embed`."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        footer = pq.ParquetFile(path).metadata
        metadata = footer.schema.to_arrow_schema().metadata or {}
        info = json.loads(metadata[SHARD_KEY]) if SHARD_KEY in metadata else None
    except (OSError, ValueError, pa.ArrowException) as err:  # ArrowInvalid is a ValueError
        raise ShardFolderError(
            f"{path} is damaged ({str(err).splitlines()[0] if str(err) else type(err).__name__}): it cannot be read "
            "as a shard; delete it and run the same command again to redo it"
        ) from None
    if not isinstance(info, dict):
        raise ShardFolderError(f"{path} is not a shard written by `elmo embed` (no {SHARD_KEY.decode()} entry)")
    return {**info, "num_rows": footer.num_rows}


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
    try:
        fd = os.open(temp, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
    except OSError as err:
        if os.path.isdir(temp) or os.path.islink(temp):
            raise ShardFolderError(
                f"{temp} is a {'folder' if os.path.isdir(temp) else 'symbolic link'}, where this run writes a shard "
                "before renaming it: it is no file of the run; move it away and run the same command again"
            ) from None
        raise ShardWriteError(f"could not create {temp}: {err.strerror or err} (errno {err.errno})") from err
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


def _complete_shard(output_dir: str, plan: ShardPlan, index: int) -> str | None:
    """The path of shard ``index`` if it is complete: under its name, or still hidden; else ``None``.
    [`ShardFolderError`] for a symbolic link or a folder of that name (no shard of the run's)."""
    for name in (plan.name(index), plan.hidden_name(index)):
        path = os.path.join(output_dir, name)
        if os.path.lexists(path):
            if not is_plain_file(path):
                raise ShardFolderError(
                    f"{path} is {what_is(path)}, where this run keeps shard {index}: it is no shard of the run's; "
                    "move it away and run the same command again"
                )
            return path
    return None


def _write_shard(
    embedder: BatchEmbedder, part, schema, output_dir: str, plan: ShardPlan, index: int, chunk_size: int, run: str
) -> bool:
    """Embed ``part`` (the shard's rows) into the shard's hidden name via its temporary file; ``False`` if another
    process finished the shard meanwhile (nothing written). ``run``: the run's digest ([`run_digest`])."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows, name = plan.rows(index), plan.name(index)
    path = os.path.join(output_dir, plan.hidden_name(index))
    temp = os.path.join(output_dir, f".{name}.tmp")
    with _shard_lock(temp) as fd:
        if _complete_shard(output_dir, plan, index) is not None:  # completed by another process meanwhile
            remove_file(temp)
            return False
        writer = None
        try:
            os.ftruncate(fd, 0)
            digest = _part_digest(part, embedder.source, rows.start)
            info = {"shard": index, "rows": [rows.start, rows.stop], "input_sha256": digest, "run_sha256": run}
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
            _fsync_folder(output_dir)
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


def _check_complete_shard(path: str, index: int, rows: range, part, source: str, run: str) -> None:
    """A shard that exists must be the one this run would write: same rows, same input, same run (model, output
    type, plan: ``run`` is the run's digest), and readable, with all its rows."""
    info = shard_info(path)
    if info.get("shard") != index or info.get("rows") != [rows.start, rows.stop]:
        raise ShardFolderError(f"{path} holds rows {info.get('rows')}, not [{rows.start}, {rows.stop})")
    if info["num_rows"] != len(rows):
        raise ShardFolderError(
            f"{path} is damaged: it holds {info['num_rows']} rows, not {len(rows)}; delete it and run the same "
            "command again to redo it"
        )
    if info.get("run_sha256") != run:
        raise ShardFolderError(
            f"{path} was written by another run (another model, output type, dtype or plan than {METADATA_NAME} "
            "says): it must not be mixed with this run's shards; delete it and run the same command again to redo it"
        )
    digest = _part_digest(part, source, rows.start)
    if info.get("input_sha256") != digest:
        raise ShardFolderError(
            f"{path} was embedded from other input than rows [{rows.start}, {rows.stop}) of this dataset (the "
            "dataset changed since?): write into another folder, or delete this one to start again"
        )


# --------------------------------------------------------------------------------------------------
# The folder's card: "in progress" from the start, complete before the shards get their names


def _card_yaml(output_dir: str, plan: ShardPlan, features, complete: bool) -> str:
    """The card's YAML: ``configs`` naming every shard file (so that ``load_dataset(FOLDER)`` fails on a folder
    that lacks one), and once ``complete``, ``dataset_info`` (its number of rows: `datasets` checks it)."""
    import pyarrow.parquet as pq
    from datasets.info import DatasetInfo, DatasetInfosDict
    from datasets.splits import SplitDict, SplitInfo
    from huggingface_hub import DatasetCardData

    card = DatasetCardData()
    if complete:
        paths = [_complete_shard(output_dir, plan, i) for i in range(plan.num_shards)]
        num_bytes = 0
        for path in paths:
            try:
                meta = pq.ParquetFile(path).metadata
            except Exception:  # damaged since its check: shard_info names it
                shard_info(path)
                raise
            num_bytes += sum(meta.row_group(g).total_byte_size for g in range(meta.num_row_groups))
        info = DatasetInfo(
            features=features,
            splits=SplitDict({plan.split: SplitInfo(plan.split, num_bytes=num_bytes, num_examples=plan.num_rows)}),
            download_size=sum(os.path.getsize(p) for p in paths),
            dataset_size=num_bytes,
        )
        DatasetInfosDict({"default": info}).to_dataset_card_data(card)
    files = [plan.name(i) for i in range(plan.num_shards)]
    card["configs"] = [{"config_name": "default", "data_files": [{"split": plan.split, "path": files}]}]
    return card.to_yaml()


def _card_text(output_dir: str, plan: ShardPlan, features, metadata: dict, complete: bool = True) -> str:
    """The dataset card: complete (every shard there, the sizes in the YAML), or the card of a folder in progress
    (marked with ``CARD_IN_PROGRESS``), which names the shards all the same."""
    model = metadata["model"]
    shape = {
        "all": "(words, L + 1, 2P): every biLM layer, words first",
        "sentence_mean": "(2P,): the ELMo vectors averaged over the words",
    }.get(metadata["output_type"], "(words, 2P)")
    source = metadata["input"]["text_column"] or metadata["input"]["tokens_column"]
    state = (
        "\n\n"
        if complete
        else f" {CARD_IN_PROGRESS}: `load_dataset` fails on it (a shard named above is missing) until the run that "
        "completes it writes this card again.\n\n"
    )
    return (
        f"---\n{_card_yaml(output_dir, plan, features, complete)}\n---\n\n# ELMo vectors\n\n"
        f"Column `{metadata['column']}`: the `{metadata['output_type']}` vectors of column `{source}`, "
        f"{metadata['vector_dtype']}, shape {shape}, {CARD_MARK} with the model "
        f"`{model.get('name')}` (weights SHA-256 {model['weights_sha256'][:16]}...). {plan.num_rows} "
        f"row{'s' * (plan.num_rows != 1)} in {plan.num_shards} shard{'s' * (plan.num_shards != 1)}; "
        f"`{METADATA_NAME}` says how they were made.{state}"
        "```python\nfrom datasets import load_dataset\n\n"
        f'vectors = load_dataset("path/to/this/folder")["{plan.split}"].with_format("numpy")\n'
        "```\n"
    )


def _read_card(path: str) -> str | None:
    """The text of ``README.md``: ``None`` if missing, ``""`` if it cannot be ours (not text, a symbolic link)."""
    if os.path.lexists(path) and not is_plain_file(path):
        return ""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except FileNotFoundError:
        return None
    except (OSError, ValueError):  # not text: not a card of this command's
        return ""


def start_card(output_dir: str, plan: ShardPlan, features, metadata: dict) -> None:
    """Write the card of a folder in progress where ``README.md`` is missing (never replacing a file): so that
    ``load_dataset(FOLDER)`` fails on the folder until it is complete, instead of reading ``elmo_embed.json`` or
    the shards that have their names as the dataset."""
    path = os.path.join(output_dir, CARD_NAME)
    if not os.path.lexists(path):
        _write_atomically(path, _card_text(output_dir, plan, features, metadata, complete=False), replace=False)


def _publish_shard(output_dir: str, plan: ShardPlan, index: int) -> None:
    """Give the complete hidden shard ``index`` its name (never replacing a file there)."""
    hidden = os.path.join(output_dir, plan.hidden_name(index))
    path = os.path.join(output_dir, plan.name(index))
    try:
        if not _link_new(hidden, path) and not os.path.samefile(hidden, path):
            raise ShardFolderError(
                f"{path} appeared while this run wrote {plan.hidden_name(index)}: it was left as it is; move it away "
                "and run the same command again"
            )
        remove_file(hidden)
    except FileNotFoundError:  # another process of this run published it meanwhile
        if not os.path.exists(path):
            raise


def finish_folder(output_dir: str, plan: ShardPlan, features, metadata: dict, log=None) -> bool:
    """If every shard is complete: write the complete card, then give the hidden shards their names. Returns whether
    every shard is complete.

    The card comes first: a folder caught between (a killed run, a reader during the renames) names shards that are
    missing, and ``load_dataset(FOLDER)`` fails on it instead of reading fewer rows. The card is written where
    ``README.md`` is missing or is the card of a folder in progress; a complete card of an earlier run (maybe edited
    since) and a README of the user's (said on ``log``) are kept."""
    if any(_complete_shard(output_dir, plan, i) is None for i in range(plan.num_shards)):
        return False
    path = os.path.join(output_dir, CARD_NAME)
    for _ in range(2):  # a second time if another process created a card of a folder in progress meanwhile
        old = _read_card(path)
        if old is not None and (CARD_MARK not in old or CARD_IN_PROGRESS not in old):
            break
        text = _card_text(output_dir, plan, features, metadata)
        if _write_atomically(path, text, replace=old is not None):
            break
    if old is not None and CARD_MARK not in old:
        (log or logger.warning)(
            f"kept {path}, which `elmo embed` did not write; the dataset card was not written (the shards read "
            "without it)"
        )
    for index in range(plan.num_shards):
        if os.path.lexists(os.path.join(output_dir, plan.hidden_name(index))):
            _publish_shard(output_dir, plan, index)
    _fsync_folder(output_dir)
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
        ShardFolderError: the folder holds another run's shards (or one of them), files of the user's (it is neither
            empty nor a folder of this command), a damaged shard, or a shard being written; the name is no folder.
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
    if rank is None and world is None:
        rank, world = process_rank_and_world()
    for name, value in (("rank", rank), ("world", world)):
        if not isinstance(value, int) or isinstance(value, bool):
            raise ValueError(f"give rank and world as integers, or neither; got {name}={value!r}")
    if world < 1 or not 0 <= rank < world:
        raise ValueError(f"rank must be in [0, world): got rank={rank}, world={world}")
    for name, value in (("chunk_size", chunk_size), ("batch_size", batch_size), ("max_batch_words", max_batch_words)):
        check_positive(name, value)
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
    start_card(output_dir, plan, features, metadata)
    digest = run_digest(metadata)
    run = ShardRun()
    pending = []
    for index in plan.owned_by(rank, world):
        rows = plan.rows(index)
        path = _complete_shard(output_dir, plan, index)
        if path is not None:
            _check_complete_shard(path, index, rows, dataset.select(rows), source_column, digest)
            run.skipped.append(index)
            log(f"shard {index} ({plan.name(index)}) is complete: skipped")
        else:
            pending.append(index)
    total = sum(len(plan.rows(i)) for i in pending)
    embedder.bar = tqdm(total=total, unit="sent", desc="Embedding", disable=not progress or not total)
    try:
        for index in pending:
            rows = plan.rows(index)
            schema = features.arrow_schema
            if _write_shard(embedder, dataset.select(rows), schema, output_dir, plan, index, chunk_size, digest):
                run.written.append(index)
                run.sentences += len(rows)
                log(f"shard {index} ({plan.name(index)}): wrote rows {rows.start}-{rows.stop - 1}")
            else:
                run.skipped.append(index)
                log(f"shard {index} ({plan.name(index)}) was completed by another process: skipped")
    finally:
        embedder.bar.close()
    run.words = embedder.words
    run.complete = finish_folder(output_dir, plan, features, metadata, log)
    run.seconds = time.perf_counter() - started
    return run


__all__ = [
    "CARD_NAME",
    "METADATA_NAME",
    "ShardFolderError",
    "ShardPlan",
    "ShardRun",
    "ShardWriteError",
    "check_folder",
    "differences",
    "finish_folder",
    "open_folder",
    "process_rank_and_world",
    "run_digest",
    "run_metadata",
    "shard_info",
    "split_name",
    "write_shards",
]
