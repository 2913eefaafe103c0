"""The errors of ``hub/``, and how their messages name what an untrusted file holds.

[`ConversionError`] says that the inputs of a conversion are invalid (``convert.py``, ``convert_softmax.py``,
``convert_manylangs.py``, ``hdf5.py``); [`DownloadError`] that a released model could not be downloaded or converted
(``download_core.py``, ``download.py``, ``download_manylangs.py``). This module imports nothing but the standard
library, so the download flow catches a ``ConversionError`` without importing the converter (torch, the model).

A name read from a hostile file may be megabytes long, and a file may hold thousands of problems: [`quote`] and
[`listing`] keep each error one short line.
"""

from __future__ import annotations


class ConversionError(ValueError):
    """The inputs cannot be converted; the message says why."""


class DownloadError(OSError):
    """A released model could not be downloaded or converted; the message names the URL and the manual route."""


def quote(name: str, limit: int = 100) -> str:
    """``repr`` of a name read from a file (a dataset path, a zip entry), cut to ``limit`` characters."""
    return repr(name if len(name) <= limit else name[:limit] + "...")


def listing(items: list[str], limit: int = 10) -> str:
    """``"a; b; c"``, at most ``limit`` items and then ``"and N more"``: an error stays one short line."""
    shown = "; ".join(items[:limit])
    return shown + (f"; and {len(items) - limit} more" if len(items) > limit else "")


__all__ = ["ConversionError", "DownloadError", "listing", "quote"]
