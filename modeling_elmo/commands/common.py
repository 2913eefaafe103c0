"""What several subcommands share: their errors, the model, device and precision flags, input checks, the signals.

Each subcommand is one module of this folder with ``add_arguments(parser)`` and ``run(args) -> int``;
[`run_command`] parses and runs one, turning the errors below into a message and an exit code. Output files are
published by ``output_files``. Nothing here imports torch or transformers at import time.
"""

from __future__ import annotations

import argparse
import codecs
import contextlib
import os
import re
import signal
import sys
import threading
from collections.abc import Callable, Iterator

from elmo_flags import new_parser

# What `--model` and `--device` accept without importing anything heavy. torch.device also takes "meta" (tensors
# without data), "xla", "hpu"...: refused by name here rather than failing later with a traceback.
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?")
_DEVICE = re.compile(r"auto|(?:cpu|mps|cuda)(?::[0-9]+)?")

DEMO_MODEL_NOTE = (
    "the bundled demo model: a toy-sized biLM trained on WikiText-2 by this project, not the released ELMo"
)


class CliError(Exception):
    """An error to report as ``error: <message>`` with exit code 1."""


class UsageError(CliError):
    """Flags that do not go together: reported as argparse reports its own usage errors (exit code 2)."""


class Terminated(BaseException):
    """SIGTERM arrived: unwinds like ``KeyboardInterrupt``, so that partial outputs are removed."""


# ---------------------------------------------------------------------------------------------
# Running a subcommand
# ---------------------------------------------------------------------------------------------


