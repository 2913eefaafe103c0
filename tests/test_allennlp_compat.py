"""The AllenNLP drop-in APIs (issue 18 item 3): ``batch_to_ids``, ``Elmo`` and ``ElmoEmbedder`` reproduce the
TensorFlow fixture outputs in their default, stateful mode (AllenNLP's), match ``ElmoModel`` in stateless mode,
and keep AllenNLP's argument names, shapes and file layout."""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest
import torch
from helpers import BATCHING_ATOL

import elmo_cli as cli
from modeling_elmo import ElmoModel, ElmoTokenizer
from modeling_elmo.compat.allennlp import Elmo, ElmoEmbedder, batch_to_ids

pytestmark = pytest.mark.usefixtures("one_thread")

PARITY = 1e-5  # the bound, as tests/test_modeling.py; measured 9.5e-7 (7.2e-7 on an AMX Xeon)
TOP_ONLY = [-1e4, -1e4, 0.0]  # fixed mix weights: softmax gives exactly (0, 0, 1), i.e. the top layer


def fixture_batches(fixture_dir):
    """The fixture's 10 stateful batches: batch i holds sentence i of each of the 3 lists; and the expected top
    layers ``(words, 2P)`` (forward and backward side by side)."""
    lists = json.loads((fixture_dir / "sentences.json").read_text(encoding="utf-8"))
    files = [h5py.File(fixture_dir / f"lm_embeddings_{k}.hdf5", "r") for k in range(3)]
    try:
        for i in range(len(lists[0])):
            batch = [lists[k][i].split(" ") for k in range(3)]
            yield batch, [np.concatenate(list(files[k][str(i)][()]), axis=-1) for k in range(3)]
    finally:
        for f in files:
            f.close()


def fixture_files(fixture_dir):
    return fixture_dir / "options.json", fixture_dir / "lm_weights.hdf5"


# ------------------------------------------------------------------------------------------ batch_to_ids


def test_batch_to_ids_is_allennlps_character_ids():
    """AllenNLP's ELMoCharacterMapper: [258, bytes..., 259, 260...] + 1, <S>/</S> as boundary ids, 0 = padding."""
    ids = batch_to_ids([["a", "<S>", "é" * 30], ["</S>"], []])
    assert ids.shape == (3, 3, 50) and ids.dtype == torch.long
    pad = [261] * 50
    assert ids[0, 0].tolist() == [259, 98, 260, *pad[:47]]  # "a" = byte 97
    assert ids[0, 1].tolist() == [259, 257, 260, *pad[:47]]  # <S>: begin-of-sentence 256 + 1
    assert ids[1, 0].tolist() == [259, 258, 260, *pad[:47]]  # </S>: end-of-sentence 257 + 1
    long_word = list("é".encode() * 30)[:48]  # UTF-8 bytes cut to 48, even inside a character
    assert ids[0, 2].tolist() == [259, *(b + 1 for b in long_word), 260]
    assert ids[1, 1:].eq(0).all() and ids[2].eq(0).all()  # padded positions are all zeros
    sentences = [["The", "cat", "sat", "."], ["Hi"]]
    tokenizer_ids = ElmoTokenizer()(sentences, is_split_into_words=True, padding=True, return_tensors="pt")
    assert torch.equal(batch_to_ids(sentences), tokenizer_ids["input_ids"])
    assert batch_to_ids([[], []]).shape == (2, 0, 50)
    with pytest.raises(TypeError, match="list of sentences"):
        batch_to_ids(["not", "tokenized"])


# ------------------------------------------------------------------------------------------ parity


