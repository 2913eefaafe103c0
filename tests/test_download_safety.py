"""Safety of the download cache (issue 26 entries 1, 2, 3, 5, 12, 13): planted symlinks and hard links, trickling
mirrors, resumes without a validator, offline ``--force`` and damaged cached models.

Downloads run against the real HTTP server of ``tests/test_download.py`` (a thread on 127.0.0.1) serving the
vendored TensorFlow fixture model under the paths of the released ``small`` model. The symlinks, hard links and
user folders are real files under ``tmp_path``; each test checks that what lies outside the cache is unchanged.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import threading
import time
import zlib
from pathlib import Path

import h5py
import huggingface_hub
import numpy as np
import pytest
from test_download import OPTIONS_PATH, SMALL, WEIGHTS_PATH, assert_same_weights, download, serve

import elmo_cli as cli
from modeling_elmo.hub.download import RELEASED_MODELS, DownloadError

WEIGHTS_NAME = Path(SMALL.weights).name
OPTIONS_NAME = Path(SMALL.options).name


@pytest.fixture
def fixture_files(fixture_dir) -> dict[str, bytes]:
    return {
        OPTIONS_PATH: (fixture_dir / "options.json").read_bytes(),
        WEIGHTS_PATH: (fixture_dir / "lm_weights.hdf5").read_bytes(),
    }


@pytest.fixture
def server(fixture_files):
    server, thread = serve(fixture_files)
    yield server
    server.release.set()
    server.shutdown()
    server.server_close()
    thread.join(10)


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (relative path -> bytes): what must survive unchanged."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def user_folder(tmp_path: Path) -> Path:
    """A user's folder outside the cache, shaped like a downloads folder (``small/thesis.tex``)."""
    user = tmp_path / "user"
    (user / "small").mkdir(parents=True)
    (user / "small" / "thesis.tex").write_text("\\chapter{Results}\n", encoding="utf-8")
    (user / "notes.txt").write_text("my notes\n", encoding="utf-8")
    return user


def changed_weights(weights: bytes, dataset: str = "CNN_high_0/W_carry") -> bytes:
    """``weights`` with ``dataset`` negated in place: another valid HDF5 file of the same size."""
    path = Path(os.environ.get("TMPDIR", "/tmp")) / f"elmo-weights-{os.getpid()}.hdf5"
    path.write_bytes(weights)
    try:
        with h5py.File(path, "r") as handle:
            offset, size = handle[dataset].id.get_offset(), handle[dataset].id.get_storage_size()
    finally:
        path.unlink()
    new = bytearray(weights)
    new[offset : offset + size] = (-np.frombuffer(weights[offset : offset + size], dtype="<f4")).tobytes()
    return bytes(new)


# ---------------------------------------------------------------------------------------------
# Entry 1: a planted .part is never written through
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("link", ["symlink", "hardlink"])
def test_planted_part_file_is_never_written_through(server, fixture_files, tmp_path, converted_fixture, link):
    """``.part`` a symlink (or a hard link) to a user file, with a ``.part.json`` whose URL and ETag match the
    server's, so that a resume would append to it: refused with a clear error, and the user's file is unchanged."""
    cache = tmp_path / "cache"
    user = user_folder(tmp_path)
    before = snapshot(user)
    downloads = cache / ".downloads" / "small"
    downloads.mkdir(parents=True)
    part = downloads / f"{WEIGHTS_NAME}.part"
    if link == "symlink":
        part.symlink_to(user / "notes.txt")
    else:
        os.link(user / "notes.txt", part)
    weights = fixture_files[WEIGHTS_PATH]
    meta = {"url": server.url + SMALL.weights, "total": len(weights), "etag": f'"{zlib.crc32(weights):08x}"'}
    (downloads / f"{WEIGHTS_NAME}.part.json").write_text(json.dumps(meta), encoding="utf-8")

    with pytest.raises(DownloadError) as info:
        download(server, cache)
    assert snapshot(user) == before and not (cache / "small").exists()
    message = str(info.value)
    kind = "is a symbolic link" if link == "symlink" else "has other hard links"
    assert f"{part} {kind}: refusing" in message and "`elmo download small --force`" in message, message

    # --force starts from fresh files: the link is removed (not what it points to) and the download succeeds.
    assert download(server, cache, force=True) == cache / "small"
    assert_same_weights(cache / "small", converted_fixture)
    assert snapshot(user) == before


