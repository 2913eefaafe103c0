"""Issue 44, the attack pass on the new surfaces (H1, H2, M1-M7, L1-L5, L9-L12): each test failed before its fix.

The dataset path (`elmo embed --output_dir`, ``embed_dataset``, ``write_shards``) on the tiny random model, the
output-file helper of every command (devices, pipes, links, the model's own files), and three refusals elsewhere
(ManyLangs weights beyond float32, ``train-tagger --predict`` on a biLM, an import failure named). The old-path
stand-ins (L6-L8) were tested in ``tests/test_deprecated_paths.py``, retired with them in 0.3.0 (issue 51).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import h5py
import pytest
import torch
from helpers import TINY

import elmo_cli as cli
from modeling_elmo import ElmoConfig, ElmoModel, ElmoTokenizer
from modeling_elmo.hub.convert_manylangs import ConversionError, convert_manylangs
from modeling_elmo.inference.embed_dataset import DatasetInputError, embed_dataset
from modeling_elmo.inference.parquet_shards import METADATA_NAME, ShardFolderError, write_shards

datasets = pytest.importorskip("datasets")  # the [train] extra
pq = pytest.importorskip("pyarrow.parquet")

pytestmark = pytest.mark.usefixtures("one_thread")

REPO = Path(__file__).resolve().parent.parent
ENV = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO), TOKENIZERS_PARALLELISM="false")
TOKENIZER = ElmoTokenizer()
LINES = ["the cat sat on the mat .", "a b", "", "Paris is big", "it 's 1999 .", "x y z", "the end ."]


@pytest.fixture(autouse=True)
def datasets_cache(tmp_path, monkeypatch):
    """`datasets`' cache in the test's folder, for this process and its children."""
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")
    monkeypatch.setitem(ENV, "HF_DATASETS_CACHE", str(tmp_path / "hf-cache"))


@pytest.fixture(scope="module")
def model() -> ElmoModel:
    torch.manual_seed(0)
    return ElmoModel(ElmoConfig(**TINY)).eval()


def write(model, dataset, folder, **kwargs):
    settings = dict(output_type="elmo", shard_size=3, chunk_size=3, progress=False, log=lambda line: None)
    return write_shards(model, TOKENIZER, dataset, str(folder), **{**settings, **kwargs})


def run_cli(*argv) -> int:
    return cli.main([str(a) for a in argv])


def error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if "error:" in line]
    assert lines, err
    return lines[-1]


def text_file(path: Path, lines=LINES) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# --------------------------------------------------------------------------------------------------
# H1: a folder of the user's files is never written into


def test_h1_a_folder_of_user_files_is_refused_and_left_byte_identical(tiny_dir, tmp_path, capsys):
    """A project folder (README.md, notes) and a copy of a model folder (its card, weights) as --output_dir: the run
    is refused before the model loads, naming the files, and every file is byte-identical, with none added."""
    text = text_file(tmp_path / "in.txt")
    project = tmp_path / "project"
    project.mkdir()
    (project / "README.md").write_text("# My project\n\nNotes that took a week.\n")
    (project / "notes.txt").write_bytes(b"\x00\x01 binary notes")
    model_copy = shutil.copytree(tiny_dir, tmp_path / "model-copy")
    (model_copy / "README.md").write_text("---\nlicense: apache-2.0\n---\n# A model card of 2,981 characters\n")
    for folder in (project, model_copy):
        before = snapshot(folder)
        capsys.readouterr()
        assert (
            run_cli("embed", "--train_file", text, "--output_dir", folder, "--model", tiny_dir, "--disable_tqdm") == 1
        )
        line = error_line(capsys.readouterr().err)
        assert f"{folder} is not empty (" in line and "README.md" in line and "Give a new or empty folder" in line
        assert snapshot(folder) == before


def test_h1_a_readme_put_in_a_run_folder_before_it_completes_is_kept(model, tmp_path):
    """A README.md that appears in an unfinished run's folder is the user's: the completing run keeps it byte for
    byte, says so, and the shards are complete all the same."""
    dataset = datasets.Dataset.from_dict({"text": LINES})
    folder = tmp_path / "out"
    assert not write(model, dataset, folder, rank=0, world=2).complete
    (folder / "README.md").write_bytes(b"# mine\n")
    said = []
    run = write(model, dataset, folder, rank=1, world=2, log=said.append)
    assert run.complete and (folder / "README.md").read_bytes() == b"# mine\n"
    assert any("kept" in line and "README.md" in line and "did not write" in line for line in said), said
    assert sorted(p.name for p in folder.glob("train-*.parquet")) == [
        f"train-{i:05d}-of-00003.parquet" for i in range(3)
    ]


# --------------------------------------------------------------------------------------------------
# H2: num_proc > 1 does not hang


H2_SCRIPT = """
import sys, numpy as np, torch, datasets
sys.path.insert(0, {tests!r})
from helpers import BATCHING_ATOL, TINY
from modeling_elmo import ElmoConfig, ElmoModel, ElmoTokenizer
from modeling_elmo.inference.embed_dataset import embed_dataset

