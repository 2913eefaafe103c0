"""The 44 ELMoForManyLangs models by language: fetch the NLPL zip, unpack it safely, convert it once, cache the folder.

``elmo download de`` (or ``German``, ``manylangs-de``) downloads ``http://vectors.nlpl.eu/repository/11/142.zip``
through the resumable, locked path that the released models share (``download_core.py``), unpacks only the model's
files (no path outside the folder, no links, bounded sizes), converts them with ``convert_manylangs`` into
``CACHE/manylangs-de`` and deletes the download. A zip that does not unpack (damaged compressed data, a bad CRC, an
entry name that is not what its flags say) or does not convert is deleted too, with one error naming it, so that the
next call downloads it anew. ``ELMO_MANYLANGS_BASE_URL`` (or ``--base_url``) replaces the NLPL repository, for a
mirror: the zips are then ``BASE/ID.zip``. The names ``pt`` and ``portuguese`` stay AllenNLP's contributed
Portuguese model: ELMoForManyLangs' is ``manylangs-pt``.
"""

from __future__ import annotations

import os
import re
import unicodedata
import zipfile
from pathlib import Path, PurePosixPath

from .download_core import CacheFolder, Transfer, cache_path, download_and_convert, fetch_file
from .errors import DownloadError, quote

BASE_URL_ENV = "ELMO_MANYLANGS_BASE_URL"
DEFAULT_BASE_URL = "http://vectors.nlpl.eu/repository/11/"
PREFIX = "manylangs-"
# Language (ISO 639 code: 639-1 where there is one) -> (English name, NLPL repository id). Source: the README of
# HIT-SCIR/ELMoForManyLangs, whose table links http://vectors.nlpl.eu/repository/11/ID.zip for each.
LANGUAGES: dict[str, tuple[str, int]] = {
    "ar": ("Arabic", 136),
    "bg": ("Bulgarian", 137),
    "ca": ("Catalan", 138),
    "cs": ("Czech", 139),
    "cu": ("Old Church Slavonic", 140),
    "da": ("Danish", 141),
    "de": ("German", 142),
    "el": ("Greek", 143),
    "en": ("English", 144),
    "es": ("Spanish", 145),
    "et": ("Estonian", 146),
    "eu": ("Basque", 147),
    "fa": ("Persian", 148),
    "fi": ("Finnish", 149),
    "fr": ("French", 150),
    "ga": ("Irish", 151),
    "gl": ("Galician", 152),
    "grc": ("Ancient Greek", 153),
    "he": ("Hebrew", 154),
    "hi": ("Hindi", 155),
    "hr": ("Croatian", 156),
    "hu": ("Hungarian", 157),
    "id": ("Indonesian", 158),
    "it": ("Italian", 159),
    "ja": ("Japanese", 160),
    "ko": ("Korean", 161),
    "la": ("Latin", 162),
    "lv": ("Latvian", 163),
    "nl": ("Dutch", 164),
    "nb": ("Norwegian Bokmål", 165),
    "nn": ("Norwegian Nynorsk", 166),
    "pl": ("Polish", 167),
    "pt": ("Portuguese", 168),
    "ro": ("Romanian", 169),
    "ru": ("Russian", 170),
    "sk": ("Slovak", 171),
    "sl": ("Slovene", 172),
    "sv": ("Swedish", 173),
    "tr": ("Turkish", 174),
    "ug": ("Uyghur", 175),
    "uk": ("Ukrainian", 176),
    "ur": ("Urdu", 177),
    "vi": ("Vietnamese", 178),
    "zh": ("Chinese", 179),
}
# Files taken from a zip (its README and meta.json are NLPL's), and their size bounds.
_MODEL_FILES = ("char.dic", "word.dic", "encoder.pkl", "token_embedder.pkl", "config.json")
_ZIP_MAX_BYTES = 4 << 30  # a release is about 0.5 GB
_UNPACKED_MAX_BYTES = 6 << 30
_JSON_MAX_BYTES = 1 << 20


def _key(name: str) -> str:
    """A name compared: case, accents, and ``-``/``_``/spaces ignored ("norwegian-bokmal" = "Norwegian Bokmål")."""
    text = unicodedata.normalize("NFKD", name.strip().lower())
    return re.sub(r"[\s_\-]+", " ", "".join(c for c in text if not unicodedata.combining(c)))


_BY_KEY = {_key(code): code for code in LANGUAGES} | {_key(english): code for code, (english, _) in LANGUAGES.items()}


