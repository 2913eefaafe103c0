"""Embed a `datasets` dataset: its rows with a new column of ELMo vectors, computed in ``Dataset.map(batched=True)``.

    from modeling_elmo import ElmoModel, ElmoTokenizer, demo_model_path
    from modeling_elmo.inference.embed_dataset import embed_dataset

    embedded = embed_dataset(model.eval(), tokenizer, dataset, text_column="text", output_type="elmo")
    embedded.with_format("numpy")[0]["elmo"]  # (words, 2P) float32

Each ``map`` batch (``chunk_size`` rows) goes through [`embed_corpus`] as one chunk: sorted by length and cut into
batches of at most ``batch_size`` sentences and ``max_batch_words`` padded word slots, with the chunk's distinct
words in the token cache. The batch function reads and returns Arrow tables (the dataset is mapped in the
``"arrow"`` format), so the vectors go from numpy into Arrow buffers in one copy, without Python lists.

The ELMo column's feature, chosen by measured read and write speed (``benchmarks/bench_embed_dataset.py
--compare_features``; docs/usage.md has the numbers):

| ``output_type`` | feature | a row, formatted as numpy |
|---|---|---|
| ``top``, ``average``, ``elmo`` | ``Array2D(shape=(None, 2P))`` | ``(words, 2P)`` |
| ``all`` | ``Array3D(shape=(None, L + 1, 2P))`` | ``(words, L + 1, 2P)``: words first |
| ``sentence_mean`` | ``List(Value, length=2P)`` | ``(2P,)`` |

``all`` is stored words first, where `elmo embed`'s HDF5 file and [`embed_corpus`] give ``(L + 1, words, 2P)``:
`datasets` arrays may have only their first dimension of variable size, and a nested list feature that keeps the
layers first read 5x slower in batches. ``vectors.transpose(1, 0, 2)`` gives the HDF5 layout back.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable

import numpy as np

from .embed_corpus import embed_corpus, resolve_output

# The dtypes the vectors may be stored in (they are computed in the model's precision, then cast).
VECTOR_DTYPES = ("float32", "float16")
# Tokenizer settings that do not change how text is split (where it was loaded from, how it was loaded).
_TOKENIZER_PLACE = {"name_or_path", "is_local", "local_files_only", "backend", "_commit_hash", "model_max_length"}


class DatasetInputError(ValueError):
    """The dataset cannot be embedded as asked: a missing column, a column of non-strings, no rows."""


def elmo_feature(config, output_type: str, vector_dtype: str = "float32"):
    """The `datasets` feature of the ELMo column for a model of ``config`` (see the module's table)."""
    from datasets import Array2D, Array3D, List, Value

    output_type = resolve_output(output_type)
    _check_vector_dtype(vector_dtype)
    dim = 2 * config.projection_dim
    if output_type == "all":
        return Array3D(shape=(None, config.n_layers + 1, dim), dtype=vector_dtype)
    if output_type == "sentence_mean":
        return List(Value(vector_dtype), length=dim)
    return Array2D(shape=(None, dim), dtype=vector_dtype)


def check_positive(name: str, value) -> int:
    """``value`` if it is a positive integer (not a bool), else ``ValueError`` naming ``name``."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value


def _check_vector_dtype(vector_dtype: str) -> None:
    if vector_dtype not in VECTOR_DTYPES:
        raise ValueError(f"vector_dtype must be one of {VECTOR_DTYPES}, got {vector_dtype!r}")


def vectors_to_arrow(arrays: list[np.ndarray], output_type: str, arrow_type):
    """The arrays of [`embed_corpus`] (one per sentence) as one Arrow array of ``arrow_type`` (the storage of
    [`elmo_feature`]'s type): one copy into a flat buffer (cast to the feature's dtype on the way), then offsets."""
    import pyarrow as pa

    storage_type = arrow_type.storage_type if isinstance(arrow_type, pa.ExtensionType) else arrow_type
    value_type = storage_type
    while pa.types.is_list(value_type) or pa.types.is_fixed_size_list(value_type):
        value_type = value_type.value_type
    dtype = np.dtype(value_type.to_pandas_dtype())
    if output_type == "sentence_mean":
        flat = np.stack(arrays).astype(dtype, copy=False).reshape(-1) if arrays else np.zeros(0, dtype)
        return pa.FixedSizeListArray.from_arrays(pa.array(flat), storage_type.list_size)
    if output_type == "all":  # (L + 1, words, 2P) -> words first
        arrays = [a.transpose(1, 0, 2) for a in arrays]
    words = np.fromiter((a.shape[0] for a in arrays), dtype=np.int64, count=len(arrays))
    row_shape = arrays[0].shape[1:] if arrays else ()
    row_size = int(np.prod(row_shape)) if arrays else 0
    flat = np.empty(int(words.sum()) * row_size, dtype)
    position = 0
    for a in arrays:
        size = a.size
        flat[position : position + size].reshape(a.shape)[...] = a  # the one copy (and cast)
        position += size
    values = pa.array(flat)
    for width in reversed(row_shape):  # innermost dimension first: lists of `width` values
        values = pa.ListArray.from_arrays(pa.array(np.arange(0, len(values) + 1, width, dtype=np.int32)), values)
    offsets = np.zeros(len(arrays) + 1, np.int64)
    np.cumsum(words, out=offsets[1:])
    if offsets[-1] > np.iinfo(np.int32).max:
        raise ValueError(f"one map batch holds {offsets[-1]} words, more than Arrow lists hold: lower chunk_size")
    storage = pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), values)
    if isinstance(arrow_type, pa.ExtensionType):
        return pa.ExtensionArray.from_storage(arrow_type, storage)
    return storage


def _is_string(arrow_type) -> bool:
    import pyarrow as pa

    return pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type)


def _is_string_list(arrow_type) -> bool:
    import pyarrow as pa

    return (pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type)) and _is_string(arrow_type.value_type)


def resolve_columns(column_names: list[str] | None, text_column: str | None, tokens_column: str | None) -> tuple:
    """``(text_column, tokens_column)``, exactly one of them set: as given, else ``"text"`` or ``"tokens"`` if the
    dataset has such a column. [`DatasetInputError`] when both are given, when the named one is missing, or when
    nothing fits."""
    if text_column is not None and tokens_column is not None:
        raise DatasetInputError(
            f"give a text column or a tokens column, not both (text_column={text_column!r}, "
            f"tokens_column={tokens_column!r})"
        )
    if text_column is None and tokens_column is None:
        if column_names is None:
            raise DatasetInputError("the dataset does not say its columns: name the text_column or tokens_column")
        if "text" in column_names:
            text_column = "text"
        elif "tokens" in column_names:
            tokens_column = "tokens"
        else:
            raise DatasetInputError(
                f"no column 'text' or 'tokens' in the dataset (its columns: {', '.join(column_names)}): name the "
                "text column (raw strings) or the tokens column (lists of words)"
            )
    name = text_column if text_column is not None else tokens_column
    if column_names is not None and name not in column_names:
        raise DatasetInputError(
            f"the dataset has no column {name!r}; its columns are: {', '.join(column_names) or '(none)'}"
        )
    return text_column, tokens_column


def check_column_type(arrow_type, column: str, tokens: bool, where: str = "") -> None:
    """[`DatasetInputError`] unless ``arrow_type`` is a string (text) or a list of strings (tokens)."""
    if tokens and not _is_string_list(arrow_type):
        raise DatasetInputError(
            f"the tokens column {column!r}{where} holds {arrow_type}, not lists of strings (words); "
            "for raw text use text_column (--text_column) instead"
        )
    if not tokens and not _is_string(arrow_type):
        hint = " (lists of words: use tokens_column / --tokens_column)" if _is_string_list(arrow_type) else ""
        raise DatasetInputError(f"the text column {column!r}{where} holds {arrow_type}, not strings{hint}")


def check_input(
    dataset, text_column: str | None, tokens_column: str | None, column: str, words_column: str | None
) -> tuple[str | None, str | None, str | None]:
    """Check a ``Dataset`` or ``IterableDataset`` before any work: ``(text_column, tokens_column, words_column)``
    resolved ([`resolve_columns`]; no words column for tokens). A stream whose features are unknown is checked
    batch by batch as it runs instead.

    Raises:
        DatasetInputError: a missing column, a column of non-strings, no rows, a new column's name taken, empty or
            the same for both new columns.
    """
    import datasets

    names = dataset.column_names
    text_column, tokens_column = resolve_columns(names, text_column, tokens_column)
    source = text_column if text_column is not None else tokens_column
    if tokens_column is not None:
        words_column = None
    for what, new in (("column", column), ("words_column", words_column)):
        if new is not None and (not isinstance(new, str) or not new.strip()):
            raise DatasetInputError(f"{what} must name the new column (a non-empty string), got {new!r}")
    if column == words_column:
        raise DatasetInputError(f"column and words_column are both {column!r}: give the two new columns two names")
    for new in (column, words_column):
        if new is not None and names is not None and new in names:
            raise DatasetInputError(f"the dataset already has a column {new!r}: choose another name for it")
    if isinstance(dataset, datasets.Dataset) and len(dataset) == 0:
        raise DatasetInputError("the dataset has no rows: nothing to embed")
    if dataset.features is not None and source in dataset.features:
        check_column_type(dataset.features.arrow_schema.field(source).type, source, tokens_column is not None)
    return text_column, tokens_column, words_column


class BatchEmbedder:
    """The batch function: an Arrow table of rows in, the same table with the ELMo column (and, for text, the words
    column) appended out. Used by [`embed_dataset`] through ``map`` and by the Parquet shard writer directly.

    Call it as ``embedder(table, indices)`` (``indices``: the rows' numbers, for messages)."""

    def __init__(
        self,
        model,
        tokenizer,
        text_column: str | None,
        tokens_column: str | None,
        output_type: str,
        batch_size: int,
        max_batch_words: int,
        vector_dtype: str,
        column: str,
        words_column: str | None,
        bar=None,
    ) -> None:
        import pyarrow as pa
        from datasets import Features, List, Value

        self.model, self.tokenizer = model, tokenizer
        self.source = text_column if text_column is not None else tokens_column
        self.tokens = tokens_column is not None
        self.output_type = resolve_output(output_type)
        self.batch_size, self.max_batch_words = batch_size, max_batch_words
        self.column, self.words_column = column, words_column if not self.tokens else None
        # The new columns: their `datasets` features, and their Arrow fields.
        self.features = {column: elmo_feature(model.config, self.output_type, vector_dtype)}
        if self.words_column is not None:
            self.features[self.words_column] = List(Value("string"))
        schema = Features(self.features).arrow_schema
        self.fields = [pa.field(name, schema.field(name).type) for name in self.features]
        self.bar = bar
        self.words = 0  # embedded so far
        self.process = os.getpid()  # the process that built it: another one is a `map` worker (num_proc > 1)

    def _start_worker(self) -> None:
        """In a ``map`` worker (``num_proc > 1``): torch on one thread before its first product. A worker forked
        from a process whose OpenMP pool had started finds a pool without threads, and its first parallel region
        waits for them forever (GNU OpenMP is not fork-safe); torch's own DataLoader workers do the same."""
        import torch

        torch.set_num_threads(1)
        self.process = os.getpid()

    def words_of(self, table, indices) -> list[list[str]]:
        """Each row's words: the tokens column as it is, or the text split as `elmo embed` splits a line."""
        column = table.column(self.source)
        check_column_type(column.type, self.source, self.tokens)
        if column.null_count:
            first = next(i for i, v in enumerate(column.is_null().to_pylist()) if v)
            row = indices[first] if indices is not None else first
            raise DatasetInputError(f"row {row} has no {self.source!r} (None): give every row a value")
        values = column.to_pylist()
        if self.tokens:
            for i, words in enumerate(values):
                if any(w is None for w in words):
                    row = indices[i] if indices is not None else i
                    raise DatasetInputError(f"row {row}'s tokens ({self.source!r}) hold None")
            return values
        return [self.tokenizer.tokenize(text.strip()) for text in values]

    def __call__(self, table, indices=None):
        if os.getpid() != self.process:
            self._start_worker()
        words = self.words_of(table, indices)
        arrays = [
            array
            for _, array in embed_corpus(
                self.model,
                self.tokenizer,
                words,
                output=self.output_type,
                batch_size=self.batch_size,
                max_batch_words=self.max_batch_words,
                chunk_size=max(1, len(words)),
                is_split_into_words=True,
                progress=False,
                bar=self.bar,
            )
        ]
        self.words += sum(len(w) for w in words)
        out = table.append_column(self.fields[0], vectors_to_arrow(arrays, self.output_type, self.fields[0].type))
        if self.words_column is not None:
            import pyarrow as pa

            out = out.append_column(self.fields[1], pa.array(words, self.fields[1].type))
        return out


def _hash_tensor(digest, value) -> None:
    """Add a tensor's dtype, shape and bytes (a quantized one's integers and scales) to ``digest``."""
    import torch

    if not isinstance(value, torch.Tensor):
        digest.update(repr(value).encode())
        return
    tensor = value.detach()
    if tensor.is_quantized:
        if tensor.qscheme() in (torch.per_channel_affine, torch.per_channel_symmetric):
            _hash_tensor(digest, tensor.q_per_channel_scales())
            _hash_tensor(digest, tensor.q_per_channel_zero_points())
        else:
            digest.update(repr((tensor.q_scale(), tensor.q_zero_point())).encode())
        tensor = tensor.int_repr()
    tensor = tensor.cpu().contiguous()
    digest.update(f"{tensor.dtype}{tuple(tensor.shape)}".encode())
    digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())


def model_identity(model, tokenizer) -> dict:
    """What makes two runs' vectors the same: SHA-256 digests of the model's config (its settings, without the
    transformers version it was saved with), of its weights (every tensor of ``state_dict``: name, dtype, shape,
    bytes, so a bfloat16 copy differs from the float32 one; the int8 weights that ``quantize_int8`` packs outside the
    state dict are unpacked and hashed too), and of the tokenizer's settings and vocabulary."""
    import torch

    settings = model.config.to_dict()
    for key in ("transformers_version", "_name_or_path", "_commit_hash", "_attn_implementation_autoset"):
        settings.pop(key, None)
    config_digest = hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()
    weights = hashlib.sha256()
    for name, value in sorted(model.state_dict().items()):
        weights.update(name.encode() + b"\0")
        _hash_tensor(weights, value)
    # int8 weights packed outside the state dict (modeling_elmo.inference.quantize): unpacked and hashed too.
    for module_name, module in sorted(model.named_modules()):
        for key, value in sorted(vars(module).items()):
            packed = value if isinstance(value, (list, tuple)) else [value]
            if packed and all(isinstance(p, torch.ScriptObject) for p in packed):
                weights.update(f"{module_name}.{key}\0".encode())
                for item in packed:
                    for tensor in torch.ops.quantized.linear_unpack(item):
                        _hash_tensor(weights, tensor)
    kwargs = {k: v for k, v in tokenizer.init_kwargs.items() if k not in _TOKENIZER_PLACE}
    vocab = sorted(tokenizer.get_vocab().items())
    tokenizer_digest = hashlib.sha256(
        json.dumps([type(tokenizer).__name__, kwargs, vocab], sort_keys=True, default=str).encode()
    ).hexdigest()
    return {
        "model_type": model.config.model_type,
        "config_sha256": config_digest,
        "weights_sha256": weights.hexdigest(),
        "tokenizer_sha256": tokenizer_digest,
    }


def embed_dataset(
    model,
    tokenizer,
    dataset,
    text_column: str | None = None,
    tokens_column: str | None = None,
    output_type: str = "elmo",
    batch_size: int = 64,
    max_batch_words: int = 4096,
    chunk_size: int = 1024,
    column: str = "elmo",
    vector_dtype: str = "float32",
    words_column: str | None = None,
    progress: bool = True,
    **map_kwargs,
):
    """``dataset`` with a column of ELMo vectors: a ``datasets.Dataset`` (or an ``IterableDataset``, mapped lazily).

    Args:
        model: an [`ElmoModel`] in eval mode, on its device.
        tokenizer: its [`ElmoTokenizer`].
        dataset: a ``datasets.Dataset`` or ``IterableDataset`` (streaming); its format is kept.
        text_column: a column of strings, split into words by ``tokenizer`` as `elmo embed` splits a line.
        tokens_column: or a column of lists of words (e.g. CoNLL's ``tokens``), embedded as they are.
            Without either, the column ``"text"``, else ``"tokens"``.
        output_type: as `elmo embed`'s ``--output_type`` (see [`embed_corpus`]); the stored shapes are in the
            module's table (``"all"`` is stored words first).
        batch_size, max_batch_words: the model's batches, as [`embed_corpus`].
        chunk_size: rows per ``map`` batch: each is sorted by length and cached as one chunk of [`embed_corpus`].
        column: the new column's name.
        vector_dtype: ``"float32"`` or ``"float16"`` (half the disk; the vectors are computed as before, then cast).
        words_column: with a text column, also store each row's words (a list of strings) under this name.
        progress: show ``map``'s progress bar.
        map_kwargs: passed to ``map`` (e.g. ``cache_file_name``, ``keep_in_memory``, ``desc``). ``num_proc=N`` runs
            the model in N forked CPU processes of one thread each (a model on a GPU: one process; for several
            GPUs or machines, `elmo embed --output_dir` under torchrun, or ``write_shards``).

    Returns:
        A dataset of the same kind with ``column`` (and ``words_column``) added. For a ``Dataset``, ``map``'s cache
        is keyed by the input's fingerprint and the model's identity ([`model_identity`]) with these arguments.

    Raises:
        DatasetInputError: a missing column, a column of non-strings (or None values, found when their batch
            runs), a dataset without rows, or a new column name the dataset already has.
    """
    import datasets
    from datasets.fingerprint import Hasher

    output_type = resolve_output(output_type)
    _check_vector_dtype(vector_dtype)
    for name, value in (("batch_size", batch_size), ("max_batch_words", max_batch_words), ("chunk_size", chunk_size)):
        check_positive(name, value)
    _check_num_proc(model, map_kwargs.get("num_proc"))
    if output_type not in ("all", "top", "average") and not model.config.num_output_representations:
        raise ValueError(f"output_type={output_type!r} needs a scalar mix; the model has num_output_representations=0")
    iterable = isinstance(dataset, datasets.IterableDataset)
    if not iterable and not isinstance(dataset, datasets.Dataset):
        raise TypeError(
            f"dataset must be a datasets.Dataset or IterableDataset, got {type(dataset).__name__}"
            + (": pick a split, e.g. dataset['train']" if isinstance(dataset, datasets.DatasetDict) else "")
        )
    text_column, tokens_column, words_column = check_input(dataset, text_column, tokens_column, column, words_column)
    source = text_column if text_column is not None else tokens_column
    features = dataset.features
    embedder = BatchEmbedder(
        model, tokenizer, text_column, tokens_column, output_type, batch_size, max_batch_words, vector_dtype,
        column, words_column,
    )  # fmt: skip
    out_features = None if features is None else datasets.Features({**features, **embedder.features})
    kwargs = dict(with_indices=True, batched=True, batch_size=chunk_size, features=out_features, **map_kwargs)
    if iterable:
        mapped = dataset.with_format("arrow").map(embedder, **kwargs)
        return mapped.with_format(dataset._formatting.format_type if dataset._formatting else None)
    kwargs["new_fingerprint"] = Hasher.hash(
        [dataset._fingerprint, model_identity(model, tokenizer), source, tokens_column is not None, output_type,
         batch_size, max_batch_words, chunk_size, column, vector_dtype, words_column]
    )  # fmt: skip
    kwargs.setdefault("desc", "Embedding with ELMo")
    mapped = _with_progress(progress, lambda: dataset.with_format("arrow").map(embedder, **kwargs))
    kept = dataset.format  # the input's format, with the new columns where it names its columns
    columns = None if kept["columns"] is None else [*kept["columns"], *embedder.features]
    return mapped.with_format(kept["type"], columns, kept["output_all_columns"], **kept["format_kwargs"])


def _check_num_proc(model, num_proc) -> None:
    """``ValueError`` for a ``num_proc`` that is no positive integer, or above 1 with a model off the CPU (CUDA
    cannot be used in a forked process)."""
    if num_proc is None:
        return
    check_positive("num_proc", num_proc)
    devices = {p.device.type for p in model.parameters()}
    if num_proc > 1 and devices - {"cpu"}:
        raise ValueError(
            f"num_proc={num_proc} runs the model in forked CPU processes, and this model is on {', '.join(devices)}: "
            "leave num_proc out (one process drives the GPU), or, for several GPUs, run `elmo embed --output_dir` "
            "under torchrun (or write_shards in each process)"
        )


def _with_progress(progress: bool, call: Callable):
    """``call()`` with `datasets`' progress bars as they are (``progress``), else off for the call."""
    from datasets.utils import logging as ds_logging

    if progress or not ds_logging.is_progress_bar_enabled():
        return call()
    ds_logging.disable_progress_bar()
    try:
        return call()
    finally:
        ds_logging.enable_progress_bar()


__all__ = [
    "VECTOR_DTYPES",
    "BatchEmbedder",
    "check_input",
    "check_positive",
    "DatasetInputError",
    "elmo_feature",
    "embed_dataset",
    "model_identity",
    "resolve_columns",
    "vectors_to_arrow",
]