torch.set_num_threads(2)  # the parent's OpenMP pool has threads before the fork (what hung the workers)
torch.manual_seed(0)
model, tokenizer = ElmoModel(ElmoConfig(**TINY)).eval(), ElmoTokenizer()
rows = datasets.Dataset.from_dict({{"text": [" ".join(["the cat sat"] * (1 + i % 7)) for i in range(64)]}})
one = embed_dataset(model, tokenizer, rows, chunk_size=8, keep_in_memory=True, progress=False)
two = embed_dataset(model, tokenizer, rows, chunk_size=8, keep_in_memory=True, progress=False, num_proc=2)
a, b = one.with_format("numpy")["elmo"], two.with_format("numpy")["elmo"]
worst = max(float(np.abs(x - y).max()) for x, y in zip(a, b, strict=True))
assert len(b) == 64 and worst <= BATCHING_ATOL, worst
print("OK", worst)
"""


@pytest.mark.slow  # a fresh interpreter, two forked workers: ~30 s on a loaded 2-core machine
def test_h2_num_proc_2_finishes_under_a_time_limit(tmp_path):
    """``embed_dataset(..., num_proc=2)`` after the parent used torch with 2 threads: before, both forked workers
    waited forever in OpenMP's barrier. In a child process with a hard limit, so that a hang fails the test (its
    whole process group, the workers included, is killed). The rows equal one process's within BATCHING_ATOL."""
    script = tmp_path / "h2.py"
    script.write_text(H2_SCRIPT.format(tests=str(REPO / "tests")))
    env = dict(ENV, OMP_NUM_THREADS="2")
    process = subprocess.Popen(
        [sys.executable, str(script)], env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, start_new_session=True,
    )  # fmt: skip
    try:
        out, err = process.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        pytest.fail("embed_dataset(num_proc=2) hung: still running after 240 s")
    assert process.returncode == 0 and out.splitlines()[-1].startswith("OK"), err[-3000:]


def test_h2_num_proc_with_a_model_off_the_cpu_is_refused_naming_torchrun(model):
    meta = ElmoModel(ElmoConfig(**TINY)).to("meta")
    rows = datasets.Dataset.from_dict({"text": ["a b"]})
    with pytest.raises(ValueError, match="forked CPU processes.*torchrun"):
        embed_dataset(meta, TOKENIZER, rows, num_proc=2)
    with pytest.raises(ValueError, match="num_proc must be a positive integer"):
        embed_dataset(model, TOKENIZER, rows, num_proc=0)


# --------------------------------------------------------------------------------------------------
# M1-M6: the dataset path's input and folder


def test_m1_split_slices_and_names_local_files(tiny_dir, tmp_path):
    """``--split train[:5]`` writes 5 of 7 rows; ``--split test`` names the shards test-* and holds the file's rows
    (before: all 7 rows, and test-* files holding the train split)."""
    text = text_file(tmp_path / "in.txt")
    common = ["--train_file", text, "--model", tiny_dir, "--output_type", "top", "--disable_tqdm"]
    assert run_cli("embed", *common, "--split", "train[:5]", "--output_dir", tmp_path / "five") == 0
    five = datasets.load_dataset("parquet", data_dir=str(tmp_path / "five"), cache_dir=str(tmp_path / "c"))
    assert list(five) == ["train"] and five["train"]["text"] == LINES[:5]
    assert run_cli("embed", *common, "--split", "test", "--output_dir", tmp_path / "test") == 0
    test = datasets.load_dataset("parquet", data_dir=str(tmp_path / "test"), cache_dir=str(tmp_path / "c"))
    assert list(test) == ["test"] and test["test"]["text"] == LINES
    assert json.loads((tmp_path / "test" / METADATA_NAME).read_text())["input"]["source"]["split"] == "test"


