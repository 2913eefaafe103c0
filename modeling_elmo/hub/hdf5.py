"""Reading an untrusted HDF5 file: what it holds, and whether each dataset may be read.

The original weights (``convert.py``) and the released softmax (``convert_softmax.py``) are HDF5 files from the
internet. Both converters open them with [`open_hdf5`], list their datasets with [`walk_hdf5`] and refuse, by name and
before any array is read, everything [`storage_problems`] finds: links (which could point at any HDF5 file on the
machine), external or virtual storage, non-float types, unwritten storage.
"""

from __future__ import annotations

import math
import os

import h5py

from .errors import ConversionError, quote

_TYPE_NAMES = {"c": "complex", "i": "integer", "u": "integer", "b": "bool", "S": "string", "U": "string"}


def open_hdf5(path: str | os.PathLike) -> h5py.File:
    """``h5py.File(path, "r")``, or a [`ConversionError`] naming the file if it is no readable HDF5."""
    try:
        return h5py.File(os.fspath(path), "r")
    except OSError as err:
        raise ConversionError(f"cannot read {os.fspath(path)} as HDF5 (truncated or not an HDF5 file?): {err}") from err


def walk_hdf5(handle: h5py.File) -> tuple[dict[str, h5py.Dataset], list[str]]:
    """Every dataset of an open HDF5 file by path, and the problems found on the way (links, other objects).

    Soft and external links are refused, not followed: either could point at any HDF5 file on the machine.
    Each group is walked once, so hard links that loop back to a parent end the walk.
    """
    datasets: dict[str, h5py.Dataset] = {}
    problems: list[str] = []
    seen = {handle.id}
    stack = [("", handle)]
    while stack:
        prefix, group = stack.pop()
        for name in group:
            path = prefix + name
            link = group.get(name, getlink=True)
            if isinstance(link, h5py.SoftLink):
                problems.append(f"{quote(path)} is a soft link (to {quote(link.path)})")
            elif isinstance(link, h5py.ExternalLink):
                problems.append(f"{quote(path)} is an external link (to file {quote(link.filename)})")
            elif not isinstance(link, h5py.HardLink):
                problems.append(f"{quote(path)} is a link of an unsupported kind")
            else:
                item = group.get(name)
                if isinstance(item, h5py.Dataset):
                    datasets[path] = item
                elif isinstance(item, h5py.Group):
                    if item.id not in seen:
                        seen.add(item.id)
                        stack.append((path + "/", item))
                else:
                    problems.append(f"{quote(path)} is neither a dataset nor a group")
    return datasets, problems


def storage_problem(path: str, dataset: h5py.Dataset) -> str | None:
    """Why ``dataset`` must not be read, or None: it must be a plain float array whose bytes are all in the file.

    Checked on the metadata only, before anything is allocated. A contiguous dataset must store all its bytes;
    a chunked one all its chunks (a compressed chunk stores fewer bytes than it holds, so the chunks are
    counted, not the bytes; what they decompress to is bounded by the shape, which the caller checks).
    """
    try:
        if dataset.external:
            return f"dataset {quote(path)} is stored in an external file"
        if dataset.is_virtual:
            return f"dataset {quote(path)} is a virtual dataset (its data lives in other datasets or files)"
        dtype = dataset.dtype
        if dtype.kind != "f":
            if dtype.names:
                kind = "compound"
            elif h5py.check_string_dtype(dtype) is not None:
                kind = "string"
            elif h5py.check_vlen_dtype(dtype) is not None:
                kind = "variable-length"
            elif h5py.check_ref_dtype(dtype) is not None:
                kind = "reference"
            else:
                kind = _TYPE_NAMES.get(dtype.kind, "non-numeric")
            return f"dataset {quote(path)} holds {kind} values ({dtype.str}), not floating-point numbers"
        if dataset.shape is None:
            return f"dataset {quote(path)} holds no array (an empty dataspace)"
        layout = dataset.id.get_create_plist().get_layout()
        if layout not in (h5py.h5d.COMPACT, h5py.h5d.CONTIGUOUS, h5py.h5d.CHUNKED):
            return f"dataset {quote(path)} has an unsupported storage layout ({layout})"
        if layout == h5py.h5d.CONTIGUOUS and dataset.id.get_storage_size() < dataset.nbytes:
            stored, declared = dataset.id.get_storage_size(), dataset.nbytes
            return f"dataset {quote(path)} is not fully written: {stored} of its {declared} bytes are stored"
        if layout == h5py.h5d.CHUNKED:
            expected = math.prod(-(-size // chunk) for size, chunk in zip(dataset.shape, dataset.chunks, strict=True))
            stored = dataset.id.get_num_chunks()
            if stored < expected:
                return f"dataset {quote(path)} is not fully written: {stored} of its {expected} chunks are stored"
    except (TypeError, ValueError, OSError, KeyError) as err:  # a type or layout h5py cannot describe
        return f"dataset {quote(path)} cannot be inspected ({err})"
    return None


def storage_problems(datasets: dict[str, h5py.Dataset]) -> list[str]:
    """[`storage_problem`] of each dataset that has one, in the order of their paths."""
    return [problem for problem in (storage_problem(path, datasets[path]) for path in sorted(datasets)) if problem]


__all__ = ["open_hdf5", "storage_problem", "storage_problems", "walk_hdf5"]
