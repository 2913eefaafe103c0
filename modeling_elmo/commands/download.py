"""The released ELMo models by name: fetch AllenNLP's original files, check them, convert them once, cache the folder.

Command::

    elmo download NAME [--cache_dir DIR] [--base_url URL] [--force] [--disable_tqdm]
    elmo download --list

prints the converted folder's path on stdout; ``--model NAME`` of ``elmo embed`` and ``elmo similar`` does the same
on first use. From Python: :func:`download_released_model` (a released name to its folder) or
:func:`resolve_pretrained` (a released name to its folder; a folder or Hub id unchanged).

Each model is AllenNLP's ``options.json`` and HDF5 weights under one base URL (``ELMO_DOWNLOAD_BASE_URL`` or
``base_url`` replaces the public one, for a mirror). They are downloaded into ``CACHE/.downloads/NAME/`` through
``FILE.part`` files: an interrupted download (a dropped connection, Ctrl-C, a kill) resumes where it stopped, with an
HTTP ``Range`` request, in the same call (a few times) or the next one. A complete file must have the size the server
announced (``Content-Length``) and parse (JSON for the options, HDF5 for the weights); then the converter
(``modeling_elmo.commands.convert``, with all its checks) writes ``CACHE/NAME`` atomically, and the downloaded
files are deleted. Files that fail a check are deleted too, so that the next call fetches them anew; a failed call
never leaves a ``CACHE/NAME`` folder. A later call finds ``CACHE/NAME`` and makes no request at all.

``CACHE`` is ``ELMO_CACHE_DIR``, or ``modeling_elmo`` under the Hugging Face home (``HF_HOME``, by default
``~/.cache/huggingface``). A lock file ``CACHE/.NAME.download.lock`` (``flock``) serialises calls for one model: a
second call waits for the first and then uses its folder. The progress bars follow the Hugging Face switch
(``HF_HUB_DISABLE_PROGRESS_BARS``, ``transformers.utils.logging.disable_progress_bar()``). In offline mode
(``HF_HUB_OFFLINE=1``) only the cache is used.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import re
import shutil
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

try:
    import fcntl
except ImportError:  # not POSIX: no lock (the rest works)
    fcntl = None

BASE_URL_ENV = "ELMO_DOWNLOAD_BASE_URL"
CACHE_DIR_ENV = "ELMO_CACHE_DIR"
# AllenNLP's bucket; also served as https://allennlp.s3.amazonaws.com/models/elmo/
DEFAULT_BASE_URL = "https://s3-us-west-2.amazonaws.com/allennlp/models/elmo/"
_OPTIONS_MAX_BYTES = 1 << 20  # an options.json is a few hundred bytes
_WEIGHTS_MAX_BYTES = 4 << 30  # the largest released file (2x4096_512) is about 360 MB
_ATTEMPTS = 5  # per file and call: a dropped connection is resumed this many times if each try brought bytes
_CHUNK = 1 << 20


class DownloadError(OSError):
    """A released model could not be downloaded or converted; the message names the URL and the manual route."""


@dataclass(frozen=True)
class ReleasedModel:
    """One released model: its name, the paths of its two files under the base URL, and what it is."""

    name: str
    options: str
    weights: str
    description: str


def _allennlp(folder: str, description: str, name: str) -> ReleasedModel:
    return ReleasedModel(
        name, f"{folder}/elmo_{folder}_options.json", f"{folder}/elmo_{folder}_weights.hdf5", description
    )


# Sources: AllenNLP's ELMo page (https://allennlp.org/elmo), whose table lists Small, Medium, Original and
# Original (5.5B) with these files (all but 5.5B trained on the 1B Word Benchmark; 5.5B on Wikipedia and WMT news
# crawl, 5.5B tokens), and whose contributed models include PubMed. flair's ELMoEmbeddings (flairNLP/flair,
# flair/embeddings/legacy.py) names the same files small, medium, original, large (5.5B), pubmed and pt
# (Portuguese, contributed to AllenNLP's bucket); its names are accepted here as aliases.
RELEASED_MODELS: dict[str, ReleasedModel] = {
    model.name: model
    for model in (
        _allennlp(
            "2x1024_128_2048cnn_1xhighway", "English, 1B Word Benchmark; LSTM 1024/128, 1 highway, 13.6M", "small"
        ),
        _allennlp(
            "2x2048_256_2048cnn_1xhighway", "English, 1B Word Benchmark; LSTM 2048/256, 1 highway, 28.0M", "medium"
        ),
        _allennlp(
            "2x4096_512_2048cnn_2xhighway", "English, 1B Word Benchmark; LSTM 4096/512, 2 highway, 93.6M", "original"
        ),
        _allennlp(
            "2x4096_512_2048cnn_2xhighway_5.5B",
            "English, 5.5B tokens (Wikipedia + WMT news); LSTM 4096/512, 2 highway, 93.6M",
            "original-5.5B",
        ),
        ReleasedModel(
            "pubmed",
            "contributed/pubmed/elmo_2x4096_512_2048cnn_2xhighway_options.json",
            "contributed/pubmed/elmo_2x4096_512_2048cnn_2xhighway_weights_PubMed_only.hdf5",
            "English biomedical (PubMed), contributed; the original's size",
        ),
        ReleasedModel(
            "pt",
            "contributed/pt/elmo_pt_options.json",
            "contributed/pt/elmo_pt_weights.hdf5",
            "Portuguese, contributed (flair's 'pt')",
        ),
    )
}
ALIASES = {"large": "original-5.5B", "5.5B": "original-5.5B", "portuguese": "pt"}
_BY_LOWER_NAME = {name.lower(): name for name in [*RELEASED_MODELS, *ALIASES]}
_BY_LOWER_NAME |= {alias.lower(): target for alias, target in ALIASES.items()}


def canonical_name(name: str) -> str | None:
    """The released model ``name`` stands for (case-insensitive, aliases included), or None."""
    return _BY_LOWER_NAME.get(name.strip().lower())


def released_model_names() -> list[str]:
    """The names [`download_released_model`] accepts, aliases included."""
    return list(RELEASED_MODELS) + list(ALIASES)


def default_cache_dir() -> Path:
    """``ELMO_CACHE_DIR``, or ``HF_HOME/modeling_elmo`` (``~/.cache/huggingface/modeling_elmo`` by default)."""
    if os.environ.get(CACHE_DIR_ENV):
        return Path(os.environ[CACHE_DIR_ENV]).expanduser()
    from huggingface_hub import constants

    return Path(constants.HF_HOME) / "modeling_elmo"


def default_base_url() -> str:
    """``ELMO_DOWNLOAD_BASE_URL``, or AllenNLP's public bucket."""
    return os.environ.get(BASE_URL_ENV) or DEFAULT_BASE_URL


