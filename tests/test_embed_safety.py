"""``elmo embed`` under faults (issue #13): concurrent runs, a full disk, SIGTERM and SIGKILL, memory, bad devices.

Real processes, real signals, a real file size limit (``RLIMIT_FSIZE``: writes past it fail with EFBIG, as on a
full disk); the tiny random model of ``tests/test_cli.py``.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import h5py
import numpy as np
import pytest

import elmo_cli as cli
from modeling_elmo import ElmoModel, ElmoTokenizer
from modeling_elmo.inference.embed_corpus import embed_corpus

REPO = Path(__file__).resolve().parent.parent
ENV = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))


def corpus(path: Path, n: int) -> Path:
    path.write_text("".join(f"w{i % 97} x{i % 13} y .\n" for i in range(n)), encoding="utf-8")
    return path


def embed_command(tiny_dir: Path, *args) -> list[str]:
    return [sys.executable, "-m", "elmo_cli", "embed", "--model", str(tiny_dir), "--device", "cpu",
            "--disable_tqdm", *map(str, args)]  # fmt: skip


def hidden_files(folder: Path) -> list[str]:
    """The partial, part and lock files next to an output (hidden names)."""
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def wait_for_partial(folder: Path, name: str, process: subprocess.Popen, timeout: float = 120) -> Path:
    """The hidden partial file of a running embed to ``folder/name``, once it exists (the model is loaded)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [p for p in folder.iterdir() if p.name.startswith(f".{name}.") and p.name.endswith(".tmp")]
        if found:
            return found[0]
        assert process.poll() is None, process.communicate()
        time.sleep(0.05)
    raise AssertionError("no partial file appeared")


def assert_complete(path: Path, sentences: int) -> None:
    with h5py.File(path, "r") as f:
        assert f.attrs["num_sentences"] == sentences
        assert sorted(f) == sorted([str(i) for i in range(sentences)] + ["sentence_to_index"])
        assert max(int(i) for i in json.loads(f["sentence_to_index"][0]).values()) == sentences - 1
        assert f[str(sentences - 1)].shape[::2] == (3, 16)


# ---------------------------------------------------------------------------------------------
# Two runs to one output (item 5)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("overwrite", [False, True])
def test_two_concurrent_embeds_to_one_output_one_is_refused(tiny_dir, tmp_path, overwrite):
    """Run A reads stdin, so it is surely still running when run B starts on the same output: B stops at once
    with one ``error:`` line (A holds the output's lock for its whole run), A completes. ``--overwrite`` replaces
    a file that was there before, never the output of a run in progress. Before: both exited 0, one result lost."""
    text = corpus(tmp_path / "input.txt", 20)
    out = tmp_path / "out.hdf5"
    extra = ["--overwrite"] if overwrite else []
    if overwrite:
        out.write_bytes(b"old")
    first = subprocess.Popen(embed_command(tiny_dir, "-", "-o", out, *extra), env=ENV, stdin=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)  # fmt: skip
    first.stdin.write("The cat sat on the mat .\n" * 30)
    first.stdin.flush()
    wait_for_partial(tmp_path, out.name, first)
    second = subprocess.run(embed_command(tiny_dir, text, "-o", out, *extra), env=ENV, capture_output=True,
                            text=True, timeout=300)  # fmt: skip
    _, first_err = first.communicate(timeout=300)
    assert (first.returncode, second.returncode) == (0, 1), (first_err, second.stderr)
    assert second.stderr.startswith("error: ") and second.stderr.count("\n") == 1, second.stderr
    assert "another `elmo embed`" in second.stderr and str(out) in second.stderr
    assert_complete(out, 30)
    assert hidden_files(tmp_path) == []  # no lock file, no partial file


def test_output_created_during_the_run_is_not_replaced(tiny_dir, tmp_path):
    """Without ``--overwrite``, a file that another program creates at the output while the run writes is kept:
    the run fails with one ``error:`` line at publishing time (``os.link``, not ``os.replace``)."""
    out = tmp_path / "out.hdf5"
    run = subprocess.Popen(embed_command(tiny_dir, "-", "-o", out), env=ENV, stdin=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)  # fmt: skip
    run.stdin.write("The cat sat on the mat .\n" * 50)
    run.stdin.flush()
    wait_for_partial(tmp_path, out.name, run)
    out.write_bytes(b"someone else's file")
    _, err = run.communicate(timeout=120)
    assert run.returncode == 1, err
    assert err.startswith("error: ") and err.count("\n") == 1 and "created by another program" in err, err
    assert out.read_bytes() == b"someone else's file"
    assert hidden_files(tmp_path) == []


# ---------------------------------------------------------------------------------------------
# A full disk (item 8)
# ---------------------------------------------------------------------------------------------


def _file_size_limit(limit: int):
    def limit_writes() -> None:  # in the child: writes past `limit` bytes fail with EFBIG instead of killing it
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return limit_writes


