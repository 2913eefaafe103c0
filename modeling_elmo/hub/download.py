"""The released ELMo models by name: fetch AllenNLP's original files, check them, convert them once, cache the folder.

:func:`download_released_model` gives a released name's folder, :func:`resolve_pretrained` the same for a released
name and leaves a folder or Hub id unchanged; ``elmo download NAME`` (``modeling_elmo.commands.download``) prints it,
and ``--model NAME`` of the commands does the same on first use.

Each model is AllenNLP's ``options.json`` and HDF5 weights under one base URL (``ELMO_DOWNLOAD_BASE_URL`` or
``base_url`` replaces the public one, for a mirror). They are downloaded into ``CACHE/.downloads/NAME/`` through
``FILE.part`` files: an interrupted download (a dropped connection, Ctrl-C, a kill) resumes where it stopped, with an
HTTP ``Range`` request, in the same call (a few times) or the next one. A complete file must have the size the server
announced (``Content-Length``) and parse (JSON for the options, HDF5 for the weights); then the converter
(``convert.py``, with all its checks) writes ``CACHE/NAME`` atomically, and the downloaded
files are deleted. Files that fail a check are deleted too, so that the next call fetches them anew; a failed call
never leaves a ``CACHE/NAME`` folder. A later call finds ``CACHE/NAME``, checks it cheaply (the config parses, the
safetensors header reads and fits the file, the tokenizer files are there) and makes no request at all; a damaged
folder is an error that says to use ``--force``.

A partial file is resumed only when the server gave a validator (a strong ``ETag``, else ``Last-Modified``), sent
back in ``If-Range`` and compared with the answer's: without one, the download starts again from zero, so that two
versions of a file are never spliced. Where the model table records a file's sha256, the whole file must match it
(the released files' hashes are not recorded yet). A download must average ``ELMO_DOWNLOAD_MIN_RATE`` bytes/s
(default 1024) over each ``timeout`` window (60 s), or it stops with an error, its partial file kept: a trickling
mirror fails in a minute or two instead of hours. The status line and headers of each answer must arrive within
``timeout`` too (a timer shuts the socket down at the deadline), or the same kind of error ends the call.

Nothing outside ``CACHE`` is created, written or deleted: every folder below it is opened without following
symbolic links and every file operation is relative to such a folder's descriptor (``_CacheFolder``); a symbolic
link inside the cache (``.downloads``, a ``.part`` file, a forced ``CACHE/NAME``) is refused with an error naming
it, and so is a file to write with another hard link or another owner. ``CACHE`` itself may be a symbolic link.

``CACHE`` is ``ELMO_CACHE_DIR``, or ``modeling_elmo`` under the Hugging Face home (``HF_HOME``, by default
``~/.cache/huggingface``). A lock file ``CACHE/.NAME.download.lock`` (``flock``) serialises calls for one model: a
second call waits for the first and then uses its folder. The progress bars follow the Hugging Face switch
(``HF_HUB_DISABLE_PROGRESS_BARS``, ``transformers.utils.logging.disable_progress_bar()``). In offline mode
(``HF_HUB_OFFLINE=1``) only the cache is used.
"""

from __future__ import annotations

import codecs
import contextlib
import dataclasses
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

try:
    import fcntl
except ImportError:  # not POSIX: no lock (the rest works)
    fcntl = None

BASE_URL_ENV = "ELMO_DOWNLOAD_BASE_URL"
CACHE_DIR_ENV = "ELMO_CACHE_DIR"
MIN_RATE_ENV = "ELMO_DOWNLOAD_MIN_RATE"
# AllenNLP's bucket; also served as https://allennlp.s3.amazonaws.com/models/elmo/
DEFAULT_BASE_URL = "https://s3-us-west-2.amazonaws.com/allennlp/models/elmo/"
_OPTIONS_MAX_BYTES = 1 << 20  # an options.json is a few hundred bytes
_WEIGHTS_MAX_BYTES = 4 << 30  # the largest released file (2x4096_512) is about 360 MB; its softmax 1.6 GB
_VOCAB_MAX_BYTES = 256 << 20  # a vocabulary of the LM heads: 793,471 words, a few MB
_ATTEMPTS = 5  # per file and call: a dropped connection is resumed this many times if each try brought bytes
_CHUNK = 1 << 20
# Bytes per second, averaged over each `timeout` window: a mirror trickling a byte now and then fails within a minute
# or two instead of taking hours; a slow but working link (tens of kB/s) passes.
_DEFAULT_MIN_RATE = 1024.0


