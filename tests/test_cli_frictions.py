"""Natural mistakes get fast, clear answers (issue 29 point 4): a misspelt released name, a folder or an empty file as
the input, non-UTF-8 input and missing convert inputs reported before any heavy work, train-tagger's
--model_name_or_path, and a quiet train-tagger whose final progress bar is drawn once."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import TINY_SIZES

import elmo_cli as cli
from modeling_elmo import ElmoConfig, ElmoModel, ElmoTokenizer, demo_model_path
from modeling_elmo.commands import common
from modeling_elmo.hub.download import close_released_name

REPO = Path(__file__).resolve().parent.parent
HEAVY = ("torch", "transformers", "huggingface_hub")


def _env() -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), str(REPO / "tests")]), OMP_NUM_THREADS="1")
    for name in ("TRANSFORMERS_VERBOSITY", "TRANSFORMERS_NO_ADVISORY_WARNINGS", "PYTHONWARNINGS"):
        env.pop(name, None)  # transformers' logging and Python's warnings at their defaults
    return env


def _elmo(*args: str, cwd: Path, importtime: bool = False) -> subprocess.CompletedProcess:
    """The real `elmo` command in a fresh interpreter."""
    flags = ["-X", "importtime"] if importtime else []
    command = [sys.executable, *flags, "-m", "elmo_cli", *map(str, args)]
    return subprocess.run(command, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=600)


def _imported(stderr: str) -> set[str]:
    """Top-level packages a ``python -X importtime`` run imported."""
    return {m.group(1).split(".")[0] for m in re.finditer(r"import time:\s+\d+ \|\s+\d+ \|\s*(\S+)", stderr)}


def _messages(stderr: str) -> str:
    return "\n".join(line for line in stderr.splitlines() if not line.startswith("import time:"))


@pytest.fixture
def broken_model(tmp_path) -> Path:
    """A model folder that cannot load: an error about it means the model was loaded before the input was read."""
    folder = tmp_path / "broken-model"
    folder.mkdir()
    (folder / "config.json").write_text("{ not json")
    return folder


# ---------------------------------------------------------------------------------------------------- --model typos


def test_close_released_name():
    assert close_released_name("orignal") == "original"
    assert close_released_name("Smal") == "small"
    assert close_released_name("meduim") == "medium"
    assert close_released_name("original") is None  # a released name is no typo
    assert close_released_name("allenai/orignal") is None  # a Hub id is looked up as such
    assert close_released_name("my-own-model") is None


def test_misspelt_released_name_fails_at_once_with_a_suggestion(tmp_path):
    """No Hub lookup (before: 20 s of retries, then a network error), and no model loaded: the suggestion comes from
    the released names (the package's name table, whose import registers it with transformers), before any load."""
    (tmp_path / "in.txt").write_text("Hello world .\n")
    done = _elmo("embed", "in.txt", "-o", "out.hdf5", "--model", "orignal", cwd=tmp_path, importtime=True)
    assert done.returncode == 1, done.stderr[-2000:]
    assert "did you mean original?" in _messages(done.stderr)
    assert "modeling_elmo.inference.embed_corpus" not in _imported(done.stderr)  # the embedding never started
    assert sorted(os.listdir(tmp_path)) == ["in.txt"]


def test_train_tagger_suggests_a_released_name(tmp_path, capsys):
    pytest.importorskip("datasets")
    from modeling_elmo.training import train_tagger

    conll = tmp_path / "train.txt"
    conll.write_text("John B-PER\n\n")
    assert train_tagger.main(["--bilm", "orignal", "--train_file", str(conll), "--output_dir", str(tmp_path)]) == 1
    assert "--bilm orignal: not a folder: did you mean original?" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------------- embed inputs


def test_a_folder_as_the_input_is_called_a_folder(tiny_dir, tmp_path, capsys):
    (tmp_path / "texts").mkdir()
    assert cli.main(["embed", str(tmp_path / "texts"), "-o", str(tmp_path / "o.hdf5"), "--model", str(tiny_dir)]) == 1
    err = capsys.readouterr().err
    assert "input tmp" not in err and f"input {tmp_path / 'texts'} is a folder, not a text file" in err
    assert "not found" not in err


def test_an_empty_input_warns_and_one_sentence_is_singular(tiny_dir, tmp_path, capsys):
    """Exit 0 and a valid file of zero sentences (a script over many files goes on), with a warning on stderr."""
    empty, one = tmp_path / "empty.txt", tmp_path / "one.txt"
    empty.write_text("")
    one.write_text("Hello world .\n")
    for source, name in ((empty, "e.hdf5"), (one, "o.hdf5")):
        argv = ["embed", str(source), "-o", str(tmp_path / name), "--model", str(tiny_dir), "--disable_tqdm"]
        assert cli.main(argv) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[0] == f"Wrote 0 sentences (all) to {tmp_path / 'e.hdf5'}"
    assert err[1] == f"elmo embed: warning: no sentences were read from {empty}; {tmp_path / 'e.hdf5'} holds none"
    assert err[2:] == [f"Wrote 1 sentence (all) to {tmp_path / 'o.hdf5'}"]  # no warning, and no "1 sentences"


def test_non_utf8_input_is_reported_before_the_model_loads(broken_model, tmp_path, capsys):
    bad = tmp_path / "latin1.txt"
    bad.write_bytes(b"A fine line .\n" * 5 + b"caf\xe9 au lait .\n")
    assert cli.main(["embed", str(bad), "-o", str(tmp_path / "o.hdf5"), "--model", str(broken_model)]) == 1
    err = capsys.readouterr().err
    assert f"{bad} is not UTF-8 text (line 6:" in err and "could not load" not in err
    assert not (tmp_path / "o.hdf5").exists()


def test_scan_text_file_counts_lines_and_names_the_bad_one(tmp_path):
    path = tmp_path / "t.txt"
    for data, lines in ((b"", 0), (b"a\n", 1), (b"a\nb", 2), (b"\n\n", 2), ("é\n".encode() * 3, 3)):
        path.write_bytes(data)
        assert common.scan_text_file(str(path)) == lines
    path.write_bytes(b"ok\n" * 3 + "é".encode()[:1])  # cut inside a character at the very end
    with pytest.raises(common.CliError, match="ends inside a character"):
        common.scan_text_file(str(path))


# ---------------------------------------------------------------------------------------------------- convert inputs


def test_convert_reports_missing_inputs_before_importing_the_converter(tmp_path):
    """Before: "options file not found" came after importing torch and the model code (17 s on a busy machine)."""
    (tmp_path / "options.json").write_text("{}")
    (tmp_path / "weights").mkdir()
    cases = [
        (["--options_file", "missing.json", "--weight_file", "w.hdf5"], "error: options file not found: missing.json"),
        (["--options_file", "options.json", "--weight_file=w.hdf5"], "error: weight file not found: w.hdf5"),
        (["--options_file", "options.json", "--weight_file", "weights"], "error: weight file weights is a folder"),
    ]
    for args, message in cases:
        done = _elmo("convert", *args, "--output_dir", "out", cwd=tmp_path, importtime=True)
        assert done.returncode == 1, done.stderr[-2000:]
        assert _messages(done.stderr).startswith(message), _messages(done.stderr)
        assert not _imported(done.stderr) & set(HEAVY)
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------------------------------------------- train-tagger


@pytest.fixture(scope="module")
def tagger_files(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tagger")
    torch.manual_seed(0)
    ElmoModel(ElmoConfig(**TINY_SIZES)).save_pretrained(root / "bilm")
    ElmoTokenizer().save_pretrained(root / "bilm")
    (root / "train.txt").write_text("John B-PER\nlives O\nin O\nParis B-LOC\n. O\n\n" * 40)
    return {"root": root, "bilm": root / "bilm", "train": root / "train.txt"}


def test_train_tagger_takes_model_name_or_path_as_train_lm_does(tagger_files, tmp_path):
    pytest.importorskip("datasets")
    from modeling_elmo.training import train_tagger

    bilm, train = str(tagger_files["bilm"]), str(tagger_files["train"])
    for flag in ("--model_name_or_path", "--bilm"):
        model_args, _, _ = train_tagger.parse_args([flag, bilm, "--train_file", train, "--output_dir", str(tmp_path)])
        assert model_args.bilm == bilm
    for key in ("model_name_or_path", "bilm"):  # a config file, under either name
        config = tmp_path / f"{key}.json"
        config.write_text(json.dumps({key: bilm, "train_file": train, "output_dir": str(tmp_path)}))
        assert train_tagger.parse_args([str(config)])[0].bilm == bilm
    both = tmp_path / "both.json"
    both.write_text(json.dumps({"bilm": bilm, "model_name_or_path": bilm, "train_file": train}))
    with pytest.raises(SystemExit):
        train_tagger.parse_args([str(both)])
    help_text = " ".join(train_tagger.build_parser("elmo train-tagger").format_help().split())
    assert "--bilm PATH, --model_name_or_path PATH" in help_text and "train-lm's name" in help_text


@pytest.mark.slow  # measured over 30 s on a busy 2-core machine (issue 44 F1)
def test_train_tagger_is_quiet_and_draws_its_final_bar_once(tagger_files):
    """The real command, transformers' logging at its defaults. Before: a 1,196-character "The following layers were
    not sharded: crf.constraint_mask, ..." warning (the command raised the level of transformers.modeling_utils'
    logger to hide a load report, which arms transformers' tensor-parallel plan check), and the complete bar two to four
    times in a captured log (drawn at the last step, again under each of the last log lines, and when closed)."""
    pytest.importorskip("datasets")
    done = _elmo(
        "train-tagger", "--model_name_or_path", "bilm", "--train_file", "train.txt", "--output_dir", "out",
        "--eval_file", "train.txt", "--max_steps", "3", "--hidden_size", "8", "--num_layers", "1", "--word_dim", "8",
        "--eval_strategy", "steps", "--eval_steps", "2",
        cwd=tagger_files["root"],
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "not sharded" not in done.stderr and "LOAD REPORT" not in done.stderr
    # Each metrics line has a line of its own, also the evaluation's in the middle of training, whose bar used to
    # leave its cursor-up escape (and the bar) in front of it (issue 44 F7).
    metrics = [line for line in done.stderr.splitlines() if "'eval_loss'" in line]
    assert len(metrics) == 2 and all(line.startswith("{") for line in metrics), metrics
    drawn = [part for part in re.split(r"[\r\n]", done.stderr) if re.search(r"\b100%\|.*\| 3/3 \[", part)]
    assert len(drawn) == 1, drawn
    summary = next(i for i, line in enumerate(done.stderr.splitlines()) if "'train_runtime'" in line)
    assert summary > next(i for i, line in enumerate(done.stderr.splitlines()) if "| 3/3 [" in line)  # bar first


def test_train_lm_draws_its_final_bar_once(tmp_path):
    """The same bar in `elmo train-lm` (before: drawn complete four times in a captured log)."""
    pytest.importorskip("datasets")
    (tmp_path / "lm.txt").write_text("the cat sat on the mat . a dog ran in the park .\n" * 20)
    done = _elmo(
        "train-lm", "--train_file", "lm.txt", "--eval_file", "lm.txt", "--eval_strategy", "steps", "--eval_steps", "3",
        "--output_dir", "out", "--max_steps", "3", "--lstm_dim", "16", "--projection_dim", "8", "--n_highway", "1",
        "--char_embedding_dim", "4", "--char_cnn_filters", "1:4,2:8", "--num_samples", "5",
        "--per_device_train_batch_size", "8",
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    drawn = [part for part in re.split(r"[\r\n]", done.stderr) if re.search(r"\b100%\|.*\| 3/3 \[", part)]
    assert len(drawn) == 1, drawn


# ---------------------------------------------------------------------------------------------------- issue 44 F7


def test_train_lm_help_is_short_and_help_all_lists_everything():
    """``elmo train-lm --help`` was 719 lines; like train-tagger's, it lists the common TrainingArguments, and
    ``--help-all`` all of them."""
    pytest.importorskip("datasets")
    from modeling_elmo.training import train_lm

    parser = train_lm.build_parser("elmo train-lm")
    short, everything = parser.format_help(), parser.format_help(everything=True)
    assert "--help-all" in short and "--learning_rate" in short and "--max_steps" in short
    assert "--label_smoothing_factor" not in short and "--label_smoothing_factor" in everything  # a rare one
    assert len(short.splitlines()) < 0.5 * len(everything.splitlines())


def test_score_help_names_the_shipped_demo_softmax():
    import argparse

    from elmo_flags import score

    parser = argparse.ArgumentParser(prog="elmo score")
    score.add_arguments(parser)
    text = " ".join(parser.format_help().split())
    assert "once its softmax ships" not in text and "demo (the bundled toy biLM and its softmax" in text


@pytest.mark.parametrize(("rows", "shard_size", "said"), [(3, 10, "3 rows in 1 shard;"), (3, 2, "3 rows in 2 shards;")])
def test_the_dataset_card_counts_in_the_singular_and_plural(tmp_path, rows, shard_size, said):
    datasets = pytest.importorskip("datasets")
    from modeling_elmo.inference.parquet_shards import write_shards

    folder = demo_model_path()
    model, tokenizer = ElmoModel.from_pretrained(folder).eval(), ElmoTokenizer.from_pretrained(folder)
    dataset = datasets.Dataset.from_dict({"text": ["A cat sat .", "Dogs run .", "Hi ."][:rows]})
    write_shards(model, tokenizer, dataset, str(tmp_path / "out"), shard_size=shard_size, progress=False)
    card = (tmp_path / "out" / "README.md").read_text(encoding="utf-8")
    assert said in card, card
