"""Every command that writes a file publishes it whole (issue 36, point 6), and the commands load models quietly
(issue 36.5).

``elmo score -o``, ``elmo export-vectors`` and ``elmo similar --plot`` write through the helper that ``elmo embed``
uses (``modeling_elmo.commands.output_files``): a temporary file beside the output, published only when complete and
never over a file that appeared meanwhile (without ``--overwrite``), a lock against a second run, the input never
taken as the output, and no file left by a failure, Ctrl-C or SIGTERM. Real processes and signals where it matters.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import elmo_cli as cli
from modeling_elmo.commands.common import Terminated
from modeling_elmo.commands.output_files import remove_stale_partials, writing
from modeling_elmo.hub.convert import convert

REPO = Path(__file__).resolve().parent.parent
ENV = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
LM_FIXTURE = Path(__file__).resolve().parent / "fixtures" / "softmax-lm"


def _elmo(*args) -> list[str]:
    return [sys.executable, "-m", "elmo_cli", *map(str, args)]


def _error_line(err: str) -> str:
    """The one line of a failed command (no traceback)."""
    assert "Traceback" not in err and err.count("\n") == 1 and err.startswith("error: "), err[-3000:]
    return err


def _wait_for(folder: Path, process: subprocess.Popen, marker: str, timeout: float = 300) -> Path:
    """A hidden temporary file (``.tmp``) of ``folder`` whose name holds ``marker``, once a running command has made
    it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [p for p in folder.iterdir() if p.name[0] == "." and marker in p.name and p.name.endswith(".tmp")]
        if found:
            return found[0]
        assert process.poll() is None, process.communicate()
        time.sleep(0.05)
    raise AssertionError(f"no file with {marker!r} appeared in {folder}")


def _dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(done.stdout)


@pytest.fixture
def start():
    """``subprocess.Popen`` for the test's commands; one still running when the test ends (a failed assertion) is
    killed."""
    processes: list[subprocess.Popen] = []

    def popen(*args, **kwargs) -> subprocess.Popen:
        processes.append(subprocess.Popen(*args, **kwargs))
        return processes[-1]

    yield popen
    for process in processes:
        if process.poll() is None:
            process.kill()
            process.communicate()


@pytest.fixture
def broken_model(tmp_path) -> Path:
    """A model folder that cannot load: an error about it means the model was loaded before the output was checked."""
    folder = tmp_path / "broken-model"
    folder.mkdir()
    (folder / "config.json").write_text("{ not json")
    return folder


# ---------------------------------------------------------------------------------------------------- the helper


def test_writing_publishes_only_a_complete_file(tmp_path):
    out = tmp_path / "out.txt"
    out.write_text("old")
    with pytest.raises(RuntimeError), writing(str(out), "score", overwrite=True) as temp:
        Path(temp).write_text("half")
        raise RuntimeError("the input went bad")
    assert out.read_text() == "old" and os.listdir(tmp_path) == ["out.txt"]
    with writing(str(out), "score", overwrite=True) as temp:
        assert Path(temp).parent == tmp_path and Path(temp).name.startswith(".out.txt.score-partial-")
        Path(temp).write_text("new")
    assert out.read_text() == "new" and os.listdir(tmp_path) == ["out.txt"]


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="signals need the main thread")
def test_writing_turns_sigterm_into_an_unwinding_exception(tmp_path):
    out = tmp_path / "out.txt"
    handler = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Terminated), writing(str(out), "score", overwrite=False) as temp:
        Path(temp).write_text("half")
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(30)  # interrupted by the signal
    assert os.listdir(tmp_path) == []  # neither the partial file nor the lock
    assert signal.getsignal(signal.SIGTERM) is handler


def test_stale_partials_of_dead_runs_go_and_nothing_else(tmp_path):
    dead, alive = _dead_pid(), os.getppid()
    output = tmp_path / "v.txt"
    stale = [
        f".v.txt.export-vectors-partial-{dead}.tmp",
        f"..v.txt.export-vectors-partial-{dead}.tmp.export-{dead}.tmp",  # the library's own name beside it
        f".v.txt.similar-partial-{dead}.tmp.png",
    ]
    kept = [
        f".v.txt.export-vectors-partial-{alive}.tmp",
        f".w.txt.export-vectors-partial-{dead}.tmp",
        f".v.txt.export-vectors-partial-{dead}.tmp.bak",
        f".v.txt.partial-{dead}.tmp",
        "v.txt",
    ]
    for name in stale + kept:
        (tmp_path / name).write_text("x")
    removed = remove_stale_partials(str(output), "export-vectors") + remove_stale_partials(
        str(output), "similar", suffix=".png"
    )
    assert sorted(Path(p).name for p in removed) == sorted(stale)
    assert sorted(os.listdir(tmp_path)) == sorted(kept)


