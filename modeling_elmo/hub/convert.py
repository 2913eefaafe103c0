"""Convert an original ELMo model (AllenNLP/bilm-tf ``options.json`` + HDF5 weights) to a Hugging Face folder.

:func:`convert` writes the folder; :func:`read_original_weights` reads the HDF5 weights alone, as an
``ElmoModel`` state dict (``compat/allennlp.py`` loads the original files in memory with it). The command is
``elmo convert`` (``modeling_elmo.commands.convert``). The folder holds ``config.json``,
``model.safetensors`` (float32) and the tokenizer files, and loads with ``ElmoModel.from_pretrained(OUT)``
and ``ElmoTokenizer.from_pretrained(OUT)`` (or the Auto classes once ``modeling_elmo`` is imported).

The folder is written next to ``OUT`` inside a marked staging folder (``.OUT.partial-PID-*``) and swapped into
place at the end (one atomic ``renameat2(RENAME_EXCHANGE)`` on Linux), so a failed conversion leaves nothing behind,
and a killed one never a half-written or missing ``OUT``: only the hidden staging folder, which the next conversion
to ``OUT`` removes (restoring the old ``OUT`` first where a kill fell between the two renames of the fallback), before
it checks ``OUT``: a run without ``--overwrite`` then refuses the restored folder, and never replaces anything.
Only folders that carry the marker of a conversion whose process is gone are removed. A lock file
``.OUT.lock`` (``flock``) lets one conversion at a time write ``OUT``; the other fails with a clear error.

The HDF5 file is trusted no further than its float arrays: links, external or virtual storage, non-float types,
unwritten storage (``hdf5.py``) and datasets that the options do not use are refused by name before any array is read.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

try:
    import fcntl
except ImportError:  # not POSIX: no lock (the rest works)
    fcntl = None

import numpy as np
import torch
from safetensors import SafetensorError
from tqdm.auto import tqdm

from ..configuration_elmo import ElmoConfig
from ..modeling_elmo import ElmoModel
from ..tokenization_elmo import ElmoTokenizer
from .convert_softmax import check_softmax_file, lm_config, write_lm_folder
from .errors import ConversionError, listing, quote
from .hdf5 import open_hdf5, storage_problems, walk_hdf5
from .model_card import write_model_card
from .remote_code import save_with_remote_code


def _weight_map(config: ElmoConfig) -> Iterator[tuple[str, tuple[int, ...], list[tuple[str, Callable]]]]:
    """For each HDF5 dataset: its path, expected shape, and the ``(parameter, transform)`` pairs it fills.

    A parameter named ``name[d]`` is direction ``d`` of a stacked ``(2, ...)`` biLSTM parameter.
    The original multiplies ``x @ W``; ``nn.Linear`` stores ``W.T``; the biLSTM keeps ``x @ W``.
    """
    cd, p, d, n = config.char_embedding_dim, config.projection_dim, config.lstm_dim, config.n_filters

    def transpose(w):
        return w.T

    def identity(w):
        return w

    def with_padding_row(w):  # character id 0 ("no word") gets a zero row
        return np.concatenate([np.zeros((1, cd), w.dtype), w])

    def conv_kernel(w):  # (1, width, char_dim, count) -> Conv1d's (count, char_dim, width)
        return w[0].transpose(2, 1, 0)

    yield "char_embed", (261, cd), [("char_cnn.char_embedding.weight", with_padding_row)]
    for i, (width, count) in enumerate(config.char_cnn_filters):
        yield f"CNN/W_cnn_{i}", (1, width, cd, count), [(f"char_cnn.convolutions.{i}.weight", conv_kernel)]
        yield f"CNN/b_cnn_{i}", (count,), [(f"char_cnn.convolutions.{i}.bias", identity)]
    for k in range(config.n_highway):
        for part in ("carry", "transform"):
            yield f"CNN_high_{k}/W_{part}", (n, n), [(f"char_cnn.highways.{k}.{part}.weight", transpose)]
            yield f"CNN_high_{k}/b_{part}", (n,), [(f"char_cnn.highways.{k}.{part}.bias", identity)]
    yield "CNN_proj/W_proj", (n, p), [("char_cnn.projection.weight", transpose)]
    yield "CNN_proj/b_proj", (p,), [("char_cnn.projection.bias", identity)]
    for direction in range(2):  # 0 forward, 1 backward
        for layer in range(config.n_layers):
            src = f"RNN_{direction}/RNN/MultiRNNCell/Cell{layer}/LSTMCell"
            dst = f"bilm.layers.{layer}"
            # W_0's first P rows multiply the layer input, the last P the previous output.
            yield (
                f"{src}/W_0",
                (2 * p, 4 * d),
                [
                    (f"{dst}.input_kernel[{direction}]", lambda w: w[:p]),
                    (f"{dst}.state_kernel[{direction}]", lambda w: w[p:]),
                ],
            )
            yield f"{src}/B", (4 * d,), [(f"{dst}.bias[{direction}]", identity)]
            yield f"{src}/W_P_0", (d, p), [(f"{dst}.projection[{direction}]", identity)]


def read_original_weights(
    weight_file: str | os.PathLike, config: ElmoConfig, progress: bool = True
) -> dict[str, torch.Tensor]:
    """Read an original HDF5 weight file into an [`ElmoModel`] state dict (float32).

    Raises [`ConversionError`] naming every missing dataset, every shape that disagrees with ``config``,
    every dataset that ``config`` does not use (a file with more layers than the options say), every link
    and every dataset that is not a plain floating-point array stored in the file itself, or saying that the
    file is not readable HDF5. All of this is checked before any array is read.
    """
    weight_file = os.fspath(weight_file)
    entries = list(_weight_map(config))
    with open_hdf5(weight_file) as handle:
        found, unsafe = walk_hdf5(handle)
        unsafe += storage_problems(found)
        if unsafe:
            raise ConversionError(
                f"refusing {weight_file}: {listing(unsafe)}. Only floating-point arrays stored in the file itself "
                "are read."
            )
        problems = []
        for key, shape, _ in entries:
            if key not in found:
                problems.append(f"missing dataset {key!r}")
            elif tuple(found[key].shape) != shape:
                problems.append(f"{key!r} has shape {tuple(found[key].shape)}, the options imply {shape}")
        unused = sorted(set(found) - {key for key, _, _ in entries})
        if unused:
            problems.append(
                "datasets that the options do not use (n_layers, n_highway or filters too small?): "
                + ", ".join(quote(name) for name in unused[:10])
                + (f" and {len(unused) - 10} more" if len(unused) > 10 else "")
            )
        if problems:
            raise ConversionError(
                f"{weight_file} does not match the options: "
                + listing(problems)
                + ". Check that --options_file belongs to this weight file."
            )
        state: dict[str, torch.Tensor] = {}
        stacked: dict[str, list] = {}
        total = sum(found[key].size * 4 for key, _, _ in entries)
        with tqdm(total=total, unit="B", unit_scale=True, desc="Reading weights", disable=not progress) as bar:
            for key, _, targets in entries:
                try:
                    array = np.asarray(found[key][()], dtype=np.float32)
                except OSError as err:
                    raise ConversionError(
                        f"cannot read dataset {key!r} of {weight_file} (truncated file?): {err}"
                    ) from err
                if not np.isfinite(array).all():
                    raise ConversionError(f"dataset {key!r} of {weight_file} holds NaN or infinite values")
                for name, transform in targets:
                    value = torch.from_numpy(np.ascontiguousarray(transform(array)))
                    if name.endswith("]"):
                        name, direction = name[:-1].split("[")
                        stacked.setdefault(name, [None, None])[int(direction)] = value
                    else:
                        state[name] = value
                bar.update(array.size * 4)
    state.update({name: torch.stack(pair) for name, pair in stacked.items()})
    return state


def convert(
    options_file: str | os.PathLike,
    weight_file: str | os.PathLike,
    output_dir: str | os.PathLike,
    vocab_file: str | os.PathLike | None = None,
    overwrite: bool = False,
    progress: bool = True,
    softmax_weight_file: str | os.PathLike | None = None,
    remote_code: bool = False,
) -> Path:
    """Convert original ELMo weights to a folder that ``ElmoModel.from_pretrained`` loads.

    Args:
        options_file: the model's ``options.json``.
        weight_file: the model's HDF5 weights.
        output_dir: the folder to create (it must not exist, or be empty, unless ``overwrite``). It may not be,
            or hold, one of the input files.
        vocab_file: optional bilm-tf vocabulary (one word per line, ``<S>``, ``</S>``, ``<UNK>`` among them) for
            the tokenizer's word ids (language-model labels). The character ids do not need it.
        overwrite: replace an existing ``output_dir``.
        progress: show a progress bar while reading the weights.
        softmax_weight_file: the released LM softmax (HDF5 ``softmax/W`` (V, P), ``softmax/b`` (V,)); needs
            ``vocab_file`` (V lines). The folder is then an ``ElmoForPreTraining`` one with that softmax, written in
            safetensors shards with bounded memory (see ``convert_softmax``).
        remote_code: also write the code files and ``auto_map`` (``hub/remote_code.save_with_remote_code``), so that the
            folder loads without this package, with ``trust_remote_code=True``. Default: a plain folder.

    Returns:
        The output folder.

    Raises:
        FileNotFoundError: an input file does not exist.
        ConversionError: the inputs are invalid or unreadable, or another conversion is writing ``output_dir``;
            nothing is written.
        OSError: writing the folder failed (disk full...); nothing is left behind, an old ``output_dir`` is kept.
    """
    inputs = [
        (label, os.fspath(path))
        for label, path in (
            ("options file", options_file),
            ("weight file", weight_file),
            ("vocab file", vocab_file),
            ("softmax weight file", softmax_weight_file),
        )
        if path is not None
    ]
    if softmax_weight_file is not None and remote_code:
        raise ConversionError("--remote_code is not available with --softmax_weight_file: convert without it")
    if softmax_weight_file is not None and vocab_file is None:
        raise ConversionError("--softmax_weight_file needs --vocab_file: row i of softmax/W scores line i of it")
    for label, path in inputs:
        check_readable(label, path)
    output_dir = Path(output_dir)
    real_output = Path(os.path.realpath(output_dir))
    for label, path in inputs:  # --overwrite would delete it
        real = Path(os.path.realpath(path))
        if real_output == real or real_output in real.parents:
            raise ConversionError(f"output_dir {output_dir} holds the {label} {path}: choose another output folder")
    check_output_dir_early(output_dir, overwrite)
    for parent in output_dir.absolute().parents:
        if parent.exists():
            if not parent.is_dir():
                raise ConversionError(f"cannot create output_dir {output_dir}: {parent} is a file")
            break

    try:
        config = ElmoConfig.from_options(options_file)
    except OSError as err:
        raise ConversionError(f"cannot read options file {os.fspath(options_file)}: {err}") from err
    except (ValueError, TypeError, OverflowError, RecursionError) as err:
        reason = "nested too deeply" if isinstance(err, RecursionError) else err
        raise ConversionError(f"invalid options file {os.fspath(options_file)}: {reason}") from err
    softmax_info = None
    if softmax_weight_file is not None:  # checked before the biLM is read: a wrong file fails at once
        softmax_info = check_softmax_file(softmax_weight_file, vocab_file, config.projection_dim)
        config = lm_config(config, softmax_info)
    state = read_original_weights(weight_file, config, progress=progress)
    try:
        # with a softmax, the vocabulary as its rows are numbered (a !!!MAXTERMID line skipped, as bilm-tf does)
        words = {"vocab": softmax_info.vocab} if softmax_info is not None else {"vocab_file": vocab_file}
        tokenizer = ElmoTokenizer(**words, max_characters_per_token=config.max_characters_per_token)
    except (ValueError, OSError) as err:
        raise ConversionError(f"invalid vocab file {os.fspath(vocab_file)}: {err}") from err

    if softmax_info is None:
        model = ElmoModel(config)
        # The scalar mixes are not in the original files: keep their neutral start (equal weights, gamma 1).
        state.update({k: v for k, v in model.state_dict().items() if k.startswith("scalar_mixes.")})
        model.load_state_dict(state, strict=True)

    def write(new: Path) -> None:
        try:
            if softmax_info is not None:  # the LM head: the softmax is copied in chunks, never held whole
                write_lm_folder(new, state, softmax_weight_file, config, progress=progress)
            elif remote_code:  # with the code files and auto_map: loads without this package
                save_with_remote_code(model, tokenizer, new)
            else:
                model.save_pretrained(new)
        except SafetensorError as err:  # safetensors reports a full disk (EFBIG, ENOSPC) as its own error
            raise OSError(f"writing model.safetensors failed: {err}") from err
        if not remote_code:
            tokenizer.save_pretrained(new)
        write_model_card(
            new,
            config,
            how_made=_provenance(options_file, weight_file, vocab_file, softmax_weight_file),
            license="apache-2.0",  # AllenNLP's released ELMo models
        )

    install_output_dir(output_dir, overwrite, write)
    return output_dir


def check_readable(label: str, path: str) -> None:
    """Raise ``FileNotFoundError`` if ``path`` does not exist, [`ConversionError`] if it is not a readable file."""
    if not os.path.exists(path):  # a dangling symlink too
        raise FileNotFoundError(f"{label} not found: {path}")
    if not os.path.isfile(path):
        raise ConversionError(f"{label} {path} is not a regular file")
    try:
        with open(path, "rb") as f:
            f.read(1)
    except OSError as err:
        raise ConversionError(f"cannot read {label} {path}: {err.strerror or err}") from err


def check_output_dir_early(output_dir: Path, overwrite: bool) -> None:
    """Refuse ``output_dir`` (as [`_restore_then_check`]) before the inputs are read, so that a bad run fails at
    once; under the lock, as it may restore an old folder."""
    if output_dir.parent.is_dir():
        with _output_lock(output_dir):
            _restore_then_check(output_dir, overwrite)


def install_output_dir(output_dir: Path, overwrite: bool, write: Callable[[Path], None]) -> None:
    """Write a model folder with ``write(folder)`` into a staging folder beside ``output_dir``, then move it into
    place atomically (under the lock, after tidying up killed conversions and checking ``output_dir`` again: a
    conversion that held the lock may have written it). Nothing half-written is left; an old folder is kept on
    failure."""
    output_dir.parent.mkdir(parents=True, exist_ok=True)
    with _output_lock(output_dir):
        _restore_then_check(output_dir, overwrite)
        staging = _make_staging(output_dir)
        try:
            new = staging / "model"
            write(new)
            _install(new, output_dir, staging)
        finally:  # the staging folder now holds the partial new folder, or the old output_dir
            shutil.rmtree(staging, ignore_errors=True)


def _restore_then_check(output_dir: Path, overwrite: bool) -> None:
    """Tidy up after killed conversions to ``output_dir`` (putting back an old folder a kill left in a staging
    folder), then refuse an ``output_dir`` that is a file, or a non-empty folder without ``overwrite``.

    In this order: checked first, a missing ``output_dir`` whose old folder waits in a staging folder would pass
    the check, be restored, and then be replaced without ``--overwrite``. Call it holding the lock.
    """
    removed, restored = _remove_stale_staging(output_dir)
    if output_dir.exists() and not output_dir.is_dir():
        raise ConversionError(f"output_dir {output_dir} exists and is not a folder")
    if output_dir.is_dir() and any(output_dir.iterdir()) and not overwrite:
        if restored is not None:
            how = (
                f"; it was put back from {restored.name}, where a conversion with --overwrite was killed before "
                "replacing it"
            )
        elif removed:  # e.g. a kill after the swap: the old folder that --overwrite replaced, in its staging folder
            how = f"; the leftovers of a killed conversion to it were removed ({listing([p.name for p in removed])})"
        else:
            how = ""
        raise ConversionError(f"output_dir {output_dir} exists and is not empty (pass --overwrite to replace it){how}")


# Test hooks, read from the environment of the process: ``ELMO_CONVERT_FAULTS=kill-after-swap`` (or
# ``kill-between-renames``) SIGKILLs the conversion at that point; ``no-exchange`` forces the two-rename fallback.
_FAULTS_ENV = "ELMO_CONVERT_FAULTS"


def _fault(point: str) -> bool:
    active = point in os.environ.get(_FAULTS_ENV, "").split(",")
    if active and point.startswith("kill-"):
        os.kill(os.getpid(), signal.SIGKILL)
    return active


@contextlib.contextmanager
def _output_lock(output_dir: Path) -> Iterator[None]:
    """Hold ``.NAME.lock`` next to ``output_dir`` (``flock``, not waiting); raise [`ConversionError`] if taken.

    The lock file is removed on release, while still locked; a process that opened the removed file sees that
    its inode is no longer the one at the path and opens the new one, so two holders never coexist.
    The kernel drops the lock of a killed process; the file it leaves is reused.
    """
    if fcntl is None:
        yield
        return
    path = output_dir.parent / f".{output_dir.name}.lock"
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0), 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise ConversionError(
                f"another conversion is writing {output_dir} (it holds {path}); wait for it to finish"
            ) from None
        held = os.fstat(fd)
        try:
            current = os.stat(path, follow_symlinks=False)
        except FileNotFoundError:
            current = None
        if current is not None and (current.st_dev, current.st_ino) == (held.st_dev, held.st_ino):
            break
        os.close(fd)
    try:
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        os.close(fd)


_MARKER = ".elmo-convert-staging"  # inside each staging folder; holds the folder's own name


def _make_staging(output_dir: Path) -> Path:
    """Create and mark ``.NAME.partial-PID-XXXX`` next to ``output_dir``: the new folder is written inside it."""
    staging = Path(tempfile.mkdtemp(prefix=f".{output_dir.name}.partial-{os.getpid()}-", dir=output_dir.parent))
    try:
        (staging / _MARKER).write_text(staging.name + "\n", encoding="utf-8")
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return staging


def _is_marked(folder: Path) -> bool:
    """Whether ``folder`` is a staging folder made by [`_make_staging`] (and not a user's folder of that name)."""
    marker = folder / _MARKER
    try:
        return not marker.is_symlink() and marker.is_file() and marker.read_text(encoding="utf-8") == folder.name + "\n"
    except (OSError, UnicodeDecodeError):
        return False


def _is_half_marked(folder: Path) -> bool:
    """Whether ``folder`` holds nothing but a marker file cut short by a kill while [`_make_staging`] wrote it."""
    marker = folder / _MARKER
    try:
        if [p.name for p in folder.iterdir()] != [_MARKER] or marker.is_symlink() or not marker.is_file():
            return False
        return (folder.name + "\n").startswith(marker.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError):
        return False


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically (Linux ``renameat2(RENAME_EXCHANGE)``); False where that is not available."""
    if _fault("no-exchange") or not sys.platform.startswith("linux"):
        return False
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):  # glibc < 2.28, musl...
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    renameat2.restype = ctypes.c_int
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):  # the kernel or the file system cannot
        return False
    raise OSError(code, os.strerror(code), os.fspath(b))


def _install(new: Path, output_dir: Path, staging: Path) -> None:
    """Move the complete folder ``new`` (inside ``staging``) to ``output_dir``; an old one ends inside ``staging``.

    With an old ``output_dir``: one atomic exchange where possible, so ``output_dir`` is never missing. Otherwise
    two renames, the old folder first to ``staging/replaced``; a kill between them leaves ``output_dir`` missing
    and the old folder in the marked staging folder, which [`remove_stale_staging`] (the next conversion) moves
    back.
    """
    if not output_dir.exists():  # nobody else creates it: we hold the lock
        os.rename(new, output_dir)
        return
    if _exchange(new, output_dir):
        _fault("kill-after-swap")
        return
    old = staging / "replaced"
    os.rename(output_dir, old)
    _fault("kill-between-renames")
    try:
        os.rename(new, output_dir)
    except BaseException:
        os.rename(old, output_dir)
        raise


def _provenance(options_file, weight_file, vocab_file, softmax_weight_file=None) -> str:
    """The model card's "How it was made" paragraph for a converted model."""
    vocab = f", vocabulary `{Path(vocab_file).name}`" if vocab_file is not None else ""
    if softmax_weight_file is not None:
        vocab += f", LM softmax `{Path(softmax_weight_file).name}` (kept as `softmax.weight`/`softmax.bias`)"
    return (
        f"Converted from the original AllenNLP/bilm-tf release (options `{Path(options_file).name}`, weights "
        f"`{Path(weight_file).name}`{vocab}) with `convert_original_weights.py` of the `modeling_elmo` package, "
        "in float32, without retraining: the character CNN, highway, projection and LSTM weights are the original "
        "ones, and the outputs match the original TensorFlow implementation to about 1e-6. The scalar-mix weights "
        "are new (equal weights, gamma 1), for a task to learn."
    )


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True  # someone else's process (or no way to tell): leave its folder alone
    return True


def remove_stale_staging(output_dir: str | os.PathLike) -> list[Path]:
    """Delete what a killed conversion to ``output_dir`` left next to it; return the folders removed.

    A conversion writes inside a marked folder ``.NAME.partial-PID-*`` and swaps the result into ``NAME`` only
    when complete, so ``NAME`` is never half-written; a ``SIGKILL`` can only leave such a hidden staging folder
    behind. Those of processes that no longer run, and only those that carry the marker of [`_make_staging`]
    or are empty (a user's folder of the same name is left alone), are removed here (each conversion does this
    first, before ``NAME`` is checked).
    One that holds the old ``NAME`` (a kill between the two renames of the fallback) gives it back first if
    ``NAME`` is missing.
    """
    return _remove_stale_staging(output_dir)[0]


def _remove_stale_staging(output_dir: str | os.PathLike) -> tuple[list[Path], Path | None]:
    """[`remove_stale_staging`], also returning the staging folder an old ``output_dir`` was put back from."""
    output_dir = Path(output_dir)
    removed: list[Path] = []
    restored = None
    if not output_dir.parent.is_dir():
        return removed, restored
    prefix = f".{output_dir.name}.partial-"
    for path in sorted(output_dir.parent.iterdir()):
        if not path.name.startswith(prefix):
            continue
        pid = path.name[len(prefix) :].partition("-")[0]
        if not pid.isdigit() or path.is_symlink() or not path.is_dir() or _pid_alive(int(pid)):
            continue
        if not _is_marked(path):
            # Killed between creating and marking it: empty, or holding only the start of its marker. Removing
            # that loses nothing; any other unmarked folder is a user's.
            with contextlib.suppress(OSError):
                if _is_half_marked(path):
                    (path / _MARKER).unlink()
                path.rmdir()
                removed.append(path)
            continue
        old = path / "replaced"
        if old.is_dir() and not old.is_symlink() and not os.path.lexists(output_dir):
            os.rename(old, output_dir)
            restored = path
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed, restored


__all__ = [
    "ConversionError",
    "check_output_dir_early",
    "check_readable",
    "convert",
    "install_output_dir",
    "read_original_weights",
    "remove_stale_staging",
]
