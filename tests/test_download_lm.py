"""`elmo download original-lm` (issue 28 item 1): the softmax and the vocabulary come through the same resumable,
locked, mirror-aware path as the biLM, from a local HTTP server (``test_download.FileServer``) that serves small
random files under the released paths."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import h5py
import pytest
import torch
from original_format import write_original_model
from softmax_format import vocabulary, write_softmax, write_vocab
from test_download import serve

import elmo_cli as cli
from modeling_elmo.hub.download import RELEASED_MODELS, DownloadError, download_released_model, lm_head_urls

LM = RELEASED_MODELS["original-lm"]


@pytest.fixture(scope="module")
def lm_files(tmp_path_factory) -> dict[str, bytes]:
    """A random biLM, softmax and vocabulary (specials on lines 5, 9, 0) under original-lm's released paths."""
    folder = tmp_path_factory.mktemp("released")
    options, weights = write_original_model(
        folder, lstm_dim=16, projection_dim=8, filters=[(1, 4), (2, 4)], char_dim=4, n_highway=1
    )
    vocab = write_vocab(folder / "vocab.txt", vocabulary(64, (5, 9, 0)))
    softmax = write_softmax(folder / "softmax.hdf5", 64, 8, seed=4)
    return {
        "/" + LM.options: options.read_bytes(),
        "/" + LM.weights: weights.read_bytes(),
        "/" + LM.softmax: softmax.read_bytes(),
        "/" + LM.vocab: vocab.read_bytes(),
    }


@pytest.fixture
def server(lm_files):
    server, thread = serve(dict(lm_files))
    yield server
    server.release.set()
    server.shutdown()
    server.server_close()
    thread.join(10)


def test_released_paths_are_those_of_the_facts():
    base = "https://s3-us-west-2.amazonaws.com/allennlp/models/elmo/"
    assert lm_head_urls("original-lm", base) == (
        base + "2x4096_512_2048cnn_2xhighway/elmo_2x4096_512_2048cnn_2xhighway_softmax_weights.hdf5",
        base + "vocab-2016-09-10.txt",
    )
    assert lm_head_urls("original-5.5B-lm", base) == (
        base + "2x4096_512_2048cnn_2xhighway_5.5B/elmo_2x4096_512_2048cnn_2xhighway_5.5B_softmax_weights.hdf5",
        base + "2x4096_512_2048cnn_2xhighway_5.5B/tf_checkpoint/vocab-enwiki-news-500000.txt",
    )
    assert lm_head_urls("original", base) is None
    assert RELEASED_MODELS["original-lm"].weights == RELEASED_MODELS["original"].weights


def test_elmo_download_original_lm_fetches_converts_and_caches(server, lm_files, tmp_path, capsys, monkeypatch):
    from modeling_elmo import ElmoForPreTraining

    monkeypatch.setenv("ELMO_DOWNLOAD_BASE_URL", server.url)
    monkeypatch.setenv("ELMO_CACHE_DIR", str(tmp_path / "cache"))
    assert cli.main(["download", "original-lm", "--disable_tqdm"]) == 0
    folder = Path(capsys.readouterr().out.strip())
    assert folder == tmp_path / "cache" / "original-lm"
    model = ElmoForPreTraining.from_pretrained(folder)
    served = tmp_path / "served.hdf5"  # the served softmax, read back independently
    served.write_bytes(lm_files["/" + LM.softmax])
    with h5py.File(served, "r") as f:
        assert torch.equal(model.softmax.weight, torch.from_numpy(f["softmax/W"][()]))
    assert (model.config.lm_bos_vocab_id, model.config.lm_eos_vocab_id) == (5, 9)
    assert sorted(p.name for p in (tmp_path / "cache").iterdir() if not p.name.endswith(".lock")) == ["original-lm"]
    requests = len(server.requests)
    assert cli.main(["download", "original-lm", "--disable_tqdm"]) == 0  # cached: no request
    assert len(server.requests) == requests
    # and `elmo score --model original-lm` uses it
    text = tmp_path / "in.txt"
    text.write_text("word1 word2\n", encoding="utf-8")
    assert cli.main(["score", "--model", "original-lm", "--disable_tqdm", str(text)]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["tokens"] == ["word1", "word2"] and result["perplexity"] > 1


def test_dropped_softmax_download_resumes(server, tmp_path):
    path = "/" + LM.softmax
    server.cut[path] = 3000
    folder = download_released_model("original-lm", cache_dir=tmp_path, base_url=server.url, progress=False)
    assert server.requested(path) == [None, "bytes=3000-"]
    assert json.loads((folder / "config.json").read_text())["lm_vocab_size"] == 64


def test_a_vocabulary_that_does_not_fit_is_deleted_and_reported(server, tmp_path):
    server.files["/" + LM.vocab] = "\n".join(vocabulary(63, (0, 1, 2))).encode() + b"\n"
    with pytest.raises(DownloadError, match=r"has 63 words \(lines\), but softmax/W"):
        download_released_model("original-lm", cache_dir=tmp_path, base_url=server.url, progress=False)
    assert not (tmp_path / "original-lm").exists()
    assert not (tmp_path / ".downloads").exists()  # the wrong files were deleted: the next call fetches them anew


def test_concurrent_downloads_of_the_lm_convert_once(server, tmp_path):
    results, errors = [], []

    def run():
        try:
            results.append(
                download_released_model("original-lm", cache_dir=tmp_path, base_url=server.url, progress=False)
            )
        except Exception as err:  # noqa: BLE001 (reported below)
            errors.append(err)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors and len(set(results)) == 1
    assert server.requested("/" + LM.softmax) == [None]  # fetched once
