"""`elmo export-vectors` and export_word2vec: layer-0 vectors in word2vec format, read back by the real gensim."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

import elmo_cli as cli
from modeling_elmo import ElmoModel, ElmoTokenizer
from modeling_elmo.demo_models.model import demo_model_path
from modeling_elmo.inference.static_vectors import export_word2vec, read_word_list

pytestmark = pytest.mark.usefixtures("one_thread")


def _gensim():
    """gensim's KeyedVectors; the [gensim] extra is part of [dev], so CI (CI=true) must have it."""
    if os.environ.get("CI") == "true" or os.environ.get("ELMO_REQUIRE_SHARED") == "1":
        from gensim.models import KeyedVectors
    else:
        KeyedVectors = pytest.importorskip("gensim.models", reason="needs the [gensim] extra").KeyedVectors
    return KeyedVectors


# The boundary words and <UNK> as in a bilm-tf vocabulary, words with accents, CJK and an emoji, and a word longer
# than the 48 bytes the character ids keep.
WORDS = ["<S>", "</S>", "<UNK>", "the", "bank", "river", "Café", "naïve", "日本語", "🙂", "x" * 60, ",", "don't"]
SENTENCES = [
    ["the", "bank", "of", "the", "river", ","],
    ["Café", "naïve", "日本語", "🙂"],
    ["x" * 60, "don't", "<UNK>"],
]


@pytest.fixture(scope="module")
def demo():
    tokenizer = ElmoTokenizer.from_pretrained(demo_model_path())
    model = ElmoModel.from_pretrained(demo_model_path()).eval()
    return model, tokenizer


def _layer0_in_sentences(model, tokenizer) -> dict[str, np.ndarray]:
    """Each word's layer 0 as the model computes it inside whole sentences (``hidden_states[0]``, which is
    ``[x; x]``), and the boundary vectors the model puts around every sentence."""
    batch = tokenizer(SENTENCES, is_split_into_words=True, padding=True, return_tensors="pt")
    with torch.no_grad():
        out = model(**batch, output_hidden_states=True)
        boundaries = model.char_cnn(model.boundary_ids)  # (2, P): <S>, </S>
    width = model.config.projection_dim
    vectors = {}
    for row, words in enumerate(SENTENCES):
        for k, word in enumerate(words):
            layer0 = out.hidden_states[0][row, k]
            assert torch.equal(layer0[:width], layer0[width:])  # [x; x]
            if word in WORDS:
                vectors[word] = layer0[:width].numpy()
    vectors["<S>"], vectors["</S>"] = boundaries.numpy()
    assert set(vectors) == set(WORDS)
    return vectors


@pytest.mark.parametrize("binary", [False, True], ids=["text", "binary"])
def test_gensim_reads_the_model_layer0(demo, tmp_path, binary):
    KeyedVectors = _gensim()
    model, tokenizer = demo
    path = tmp_path / ("vectors.bin" if binary else "vectors.txt")
    assert export_word2vec(model, tokenizer, WORDS, path, binary=binary, batch_size=4, progress=False) == len(WORDS)
    loaded = KeyedVectors.load_word2vec_format(str(path), binary=binary)
    assert loaded.index_to_key == WORDS
    assert loaded.vector_size == model.config.projection_dim
    # The same words through the model's forward as one batch of one-word sentences, apart from the export: the file
    # holds these float32 values exactly (binary: the bytes; text: 9 significant digits give float32 back).
    batch = tokenizer([[word] for word in WORDS], is_split_into_words=True, padding=True, return_tensors="pt")
    with torch.no_grad():
        same_batch = model(**batch, output_hidden_states=True).hidden_states[0][:, 0, : model.config.projection_dim]
    same = export_word2vec(
        model, tokenizer, WORDS, tmp_path / "same", binary=binary, batch_size=len(WORDS), progress=False
    )
    assert same == len(WORDS)
    np.testing.assert_array_equal(KeyedVectors.load_word2vec_format(str(tmp_path / "same"), binary=binary).vectors,
                                  same_batch.numpy())  # fmt: skip
    # Inside whole sentences (other batches): layer 0 is context-free, so the same up to float32 rounding, which
    # depends on the batch's shape (the convolution's and the projection's sums). Measured on the demo model's first
    # 3,000 words: float32 lies up to 9e-7 x max|x| (6.7e-6 on values up to 14) from a float64 run, whatever the batch
    # size, so two float32 runs up to twice that; here 3e-7 (1.4e-6 absolute). Bound: 4e-6 x max(1, max|x|).
    expected = _layer0_in_sentences(model, tokenizer)
    worst = max(
        float(np.abs(loaded[word] - vector).max() / max(1.0, np.abs(vector).max())) for word, vector in expected.items()
    )
    assert worst <= 4e-6, worst
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary file left


