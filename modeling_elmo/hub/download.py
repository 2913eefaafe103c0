"""The released ELMo models by name: fetch AllenNLP's original files, check them, convert them once, cache the folder.

:func:`download_released_model` gives a released name's folder, :func:`resolve_pretrained` the same for a released
name and leaves a folder or Hub id unchanged; ``elmo download NAME`` (``modeling_elmo.commands.download``) prints it,
and ``--model NAME`` of the commands does the same on first use. The 44 ELMoForManyLangs languages are
``download_manylangs.py``'s.

Each model is AllenNLP's ``options.json`` and HDF5 weights under one base URL (``ELMO_DOWNLOAD_BASE_URL`` or
``base_url`` replaces the public one, for a mirror); an LM head adds its softmax and vocabulary. They go through the
download core (``download_core.py``): resumable downloads into ``CACHE/.downloads/NAME/``, each complete file
checked (the size the server announced, and it parses: JSON for the options, HDF5 for the weights, UTF-8 for a
vocabulary; the sha256 where the table records one; the released files' hashes are not recorded yet), then
converted (``convert.py``, with all its checks) into ``CACHE/NAME`` under the model's lock, and deleted. Files that
fail a check, or do not convert, are deleted too, so that the next call fetches them anew; a failed call never
leaves a ``CACHE/NAME`` folder, nor a lock file. A later call finds ``CACHE/NAME``, checks it cheaply and makes no
request at all; a damaged folder is an error that says to use ``--force``. The cache's guarantees (nothing outside
it is created, written or deleted; symbolic links; the minimum rate; offline mode) are ``download_core.py``'s.
"""

from __future__ import annotations

import codecs
import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path

from .download_core import (
    CACHE_DIR_ENV,
    MIN_RATE_ENV,
    CacheFolder,
    Transfer,
    cache_path,
    default_cache_dir,
    download_and_convert,
    fetch_file,
)
from .download_manylangs import download_manylangs, manylangs_name
from .errors import DownloadError

BASE_URL_ENV = "ELMO_DOWNLOAD_BASE_URL"
# AllenNLP's bucket; also served as https://allennlp.s3.amazonaws.com/models/elmo/
DEFAULT_BASE_URL = "https://s3-us-west-2.amazonaws.com/allennlp/models/elmo/"
_OPTIONS_MAX_BYTES = 1 << 20  # an options.json is a few hundred bytes
_WEIGHTS_MAX_BYTES = 4 << 30  # the largest released file (2x4096_512) is about 360 MB; its softmax 1.6 GB
_VOCAB_MAX_BYTES = 256 << 20  # a vocabulary of the LM heads: 793,471 words, a few MB
_CHUNK = 1 << 20  # bytes read at a time by the vocabulary's check


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


def lm_head_urls(name: str, base_url: str | None = None) -> tuple[str, str] | None:
    """The ``(softmax, vocabulary)`` URLs of a released LM head, or None for a model without one."""
    model = RELEASED_MODELS[_known(name)]
    if model.softmax is None:
        return None
    base = (base_url or default_base_url()).rstrip("/") + "/"
    return base + model.softmax, base + model.vocab


