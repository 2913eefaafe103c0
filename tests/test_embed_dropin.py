"""``elmo embed`` as a drop-in for AllenNLP's ``allennlp elmo`` (issue 18 item 2) and its one flag style (issue 16):
``--tokenized`` keeps the user's tokens, the file is read by code written against AllenNLP's layout, AllenNLP's
output types, and the old dashed flags still work with a note while ``--help`` shows only the new ones."""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest
import torch
from helpers import BATCHING_ATOL

import elmo_cli as cli
from modeling_elmo import ElmoModel, ElmoTokenizer

pytestmark = pytest.mark.usefixtures("one_thread")

# Penn-Treebank-style tokenized lines: the tokenizer would split "n't", "'s" and "U.S." differently.
PTB_LINES = [
    "I do n't know .",
    "It 's the U.S. 's turn , is n't it ?",
    "I do n't know .",  # a repeated sentence: AllenNLP's sentence_to_index keeps its last index
    "(parenthesised) tokens:stay whole",
]


@pytest.fixture
def ptb_file(tmp_path):
    path = tmp_path / "ptb.txt"
    path.write_text("\n".join(PTB_LINES) + "\n", encoding="utf-8")
    return path


def layers_of_words(model_dir, words: list[str]) -> np.ndarray:
    """The model's ``L + 1`` layers ``(L + 1, n, 2P)`` for exactly these words, one sentence alone."""
    tokenizer = ElmoTokenizer.from_pretrained(model_dir)
    model = ElmoModel.from_pretrained(model_dir).eval()
    with torch.no_grad():
        out = model(**tokenizer([words], is_split_into_words=True, return_tensors="pt"), output_hidden_states=True)
    return torch.stack([h[0] for h in out.hidden_states]).numpy()


def read_like_allennlp_users(path) -> dict[str, np.ndarray]:
    """What code written against ``allennlp elmo``'s file does: the JSON index, then a dataset per sentence."""
    with h5py.File(path, "r") as f:
        sentence_to_index = json.loads(f["sentence_to_index"][0])
        return {sentence: f[index][()] for sentence, index in sentence_to_index.items()}


def test_tokenized_keeps_ptb_tokens_and_the_file_reads_as_allennlps(tiny_dir, ptb_file, tmp_path):
    """Before: ``--tokenized`` did not exist (usage error), every line was re-tokenized, and the file had a
    ``words`` dataset instead of ``sentence_to_index``."""
    out = tmp_path / "out.hdf5"
    assert cli.main(["embed", str(ptb_file), str(out), "--tokenized", "--model", str(tiny_dir), "--disable_tqdm"]) == 0
    by_sentence = read_like_allennlp_users(out)
    assert sorted(by_sentence) == sorted(set(PTB_LINES))
    for sentence, layers in by_sentence.items():
        words = sentence.split()
        assert layers.shape == (3, len(words), 16)  # (L + 1, the user's tokens, 2P)
        np.testing.assert_allclose(layers, layers_of_words(tiny_dir, words), atol=BATCHING_ATOL, rtol=0)
    assert by_sentence["I do n't know ."].shape[1] == 5
    with h5py.File(out, "r") as f:
        assert sorted(f) == ["0", "1", "2", "3", "sentence_to_index"]  # AllenNLP's names, nothing else
        assert f["sentence_to_index"].shape == (1,)
        assert json.loads(f["sentence_to_index"][0])["I do n't know ."] == "2"  # the last of the repeated line
        assert f.attrs["input_format"] == "tokenized"
        assert [f[str(i)].attrs["words"] for i in range(4)] == [" ".join(s.split()) for s in PTB_LINES]
    # Without --tokenized the model's tokenizer splits the words its own way: not the user's 3 tokens of the last
    # line (punctuation split off). Its already split "n't" stays whole either way (issue 44, F4).
    default = tmp_path / "default.hdf5"
    assert cli.main(["embed", str(ptb_file), "-o", str(default), "--model", str(tiny_dir), "--disable_tqdm"]) == 0
    with h5py.File(default, "r") as f:
        assert f["3"].attrs["words"].split() != PTB_LINES[3].split()
        assert f["0"].attrs["words"].split() == PTB_LINES[0].split()


def test_allennlp_output_types_and_switches(tiny_dir, ptb_file, tmp_path, capsys):
    """``top`` is the last layer, ``average`` the mean over the layers, per word (AllenNLP's meanings; before,
    neither existed and ``mean`` meant the mean over the words). AllenNLP's ``--top`` switch works too."""
    full = tmp_path / "all.hdf5"
    assert cli.main(["embed", str(ptb_file), str(full), "--tokenized", "--all", "--model", str(tiny_dir),
                     "--disable_tqdm"]) == 0  # fmt: skip
    layers = read_like_allennlp_users(full)
    for switch, reduce in (("--top", lambda a: a[-1]), ("--average", lambda a: np.average(a, axis=0))):
        out = tmp_path / f"{switch[2:]}.hdf5"
        assert cli.main(["embed", str(ptb_file), str(out), "--tokenized", switch, "--model", str(tiny_dir),
                         "--disable_tqdm"]) == 0  # fmt: skip
        got = read_like_allennlp_users(out)
        for sentence, value in got.items():  # the same vectors, reduced by torch vs numpy: an ulp apart (0 seen)
            np.testing.assert_allclose(value, reduce(layers[sentence]), atol=1e-6, rtol=1e-6)
        with h5py.File(out, "r") as f:
            assert f.attrs["output_type"] == switch[2:]
    out = tmp_path / "sentence_mean.hdf5"
    assert cli.main(["embed", str(ptb_file), str(out), "--tokenized", "--output_type", "sentence_mean",
                     "--model", str(tiny_dir), "--disable_tqdm", "--forget_sentences"]) == 0  # fmt: skip
    with h5py.File(out, "r") as f:
        assert sorted(f) == ["0", "1", "2", "3"]  # --forget_sentences: no sentence_to_index, as AllenNLP's
        assert f["0"].shape == (16,)
    assert capsys.readouterr().err.count("note:") == 0