class DownloadError(OSError):
    """A released model could not be downloaded or converted; the message names the URL and the manual route."""


@dataclass(frozen=True)
class ReleasedModel:
    """One released model: its name, the paths of its two files under the base URL, what it is, and optionally the
    sha256 of each file (checked after the download when given).

    An LM head (``original-lm``...) also names its softmax weights (HDF5 ``softmax/W``, ``softmax/b``) and the
    vocabulary whose lines are the softmax's rows; it converts to an ``ElmoForPreTraining`` folder.
    """

    name: str
    options: str
    weights: str
    description: str
    # Not recorded for the released files yet (they could not be fetched where this table was written): without
    # them a download is checked by its announced size, its ETag/Last-Modified on resume, and its parse.
    options_sha256: str | None = None
    weights_sha256: str | None = None
    softmax: str | None = None
    vocab: str | None = None


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


def _with_lm_head(base: str, name: str, softmax: str, vocab: str, description: str) -> ReleasedModel:
    model = RELEASED_MODELS[base]
    return ReleasedModel(name, model.options, model.weights, description, softmax=softmax, vocab=vocab)


# The LM heads (issue 28): the biLM of "original"/"original-5.5B" with the softmax weights and vocabularies that
# LAMA (download_models.sh) and AllenNLP's unmerged elmo_perplexities.py fetch (see SOFTMAX_FACTS in the docs).
RELEASED_MODELS |= {
    model.name: model
    for model in (
        _with_lm_head(
            "original",
            "original-lm",
            "2x4096_512_2048cnn_2xhighway/elmo_2x4096_512_2048cnn_2xhighway_softmax_weights.hdf5",
            "vocab-2016-09-10.txt",
            "the original with its language-model softmax (793,471 words) and vocabulary, for scoring",
        ),
        _with_lm_head(
            "original-5.5B",
            "original-5.5B-lm",
            "2x4096_512_2048cnn_2xhighway_5.5B/elmo_2x4096_512_2048cnn_2xhighway_5.5B_softmax_weights.hdf5",
            "2x4096_512_2048cnn_2xhighway_5.5B/tf_checkpoint/vocab-enwiki-news-500000.txt",
            "original-5.5B with its language-model softmax and vocabulary, for scoring",
        ),
    )
}
ALIASES = {"large": "original-5.5B", "5.5B": "original-5.5B", "portuguese": "pt", "large-lm": "original-5.5B-lm"}
_BY_LOWER_NAME = {name.lower(): name for name in [*RELEASED_MODELS, *ALIASES]}
_BY_LOWER_NAME |= {alias.lower(): target for alias, target in ALIASES.items()}


def canonical_name(name: str) -> str | None:
    """The released model ``name`` stands for (case-insensitive, aliases included), or None. The 44 ELMoForManyLangs
    languages (``de``, ``German``, ``manylangs-de``) stand for ``manylangs-ISO`` (``download_manylangs.py``)."""
    from .download_manylangs import manylangs_name

    return _BY_LOWER_NAME.get(name.strip().lower()) or manylangs_name(name)


def released_model_names() -> list[str]:
    """The names [`download_released_model`] accepts, aliases included."""
    return list(RELEASED_MODELS) + list(ALIASES)


def close_released_name(name: str) -> str | None:
    """The released model's name (or alias) that ``name`` is most likely a misspelling of, or None.

    Only for a bare name (no ``/``, so not a Hub id ``owner/name``) that is no released name itself: ``orignal`` ->
    ``original``, ``smal`` -> ``small``. No network: the commands suggest the name before any lookup.
    """
    import difflib

    if "/" in name or canonical_name(name) is not None:
        return None
    names = {known.lower(): known for known in released_model_names()}
    match = difflib.get_close_matches(name.strip().lower(), list(names), n=1, cutoff=0.75)
    return names[match[0]] if match else None


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
        raise ValueError(
            f"unknown released ELMo model {name!r}; known: {', '.join(released_model_names())}, and the 44 "
            "ELMoForManyLangs languages by ISO code or English name (elmo download --list)"
        )
    return canonical


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
    """``folder`` (a cached model) if it passes [`_damage`]'s check; else a [`DownloadError`] hinting ``--force``."""
    problem = _damage(folder)
    if problem is not None:
        raise DownloadError(
            f"the cached model {folder} is damaged ({problem}); run `elmo download {canonical} --force` to "
            "download and convert it again"
        )
    return folder


