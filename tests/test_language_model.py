"""The released softmax (issue 28 items 1-3): conversion, `elmo score`, the elmo-fill-mask pipeline, `elmo download
original-lm`.

The reference is AllenNLP 2.10.1: ``tests/fixtures/softmax-lm`` holds a random biLM and softmax in the released
layout (``<S>``, ``</S>``, ``<UNK>`` on lines 58, 4 and 191 of the vocabulary) and, in ``reference.json``, AllenNLP's
``_ElmoBiLm`` top layer times ``W`` plus ``b`` computed in float64 by ``scripts/make_softmax_reference.py``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from helpers import BATCHING_ATOL
from original_format import write_original_model
from softmax_format import vocabulary, write_softmax, write_vocab

import elmo_cli as cli
import modeling_elmo  # noqa: F401  (registers the Auto classes and pipelines)
from modeling_elmo import ElmoForPreTraining, ElmoModel, ElmoTokenizer
from modeling_elmo.hub.convert import ConversionError, convert
from modeling_elmo.hub.convert_softmax import copy_softmax_weight
from modeling_elmo.scoring_elmo import (
    ElmoSentenceScorer,
    load_language_model,
    log_sum_exp_logits,
    score_sentences,
    target_log_probs,
    top_layer_with_boundaries,
)

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "softmax-lm"
REFERENCE = json.loads((FIXTURE / "reference.json").read_text(encoding="utf-8"))
# Measured: |ours - AllenNLP| <= 4e-6 on the sentence sums (float32 biLM and softmax against float64 sums of
# AllenNLP's float32 top layer); the issue asks for 2e-3. 5e-5 leaves room for other BLAS kernels.
LOGPROB_TOL = 5e-5
# Measured: fill-mask scores within 1e-8 of the reference (probabilities of ~0.02).
SCORE_TOL = 1e-6


@pytest.fixture(scope="module")
def lm_folder(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("lm") / "model"
    convert(
        FIXTURE / "options.json",
        FIXTURE / "lm_weights.hdf5",
        out,
        vocab_file=FIXTURE / "vocab.txt",
        softmax_weight_file=FIXTURE / "softmax_weights.hdf5",
        progress=False,
    )
    return out


@pytest.fixture(scope="module")
def lm(lm_folder):
    return load_language_model(lm_folder)


# ---------------------------------------------------------------------------------------------
# Conversion
# ---------------------------------------------------------------------------------------------


def test_conversion_keeps_the_softmax_and_finds_the_special_words_by_name(lm_folder):
    model = ElmoForPreTraining.from_pretrained(lm_folder)
    with h5py.File(FIXTURE / "softmax_weights.hdf5", "r") as f:
        assert torch.equal(model.softmax.weight, torch.from_numpy(f["softmax/W"][()]))
        assert torch.equal(model.softmax.bias, torch.from_numpy(f["softmax/b"][()]))
    words = (FIXTURE / "vocab.txt").read_text(encoding="utf-8").split("\n")
    assert (words[57], words[3], words[190]) == ("<S>", "</S>", "<UNK>")
    assert (model.config.lm_bos_vocab_id, model.config.lm_eos_vocab_id, model.config.lm_vocab_size) == (57, 3, 240)
    assert ElmoTokenizer.from_pretrained(lm_folder)(["qwertz"], is_split_into_words=True, return_vocab_ids=True)[
        "vocab_ids"
    ] == [190]
    index = json.loads((lm_folder / "model.safetensors.index.json").read_text())
    assert index["weight_map"]["softmax.weight"] != index["weight_map"]["softmax.bias"]  # W has a shard of its own
    assert json.loads((lm_folder / "config.json").read_text())["architectures"] == ["ElmoForPreTraining"]


def test_the_lm_folder_loads_as_an_elmo_model_with_the_same_biLM(lm_folder, tmp_path):
    plain = tmp_path / "plain"
    convert(FIXTURE / "options.json", FIXTURE / "lm_weights.hdf5", plain, progress=False)
    want, got = ElmoModel.from_pretrained(plain), ElmoModel.from_pretrained(lm_folder)
    want_state, got_state = want.state_dict(), got.state_dict()
    assert want_state.keys() == got_state.keys()
    assert all(torch.equal(got_state[key], want_state[key]) for key in want_state)
    batch = ElmoTokenizer.from_pretrained(plain)(["the cat sat .", "a dog"], padding=True, return_tensors="pt")
    with torch.no_grad():
        pairs = zip(
            got(**batch, output_hidden_states=True).hidden_states,
            want(**batch, output_hidden_states=True).hidden_states,
            strict=True,
        )
        for a, b in pairs:
            assert torch.allclose(a, b, atol=BATCHING_ATOL, rtol=0)  # same weights, other wrapper: measured 1.2e-7


def _random_lm(folder: Path, vocab_size: int = 50, specials_at=(10, 20, 30), width: int | None = None, **softmax):
    options, weights = write_original_model(
        folder, lstm_dim=16, projection_dim=8, filters=[(1, 4), (2, 4)], char_dim=4, n_highway=1
    )
    vocab = write_vocab(folder / "vocab.txt", vocabulary(vocab_size, specials_at))
    soft = write_softmax(folder / "softmax.hdf5", vocab_size, width or 8, **softmax)
    return options, weights, vocab, soft


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name not in ("src",))


def test_vocabulary_of_another_size_is_refused_and_nothing_is_written(tmp_path):
    options, weights, _, soft = _random_lm(tmp_path / "src")
    short = write_vocab(tmp_path / "src" / "short.txt", vocabulary(49, (0, 1, 2)))
    with pytest.raises(ConversionError, match=r"has 49 words \(lines\), but softmax/W .* has 50 rows"):
        convert(options, weights, tmp_path / "out", vocab_file=short, softmax_weight_file=soft, progress=False)
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize(
    "problem, match",
    [
        ("no-vocab", "needs --vocab_file"),
        ("width", r"the options imply \(V, 8\)"),
        ("no-unk", "no line holds <UNK>"),
        ("extra", "unexpected dataset 'softmax/extra'"),
        ("missing", "missing dataset 'softmax/b'"),
        ("nan", "NaN or infinite"),
        ("not-hdf5", "not an HDF5 file"),
    ],
)
def test_bad_softmax_inputs_are_clear_errors(tmp_path, problem, match):
    options, weights, vocab, soft = _random_lm(tmp_path / "src", width=12 if problem == "width" else None)
    if problem == "no-vocab":
        vocab = None
    elif problem == "no-unk":
        vocab.write_text(vocab.read_text().replace("<UNK>", "unk"))
    elif problem in ("extra", "missing", "nan"):
        with h5py.File(soft, "a") as f:
            if problem == "extra":
                f["softmax/extra"] = np.zeros(3, np.float32)
            elif problem == "missing":
                del f["softmax/b"]
            else:
                f["softmax/W"][44, 3] = np.nan
    elif problem == "not-hdf5":
        soft.write_bytes(b"not hdf5 at all")
    with pytest.raises(ConversionError, match=match):
        convert(options, weights, tmp_path / "out", vocab_file=vocab, softmax_weight_file=soft, progress=False)
    assert _leftovers(tmp_path) == []


def test_a_maxtermid_line_gets_no_row(tmp_path):
    """bilm-tf's and lm_1b's vocabulary readers skip a line ``!!!MAXTERMID``: the rows of W number the other lines."""
    options, weights, _, soft = _random_lm(tmp_path / "src")
    words = vocabulary(50, (10, 20, 30))
    vocab = write_vocab(tmp_path / "src" / "maxterm.txt", words[:25] + ["!!!MAXTERMID"] + words[25:])
    out = tmp_path / "out"
    convert(options, weights, out, vocab_file=vocab, softmax_weight_file=soft, progress=False)
    tokenizer = ElmoTokenizer.from_pretrained(out)
    assert len(tokenizer.get_vocab()) - 1 == 50 and "!!!MAXTERMID" not in tokenizer.get_vocab()
    assert tokenizer.convert_tokens_to_ids([words[24], words[25], words[49]]) == [24, 25, 49]
    assert ElmoForPreTraining.from_pretrained(out).config.lm_eos_vocab_id == 20
    other = write_softmax(tmp_path / "src" / "other.hdf5", 49, 8)
    with pytest.raises(ConversionError, match=r"has 50 words \(lines\) besides its !!!MAXTERMID line, but"):
        convert(options, weights, tmp_path / "out2", vocab_file=vocab, softmax_weight_file=other, progress=False)


def test_chunked_copy_equals_the_whole_array_whatever_the_chunk(tmp_path):
    soft = write_softmax(tmp_path / "s.hdf5", 103, 8, seed=3)
    from safetensors.numpy import load_file

    with h5py.File(soft, "r") as f:
        whole = f["softmax/W"][()]
        for rows in (1, 7, 103, 1000):
            copy_softmax_weight(f["softmax/W"], tmp_path / f"w{rows}.safetensors", chunk_rows=rows, progress=False)
            assert np.array_equal(load_file(tmp_path / f"w{rows}.safetensors")["softmax.weight"], whole)


def test_cli_convert_with_softmax(tmp_path, capsys):
    """``elmo convert --softmax_weight_file``, in this process (issue 51: the command's own launch is tested in
    tests/test_cli*.py)."""
    options, weights, vocab, soft = _random_lm(tmp_path / "src")
    out = tmp_path / "out"
    args = ["--options_file", options, "--weight_file", weights, "--vocab_file", vocab, "--output_dir", out]
    code = cli.main(["convert", *map(str, args), "--softmax_weight_file", str(soft)])
    assert code == 0, capsys.readouterr().err
    assert ElmoForPreTraining.from_pretrained(out).softmax.weight.shape == (50, 8)


# ---------------------------------------------------------------------------------------------
# Scoring
# ---------------------------------------------------------------------------------------------


def _assert_matches(results, reference):
    assert len(results) == len(reference)
    for got, want in zip(results, reference, strict=True):
        assert got["tokens"] == want["words"]
        assert abs(got["forward_logprob"] - want["forward_logprob"]) < LOGPROB_TOL
        assert abs(got["backward_logprob"] - want["backward_logprob"]) < LOGPROB_TOL
        n = len(want["words"])
        expected = math.exp(-(want["forward_logprob"] + want["backward_logprob"]) / (2 * (n + 1)))
        assert got["perplexity"] == pytest.approx(expected, rel=1e-4)  # measured 1.6e-7, as the sums (LOGPROB_TOL)


def test_scores_agree_with_allennlp(lm):
    model, tokenizer = lm
    reference = REFERENCE["stateless_batch"]
    sentences = [" ".join(item["words"]) for item in reference]
    _assert_matches(score_sentences(model, sentences, tokenizer=tokenizer, batch_size=3), reference)
    # one at a time, and as pre-split words: the same
    words = [item["words"] for item in reference]
    _assert_matches(score_sentences(model, words, tokenizer=tokenizer, tokenized=True, batch_size=1), reference)


def test_stateful_scores_agree_with_allennlps_second_batch(lm):
    model, tokenizer = lm
    first = [item["words"] for item in REFERENCE["stateless_batch"]]
    second = REFERENCE["stateful_second_batch"]
    scorer = ElmoSentenceScorer(model, tokenizer, stateful=True)
    _assert_matches(scorer.score_batch(first, tokenized=True), REFERENCE["stateless_batch"])
    _assert_matches(scorer.score_batch([item["words"] for item in second], tokenized=True), second)
    stateless = ElmoSentenceScorer(model, tokenizer).score_batch([item["words"] for item in second], tokenized=True)
    assert abs(stateless[0]["forward_logprob"] - second[0]["forward_logprob"]) > 1e-3  # the states matter
    scorer.reset_states()
    _assert_matches(scorer.score_batch(first, tokenized=True), REFERENCE["stateless_batch"])


def test_scores_agree_with_the_heads_own_loss(lm):
    """Independent of AllenNLP: ElmoForPreTraining.sentence_losses predicts the same targets except the first word
    from <S> (forward) and the last word from </S> (backward), which only the scorer includes."""
    model, tokenizer = lm
    sentences = ["the cat sat on the mat .", "a zebra ran", "hello"]
    enc = tokenizer(sentences, padding=True, return_tensors="pt", return_vocab_ids=True)
    sums, counts = model.sentence_losses(enc["input_ids"], enc["attention_mask"], labels=enc["vocab_ids"])
    ours = score_sentences(model, sentences, tokenizer=tokenizer)
    with torch.no_grad():
        top, lengths = top_layer_with_boundaries(model.elmo, enc["input_ids"], enc["attention_mask"])
    p = model.config.projection_dim
    w, b = model.softmax.weight, model.softmax.bias
    for row, result in enumerate(ours):
        n = int(lengths[row]) - 2
        first, last = enc["vocab_ids"][row, 0:1], enc["vocab_ids"][row, n - 1 : n]
        with torch.no_grad():
            from_bos = float(target_log_probs(top[row, 0:1, :p], first, w, b))  # log p_f(w_1 | <S>)
            from_eos = float(target_log_probs(top[row, n + 1 : n + 2, p:], last, w, b))  # log p_b(w_n | </S>)
        assert result["forward_logprob"] - from_bos == pytest.approx(-float(sums[row, 0]), abs=1e-4)
        assert result["backward_logprob"] - from_eos == pytest.approx(-float(sums[row, 1]), abs=1e-4)
        assert counts[row].tolist() == [n, n]


def test_chunked_log_sum_exp_equals_torchs(lm):
    torch.manual_seed(0)
    hidden, weight, bias = torch.randn(9, 16), torch.randn(1001, 16) * 3, torch.randn(1001)
    want = torch.logsumexp(hidden.double() @ weight.double().T + bias.double(), dim=-1)
    for block in (1, 9 * 7, 9 * 1001, 10**8):
        got = log_sum_exp_logits(hidden, weight, bias, block_elements=block)
        assert torch.allclose(got.double(), want, atol=1e-4, rtol=0)  # float32 logits of size ~30
    targets = torch.tensor([0, 5, 1000, 3, 3, 2, 7, 8, 999])
    log_probs = torch.log_softmax(hidden.double() @ weight.double().T + bias.double(), dim=-1)
    got = target_log_probs(hidden, targets, weight, bias, block_elements=50)
    assert torch.allclose(got.double(), log_probs[torch.arange(9), targets], atol=1e-4, rtol=0)


def test_reduced_precision_error_is_bounded(lm):
    model, tokenizer = lm
    reference = REFERENCE["stateless_batch"]
    words = [item["words"] for item in reference]
    results = ElmoSentenceScorer(model, tokenizer, softmax_dtype="bfloat16").score_batch(words, tokenized=True)
    per_word = [
        abs(got["forward_logprob"] - want["forward_logprob"]) / (len(want["words"]) + 1)
        for got, want in zip(results, reference, strict=True)
    ]
    # bfloat16 products (8-bit mantissa) in the log-sum-exp: measured up to 8.5e-4 per word here (float16: 8e-5);
    # benchmarks/bench_score.py measures it at the original size.
    assert max(per_word) < 3e-3
    assert max(per_word) > 0  # the option does change the arithmetic


def test_scoring_refuses_a_folder_without_softmax(converted_fixture):
    with pytest.raises(ValueError, match="holds no language-model softmax"):
        load_language_model(converted_fixture)


def test_elmo_score_cli(lm_folder, tmp_path, capsys):
    """``elmo score``, in this process (issue 51: the command's own launch is tested in tests/test_cli*.py)."""
    reference = REFERENCE["stateless_batch"]
    text = tmp_path / "in.txt"
    text.write_text("".join(" ".join(item["words"]) + "\n" for item in reference), encoding="utf-8")
    out = tmp_path / "out.jsonl"
    command = ["score", "--model", str(lm_folder)]
    code = cli.main([*command, "--tokenized", "--batch_size", "2", str(text), "-o", str(out)])
    assert code == 0, capsys.readouterr().err
    assert "Scoring" in capsys.readouterr().err  # the progress bar
    _assert_matches([json.loads(line) for line in out.read_text().splitlines()], reference)
    assert cli.main([*command, str(tmp_path / "missing.txt")]) == 1
    assert "cannot read" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------
# Fill-mask
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fill_mask(lm_folder):
    from transformers import pipeline

    return pipeline("elmo-fill-mask", model=str(lm_folder))


def test_fill_mask_agrees_with_allennlp_at_first_middle_and_last_word(fill_mask):
    for case in REFERENCE["fill_mask"]:
        output = fill_mask(case["text"])
        per_mask = [output] if len(case["masks"]) == 1 else output
        assert len(per_mask) == len(case["masks"])
        for got, want in zip(per_mask, case["masks"], strict=True):
            assert [item["token"] for item in got] == want["token"]
            assert [item["token_str"] for item in got] == want["token_str"]
            assert np.allclose([item["score"] for item in got], want["score"], atol=SCORE_TOL, rtol=0)


def test_fill_mask_format_top_k_and_targets(fill_mask):
    text = "paris is the [MASK] city of france ."
    full = fill_mask(text, top_k=240)
    assert sum(item["score"] for item in full) == pytest.approx(1.0, abs=1e-5)  # soft-maxed over the vocabulary
    assert set(full[0]) == {"score", "token", "token_str", "sequence"}
    assert full[0]["sequence"] == text.replace("[MASK]", full[0]["token_str"])
    assert len(fill_mask(text, top_k=2)) == 2
    by_word = {item["token_str"]: item["score"] for item in full}
    targeted = fill_mask(text, targets=["red", "capital", "nonexistentword"], top_k=5)
    assert [item["token_str"] for item in targeted] == sorted(["red", "capital"], key=lambda w: -by_word[w])
    assert [item["score"] for item in targeted] == pytest.approx(sorted([by_word["red"], by_word["capital"]])[::-1])
    with pytest.raises(ValueError, match="no target"):
        fill_mask(text, targets=["nonexistentword"])
    with pytest.raises(ValueError, match=r"no \[MASK\]"):
        fill_mask("no mask here")


def test_fill_mask_batches_give_the_same_answers(fill_mask):
    texts = ["the [MASK] sat on the big mat .", "a dog [MASK]", "[MASK] x [MASK]"]
    one_by_one = [fill_mask(text, top_k=3) for text in texts]
    batched = fill_mask(texts, batch_size=2, top_k=3)
    assert len(batched) == 3

    def flat(result):  # one list of dicts per text, whatever its number of masks
        return [item for row in (result if isinstance(result[0], list) else [result]) for item in row]

    for got, want in zip(batched, one_by_one, strict=True):
        assert [item["token"] for item in flat(got)] == [item["token"] for item in flat(want)]
        assert [item["sequence"] for item in flat(got)] == [item["sequence"] for item in flat(want)]
        # padded batches round differently in the biLM's products: measured 1e-8 on probabilities of ~0.02
        assert np.allclose([i["score"] for i in flat(got)], [i["score"] for i in flat(want)], atol=1e-6, rtol=0)


def test_fill_mask_refuses_a_model_without_softmax(converted_fixture):
    from transformers import pipeline

    with pytest.raises(ValueError, match="softmax"):
        pipeline("elmo-fill-mask", model=str(converted_fixture))