def _fetch_lm_head(model: ReleasedModel, base_url: str | None, downloads: CacheFolder, transfer: Transfer) -> dict:
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
    softmax = fetch_file(softmax_url, downloads, Path(model.softmax).name, _WEIGHTS_MAX_BYTES, _check_hdf5, None,
                         lm_transfer)  # fmt: skip
    vocab = fetch_file(vocab_url, downloads, Path(model.vocab).name, _VOCAB_MAX_BYTES, _check_text, None,
                       lm_transfer)  # fmt: skip
    return {"softmax_weight_file": softmax, "vocab_file": vocab}


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
    min_rate: float | None = None,
) -> Path:
    """The folder of a released ELMo model, downloaded and converted on first use (see the module's docstring).

    Args:
        name: ``small``, ``medium``, ``original``, ``original-5.5B`` (``large``), ``pubmed``, ``pt``, and the LM heads
            ``original-lm``, ``original-5.5B-lm`` ([`released_model_names`]); case-insensitive. Also the 44
            ELMoForManyLangs languages (``de``, ``German``, ``manylangs-de``: ``download_manylangs.py``).
        cache_dir: where converted models live (default [`default_cache_dir`]).
        base_url: where the original files are (default [`default_base_url`]).
        force: download and convert again even if the folder exists (a symbolic link there is replaced by a
            folder: the link goes, never what it points to).
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
            cache; the message names the URL and how to install the model by hand. No ``cache_dir/NAME`` and no
            lock file is left, and nothing outside ``cache_dir`` is written or deleted.
    """
    canonical = _known(name)
    if canonical not in RELEASED_MODELS:  # one of the 44 ELMoForManyLangs languages: an NLPL zip
        return download_manylangs(
            canonical,
            cache_dir=cache_dir,
            base_url=base_url,
            force=force,
            progress=progress,
            timeout=timeout,
            min_rate=min_rate,
        )
    cache = cache_path(cache_dir)
    options_url, weights_url = model_urls(canonical, base_url)
    model = RELEASED_MODELS[canonical]

    def fetch(downloads: CacheFolder, transfer: Transfer) -> dict:
        options = fetch_file(options_url, downloads, Path(model.options).name, _OPTIONS_MAX_BYTES, _check_json,
                             model.options_sha256, transfer)  # fmt: skip
        weights = fetch_file(weights_url, downloads, Path(model.weights).name, _WEIGHTS_MAX_BYTES, _check_hdf5,
                             model.weights_sha256, transfer)  # fmt: skip
        return {"options_file": options, "weight_file": weights, **_fetch_lm_head(model, base_url, downloads, transfer)}

    def convert_files(files: dict, downloads: CacheFolder, target: Path, transfer: Transfer) -> None:
        from .convert import convert  # torch and the model: only when there is something to convert

        convert(output_dir=target, overwrite=True, progress=transfer.progress, **files)

    return download_and_convert(
        canonical,
        cache,
        what="the released ELMo model",
        not_converted=lambda err: (
            f"the files of {canonical!r} downloaded from {options_url} and {weights_url} do "
            f"not convert: {err} (they were deleted: the next call downloads them anew)"
        ),
        manual=_manual_route(options_url, weights_url, cache / canonical),
        mirror_env=BASE_URL_ENV,
        fetch=fetch,
        convert=convert_files,
        force=force,
        progress=progress,
        timeout=timeout,
        min_rate=min_rate,
    )


def resolve_pretrained(name_or_path: str, **kwargs) -> str:
    """A released model's name → its converted folder (downloaded on first use); anything else unchanged.

    An existing path wins over a released name (a folder called ``small`` in the working directory stays that
    folder). Keyword arguments go to [`download_released_model`]. For ``--model``-style arguments of the commands.
    """
    if os.path.exists(name_or_path) or canonical_name(name_or_path) is None:
        return name_or_path
    return str(download_released_model(name_or_path, **kwargs))


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


def _check_text(file) -> str | None:
    decoder = codecs.getincrementaldecoder("utf-8")()
    try:
        while chunk := file.read(_CHUNK):
            decoder.decode(chunk)
        decoder.decode(b"", final=True)
    except UnicodeDecodeError as err:
        return f"not a UTF-8 vocabulary file ({err})"
    return None


__all__ = [
    "ALIASES",
    "BASE_URL_ENV",
    "CACHE_DIR_ENV",
    "DEFAULT_BASE_URL",
    "MIN_RATE_ENV",
    "RELEASED_MODELS",
    "DownloadError",
    "ReleasedModel",
    "canonical_name",
    "close_released_name",
    "default_base_url",
    "default_cache_dir",
    "download_released_model",
    "lm_head_urls",
    "model_urls",
    "released_model_names",
    "resolve_pretrained",
]