# ---------------------------------------------------------------------------------------------------- elmo score


def _score(*args) -> int:
    return cli.main(["score", "--model", "demo", "--disable_tqdm", *map(str, args)])


def test_score_never_writes_over_its_input(tmp_path, capsys):
    """Before: ``elmo score --model demo in.txt -o in.txt`` exited 0 and left in.txt empty. Also through a hard or a
    symbolic link, and with ``--overwrite``."""
    text = tmp_path / "in.txt"
    text.write_text("the cat sat .\n")
    os.link(text, tmp_path / "hard.txt")
    (tmp_path / "soft.txt").symlink_to(text)
    for target in ("in.txt", "hard.txt", "soft.txt"):
        for extra in ([], ["--overwrite"]):
            assert _score(text, "-o", tmp_path / target, *extra) == 1
            assert "is the input" in _error_line(capsys.readouterr().err)
    assert text.read_text() == "the cat sat .\n"
    assert sorted(os.listdir(tmp_path)) == ["hard.txt", "in.txt", "soft.txt"]


def test_score_keeps_an_existing_output_until_it_has_a_complete_new_one(tmp_path, capsys):
    """Before: the results file was emptied before anything was read, even when the run then failed."""
    results = tmp_path / "results.jsonl"
    results.write_text("precious\n")
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes(b"caf\xe9 au lait .\n")
    assert _score(latin1, "-o", results, "--overwrite") == 1
    assert "is not UTF-8 text" in _error_line(capsys.readouterr().err)
    text = tmp_path / "in.txt"
    text.write_text("the cat sat .\n")
    assert _score(text, "-o", results) == 1  # no --overwrite: refused before the model loads
    assert _error_line(capsys.readouterr().err) == f"error: {results} exists; pass --overwrite to replace it\n"
    assert results.read_text() == "precious\n"
    assert _score(text, "-o", results, "--overwrite") == 0
    assert json.loads(results.read_text())["tokens"] == ["the", "cat", "sat", "."]
    assert sorted(os.listdir(tmp_path)) == ["in.txt", "latin1.txt", "results.jsonl"]


def test_score_reads_a_pipe(tmp_path):
    """``elmo score <(zcat x.gz)``: before, "underlying stream is not seekable" (the input was read twice)."""
    lines = "the cat sat .\na dog ran .\n"
    (tmp_path / "in.txt").write_text(lines)
    assert _score(tmp_path / "in.txt", "-o", tmp_path / "from-file.jsonl") == 0
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)

    def feed() -> None:
        with open(fifo, "w") as f:  # blocks until the command opens the pipe
            f.write(lines)

    threading.Thread(target=feed, daemon=True).start()
    assert _score(fifo, "-o", tmp_path / "from-pipe.jsonl") == 0
    from_pipe = [json.loads(line) for line in (tmp_path / "from-pipe.jsonl").read_text().splitlines()]
    assert from_pipe == [json.loads(line) for line in (tmp_path / "from-file.jsonl").read_text().splitlines()]
    assert len(from_pipe) == 2


def test_score_sigterm_leaves_no_partial_output(tmp_path, start):
    """stdin stays open, so the command is surely still running when SIGTERM comes."""
    out = tmp_path / "out.jsonl"
    run = start(_elmo("score", "--model", "demo", "--disable_tqdm", "-", "-o", out), env=ENV, stdin=subprocess.PIPE,
                stderr=subprocess.PIPE, text=True)  # fmt: skip
    run.stdin.write("the cat sat .\n" * 5)
    run.stdin.flush()
    _wait_for(tmp_path, run, ".score-partial-")
    run.send_signal(signal.SIGTERM)
    _, err = run.communicate(timeout=120)
    assert (run.returncode, err) == (128 + signal.SIGTERM, "terminated\n")
    assert os.listdir(tmp_path) == []


