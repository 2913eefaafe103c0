"""The HDF5 file of ELMo vectors that ``elmo embed`` and ``ElmoEmbedder.embed_file`` write (AllenNLP's layout).

One float32 dataset per sentence, AllenNLP's ``sentence_to_index``, and the part files of a multi-process run merged
in input order (:func:`write_sentences`, :func:`merge_parts`). Every write goes through a guard that keeps write
errors away from HDF5 (which does not survive them) and reports them as [`EmbeddingFileError`]; callers write under
a temporary name (:func:`temp_name`) and rename the complete file.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterable, Iterator

# HDF5's metadata cache grows by default up to 32 MB with the number of datasets written (one per sentence);
# 1 MB keeps the memory flat, for writes ~10% slower in a loop that does nothing but write.
_HDF5_METADATA_CACHE_BYTES = 1 << 20


class EmbeddingFileError(OSError):
    """Writing the embedding file failed (a full disk, a quota, a file size limit); the message names the file."""


class HDF5Call:
    """Defers Ctrl-C and SIGTERM while HDF5 runs: HDF5 calls [`_GuardedFile`]'s Python methods, and an exception
    raised there by a signal handler would reach HDF5 as a failed write (which it does not survive). Use
    ``with HDF5_CALL:`` around each h5py operation on a guarded file; a signal handler hands its exception to
    [`interrupt`], which raises it at once outside such a block, else when the operation is done."""

    def __init__(self) -> None:
        self.depth = 0
        self.pending: BaseException | None = None

    def __enter__(self) -> None:
        self.depth += 1

    def __exit__(self, *exc_info) -> None:
        self.depth -= 1
        if self.depth == 0 and self.pending is not None and exc_info[0] is None:
            error, self.pending = self.pending, None
            raise error

    def interrupt(self, error: BaseException) -> None:
        """Raise ``error`` (from a signal handler) now, or after the HDF5 operation under way."""
        if self.depth:
            self.pending = self.pending or error
            return
        raise error


HDF5_CALL = HDF5Call()


class _GuardedFile:
    """A new binary file for h5py's ``fileobj`` driver that keeps write errors away from HDF5.

    HDF5 does not recover from a failed write (a full disk, a quota, a file size limit): the error comes out
    of the next dataset's close, where h5py can only print it (once per dataset, from ``__dealloc__``), the
    loop goes on, and closing the file afterwards segfaults. So the first failed write is remembered here,
    HDF5 is told that every write succeeded, and the caller calls [`check`] after each dataset and after
    closing the file, then deletes the file. Nothing is read back from the file once a write has failed.
    """

    def __init__(self, path: str, label: str) -> None:
        self.path, self.label = path, label
        self.error: OSError | None = None
        self._file = open(path, "xb+", buffering=0)  # noqa: SIM115  # x: never write into a file that exists

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        return self._file.seek(offset, whence)

    def tell(self) -> int:
        return self._file.tell()

    def read(self, size: int = -1) -> bytes:  # h5py takes an object with read and seek for a file
        return self._file.read(size)

    def readinto(self, buffer) -> int:
        return self._file.readinto(buffer)

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        size = len(view)
        if self.error is None:
            try:
                while view:  # an unbuffered write may write less than asked, e.g. up to a size limit
                    written = self._file.write(view)
                    if not written:
                        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                    view = view[written:]
            except OSError as err:
                self.error = err
        return size

    def truncate(self, size: int | None = None) -> int:
        if self.error is None:
            try:
                return self._file.truncate(size)
            except OSError as err:
                self.error = err
        return self.tell() if size is None else size

    def flush(self) -> None:  # unbuffered: nothing to do
        pass

    def close(self) -> None:
        self._file.close()

    def check(self) -> None:
        """Raise an [`EmbeddingFileError`] naming the output if a write has failed."""
        if self.error is not None:
            reason = self.error.strerror or str(self.error)
            raise EmbeddingFileError(
                f"could not write {self.label}: {reason} (errno {self.error.errno}); no file was left"
            )


def _create_hdf5(guard: _GuardedFile):
    """A new HDF5 file written through ``guard``, with a metadata cache of fixed size."""
    import h5py

    f = h5py.File(guard, "w")
    config = f.id.get_mdc_config()
    config.set_initial_size = True
    config.initial_size = config.max_size = _HDF5_METADATA_CACHE_BYTES
    config.min_size = min(config.min_size, _HDF5_METADATA_CACHE_BYTES)
    f.id.set_mdc_config(config)
    return f


# HDF5 names of the embed output besides the sentences' "0", "1"...: AllenNLP's index of sentences, and the list
# of sentences that a part file of a multi-process run holds instead (the merge turns it into the index).
SENTENCE_TO_INDEX = "sentence_to_index"
_PART_SENTENCES = "sentences"


def write_sentences(
    path: str,
    model,
    tokenizer,
    sentences: Iterable[str],
    output_type: str,
    batch_size: int,
    max_batch_words: int,
    progress: bool,
    total: int | None,
    attrs: dict,
    label: str | None = None,
    tokenized: bool = False,
    sentence_index: str = "json",
    embed=None,
) -> int:
    """Embed ``sentences`` into a new HDF5 file ``path``, in the layout of AllenNLP's ``allennlp elmo``.

    The file holds a float32 dataset ``str(i)`` for sentence ``i`` (0-based; its shape follows ``output_type``,
    see [`embed_corpus`]) whose attribute ``words`` is the sentence's words joined by single spaces, and:

    - ``sentence_index="json"``: AllenNLP's ``sentence_to_index``, a ``(1,)`` string dataset holding the JSON text
      ``{sentence: "i"}`` (the sentence is the stripped line; a repeated sentence maps to its last index, as
      AllenNLP's dict did). It holds every distinct sentence in memory until the end.
    - ``"list"``: a string dataset ``sentences`` with every sentence in input order (the part files of a
      multi-process run; [`merge_parts`] turns them into ``sentence_to_index``).
    - ``"none"``: neither (``--forget_sentences``, as AllenNLP's ``--forget-sentences``).

    Args:
        tokenized: split each sentence on whitespace only (``str.split``: the user's tokens, as AllenNLP and
            flair read lines), instead of with ``tokenizer``.
        embed: ``embed(word_lists) -> iterator of (index, array)``, indices counted from 0 in input order, for
            callers that batch themselves (the stateful AllenNLP-compatible embedder); default [`embed_corpus`]
            in length-bucketed batches.

    Streams: each batch's vectors go to the file as soon as the batch is done (datasets are named by sentence
    index, so their order of creation does not matter); only the words of sentences read but not yet embedded
    (one chunk) are held, and with ``"json"`` the index of sentences. A failed write (full disk) stops the run
    at once with an [`EmbeddingFileError`] naming ``label`` (default ``path``); the caller deletes ``path``.
    """
    import h5py
    import numpy as np

    from .embed_corpus import embed_corpus

    if sentence_index not in ("json", "list", "none"):
        raise ValueError(f"sentence_index must be 'json', 'list' or 'none', got {sentence_index!r}")
    guard = _GuardedFile(path, label or path)
    try:
        f = None  # a signal deferred while the file is created is raised as the block ends: close it then too
        try:
            with HDF5_CALL:
                f = _create_hdf5(guard)
            with HDF5_CALL:
                f.attrs.update(attrs)
                if sentence_index == "list":
                    listed = f.create_dataset(
                        _PART_SENTENCES, shape=(0,), maxshape=(None,), dtype=h5py.string_dtype(), chunks=(1024,)
                    )
            block: list[str] = []
            index_of: dict[str, str] = {}
            pending_words: dict[int, str] = {}  # read, not yet embedded

            def flush() -> None:
                with HDF5_CALL:
                    listed.resize((listed.shape[0] + len(block),))
                    listed[-len(block) :] = np.array(block, dtype=object)
                block.clear()
                guard.check()

            def words_of_each() -> Iterator[list[str]]:
                for index, sentence in enumerate(sentences):
                    sentence = sentence.strip()
                    words = sentence.split() if tokenized else tokenizer.tokenize(sentence)
                    pending_words[index] = " ".join(words)
                    if sentence_index == "json":
                        index_of[sentence] = str(index)
                    elif sentence_index == "list":
                        block.append(sentence)
                        if len(block) == 1024:
                            flush()
                    yield words

            if embed is None:
                results = embed_corpus(
                    model,
                    tokenizer,
                    words_of_each(),
                    output=output_type,
                    batch_size=batch_size,
                    max_batch_words=max_batch_words,
                    is_split_into_words=True,
                    progress=progress,
                    total=total,
                    ordered=False,
                )
            else:
                results = embed(words_of_each())
            count = 0
            for index, array in results:
                with HDF5_CALL:
                    dataset = f.create_dataset(str(index), data=array.astype(np.float32, copy=False))
                    dataset.attrs["words"] = pending_words.pop(index)
                guard.check()
                count += 1
            if block:
                flush()
            with HDF5_CALL:
                f.attrs["num_sentences"] = count
                if sentence_index == "json":
                    _write_sentence_to_index(f, index_of)
            guard.check()
        finally:
            if f is not None:
                with HDF5_CALL:
                    f.close()  # HDF5 saw no failed write, so this closes cleanly even after one
        guard.check()
    finally:
        guard.close()
    return count


def _write_sentence_to_index(f, index_of: dict[str, str]) -> None:
    """AllenNLP's ``sentence_to_index``: a ``(1,)`` variable-length string dataset holding ``json.dumps`` of
    ``{sentence: "i"}``; read it with ``json.loads(f["sentence_to_index"][0])``."""
    import json

    import h5py

    dataset = f.create_dataset(SENTENCE_TO_INDEX, shape=(1,), dtype=h5py.string_dtype())
    dataset[0] = json.dumps(index_of)


def merge_parts(parts: list[str], path: str, label: str | None = None) -> int:
    """Interleave part files into ``path``, in input order: dataset ``"k"`` of part ``r`` is sentence
    ``k * world + r`` (process ``r`` embedded sentences ``r, r + world, ...`` and numbered them 0, 1, ...).
    The parts' ``sentences`` lists become one ``sentence_to_index``."""
    import h5py

    world = len(parts)
    handles = [h5py.File(p, "r") for p in parts]
    try:
        total = sum(int(h.attrs["num_sentences"]) for h in handles)
        guard = _GuardedFile(path, label or path)
        try:
            out = None
            try:
                with HDF5_CALL:
                    out = _create_hdf5(guard)
                attrs = dict(handles[0].attrs)
                attrs["num_sentences"] = total
                with HDF5_CALL:
                    out.attrs.update(attrs)
                for i in range(total):
                    with HDF5_CALL:  # with its attribute "words"
                        handles[i % world].copy(str(i // world), out, name=str(i))
                    guard.check()
                if all(_PART_SENTENCES in h for h in handles):
                    # The index holds every distinct sentence anyway: read the lists whole, insert in input order.
                    listed = [h[_PART_SENTENCES].asstr()[()] for h in handles]
                    index_of = {str(listed[i % world][i // world]): str(i) for i in range(total)}
                    with HDF5_CALL:
                        _write_sentence_to_index(out, index_of)
                    guard.check()
            finally:
                if out is not None:
                    with HDF5_CALL:
                        out.close()
            guard.check()
        finally:
            guard.close()
    finally:
        for h in handles:
            h.close()
    return total


def remove_file(path: str) -> None:
    """Delete ``path`` if it exists."""
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


def temp_name(output: str, tag: str) -> str:
    """The hidden name ``.NAME.TAG.tmp`` beside ``output``, for writing it before the rename."""
    folder, name = os.path.split(os.path.abspath(output))
    return os.path.join(folder, f".{name}.{tag}.tmp")