@pytest.mark.parametrize(
    ("column", "values", "message"),
    [
        ("text", ["a b", None, "c"], "row 1 has no 'text' (None)"),
        ("tokens", [["a"], ["b"], None], "row 2 has no 'tokens' (None)"),
        ("tokens", [["a"], ["b", None]], "row 1's tokens ('tokens') hold None"),
    ],
)
def test_m2_none_in_the_input_is_an_error_naming_the_row(column, values, message, model, tiny_dir, tmp_path, capsys):
    dataset = datasets.Dataset.from_dict({column: values})
    with pytest.raises(DatasetInputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        write(model, dataset, tmp_path / "lib")
    dataset.save_to_disk(str(tmp_path / "saved"))
    capsys.readouterr()
    assert run_cli("embed", "--dataset_name", tmp_path / "saved", "--output_dir", tmp_path / "out",
                   "--model", tiny_dir, "--disable_tqdm") == 1  # fmt: skip
    line = error_line(capsys.readouterr().err)
    assert line.startswith("error: --dataset_name") and message in line, line


def test_m3_a_saved_dataset_of_no_rows_is_an_error(tiny_dir, tmp_path, capsys):
    features = datasets.Features({"text": datasets.Value("string")})
    datasets.Dataset.from_dict({"text": []}, features=features).save_to_disk(str(tmp_path / "empty"))
    datasets.DatasetDict({"train": datasets.Dataset.from_dict({"text": []}, features=features)}).save_to_disk(
        str(tmp_path / "empty-dict")
    )
    for saved in ("empty", "empty-dict"):
        capsys.readouterr()
        assert run_cli("embed", "--dataset_name", tmp_path / saved, "--output_dir", tmp_path / "out",
                       "--model", tiny_dir) == 1  # fmt: skip
        assert "the dataset has no rows: nothing to embed" in error_line(capsys.readouterr().err)
        assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("damage", ["cut in half", "garbage", "empty"])
def test_m4_a_damaged_complete_shard_is_named_in_one_error(damage, model, tiny_dir, tmp_path, capsys):
    dataset = datasets.Dataset.from_dict({"text": LINES})
    folder = tmp_path / "out"
    assert write(model, dataset, folder).complete
    shard = folder / "train-00001-of-00003.parquet"
    data = shard.read_bytes()
    shard.write_bytes({"cut in half": data[: len(data) // 2], "garbage": os.urandom(len(data)), "empty": b""}[damage])
    with pytest.raises(ShardFolderError, match=r"train-00001-of-00003\.parquet is damaged .*delete it and run"):
        write(model, dataset, folder)
    # The same through the command: one error line, no traceback.
    text = text_file(tmp_path / "in.txt")
    flags = ["--train_file", text, "--model", tiny_dir, "--shard_size", "3", "--disable_tqdm"]
    assert run_cli("embed", *flags, "--output_dir", tmp_path / "cli") == 0
    (tmp_path / "cli" / "train-00002-of-00003.parquet").write_bytes(b"")
    capsys.readouterr()
    assert run_cli("embed", *flags, "--output_dir", tmp_path / "cli") == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and "train-00002-of-00003.parquet is damaged" in error_line(err)


def test_m5_an_output_folder_the_input_would_read_is_refused(tiny_dir, tmp_path, capsys):
    """``--dataset_name corpus --output_dir corpus/elmo`` (before: the rerun read its own shards as input and
    failed for ever), and a data files pattern that would find the shards: refused at the start, nothing written."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    text_file(corpus / "a.txt")
    cases = [
        (["--dataset_name", corpus], "inside the input folder --dataset_name"),
        (["--data_files", f"{corpus}/**"], "where the input pattern"),
    ]
    for flags, message in cases:
        capsys.readouterr()
        assert run_cli("embed", *flags, "--output_dir", corpus / "elmo", "--model", tiny_dir) == 1
        assert message in error_line(capsys.readouterr().err)
        assert sorted(os.listdir(corpus)) == ["a.txt"]
    assert (
        run_cli(
            "embed",
            "--data_files",
            f"{corpus}/*.txt",
            "--output_dir",
            corpus / "elmo",
            "--model",
            tiny_dir,
            "--output_type",
            "top",
            "--disable_tqdm",
        )
        == 0
    )  # fmt: skip  (*.txt never finds the shards)


def test_m6_an_unfinished_folder_reads_as_no_rows_not_some(model, tmp_path):
    """Process 0 of 2 done, process 1 not yet (as a killed run leaves it): `load_dataset("parquet", data_dir=DIR)`
    finds no data, instead of half the rows (before: 4 of 7, no warning), and `load_dataset(DIR)` fails on the card
    of a folder in progress (issue 49: before, it read elmo_embed.json as a dataset of 1 row). Complete, both read
    all 7."""
    dataset = datasets.Dataset.from_dict({"text": LINES})
    folder = tmp_path / "out"
    write(model, dataset, folder, rank=0, world=2)
    assert not list(folder.glob("train-*.parquet"))
    with pytest.raises(Exception):  # noqa: B017, PT011  (what `datasets` raises for a folder without data files)
        datasets.load_dataset("parquet", data_dir=str(folder), cache_dir=str(tmp_path / "c1"))["train"]
    with pytest.raises(FileNotFoundError, match="train-00000-of-00003.parquet"):
        datasets.load_dataset(str(folder), cache_dir=str(tmp_path / "c1"))
    assert write(model, dataset, folder, rank=1, world=2).complete
    rows = datasets.load_dataset("parquet", data_dir=str(folder), cache_dir=str(tmp_path / "c2"))["train"]
    assert rows["text"] == LINES and not [n for n in os.listdir(folder) if n.startswith(".")]
    assert datasets.load_dataset(str(folder), cache_dir=str(tmp_path / "c3"))["train"]["text"] == LINES


# --------------------------------------------------------------------------------------------------
# M7, L12: outputs that are devices, pipes, links, or the model's own files


def test_m7_a_fifo_is_written_through_and_stays_a_fifo(tiny_dir, tmp_path):
    text = text_file(tmp_path / "in.txt")
    fifo = tmp_path / "out.pipe"
    os.mkfifo(fifo)
    received = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()), daemon=True)
    reader.start()
    try:
        assert run_cli("embed", text, "-o", fifo, "--model", tiny_dir, "--disable_tqdm") == 0
    finally:
        if reader.is_alive():  # the command never opened the pipe: release the reader
            # Without blocking: the reader may end between is_alive() and this open, and a blocking open of a pipe
            # nobody reads waits forever (it hung a full run once).
            with contextlib.suppress(OSError):
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        reader.join(30)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    with h5py.File(io.BytesIO(received[0]), "r") as f:
        assert f.attrs["num_sentences"] == len(LINES) and f["0"].shape[1] == 7


def test_m7_a_link_to_dev_null_stays_a_link(tiny_dir, tmp_path):
    text = text_file(tmp_path / "in.txt")
    link = tmp_path / "null"
    link.symlink_to("/dev/null")
    assert run_cli("embed", text, "-o", link, "--model", tiny_dir, "--disable_tqdm") == 0
    assert link.is_symlink() and os.readlink(link) == "/dev/null"
    assert sorted(os.listdir(tmp_path)) == ["in.txt", "null"]


def test_m7_a_stand_in_for_dev_stdout_writes_into_the_redirected_file(tiny_dir, tmp_path):
    """``-o STDOUT --overwrite > file`` where STDOUT links to ``/proc/self/fd/1`` (as ``/dev/stdout`` does): the file
    gets the HDF5 file and the link stays (before: the link was replaced by a regular file and the user's file was
    left empty)."""
    text = text_file(tmp_path / "in.txt")
    stdout = tmp_path / "stdout"
    stdout.symlink_to("/proc/self/fd/1")
    with open(tmp_path / "redirected.hdf5", "wb") as out:
        done = subprocess.run(
            [sys.executable, "-m", "elmo_cli", "embed", str(text), "-o", str(stdout), "--overwrite", "--model",
             str(tiny_dir), "--disable_tqdm"],
            env=ENV, cwd=tmp_path, stdout=out, stderr=subprocess.PIPE, text=True, timeout=300,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert stdout.is_symlink() and os.readlink(stdout) == "/proc/self/fd/1"
    with h5py.File(tmp_path / "redirected.hdf5", "r") as f:
        assert f.attrs["num_sentences"] == len(LINES)


def test_m7_a_socket_is_refused(tiny_dir, tmp_path, capsys):
    import socket

    text = text_file(tmp_path / "in.txt")
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(tmp_path / "sock"))
        assert run_cli("embed", text, "-o", tmp_path / "sock", "--model", tiny_dir) == 1
    assert "is not a regular file, a character device or a pipe" in error_line(capsys.readouterr().err)


def test_l12_an_output_that_is_one_of_the_models_files_is_refused(tiny_dir, tmp_path, capsys):
    model_dir = shutil.copytree(tiny_dir, tmp_path / "model")
    text = text_file(tmp_path / "in.txt")
    before = snapshot(model_dir)
    for name in ("model.safetensors", "config.json"):
        capsys.readouterr()
        target = model_dir / name
        assert run_cli("embed", text, "-o", target, "--model", model_dir, "--overwrite", "--disable_tqdm") == 1
        assert f"is the input {target}: writing it would destroy the input" in error_line(capsys.readouterr().err)
    assert snapshot(model_dir) == before
    assert run_cli("embed", text, "-o", model_dir / "vectors.hdf5", "--model", model_dir, "--disable_tqdm") == 0


# --------------------------------------------------------------------------------------------------
# L1-L5: odd folders, names and numbers


def test_l1_odd_output_folders_get_a_message_not_an_errno(model, tiny_dir, tmp_path, capsys):
    text = text_file(tmp_path / "in.txt")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    cases = [
        (tmp_path / "dangling", f"is a symbolic link to {tmp_path / 'nowhere'}, which does not exist"),
        ("", "the output folder's name is empty"),
    ]
    for folder, message in cases:
        capsys.readouterr()
        assert run_cli("embed", "--train_file", text, "--output_dir", folder, "--model", tiny_dir) == 1
        line = error_line(capsys.readouterr().err)
        assert message in line and "Errno" not in line, line
    # A shard's temporary (lock) name taken by a folder.
    dataset = datasets.Dataset.from_dict({"text": LINES})
    write(model, dataset, tmp_path / "out", rank=1, world=2)
    (tmp_path / "out" / ".train-00000-of-00003.parquet.tmp").mkdir()
    with pytest.raises(ShardFolderError, match=r"\.tmp is a folder, where this run writes a shard"):
        write(model, dataset, tmp_path / "out")
    # The HDF5 file's lock name taken by a folder.
    (tmp_path / ".x.hdf5.embed.lock").mkdir()
    capsys.readouterr()
    assert run_cli("embed", text, "-o", tmp_path / "x.hdf5", "--model", tiny_dir) == 1
    line = error_line(capsys.readouterr().err)
    assert "the lock this command takes beside" in line and "is a folder" in line and "Errno" not in line


def test_l1_a_read_only_file_system_gets_a_message(tiny_dir, tmp_path):
    """A real read-only tmpfs, mounted in a private mount namespace (skipped where that is not allowed)."""
    if shutil.which("unshare") is None or subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode:
        pytest.skip("no private mount namespace here (unshare -m)")
    text = text_file(tmp_path / "in.txt")
    mount = tmp_path / "ro"
    mount.mkdir()
    command = (
        f"mount -t tmpfs -o ro none {mount} && exec {sys.executable} -m elmo_cli embed --train_file {text} "
        f"--output_dir {mount}/out --model {tiny_dir} --disable_tqdm"
    )
    done = subprocess.run(["unshare", "-m", "sh", "-c", command], env=ENV, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr[-3000:]
    line = error_line(done.stderr)
    assert f"cannot create the output folder {mount}/out: Read-only file system" in line and "Errno" not in line


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--split", "../../x"], "--split '../../x': give a split's name, optionally sliced"),
        (["--split", "train+test"], "--split 'train+test': give a split's name"),
        (["--column", ""], "--column must name the new column, got ''"),
        (["--words_column", " "], "--words_column must name the new column, got ' '"),
    ],
)
def test_l2_l3_bad_split_and_column_names_are_usage_errors(flags, message, tmp_path, capsys):
    text = text_file(tmp_path / "in.txt")
    assert run_cli("embed", "--train_file", text, "--output_dir", tmp_path / "out", *flags) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and not (tmp_path / "out").exists()


def test_l3_l5_the_library_checks_its_arguments(model, tmp_path):
    rows = datasets.Dataset.from_dict({"text": ["a b", "c"]})
    for kwargs, message in [
        ({"column": ""}, "column must name the new column"),
        ({"words_column": "elmo"}, "column and words_column are both 'elmo'"),
        ({"chunk_size": 0}, "chunk_size must be a positive integer, got 0"),
        ({"chunk_size": -4}, "chunk_size must be a positive integer, got -4"),
        ({"batch_size": True}, "batch_size must be a positive integer, got True"),
    ]:
        with pytest.raises(ValueError, match=message):
            embed_dataset(model, TOKENIZER, rows, **kwargs)
    for kwargs, message in [
        ({"rank": 5, "world": 2}, r"rank must be in \[0, world\): got rank=5, world=2"),
        ({"rank": 0, "world": 0}, r"rank must be in \[0, world\)"),
        ({"rank": 1}, "give rank and world as integers, or neither; got world=None"),
        ({"column": " "}, "column must name the new column"),
    ]:
        with pytest.raises(ValueError, match=message):
            write(model, rows, tmp_path / "out", **kwargs)
    assert not (tmp_path / "out").exists()


def test_l4_a_shard_of_another_models_run_is_refused(model, tmp_path):
    """Two runs of the same rows and plan, with two models: a shard copied from the other model's folder (same name,
    rows and input) is refused on rerun, naming it (before: accepted)."""
    dataset = datasets.Dataset.from_dict({"text": LINES})
    torch.manual_seed(1)
    other = ElmoModel(ElmoConfig(**TINY)).eval()
    assert write(model, dataset, tmp_path / "mine").complete and write(other, dataset, tmp_path / "other").complete
    shutil.copy(tmp_path / "other" / "train-00001-of-00003.parquet", tmp_path / "mine")
    with pytest.raises(ShardFolderError, match=r"train-00001-of-00003\.parquet was written by another run"):
        write(model, dataset, tmp_path / "mine")


# --------------------------------------------------------------------------------------------------
# L9, L10, L11: refusals elsewhere


def test_l9_manylangs_float64_weights_beyond_float32_are_refused_naming_the_tensor(tmp_path):
    folder = shutil.copytree(REPO / "tests" / "fixtures" / "manylangs" / "with-words", tmp_path / "source")
    state = torch.load(folder / "encoder.pkl", weights_only=True)
    name = sorted(state)[0]
    state = {key: value.double() for key, value in state.items()}
    state[name].view(-1)[0] = 1e39  # finite in float64, infinite in float32
    torch.save(state, folder / "encoder.pkl")
    with pytest.raises(
        ConversionError, match=rf"{name} holds values beyond float32's range \(largest magnitude 1e\+39"
    ):
        convert_manylangs(folder, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_l10_predict_refuses_a_folder_whose_head_was_never_trained(tiny_dir, capsys):
    from modeling_elmo.training.train_tagger import main

    assert main(["--predict", str(tiny_dir), "EU rejects German call ."]) == 1
    captured = capsys.readouterr()
    assert f"error: {tiny_dir} holds no trained tagger" in captured.err and "train-tagger --bilm" in captured.err
    assert "LABEL_" not in captured.out


def test_l11_an_import_failure_names_the_real_error(tmp_path):
    """A package that fails while importing (here a stand-in transformers whose import raises as the real one did
    when /dev/urandom could not be read): the message names that error (before: "needs the package None")."""
    fake = tmp_path / "fake" / "transformers"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(
        textwrap.dedent("""\
            try:
                raise RuntimeError("Unable to read from /dev/urandom")
            except RuntimeError as error:
                raise ModuleNotFoundError("Could not import module 'PreTrainedModel'") from error
        """)
    )
    text = text_file(tmp_path / "in.txt")
    env = dict(ENV, PYTHONPATH=f"{tmp_path / 'fake'}{os.pathsep}{REPO}")
    done = subprocess.run([sys.executable, "-m", "elmo_cli", "embed", str(text), "-o", str(tmp_path / "x.hdf5")],
                          env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)  # fmt: skip
    assert done.returncode == 1
    assert error_line(done.stderr) == (
        "error: `elmo embed` could not be loaded: RuntimeError: Unable to read from /dev/urandom"
    ), done.stderr[-2000:]