def test_elmo_reproduces_the_tensorflow_fixture_statefully_by_default(fixture_dir, converted_fixture):
    """AllenNLP's ``Elmo(options_file, weight_file, ...)`` on the original files (converted in memory), stateful
    as AllenNLP's, gives the TensorFlow outputs over the 10 batches; so does a converted folder."""
    for elmo in (
        Elmo(*fixture_files(fixture_dir), 1, dropout=0.0, scalar_mix_parameters=TOP_ONLY),
        Elmo(converted_fixture, None, 1, dropout=0.0, scalar_mix_parameters=TOP_ONLY),
    ):
        assert elmo.stateful and elmo.get_output_dim() == 32
        worst, batches = 0.0, 0
        for batch, targets in fixture_batches(fixture_dir):
            out = elmo(batch_to_ids(batch))
            (top,) = out["elmo_representations"]
            assert out["mask"].dtype == torch.bool and out["mask"].sum(1).tolist() == [len(s) for s in batch]
            for k, target in enumerate(targets):
                worst = max(worst, float((top[k, : len(target)] - torch.from_numpy(target)).abs().max()))
                assert top[k, len(target) :].eq(0).all()
            batches += 1
        assert batches == 10 and worst <= PARITY, worst
        elmo.reset_states()  # the first batch again, from zero state
        batch, targets = next(fixture_batches(fixture_dir))
        top = elmo(batch_to_ids(batch))["elmo_representations"][0]
        assert float((top[0, : len(targets[0])] - torch.from_numpy(targets[0])).abs().max()) <= PARITY


def test_elmo_embedder_reproduces_the_tensorflow_fixture_statefully_by_default(fixture_dir):
    embedder = ElmoEmbedder(*fixture_files(fixture_dir))
    batches = list(fixture_batches(fixture_dir))
    sentences = [words for batch, _ in batches for words in batch]  # in order: batch i = rows 3i..3i+2
    targets = [target for _, expected in batches for target in expected]
    vectors = list(embedder.embed_sentences(sentences, batch_size=3))
    assert len(vectors) == 30
    worst = 0.0
    for words, layers, target in zip(sentences, vectors, targets, strict=True):
        assert layers.shape == (3, len(words), 32) and layers.dtype == np.float32  # (L + 1, words, 2P)
        worst = max(worst, float(np.abs(layers[-1] - target).max()))
    assert worst <= PARITY, worst


def test_stateless_mode_matches_elmo_model(converted_fixture, fixture_dir):
    """``stateful=False`` is ElmoModel's default behaviour: the same vectors, call after call."""
    model = ElmoModel.from_pretrained(converted_fixture).eval()
    tokenizer = ElmoTokenizer.from_pretrained(converted_fixture)
    elmo = Elmo(*fixture_files(fixture_dir), 2, dropout=0.0, stateful=False).eval()
    embedder = ElmoEmbedder(converted_fixture, stateful=False)
    with torch.no_grad():
        for mix, weights in zip(elmo.scalar_mixes, ([0.3, -0.5, 1.0], [1.0, 0.0, -1.0]), strict=True):
            mix.scalar_parameters.copy_(torch.tensor(weights))
            mix.gamma.fill_(0.7)
        model.scalar_mixes[0].load_state_dict(elmo.scalar_mixes[1].state_dict())
    for batch, _ in list(fixture_batches(fixture_dir))[:3]:
        with torch.no_grad():
            expected = model(**tokenizer(batch, is_split_into_words=True, padding=True, return_tensors="pt"),
                             output_hidden_states=True)  # fmt: skip
            out = elmo(batch_to_ids(batch))
        assert torch.allclose(out["elmo_representations"][1], expected.elmo, atol=BATCHING_ATOL)
        assert torch.equal(out["mask"], expected.mask.bool())
        for k, layers in enumerate(embedder.embed_batch(batch)):
            n = len(batch[k])
            want = torch.stack([h[k, :n] for h in expected.hidden_states]).numpy()
            np.testing.assert_allclose(layers, want, atol=BATCHING_ATOL)
    again = embedder.embed_sentence(batch[0])
    np.testing.assert_array_equal(again, embedder.embed_sentence(batch[0]))  # no state carried


# ------------------------------------------------------------------------------------------ AllenNLP's API