def model_urls(name: str, base_url: str | None = None) -> tuple[str, str]:
    """The ``(options, weights)`` URLs of a released model."""
    model = RELEASED_MODELS[_known(name)]
    base = (base_url or default_base_url()).rstrip("/") + "/"
    return base + model.options, base + model.weights


def _known(name: str) -> str:
    canonical = canonical_name(name)
    if canonical is None:
        raise ValueError(f"unknown released ELMo model {name!r}; known: {', '.join(released_model_names())}")
    return canonical


def _is_converted(folder: Path) -> bool:
    # The converter moves a folder into place only when it is complete; the files guard against a damaged one.
    return (folder / "config.json").is_file() and (folder / "model.safetensors").is_file()


def _manual_route(options_url: str, weights_url: str, target: Path) -> str:
    return (
        f"To install it by hand, download {options_url} and {weights_url}, then run `elmo convert --options_file "
        f"OPTIONS.json --weight_file WEIGHTS.hdf5 --output_dir {target}` (or give that folder to --model)"
    )


def download_released_model(
    name: str,
    *,
    cache_dir: str | os.PathLike | None = None,
    base_url: str | None = None,
    force: bool = False,
    progress: bool = True,
    timeout: float = 60.0,
) -> Path:
    """The folder of a released ELMo model, downloaded and converted on first use (see the module's docstring).

    Args:
        name: ``small``, ``medium``, ``original``, ``original-5.5B`` (``large``), ``pubmed``, ``pt``
            ([`released_model_names`]); case-insensitive.
        cache_dir: where converted models live (default [`default_cache_dir`]).
        base_url: where the original files are (default [`default_base_url`]).
        force: download and convert again even if the folder exists.
        progress: show progress bars (also subject to the Hugging Face switch).
        timeout: seconds without data after which a connection counts as lost.

    Returns:
        ``cache_dir/NAME`` (NAME the canonical name), which ``ElmoModel.from_pretrained`` and
        ``ElmoTokenizer.from_pretrained`` load.

    Raises:
        ValueError: ``name`` is not a released model.
        DownloadError: offline, a failed or refused download, a file that fails its checks or the converter's;
            the message names the URL and how to install the model by hand. No ``cache_dir/NAME`` is left.
    """
    canonical = _known(name)
    cache = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    target = cache / canonical
    if not force and _is_converted(target):
        return target
    options_url, weights_url = model_urls(canonical, base_url)
    manual = _manual_route(options_url, weights_url, target)
    from huggingface_hub import constants
    from huggingface_hub.utils import are_progress_bars_disabled

    # transformers' disable_progress_bar() turns huggingface_hub's off too: one switch for every bar below
    progress = progress and not are_progress_bars_disabled()
    if constants.is_offline_mode():
        raise DownloadError(
            f"the released ELMo model {canonical!r} is not in {cache} and offline mode is on (HF_HUB_OFFLINE). "
            + manual
        )
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise DownloadError(f"cannot create the ELMo cache folder {cache}: {err.strerror or err}") from err
    with _model_lock(cache, canonical):
        if not force and _is_converted(target):  # another call finished it while this one waited
            return target
        downloads = cache / ".downloads" / canonical
        if force:  # fresh files, not those of an earlier call
            _drop_downloads(downloads)
        downloads.mkdir(parents=True, exist_ok=True)
        model = RELEASED_MODELS[canonical]
        try:
            options = _fetch(
                options_url,
                downloads / Path(model.options).name,
                _OPTIONS_MAX_BYTES,
                _check_json,
                manual,
                progress,
                timeout,
            )
            weights = _fetch(
                weights_url,
                downloads / Path(model.weights).name,
                _WEIGHTS_MAX_BYTES,
                _check_hdf5,
                manual,
                progress,
                timeout,
            )
        except BaseException:
            with contextlib.suppress(OSError):  # empty folders only: partial files stay for resuming
                downloads.rmdir()
                downloads.parent.rmdir()
            raise
        from .convert import ConversionError, convert  # torch and the model: only when there is something to convert

        try:
            # overwrite: a folder here is a damaged or forced one (we hold the model's lock)
            with _bars_off(not progress):  # also transformers' "Writing model shards"
                convert(options, weights, target, overwrite=True, progress=progress)
        except ConversionError as err:
            _drop_downloads(downloads)  # wrong files: the next call fetches them anew
            raise DownloadError(
                f"the files of {canonical!r} downloaded from {options_url} and {weights_url} do not convert: {err} "
                "(they were deleted). " + manual
            ) from err
        except OSError as err:  # a full disk...: keep the downloads for the next call
            raise DownloadError(f"could not write {target}: {err}") from err
        _drop_downloads(downloads)
    return target


