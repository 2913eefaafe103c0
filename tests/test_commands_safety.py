"""Issue 13 on the training commands and the pipelines: meaningless flags refused by name, one ``error:`` line for
bad files and models, empty sentences, batched pipelines, and resuming (exactly, and from the newest complete
checkpoint)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import BATCHING_ATOL
from test_reliability import (
    _WORDS,
    MODEL,
    RESUME_STEPS,
    TOKENIZER,
    _assert_same_losses,
    _kill_and_resume,
)
from transformers import pipeline

from modeling_elmo import ElmoConfig, ElmoForTokenClassification, ElmoModel, ElmoModelOutput, ElmoTokenizer
from modeling_elmo.training import train_lm, train_tagger
from modeling_elmo.training.checkpoints import checkpoint_problem, newest_complete_checkpoint
from modeling_elmo.training.tagging_data import build_word_vocab
from modeling_elmo.training.train_tagger import predict_sentences

REPO = Path(__file__).resolve().parent.parent
DEMO_MODEL = REPO / "modeling_elmo" / "demo_models" / "demo_bilm"
TINY_LM = (
    "--lstm_dim 16 --projection_dim 8 --n_highway 1 --char_embedding_dim 4 --char_cnn_filters 1:4,2:8 "
    "--num_samples 5 --per_device_train_batch_size 8 --disable_tqdm"
).split()

pytestmark = pytest.mark.usefixtures("one_thread")


def _error_line(err: str) -> str:
    """The single ``error:`` line of a command's stderr (asserting there is exactly one and no traceback)."""
    assert "Traceback" not in err, err[-3000:]
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, err[-3000:]
    return lines[0]


def _conll(path: Path, sentences: int, seed: int = 1) -> Path:
    rng = np.random.default_rng(seed)
    lines = []
    for _ in range(sentences):
        for word in rng.choice(_WORDS, size=rng.integers(3, 9)):
            lines.append(f"{word} {'B-ANI' if word in ('cat', 'dog') else 'O'}")
        lines.append("")
    path.write_text("\n".join(lines) + "\n")
    return path


def _tiny_tagger(vocab: dict[str, int] | None = None) -> tuple[ElmoForTokenClassification, ElmoTokenizer]:
    """A tiny CRF tagger; with ``vocab``, a word-embedding one whose tokenizer pads vocab ids with id >= 262."""
    torch.manual_seed(0)
    tokenizer = ElmoTokenizer(vocab=vocab) if vocab else ElmoTokenizer()
    labels = ["O", "B-ANI", "I-ANI"]
    head = dict(tagger_word_input="embedding", tagger_word_vocab_size=len(tokenizer)) if vocab else {}
    config = ElmoConfig(
        char_embedding_dim=4,
        char_cnn_filters=[[1, 4], [2, 8]],
        n_highway=1,
        lstm_dim=16,
        projection_dim=8,
        n_layers=2,
        tagger_hidden_size=8,
        tagger_num_layers=1,
        tagger_word_embedding_dim=8,
        id2label=dict(enumerate(labels)),
        label2id={label: i for i, label in enumerate(labels)},
        **head,
    )
    return ElmoForTokenClassification(config).eval(), tokenizer


# ---------------------------------------------------------------------------------------------
# Item 16: evaluation-only train-lm on a model without a trained softmax
# ---------------------------------------------------------------------------------------------


def test_lm_evaluation_refuses_a_model_without_a_trained_softmax(tmp_path, capsys):
    pytest.importorskip("datasets")
    heldout = tmp_path / "heldout.txt"
    heldout.write_text("the cat sat on the mat\na dog ran to the house\n")
    out = tmp_path / "out"
    argv = ["--eval_file", str(heldout), "--model_name_or_path", str(DEMO_MODEL), "--output_dir", str(out)]
    assert train_lm.main([*argv, "--disable_tqdm"]) == 1
    line = _error_line(capsys.readouterr().err)
    assert "no trained softmax" in line and str(DEMO_MODEL) in line
    assert not (out / "eval_results.json").exists()