def test_full_disk_gives_one_error_line_and_no_file(tiny_dir, tmp_path):
    """The output (~6 MB) cannot grow past 1 MB. Before: h5py printed a traceback per dataset from
    ``__dealloc__`` (tens of thousands of lines), and closing the file segfaulted (exit 139)."""
    text = corpus(tmp_path / "input.txt", 5000)
    out = tmp_path / "out.hdf5"
    result = subprocess.run(embed_command(tiny_dir, text, "-o", out), env=ENV, capture_output=True, text=True,
                            timeout=300, preexec_fn=_file_size_limit(1_000_000))  # fmt: skip
    assert result.returncode == 1, result.stderr[-3000:]
    assert result.stderr.count("\n") == 1, result.stderr[-3000:]
    assert result.stderr.startswith(f"error: could not write {out}: File too large"), result.stderr
    assert sorted(os.listdir(tmp_path)) == ["input.txt"]


# ---------------------------------------------------------------------------------------------
# SIGTERM and SIGKILL (item 9)
# ---------------------------------------------------------------------------------------------


def test_sigterm_mid_embed_removes_the_partial_file(tiny_dir, tmp_path):
    out = tmp_path / "out.hdf5"
    run = subprocess.Popen(embed_command(tiny_dir, "-", "-o", out), env=ENV, stdin=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)  # fmt: skip
    run.stdin.write("The cat sat on the mat .\n" * 50)
    run.stdin.flush()
    partial = wait_for_partial(tmp_path, out.name, run)
    run.send_signal(signal.SIGTERM)
    _, err = run.communicate(timeout=60)
    assert run.returncode == 128 + signal.SIGTERM, err
    assert err == "terminated\n"
    assert not partial.exists() and sorted(os.listdir(tmp_path)) == []


def test_sigterm_while_writing_removes_the_partial_file(tiny_dir, tmp_path):
    """SIGTERM while the file is being written (HDF5 calls back into Python to write: the signal is handled
    between its calls, never inside one)."""
    text = corpus(tmp_path / "input.txt", 20000)
    folder = tmp_path / "out"
    folder.mkdir()
    run = subprocess.Popen(embed_command(tiny_dir, text, "-o", folder / "out.hdf5", "--batch_size", "512"), env=ENV,
                           stderr=subprocess.PIPE, text=True)  # fmt: skip
    partial = wait_for_partial(folder, "out.hdf5", run)
    while run.poll() is None and partial.exists() and partial.stat().st_size < 500_000:
        time.sleep(0.02)
    run.send_signal(signal.SIGTERM)
    _, err = run.communicate(timeout=60)
    assert (run.returncode, err) == (128 + signal.SIGTERM, "terminated\n")
    assert os.listdir(folder) == []