def manylangs_name(name: str) -> str | None:
    """``manylangs-ISO`` for a language's ISO code or English name (with or without ``manylangs-``), else None.
    ``download.canonical_name`` asks here after AllenNLP's names, which win (``pt`` is AllenNLP's)."""
    key = _key(name)
    key = key[len(PREFIX) :] if key.startswith(_key(PREFIX)) else key
    code = _BY_KEY.get(key.strip())
    return None if code is None else PREFIX + code


def zip_url(canonical: str, base_url: str | None = None) -> str:
    """The URL of a language's zip (``BASE/ID.zip``)."""
    base = (base_url or os.environ.get(BASE_URL_ENV) or DEFAULT_BASE_URL).rstrip("/") + "/"
    return f"{base}{LANGUAGES[canonical.removeprefix(PREFIX)][1]}.zip"


def list_models(base_url: str | None = None) -> str:
    """The ``elmo download --list`` lines of the 44 languages."""
    return "\n".join(
        f"{PREFIX + code:<14}  ELMoForManyLangs {english} ({code}); {zip_url(PREFIX + code, base_url)}"
        for code, (english, _) in LANGUAGES.items()
    )


def _zip_problem(err: Exception) -> str:
    """What ``zipfile`` found wrong with an archive, for a message."""
    if isinstance(err, UnicodeDecodeError):  # bit 11 of an entry says that its name is UTF-8, and it is not
        return f"an entry's name {err.object[:100]!r} is flagged UTF-8 but is not UTF-8"
    if isinstance(err, zipfile.BadZipFile):
        return str(err)
    module = type(err).__module__.lstrip("_")  # zlib.error, lzma.LZMAError; OSError, EOFError
    kind = type(err).__name__ if module == "builtins" else f"{module}.{type(err).__name__}"
    return f"{kind}: {err}" if str(err) else kind


def _check_zip(file) -> str | None:
    try:
        with zipfile.ZipFile(file) as archive:
            archive.infolist()
    except Exception as err:  # BadZipFile, OSError, UnicodeDecodeError, EOFError...: each one a bad zip
        return f"not a readable zip file ({_zip_problem(err)})"
    return None


def _open_zip(file, label: str) -> zipfile.ZipFile:
    """``zipfile.ZipFile(file)``, or a ``DownloadError`` naming ``label`` whatever zipfile raises."""
    try:
        return zipfile.ZipFile(file)
    except Exception as err:  # as in _check_zip
        raise DownloadError(f"{label} is not a readable zip file ({_zip_problem(err)})") from None


def _chosen_members(archive: zipfile.ZipFile, label: str) -> dict[str, zipfile.ZipInfo]:
    """The model's files of ``archive`` by base name, after the checks of [`unpack_model`]."""
    chosen: dict[str, zipfile.ZipInfo] = {}
    for info in archive.infolist():
        raw = info.filename
        parts = PurePosixPath(raw.replace("\\", "/")).parts
        if raw.startswith(("/", "\\")) or ".." in parts or (parts and ":" in parts[0]):
            raise DownloadError(f"{label} holds an unsafe path {raw[:100]!r}: refused")
        if info.is_dir():
            continue
        if (info.external_attr >> 16) & 0o170000 == 0o120000:
            raise DownloadError(f"{label} holds a link {raw[:100]!r}: refused")
        base = parts[-1] if parts else ""
        wanted = base in _MODEL_FILES or (base.endswith(".json") and info.file_size <= _JSON_MAX_BYTES)
        if not wanted or len(parts) > 2:
            continue
        if info.flag_bits & 0x1:
            raise DownloadError(f"{label}: {raw[:100]!r} is encrypted")
        if base in chosen:
            raise DownloadError(f"{label} holds {base} twice ({chosen[base].filename!r}, {raw[:100]!r})")
        chosen[base] = info
    missing = [name for name in _MODEL_FILES if name not in chosen]
    if missing:
        raise DownloadError(f"{label} is not an ELMoForManyLangs model: it lacks {', '.join(missing)}")
    total = sum(info.file_size for info in chosen.values())
    if total > _UNPACKED_MAX_BYTES:
        raise DownloadError(f"{label} would unpack to {total} bytes, more than {_UNPACKED_MAX_BYTES}")
    return chosen