# ---------------------------------------------------------------------------------------------
# Item 18: numeric flags that mean nothing are refused by name
# ---------------------------------------------------------------------------------------------

TAGGER_BAD_FLAGS = [
    ("--max_words", "-1"),
    ("--max_train_sentences", "-1"),
    ("--max_eval_sentences", "-5"),
    ("--min_word_freq", "0"),
    ("--word_dim", "0"),
    ("--hidden_size", "-3"),
    ("--num_layers", "-1"),
    ("--dropout", "1.5"),
    ("--elmo_dropout", "nan"),
    ("--l2_coef", "-0.1"),
    ("--num_train_epochs", "0"),
    ("--max_steps", "-2"),
    ("--per_device_train_batch_size", "0"),
    ("--per_device_eval_batch_size", "-1"),
    ("--learning_rate", "-1e-3"),
    ("--learning_rate", "inf"),
    ("--warmup_steps", "-1"),
    ("--max_grad_norm", "-1"),
    ("--eval_steps", "0"),
    ("--save_steps", "0"),
    ("--save_total_limit", "0"),
    ("--logging_steps", "0"),
    ("--seed", "-1"),
    ("--num_threads", "-2"),
    ("--time_budget", "-1"),
]


@pytest.mark.parametrize(("flag", "value"), TAGGER_BAD_FLAGS)
def test_tagger_refuses_meaningless_numbers_by_name(flag, value, tmp_path, capsys):
    argv = ["--no_elmo", "--train_file", str(tmp_path / "train.txt"), "--output_dir", str(tmp_path / "out")]
    assert train_tagger.main([*argv, f"{flag}={value}"]) == 1  # a refusal: one line, exit 1, no usage block
    err = capsys.readouterr().err
    assert f"error: {flag} must be" in err and len(err.strip().splitlines()) == 1


def test_tagger_max_words_minus_one_is_refused_and_zero_is_no_limit(tmp_path, capsys):
    argv = ["--no_elmo", "--train_file", str(tmp_path / "train.txt"), "--output_dir", str(tmp_path / "out")]
    assert train_tagger.main([*argv, "--max_words", "-1"]) == 1
    assert "--max_words must be >= 0 (0: no limit), got -1" in capsys.readouterr().err
    # 0 still means no limit: the sentences are used whole.
    out = tmp_path / "base"
    conll = _conll(tmp_path / "train.conll", 20)
    argv = ["--no_elmo", "--train_file", str(conll), "--output_dir", str(out), "--max_steps", "1"]
    argv += ["--disable_tqdm", "true"]
    assert train_tagger.main([*argv, "--hidden_size", "4", "--num_layers", "1", "--max_words", "0"]) == 0


LM_BAD_FLAGS = [
    ("--max_words", "-1"),
    ("--min_count", "0"),
    ("--max_vocab", "2"),
    ("--max_train_samples", "-1"),
    ("--max_eval_samples", "0"),
    ("--preprocessing_num_workers", "0"),
    ("--lstm_dim", "0"),
    ("--projection_dim", "-8"),
    ("--n_layers", "0"),
    ("--n_highway", "-1"),
    ("--char_embedding_dim", "0"),
    ("--char_cnn_filters", "1:0,2:8"),
    ("--cell_clip", "-3"),
    ("--proj_clip", "0"),
    ("--num_samples", "-1"),
    ("--dropout", "-0.1"),
    ("--learning_rate", "0"),
    ("--learning_rate", "nan"),
    ("--adagrad_initial_accumulator", "-1"),
    ("--weight_decay", "-1"),
    ("--warmup_steps", "-1"),
    ("--max_grad_norm", "-1"),
    ("--num_train_epochs", "0"),
    ("--max_steps", "0"),
    ("--max_steps", "-5"),
    ("--per_device_train_batch_size", "0"),
    ("--per_device_eval_batch_size", "-1"),
    ("--gradient_accumulation_steps", "0"),
    ("--seed", "-1"),
    ("--seed", str(2**32)),
    ("--logging_steps", "0"),
    ("--save_steps", "-1"),
    ("--save_total_limit", "0"),
    ("--eval_steps", "0"),
    ("--dataloader_num_workers", "-1"),
]