# ---------------------------------------------------------------------------------------------------- export-vectors


def _vocab(path: Path, n: int) -> Path:
    path.write_text("".join(f"w{i}\n" for i in range(n)), encoding="utf-8")
    return path


def test_export_vectors_never_writes_over_its_vocabulary(tiny_dir, tmp_path, capsys):
    vocab = _vocab(tmp_path / "vocab.txt", 3)
    argv = ["export-vectors", "--model", str(tiny_dir), "--vocab_file", str(vocab), "--disable_tqdm"]
    assert cli.main([*argv, "--output_file", str(vocab), "--overwrite"]) == 1
    assert "is the input" in _error_line(capsys.readouterr().err)
    assert vocab.read_text() == "w0\nw1\nw2\n" and os.listdir(tmp_path) == ["vocab.txt"]


def test_export_vectors_removes_what_killed_runs_left(tiny_dir, tmp_path):
    """SIGKILL cannot be handled: the next run to the same output deletes the files of the dead run (before, the
    library's ``.OUT.export-PID.tmp`` stayed forever)."""
    dead = _dead_pid()
    left = [tmp_path / f".v.txt.export-vectors-partial-{dead}.tmp",
            tmp_path / f"..v.txt.export-vectors-partial-{dead}.tmp.export-{dead}.tmp"]  # fmt: skip
    for path in left:
        path.write_text("x")
    vocab = _vocab(tmp_path / "vocab.txt", 3)
    argv = ["export-vectors", "--model", str(tiny_dir), "--vocab_file", str(vocab), "--disable_tqdm"]
    assert cli.main([*argv, "--output_file", str(tmp_path / "v.txt")]) == 0
    assert sorted(os.listdir(tmp_path)) == ["v.txt", "vocab.txt"]


@pytest.mark.slow  # measured over 30 s on a busy 2-core machine (issue 44 F1)
def test_export_vectors_second_run_is_refused_and_sigterm_cleans_up(tiny_dir, tmp_path, start):
    """Before: two runs to one file both exited 0 ("Wrote N vectors"), the file held one of them; and a killed run
    left its temporary file forever."""
    big, small = _vocab(tmp_path / "big.txt", 1_000_000), _vocab(tmp_path / "small.txt", 3)
    out = tmp_path / "v.txt"
    common = ["export-vectors", "--model", tiny_dir, "--device", "cpu", "--disable_tqdm", "--output_file", out]
    first = start(_elmo(*common, "--vocab_file", big, "--batch_size", "16"), env=ENV, stderr=subprocess.PIPE,
                  text=True)  # fmt: skip
    _wait_for(tmp_path, first, ".export-")  # writing: the library's temporary file is there (the lock is earlier)
    second = subprocess.run(_elmo(*common, "--vocab_file", small), env=ENV, capture_output=True, text=True,
                            timeout=300)  # fmt: skip
    assert second.returncode == 1, second.stderr
    assert "being written by another `elmo export-vectors`" in _error_line(second.stderr)
    first.send_signal(signal.SIGTERM)
    _, err = first.communicate(timeout=120)
    assert (first.returncode, err) == (128 + signal.SIGTERM, "terminated\n")
    assert sorted(os.listdir(tmp_path)) == ["big.txt", "small.txt"]


@pytest.mark.slow  # measured over 30 s on a busy 2-core machine (issue 44 F1)
def test_export_vectors_never_replaces_a_file_that_appeared_meanwhile(tiny_dir, tmp_path, start):
    vocab = _vocab(tmp_path / "vocab.txt", 20_000)
    out = tmp_path / "v.txt"
    run = start(_elmo("export-vectors", "--model", tiny_dir, "--device", "cpu", "--disable_tqdm", "--vocab_file",
                      vocab, "--output_file", out, "--batch_size", "16"), env=ENV, stderr=subprocess.PIPE,
                text=True)  # fmt: skip
    _wait_for(tmp_path, run, ".export-")
    out.write_text("someone else's file")
    _, err = run.communicate(timeout=600)
    assert run.returncode == 1 and "created by another program" in _error_line(err)
    assert out.read_text() == "someone else's file"
    assert sorted(os.listdir(tmp_path)) == ["v.txt", "vocab.txt"]