def run_command(
    add_arguments: Callable[[argparse.ArgumentParser], None],
    run: Callable[[argparse.Namespace], int],
    argv: list[str] | None,
    prog: str,
    args: argparse.Namespace | None = None,
) -> int:
    """Parse ``argv`` with the flags of ``add_arguments`` (a module of ``elmo_flags``) and call ``run``; returns the
    exit code. ``args``: ``argv`` already parsed (``elmo_cli`` parses before it imports the package).

    0 success; 1 an error the message explains ([`CliError`], ``OSError``: ``error: ...`` on stderr); 2 bad usage
    (argparse's, or [`UsageError`]); 130 interrupted (Ctrl-C); 143 terminated (SIGTERM, where the command unwinds
    it: see [`signals_unwind`]).
    """
    parser = new_parser(prog, add_arguments)
    try:
        if args is None:
            args = parser.parse_args(argv)
        return run(args)
    except SystemExit as exit_:  # argparse's --help and usage errors
        return exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 2)
    except UsageError as err:
        parser.print_usage(sys.stderr)
        print(f"{prog}: error: {err}", file=sys.stderr)
        return 2
    except (CliError, OSError) as err:  # OSError: reading the input, writing the output...
        print(f"error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Terminated:
        print("terminated", file=sys.stderr)
        return 128 + signal.SIGTERM


@contextlib.contextmanager
def signals_unwind() -> Iterator[None]:
    """Within the block, SIGTERM raises [`Terminated`] and Ctrl-C ``KeyboardInterrupt``, so that ``finally`` blocks
    remove partial files; both wait while HDF5 runs (``HDF5_CALL`` of ``modeling_elmo.inference.hdf5_file``: HDF5
    does not survive an exception raised inside it). Only in the main thread, where signal handlers can be set;
    blocks may nest."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    from ..inference.hdf5_file import HDF5_CALL

    def on_signal(signum, frame) -> None:
        if signum == signal.SIGTERM:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not interrupt the clean-up
        HDF5_CALL.interrupt(Terminated() if signum == signal.SIGTERM else KeyboardInterrupt())

    previous = {number: signal.signal(number, on_signal) for number in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        HDF5_CALL.pending = None


# ---------------------------------------------------------------------------------------------
# --model
# ---------------------------------------------------------------------------------------------


def describe_model(model: str | None) -> str:
    """How outputs name the model: the ``--model`` given, or what the bundled demo model is."""
    return DEMO_MODEL_NOTE if model is None else model


def check_model_name(model: str | None) -> None:
    """[`CliError`] for a ``--model`` that names no folder and is a misspelt released name (``orignal``), with the
    suggestion: at once, before the model loads or the Hub is asked."""
    if model is None or os.path.exists(model):
        return
    from ..hub.download import close_released_name

    suggestion = close_released_name(model)
    if suggestion is not None:
        raise CliError(
            f"--model {model}: no such folder, and not a released model: did you mean {suggestion}? "
            "(`elmo download --list` lists the released models)"
        )


def resolve_model(model: str | None) -> str:
    """``model`` as given, a released model's name as its converted folder (downloaded on first use), or the
    bundled demo model's folder; a clear error if none exists. A misspelt released name (``orignal``) that names
    no folder fails at once with a suggestion, instead of being looked up on the Hub."""
    if model is not None:
        if not os.path.exists(model):  # an existing folder wins over a released name
            from ..hub.download import DownloadError, canonical_name, download_released_model

            if canonical_name(model) is not None:
                try:
                    return str(download_released_model(model))
                except DownloadError as err:
                    raise CliError(f"--model {model}: {err}") from err
            check_model_name(model)
        if os.path.isdir(model) and not os.path.isfile(os.path.join(model, "config.json")):
            raise CliError(
                f"--model {model} is not a folder with config.json: a model folder (made by `elmo convert` or "
                "`elmo train-lm`) holds config.json, model.safetensors and the tokenizer files."
            )
        if os.path.isdir(model) or (not os.path.exists(model) and _HUB_ID.fullmatch(model)):
            return model
        what = "is not a folder" if os.path.exists(model) else "no such folder (and not a Hub id or a released model)"
        raise CliError(
            f"--model {model}: {what}. Give a model folder (made by `elmo convert` or `elmo train-lm`), "
            "a Hugging Face Hub id (owner/name) or a released model's name (`elmo download --list`)."
        )
    from ..demo_models.model import demo_model_path

    demo = demo_model_path()
    if not (demo / "config.json").is_file():
        raise CliError(
            f"no --model given and the bundled demo model is missing ({demo} has no config.json). "
            "Give --model FOLDER (convert the original weights with `elmo convert --help`), or train the demo "
            "model with scripts/train_demo_model.sh."
        )
    return str(demo)


@contextlib.contextmanager
def quiet_loading() -> Iterator[None]:
    """transformers' progress bars (its "Loading weights" bar) off within the block, with its public switch, unless
    the user asked for transformers' details: verbosity info or debug (``TRANSFORMERS_VERBOSITY=info``). The
    commands' own bars stay."""
    from transformers.utils import logging as hf_logging

    from ..hub.download_core import progress_bars_off

    with progress_bars_off(hf_logging.get_verbosity() > hf_logging.INFO):
        yield


def load_model(model: str | None, device, dtype: str = "float32", quantize: str | None = None):
    """Tokenizer and model (eval mode, on ``device``) from a folder, Hub id or released name, or the demo model.

    ``dtype`` (``float32``, ``bfloat16``, ``float16``) is the precision of the weights and products (see
    ``ElmoBiLstmLayer``: the cell state stays float32); ``quantize="int8"`` quantizes a float32 CPU model with
    ``modeling_elmo.inference.quantize.quantize_int8``. Errors: [`CliError`] for a model that cannot be had or
    loaded, or a precision the device cannot run.
    """
    import torch

    if quantize is not None and dtype != "float32":
        raise CliError(f"--quantize {quantize} quantizes a float32 model: leave out --dtype {dtype}")
    if quantize is not None and torch.device(device).type != "cpu":
        raise CliError(f"--quantize {quantize} runs on CPU only: add --device cpu")
    if dtype == "bfloat16" and torch.device(device).type == "cpu" and not _cpu_has_bfloat16_units():
        print(
            "note: this CPU has no bfloat16 matrix units (AVX-512 BF16 or AMX): --dtype bfloat16 runs several times "
            "slower than float32 here; leave it out, or try --quantize int8",
            file=sys.stderr,
        )
    name = resolve_model(model)
    from .. import ElmoModel, ElmoTokenizer
    from ..hub.remote_code import hub_local_files_only

    offline = False
    if not os.path.exists(name):  # a Hub id: one quick check that it can be had, instead of minutes of retries
        try:
            offline = hub_local_files_only(name)
        except OSError as err:
            raise CliError(f"--model {name}: {err}") from err
    try:
        with quiet_loading():
            tokenizer = ElmoTokenizer.from_pretrained(name, local_files_only=offline)
            elmo = ElmoModel.from_pretrained(name, local_files_only=offline, dtype=getattr(torch, dtype))
    except (OSError, ValueError, KeyError) as err:
        raise CliError(
            f"could not load an ELMo model from {name!r}: {err}. Give --model a folder made by `elmo convert` "
            "or `elmo train-lm`, or a Hugging Face Hub id."
        ) from err
    if quantize == "int8":
        from ..inference.quantize import quantize_int8

        return tokenizer, quantize_int8(elmo.eval())
    return tokenizer, elmo.to(device).eval()


# ---------------------------------------------------------------------------------------------
# --device and --precision
# ---------------------------------------------------------------------------------------------


def check_device_name(name: str) -> None:
    """Refuse a ``--device`` other than ``auto``, ``cpu``, ``cuda``, ``cuda:N`` or ``mps``, without importing torch."""
    if not _DEVICE.fullmatch(name):
        why = " (meta tensors hold no data)" if name.partition(":")[0] == "meta" else ""
        raise CliError(
            f"--device {name!r} is not a device this command can run on{why}; use auto, cpu, cuda, cuda:1 or mps"
        )


def resolve_device(name: str, local_rank: int = 0):
    """``auto`` (CUDA if available, one GPU per local process, else CPU) or ``cpu``, ``cuda[:N]``, ``mps``, as a
    ``torch.device``; [`CliError`] for a device that is not there."""
    check_device_name(name)
    import torch

    if name == "auto":
        return torch.device(f"cuda:{local_rank % torch.cuda.device_count()}" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except (RuntimeError, ValueError) as err:
        raise CliError(f"--device {name!r} is not a device ({err}); use auto, cpu, cuda, cuda:1 or mps") from err
    if device.type == "cuda" and not torch.cuda.is_available():
        raise CliError(f"--device {name}: CUDA is not available here; use --device cpu (or auto)")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise CliError(f"--device {name}: there are only {torch.cuda.device_count()} CUDA devices (cuda:0...)")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise CliError(f"--device {name}: MPS is not available here; use --device cpu (or auto)")
    return device


def _cpu_has_bfloat16_units() -> bool:
    """Whether oneDNN finds bfloat16 units on this CPU (AVX-512 BF16 or AMX; where torch has no oneDNN, assume so)."""
    import torch

    if not torch.backends.mkldnn.is_available():
        return True
    return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


def check_precision_flags(args: argparse.Namespace) -> None:
    """Refuse a ``--precision`` given with ``--dtype`` or ``--quantize`` (before anything loads)."""
    precision = getattr(args, "precision", None)
    dtype, quantize = getattr(args, "dtype", None), getattr(args, "quantize", None)
    if precision is not None and (dtype is not None or quantize is not None):
        given = f"--dtype {dtype}" if dtype is not None else f"--quantize {quantize}"
        raise CliError(f"--precision {precision} and {given} both set the precision: give one of them")


def resolve_precision(args: argparse.Namespace, device, say: bool = True) -> None:
    """Turn ``--precision`` into ``args.dtype`` / ``args.quantize`` (``auto``: ``choose_precision``'s pick, said on
    stderr where ``say``). Without ``--precision``, ``--dtype`` defaults to float32."""
    check_precision_flags(args)
    precision = getattr(args, "precision", None)
    if precision is None:
        args.dtype, args.quantize = getattr(args, "dtype", None) or "float32", getattr(args, "quantize", None)
        return
    if precision == "auto":
        from ..inference.precision import choose_precision

        choice = choose_precision(device)
        if say:
            print(f"precision auto: {choice.name}; {choice.reason}", file=sys.stderr)
        precision = choice.name
    elif precision == "int8":
        import torch

        if torch.device(device).type != "cpu":
            raise CliError(f"--precision int8 runs on CPU only, not on {device}: add --device cpu, or leave it out")
    args.dtype, args.quantize = ("float32", "int8") if precision == "int8" else (precision, None)
    args.precision = None  # resolved: a second call keeps the choice


# ---------------------------------------------------------------------------------------------
# Text input
# ---------------------------------------------------------------------------------------------


def nul_message(source: str, number: int) -> str:
    """What to say about a NUL character on line ``number`` of ``source``."""
    return (
        f"{source}: line {number} holds a NUL character (\\0), which is not text: is the file UTF-16 or binary? "
        "Convert it to UTF-8 text (e.g. with iconv) or remove the NUL characters"
    )


def check_text_line(source: str, number: int, line: str) -> None:
    """[`CliError`] for a line that holds a NUL character (``source`` names the input in the message)."""
    if "\0" in line:
        raise CliError(nul_message(source, number))


def scan_text_file(path: str) -> int:
    """Lines of a file as ``for line in file`` counts them (a last line without newline counts), checking on the way
    that it is UTF-8: [`CliError`] naming the first bad line otherwise. One pass over the file, before the model
    loads, so that a wrong file fails in a second, not after the model has loaded. A NUL character is refused too
    (UTF-16 or binary input), naming its line. For a regular file only: a pipe cannot be read twice."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    count, last = 0, b"\n"
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            at = block.find(b"\0")
            if at >= 0:
                raise CliError(nul_message(path, count + block.count(b"\n", 0, at) + 1))
            try:
                decoder.decode(block)
            except UnicodeDecodeError as err:
                line = count + block.count(b"\n", 0, max(err.start, 0)) + 1
                raise CliError(
                    f"{path} is not UTF-8 text (line {line}: {err.reason}, byte {err.object[err.start : err.end]!r}); "
                    "convert it, e.g. with iconv -f latin1 -t utf-8"
                ) from None
            count += block.count(b"\n")
            last = block[-1:]
    try:
        decoder.decode(b"", final=True)
    except UnicodeDecodeError as err:
        raise CliError(f"{path} is not UTF-8 text (it ends inside a character: {err.reason})") from None
    return count + (last != b"\n")