@pytest.mark.parametrize(("flag", "value"), LM_BAD_FLAGS)
def test_lm_refuses_meaningless_numbers_by_name(flag, value, tmp_path, capsys):
    argv = ["--train_file", str(tmp_path / "train.txt"), "--output_dir", str(tmp_path / "out")]
    assert train_lm.main([*argv, f"{flag}={value}"]) == 1  # issue 15 item 5: one error line, exit 1
    line = _error_line(capsys.readouterr().err)
    assert line.startswith((f"error: {flag} must be", f"error: {flag}:")), line


# ---------------------------------------------------------------------------------------------
# Item 22 (train-lm part): bad training files give one error line naming the file
# ---------------------------------------------------------------------------------------------

BAD_TEXT = {
    "empty": (b"", "the file is empty"),
    "latin1": (b"the caf\xe9 is open\nand the dog ran\n", "not UTF-8 text"),
    "binary": (bytes(range(256)) * 4, "not a text file"),
    "blank": (b"\n\n   \n\t\n", "no text, only blank lines"),
}


@pytest.mark.parametrize("kind", sorted(BAD_TEXT))
@pytest.mark.parametrize("split", ["--train_file", "--eval_file"])
def test_lm_bad_text_files_give_one_error_line(kind, split, tmp_path, capsys):
    pytest.importorskip("datasets")
    content, message = BAD_TEXT[kind]
    bad = tmp_path / f"{kind}.txt"
    bad.write_bytes(content)
    good = tmp_path / "good.txt"
    good.write_text("the cat sat on the mat\na dog ran to the house\n" * 5)
    files = {"--train_file": good, "--eval_file": good, split: bad}
    out = tmp_path / "out"
    argv = ["--train_file", str(files["--train_file"]), "--eval_file", str(files["--eval_file"])]
    assert train_lm.main([*argv, "--output_dir", str(out), "--max_steps", "1", *TINY_LM]) == 1
    line = _error_line(capsys.readouterr().err)
    assert str(bad) in line and message in line
    assert not out.exists() or not any(out.iterdir())  # nothing written