# ---------------------------------------------------------------------------------------------
# Entry 2: nothing is created, written or deleted through a symlinked folder of the cache
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("linked", [".downloads", ".downloads/small"])
@pytest.mark.parametrize("force", [False, True], ids=["first-download", "force"])
def test_symlinked_downloads_folder_is_refused(server, tmp_path, linked, force, capsys):
    """``CACHE/.downloads`` (or ``CACHE/.downloads/small``) a symlink to a user folder holding ``small/thesis.tex``
    (or ``thesis.tex``): a first download and ``--force`` on a cached model refuse it, and the user folder
    survives untouched."""
    cache = tmp_path / "cache"
    if force:
        download(server, cache)
    user = user_folder(tmp_path)
    before = snapshot(user)
    link = cache / linked
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(user if linked == ".downloads" else user / "small")
    requests = len(server.requests)

    argv = ["download", "small", "--cache_dir", str(cache), "--base_url", server.url, "--disable_tqdm"]
    code = cli.main(argv + ["--force"] * force)
    assert snapshot(user) == before
    err = capsys.readouterr().err
    assert code == 1 and err.startswith(f"error: {link} is a symbolic link: refusing"), err
    assert len(server.requests) == requests  # refused before any request
    assert (cache / "small").exists() == force  # a cached model stays as it was
    if force:
        assert download(server, cache) == cache / "small"


def test_symlinked_lock_file_is_refused(server, tmp_path):
    cache = tmp_path / "cache"
    user = user_folder(tmp_path)
    before = snapshot(user)
    cache.mkdir()
    (cache / ".small.download.lock").symlink_to(user / "notes.txt")
    with pytest.raises(DownloadError, match=r"\.small\.download\.lock is a symbolic link: refusing"):
        download(server, cache)
    assert snapshot(user) == before and server.requests == []


@pytest.mark.parametrize("points_to", ["nothing", "a user folder", "a model"])
def test_symlinked_model_folder_is_replaced_by_force_never_written_through(
    server, tmp_path, converted_fixture, points_to, capsys
):
    """``CACHE/small`` a symlink. To a sound model folder, it is used (read only). Dangling, or to a user folder that
    is no model, the message says that it is a link and that ``--force`` replaces the link; ``--force`` removes the
    link itself, never what it points to, and converts into a real folder. The user's files are unchanged."""
    cache = tmp_path / "cache"
    user = user_folder(tmp_path)
    shutil.copytree(converted_fixture, user / "model")
    before = snapshot(user)
    cache.mkdir()
    link = cache / "small"
    link.symlink_to(
        {"nothing": tmp_path / "missing", "a user folder": user / "small", "a model": user / "model"}[points_to]
    )
    if points_to == "a model":
        assert download(server, cache) == link and server.requests == []
    else:
        argv = ["download", "small", "--cache_dir", str(cache), "--base_url", server.url, "--disable_tqdm"]
        assert cli.main(argv) == 1
        err = capsys.readouterr().err
        assert err.startswith(f"error: the cached model {link} is a symbolic link to {os.readlink(link)}, and ")
        assert "run `elmo download small --force` to replace the link (not what it points to)" in err, err
        assert err.count("\n") == 1 and server.requests == []
    assert download(server, cache, force=True) == link
    assert not link.is_symlink() and snapshot(user) == before
    assert_same_weights(link, converted_fixture)


# ---------------------------------------------------------------------------------------------
# Entry 3: a trickling mirror fails in bounded time
# ---------------------------------------------------------------------------------------------


def test_trickling_mirror_fails_with_a_clear_error(server, fixture_files, tmp_path, monkeypatch, converted_fixture):
    """One byte of options.json every 0.1 s (about 10 B/s) against a minimum of 100 B/s over 1 s windows: a clear
    error after about a second, not the 40 s the file would take; the partial file stays and the next call
    resumes it."""
    cache = tmp_path / "cache"
    server.trickle[OPTIONS_PATH] = 0.1
    monkeypatch.setenv("ELMO_DOWNLOAD_MIN_RATE", "100")
    start = time.monotonic()
    with pytest.raises(DownloadError) as info:
        download(server, cache, timeout=1.0)
    elapsed = time.monotonic() - start
    message = str(info.value)
    assert "too slow" in message and "less than the minimum of 100 bytes/s (ELMO_DOWNLOAD_MIN_RATE)" in message
    assert elapsed < 10, elapsed  # two 1 s windows at most, and the server's start
    part = cache / ".downloads" / "small" / f"{OPTIONS_NAME}.part"
    kept = part.stat().st_size
    assert 0 < kept < len(fixture_files[OPTIONS_PATH])

    server.trickle.clear()
    assert download(server, cache) == cache / "small"
    assert server.requested(OPTIONS_PATH)[-1] == f"bytes={kept}-"
    assert_same_weights(cache / "small", converted_fixture)

    monkeypatch.setenv("ELMO_DOWNLOAD_MIN_RATE", "fast")
    with pytest.raises(DownloadError, match="ELMO_DOWNLOAD_MIN_RATE must be a number of bytes per second"):
        download(server, cache, force=True)


def test_trickling_headers_fail_within_the_timeout(server, fixture_files, tmp_path, converted_fixture):
    """The status line and headers of the weights' answer trickle in, one byte every 0.1 s (about 20 s for all of
    them, with no read ever waiting the 1 s timeout): a clear error after the 1 s deadline, the partial file left
    by an earlier call unchanged, and the next call resumes it."""
    cache = tmp_path / "cache"
    weights = fixture_files[WEIGHTS_PATH]
    downloads = cache / ".downloads" / "small"
    downloads.mkdir(parents=True)
    part = downloads / f"{WEIGHTS_NAME}.part"
    part.write_bytes(weights[:100_000])
    meta = {"url": server.url + SMALL.weights, "total": len(weights), "etag": f'"{zlib.crc32(weights):08x}"'}
    (downloads / f"{WEIGHTS_NAME}.part.json").write_text(json.dumps(meta), encoding="utf-8")
    server.trickle_headers[WEIGHTS_PATH] = 0.1
    start = time.monotonic()
    with pytest.raises(DownloadError) as info:
        download(server, cache, timeout=1.0)
    elapsed = time.monotonic() - start
    message = str(info.value)
    assert f"the download of {server.url}{SMALL.weights} is too slow (its status line and headers did not arrive " \
        "within 1 s); the 100000 bytes received before are kept" in message, message  # fmt: skip
    assert elapsed < 5, elapsed  # the 1 s deadline, and the options' download
    assert part.read_bytes() == weights[:100_000] and not (cache / "small").exists()
    assert server.requested(WEIGHTS_PATH) == ["bytes=100000-"]  # no retry against a trickling server

    del server.trickle_headers[WEIGHTS_PATH]
    assert download(server, cache) == cache / "small"
    assert server.requested(WEIGHTS_PATH)[-1] == "bytes=100000-"
    assert_same_weights(cache / "small", converted_fixture)


# ---------------------------------------------------------------------------------------------
# Entry 5: no splice of two versions of a file
# ---------------------------------------------------------------------------------------------


def test_resume_without_a_validator_starts_again(server, fixture_files, tmp_path, converted_fixture):
    """A mirror that honours ``Range`` but sends no ``ETag`` or ``Last-Modified``, whose weights change (at the
    same size) while the download is cut: the rest is not appended to the old start; the whole new file is
    fetched, and the model is the new file's."""
    new = fixture_files[WEIGHTS_PATH]
    server.validators = False
    server.files[WEIGHTS_PATH] = changed_weights(new)
    server.stall[WEIGHTS_PATH] = 100_000

    def change_file():
        assert server.stalled.wait(60)
        server.files[WEIGHTS_PATH] = new
        server.release.set()  # the connection closes, 100,000 bytes of the old file sent

    helper = threading.Thread(target=change_file, daemon=True)
    helper.start()
    folder = download(server, tmp_path / "a")
    helper.join(10)
    assert_same_weights(folder, converted_fixture)
    assert server.requested(WEIGHTS_PATH) == [None, None]  # no Range without a validator

    # A partial file left by an earlier call against such a mirror: no validator recorded, so not resumed.
    cache = tmp_path / "b"
    downloads = cache / ".downloads" / "small"
    downloads.mkdir(parents=True)
    (downloads / f"{WEIGHTS_NAME}.part").write_bytes(changed_weights(new)[:100_000])
    meta = {"url": server.url + SMALL.weights, "total": len(new), "etag": None}
    (downloads / f"{WEIGHTS_NAME}.part.json").write_text(json.dumps(meta), encoding="utf-8")
    assert_same_weights(download(server, cache), converted_fixture)
    assert server.requested(WEIGHTS_PATH)[-1] is None


def test_resume_checks_the_validator_of_the_answer(server, fixture_files, tmp_path, converted_fixture):
    """A mirror that ignores ``If-Range`` answers a resume of an old partial file with ``206`` and its new ETag:
    the partial file is dropped and the whole file fetched, not spliced."""
    new = fixture_files[WEIGHTS_PATH]
    server.ignore_if_range = True
    downloads = tmp_path / ".downloads" / "small"
    downloads.mkdir(parents=True)
    (downloads / f"{WEIGHTS_NAME}.part").write_bytes(changed_weights(new)[:100_000])
    meta = {"url": server.url + SMALL.weights, "total": len(new), "etag": '"old"'}
    (downloads / f"{WEIGHTS_NAME}.part.json").write_text(json.dumps(meta), encoding="utf-8")
    assert_same_weights(download(server, tmp_path), converted_fixture)
    assert server.requested(WEIGHTS_PATH) == ["bytes=100000-", None]


def test_last_modified_is_a_validator(server, tmp_path, converted_fixture):
    """Without an ETag, ``Last-Modified`` vouches for the file: a dropped connection is resumed with ``Range``."""
    server.validators = False
    server.last_modified = "Wed, 21 Oct 2015 07:28:00 GMT"
    server.cut[WEIGHTS_PATH] = 100_000
    assert_same_weights(download(server, tmp_path), converted_fixture)
    assert server.requested(WEIGHTS_PATH) == [None, "bytes=100000-"]


def test_released_sha256_is_checked(server, fixture_files, tmp_path, monkeypatch, converted_fixture):
    """An entry of the model table that records sha256 hashes: the files must match them. (The real released
    files' hashes are not recorded in the table yet; this uses the test mirror's own files.)"""
    digest = {path: hashlib.sha256(body).hexdigest() for path, body in fixture_files.items()}
    recorded = dataclasses.replace(SMALL, options_sha256=digest[OPTIONS_PATH], weights_sha256=digest[WEIGHTS_PATH])
    monkeypatch.setitem(RELEASED_MODELS, "small", recorded)
    assert_same_weights(download(server, tmp_path / "a"), converted_fixture)

    server.files[WEIGHTS_PATH] = changed_weights(fixture_files[WEIGHTS_PATH])  # valid HDF5, another file
    cache = tmp_path / "b"
    with pytest.raises(DownloadError) as info:
        download(server, cache)
    message = str(info.value)
    assert f"the file downloaded from {server.url}{SMALL.weights} is not the released file" in message
    assert f"is not the recorded sha256 {digest[WEIGHTS_PATH]}" in message and "it was deleted" in message
    assert sorted(os.listdir(cache / ".downloads" / "small")) == [OPTIONS_NAME]  # only the options passed
    assert not (cache / "small").exists()


# ---------------------------------------------------------------------------------------------
# Entries 12 and 13: offline --force, damaged cached models
# ---------------------------------------------------------------------------------------------


def test_offline_force_says_that_it_needs_the_network(server, tmp_path, monkeypatch, capsys):
    cache = tmp_path / "cache"
    folder = download(server, cache)
    before = snapshot(folder)
    requests = len(server.requests)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    argv = ["download", "small", "--force", "--cache_dir", str(cache), "--base_url", server.url, "--disable_tqdm"]
    assert cli.main(argv) == 1
    err = capsys.readouterr().err
    assert "--force downloads 'small' again, which needs the network, and offline mode is on (HF_HUB_OFFLINE)" in err
    assert f"the cached model in {folder} is kept" in err and "is not in" not in err
    assert snapshot(folder) == before and len(server.requests) == requests


DAMAGES = {
    "empty config.json": lambda folder: (folder / "config.json").write_bytes(b""),
    "empty model.safetensors": lambda folder: (folder / "model.safetensors").write_bytes(b""),
    "cut model.safetensors": lambda folder: os.truncate(folder / "model.safetensors", 100_000),
    "no tokenizer_config.json": lambda folder: (folder / "tokenizer_config.json").unlink(),
}
PROBLEMS = {
    "empty config.json": "config.json is not a JSON object",
    "empty model.safetensors": "model.safetensors has no safetensors header",
    "cut model.safetensors": "model.safetensors is cut short",
    "no tokenizer_config.json": "tokenizer_config.json is missing",
}


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_damaged_cached_model_is_detected(server, tmp_path, monkeypatch, capsys, damage, converted_fixture):
    cache = tmp_path / "cache"
    folder = download(server, cache)
    DAMAGES[damage](folder)
    requests = len(server.requests)
    with pytest.raises(DownloadError) as info:
        download(server, cache)
    message = str(info.value)
    assert f"the cached model {folder} is damaged ({PROBLEMS[damage]}" in message, message
    assert "`elmo download small --force`" in message
    assert len(server.requests) == requests

    # The commands that take --model say the same.
    monkeypatch.setenv("ELMO_CACHE_DIR", str(cache))
    monkeypatch.setenv("ELMO_DOWNLOAD_BASE_URL", server.url)
    assert cli.main(["similar", "--model", "small", "--device", "cpu"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: --model small: the cached model") and "--force" in err, err

    assert download(server, cache, force=True) == folder
    assert_same_weights(folder, converted_fixture)


# ---------------------------------------------------------------------------------------------
# The demo language model's cached folder is checked too, and rebuilt when damaged
# ---------------------------------------------------------------------------------------------


def _flip_a_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


DEMO_DAMAGES = {
    "cut model.safetensors": lambda folder: os.truncate(folder / "model.safetensors", 1000),
    "a byte of model.safetensors flipped": lambda folder: _flip_a_byte(folder / "model.safetensors"),
    "no tokenizer.json": lambda folder: (folder / "tokenizer.json").unlink(),
    "empty config.json": lambda folder: (folder / "config.json").write_bytes(b""),
    "no record of the files": lambda folder: (folder / ".elmo-demo-lm.json").unlink(),
}


def test_damaged_demo_language_model_folder_is_rebuilt(tmp_path):
    from modeling_elmo.demo_models.language_model import demo_language_model_path, has_demo_language_model

    if not has_demo_language_model():
        pytest.skip("this checkout has no demo language model: python scripts/fit_demo_softmax.py makes it")
    folder = demo_language_model_path(tmp_path)
    original = snapshot(folder)
    written = (folder / "model.safetensors").stat().st_mtime_ns
    assert demo_language_model_path(tmp_path) == folder  # sound: found, not written again
    assert (folder / "model.safetensors").stat().st_mtime_ns == written
    for name, damage in DEMO_DAMAGES.items():
        damage(folder)
        assert demo_language_model_path(tmp_path) == folder
        assert snapshot(folder) == original, name
    assert os.listdir(tmp_path) == [folder.name]  # no staging or damaged folder left beside it
