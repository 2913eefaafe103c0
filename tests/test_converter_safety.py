"""Safety of the converter (issue 13): hostile HDF5 files, inputs inside the output, concurrent runs, kills,
full disks and unreadable inputs.

Every model is the small random original model of ``tests/original_format.py``; hostile files are made from it
with h5py, one storage kind at a time. Processes are real (``convert_original_weights.py``), and so are the
signals, the lock and the file-size limit; a kill at an exact point uses the converter's ``ELMO_CONVERT_FAULTS``
hook, which SIGKILLs the process there.
"""

from __future__ import annotations

import ctypes
import fcntl
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
import torch
from original_format import lstm_prefix, original_options, original_shapes, write_original_model
from safetensors.torch import load_file

from modeling_elmo import ElmoModel
from modeling_elmo.commands.convert import main
from modeling_elmo.hub.convert import ConversionError, convert, remove_stale_staging

REPO_ROOT = Path(__file__).resolve().parent.parent
SMALL = {"lstm_dim": 32, "projection_dim": 8, "filters": [[1, 4], [2, 6], [3, 8]], "char_dim": 4, "n_highway": 1}
B_PROJ = "CNN_proj/b_proj"  # shape (8,): small enough to fake from any source
W_CARRY = "CNN_high_0/W_carry"  # shape (18, 18)
SECRET = b"password=hunter2 and more secret"  # 32 bytes: exactly the 8 float32 values of B_PROJ


@pytest.fixture
def small(tmp_path: Path) -> tuple[Path, Path]:
    """``(options_path, weight_path)`` of a small random original model."""
    return write_original_model(tmp_path / "original", **SMALL)


def hidden_leftovers(parent: Path, name: str = "out") -> list[str]:
    """What a conversion to ``parent/name`` may leave next to it: staging folders, old folders, lock files."""
    return sorted(p.name for p in parent.iterdir() if p.name.startswith(f".{name}."))


def refused(options: Path, weights: Path, out: Path) -> str:
    """Convert, which must raise ``ConversionError`` and write nothing; the message."""
    with pytest.raises(ConversionError) as info:
        convert(options, weights, out, progress=False)
    assert not out.exists() and hidden_leftovers(out.parent, out.name) == []
    return str(info.value)


def replace_dataset(weights: Path, name: str, **create) -> None:
    """Replace dataset ``name`` of the file by one made with ``create_dataset(name, **create)``."""
    with h5py.File(weights, "a") as handle:
        del handle[name]
        handle.create_dataset(name, **create)


def cli(*args) -> list[str]:
    return [sys.executable, str(REPO_ROOT / "convert_original_weights.py"), *map(str, args)]


def run_cli(*args, env: dict | None = None, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        cli(*args),
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
        **kwargs,
    )


def one_error_line(result: subprocess.CompletedProcess) -> str:
    """The process failed with exit 1 and a single ``error: ...`` line on stderr (progress bars aside)."""
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip() and "%|" not in line]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def main_error(capsys, *args) -> str:
    """Run ``main()`` in process, which must return 1 after one ``error: ...`` line on stderr; that line."""
    assert main([*map(str, args), "--disable_tqdm"]) == 1
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