@contextlib.contextmanager
def _bars_off(off: bool) -> Iterator[None]:
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


def _drop_downloads(downloads: Path) -> None:
    """Delete one model's downloaded files, and the downloads folder if no other model's download is pending."""
    shutil.rmtree(downloads, ignore_errors=True)
    with contextlib.suppress(OSError):
        downloads.parent.rmdir()


def resolve_pretrained(name_or_path: str, **kwargs) -> str:
    """A released model's name → its converted folder (downloaded on first use); anything else unchanged.

    An existing path wins over a released name (a folder called ``small`` in the working directory stays that
    folder). Keyword arguments go to [`download_released_model`]. For ``--model``-style arguments of the commands.
    """
    if os.path.exists(name_or_path) or canonical_name(name_or_path) is None:
        return name_or_path
    return str(download_released_model(name_or_path, **kwargs))


# ---------------------------------------------------------------------------------------------
# Downloading one file
# ---------------------------------------------------------------------------------------------


def _check_json(path: Path) -> str | None:
    try:
        options = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        return f"not a JSON options file ({err})"
    return None if isinstance(options, dict) else "not a JSON options file (no object at the top)"


def _check_hdf5(path: Path) -> str | None:
    import h5py  # only the check needs it; h5py is a dependency of the converter anyway

    try:
        with h5py.File(path, "r"):
            pass
    except OSError as err:
        return f"not a readable HDF5 file ({err})"
    return None