def test_old_flag_spellings_work_with_a_note_and_help_shows_only_the_new(tiny_dir, ptb_file, tmp_path, capsys):
    """Before: the dashed spellings were the only ones (``--batch_size`` was a usage error)."""
    new, old = tmp_path / "new.hdf5", tmp_path / "old.hdf5"
    assert cli.main(["embed", str(ptb_file), "-o", str(new), "--model", str(tiny_dir), "--batch_size", "2",
                     "--max_batch_words", "64", "--output_type", "sentence_mean", "--disable_tqdm"]) == 0  # fmt: skip
    assert "note:" not in capsys.readouterr().err
    assert cli.main(["embed", str(ptb_file), "-o", str(old), "--model", str(tiny_dir), "--batch-size", "2",
                     "--max-batch-words", "64", "--output-type", "mean", "--no-progress", "--cuda-device", "-1",
                     "--forget-sentences"]) == 0  # fmt: skip
    err = capsys.readouterr().err
    for old_flag, new_flag in (
        ("--batch-size", "--batch_size"),
        ("--max-batch-words", "--max_batch_words"),
        ("--output-type", "--output_type"),
        ("--no-progress", "--disable_tqdm"),
        ("--forget-sentences", "--forget_sentences"),
        ("--cuda-device", "--device cuda:N"),
    ):
        assert f"elmo embed: note: {old_flag} is " in err and f"use {new_flag}" in err, (old_flag, err)
    assert "--output_type mean is deprecated" in err and "use --output_type sentence_mean" in err
    with h5py.File(new, "r") as a, h5py.File(old, "r") as b:
        assert b.attrs["output_type"] == "sentence_mean"
        assert "sentence_to_index" in a and "sentence_to_index" not in b
        for i in range(len(PTB_LINES)):
            np.testing.assert_array_equal(a[str(i)][()], b[str(i)][()])

    assert cli.main(["embed", "--help"]) == 0
    text = capsys.readouterr().out
    options = text.split("\noptions:", 1)[1]
    for flag in ("--batch_size", "--max_batch_words", "--output_type", "--disable_tqdm", "--tokenized",
                 "--forget_sentences"):  # fmt: skip
        assert flag in options
    for hidden in ("--batch-size", "--max-batch-words", "--output-type", "--no-progress", "--cuda-device",
                   "--forget-sentences", "layers", "--top"):  # fmt: skip
        assert hidden not in options, hidden
    assert "sentence_to_index" in text and "AllenNLP" in text  # the layout, beside AllenNLP's


def test_embed_usage_errors(tiny_dir, ptb_file, tmp_path, capsys):
    assert cli.main(["embed", str(ptb_file), "--raw", "--tokenized"]) == 2  # free text or tokenized lines
    assert "not allowed with argument" in capsys.readouterr().err
    out = tmp_path / "a.hdf5"
    assert cli.main(["embed", str(ptb_file), str(out), "-o", str(tmp_path / "b.hdf5"), "--model", str(tiny_dir)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: two outputs") and err.count("\n") == 1
    assert cli.main(["embed", str(ptb_file), str(out), "--batch_size", "0", "--model", str(tiny_dir)]) == 2
    assert "argument --batch_size: must be at least 1" in capsys.readouterr().err  # at parsing (issue 49)
    assert not out.exists()


def test_embed_corpus_old_output_names_warn_and_still_work(tiny_dir):
    """``embed_corpus(output="layers"/"mean")``: the old names map to ``all``/``sentence_mean`` with a FutureWarning."""
    from modeling_elmo.inference.embed_corpus import embed_corpus

    model, tokenizer = ElmoModel.from_pretrained(tiny_dir).eval(), ElmoTokenizer.from_pretrained(tiny_dir)
    lines = ["A b c .", "", "D e ."]
    for old, new in (("layers", "all"), ("mean", "sentence_mean")):
        with pytest.warns(FutureWarning, match=f"output={old!r} is deprecated.*use output={new!r}"):
            got = list(embed_corpus(model, tokenizer, lines, output=old, progress=False))
        want = list(embed_corpus(model, tokenizer, lines, output=new, progress=False))
        for (i, a), (j, b) in zip(got, want, strict=True):
            assert i == j
            np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="output must be one of"):
        list(embed_corpus(model, tokenizer, lines, output="words"))