def folder_bytes(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


# ---------------------------------------------------------------------------------------------
# 1, 7. Hostile HDF5 files: every storage kind h5py writes, other than a plain float array in the file
# ---------------------------------------------------------------------------------------------


def test_external_storage_is_refused(small, tmp_path: Path):
    options, weights = small
    secret = tmp_path / "secret.txt"
    secret.write_bytes(SECRET)
    replace_dataset(weights, B_PROJ, shape=(8,), dtype="<f4", external=[(str(secret), 0, len(SECRET))])
    message = refused(options, weights, tmp_path / "out")
    assert f"dataset '{B_PROJ}' is stored in an external file" in message


def test_external_link_is_refused(small, tmp_path: Path):
    options, weights = small
    other = tmp_path / "other.hdf5"
    with h5py.File(other, "w") as handle:
        handle.create_dataset("data", data=np.frombuffer(SECRET, "<f4"))
    with h5py.File(weights, "a") as handle:
        del handle[B_PROJ]
        handle[B_PROJ] = h5py.ExternalLink(str(other), "/data")
    message = refused(options, weights, tmp_path / "out")
    assert f"'{B_PROJ}' is an external link (to file '{other}')" in message


def test_soft_link_is_refused(small, tmp_path: Path):
    options, weights = small
    with h5py.File(weights, "a") as handle:
        del handle[B_PROJ]
        handle[B_PROJ] = h5py.SoftLink("/" + lstm_prefix(0, 0) + "/B")  # any path: links are not followed
    message = refused(options, weights, tmp_path / "out")
    assert f"'{B_PROJ}' is a soft link (to '/{lstm_prefix(0, 0)}/B')" in message


def test_soft_link_to_a_group_is_refused(small, tmp_path: Path):
    """A link on the way to a dataset (here the group ``CNN_proj``) is refused like one to the dataset."""
    options, weights = small
    with h5py.File(weights, "a") as handle:
        handle.move("CNN_proj", "elsewhere")
        handle["CNN_proj"] = h5py.SoftLink("/elsewhere")
    message = refused(options, weights, tmp_path / "out")
    assert "'CNN_proj' is a soft link (to '/elsewhere')" in message


def test_virtual_dataset_is_refused(small, tmp_path: Path):
    options, weights = small
    source = tmp_path / "source.hdf5"
    with h5py.File(source, "w") as handle:
        handle.create_dataset("data", data=np.frombuffer(SECRET, "<f4"))
    layout = h5py.VirtualLayout(shape=(8,), dtype="<f4")
    layout[:] = h5py.VirtualSource(str(source), "data", shape=(8,))
    with h5py.File(weights, "a") as handle:
        del handle[B_PROJ]
        handle.create_virtual_dataset(B_PROJ, layout)
    message = refused(options, weights, tmp_path / "out")
    assert f"dataset '{B_PROJ}' is a virtual dataset" in message


@pytest.mark.parametrize(
    "kind, data",
    [
        ("compound", np.zeros(8, dtype=[("re", "<f4"), ("im", "<f4")])),
        ("string", np.array([b"abcd"] * 8)),
        ("string", np.array(["abcd"] * 8, dtype=h5py.string_dtype())),
        ("complex", np.full(8, 1 + 2j, np.complex64)),
        ("integer", np.arange(8, dtype=np.int32)),
        ("integer", np.arange(8, dtype=np.uint8)),
        ("bool", np.ones(8, dtype=bool)),
    ],
    ids=["compound", "bytes", "vlen-string", "complex", "int32", "uint8", "bool"],
)
def test_non_float_dataset_is_refused(small, tmp_path: Path, kind: str, data: np.ndarray):
    options, weights = small
    replace_dataset(weights, B_PROJ, data=data)
    message = refused(options, weights, tmp_path / "out")
    assert f"dataset '{B_PROJ}' holds {kind} values" in message and "not floating-point" in message


def test_empty_dataspace_is_refused(small, tmp_path: Path):
    options, weights = small
    replace_dataset(weights, B_PROJ, data=h5py.Empty("<f4"))
    message = refused(options, weights, tmp_path / "out")
    assert f"dataset '{B_PROJ}' holds no array" in message


def test_unwritten_contiguous_dataset_is_refused(small, tmp_path: Path):
    options, weights = small
    replace_dataset(weights, W_CARRY, shape=(18, 18), dtype="<f4")  # declared, never written
    message = refused(options, weights, tmp_path / "out")
    assert f"dataset '{W_CARRY}' is not fully written: 0 of its 1296 bytes are stored" in message


def test_chunked_dataset_with_missing_chunks_is_refused(small, tmp_path: Path):
    options, weights = small
    with h5py.File(weights, "a") as handle:
        values = handle[W_CARRY][()]
        del handle[W_CARRY]
        dataset = handle.create_dataset(W_CARRY, shape=(18, 18), dtype="<f4", chunks=(9, 9))
        dataset[:9] = values[:9]  # 2 of the 4 chunks
    message = refused(options, weights, tmp_path / "out")
    assert f"dataset '{W_CARRY}' is not fully written: 2 of its 4 chunks are stored" in message


@pytest.mark.parametrize("compression", ["gzip", "lzf", None])
def test_chunked_and_compressed_datasets_convert(small, tmp_path: Path, compression):
    """Compressed chunks store fewer bytes than they hold: a complete chunked file converts, values unchanged."""
    options, weights = small
    with h5py.File(weights, "a") as handle:
        arrays = {}
        handle.visititems(
            lambda name, item: arrays.update({name: item[()]}) if isinstance(item, h5py.Dataset) else None
        )
        arrays[W_CARRY] = np.round(arrays[W_CARRY], 1)  # compressible
        for name, values in arrays.items():
            del handle[name]
            chunks = tuple(max(1, n // 2) for n in values.shape)
            handle.create_dataset(name, data=values, chunks=chunks, compression=compression, shuffle=True)
        if compression is not None:
            assert handle[W_CARRY].id.get_storage_size() < handle[W_CARRY].nbytes
    out = convert(options, weights, tmp_path / "out", progress=False)
    state = load_file(out / "model.safetensors")
    torch.testing.assert_close(state["char_cnn.highways.0.carry.weight"], torch.from_numpy(arrays[W_CARRY].T))


@pytest.mark.slow  # issue 51: a fresh interpreter
def test_unwritten_weights_are_refused_before_anything_is_allocated(tmp_path: Path):
    """A ~30 KB file declaring the original model's 374 MB of weights, none written: refused on the metadata,
    before reading (the old converter allocated them all, then wrote a model of zeros)."""
    original = {"lstm_dim": 4096, "projection_dim": 512, "n_layers": 2, "char_dim": 16, "n_highway": 2,
                "filters": [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]]}  # fmt: skip
    options, weights = tmp_path / "options.json", tmp_path / "weights.hdf5"
    options.write_text(json.dumps(original_options(**original)))
    with h5py.File(weights, "w") as handle:
        for name, shape, _ in original_shapes(**original):
            handle.create_dataset(name, shape=shape, dtype="<f4")
    assert weights.stat().st_size < 100_000
    script = textwrap.dedent(
        f"""
        import resource
        from modeling_elmo.hub.convert import ConversionError, convert
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        try:
            convert({str(options)!r}, {str(weights)!r}, {str(tmp_path / "out")!r}, progress=False)
        except ConversionError as err:
            print("refused:", str(err)[:300])
        print("grew_mb", (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024)
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=REPO_ROOT)
    assert result.returncode == 0, result.stderr
    assert "refused:" in result.stdout and "is not fully written" in result.stdout
    grew_mb = float(result.stdout.split("grew_mb")[1])
    assert grew_mb < 100, f"the refusal allocated {grew_mb:.0f} MB"
    assert not (tmp_path / "out").exists()


def test_hard_link_loop_and_error_length(small, tmp_path: Path):
    """A group hard-linked into itself is walked once; thousands of bad datasets give one short error."""
    options, weights = small
    with h5py.File(weights, "a") as handle:
        group = handle.create_group("junk")
        group["loop"] = group
        for i in range(2000):
            group.create_dataset(f"x{i}" * 40, data=np.zeros(1, np.float32))
    message = refused(options, weights, tmp_path / "out")
    assert "datasets that the options do not use" in message and "and 1990 more" in message
    assert len(message) < 3000


# ---------------------------------------------------------------------------------------------
# 11. Every dataset of the file must be used
# ---------------------------------------------------------------------------------------------


def test_fewer_layers_in_options_than_in_file_is_refused(small, tmp_path: Path):
    options, weights = small  # 2 layers
    data = json.loads(options.read_text())
    data["lstm"]["n_layers"] = 1
    options.write_text(json.dumps(data))
    message = refused(options, weights, tmp_path / "out")
    assert "datasets that the options do not use" in message
    for direction in (0, 1):
        for name in ("B", "W_0", "W_P_0"):
            assert f"'{lstm_prefix(direction, 1)}/{name}'" in message
    assert f"'{lstm_prefix(0, 0)}/B'" not in message


def test_fewer_highways_or_filters_in_options_is_refused(small, tmp_path: Path):
    options, weights = small  # 1 highway, 3 filters
    data = json.loads(options.read_text())
    data["char_cnn"]["n_highway"] = 0
    options.write_text(json.dumps(data))
    message = refused(options, weights, tmp_path / "out")
    assert "'CNN_high_0/W_carry'" in message and "'CNN_high_0/b_transform'" in message
    # One filter fewer: its datasets are unused (and the projection's shape disagrees).
    data["char_cnn"].update(n_highway=1, filters=[[1, 4], [2, 6]])
    options.write_text(json.dumps(data))
    message = refused(options, weights, tmp_path / "out")
    assert "'CNN/W_cnn_2'" in message and "'CNN/b_cnn_2'" in message


def test_an_extra_dataset_is_refused(small, tmp_path: Path):
    options, weights = small
    with h5py.File(weights, "a") as handle:
        handle.create_dataset("softmax/W", data=np.zeros((3, 8), np.float32))
    message = refused(options, weights, tmp_path / "out")
    assert "'softmax/W'" in message


# ---------------------------------------------------------------------------------------------
# 4. An output folder that is, or holds, an input
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["inputs_folder", "its_parent", "symlink_to_it", "input_symlinked_from_out"])
def test_output_holding_an_input_is_refused(small, tmp_path: Path, where: str):
    options, weights = small
    inputs = options.parent
    if where == "inputs_folder":
        out = inputs
    elif where == "its_parent":
        out = tmp_path
    elif where == "symlink_to_it":
        out = tmp_path / "link"
        out.symlink_to(inputs)
    else:  # the options given through a link elsewhere, the file itself inside the output
        out = inputs
        linked = tmp_path / "elsewhere.json"
        linked.symlink_to(options)
        options = linked
    before = folder_bytes(inputs)
    with pytest.raises(ConversionError, match="holds the (options|weight) file"):
        convert(options, weights, out, overwrite=True, progress=False)
    assert folder_bytes(inputs) == before


def test_cli_overwrite_into_the_inputs_folder_keeps_them(small, tmp_path: Path, capsys):
    options, weights = small
    before = folder_bytes(options.parent)
    args = ["--options_file", options, "--weight_file", weights, "--output_dir", options.parent, "--overwrite"]
    assert "holds the options file" in main_error(capsys, *args)
    assert folder_bytes(options.parent) == before


# ---------------------------------------------------------------------------------------------
# 5. Two conversions to the same output
# ---------------------------------------------------------------------------------------------


def test_conversion_while_another_holds_the_lock_fails_clearly(small, tmp_path: Path, capsys):
    # main() in this process (issue 51: no fresh interpreter): a flock belongs to an open file, so the converter's
    # own open of the lock file conflicts with this one as another process's would.
    options, weights = small
    out = tmp_path / "out"
    with open(tmp_path / ".out.lock", "w") as lock:  # what a running conversion to `out` holds
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        message = main_error(capsys, "--options_file", options, "--weight_file", weights, "--output_dir", out)
    assert "another conversion is writing" in message
    assert not out.exists() and hidden_leftovers(tmp_path) == [".out.lock"]  # the test's own lock file


# Two converters started at once: each imports the package (the slow part, seconds apart on a busy machine),
# says it is ready, and runs the command's main() only once the test says go, so both check the output folder
# within milliseconds of each other, well inside the other's conversion.
RACER = """
import os, sys, time
from convert_original_weights import main  # the checkout's entry, which imports the package quietly
open(sys.argv[1] + str(os.getpid()), "w").close()
while not os.path.exists(sys.argv[2]):
    time.sleep(0.001)
sys.exit(main(sys.argv[3:]))
"""


@pytest.mark.slow  # measured over 30 s on a busy 2-core machine (issue 44 F1)
def test_two_concurrent_conversions_one_succeeds(small, tmp_path: Path):
    """Two real processes started together: one exit 0, one exit 1 with a clear error, and a complete output."""
    options, weights = small
    out = tmp_path / "out"
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    args = ["--options_file", options, "--weight_file", weights, "--output_dir", out, "--disable_tqdm"]
    command = [sys.executable, "-c", RACER, f"{barrier}/ready-", f"{barrier}/go", *map(str, args)]
    processes = [
        subprocess.Popen(command, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    try:
        deadline = time.monotonic() + 240
        while len(list(barrier.glob("ready-*"))) < 2 and time.monotonic() < deadline:
            assert all(p.poll() is None for p in processes), "a converter ended before the start"
            time.sleep(0.01)
        (barrier / "go").touch()
        outputs = [p.communicate(timeout=300) for p in processes]
        results = [
            subprocess.CompletedProcess(p.args, p.returncode, *o) for p, o in zip(processes, outputs, strict=True)
        ]
    finally:
        for p in processes:
            p.kill()
            p.wait()
    assert sorted(r.returncode for r in results) == [0, 1], [r.stderr for r in results]
    for r in results:
        if r.returncode == 1:
            message = one_error_line(r)
            assert "another conversion is writing" in message or "exists and is not empty" in message
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= {
        p.name for p in out.iterdir()
    }
    ElmoModel.from_pretrained(out)
    assert hidden_leftovers(tmp_path) == []


# ---------------------------------------------------------------------------------------------
# 6. SIGKILL in the middle of --overwrite
# ---------------------------------------------------------------------------------------------


def old_output(options: Path, weights: Path, out: Path) -> dict[str, bytes]:
    """A previous conversion in ``out``, marked by an extra file; its bytes."""
    convert(options, weights, out, progress=False)
    (out / "old.txt").write_text("the previous conversion")
    return folder_bytes(out)


def killed_overwrite(options: Path, weights: Path, out: Path, faults: str) -> None:
    args = ["--options_file", options, "--weight_file", weights, "--output_dir", out, "--overwrite", "--disable_tqdm"]
    result = run_cli(*args, env={"ELMO_CONVERT_FAULTS": faults})
    assert result.returncode == -signal.SIGKILL, result.stderr


def test_sigkill_right_after_the_swap_leaves_the_new_output(small, tmp_path: Path):
    """Linux swaps the two folders in one step: a kill just after it leaves the new, complete output; the old
    folder, left in the marked staging folder, is removed by the next conversion."""
    from modeling_elmo.hub.convert import _exchange

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    if not _exchange(tmp_path / "a", tmp_path / "b"):
        pytest.skip("this file system cannot exchange two folders atomically (the two-rename fallback is tested)")
    options, weights = small
    out = tmp_path / "out"
    before = old_output(options, weights, out)
    killed_overwrite(options, weights, out, "kill-after-swap")
    assert not (out / "old.txt").exists() and (out / "model.safetensors").is_file()
    ElmoModel.from_pretrained(out)
    assert len([name for name in hidden_leftovers(tmp_path) if name.startswith(".out.partial-")]) == 1
    assert remove_stale_staging(out) and hidden_leftovers(tmp_path) in ([], [".out.lock"])
    assert folder_bytes(out).keys() == before.keys() - {"old.txt"}


@pytest.mark.slow  # issue 51: fresh interpreters
def test_sigkill_between_the_two_renames_is_undone_by_the_next_run(small, tmp_path: Path):
    """Without the atomic swap (other systems), a kill between the two renames leaves the old folder in the
    marked staging folder; the next conversion puts it back before anything else, and nothing stays hidden."""
    options, weights = small
    out = tmp_path / "out"
    before = old_output(options, weights, out)
    killed_overwrite(options, weights, out, "no-exchange,kill-between-renames")
    assert not out.exists()
    assert len(remove_stale_staging(out)) == 1  # what the next conversion to `out` does first
    assert folder_bytes(out) == before
    assert hidden_leftovers(tmp_path) in ([], [".out.lock"])  # a killed process's lock file: reused, not stale


@pytest.mark.slow  # issue 51: fresh interpreters
def test_next_conversion_restores_then_overwrites(small, tmp_path: Path):
    options, weights = small
    out = tmp_path / "out"
    old_output(options, weights, out)
    killed_overwrite(options, weights, out, "no-exchange,kill-between-renames")
    assert not out.exists()
    convert(options, weights, out, overwrite=True, progress=False)
    assert not (out / "old.txt").exists() and (out / "model.safetensors").is_file()
    assert hidden_leftovers(tmp_path) == []


# ---------------------------------------------------------------------------------------------
# 7. The stale-staging cleanup deletes only marked staging folders
# ---------------------------------------------------------------------------------------------

DEAD_PID = 2**22 + 12345  # above the default pid_max: no such process


def test_user_folder_with_a_staging_name_is_kept(small, tmp_path: Path):
    options, weights = small
    mine = tmp_path / f".out.partial-{DEAD_PID}-mine"
    mine.mkdir()
    (mine / "thesis.tex").write_text("years of work")
    convert(options, weights, tmp_path / "out", progress=False)
    assert (mine / "thesis.tex").read_text() == "years of work"
    assert remove_stale_staging(tmp_path / "out") == []


def test_empty_staging_folder_of_a_dead_process_is_removed(tmp_path: Path):
    """Killed between creating its staging folder and marking it: the folder is empty, and removed."""
    empty = tmp_path / f".out.partial-{DEAD_PID}-abcd"
    empty.mkdir()
    assert remove_stale_staging(tmp_path / "out") == [empty] and not empty.exists()


@pytest.mark.parametrize("written", [0, 5], ids=["empty-marker", "cut-marker"])
def test_staging_folder_killed_while_marking_is_removed(tmp_path: Path, written: int):
    """Killed while writing its marker (seen under load in CI): the folder holds only the start of the marker."""
    from modeling_elmo.hub.convert import _MARKER

    folder = tmp_path / f".out.partial-{DEAD_PID}-abcd"
    folder.mkdir()
    (folder / _MARKER).write_text((folder.name + "\n")[:written], encoding="utf-8")
    assert remove_stale_staging(tmp_path / "out") == [folder] and not folder.exists()


@pytest.mark.parametrize("content", ["not the marker", None], ids=["other-text", "other-file-too"])
def test_folder_with_a_foreign_marker_is_kept(tmp_path: Path, content: str | None):
    from modeling_elmo.hub.convert import _MARKER

    folder = tmp_path / f".out.partial-{DEAD_PID}-abcd"
    folder.mkdir()
    (folder / _MARKER).write_text(content or "", encoding="utf-8")
    if content is None:
        (folder / "notes.txt").write_text("mine")
    assert remove_stale_staging(tmp_path / "out") == [] and (folder / _MARKER).exists()


def test_marked_staging_folder_of_a_dead_process_is_removed(tmp_path: Path):
    from modeling_elmo.hub.convert import _make_staging

    out = tmp_path / "out"
    child = os.fork()  # a process that makes a staging folder and ends
    if child == 0:
        try:
            (_make_staging(out) / "model").mkdir()
        finally:
            os._exit(0)
    os.waitpid(child, 0)
    made = next(tmp_path.glob(f".out.partial-{child}-*"))
    live = tmp_path / f".out.partial-{os.getpid()}-live"  # this process is alive: never removed
    live.mkdir()
    assert made.is_dir() and remove_stale_staging(out) == [made]
    assert not made.exists() and live.is_dir()


# ---------------------------------------------------------------------------------------------
# 22. A full disk and bad values: one error line
# ---------------------------------------------------------------------------------------------


@pytest.mark.slow  # issue 51: a fresh interpreter each
@pytest.mark.parametrize("limit", [4096, 47_000], ids=["config-files", "safetensors"])
def test_full_disk_while_writing_gives_one_error_line(small, tmp_path: Path, limit: int):
    """A file-size limit (``RLIMIT_FSIZE``, SIGXFSZ ignored: writes fail with EFBIG like on a full disk) while
    writing over an existing output: one error line, the old output intact, nothing hidden left behind."""
    options, weights = small
    out = tmp_path / "out"
    convert(options, weights, out, progress=False)
    assert (out / "model.safetensors").stat().st_size > limit  # the limit stops the weights or earlier
    before = folder_bytes(out)

    def limit_file_size():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    args = ["--options_file", options, "--weight_file", weights, "--output_dir", out, "--overwrite", "--disable_tqdm"]
    result = run_cli(*args, preexec_fn=limit_file_size)
    message = one_error_line(result)
    assert f"could not write {out}" in message and "File too large" in message
    assert folder_bytes(out) == before
    assert hidden_leftovers(tmp_path) == []


@pytest.mark.parametrize(
    "filters, field",
    [("[[1, 4], [2, Infinity]]", "filters"), ("[[1, 4], [2, 1e400]]", "filters"), (None, "nests too deeply")],
    ids=["Infinity", "1e400", "100k-deep"],
)
def test_bad_values_in_options_give_one_error_line(small, tmp_path: Path, capsys, filters: str | None, field: str):
    """``main()`` in process (what the command runs): it returns 1 after one error line, raising nothing.
    (That the message names the field for Infinity and 1e400 is the options parser's part.)"""
    options, weights = small
    if filters is None:
        options.write_text("[" * 100_000 + "]" * 100_000)
    else:  # JSON that Python's json reads: Infinity, and 1e400 (which overflows to inf)
        data = json.loads(options.read_text())
        data["char_cnn"]["filters"] = "FILTERS"
        options.write_text(json.dumps(data).replace('"FILTERS"', filters))
    message = main_error(capsys, "--options_file", options, "--weight_file", weights, "--output_dir", tmp_path / "out")
    assert message.startswith(f"error: invalid options file {options}")
    if filters is None:
        assert field in message
    assert not (tmp_path / "out").exists() and hidden_leftovers(tmp_path) == []


# ---------------------------------------------------------------------------------------------
# 23. An unreadable input is named as such
# ---------------------------------------------------------------------------------------------


def _without_file_permission_override():
    """For a child process of root: drop CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH from the bounding set, so
    that file modes apply to it (``chmod 000`` stops its reads) as they do for any user."""
    libc = ctypes.CDLL(None, use_errno=True)
    for capability in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
        if libc.prctl(24, capability, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP) failed")


@pytest.mark.slow  # issue 51: a fresh interpreter
def test_unreadable_options_file_is_named(small, tmp_path: Path):
    """A real process (root loses its power to read any file, as a user lacks it): not "could not write OUT"."""
    options, weights = small
    options.chmod(0)
    preexec = _without_file_permission_override if os.geteuid() == 0 else None
    try:
        result = run_cli("--options_file", options, "--weight_file", weights, "--output_dir", tmp_path / "out",
                         "--disable_tqdm", preexec_fn=preexec)  # fmt: skip
    finally:
        options.chmod(0o644)
    if "prctl(PR_CAPBSET_DROP) failed" in result.stderr:
        pytest.skip("running as root without CAP_SETPCAP: cannot make a file unreadable")
    assert one_error_line(result) == f"error: cannot read options file {options}: Permission denied"
    assert not (tmp_path / "out").exists() and hidden_leftovers(tmp_path) == []


@pytest.mark.parametrize("kind", ["folder", "fifo"])
def test_options_path_that_is_not_a_file_is_named(small, tmp_path: Path, capsys, kind: str):
    _, weights = small
    options = tmp_path / "options.json"
    os.mkdir(options) if kind == "folder" else os.mkfifo(options)
    message = main_error(capsys, "--options_file", options, "--weight_file", weights, "--output_dir", tmp_path / "out")
    assert message == f"error: options file {options} is not a regular file"


@pytest.mark.parametrize("umask", [0o022, 0o027])
def test_output_folder_and_files_follow_the_umask(tmp_path, umask):
    # The folder used to be mkdtemp's 0700 and the weights transformers' 0600, whatever the user's umask. The command
    # runs in this process (issue 51: no fresh interpreter), the umask set after the package's import: a umask read
    # at import would fail here too.
    from modeling_elmo.commands.convert import main

    fixture = Path(__file__).resolve().parent / "fixtures" / "bilm-residual"
    out = tmp_path / "out"
    args = ["--options_file", str(fixture / "options.json"), "--weight_file", str(fixture / "lm_weights.hdf5")]
    previous = os.umask(umask)
    try:
        code = main([*args, "--output_dir", str(out), "--disable_tqdm"])
    finally:
        os.umask(previous)
    assert code == 0
    assert out.stat().st_mode & 0o777 == 0o777 & ~umask
    for name in ("model.safetensors", "config.json", "tokenizer.json", "README.md"):
        assert (out / name).stat().st_mode & 0o777 == 0o666 & ~umask, name


# ---------------------------------------------------------------------------------------------
# Issue 26, 4: a run without --overwrite after a killed --overwrite restores first, then refuses
# ---------------------------------------------------------------------------------------------


def plain_run(options: Path, weights: Path, out: Path) -> subprocess.CompletedProcess:
    return run_cli("--options_file", options, "--weight_file", weights, "--output_dir", out, "--disable_tqdm")


@pytest.mark.slow  # measured over 30 s on a busy 2-core machine (issue 44 F1)
def test_plain_run_after_a_kill_between_the_renames_restores_and_refuses(small, tmp_path: Path):
    """The old folder, left in the staging folder by a kill between the two renames, is put back before the
    output folder is checked: a run without --overwrite then refuses it, and replaces nothing."""
    options, weights = small
    out = tmp_path / "out"
    before = old_output(options, weights, out)
    killed_overwrite(options, weights, out, "no-exchange,kill-between-renames")
    assert not out.exists()
    message = one_error_line(plain_run(options, weights, out))
    assert "exists and is not empty (pass --overwrite to replace it)" in message
    assert "it was put back from .out.partial-" in message
    assert folder_bytes(out) == before
    assert hidden_leftovers(tmp_path) == []


@pytest.mark.slow  # measured over 30 s on a busy 2-core machine (issue 44 F1)
def test_refused_run_after_a_kill_after_the_swap_leaves_nothing_hidden(small, tmp_path: Path):
    """A kill just after the swap: the new output is complete and the previous one waits in the staging folder.
    A refused next run removes that folder (the killed run had replaced it, as asked) and says so."""
    from modeling_elmo.hub.convert import _exchange

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    if not _exchange(tmp_path / "a", tmp_path / "b"):
        pytest.skip("this file system cannot exchange two folders atomically (the two-rename fallback is tested)")
    options, weights = small
    out = tmp_path / "out"
    old_output(options, weights, out)
    killed_overwrite(options, weights, out, "kill-after-swap")
    new = folder_bytes(out)
    assert "old.txt" not in new
    message = one_error_line(plain_run(options, weights, out))
    assert "exists and is not empty" in message and "the leftovers of a killed conversion to it were removed" in message
    assert folder_bytes(out) == new
    assert hidden_leftovers(tmp_path) == []


@pytest.mark.slow  # issue 51: a fresh interpreter
def test_in_process_convert_after_a_kill_between_the_renames_refuses(small, tmp_path: Path):
    options, weights = small
    out = tmp_path / "out"
    before = old_output(options, weights, out)
    killed_overwrite(options, weights, out, "no-exchange,kill-between-renames")
    with pytest.raises(ConversionError, match="exists and is not empty"):
        convert(options, weights, out, progress=False)
    assert folder_bytes(out) == before and hidden_leftovers(tmp_path) == []


# ---------------------------------------------------------------------------------------------
# A softmax beyond the LM vocabulary's bound is refused before anything is copied
# ---------------------------------------------------------------------------------------------


def huge_softmax(path: Path, rows: int, width: int) -> Path:
    """A valid softmax HDF5 of ``rows`` x ``width`` zeros that stays small: deflated chunks of 2**20 rows, all
    allocated (filled with zeros) when the dataset is created, so that every chunk is stored and the storage check
    passes; ``softmax/b`` the same way."""
    with h5py.File(path, "w") as handle:
        group = handle.create_group("softmax")
        for name, shape, chunks in (("W", (rows, width), (1 << 20, width)), ("b", (rows,), (1 << 20,))):
            plist = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
            plist.set_chunk(chunks)
            plist.set_deflate(1)
            plist.set_fill_value(np.zeros((), "<f4"))
            plist.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
            space = h5py.h5s.create_simple(shape)
            h5py.h5d.create(group.id, name.encode(), h5py.h5t.IEEE_F32LE, space, dcpl=plist)
        assert handle["softmax/W"].id.get_num_chunks() == -(-rows // (1 << 20))
    return path


def test_a_softmax_beyond_the_vocabulary_bound_is_refused_before_any_copy(small, tmp_path: Path):
    """4,194,305 rows (``lm_vocab_size``'s bound is 4,194,304): refused at once, from the file's metadata, before
    the vocabulary or the biLM is read; the converter used to copy all of ``softmax/W`` and then fail in
    ``config.save_pretrained``."""
    from softmax_format import vocabulary, write_vocab

    options, weights = small
    softmax = huge_softmax(tmp_path / "softmax.hdf5", (1 << 22) + 1, SMALL["projection_dim"])
    vocab = write_vocab(tmp_path / "vocab.txt", vocabulary(50))
    out = tmp_path / "out"
    start = time.monotonic()
    with pytest.raises(ConversionError) as info:
        convert(options, weights, out, vocab_file=vocab, softmax_weight_file=softmax, progress=False)
    elapsed = time.monotonic() - start
    message = str(info.value)
    assert f"softmax/W of {softmax} has 4194305 rows, more than the 4194304 words" in message, message
    assert elapsed < 5, elapsed
    assert not out.exists() and hidden_leftovers(tmp_path) == []


def test_lm_config_refuses_what_the_config_would_refuse_on_save(small):
    """``lm_config`` validates the config it returns: a vocabulary over the bound, or one whose softmax makes the
    model larger than ``MAX_PARAMETERS``, is a ``ConversionError`` there, not a ``StrictDataclass...Error`` from
    ``save_pretrained`` after the copy."""
    from modeling_elmo import ElmoConfig
    from modeling_elmo.hub.convert_softmax import SoftmaxInfo, lm_config

    options, _ = small
    config = ElmoConfig.from_options(options)
    info = SoftmaxInfo(vocab={}, vocab_size=(1 << 22) + 1, hidden_size=8, bos_id=0, eos_id=1, unk_id=2)
    with pytest.raises(ConversionError, match="lm_vocab_size must be at most 4194304, got 4194305"):
        lm_config(config, info)
    big = ElmoConfig.from_options(options)
    big.projection_dim = 512
    info = SoftmaxInfo(vocab={}, vocab_size=2_500_000, hidden_size=512, bos_id=0, eos_id=1, unk_id=2)
    with pytest.raises(ConversionError, match="parameters, more than 1e\\+09"):
        lm_config(big, info)
    fine = SoftmaxInfo(vocab={}, vocab_size=50, hidden_size=8, bos_id=0, eos_id=1, unk_id=2)
    assert lm_config(ElmoConfig.from_options(options), fine).lm_vocab_size == 50