def lm_head_urls(name: str, base_url: str | None = None) -> tuple[str, str] | None:
    """The ``(softmax, vocabulary)`` URLs of a released LM head, or None for a model without one."""
    model = RELEASED_MODELS[_known(name)]
    if model.softmax is None:
        return None
    base = (base_url or default_base_url()).rstrip("/") + "/"
    return base + model.softmax, base + model.vocab


def _fetch_lm_head(model: ReleasedModel, base_url: str | None, downloads, transfer) -> dict:
    """Download an LM head's softmax and vocabulary (same resumable path); the converter's keyword arguments."""
    urls = lm_head_urls(model.name, base_url)
    if urls is None:
        return {}
    softmax_url, vocab_url = urls
    lm_manual = (
        f"{transfer.manual}, adding --softmax_weight_file SOFTMAX.hdf5 --vocab_file VOCAB.txt with the files "
        f"{softmax_url} and {vocab_url}"
    )
    lm_transfer = dataclasses.replace(transfer, manual=lm_manual)
    softmax = _fetch(softmax_url, downloads, Path(model.softmax).name, _WEIGHTS_MAX_BYTES, _check_hdf5, None,
                     lm_transfer)  # fmt: skip
    vocab = _fetch(vocab_url, downloads, Path(model.vocab).name, _VOCAB_MAX_BYTES, _check_text, None,
                   lm_transfer)  # fmt: skip
    return {"softmax_weight_file": softmax, "vocab_file": vocab}


def _manual_route(options_url: str, weights_url: str, target: Path) -> str:
    return (
        f"To install it by hand, download {options_url} and {weights_url}, then run `elmo convert --options_file "
        f"OPTIONS.json --weight_file WEIGHTS.hdf5 --output_dir {target}` (or give that folder to --model)"
    )


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


def download_released_model(
    name: str,
    *,
    cache_dir: str | os.PathLike | None = None,
    base_url: str | None = None,
    force: bool = False,
    progress: bool = True,
    timeout: float = 60.0,
    min_rate: float | None = None,
) -> Path:
    """The folder of a released ELMo model, downloaded and converted on first use (see the module's docstring).

    Args:
        name: ``small``, ``medium``, ``original``, ``original-5.5B`` (``large``), ``pubmed``, ``pt``, and the LM heads
            ``original-lm``, ``original-5.5B-lm`` ([`released_model_names`]); case-insensitive.
        cache_dir: where converted models live (default [`default_cache_dir`]).
        base_url: where the original files are (default [`default_base_url`]).
        force: download and convert again even if the folder exists.
        progress: show progress bars (also subject to the Hugging Face switch).
        timeout: seconds without data after which a connection counts as lost; also the window over which
            ``min_rate`` is measured.
        min_rate: bytes per second a download must average over each ``timeout`` window, or it stops with an
            error (the partial file is kept for the next call); default ``ELMO_DOWNLOAD_MIN_RATE`` or 1024;
            0 for no minimum.

    Returns:
        ``cache_dir/NAME`` (NAME the canonical name), which ``ElmoModel.from_pretrained`` and
        ``ElmoTokenizer.from_pretrained`` load.

    Raises:
        ValueError: ``name`` is not a released model.
        DownloadError: offline, a failed, refused or too slow download, a file that fails its checks or the
            converter's, a damaged cached folder (the message says to use ``force``), a symbolic link inside the
            cache; the message names the URL and how to install the model by hand. No ``cache_dir/NAME`` is left,
            and nothing outside ``cache_dir`` is written or deleted.
    """
    canonical = _known(name)
    if canonical not in RELEASED_MODELS:  # one of the 44 ELMoForManyLangs languages: an NLPL zip
        from .download_manylangs import download_manylangs

        return download_manylangs(
            canonical,
            cache_dir=cache_dir,
            base_url=base_url,
            force=force,
            progress=progress,
            timeout=timeout,
            min_rate=min_rate,
        )
    cache = _cache_path(cache_dir)
    options_url, weights_url = model_urls(canonical, base_url)
    model = RELEASED_MODELS[canonical]

    def fetch(downloads: _CacheFolder, transfer: _Transfer) -> dict:
        options = _fetch(options_url, downloads, Path(model.options).name, _OPTIONS_MAX_BYTES, _check_json,
                         model.options_sha256, transfer)  # fmt: skip
        weights = _fetch(weights_url, downloads, Path(model.weights).name, _WEIGHTS_MAX_BYTES, _check_hdf5,
                         model.weights_sha256, transfer)  # fmt: skip
        return {"options_file": options, "weight_file": weights, **_fetch_lm_head(model, base_url, downloads, transfer)}

    def convert_files(files: dict, downloads: _CacheFolder, target: Path, transfer: _Transfer) -> None:
        from .convert import convert  # torch and the model: only when there is something to convert

        convert(output_dir=target, overwrite=True, progress=transfer.progress, **files)

    return _download_and_convert(
        canonical,
        cache,
        what="the released ELMo model",
        not_converted=lambda err: (
            f"the files of {canonical!r} downloaded from {options_url} and {weights_url} do "
            f"not convert: {err} (they were deleted)"
        ),
        manual=_manual_route(options_url, weights_url, cache / canonical),
        fetch=fetch,
        convert=convert_files,
        force=force,
        progress=progress,
        timeout=timeout,
        min_rate=min_rate,
    )


