"""``elmo embed --output_dir`` (issue 39): a dataset to Parquet shards, end to end.

The same vectors as ``elmo embed`` to HDF5 on WikiText-2 (demo model); 2 processes under ``torchrun`` give the folder
of 1; a run killed by SIGKILL is finished by a rerun that redoes only the missing shards; a full disk (a real file
size limit, ``RLIMIT_FSIZE``) stops the run with one error line and keeps the complete shards; bad input and flags
get an error that says what to do.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest
from helpers import run_two_processes

import elmo_cli as cli
from modeling_elmo.inference.parquet_shards import METADATA_NAME

datasets = pytest.importorskip("datasets")  # the [train] extra
pq = pytest.importorskip("pyarrow.parquet")  # installed with datasets

pytestmark = pytest.mark.usefixtures("one_thread")

REPO = Path(__file__).resolve().parent.parent
ENV = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO), TOKENIZERS_PARALLELISM="false")
# WikiText-2's first lines of test.txt, as `elmo embed` reads them: a fixed, deterministic subset for CI (the whole of
# test.txt and valid.txt, 8,118 lines, takes minutes on 2 cores; its result is in docs/usage.md).
WIKITEXT_LINES = 300


def run_cli(*argv) -> int:
    return cli.main([str(a) for a in argv])


@pytest.fixture(autouse=True)
def datasets_cache(tmp_path, monkeypatch):
    """`datasets`' cache of prepared splits in the test's folder, for the runs in this process and in children."""
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")
    monkeypatch.setitem(ENV, "HF_DATASETS_CACHE", str(tmp_path / "hf-cache"))


def corpus(path: Path, count: int) -> Path:
    """``count`` lines of 1-12 words (an empty one among them), in a fixed order."""
    words = ["the", "cat", "sat", "on", "a", "mat", ".", "Paris", "is", "big", "1999", ","]
    lines = [" ".join(words[(i * 7 + k) % len(words)] for k in range(1 + i % 12)) for i in range(count)]
    lines[3] = ""
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def tables(folder: Path) -> dict[str, object]:
    return {p.name: pq.read_table(p) for p in sorted(folder.glob("*.parquet"))}


def same_folder(a: Path, b: Path) -> None:
    """Two folders of shards hold the same files, the same rows and vectors, the same metadata and card."""
    assert sorted(os.listdir(a)) == sorted(os.listdir(b))
    left, right = tables(a), tables(b)
    assert list(left) == list(right) and left
    for name in left:
        assert left[name].equals(right[name]), name
    for name in (METADATA_NAME, "README.md"):
        assert (a / name).read_text() == (b / name).read_text()


# --------------------------------------------------------------------------------------------------
# The same vectors as the HDF5 file


def test_wikitext_gives_the_vectors_of_the_hdf5_file(shared_data_dir, tmp_path):
    """The first WIKITEXT_LINES lines of WikiText-2's test.txt, saved as a `datasets` folder (save_to_disk), embedded
    with the demo model: every sentence's vectors and words equal those of `elmo embed` to HDF5 (output all), max
    abs difference <= 1e-6 (the same chunks, so the same batches: measured 0)."""
    with open(shared_data_dir / "wikitext-2" / "test.txt", encoding="utf-8") as f:
        lines = [line.rstrip("\r\n") for _, line in zip(range(WIKITEXT_LINES), f, strict=False)]
    text = tmp_path / "wiki.txt"
    text.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    datasets.Dataset.from_dict({"text": lines}).save_to_disk(str(tmp_path / "wiki"))
    assert run_cli("embed", text, "-o", tmp_path / "wiki.hdf5", "--output_type", "all", "--disable_tqdm") == 0
    assert run_cli("embed", "--dataset_name", tmp_path / "wiki", "--output_dir", tmp_path / "shards",
                   "--output_type", "all", "--words_column", "words", "--disable_tqdm") == 0  # fmt: skip
    rows = datasets.load_dataset("parquet", data_dir=str(tmp_path / "shards"), cache_dir=str(tmp_path / "cache"))
    rows = rows["train"].with_format("numpy")
    assert len(rows) == len(lines) == WIKITEXT_LINES
    worst = 0.0
    with h5py.File(tmp_path / "wiki.hdf5", "r") as f:
        for i in range(len(lines)):
            want = f[str(i)][()]
            got = rows[i]["elmo"].transpose(1, 0, 2)  # stored words first
            assert got.shape == want.shape, i
            assert " ".join(rows[i]["words"]) == f[str(i)].attrs["words"]
            assert rows[i]["text"] == lines[i]
            if want.size:
                worst = max(worst, float(np.abs(got - want).max()))
    assert worst <= 1e-6, worst


# --------------------------------------------------------------------------------------------------
# Several processes, a killed run, a full disk


def test_two_processes_under_torchrun_give_the_folder_of_one(tiny_dir, tmp_path):
    """`torchrun --nproc_per_node 2` (RANK/WORLD_SIZE, no process group): each process writes its own shards, nothing
    is merged, and the folder is the one process's, file for file."""
    text = corpus(tmp_path / "input.txt", 37)
    flags = ["--train_file", text, "--model", tiny_dir, "--shard_size", "5", "--chunk_size", "3", "--disable_tqdm"]
    assert run_cli("embed", *flags, "--output_dir", tmp_path / "one") == 0
    done = run_two_processes(
        ["-m", "elmo_cli", "embed", *map(str, flags), "--output_dir", str(tmp_path / "two")], cwd=tmp_path, env=ENV
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert "[process 0 of 2] Wrote 20 sentences" in done.stderr and "[process 1 of 2] Wrote 17 sentences" in done.stderr
    assert "is complete: 37 rows" in done.stderr
    same_folder(tmp_path / "one", tmp_path / "two")


def test_a_killed_run_is_finished_by_a_rerun_that_redoes_only_the_rest(tiny_dir, tmp_path):
    """SIGKILL once 3 shards are there; the rerun skips exactly the complete shards (same inode and mtime: not
    rewritten, and says so; hidden until the folder is complete, then under their names), writes the others, and
    the folder equals an uninterrupted run's."""
    text = corpus(tmp_path / "input.txt", 400)
    flags = ["--train_file", text, "--model", tiny_dir, "--shard_size", "8", "--disable_tqdm"]
    out = tmp_path / "out"
    command = [sys.executable, "-m", "elmo_cli", "embed", *map(str, flags), "--output_dir", str(out)]
    process = subprocess.Popen(command, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=tmp_path)
    deadline = time.monotonic() + 300
    while len(list(out.glob("*.parquet"))) < 3 and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    process.send_signal(signal.SIGKILL)
    process.communicate()
    complete = {p.name: os.stat(p) for p in out.glob("*.parquet")}
    assert 3 <= len(complete) < 50, f"{len(complete)} shards when killed: not mid-way"
    assert run_cli("embed", *flags, "--output_dir", out) == 0
    assert all(name.startswith(".") for name in complete)  # `load_dataset` does not read an unfinished folder
    for name, before in complete.items():
        after = os.stat(out / name.removeprefix("."))
        assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns), name
    assert run_cli("embed", *flags, "--output_dir", tmp_path / "clean") == 0
    same_folder(out, tmp_path / "clean")
    assert not [n for n in os.listdir(out) if n.endswith(".tmp")]