_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")


def _fetch(
    url: str,
    dest: Path,
    max_bytes: int,
    check: Callable[[Path], str | None],
    manual: str,
    progress: bool,
    timeout: float,
) -> Path:
    """Download ``url`` to ``dest`` through ``dest.part`` (kept for resuming), check it, and return ``dest``.

    A ``dest`` left complete by an earlier call (which then failed later) is reused. ``dest.part.json`` records
    the URL, the announced size and the ETag of a partial file, so that a resumed request (``Range``, with
    ``If-Range``) continues the same file: a different URL, size or ETag starts again from zero.
    """
    if dest.is_file():
        return dest
    part = dest.with_name(dest.name + ".part")
    part_state = dest.with_name(dest.name + ".part.json")
    meta = _read_meta(part_state)
    if meta.get("url") != url:
        _remove(part, part_state)
        meta = {}
    from huggingface_hub.utils import tqdm  # obeys HF_HUB_DISABLE_PROGRESS_BARS and disable_progress_bars()

    bar = None
    attempts = 0
    try:
        while True:
            attempts += 1
            have = part.stat().st_size if part.exists() else 0
            headers = {"User-Agent": "modeling_elmo", "Accept-Encoding": "identity"}
            if have:
                headers["Range"] = f"bytes={have}-"
                if meta.get("etag"):
                    headers["If-Range"] = meta["etag"]
            try:
                response = urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=timeout)
            except urllib.error.HTTPError as err:
                if err.code == 416 and have:  # our partial file is not a prefix of theirs: start again
                    _remove(part, part_state)
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
                    if found is None or int(found.group(1)) != have or (have and total != meta.get("total")):
                        _remove(part, part_state)  # not the continuation of our file
                        meta = {}
                        if attempts < _ATTEMPTS:
                            continue
                        raise DownloadError(f"could not download {url}: the server resumed it inconsistently. {manual}")
                    mode = "ab"
                else:  # 200: the whole file (a server without Range support, or a changed file)
                    have, total, mode = 0, length, "wb"
                if total is not None and total > max_bytes:
                    raise DownloadError(f"refusing {url}: it has {total} bytes, more than {max_bytes} expected")
                meta = {"url": url, "total": total, "etag": response.headers.get("ETag")}
                part_state.write_text(json.dumps(meta), encoding="utf-8")
                if bar is None:
                    bar = tqdm(
                        total=total, initial=have, unit="B", unit_scale=True, desc=dest.name, disable=not progress
                    )
                else:
                    bar.reset(total=total)
                    bar.update(have)
                try:
                    received, lost = _stream(response, part, mode, max_bytes - have, bar)
                except DownloadError:
                    _remove(part, part_state)
                    raise
            size = part.stat().st_size
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
    problem = check(part)
    if problem is not None:
        _remove(part, part_state)
        raise DownloadError(f"the file downloaded from {url} is {problem}; it was deleted. {manual}")
    os.replace(part, dest)
    _remove(part_state)
    return dest