def _cache_path(cache_dir: str | os.PathLike | None) -> Path:
    return Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()


def _download_and_convert(
    canonical: str,
    cache: Path,
    *,
    what: str,
    not_converted: Callable[[Exception], str],
    manual: str,
    fetch: Callable[[_CacheFolder, _Transfer], object],
    convert: Callable[[object, _CacheFolder, Path, _Transfer], None],
    force: bool,
    progress: bool,
    timeout: float,
    min_rate: float | None,
) -> Path:
    """The flow every released model shares: ``cache/canonical`` checked if cached; else, under the model's lock,
    ``fetch(downloads, transfer)`` fills ``cache/.downloads/canonical`` (a [`_CacheFolder`]) and returns what
    ``convert(fetched, downloads, target, transfer)`` turns into ``target``; the downloads are then deleted.

    ``what`` names the model in the offline message ("the released ELMo model"), ``not_converted`` gives the
    message of files that do not convert from the converter's error; ``manual`` is the route by hand.
    A [`DownloadError`] or a ``ConversionError`` raised by ``convert`` deletes the downloads (the next call fetches
    them anew); another ``OSError`` (a full disk) keeps them.
    """
    target = cache / canonical
    if not force and os.path.lexists(target):
        return _checked(target, canonical)
    from huggingface_hub import constants
    from huggingface_hub.utils import are_progress_bars_disabled

    # transformers' disable_progress_bar() turns huggingface_hub's off too: one switch for every bar below
    transfer = _Transfer(
        manual=manual,
        progress=progress and not are_progress_bars_disabled(),
        timeout=timeout,
        min_rate=_min_rate(min_rate),
        force_hint=f"`elmo download {canonical} --force` deletes the downloaded files",
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
    with _CacheFolder.open_root(cache) as root, _model_lock(root, canonical):
        if not force and os.path.lexists(target):  # another call finished it while this one waited
            return _checked(target, canonical)
        root.refuse_link(canonical)  # the converter replaces a forced folder: never what a link points to
        if force:  # fresh files, not those of an earlier call
            _drop_downloads(root, canonical)
        from .convert import ConversionError

        with root.folder(".downloads") as all_downloads, all_downloads.folder(canonical) as downloads:
            try:
                fetched = fetch(downloads, transfer)
            except BaseException:
                with contextlib.suppress(OSError):  # empty folders only: partial files stay for resuming
                    all_downloads.rmdir(canonical)
                    root.rmdir(".downloads")
                raise
            try:
                # overwrite: a folder here is a forced one (we hold the model's lock)
                with _bars_off(not transfer.progress):  # also transformers' "Writing model shards"
                    convert(fetched, downloads, target, transfer)
            except (ConversionError, DownloadError) as err:
                failed = err
            except OSError as err:  # a full disk...: keep the downloads for the next call
                raise DownloadError(f"could not write {target}: {err}") from err
            else:
                failed = None
        _drop_downloads(root, canonical)  # done, or wrong files: the next call fetches them anew
        if failed is not None:
            raise DownloadError(f"{not_converted(failed)}. {manual}") from failed
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


def _drop_downloads(root: _CacheFolder, name: str) -> None:
    """Delete one model's downloaded files, and the downloads folder if no other model's download is pending."""
    if root.lstat(".downloads") is None:
        return
    with root.folder(".downloads", create=False) as all_downloads:
        all_downloads.remove_tree(name)
    with contextlib.suppress(OSError):
        root.rmdir(".downloads")


def resolve_pretrained(name_or_path: str, **kwargs) -> str:
    """A released model's name → its converted folder (downloaded on first use); anything else unchanged.

    An existing path wins over a released name (a folder called ``small`` in the working directory stays that
    folder). Keyword arguments go to [`download_released_model`]. For ``--model``-style arguments of the commands.
    """
    if os.path.exists(name_or_path) or canonical_name(name_or_path) is None:
        return name_or_path
    return str(download_released_model(name_or_path, **kwargs))


# ---------------------------------------------------------------------------------------------
# The cache's folders, without following symbolic links
# ---------------------------------------------------------------------------------------------

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)