def test_cli_writes_both_formats(tmp_path, capsys):
    KeyedVectors = _gensim()
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\ufeff" + "\r\n".join(WORDS) + "\r\n", encoding="utf-8")  # a BOM and CRLF lines are fine
    assert read_word_list(vocab) == WORDS
    text, binary = tmp_path / "v.txt", tmp_path / "v.bin"
    argv = ["export-vectors", "--vocab_file", str(vocab), "--disable_tqdm", "--model", "demo"]
    assert cli.main([*argv, "--output_file", str(text), "--batch_size", "3"]) == 0
    assert cli.main([*argv, "--output_file", str(binary), "--binary", "--batch_size", "3"]) == 0
    assert "Wrote 13 vectors of 64 values" in capsys.readouterr().err
    a = KeyedVectors.load_word2vec_format(str(text))
    b = KeyedVectors.load_word2vec_format(str(binary), binary=True)
    assert a.index_to_key == b.index_to_key == WORDS
    np.testing.assert_array_equal(a.vectors, b.vectors)  # the same batches, and text keeps float32 exactly


@pytest.mark.parametrize(
    "lines, message",
    [
        (["the", "New York"], "line 2: 'New York' holds whitespace"),
        (["the", "", "bank"], "line 2 is empty"),
        (["the", "bank", "the"], "line 3 repeats the word 'the' of line 1"),
        ([], "holds no words"),
    ],
)
def test_cli_refuses_bad_vocabularies(tmp_path, capsys, lines, message):
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    out = tmp_path / "v.txt"
    assert cli.main(["export-vectors", "--vocab_file", str(vocab), "--output_file", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error:") and message in err, err
    assert os.listdir(tmp_path) == ["vocab.txt"]  # nothing written


def test_cli_errors(tmp_path, capsys):
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("the\nbank\n", encoding="utf-8")
    out = tmp_path / "v.txt"
    out.write_text("keep me")
    base = ["export-vectors", "--vocab_file", str(vocab), "--disable_tqdm"]
    assert cli.main([*base, "--output_file", str(out)]) == 1
    assert "exists; pass --overwrite" in capsys.readouterr().err
    assert out.read_text() == "keep me"
    assert cli.main(["export-vectors", "--vocab_file", str(tmp_path / "no.txt"), "--output_file", "x.txt"]) == 1
    assert "no such file" in capsys.readouterr().err
    assert cli.main([*base, "--output_file", str(tmp_path / "no" / "v.txt")]) == 1
    assert "does not exist" in capsys.readouterr().err
    assert cli.main([*base, "--output_file", str(out), "--overwrite"]) == 0
    assert out.read_text().startswith("2 64\n")
    assert cli.main(["export-vectors", "--help"]) == 0
    assert "word2vec" in capsys.readouterr().out


def test_export_refuses_bad_words(demo, tmp_path):
    model, tokenizer = demo
    with pytest.raises(ValueError, match="repeated"):
        export_word2vec(model, tokenizer, ["a", "b", "a"], tmp_path / "v.txt", progress=False)
    with pytest.raises(ValueError, match="whitespace"):
        export_word2vec(model, tokenizer, ["a", "b\tc"], tmp_path / "v.txt", progress=False)
    assert not list(tmp_path.iterdir())