def test_next_run_removes_what_a_killed_run_left(tiny_dir, tmp_path):
    """SIGKILL cannot be handled: the partial file stays, and the next run to the same output deletes it. It
    deletes only marked files of dead processes for that output: not a live process's, not another output's,
    not a user's file with a similar name."""
    out = tmp_path / "out.hdf5"
    run = subprocess.Popen(embed_command(tiny_dir, "-", "-o", out), env=ENV, stdin=subprocess.PIPE,
                           stderr=subprocess.DEVNULL)  # fmt: skip
    run.stdin.write(b"The cat sat on the mat .\n" * 50)
    run.stdin.flush()
    partial = wait_for_partial(tmp_path, out.name, run)
    run.kill()
    run.wait(timeout=60)
    run.stdin.close()
    assert partial.exists()
    dead = run.pid
    kept = [
        tmp_path / f".out.hdf5.embed-partial-{os.getppid()}.tmp",  # a live process (pytest's parent)
        tmp_path / f".other.hdf5.embed-partial-{dead}.tmp",  # another output
        tmp_path / f".out.hdf5.partial-{dead}.tmp",  # not marked as elmo embed's
        tmp_path / f".out.hdf5.embed-partial-{dead}.tmp.bak",
    ]
    for path in kept:
        path.write_bytes(b"keep")
    text = corpus(tmp_path / "input.txt", 10)
    result = subprocess.run(embed_command(tiny_dir, text, "-o", out), env=ENV, capture_output=True, text=True,
                            timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert not partial.exists()
    assert all(path.read_bytes() == b"keep" for path in kept)
    assert_complete(out, 10)


def test_next_run_removes_part_files_of_a_killed_multiprocess_run(tiny_dir, tmp_path, capsys):
    """Part files carry no PID; a run that holds the output's lock knows that no other run is writing them."""
    text = corpus(tmp_path / "input.txt", 5)
    out = tmp_path / "out.hdf5"
    parts = [tmp_path / f".out.hdf5.embed-part{r}-of-2.tmp" for r in range(2)]
    for part in parts:
        part.write_bytes(b"")
    assert cli.main(["embed", str(text), "-o", str(out), "--model", str(tiny_dir), "--disable_tqdm"]) == 0
    assert not any(part.exists() for part in parts)
    assert_complete(out, 5)


# ---------------------------------------------------------------------------------------------
# Memory (item 10)
# ---------------------------------------------------------------------------------------------

_MEMORY_SCRIPT = textwrap.dedent(
    """
    import resource, sys, torch
    import elmo_cli as cli
    torch.set_num_threads(1)
    model, folder, small, large = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    peaks = []
    for n in (small, large):
        text = f"{folder}/in{n}.txt"
        with open(text, "w") as f:
            f.writelines(f"w{i % 97} x{i % 13} y .\\n" for i in range(n))
        code = cli.main(["embed", text, "-o", f"{folder}/out{n}.hdf5", "--model", model, "--device", "cpu",
                         "--disable_tqdm", "--batch_size", "512", "--max_batch_words", "4096"])
        assert code == 0
        peaks.append(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    print(*peaks)
    """
)


@pytest.mark.slow
def test_embed_memory_does_not_grow_with_corpus_size(tiny_dir, tmp_path):
    """One process embeds 6k lines, then 36k lines (6x the datasets, the words, the file): the peak RSS after the
    second run stays within allocator noise of the peak after the first. Measured on 2 busy cores: before the
    fix +24 MiB (HDF5's metadata cache grows with the number of datasets, by default up to 32 MB; and
    ``embed_corpus`` held a whole chunk of outputs, which with real models and long sentences is ~1 GB), after
    +9 MiB (allocator noise; HDF5's memory levels off after ~5k datasets). ~45 s."""
    result = subprocess.run(
        [sys.executable, "-c", _MEMORY_SCRIPT, str(tiny_dir), str(tmp_path), "6000", "36000"],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    small, large = (int(kb) / 1024 for kb in result.stdout.split())
    print(f"peak RSS after 6k lines {small:.1f} MiB, after 36k more lines {large:.1f} MiB")
    assert large - small < 15, (small, large)


def test_embed_corpus_unordered_yields_each_sentence_once_with_the_same_values(tiny_dir):
    model, tokenizer = ElmoModel.from_pretrained(tiny_dir).eval(), ElmoTokenizer.from_pretrained(tiny_dir)
    lines = [" ".join(f"w{k}" for k in range(i % 9)) for i in range(40)]
    ordered = list(embed_corpus(model, tokenizer, lines, batch_size=4, chunk_size=16, progress=False))
    unordered = list(embed_corpus(model, tokenizer, lines, batch_size=4, chunk_size=16, progress=False, ordered=False))
    assert [i for i, _ in ordered] == list(range(40))
    assert sorted(i for i, _ in unordered) == list(range(40))
    assert [i for i, _ in unordered[:16]] != list(range(16))  # by length within a chunk
    assert {i for i, _ in unordered[:16]} == set(range(16))  # a chunk is done before the next one starts
    by_index = dict(unordered)
    for i, value in ordered:
        np.testing.assert_array_equal(by_index[i], value)


# ---------------------------------------------------------------------------------------------
# --device (item 22, embed part)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("device", ["meta", "meta:0", "xla", "cuda:x", ""])
def test_embed_refuses_devices_it_cannot_run_on(tiny_dir, tmp_path, capsys, device):
    text = corpus(tmp_path / "input.txt", 3)
    assert cli.main(["embed", str(text), "-o", str(tmp_path / "out.hdf5"), "--model", str(tiny_dir),
                     "--device", device, "--disable_tqdm"]) == 1  # fmt: skip
    err = capsys.readouterr().err
    assert err.startswith(f"error: --device {device!r} is not a device") and err.count("\n") == 1, err
    assert "use auto, cpu, cuda" in err
    assert sorted(os.listdir(tmp_path)) == ["input.txt"]


# ---------------------------------------------------------------------------------------------
# A NUL character in the input (issue 26, 8)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", [[], ["--tokenized"], ["--raw"]], ids=["lines", "tokenized", "raw"])
def test_a_nul_byte_in_an_input_file_is_refused_by_line_before_anything_is_written(tiny_dir, tmp_path, capsys, mode):
    """Before: ``--tokenized`` ended in a traceback (HDF5 refuses the words ``bad\\0word`` as a string) and the
    default tokenizer silently read NUL as a space. Now one error line naming the file and line, and no file."""
    text = tmp_path / "input.txt"
    text.write_bytes(b"hello world .\n\nsome bad\x00word here .\nok .\n")
    assert cli.main(["embed", str(text), "-o", str(tmp_path / "out.hdf5"), "--model", str(tiny_dir),
                     "--device", "cpu", "--disable_tqdm", *mode]) == 1  # fmt: skip
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(f"error: {text}: line 3 holds a NUL character"), err
    assert sorted(os.listdir(tmp_path)) == ["input.txt"]


def test_a_nul_byte_on_stdin_is_refused_by_line_and_no_file_is_left(tiny_dir, tmp_path):
    """From stdin the line is found while embedding (after the model loaded): the partial file is removed."""
    lines = b"".join(b"w%d x y .\n" % i for i in range(50)) + b"bad\x00word .\n"
    result = subprocess.run(embed_command(tiny_dir, "-", "-o", tmp_path / "out.hdf5", "--tokenized"), input=lines,
                            env=ENV, capture_output=True, timeout=300)  # fmt: skip
    err = result.stderr.decode()
    assert result.returncode == 1 and err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("error: the input: line 51 holds a NUL character"), err
    assert os.listdir(tmp_path) == []
