"""The download core that the released models (``download.py``) and the ELMoForManyLangs ones
(``download_manylangs.py``) share: the cache, resumable checked downloads, and the locked download-and-convert flow.

[`download_and_convert`] gives ``CACHE/NAME``: a folder found there is checked cheaply (the config parses, the
safetensors header reads and fits the file, the tokenizer files are there) and returned without any request; a
damaged one is an error that says to use ``--force``. Otherwise, holding the lock file ``CACHE/.NAME.download.lock``
(``flock``; a second call waits for the first and then uses its folder; the file is removed on release, while still
held, so none stays behind), it downloads the files with [`fetch_file`] into ``CACHE/.downloads/NAME/``, converts
them into ``CACHE/NAME`` (the converter writes it atomically) and deletes them. Downloaded files that fail to unpack
or to convert are deleted too, so that the next call fetches them anew; a file that cannot be written (a full disk)
keeps them, and the message says that ``--force`` deletes them. A failed call never leaves a ``CACHE/NAME`` folder.

[`fetch_file`] downloads through ``FILE.part``: an interrupted download (a dropped connection, Ctrl-C, a kill)
resumes where it stopped, with an HTTP ``Range`` request, in the same call (a few times) or the next one, but only
when the server gave a validator (a strong ``ETag``, else ``Last-Modified``), sent back in ``If-Range`` and compared
with the answer's: without one, the download starts again from zero, so that two versions of a file are never
spliced. A complete file must have the size the server announced (``Content-Length``), pass its check (it parses)
and match its sha256 where one is recorded. A download must average ``ELMO_DOWNLOAD_MIN_RATE`` bytes/s (default
1024) over each ``timeout`` window, or it stops with an error, its partial file kept; the status line and headers of
each answer must arrive within ``timeout`` too.

Nothing outside ``CACHE`` is created, written or deleted: every folder below it is opened without following symbolic
links and every file operation is relative to such a folder's descriptor ([`CacheFolder`]); a symbolic link inside
the cache (``.downloads``, a ``.part`` file, the lock file) is refused with an error naming it, and so is a file to
write with another hard link or another owner. ``CACHE`` itself may be a symbolic link. A symbolic link at
``CACHE/NAME`` is read through when it leads to a sound model folder; when it does not, the error says so and that
``--force`` replaces it: ``--force`` then removes the link itself, never what it points to, and converts into a real
folder.

``CACHE`` is ``ELMO_CACHE_DIR``, or ``modeling_elmo`` under the Hugging Face home (``HF_HOME``, by default
``~/.cache/huggingface``). The progress bars follow the Hugging Face switch (``HF_HUB_DISABLE_PROGRESS_BARS``,
``transformers.utils.logging.disable_progress_bar()``). In offline mode (``HF_HUB_OFFLINE=1``) only the cache is used.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import http.client
import json
import os
import re
import shutil
import socket
import stat
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from .errors import ConversionError, DownloadError

try:
    import fcntl
except ImportError:  # not POSIX: no lock (the rest works)
    fcntl = None

CACHE_DIR_ENV = "ELMO_CACHE_DIR"
MIN_RATE_ENV = "ELMO_DOWNLOAD_MIN_RATE"
_ATTEMPTS = 5  # per file and call: a dropped connection is resumed this many times if each try brought bytes
_CHUNK = 1 << 20
# Bytes per second, averaged over each `timeout` window: a mirror trickling a byte now and then fails within a minute
# or two instead of taking hours; a slow but working link (tens of kB/s) passes.
_DEFAULT_MIN_RATE = 1024.0


def default_cache_dir() -> Path:
    """``ELMO_CACHE_DIR``, or ``HF_HOME/modeling_elmo`` (``~/.cache/huggingface/modeling_elmo`` by default)."""
    if os.environ.get(CACHE_DIR_ENV):
        return Path(os.environ[CACHE_DIR_ENV]).expanduser()
    from huggingface_hub import constants

    return Path(constants.HF_HOME) / "modeling_elmo"


def cache_path(cache_dir: str | os.PathLike | None) -> Path:
    """``cache_dir`` (``~`` expanded), or [`default_cache_dir`] for None."""
    return Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()


def _min_rate(value: float | None) -> float:
    """The minimum download rate in bytes/s: ``value``, else ``ELMO_DOWNLOAD_MIN_RATE``, else 1024 (0: none)."""
    if value is None:
        text = os.environ.get(MIN_RATE_ENV, "").strip()
        if not text:
            return _DEFAULT_MIN_RATE
        try:
            value = float(text)
        except ValueError:
            value = -1.0
        if not value >= 0:  # also NaN
            raise DownloadError(f"{MIN_RATE_ENV} must be a number of bytes per second (0: no minimum), got {text!r}")
    if not value >= 0:
        raise ValueError(f"min_rate must be a number of bytes per second >= 0, got {value!r}")
    return float(value)


def _damage(folder: Path) -> str | None:
    """Why a cached model folder is unusable, or None. Cheap: the config parses, the safetensors header reads and
    fits the file, the tokenizer files are there (loading the weights is the loader's job)."""
    if not folder.is_dir():
        return "it is not a folder"
    try:
        config = json.loads((folder / "config.json").read_bytes())
    except FileNotFoundError:
        return "config.json is missing"
    except (OSError, ValueError):
        config = None
    if not isinstance(config, dict):
        return "config.json is not a JSON object"
    for weights in _weight_files(folder):
        problem = _safetensors_damage(weights)
        if problem is not None:
            return problem
    for name in ("tokenizer_config.json", "tokenizer.json"):
        if not (folder / name).is_file():
            return f"{name} is missing"
    return _vocabulary_damage(folder, config)


def _vocabulary_damage(folder: Path, config: dict) -> str | None:
    """Why the vocabularies of an ELMoForManyLangs folder (``download_manylangs.py``) do not fit its config, or None:
    ``char_vocab.json`` lists its ``n_characters - 1`` characters (row 0 is padding) and ``vocab.txt`` its
    ``word_vocab_size`` words, one a line."""
    if config.get("char_vocabulary") == "manylangs":
        try:
            chars = json.loads((folder / "char_vocab.json").read_bytes())
        except FileNotFoundError:
            return "char_vocab.json is missing"
        except (OSError, ValueError):
            chars = None
        if not isinstance(chars, list) or len(chars) + 1 != config.get("n_characters"):
            return f"char_vocab.json does not list the {config.get('n_characters')} - 1 characters of config.json"
    words = config.get("word_vocab_size") or 0
    if words:
        try:
            data = (folder / "vocab.txt").read_bytes()
        except FileNotFoundError:
            return "vocab.txt is missing"
        except OSError as err:
            return f"vocab.txt cannot be read ({err.strerror or err})"
        lines = data.count(b"\n") + (bool(data) and not data.endswith(b"\n"))
        if lines != words:
            return f"vocab.txt has {lines} lines, not the {words} words of config.json"
    return None


def _weight_files(folder: Path) -> list[Path]:
    """The safetensors files of a folder: ``model.safetensors``, or the shards its index names (an LM head's folder
    is sharded: its softmax is a file of its own)."""
    index = folder / "model.safetensors.index.json"
    if not index.is_file():
        return [folder / "model.safetensors"]
    try:
        weight_map = json.loads(index.read_bytes())["weight_map"]
        names = sorted(set(weight_map.values()))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return [index]  # reported as having no safetensors header
    return [folder / Path(name).name for name in names]


def _safetensors_damage(path: Path) -> str | None:
    """Why ``path`` is not a whole safetensors file (8-byte header length, JSON header, data), or None."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            length = int.from_bytes(f.read(8), "little")
            if size < 8 or length > min(size - 8, 100 << 20):
                return f"{path.name} has no safetensors header"
            header = json.loads(f.read(length))
            ends = [entry["data_offsets"][1] for key, entry in header.items() if key != "__metadata__"]
            needed = 8 + length + max(ends, default=0)
    except FileNotFoundError:
        return f"{path.name} is missing"
    except (OSError, ValueError, AttributeError, KeyError, TypeError, IndexError):
        return f"{path.name} has no safetensors header"
    if size < needed:
        return f"{path.name} is cut short ({size} bytes, its header describes {needed})"
    return None


def _checked(folder: Path, canonical: str) -> Path:
    """``folder`` (a cached model) if it passes [`_damage`]'s check; else a [`DownloadError`] hinting ``--force``.

    A symbolic link there (the user's: the download never makes one) is read through; when it does not lead to a
    sound model folder, the message says that it is a link, and that ``--force`` replaces the link, not what it
    points to ([`download_and_convert`] removes the link itself).
    """
    problem = _damage(folder)
    if problem is None:
        return folder
    force = f"run `elmo download {canonical} --force`"
    if folder.is_symlink():
        why = f"what it points to is damaged ({problem})" if folder.exists() else "it points to nothing"
        raise DownloadError(
            f"the cached model {folder} is a symbolic link to {os.readlink(folder)}, and {why}: {force} to replace "
            "the link (not what it points to) with a fresh download"
        )
    raise DownloadError(f"the cached model {folder} is damaged ({problem}); {force} to download and convert it again")


def _gist(err: BaseException) -> str:
    """An unexpected error of a converter, as one line: its type and the start of its first line."""
    text = str(err).strip().splitlines()[0][:300] if str(err).strip() else ""
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def download_and_convert(
    canonical: str,
    cache: Path,
    *,
    what: str,
    not_converted: Callable[[Exception], str],
    manual: str,
    mirror_env: str,
    fetch: Callable[[CacheFolder, Transfer], object],
    convert: Callable[[object, CacheFolder, Path, Transfer], None],
    force: bool,
    progress: bool,
    timeout: float,
    min_rate: float | None,
) -> Path:
    """The flow every released model shares: ``cache/canonical`` checked if cached; else, under the model's lock,
    ``fetch(downloads, transfer)`` fills ``cache/.downloads/canonical`` (a [`CacheFolder`]) and returns what
    ``convert(fetched, downloads, target, transfer)`` turns into ``target``; the downloads are then deleted.

    ``what`` names the model in the offline message ("the released ELMo model"), ``not_converted`` gives the
    message of files that do not unpack or convert from the error; ``manual`` is the route by hand,
    ``mirror_env`` the variable that names a mirror (for the message of a too slow download).
    Whatever ``convert`` raises because of the files (a [`DownloadError`] of the unpacking, a ``ConversionError``,
    or any other error but an ``OSError`` or ``MemoryError``) deletes the downloads, so that the next call fetches
    them anew, and is reported as one ``DownloadError``; an ``OSError`` (a full disk) keeps them, and its message
    says that ``--force`` deletes them. With ``force``, a symbolic link at ``cache/canonical`` is removed (the link,
    never what it points to) once the files are downloaded, and the model is converted into a real folder there.
    """
    target = cache / canonical
    if not force and os.path.lexists(target):
        return _checked(target, canonical)
    from huggingface_hub import constants
    from huggingface_hub.utils import are_progress_bars_disabled

    # transformers' disable_progress_bar() turns huggingface_hub's off too: one switch for every bar below
    transfer = Transfer(
        manual=manual,
        progress=progress and not are_progress_bars_disabled(),
        timeout=timeout,
        min_rate=_min_rate(min_rate),
        force_hint=f"`elmo download {canonical} --force` deletes the downloaded files",
        mirror_env=mirror_env,
    )
    if constants.is_offline_mode():
        if force and os.path.lexists(target):
            raise DownloadError(
                f"--force downloads {canonical!r} again, which needs the network, and offline mode is on "
                f"(HF_HUB_OFFLINE); the cached model in {target} is kept"
            )
        raise DownloadError(f"{what} {canonical!r} is not in {cache} and offline mode is on (HF_HUB_OFFLINE). {manual}")
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise DownloadError(f"cannot create the ELMo cache folder {cache}: {err.strerror or err}") from err
    with CacheFolder.open_root(cache) as root, _model_lock(root, canonical):
        if not force and os.path.lexists(target):  # another call finished it while this one waited
            return _checked(target, canonical)
        if force:  # fresh files, not those of an earlier call
            _drop_downloads(root, canonical)
        with root.folder(".downloads") as all_downloads, all_downloads.folder(canonical) as downloads:
            try:
                fetched = fetch(downloads, transfer)
            except BaseException:
                with contextlib.suppress(OSError):  # empty folders only: partial files stay for resuming
                    all_downloads.rmdir(canonical)
                    root.rmdir(".downloads")
                raise
            if force:  # the user's link at CACHE/NAME goes (the link itself), now that there is a model to put there
                root.remove_link(canonical)
            root.refuse_link(canonical)  # one made since: the converter replaces a folder, never what a link points to
            try:
                # overwrite: a folder here is a forced one (we hold the model's lock)
                with progress_bars_off(not transfer.progress):  # also transformers' "Writing model shards"
                    convert(fetched, downloads, target, transfer)
            except (ConversionError, DownloadError) as err:
                failed = err
            except (OSError, MemoryError) as err:  # a full disk...: keep the downloads for the next call
                reason = err if isinstance(err, OSError) else _gist(err)
                raise DownloadError(
                    f"could not write {target}: {reason}; the downloaded files are kept for the next call "
                    f"({transfer.force_hint} and downloads them again)"
                ) from err
            except Exception as err:  # anything else the downloaded files make a converter raise
                failed = ConversionError(_gist(err))
                failed.__cause__ = err
            else:
                failed = None
        _drop_downloads(root, canonical)  # done, or wrong files: the next call fetches them anew
        if failed is not None:
            raise DownloadError(f"{not_converted(failed)}. {manual}") from failed
    return target


@contextlib.contextmanager
def progress_bars_off(off: bool) -> Iterator[None]:
    """Within the block, no transformers or huggingface_hub progress bars if ``off`` (restored after)."""
    if not off:
        yield
        return
    from transformers.utils import logging as hf_logging

    was_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_on:
            hf_logging.enable_progress_bar()


def _drop_downloads(root: CacheFolder, name: str) -> None:
    """Delete one model's downloaded files, and the downloads folder if no other model's download is pending."""
    if root.lstat(".downloads") is None:
        return
    with root.folder(".downloads", create=False) as all_downloads:
        all_downloads.remove_tree(name)
    with contextlib.suppress(OSError):
        root.rmdir(".downloads")


# ---------------------------------------------------------------------------------------------
# The cache's folders, without following symbolic links
# ---------------------------------------------------------------------------------------------

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)


class CacheFolder:
    """A folder inside the cache, opened without following symbolic links, and the file operations in it.

    Names are taken relative to the folder's descriptor (``dir_fd``), never as paths that could be re-resolved: a
    symbolic link planted in the cache (a folder, a ``.part`` file) is refused with a clear error, so nothing it
    points to is ever created, written or deleted. A file written must be a regular file of this user with no
    other hard link. The cache folder itself may be a symbolic link (the user's choice, a cache on another disk).
    """

    def __init__(self, path: Path, fd: int):
        self.path, self.fd = path, fd

    @classmethod
    def open_root(cls, cache: Path) -> CacheFolder:
        return cls(cache, os.open(cache, os.O_RDONLY | _DIRECTORY | _CLOEXEC))

    def __enter__(self) -> CacheFolder:
        return self

    def __exit__(self, *exc) -> None:
        os.close(self.fd)

    def lstat(self, name: str) -> os.stat_result | None:
        try:
            return os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def refusal(self, name: str, problem: str, hint: str = "delete it") -> DownloadError:
        return DownloadError(
            f"{self.path / name} {problem}: refusing to create, write or delete anything through it (the ELMo "
            f"cache holds only its own files); {hint}"
        )

    def refuse_link(self, name: str) -> None:
        """Raise a [`DownloadError`] if ``name`` is a symbolic link."""
        found = self.lstat(name)
        if found is not None and stat.S_ISLNK(found.st_mode):
            raise self.refusal(name, "is a symbolic link", "delete the link")

    def remove_link(self, name: str) -> None:
        """Unlink ``name`` if it is a symbolic link: the link itself goes, never what it points to."""
        found = self.lstat(name)
        if found is not None and stat.S_ISLNK(found.st_mode):
            os.unlink(name, dir_fd=self.fd)

    def folder(self, name: str, create: bool = True) -> CacheFolder:
        """The subfolder ``name`` (created if missing and ``create``), refused if it is a link or not a folder."""
        if create:
            with contextlib.suppress(FileExistsError):  # mkdir does not follow a link: one there exists
                os.mkdir(name, 0o777, dir_fd=self.fd)  # the umask decides, as Path.mkdir
        self.refuse_link(name)
        try:
            fd = os.open(name, os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC, dir_fd=self.fd)
        except NotADirectoryError:
            raise self.refusal(name, "is not a folder") from None
        except OSError as err:
            if err.errno == errno.ELOOP:  # made a link since the check above
                raise self.refusal(name, "is a symbolic link", "delete the link") from None
            raise DownloadError(f"cannot open {self.path / name}: {err.strerror or err}") from err
        return CacheFolder(self.path / name, fd)

    def problem(self, found: os.stat_result, writing: bool) -> str | None:
        """Why a file with status ``found`` may not be read (or written), or None."""
        if stat.S_ISLNK(found.st_mode):
            return "is a symbolic link"
        if not stat.S_ISREG(found.st_mode):
            return "is not a regular file"
        if writing and found.st_nlink != 1:
            return "has other hard links"
        if writing and hasattr(os, "geteuid") and found.st_uid != os.geteuid():
            return "belongs to another user"
        return None

    def size(self, name: str, hint: str) -> int:
        """The size of file ``name`` to be appended to (0 if missing); refused if [`problem`] says so."""
        found = self.lstat(name)
        if found is None:
            return 0
        problem = self.problem(found, writing=True)
        if problem is not None:
            raise self.refusal(name, problem, hint)
        return found.st_size

    def open(self, name: str, mode: str, hint: str):
        """File ``name`` as a binary file object: ``rb``, ``ab`` (created if missing) or ``wb`` (created or
        emptied, after the checks: a hard link is refused before anything is cut)."""
        flags = os.O_RDONLY if mode == "rb" else os.O_WRONLY | os.O_CREAT | os.O_APPEND
        try:  # O_NONBLOCK: a planted FIFO does not hang the open (it is refused below)
            fd = os.open(name, flags | _NOFOLLOW | _CLOEXEC | getattr(os, "O_NONBLOCK", 0), 0o644, dir_fd=self.fd)
        except OSError:  # ELOOP for a link, ENXIO for a FIFO...: say which
            found = self.lstat(name)
            problem = None if found is None else self.problem(found, mode != "rb")
            if problem is not None:
                raise self.refusal(name, problem, hint) from None
            raise
        problem = self.problem(os.fstat(fd), mode != "rb")
        if problem is not None:
            os.close(fd)
            raise self.refusal(name, problem, hint)
        if mode == "wb":
            os.ftruncate(fd, 0)
        return os.fdopen(fd, mode)

    def remove(self, *names: str) -> None:
        """Unlink files (a link itself, never what it points to); missing ones are fine."""
        for name in names:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=self.fd)

    def replace(self, source: str, destination: str) -> None:
        os.replace(source, destination, src_dir_fd=self.fd, dst_dir_fd=self.fd)

    def rmdir(self, name: str) -> None:
        os.rmdir(name, dir_fd=self.fd)

    def remove_tree(self, name: str) -> None:
        """Delete subfolder ``name`` and all it holds, walking by descriptors (links inside are unlinked, never
        followed); a link at ``name`` is refused."""
        found = self.lstat(name)
        if found is None:
            return
        self.refuse_link(name)
        if not stat.S_ISDIR(found.st_mode):
            raise self.refusal(name, "is not a folder")
        shutil.rmtree(name, dir_fd=self.fd, ignore_errors=True)  # what cannot go is fetched again or resumed


# ---------------------------------------------------------------------------------------------
# Downloading one file
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Transfer:
    """How one call fetches its files: the manual route and the ``--force`` hint (for messages), progress bars,
    the timeout (also the window of the minimum rate), the minimum rate in bytes/s, and the environment variable
    that names a mirror (for the message of a too slow download)."""

    manual: str
    progress: bool
    timeout: float
    min_rate: float
    force_hint: str
    mirror_env: str


class _TooSlow(Exception):
    """A window of the transfer brought less than the minimum rate; the message says how much it brought."""


def _sha256(file) -> str:
    digest = hashlib.sha256()
    while chunk := file.read(_CHUNK):
        digest.update(chunk)
    return digest.hexdigest()


def _validator(headers_or_meta) -> str | None:
    """What ``If-Range`` can name: a strong ETag, else a Last-Modified date; None if the server gave neither."""
    etag = headers_or_meta.get("ETag") or headers_or_meta.get("etag")
    if etag and not etag.startswith("W/"):  # a weak ETag does not vouch for the bytes
        return etag
    return headers_or_meta.get("Last-Modified") or headers_or_meta.get("last_modified") or None


_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")


def fetch_file(
    url: str,
    folder: CacheFolder,
    name: str,
    max_bytes: int,
    check: Callable[..., str | None],
    sha256: str | None,
    transfer: Transfer,
) -> Path:
    """Download ``url`` to ``folder/name`` through ``name.part`` (kept for resuming), check it, return its path.

    A ``name`` left complete by an earlier call (which then failed later) is reused. ``name.part.json`` records
    the URL, the announced size and the validator (ETag, else Last-Modified) of a partial file, so that a resumed
    request (``Range``, with ``If-Range``) continues the same file: a different URL, size or validator starts
    again from zero, and so does a partial file without a validator (it could be spliced with a changed file).
    The whole file must then parse (``check``) and match ``sha256`` when given.
    """
    manual, hint = transfer.manual, transfer.force_hint
    found = folder.lstat(name)
    if found is not None:
        problem = folder.problem(found, writing=False)
        if problem is not None:
            raise folder.refusal(name, problem, hint)
        return folder.path / name
    part, meta_name = name + ".part", name + ".part.json"
    meta = _read_meta(folder, meta_name, hint)
    if meta.get("url") != url:
        folder.remove(part, meta_name)
        meta = {}
    from huggingface_hub.utils import tqdm  # obeys HF_HUB_DISABLE_PROGRESS_BARS and disable_progress_bars()

    bar = None
    attempts = 0
    try:
        while True:
            attempts += 1
            have = folder.size(part, hint)
            if have and _validator(meta) is None:  # nothing tells whether the server's file is still ours
                folder.remove(part)
                have = 0
            headers = {"User-Agent": "modeling_elmo", "Accept-Encoding": "identity"}
            if have:
                headers["Range"] = f"bytes={have}-"
                headers["If-Range"] = _validator(meta)
            try:
                response = _open_within(urllib.request.Request(url, headers=headers), transfer.timeout)
            except _TooSlow as slow:  # headers trickling in: nothing of this answer was written
                kept = f"the {have} bytes received before are kept: " if have else ""
                raise DownloadError(
                    f"the download of {url} is too slow ({slow}); {kept}run the same command again, or use another "
                    f"mirror ({transfer.mirror_env}). {manual}"
                ) from None
            except urllib.error.HTTPError as err:
                if err.code == 416 and have:  # our partial file is not a prefix of theirs: start again
                    folder.remove(part, meta_name)
                    meta = {}
                    if attempts < _ATTEMPTS:
                        continue
                raise DownloadError(f"could not download {url}: HTTP {err.code} {err.reason}. {manual}") from None
            except (urllib.error.URLError, OSError, http.client.HTTPException) as err:
                reason = getattr(err, "reason", None) or err
                raise DownloadError(f"could not download {url}: {reason}. {manual}") from None
            with response:
                length = response.headers.get("Content-Length")
                length = int(length) if length and length.isdigit() else None
                if response.status == 206:
                    found = _CONTENT_RANGE.fullmatch(response.headers.get("Content-Range", "").strip())
                    total = int(found.group(3)) if found and found.group(3) != "*" else None
                    continues = found is not None and int(found.group(1)) == have
                    if continues and have:  # the same file: its size and validator (a server may ignore If-Range)
                        continues = total == meta.get("total") and _validator(response.headers) == _validator(meta)
                    if not continues:
                        folder.remove(part, meta_name)  # not the continuation of our file
                        meta = {}
                        if attempts < _ATTEMPTS:
                            continue
                        raise DownloadError(f"could not download {url}: the server resumed it inconsistently. {manual}")
                    mode = "ab"
                else:  # 200: the whole file (a server without Range support, or a changed file)
                    have, total, mode = 0, length, "wb"
                if total is not None and total > max_bytes:
                    raise DownloadError(f"refusing {url}: it has {total} bytes, more than {max_bytes} expected")
                meta = {
                    "url": url,
                    "total": total,
                    "etag": response.headers.get("ETag"),
                    "last_modified": response.headers.get("Last-Modified"),
                }
                with folder.open(meta_name, "wb", hint) as out:
                    out.write(json.dumps(meta).encode("utf-8"))
                if bar is None:
                    bar = tqdm(
                        total=total,
                        initial=have,
                        unit="B",
                        unit_scale=True,
                        desc=name,
                        disable=not transfer.progress,
                    )
                else:
                    bar.reset(total=total)
                    bar.update(have)
                try:
                    with folder.open(part, mode, hint) as out:
                        received, lost = _stream(response, out, max_bytes - have, bar, transfer)
                except _TooSlow as slow:
                    raise DownloadError(
                        f"the download of {url} is too slow ({slow}, less than the minimum of "
                        f"{transfer.min_rate:g} bytes/s ({MIN_RATE_ENV})); the {folder.size(part, hint)} bytes "
                        f"received are kept: run the same command again to resume it, or use another mirror "
                        f"({transfer.mirror_env}). {manual}"
                    ) from None
                except DownloadError:
                    folder.remove(part, meta_name)
                    raise
            size = folder.size(part, hint)
            if lost is None and total is not None and size != total:
                lost = f"{size} of {total} bytes arrived"
            if lost is None:
                break
            if received == 0 or attempts >= _ATTEMPTS:  # no progress: do not hammer the server
                raise DownloadError(
                    f"the download of {url} was interrupted ({lost}) after {size} bytes; run the same command "
                    f"again to resume it. {manual}"
                )
    finally:
        if bar is not None:
            bar.close()
    with folder.open(part, "rb", hint) as whole:
        problem = check(whole)
        if problem is None and sha256 is not None:
            whole.seek(0)
            digest = _sha256(whole)
            if digest != sha256.lower():
                problem = f"not the released file (its sha256 {digest} is not the recorded sha256 {sha256})"
    if problem is not None:
        folder.remove(part, meta_name)
        raise DownloadError(f"the file downloaded from {url} is {problem}; it was deleted. {manual}")
    folder.replace(part, name)
    folder.remove(meta_name)
    return folder.path / name


def _open_within(request: urllib.request.Request, timeout: float):
    """``urlopen(request, timeout=timeout)`` whose status line and headers must all arrive within ``timeout``
    seconds of the call, or [`_TooSlow`]; redirects included.

    The socket's timeout bounds each read, not the answer: a server sending one byte of its headers every 20 s
    would hold the call for hours. A timer shuts the connection's socket down at the deadline, which ends a read
    that waits at once, TLS handshake included (a connection made after it is shut down as soon as it exists;
    making one takes at most ``timeout``). The body is [`_stream`]'s to bound (the minimum rate).
    """
    guard = threading.Lock()
    # A duplicate descriptor of each connection's socket: TLS moves the socket to a new object (the first one's
    # descriptor is then gone), and one that stays ours cannot be reused for another file once the request closes.
    sockets: list[socket.socket] = []
    state = {"expired": False, "answered": False}

    def shut(sock: socket.socket) -> None:
        with contextlib.suppress(OSError):  # ends the blocked read on the shared socket
            sock.shutdown(socket.SHUT_RDWR)

    class Watched(http.client.HTTPConnection):
        def connect(self) -> None:  # the TCP connection (also under HTTPS's, which then shakes hands on it)
            super().connect()
            with guard:
                sockets.append(self.sock.dup())
                if state["expired"]:
                    shut(sockets[-1])

    class WatchedHTTPS(http.client.HTTPSConnection, Watched):  # Watched.connect runs inside HTTPS's connect
        pass

    class HTTPHandler(urllib.request.HTTPHandler):
        def http_open(self, req):
            return self.do_open(Watched, req)

    class HTTPSHandler(urllib.request.HTTPSHandler):
        def https_open(self, req):
            return self.do_open(WatchedHTTPS, req)

    def expire() -> None:
        with guard:
            if not state["answered"]:
                state["expired"] = True
                for sock in sockets:
                    shut(sock)

    timer = threading.Timer(timeout, expire)
    timer.daemon = True
    timer.start()
    response = None
    try:
        response = urllib.request.build_opener(HTTPHandler, HTTPSHandler).open(request, timeout=timeout)
    except (OSError, http.client.HTTPException):  # URLError and HTTPError are OSErrors
        if not state["expired"]:
            raise
    finally:
        timer.cancel()
        with guard:
            state["answered"] = True
            for sock in sockets:
                sock.close()
    if state["expired"]:  # the error of a shut socket, or headers cut short by it: not an answer
        if response is not None:
            response.close()
        raise _TooSlow(f"its status line and headers did not arrive within {timeout:g} s")
    return response


def _stream(response, out, room: int, bar, transfer: Transfer) -> tuple[int, str | None]:
    """Append the response body to ``out``; ``(bytes received, why the connection was lost or None)``.

    Errors of the connection end the transfer (the caller resumes it); errors of the disk are raised, and so is
    [`_TooSlow`] when a ``timeout`` window brings less than ``min_rate`` bytes/s on average.
    """
    received = 0
    read = getattr(response, "read1", response.read)  # read1: what has arrived, not a full chunk (resumable)
    window_start, window_bytes = time.monotonic(), 0
    while True:
        try:
            chunk = read(_CHUNK)
        except (OSError, http.client.HTTPException) as err:  # reset, timeout, IncompleteRead
            return received, f"{type(err).__name__}: {err}"
        if not chunk:
            return received, None
        received += len(chunk)
        if received > room:
            raise DownloadError(f"refusing {response.url}: the server sends more bytes than expected")
        out.write(chunk)
        bar.update(len(chunk))
        window_bytes += len(chunk)
        elapsed = time.monotonic() - window_start
        if elapsed >= transfer.timeout:
            if window_bytes < transfer.min_rate * elapsed:
                raise _TooSlow(f"{window_bytes} bytes in the last {elapsed:.1f} s")
            window_start, window_bytes = time.monotonic(), 0


def _read_meta(folder: CacheFolder, name: str, hint: str) -> dict:
    try:
        with folder.open(name, "rb", hint) as f:
            meta = json.loads(f.read(1 << 16).decode("utf-8"))
    except (FileNotFoundError, ValueError):  # UnicodeDecodeError is a ValueError
        return {}
    return meta if isinstance(meta, dict) else {}


@contextlib.contextmanager
def _model_lock(root: CacheFolder, name: str) -> Iterator[None]:
    """Hold ``CACHE/.NAME.download.lock`` (``flock``), waiting for another call that holds it.

    The file is removed on release, while still locked, so that no call leaves it behind. A call that waited on
    the removed file sees, once it holds the lock, that its file is no longer the one at the path, and locks the
    one there (creating it if needed): two holders never coexist. The kernel releases the lock of a killed process;
    the file it leaves is reused by the next call, and removed by it.
    """
    if fcntl is None:
        yield
        return
    path = root.path / f".{name}.download.lock"
    waited = False
    while True:
        try:
            fd = os.open(path.name, os.O_RDWR | os.O_CREAT | _NOFOLLOW | _CLOEXEC, 0o644, dir_fd=root.fd)
        except OSError:
            root.refuse_link(path.name)  # a planted link: say so
            raise
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if not waited:
                    print(f"Waiting for another download of {name} (it holds {path})...", file=sys.stderr)
                    waited = True
                fcntl.flock(fd, fcntl.LOCK_EX)
            held, current = os.fstat(fd), root.lstat(path.name)
        except BaseException:
            os.close(fd)
            raise
        if current is not None and (current.st_dev, current.st_ino) == (held.st_dev, held.st_ino):
            break
        os.close(fd)  # the holder removed this file on release: lock the one at the path now
    try:
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path.name, dir_fd=root.fd)  # still held: whoever waits on this file tries the new one
        os.close(fd)  # releases the lock