def test_rerun_says_which_shards_it_skipped(tiny_dir, tmp_path, capsys):
    text = corpus(tmp_path / "input.txt", 20)
    flags = ["--train_file", text, "--model", tiny_dir, "--shard_size", "8", "--output_dir", tmp_path / "out"]
    assert run_cli("embed", *flags, "--disable_tqdm") == 0
    capsys.readouterr()
    (tmp_path / "out" / "train-00001-of-00003.parquet").unlink()
    assert run_cli("embed", *flags, "--disable_tqdm") == 0
    err = capsys.readouterr().err
    assert "shard 0 (train-00000-of-00003.parquet) is complete: skipped" in err
    assert "shard 2 (train-00002-of-00003.parquet) is complete: skipped" in err
    assert "shard 1 (train-00001-of-00003.parquet): wrote rows 8-15" in err
    assert "Wrote 8 sentences" in err and "skipped 2 complete shards" in err


def _file_size_limit(limit: int):
    def limit_writes():  # in the child, before exec: SIGXFSZ ignored, so writes past the limit fail with EFBIG
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return limit_writes


def test_full_disk_stops_with_one_error_line_and_keeps_the_complete_shards(tiny_dir, tmp_path):
    """Shard 0 (8 lines of 2 words, ~4 KB) fits under a 64 KB file size limit, shard 1 (8 lines of 300 words,
    ~460 KB) does not: one error line naming the shard and the reason, its temporary file removed, shard 0 kept; the
    same command without the limit then writes shard 1 only."""
    text = tmp_path / "input.txt"
    words = [[f"w{(i * 300 + j) % 997}" for j in range(2 if i < 8 else 300)] for i in range(16)]  # vary: no compression
    text.write_text("".join(" ".join(line) + "\n" for line in words), encoding="utf-8")
    out = tmp_path / "out"
    command = [sys.executable, "-m", "elmo_cli", "embed", "--train_file", str(text), "--model", str(tiny_dir),
               "--shard_size", "8", "--output_dir", str(out), "--disable_tqdm"]  # fmt: skip
    failed = subprocess.run(command, env=ENV, capture_output=True, text=True, timeout=300, cwd=tmp_path,
                            preexec_fn=_file_size_limit(64 * 1024))  # fmt: skip
    assert failed.returncode == 1, failed.stderr[-3000:]
    errors = [line for line in failed.stderr.splitlines() if line.startswith("error:")]
    assert errors == [
        "error: could not write shard 1 (train-00001-of-00002.parquet): File too large (errno 27); its temporary "
        "file was removed and the complete shards were kept: free some space and run the same command again to go on"
    ], failed.stderr[-3000:]
    # complete, hidden until all are; the card of a folder in progress
    assert sorted(os.listdir(out)) == [".train-00000-of-00002.parquet", "README.md", METADATA_NAME]
    before = os.stat(out / ".train-00000-of-00002.parquet")
    done = subprocess.run(command, env=ENV, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "shard 0 (train-00000-of-00002.parquet) is complete: skipped" in done.stderr
    assert "into 1 shard of" in done.stderr
    assert os.stat(out / "train-00000-of-00002.parquet").st_mtime_ns == before.st_mtime_ns


# --------------------------------------------------------------------------------------------------
# Inputs, and bad input


def test_local_files_and_saved_folders_as_input(tiny_dir, tmp_path):
    """A .jsonl of token lists (--tokens_column), a .tsv (--text_column), and a DatasetDict saved to disk (--split):
    each folder reads back with its columns and one vector per word."""
    rows = [{"tokens": ["New", "York", "."], "id": 1}, {"tokens": [], "id": 2}, {"tokens": ["Hi"], "id": 3}]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    (tmp_path / "rows.tsv").write_text("sentence\tlabel\nThe cat, sat.\t1\nHi!\t0\n", encoding="utf-8")
    datasets.DatasetDict({"validation": datasets.Dataset.from_dict({"text": ["a b", "c"]})}).save_to_disk(
        str(tmp_path / "saved")
    )
    common = ["--model", tiny_dir, "--output_type", "elmo", "--disable_tqdm"]
    assert run_cli("embed", "--data_files", tmp_path / "rows.jsonl", "--tokens_column", "tokens",
                   "--output_dir", tmp_path / "a", *common) == 0  # fmt: skip
    assert run_cli("embed", "--train_file", tmp_path / "rows.tsv", "--text_column", "sentence",
                   "--output_dir", tmp_path / "b", "--cache_dir", tmp_path / "csv-cache", *common) == 0  # fmt: skip
    assert list((tmp_path / "csv-cache").iterdir())  # the prepared split went where --cache_dir says
    assert run_cli("embed", "--dataset_name", tmp_path / "saved", "--split", "validation",
                   "--output_dir", tmp_path / "c", *common) == 0  # fmt: skip
    a = datasets.Dataset.from_parquet(str(tmp_path / "a" / "*.parquet")).with_format("numpy")
    assert a.column_names == ["tokens", "id", "elmo"] and [len(v) for v in a["elmo"]] == [3, 0, 1]
    b = datasets.Dataset.from_parquet(str(tmp_path / "b" / "*.parquet"))
    assert b.column_names == ["sentence", "label", "elmo"] and [len(v) for v in b["elmo"]] == [5, 2]
    assert sorted(os.listdir(tmp_path / "c"))[-1] == "validation-00000-of-00001.parquet"


@pytest.mark.parametrize(
    "make, flags, message",
    [
        ("text", ["--text_column", "nope"], "has no column 'nope'; its columns are: text"),
        ("numbers", [], "the text column 'text' holds int64, not strings"),
        ("empty", [], "the dataset has no rows: nothing to embed"),
        ("text", ["--tokens_column", "text"], "the tokens column 'text' holds string, not lists of strings"),
        ("missing", [], "input file missing.txt not found"),
        ("text", ["--split", "test"], "no split 'test': its splits are train"),
    ],
)
def test_bad_input_is_one_error_line_before_the_model_loads(make, flags, message, tiny_dir, tmp_path, capsys,
                                                          monkeypatch):  # fmt: skip
    inputs = {
        "text": ["--dataset_name", tmp_path / "d"],
        "numbers": ["--dataset_name", tmp_path / "d"],
        "empty": ["--train_file", "empty.txt"],
        "missing": ["--train_file", "missing.txt"],
    }
    values = {"text": ["a b"], "numbers": [5]}
    (tmp_path / "empty.txt").write_text("")
    if make in values:
        saved = datasets.Dataset.from_dict({"text": values[make]})
        (datasets.DatasetDict({"train": saved}) if "--split" in flags else saved).save_to_disk(str(tmp_path / "d"))
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    code = run_cli("embed", *inputs[make], *flags, "--output_dir", tmp_path / "out", "--model", tiny_dir)
    err = capsys.readouterr().err
    assert code == 1 and err.splitlines()[-1].startswith("error: ") and message in err.splitlines()[-1], err
    assert not (tmp_path / "out").exists()


def test_a_folder_of_another_output_type_or_model_is_refused(tiny_dir, tmp_path, capsys):
    text = corpus(tmp_path / "input.txt", 6)
    flags = ["--train_file", text, "--output_dir", tmp_path / "out", "--disable_tqdm"]
    assert run_cli("embed", *flags, "--model", tiny_dir, "--output_type", "top") == 0
    capsys.readouterr()
    assert run_cli("embed", *flags, "--model", tiny_dir, "--output_type", "average") == 1
    assert "output_type: 'top' in the folder, 'average' in this run" in capsys.readouterr().err
    assert run_cli("embed", *flags, "--output_type", "top") == 1  # the demo model
    err = capsys.readouterr().err
    assert "model.config_sha256" in err and "model.weights_sha256" in err and "delete this one" in err


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--train_file", "x.txt"], "--train_file is for Parquet shards: give the folder, --output_dir DIR"),
        (["in.txt", "--text_column", "t"], "--text_column is for Parquet shards: give the folder, --output_dir DIR"),
        (["--output_dir", "out"], "--output_dir needs one input"),
        (["--train_file", "x.txt", "--data_files", "y.txt", "--output_dir", "o"], "got --train_file and --data_files"),
        (["in.txt", "--train_file", "x.txt", "--output_dir", "o"], "give the input as --train_file in.txt"),
        (["--train_file", "x.txt", "--output_dir", "o", "-o", "f.hdf5"], "-o/--output: for the HDF5 file only"),
        (
            ["--train_file", "x.txt", "--output_dir", "o", "--shard_size", "0"],
            "argument --shard_size: must be at least 1",
        ),
    ],
)
def test_flags_that_do_not_go_together_are_usage_errors(flags, message, capsys):
    assert run_cli("embed", *flags) == 2
    assert message in capsys.readouterr().err