# ---------------------------------------------------------------------------------------------------- similar --plot


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("x.foo", ".foo is not an image format; use one of"),
        ("heatmap", "has no extension, which names the image format: use one of"),
        ("folder", "is a folder"),
        ("/dev/full", "has no extension"),  # a device is written through (issue 44 M7), but its format is unknown
    ],
)
def test_similar_plot_refuses_files_it_cannot_write_before_the_model_loads(broken_model, tmp_path, capsys, name,
                                                                           message):  # fmt: skip
    """Before: a traceback for each (for x.foo and a name without extension naming a "partial" format)."""
    pytest.importorskip("matplotlib")
    (tmp_path / "folder").mkdir()
    plot = name if name.startswith("/") else str(tmp_path / name)
    assert cli.main(["similar", "--model", str(broken_model), "--plot", plot]) == 1
    err = _error_line(capsys.readouterr().err)
    assert message in err and "could not load" not in err
    if "use one of" in message:
        assert "png" in err and "svg" in err and "pdf" in err


def test_similar_plot_replaces_a_file_only_with_overwrite(broken_model, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    plot = tmp_path / "heat.png"
    plot.write_bytes(b"an older plot")
    assert cli.main(["similar", "--model", str(broken_model), "--plot", str(plot)]) == 1
    assert _error_line(capsys.readouterr().err) == f"error: {plot} exists; pass --overwrite to replace it\n"
    assert plot.read_bytes() == b"an older plot"
    assert cli.main(["similar", "--device", "cpu", "--plot", str(plot), "--overwrite"]) == 0
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(os.listdir(tmp_path)) == ["broken-model", "heat.png"]  # no partial file, no lock


# ---------------------------------------------------------------------------------------------------- elmo embed


def test_embed_never_writes_over_its_input(tiny_dir, tmp_path, capsys):
    text = tmp_path / "in.txt"
    text.write_text("Hello world .\n")
    assert cli.main(["embed", str(text), str(text), "--overwrite", "--model", str(tiny_dir)]) == 1
    assert "is the input" in _error_line(capsys.readouterr().err)
    assert text.read_text() == "Hello world .\n" and os.listdir(tmp_path) == ["in.txt"]


# ---------------------------------------------------------------------------------------------------- quiet loading


@pytest.fixture(scope="module")
def lm_folder(tmp_path_factory) -> Path:
    """A biLM with its softmax (ElmoForPreTraining), converted from the small TensorFlow fixture."""
    out = tmp_path_factory.mktemp("lm") / "model"
    convert(LM_FIXTURE / "options.json", LM_FIXTURE / "lm_weights.hdf5", out, vocab_file=LM_FIXTURE / "vocab.txt",
            softmax_weight_file=LM_FIXTURE / "softmax_weights.hdf5", progress=False)  # fmt: skip
    return out


@pytest.mark.slow  # measured over 30 s on a busy 2-core machine (issue 44 F1)
def test_commands_load_models_without_transformers_bars(lm_folder, tmp_path):
    """Before: ``elmo score --model FOLDER`` drew transformers' "Loading weights: 27/27" bar. The commands' own
    bars stay; ``TRANSFORMERS_VERBOSITY=info`` (transformers' variable) shows the loading bars again."""
    text = tmp_path / "in.txt"
    text.write_text("the cat sat .\n")
    quiet = {name: value for name, value in ENV.items() if name != "TRANSFORMERS_VERBOSITY"}
    runs = {
        "score": (_elmo("score", "--model", lm_folder, text), quiet),
        "similar": (_elmo("similar", "--model", lm_folder, "--device", "cpu", "--word", "cat", "the cat sat .",
                          "a cat ran ."), quiet),  # fmt: skip
        "verbose": (_elmo("score", "--model", lm_folder, "--disable_tqdm", text), {**quiet,
                                                                                   "TRANSFORMERS_VERBOSITY": "info"}),
    }  # fmt: skip
    for name, (command, env) in runs.items():
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, (name, done.stderr[-3000:])
        assert ("Loading weights" in done.stderr) == (name == "verbose"), (name, done.stderr[-3000:])
        if name != "verbose":
            assert "LOAD REPORT" not in done.stderr and "UNEXPECTED" not in done.stderr, done.stderr[-3000:]
        if name == "score":
            assert "Scoring" in done.stderr  # the command's own bar