def _unpack(file, label: str, dest: CacheFolder, hint: str) -> None:
    """Extract the model's files of the zip ``file`` into ``dest``, each written through ``dest``'s descriptor
    ([`CacheFolder.open`]: a planted link or hard link is refused, never written through)."""
    with _open_zip(file, label) as archive:
        for base, info in _chosen_members(archive, label).items():
            with dest.open(base, "wb", hint) as out:
                _copy_entry(archive, info, out, label)


def _copy_entry(archive: zipfile.ZipFile, info: zipfile.ZipInfo, out, label: str) -> None:
    """Copy the entry ``info`` to ``out``. Whatever reading it raises (zlib.error, LZMAError, bz2's OSError "Invalid
    data stream", a bad CRC, an unknown compression, data cut short) is a ``DownloadError`` saying that ``label`` is
    damaged; an error of writing (a full disk) is raised as it is."""

    def damaged(err: Exception) -> DownloadError:
        return DownloadError(f"{label} is damaged: {quote(info.filename)} does not unpack ({_zip_problem(err)})")

    try:
        source = archive.open(info)
    except Exception as err:  # a bad local header, an unknown compression...
        raise damaged(err) from None
    with source:
        while True:
            try:
                chunk = source.read(1 << 20)
            except Exception as err:  # the compressed data, or the CRC at its end
                raise damaged(err) from None
            if not chunk:
                return
            out.write(chunk)


def unpack_model(zip_path: str | os.PathLike, dest: str | os.PathLike) -> Path:
    """Extract the model's files (and any small ``.json`` architecture file) of ``zip_path`` into ``dest``.

    They may lie at the top or in one folder. Refused, with ``DownloadError``: absolute paths and ``..``, links,
    encrypted entries, a file twice, missing files, declared sizes beyond the bounds (reading never goes past the
    declared size, and zipfile checks each CRC). Nothing is written before these checks pass, and a file of
    ``dest`` that is a symbolic link is refused, not written through.
    """
    zip_path, dest = Path(zip_path), Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    with open(zip_path, "rb") as file, CacheFolder.open_root(dest) as folder:
        _unpack(file, zip_path.name, folder, "delete it")
    return dest


def download_manylangs(
    canonical: str,
    *,
    cache_dir: str | os.PathLike | None = None,
    base_url: str | None = None,
    force: bool = False,
    progress: bool = True,
    timeout: float = 60.0,
    min_rate: float | None = None,
) -> Path:
    """``CACHE/manylangs-ISO``, downloaded, unpacked and converted on first use, with the guarantees of
    ``download_released_model`` (which calls this for the 44 languages, with the same arguments): the shared
    flow of ``download_core.download_and_convert``; the zip is unpacked into ``CACHE/.downloads/manylangs-ISO/unpacked``
    through the cache's folder descriptors. A zip that does not unpack or convert is deleted, with one error."""
    cache = cache_path(cache_dir)
    url = zip_url(canonical, base_url)
    name = Path(url).name

    def fetch(downloads: CacheFolder, transfer: Transfer) -> str:
        fetch_file(url, downloads, name, _ZIP_MAX_BYTES, _check_zip, None, transfer)
        return name

    def convert(archive: str, downloads: CacheFolder, target: Path, transfer: Transfer) -> None:
        from .convert_manylangs import convert_manylangs

        downloads.remove_tree("unpacked")  # a fresh folder: nothing an earlier call (or anyone) left there
        with downloads.open(archive, "rb", transfer.force_hint) as file, downloads.folder("unpacked") as unpacked:
            _unpack(file, archive, unpacked, transfer.force_hint)
            convert_manylangs(unpacked.path, target, overwrite=True, language=canonical.removeprefix(PREFIX))

    def not_converted(err: Exception) -> str:
        step = "does not unpack" if isinstance(err, DownloadError) else "does not convert"
        deleted = "it was deleted: the next call downloads it anew"
        return f"the zip of {canonical!r} downloaded from {url} {step}: {err} ({deleted})"

    return download_and_convert(
        canonical,
        cache,
        what="the ELMoForManyLangs model",
        not_converted=not_converted,
        manual=f"To install it by hand, download {url}, unpack it into a folder DIR, then run `elmo convert "
        f"--manylangs_dir DIR --output_dir {cache / canonical}`",
        mirror_env=BASE_URL_ENV,
        fetch=fetch,
        convert=convert,
        force=force,
        progress=progress,
        timeout=timeout,
        min_rate=min_rate,
    )


__all__ = ["LANGUAGES", "download_manylangs", "list_models", "manylangs_name", "unpack_model", "zip_url"]