class _CacheFolder:
    """A folder inside the cache, opened without following symbolic links, and the file operations in it.

    Names are taken relative to the folder's descriptor (``dir_fd``), never as paths that could be re-resolved: a
    symbolic link planted in the cache (a folder, a ``.part`` file) is refused with a clear error, so nothing it
    points to is ever created, written or deleted. A file written must be a regular file of this user with no
    other hard link. The cache folder itself may be a symbolic link (the user's choice, a cache on another disk).
    """

    def __init__(self, path: Path, fd: int):
        self.path, self.fd = path, fd

    @classmethod
    def open_root(cls, cache: Path) -> _CacheFolder:
        return cls(cache, os.open(cache, os.O_RDONLY | _DIRECTORY | _CLOEXEC))

    def __enter__(self) -> _CacheFolder:
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

    def folder(self, name: str, create: bool = True) -> _CacheFolder:
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
        return _CacheFolder(self.path / name, fd)

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
class _Transfer:
    """How one call fetches its files: the manual route and the ``--force`` hint (for messages), progress bars,
    the timeout (also the window of the minimum rate) and the minimum rate in bytes/s."""

    manual: str
    progress: bool
    timeout: float
    min_rate: float
    force_hint: str


class _TooSlow(Exception):
    """A window of the transfer brought less than the minimum rate; the message says how much it brought."""


def _check_json(file) -> str | None:
    try:
        options = json.loads(file.read().decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        return f"not a JSON options file ({err})"
    return None if isinstance(options, dict) else "not a JSON options file (no object at the top)"


def _check_hdf5(file) -> str | None:
    import h5py  # only the check needs it; h5py is a dependency of the converter anyway

    try:
        with h5py.File(file, "r"):
            pass
    except OSError as err:
        return f"not a readable HDF5 file ({err})"
    return None


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


def _check_text(file) -> str | None:
    decoder = codecs.getincrementaldecoder("utf-8")()
    try:
        while chunk := file.read(_CHUNK):
            decoder.decode(chunk)
        decoder.decode(b"", final=True)
    except UnicodeDecodeError as err:
        return f"not a UTF-8 vocabulary file ({err})"
    return None


_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")


def _fetch(
    url: str,
    folder: _CacheFolder,
    name: str,
    max_bytes: int,
    check: Callable[..., str | None],
    sha256: str | None,
    transfer: _Transfer,
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
                    f"mirror ({BASE_URL_ENV}). {manual}"
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
                        f"({BASE_URL_ENV}). {manual}"
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


def _stream(response, out, room: int, bar, transfer: _Transfer) -> tuple[int, str | None]:
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


def _read_meta(folder: _CacheFolder, name: str, hint: str) -> dict:
    try:
        with folder.open(name, "rb", hint) as f:
            meta = json.loads(f.read(1 << 16).decode("utf-8"))
    except (FileNotFoundError, ValueError):  # UnicodeDecodeError is a ValueError
        return {}
    return meta if isinstance(meta, dict) else {}


@contextlib.contextmanager
def _model_lock(root: _CacheFolder, name: str) -> Iterator[None]:
    """Hold ``CACHE/.NAME.download.lock`` (``flock``), waiting for another call that holds it.

    The file stays (an empty file): removing it while others wait would let two holders coexist. The kernel
    releases the lock of a killed process.
    """
    if fcntl is None:
        yield
        return
    path = root.path / f".{name}.download.lock"
    try:
        fd = os.open(path.name, os.O_RDWR | os.O_CREAT | _NOFOLLOW | _CLOEXEC, 0o644, dir_fd=root.fd)
    except OSError:
        root.refuse_link(path.name)  # a planted link: say so
        raise
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"Waiting for another download of {name} (it holds {path})...", file=sys.stderr)
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock
