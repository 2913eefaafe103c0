"""The released models by name (issue 18 item 1): ``elmo download NAME``, ``download_released_model``, the cache,
``--model NAME`` and ``elmo convert --push_to_hub``.

Downloads run against a real HTTP server in a thread (``http.server``, with ``Range`` and ``ETag`` support written
here) that serves the vendored TensorFlow fixture model under the paths of a released model, through the
overridable base URL. It counts requests and can cut or stall a response after N bytes. The Hub is the one thing
replaced: ``HfApi.create_repo`` and ``HfApi.upload_folder`` record what they would do, as in ``tests/test_hub.py``.
"""

from __future__ import annotations

import errno
import os
import re
import signal
import socket
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import huggingface_hub
import pytest
from huggingface_hub.errors import LocalTokenNotFoundError
from safetensors.numpy import load_file

import elmo_cli as cli
from modeling_elmo.commands.convert import main as convert_main
from modeling_elmo.hub.download import (
    RELEASED_MODELS,
    DownloadError,
    download_released_model,
    model_urls,
    resolve_pretrained,
)

SMALL = RELEASED_MODELS["small"]
WEIGHTS_PATH = "/" + SMALL.weights
OPTIONS_PATH = "/" + SMALL.options


class FileServer(ThreadingHTTPServer):
    """Serves ``files`` (URL path -> bytes) with ``Range: bytes=N-`` (and ``If-Range``) support.

    ``requests`` lists ``(path, Range header)`` of every request. ``cut[path] = n`` makes the next response for
    ``path`` stop after ``n`` bytes and close the connection (once); ``stall[path] = n`` makes it send ``n`` bytes
    and then wait until ``release`` is set. ``delay`` seconds pass before each response. ``trickle[path] = s``
    sends one byte of the body every ``s`` seconds, ``trickle_headers[path] = s`` one byte of the status line and
    headers every ``s`` seconds (both until ``release`` is set or the client hangs up). ``validators = False``
    leaves out the ``ETag`` (then ``last_modified``, if set, is the validator, sent as ``Last-Modified``; without
    it every ``Range`` is honoured). ``ignore_if_range`` honours every ``Range`` whatever its ``If-Range`` says (a
    careless mirror).
    """

    daemon_threads = True

    def __init__(self, files: dict[str, bytes]):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.files = files
        self.requests: list[tuple[str, str | None]] = []
        self.cut: dict[str, int] = {}
        self.stall: dict[str, int] = {}
        self.stalled = threading.Event()
        self.release = threading.Event()
        self.delay = 0.0
        self.trickle: dict[str, float] = {}
        self.trickle_headers: dict[str, float] = {}
        self.validators = True
        self.last_modified: str | None = None
        self.ignore_if_range = False
        self.url = f"http://127.0.0.1:{self.server_address[1]}/"

    def requested(self, path: str) -> list[str | None]:
        """The ``Range`` headers of the requests for ``path``, in order."""
        return [header for p, header in self.requests if p == path]


class _Handler(BaseHTTPRequestHandler):
    server: FileServer

    def do_GET(self):  # noqa: N802 (http.server's name)
        server = self.server
        range_header = self.headers.get("Range")
        server.requests.append((self.path, range_header))
        time.sleep(server.delay)
        body = server.files.get(self.path)
        if body is None:
            self.send_error(404)
            return
        etag = f'"{zlib.crc32(body):08x}"'
        start = 0
        validator = etag if server.validators else server.last_modified
        if_range = self.headers.get("If-Range", validator)
        if range_header and (server.ignore_if_range or validator is None or if_range == validator):
            start = int(re.fullmatch(r"bytes=(\d+)-", range_header).group(1))
            if start >= len(body):
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(body)}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
        else:
            self.send_response(200)
        self.send_header("Content-Length", str(len(body) - start))
        if server.validators:
            self.send_header("ETag", etag)
        if server.last_modified:
            self.send_header("Last-Modified", server.last_modified)
        self.end_headers()
        payload = body[start:]
        if self.path in server.trickle:
            for i in range(len(payload)):  # until the client hangs up (BrokenPipeError ends the thread)
                self.wfile.write(payload[i : i + 1])
                self.wfile.flush()
                if server.release.wait(server.trickle[self.path]):
                    return
            return
        if self.path in server.stall:
            self.wfile.write(payload[: server.stall.pop(self.path)])
            self.wfile.flush()
            server.stalled.set()
            server.release.wait(60)
            return  # HTTP/1.0: the connection closes here, short of Content-Length
        self.wfile.write(payload[: server.cut.pop(self.path, len(payload))])

    def flush_headers(self):  # http.server's hook that writes the status line and headers
        pause = self.server.trickle_headers.get(self.path)
        if pause is None:
            return super().flush_headers()
        head, self._headers_buffer = b"".join(self._headers_buffer), []
        for i in range(len(head)):
            self.wfile.write(head[i : i + 1])
            self.wfile.flush()
            if self.server.release.wait(pause):
                return

    def log_message(self, *args):
        pass


def serve(files: dict[str, bytes]):
    server = FileServer(files)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return server, thread


@pytest.fixture
def fixture_files(fixture_dir) -> dict[str, bytes]:
    """The TensorFlow fixture model under the paths of the released ``small`` model."""
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


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def cache_listing(cache: Path) -> list[str]:
    """Everything under the cache folder, relative (lock files included: none may stay)."""
    if not cache.exists():
        return []
    return sorted(str(p.relative_to(cache)) for p in cache.rglob("*"))


def assert_same_weights(folder: Path, reference: Path) -> None:
    got, want = load_file(folder / "model.safetensors"), load_file(reference / "model.safetensors")
    assert got.keys() == want.keys()
    for key in want:
        assert (got[key] == want[key]).all(), key


def download(server: FileServer, cache: Path, name: str = "small", **kwargs) -> Path:
    return download_released_model(name, cache_dir=cache, base_url=server.url, progress=False, **kwargs)


# ---------------------------------------------------------------------------------------------
# Download, conversion, cache
# ---------------------------------------------------------------------------------------------


def test_download_converts_once_and_then_uses_the_cache(server, tmp_path, converted_fixture, capsys, monkeypatch):
    cache = tmp_path / "cache"
    folder = download(server, cache)
    assert folder == cache / "small"
    assert_same_weights(folder, converted_fixture)
    assert {"config.json", "tokenizer.json", "README.md"} <= set(os.listdir(folder))
    assert server.requested(OPTIONS_PATH) == [None] and server.requested(WEIGHTS_PATH) == [None]
    assert not (cache / ".downloads").exists()  # the original files are deleted once converted

    # Again, by every route: no request at all.
    requests = len(server.requests)
    assert download(server, cache) == folder
    assert download(server, cache, name="SMALL") == folder  # names are case-insensitive
    assert resolve_pretrained("small", cache_dir=cache) == str(folder)
    monkeypatch.setenv("ELMO_CACHE_DIR", str(cache))
    monkeypatch.setenv("ELMO_DOWNLOAD_BASE_URL", "http://127.0.0.1:9/")  # nothing there: must not be asked
    assert cli.main(["download", "small"]) == 0
    assert capsys.readouterr().out == f"{folder}\n"  # the folder, and only it, on stdout
    assert cli.main(["similar", "--model", "small", "--device", "cpu"]) == 0
    assert "Cosine similarity" in capsys.readouterr().out
    assert len(server.requests) == requests


def test_names_aliases_and_urls(tmp_path, monkeypatch):
    monkeypatch.delenv("ELMO_DOWNLOAD_BASE_URL", raising=False)
    options, weights = model_urls("large")
    assert options == (
        "https://s3-us-west-2.amazonaws.com/allennlp/models/elmo/2x4096_512_2048cnn_2xhighway_5.5B/"
        "elmo_2x4096_512_2048cnn_2xhighway_5.5B_options.json"
    )
    assert weights.endswith("2x4096_512_2048cnn_2xhighway_5.5B/elmo_2x4096_512_2048cnn_2xhighway_5.5B_weights.hdf5")
    assert model_urls("original-5.5B") == model_urls("5.5B") == (options, weights)
    assert model_urls("pubmed")[1].endswith(
        "contributed/pubmed/elmo_2x4096_512_2048cnn_2xhighway_weights_PubMed_only.hdf5"
    )
    assert model_urls("small", base_url="http://mirror/elmo")[0].startswith("http://mirror/elmo/2x1024_128")
    with pytest.raises(ValueError, match="unknown released ELMo model 'tiny'; known: small, medium"):
        download_released_model("tiny", cache_dir=tmp_path)
    # An existing path wins over a released name; other strings pass through unchanged.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "small").mkdir()
    assert resolve_pretrained("small") == "small"
    assert resolve_pretrained("someone/elmo") == "someone/elmo"


def test_progress_bars_follow_the_hugging_face_switch(server, tmp_path, capsys):
    download_released_model("small", cache_dir=tmp_path / "a", base_url=server.url)
    err = capsys.readouterr().err
    assert Path(SMALL.weights).name in err and "Reading weights" in err
    with huggingface_hub.utils.disable_progress_bars():
        download_released_model("small", cache_dir=tmp_path / "b", base_url=server.url)
    assert capsys.readouterr().err == ""


def test_force_downloads_and_converts_again(server, tmp_path):
    folder = download(server, tmp_path)
    (folder / "model.safetensors").write_bytes(b"damaged")
    assert download(server, tmp_path, force=True) == folder
    assert len(server.requested(WEIGHTS_PATH)) == 2 and (folder / "model.safetensors").stat().st_size > 100_000


# ---------------------------------------------------------------------------------------------
# Interrupted downloads resume
# ---------------------------------------------------------------------------------------------


def test_dropped_connection_resumes_with_range(server, tmp_path, converted_fixture):
    server.cut[WEIGHTS_PATH] = 100_000
    folder = download(server, tmp_path / "cache")
    assert server.requested(WEIGHTS_PATH) == [None, "bytes=100000-"]  # the second asked only for the rest
    assert_same_weights(folder, converted_fixture)


def test_interrupted_command_resumes_on_the_next_call(server, tmp_path, converted_fixture, capsys):
    """Ctrl-C during `elmo download` (a real SIGINT to this process's main thread, sent while the download waits
    for bytes): exit 130 with a hint, the partial file stays, and the next call resumes it."""
    cache = tmp_path / "cache"
    part = cache / ".downloads" / "small" / (Path(SMALL.weights).name + ".part")
    server.stall[WEIGHTS_PATH] = 50_000
    main_thread = threading.main_thread().ident

    def interrupt():  # the main thread is inside the download until the server is released: no race
        assert server.stalled.wait(60)
        deadline = time.monotonic() + 30
        while not (part.exists() and part.stat().st_size > 0) and time.monotonic() < deadline:
            time.sleep(0.02)
        signal.pthread_kill(main_thread, signal.SIGINT)

    helper = threading.Thread(target=interrupt, daemon=True)
    helper.start()
    code = cli.main(["download", "small", "--cache_dir", str(cache), "--base_url", server.url, "--disable_tqdm"])
    helper.join(10)
    out, err = capsys.readouterr()
    assert code == 130 and out == "" and err == "interrupted: run the same command again to resume the download\n"
    kept = part.stat().st_size  # the 50,000 bytes sent, less any still in flight when the signal came
    assert 0 < kept <= 50_000 and not (cache / "small").exists()

    folder = download(server, cache)
    assert server.requested(WEIGHTS_PATH) == [None, f"bytes={kept}-"]  # only the rest was sent again
    assert_same_weights(folder, converted_fixture)


def test_partial_file_of_a_changed_file_starts_again(server, tmp_path, fixture_files, converted_fixture):
    """A partial file whose ETag the server no longer has: ``If-Range`` makes the server send the whole new file."""
    downloads = tmp_path / ".downloads" / "small"
    downloads.mkdir(parents=True)
    name = Path(SMALL.weights).name
    (downloads / f"{name}.part").write_bytes(b"old version " * 100)
    url = server.url + SMALL.weights
    (downloads / f"{name}.part.json").write_text(f'{{"url": "{url}", "total": 5000, "etag": "\\"old\\""}}')
    folder = download(server, tmp_path)
    assert server.requested(WEIGHTS_PATH) == ["bytes=1200-"]  # answered with 200 and the whole file
    assert_same_weights(folder, converted_fixture)


# ---------------------------------------------------------------------------------------------
# Failures: clear errors, nothing in the cache
# ---------------------------------------------------------------------------------------------


def test_corrupt_weights_are_a_clear_error_and_leave_no_cache_entry(server, fixture_files, tmp_path):
    cache = tmp_path / "cache"
    weights = fixture_files[WEIGHTS_PATH]
    server.files[WEIGHTS_PATH] = b"\x00" * 8 + weights[8:]  # the HDF5 signature destroyed
    with pytest.raises(DownloadError) as info:
        download(server, cache)
    message = str(info.value)
    assert f"the file downloaded from {server.url}{SMALL.weights} is not a readable HDF5 file" in message
    assert "it was deleted" in message and "elmo convert --options_file" in message
    assert cache_listing(cache) == [".downloads", ".downloads/small", f".downloads/small/{Path(SMALL.options).name}"]

    # Readable HDF5 that disagrees with the options: the converter's own check, and the files are deleted.
    server.files[WEIGHTS_PATH] = weights
    server.files[OPTIONS_PATH] = fixture_files[OPTIONS_PATH].replace(b'"dim": 64', b'"dim": 32')
    (cache / ".downloads" / "small" / Path(SMALL.options).name).unlink()
    with pytest.raises(DownloadError, match=r"do not convert: .*does not match the options.*they were deleted"):
        download(server, cache)
    assert cache_listing(cache) == []


def test_refused_connection_names_the_url_and_the_manual_route(tmp_path, capsys, monkeypatch):
    cache = tmp_path / "cache"
    base = f"http://127.0.0.1:{free_port()}/"
    with pytest.raises(DownloadError) as info:
        download_released_model("small", cache_dir=cache, base_url=base, progress=False)
    message = str(info.value)
    assert f"could not download {base}{SMALL.options}" in message and "Connection refused" in message
    assert f"download {base}{SMALL.options} and {base}{SMALL.weights}, then run `elmo convert" in message
    assert f"--output_dir {cache / 'small'}`" in message
    assert cache_listing(cache) == []

    # The commands: one line, exit 1, no traceback.
    assert cli.main(["download", "small", "--cache_dir", str(cache), "--base_url", base, "--disable_tqdm"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: could not download") and err.count("\n") == 1 and "Traceback" not in err
    monkeypatch.setenv("ELMO_CACHE_DIR", str(cache))
    monkeypatch.setenv("ELMO_DOWNLOAD_BASE_URL", base)
    assert cli.main(["similar", "--model", "small", "--device", "cpu"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: --model small: could not download") and "elmo convert" in err


def test_no_lock_file_is_left_behind(server, tmp_path):
    """A download that fails (no server there) leaves the cache as it found it: no ``.small.download.lock``; a
    successful one leaves the model's folder only. The lock file is removed on release, while still held."""
    cache = tmp_path / "cache"
    with pytest.raises(DownloadError, match="Connection refused"):
        download_released_model("small", cache_dir=cache, base_url=f"http://127.0.0.1:{free_port()}/", progress=False)
    assert os.listdir(cache) == []
    weights = server.files[WEIGHTS_PATH]
    server.files[WEIGHTS_PATH] = b"not HDF5"
    with pytest.raises(DownloadError, match="not a readable HDF5 file"):
        download(server, cache)
    assert sorted(str(p.relative_to(cache)) for p in cache.rglob("*")) == [
        ".downloads",
        ".downloads/small",
        f".downloads/small/{Path(SMALL.options).name}",
    ]  # the options file that passed its check is kept for the next call, and nothing else
    server.files[WEIGHTS_PATH] = weights
    assert download(server, cache) == cache / "small" and os.listdir(cache) == ["small"]


@pytest.mark.parametrize("error", ["disk full", "converter bug"])
def test_what_a_failed_conversion_keeps_and_says(server, tmp_path, monkeypatch, error):
    """An error of writing (a full disk) keeps the downloaded files, and says that ``--force`` deletes them; any other
    error the converter raises is one ``DownloadError`` (not a traceback), and the files are deleted so that the
    next call fetches them anew."""
    import modeling_elmo.hub.convert as converter

    def fail(**kwargs):
        if error == "disk full":
            raise OSError(errno.ENOSPC, "No space left on device")
        raise RuntimeError("something the files made the converter trip on")

    monkeypatch.setattr(converter, "convert", fail)
    cache = tmp_path / "cache"
    with pytest.raises(DownloadError) as info:
        download(server, cache)
    message = str(info.value)
    if error == "disk full":
        assert message.startswith(f"could not write {cache / 'small'}: [Errno 28] No space left on device; the ")
        assert "downloaded files are kept for the next call (`elmo download small --force` deletes the downloaded " \
            "files and downloads them again)" in message, message  # fmt: skip
        assert sorted(os.listdir(cache / ".downloads" / "small")) == sorted(
            Path(path).name for path in (SMALL.options, SMALL.weights)
        )
    else:
        assert "do not convert: RuntimeError: something the files made the converter trip on (they were deleted: " \
            "the next call downloads them anew)" in message, message  # fmt: skip
        assert os.listdir(cache) == []
    monkeypatch.undo()
    requests = len(server.requests)
    assert download(server, cache) == cache / "small"
    assert len(server.requests) - requests == (0 if error == "disk full" else 2)  # the kept files are reused


def test_offline_mode_uses_the_cache_only(server, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(DownloadError, match=r"offline mode is on \(HF_HUB_OFFLINE\)\. To install it by hand"):
        download(server, cache)
    assert server.requests == []
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    folder = download(server, cache)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    assert download(server, cache) == folder


def test_concurrent_calls_download_and_convert_once(server, tmp_path, converted_fixture):
    cache = tmp_path / "cache"
    server.delay = 0.3  # so that the second call arrives while the first downloads
    results: list[Path | BaseException] = []

    def call():
        try:
            results.append(download(server, cache))
        except BaseException as err:  # reported by the assertion below
            results.append(err)

    threads = [threading.Thread(target=call) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert results == [cache / "small"] * 2
    assert server.requested(OPTIONS_PATH) == [None] and server.requested(WEIGHTS_PATH) == [None]
    assert_same_weights(cache / "small", converted_fixture)


# ---------------------------------------------------------------------------------------------
# elmo convert --push_to_hub
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def hub(monkeypatch):
    """Records what ``HfApi.create_repo`` and ``HfApi.upload_folder`` were asked (no network)."""
    calls: list[tuple] = []

    def create_repo(self, repo_id, *, private=None, exist_ok=False, **kwargs):
        calls.append(("create_repo", repo_id, private, exist_ok))
        return huggingface_hub.RepoUrl(f"https://huggingface.co/{repo_id}")

    def upload_folder(self, *, folder_path, repo_id, **kwargs):
        calls.append(("upload_folder", repo_id, sorted(os.listdir(folder_path))))

    monkeypatch.setattr(huggingface_hub.HfApi, "create_repo", create_repo)
    monkeypatch.setattr(huggingface_hub.HfApi, "upload_folder", upload_folder)
    return calls


def convert_args(fixture_dir: Path, out: Path, *extra: str) -> list[str]:
    return ["--options_file", str(fixture_dir / "options.json"), "--weight_file", str(fixture_dir / "lm_weights.hdf5"),
            "--output_dir", str(out), "--disable_tqdm", *extra]  # fmt: skip


def test_convert_push_to_hub_publishes_the_folder(fixture_dir, tmp_path, hub, capsys):
    out = tmp_path / "elmo"
    assert convert_main(convert_args(fixture_dir, out, "--push_to_hub", "someone/elmo-fixture", "--private")) == 0
    (create, repo, private, exist_ok), (upload, repo_again, files) = hub
    assert (create, repo, private, exist_ok) == ("create_repo", "someone/elmo-fixture", True, True)
    assert (upload, repo_again, files) == ("upload_folder", "someone/elmo-fixture", sorted(os.listdir(out)))
    assert {"config.json", "model.safetensors", "tokenizer.json", "README.md"} <= set(files)
    assert not [name for name in files if name.endswith(".py")]  # a plain folder (issue 27)
    assert capsys.readouterr().out.splitlines()[-1] == "Published to https://huggingface.co/someone/elmo-fixture"


def test_convert_push_to_hub_errors(fixture_dir, tmp_path, hub, capsys, monkeypatch):
    # A bad repository id is refused before converting.
    assert convert_main(convert_args(fixture_dir, tmp_path / "a", "--push_to_hub", "not a repo")) == 1
    assert "error: --push_to_hub 'not a repo' is not a Hub repository id" in capsys.readouterr().err
    assert not (tmp_path / "a").exists() and hub == []

    # A failed upload: one line saying that the folder is complete and how to publish it later.
    def refuse(self, **kwargs):
        raise LocalTokenNotFoundError("Token is required, but no token found")

    monkeypatch.setattr(huggingface_hub.HfApi, "upload_folder", refuse)
    out = tmp_path / "b"
    assert convert_main(convert_args(fixture_dir, out, "--push_to_hub", "someone/elmo")) == 1
    err = capsys.readouterr().err.splitlines()[-1]  # after transformers' "Writing model shards" bar
    assert err.startswith(f"error: converted to {out}, but publishing it to someone/elmo failed: Token is required")
    assert err.endswith(f"publish it later with `hf upload someone/elmo {out}`")
    assert (out / "model.safetensors").is_file()


def test_training_commands_take_a_released_name(server, tmp_path, monkeypatch, capsys):
    """``train-tagger --bilm NAME`` and ``train-lm --model_name_or_path NAME`` get the converted folder."""
    from modeling_elmo.training import train_lm, train_tagger

    monkeypatch.setenv("ELMO_DOWNLOAD_BASE_URL", server.url)
    monkeypatch.setenv("ELMO_CACHE_DIR", str(tmp_path / "cache"))
    conll = tmp_path / "train.txt"
    conll.write_text("John B-PER\nlives O\n\n", encoding="utf-8")
    model_args, _, _ = train_tagger.parse_args(
        ["--bilm", "small", "--train_file", str(conll), "--output_dir", str(tmp_path / "ner")]
    )
    folder = Path(model_args.bilm)
    assert folder.parent == tmp_path / "cache" and (folder / "model.safetensors").is_file()
    requests = len(server.requested(WEIGHTS_PATH))
    # Evaluation only, on a model without an LM vocabulary: refused, after the name was resolved to the folder.
    code = train_lm.main(
        ["--model_name_or_path", "small", "--eval_file", str(conll), "--output_dir", str(tmp_path / "lm")]
    )
    assert code == 1
    assert f"{folder} has no LM vocabulary" in capsys.readouterr().err
    assert len(server.requested(WEIGHTS_PATH)) == requests  # the cache, no second download