def test_elmo_module_behaves_as_allennlps(fixture_dir):
    elmo = Elmo(*fixture_files(fixture_dir), num_output_representations=2, dropout=0.5)
    trainable = {name for name, p in elmo.named_parameters() if p.requires_grad}
    assert trainable == {f"scalar_mixes.{i}.{p}" for i in range(2) for p in ("scalar_parameters", "gamma")}
    ids = batch_to_ids([["The", "cat"], ["A", "dog", "ran"]])
    out = elmo(ids.view(1, 2, 3, 50))  # more leading dimensions are flattened and restored, as AllenNLP does
    assert [r.shape for r in out["elmo_representations"]] == [torch.Size([1, 2, 3, 32])] * 2
    assert out["mask"].shape == (1, 2, 3)
    loss = sum(r.sum() for r in out["elmo_representations"])
    loss.backward()  # the mixes train, the biLM is frozen
    assert elmo.scalar_mixes[0].scalar_parameters.grad is not None
    fine_tuned = Elmo(*fixture_files(fixture_dir), 1, requires_grad=True, scalar_mix_parameters=[0.0, 0.0, 0.0])
    assert all(p.requires_grad for p in fine_tuned._elmo_lstm.parameters())
    assert not any(p.requires_grad for p in fine_tuned.scalar_mixes.parameters())  # fixed mix, as AllenNLP
    with pytest.raises(ValueError, match="keep_sentence_boundaries"):
        Elmo(*fixture_files(fixture_dir), 1, keep_sentence_boundaries=True)
    with pytest.raises(ValueError, match="weight_file"):
        Elmo(fixture_dir / "options.json", None, 1)
    with pytest.raises(ValueError, match="options_file and weight_file"):
        ElmoEmbedder()


def test_embed_file_writes_what_elmo_embed_writes(fixture_dir, converted_fixture, tmp_path):
    """``ElmoEmbedder.embed_file`` (stateless, to compare with the command) gives the file of ``elmo embed
    --tokenized``, read back by AllenNLP-layout code; ``top`` and ``average`` keep AllenNLP's meanings."""
    lines = ["I do n't know .", "It 's here , is n't it ?", "", "I do n't know ."]
    text = tmp_path / "in.txt"
    text.write_text("\n".join(lines) + "\n", encoding="utf-8")
    # The files come from different batchings (2, the default, one by one): float32 GEMMs blocked differently round
    # differently, measured up to 7.2e-7 on an AMX Xeon; 1e-5 is the batch-invariance bound the docs state.
    batch_tolerance = 1e-5
    embedder = ElmoEmbedder(converted_fixture, stateful=False)
    with open(text, encoding="utf-8") as handle:  # AllenNLP's argument is an open file
        embedder.embed_file(handle, tmp_path / "api.hdf5", batch_size=2)
    embedder.embed_file(text, tmp_path / "top.hdf5", output_format="top", forget_sentences=True)
    embedder.embed_file(str(text), tmp_path / "average.hdf5", output_format="average")
    assert cli.main(["embed", str(text), str(tmp_path / "cli.hdf5"), "--tokenized", "--model", str(converted_fixture),
                     "--device", "cpu", "--disable_tqdm"]) == 0  # fmt: skip
    with h5py.File(tmp_path / "api.hdf5", "r") as a, h5py.File(tmp_path / "cli.hdf5", "r") as c:
        assert sorted(a) == sorted(c) == ["0", "1", "2", "3", "sentence_to_index"]
        index = json.loads(a["sentence_to_index"][0])
        assert index == json.loads(c["sentence_to_index"][0]) == {lines[0]: "3", lines[1]: "1", "": "2"}
        for i, line in enumerate(lines):
            assert a[str(i)].shape == (3, len(line.split()), 32)
            assert a[str(i)].attrs["words"] == c[str(i)].attrs["words"] == line
            np.testing.assert_allclose(a[str(i)][()], c[str(i)][()], atol=batch_tolerance)
        with h5py.File(tmp_path / "top.hdf5", "r") as top, h5py.File(tmp_path / "average.hdf5", "r") as average:
            assert "sentence_to_index" not in top
            for i in range(len(lines)):
                np.testing.assert_allclose(top[str(i)][()], a[str(i)][-1], atol=batch_tolerance)
                np.testing.assert_allclose(average[str(i)][()], a[str(i)][()].mean(axis=0), atol=batch_tolerance)
    with pytest.raises(ValueError, match="use_sentence_keys"):
        embedder.embed_file(text, tmp_path / "x.hdf5", use_sentence_keys=True)
    with pytest.raises(ValueError, match="output_format"):
        embedder.embed_file(text, tmp_path / "x.hdf5", output_format="mean")
    assert not (tmp_path / "x.hdf5").exists()