def test_lm_bad_text_file_from_the_command_line(tmp_path):
    """The real command: exit 1, one error line, no traceback."""
    pytest.importorskip("datasets")
    bad = tmp_path / "blank.txt"
    bad.write_text("\n\n\n")
    done = subprocess.run(
        [sys.executable, "-m", "modeling_elmo.training.train_lm", "--train_file", str(bad)]
        + ["--output_dir", str(tmp_path / "out"), *TINY_LM],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 1
    assert str(bad) in _error_line(done.stderr)


def test_tagger_bad_files_and_folders_give_one_error_line(tmp_path, capsys):
    binary = tmp_path / "train.conll"
    binary.write_bytes(b"caf\xe9 O\n\n")
    argv = ["--no_elmo", "--train_file", str(binary), "--output_dir", str(tmp_path / "out"), "--disable_tqdm", "true"]
    assert train_tagger.main(argv) == 1
    line = _error_line(capsys.readouterr().err)
    assert str(binary) in line and "not UTF-8" in line
    assert train_tagger.main(["--predict", str(tmp_path / "missing"), "a sentence"]) == 1
    _error_line(capsys.readouterr().err)


# ---------------------------------------------------------------------------------------------
# Item 20: empty sentences give empty results
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("vocab", [False, True], ids=["bilm-only", "word-embedding"])
def test_tagger_empty_sentences_give_empty_results(vocab):
    model, tokenizer = _tiny_tagger(build_word_vocab([["the", "cat"]]) if vocab else None)
    encoding = tokenizer([""], padding=True, return_tensors="pt", return_vocab_ids=model.needs_vocab_ids)
    assert model.predict(**encoding) == [[]]
    assert predict_sentences(model, tokenizer, ["", "  "]) == [[], []]
    assert predict_sentences(model, tokenizer, ["", "the cat"])[0] == []
    ner = pipeline("token-classification", model=model, tokenizer=tokenizer)
    assert ner("") == []
    assert ner(["", " "]) == [[], []]


def test_tagger_command_predicts_blank_sentences(tmp_path, capsys):
    model, tokenizer = _tiny_tagger()
    model.save_pretrained(tmp_path / "tagger")
    tokenizer.save_pretrained(tmp_path / "tagger")
    capsys.readouterr()
    assert train_tagger.main(["--predict", str(tmp_path / "tagger"), "   "]) == 0  # a batch of empty sentences
    assert capsys.readouterr().out == "\n"
    assert train_tagger.main(["--predict", str(tmp_path / "tagger"), "   ", "the cat"]) == 0
    printed = capsys.readouterr().out
    # One (empty) block for the blank sentence, then the tagged words of the second one.
    assert printed.startswith("\n") and printed[1:].startswith("the\t")


# ---------------------------------------------------------------------------------------------
# Item 19: pipelines with batch_size > 1 and sentences of different lengths
# ---------------------------------------------------------------------------------------------

SENTENCES = ["the cat sat on the mat today", "a dog", "big red house and a small tree", "ran"]
# A vocabulary of over 262 words: its <pad> id is not a valid character id (the pipeline pads input_ids with it).
BIG_VOCAB = build_word_vocab([s.split() for s in SENTENCES] + [[f"w{i}" for i in range(300)]])


@pytest.mark.parametrize("vocab", [False, True], ids=["bilm-only", "word-embedding"])
def test_token_classification_pipeline_batched_equals_one_by_one(vocab):
    model, tokenizer = _tiny_tagger(BIG_VOCAB if vocab else None)
    assert tokenizer.pad_token_id >= 262 or not vocab
    ner = pipeline("token-classification", model=model, tokenizer=tokenizer, ignore_labels=[])
    one = ner(SENTENCES, batch_size=1)
    two = ner(SENTENCES, batch_size=2)
    assert [[e["word"] for e in row] for row in two] == [s.split() for s in SENTENCES]
    for row_one, row_two in zip(one, two, strict=True):
        assert [(e["word"], e["entity"], e["start"], e["end"]) for e in row_one] == [
            (e["word"], e["entity"], e["start"], e["end"]) for e in row_two
        ]
        assert [e["score"] for e in row_one] == pytest.approx([e["score"] for e in row_two], abs=BATCHING_ATOL)


@pytest.mark.parametrize("how", ["task", "pipeline_class"])
@pytest.mark.parametrize("vocab", [False, True], ids=["default-tokenizer", "vocab-tokenizer"])
def test_elmo_feature_extraction_pipeline_batched_equals_one_by_one(vocab, how):
    from modeling_elmo.pipelines_elmo import ElmoFeatureExtractionPipeline

    tokenizer = ElmoTokenizer(vocab=BIG_VOCAB) if vocab else TOKENIZER
    if how == "task":
        extract = pipeline("elmo-feature-extraction", model=MODEL, tokenizer=tokenizer)
    else:
        extract = pipeline(
            "feature-extraction", model=MODEL, tokenizer=tokenizer, pipeline_class=ElmoFeatureExtractionPipeline
        )
    one = extract(SENTENCES, batch_size=1)
    two = extract(SENTENCES, batch_size=3)
    with torch.no_grad():
        alone = [MODEL(**TOKENIZER(sentence, return_tensors="pt")).elmo for sentence in SENTENCES]
    for sentence, expected, row_one, row_two in zip(SENTENCES, alone, one, two, strict=True):
        assert np.asarray(row_one).shape == (1, len(sentence.split()), 16)
        np.testing.assert_allclose(np.asarray(row_one), expected.numpy(), atol=BATCHING_ATOL)
        np.testing.assert_allclose(np.asarray(row_two), expected.numpy(), atol=BATCHING_ATOL)
    assert extract("") == [[]] and extract(["", "a b"], batch_size=2)[0] == [[]]  # no words, no vectors


@pytest.mark.parametrize("vocab", [False, True], ids=["default-tokenizer", "vocab-tokenizer"])
def test_stock_feature_extraction_pipeline_batched(vocab):
    """transformers' own feature-extraction pipeline, batched: its collation pads ``input_ids`` with the tokenizer's
    ``pad_token_id`` (>= 262 with a vocabulary) and its unbatcher indexes every output field by sentence."""
    tokenizer = ElmoTokenizer(vocab=BIG_VOCAB) if vocab else TOKENIZER
    assert tokenizer.pad_token_id >= 262 or not vocab
    extract = pipeline("feature-extraction", model=MODEL, tokenizer=tokenizer)
    one, two = extract(SENTENCES, batch_size=1), extract(SENTENCES, batch_size=2)
    with torch.no_grad():
        alone = [MODEL(**TOKENIZER(sentence, return_tensors="pt")).elmo[0] for sentence in SENTENCES]
    for sentence, expected, row_one, row_two in zip(SENTENCES, alone, one, two, strict=True):
        words = len(sentence.split())
        batched = torch.tensor(row_two[0])
        torch.testing.assert_close(torch.tensor(row_one[0]), expected, atol=BATCHING_ATOL, rtol=1e-5)
        torch.testing.assert_close(batched[:words], expected, atol=BATCHING_ATOL, rtol=1e-5)
        assert not batched[words:].any()  # the stock pipeline keeps the batch's padding: zero vectors


def test_batched_model_output_splits_by_sentence_as_pipelines_split_it():
    """What the pipelines' unbatcher does to an ElmoModelOutput (index every field by the sentence's row), with
    two mixes and a carried LSTM state: each piece is that sentence's output, mixes and state included."""
    from transformers.pipelines.pt_utils import PipelineIterator

    model = ElmoModel(MODEL.config, num_output_representations=2).eval()
    batch = TOKENIZER(SENTENCES, padding=True, return_tensors="pt")
    with torch.no_grad():
        out = model(**batch, output_hidden_states=True, return_lstm_state=True)
    assert len(out.elmo_representations) == 2 and out["elmo_representations"][1] is not None
    unbatcher = PipelineIterator([], infer=None, params={}, loader_batch_size=len(SENTENCES))
    unbatcher._loader_batch_data, unbatcher._loader_batch_index = out, 0
    for row, sentence in enumerate(SENTENCES):
        piece = unbatcher.loader_batch_item()
        with torch.no_grad():
            alone = model(**TOKENIZER(sentence, return_tensors="pt"), return_lstm_state=True)
        words = len(sentence.split())
        assert isinstance(piece, ElmoModelOutput) and piece.mixes.shape[:2] == (1, 2)
        for got, expected in zip(piece.elmo_representations, alone.elmo_representations, strict=True):
            torch.testing.assert_close(got[:, :words], expected, atol=BATCHING_ATOL, rtol=1e-5)
        torch.testing.assert_close(piece.elmo[:, :words], alone.elmo, atol=BATCHING_ATOL, rtol=1e-5)
        assert len(piece.hidden_states) == 3 and piece.hidden_states[0].shape[0] == 1
        assert piece.lstm_state.num_rows == 1 and out.lstm_state[row].num_rows == 1
        for (h, c), (h_alone, c_alone) in zip(piece.lstm_state.layers, alone.lstm_state.layers, strict=True):
            torch.testing.assert_close(h, h_alone, atol=BATCHING_ATOL, rtol=1e-5)
            torch.testing.assert_close(c, c_alone, atol=BATCHING_ATOL, rtol=1e-5)
    with pytest.raises(IndexError):
        out.lstm_state[-1]
    with pytest.raises(TypeError):  # rows past the end read as zeros: not a sequence to iterate
        list(out.lstm_state)


# ---------------------------------------------------------------------------------------------
# Item 21: resuming exactly in the second epoch, and from the newest complete checkpoint
# ---------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_tagger_resumes_exactly_after_a_kill_in_its_second_epoch(tmp_path: Path):
    pytest.importorskip("datasets")
    pytest.importorskip("seqeval")
    # 32 sentences of batch 8: 4 steps per epoch; the first checkpoint, at step 6, is in the middle of epoch 2.
    conll = _conll(tmp_path / "train.conll", 32)
    bilm = tmp_path / "bilm"
    MODEL.save_pretrained(bilm)
    TOKENIZER.save_pretrained(bilm)
    args = (
        f"--bilm {bilm} --train_file {conll} --word_dim 8 --hidden_size 8 --num_layers 1 --dropout 0.3 "
        f"--max_steps {RESUME_STEPS} --save_steps 6 --save_total_limit 10 --logging_steps 1 --num_train_epochs 100 "
        "--per_device_train_batch_size 8 --seed 7 --eval_strategy no --disable_tqdm true --use_cpu --min_word_freq 1"
    ).split()
    whole, resumed, killed_after = _kill_and_resume("modeling_elmo.training.train_tagger", args, tmp_path)
    assert killed_after == 6
    state = json.loads((tmp_path / "killed" / "checkpoint-6" / "trainer_state.json").read_text())
    assert 1 < state["epoch"] < 2
    _assert_same_losses(whole, resumed, killed_after)


def _damage(checkpoint: Path, how: str) -> None:
    if how == "no trainer_state.json":
        (checkpoint / "trainer_state.json").unlink()
    elif how == "truncated weights":
        weights = checkpoint / "model.safetensors"
        weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    elif how == "no optimizer.pt":
        (checkpoint / "optimizer.pt").unlink()
    elif how == "garbage trainer_state.json":
        (checkpoint / "trainer_state.json").write_text('{"global_step": 4')


DAMAGE = ["no trainer_state.json", "truncated weights", "no optimizer.pt", "garbage trainer_state.json"]


@pytest.fixture(scope="module")
def tagger_run(tmp_path_factory) -> dict:
    """A finished tagger run with checkpoints 2 and 4 (and its arguments)."""
    pytest.importorskip("datasets")
    pytest.importorskip("seqeval")
    tmp = tmp_path_factory.mktemp("tagger_run")
    conll = _conll(tmp / "train.conll", 24)
    out = tmp / "out"
    argv = [
        "--no_elmo", "--train_file", str(conll), "--output_dir", str(out), "--hidden_size", "4", "--num_layers", "1",
        "--word_dim", "4", "--per_device_train_batch_size", "8", "--save_steps", "2", "--save_total_limit", "5",
        "--disable_tqdm", "true", "--eval_strategy", "no", "--use_cpu", "--logging_steps", "1",
    ]  # fmt: skip
    assert train_tagger.main([*argv, "--max_steps", "4"]) == 0
    return {"out": out, "argv": argv}


@pytest.mark.parametrize("how", DAMAGE)
def test_tagger_resume_last_skips_an_incomplete_newest_checkpoint(tagger_run, how, tmp_path, capsys, caplog):
    out = tmp_path / "out"
    shutil.copytree(tagger_run["out"], out)
    _damage(out / "checkpoint-4", how)
    assert checkpoint_problem(out / "checkpoint-2") is None
    assert checkpoint_problem(out / "checkpoint-4") is not None
    argv = [a if a != str(tagger_run["out"]) else str(out) for a in tagger_run["argv"]]
    capsys.readouterr()
    assert train_tagger.main([*argv, "--max_steps", "5", "--resume_from_checkpoint", "last"]) == 0
    captured = capsys.readouterr()
    assert f"resuming from {out / 'checkpoint-2'}" in captured.err  # status lines: stderr
    assert "skipping checkpoint-4" in caplog.text + captured.err
    state = json.loads((out / "checkpoint-5" / "trainer_state.json").read_text())
    assert state["global_step"] == 5
    assert [e["step"] for e in state["log_history"] if "loss" in e] == [1, 2, 3, 4, 5]


def test_tagger_resume_last_without_a_complete_checkpoint_is_an_error(tagger_run, tmp_path, capsys):
    out = tmp_path / "out"
    shutil.copytree(tagger_run["out"], out)
    for checkpoint in out.glob("checkpoint-*"):
        _damage(checkpoint, "no optimizer.pt")
    argv = [a if a != str(tagger_run["out"]) else str(out) for a in tagger_run["argv"]]
    assert train_tagger.main([*argv, "--max_steps", "5", "--resume_from_checkpoint", "last"]) == 1
    assert "no complete checkpoint" in _error_line(capsys.readouterr().err)
    named = out / "checkpoint-2"
    assert train_tagger.main([*argv, "--max_steps", "5", "--resume_from_checkpoint", str(named)]) == 1
    assert f"{named} is incomplete: no optimizer.pt" in _error_line(capsys.readouterr().err)


@pytest.mark.parametrize("how", ["truncated weights", "no trainer_state.json"])
def test_lm_resume_last_skips_an_incomplete_newest_checkpoint(how, tmp_path, capsys, caplog):
    pytest.importorskip("datasets")
    text = tmp_path / "train.txt"
    rng = np.random.default_rng(0)
    text.write_text("".join(" ".join(rng.choice(_WORDS, size=rng.integers(3, 9))) + "\n" for _ in range(48)))
    out = tmp_path / "out"
    argv = ["--train_file", str(text), "--output_dir", str(out), *TINY_LM, "--save_steps", "2", "--logging_steps", "1"]
    assert train_lm.main([*argv, "--max_steps", "4"]) == 0
    _damage(out / "checkpoint-4", how)
    assert newest_complete_checkpoint(out) == str(out / "checkpoint-2")
    # Named explicitly, the incomplete one is refused.
    assert train_lm.main([*argv, "--max_steps", "5", "--resume_from_checkpoint", str(out / "checkpoint-4")]) == 1
    assert f"{out / 'checkpoint-4'} is incomplete" in _error_line(capsys.readouterr().err)
    capsys.readouterr()
    assert train_lm.main([*argv, "--max_steps", "5", "--resume_from_checkpoint", "last"]) == 0
    assert "skipping checkpoint-4" in caplog.text + capsys.readouterr().err
    state = json.loads((out / "checkpoint-5" / "trainer_state.json").read_text())
    assert [e["step"] for e in state["log_history"] if "loss" in e] == [1, 2, 3, 4, 5]


@pytest.mark.slow
def test_lm_resumes_exactly_after_a_kill_in_its_second_epoch(tmp_path: Path):
    """The LM's shuffled order is drawn per epoch from the seed (accelerate's seedable sampler): resuming in the
    second epoch is exact too."""
    pytest.importorskip("datasets")
    pytest.importorskip("accelerate")
    rng = np.random.default_rng(0)
    train = tmp_path / "train.txt"
    train.write_text("".join(" ".join(rng.choice(_WORDS, size=rng.integers(3, 12))) + "\n" for _ in range(32)))
    args = [
        "--train_file", str(train), *TINY_LM, "--dropout", "0.1", "--max_steps", str(RESUME_STEPS),
        "--num_train_epochs", "100", "--save_steps", "6", "--save_total_limit", "10", "--logging_steps", "1",
        "--seed", "7",
    ]  # fmt: skip
    whole, resumed, killed_after = _kill_and_resume("modeling_elmo.training.train_lm", args, tmp_path)
    assert killed_after == 6
    state = json.loads((tmp_path / "killed" / "checkpoint-6" / "trainer_state.json").read_text())
    assert 1 < state["epoch"] < 2
    _assert_same_losses(whole, resumed, killed_after)