def _stream(response, part: Path, mode: str, room: int, bar) -> tuple[int, str | None]:
    """Append the response body to ``part``; ``(bytes received, why the connection was lost or None)``.

    Errors of the connection end the transfer (the caller resumes it); errors of the disk are raised.
    """
    received = 0
    read = getattr(response, "read1", response.read)  # read1: what has arrived, not a full chunk (resumable)
    with open(part, mode) as out:
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


def _read_meta(path: Path) -> dict:
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return meta if isinstance(meta, dict) else {}


def _remove(*paths: Path) -> None:
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


@contextlib.contextmanager
def _model_lock(cache: Path, name: str) -> Iterator[None]:
    """Hold ``cache/.NAME.download.lock`` (``flock``), waiting for another call that holds it.

    The file stays (an empty file): removing it while others wait would let two holders coexist. The kernel
    releases the lock of a killed process.
    """
    if fcntl is None:
        yield
        return
    path = cache / f".{name}.download.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0), 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"Waiting for another download of {name} (it holds {path})...", file=sys.stderr)
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


# ---------------------------------------------------------------------------------------------
# elmo download
# ---------------------------------------------------------------------------------------------


def _list_models(base_url: str | None) -> str:
    width = max(len(name) for name in RELEASED_MODELS)
    lines = []
    for name, model in RELEASED_MODELS.items():
        aliases = [alias for alias, target in ALIASES.items() if target == name]
        also = f" (also: {', '.join(aliases)})" if aliases else ""
        lines.append(f"{name:<{width}}  {model.description}{also}")
        lines.append(f"{'':<{width}}  {model_urls(name, base_url)[1]}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``elmo download``: prints the converted folder on stdout; ``error: ...`` on stderr and 1 on failure."""
    parser = argparse.ArgumentParser(
        prog="elmo download",
        description=(
            "Download a released ELMo model from AllenNLP (options.json + HDF5 weights), check it, convert it once "
            "into the cache, and print the folder (which --model, from_pretrained and the training commands take). "
            "An interrupted download resumes; a second call uses the cache without any request."
        ),
        epilog=f"Names: {', '.join(released_model_names())}. Environment: {CACHE_DIR_ENV} (cache folder), "
        f"{BASE_URL_ENV} (a mirror of {DEFAULT_BASE_URL}), HF_HUB_OFFLINE=1 (cache only).",
    )
    parser.add_argument("name", nargs="?", help="released model: small, medium, original, original-5.5B, pubmed, pt")
    parser.add_argument("--list", action="store_true", help="list the released models and their URLs")
    parser.add_argument("--cache_dir", "--cache-dir", help=f"cache folder (default: ${CACHE_DIR_ENV} or HF_HOME's)")
    parser.add_argument("--base_url", "--base-url", help=f"where the files are (default: ${BASE_URL_ENV} or AllenNLP)")
    parser.add_argument("--force", action="store_true", help="download and convert again even if cached")
    parser.add_argument("--disable_tqdm", action="store_true", help="no progress bars (transformers' flag name)")
    parser.add_argument("--no_progress", action="store_true", help=argparse.SUPPRESS)  # the first spelling
    args = parser.parse_args(argv)
    if args.list:
        print(_list_models(args.base_url))
        return 0
    if args.name is None:
        parser.error("give a model NAME (or --list)")
    try:
        folder = download_released_model(
            args.name,
            cache_dir=args.cache_dir,
            base_url=args.base_url,
            force=args.force,
            progress=not (args.disable_tqdm or args.no_progress),
        )
    except (ValueError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted: run the same command again to resume the download", file=sys.stderr)
        return 130
    print(folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
