"""The ``elmo`` command: convert weights, embed text to HDF5, compare words in context, train.

It lives outside the ``modeling_elmo`` package because ``import modeling_elmo`` registers the package with
transformers (and so imports torch and transformers): ``elmo --help`` and argument errors answer without that, and
each subcommand imports the package when it runs.

Subcommands (``elmo SUBCOMMAND --help`` for each):

- ``elmo convert``: original ``options.json`` + HDF5 weights to a model folder (``modeling_elmo.commands.convert``).
- ``elmo embed``: a text file (or stdin) to an HDF5 file of ELMo vectors, one dataset per sentence.
- ``elmo similar``: cosine similarities of one word's vectors in different sentences (one word, two senses).
- ``elmo export-vectors``: a vocabulary's layer-0 vectors, word2vec format (``modeling_elmo.commands.export_vectors``).
- ``elmo score``: sentence log-probabilities under the biLM's released softmax (``modeling_elmo.commands.score``).
- ``elmo train-lm``: pretrain or fine-tune the biLM (``modeling_elmo.training.train_lm``).
- ``elmo train-tagger``: train a sequence tagger, e.g. NER (``modeling_elmo.training.train_tagger``).
- ``elmo demo``: a web demo in the browser, served on this machine (``modeling_elmo.commands.demo``, Gradio).

Without ``--model``, ``embed`` and ``similar`` use the demo model bundled in the package
(``modeling_elmo/demo_models/demo_bilm``): a toy-sized biLM this project trained on WikiText-2, not the released
ELMo. For real use, convert the original weights (``elmo convert``) and pass ``--model FOLDER``.

Exit codes: 0 success; 1 an error the message explains (missing file, unloadable model, bad input...);
2 bad command-line usage; 130 interrupted (Ctrl-C); 143 terminated (SIGTERM, ``elmo embed``).

``elmo embed`` scales out over processes: started by ``accelerate launch`` or ``torchrun`` (which set
``RANK``/``WORLD_SIZE``), each process embeds the sentences ``i`` with ``i % world_size == rank`` into a
part file, and process 0 merges the parts into one file in input order. Only light modules are
imported at start-up: torch, transformers and the model load when a subcommand needs them.
"""

from __future__ import annotations

import argparse
import codecs
import contextlib
import importlib
import importlib.util
import inspect
import os
import re
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple, TextIO

# `elmo embed --output_type`: AllenNLP's three (same meanings as `allennlp elmo --all/--top/--average`), then this
# package's two. Kept equal to modeling_elmo.inference.embed_corpus.OUTPUTS (not imported: it imports torch).
OUTPUT_TYPES = ("all", "top", "average", "elmo", "sentence_mean")
# The old names, accepted with a note for one release.
DEPRECATED_OUTPUT_TYPES = {"layers": "all", "mean": "sentence_mean"}
DEFAULT_EMBED_OUTPUT = "elmo_embeddings.hdf5"
# What `pip install "modeling-elmo[train]"` adds (pyproject.toml): the training commands import them.
TRAIN_EXTRA = ("datasets", "accelerate", "seqeval")
DELEGATED = {
    "convert": (
        "modeling_elmo.commands.convert",
        "convert original ELMo weights (options.json + HDF5) to a model folder",
    ),
    "download": (
        "modeling_elmo.commands.download",
        "download a released ELMo model by name (small, medium, original, original-5.5B...), convert it once",
    ),
    "export-vectors": (
        "modeling_elmo.commands.export_vectors",
        "write the context-independent layer-0 vectors of a vocabulary in word2vec format (text or binary)",
    ),
    "score": (
        "modeling_elmo.commands.score",
        "log-probabilities and perplexity of sentences under the biLM's released softmax (JSON lines)",
    ),
    "train-lm": ("modeling_elmo.training.train_lm", "pretrain or fine-tune the biLM language model"),
    "train-tagger": ("modeling_elmo.training.train_tagger", "train a sequence tagger (e.g. NER) on top of ELMo"),
    "demo": (
        "modeling_elmo.commands.demo",
        "a web demo in the browser (Gradio): word senses, tagging, fill-in-the-blank",
    ),
}


class SimilarExample(NamedTuple):
    """Built-in sentences for ``elmo similar --word WORD``: two per sense, the first sense's first."""

    senses: tuple[str, str]
    sentences: tuple[str, str, str, str]


# The first two sentences of each sense in benchmarks/pick_demo_word.py (its "display set"). The default word is the
# one whose senses the demo biLM separates best on that script's held-out sentences (see its output in the README);
# "bank" is the classic example, which a converted ELMo separates but the toy demo biLM does not.
SIMILAR_EXAMPLES = {
    "record": SimilarExample(
        ("noun", "verb"),
        (
            "The album set a record for sales in its first week .",
            "He broke the world record in the long jump .",
            "They went to London to record their second album .",
            "The band began to record new songs in March .",
        ),
    ),
    "bank": SimilarExample(
        ("river", "money"),
        (
            "He sat on the bank of the river and watched the water .",
            "The boat drifted to the muddy bank of the river .",
            "She went to the bank to open an account .",
            "The bank raised the interest rate on its loans .",
        ),
    ),
}
DEFAULT_SIMILAR_WORD = "record"
DEMO_MODEL_NOTE = (
    "the bundled demo model: a toy-sized biLM trained on WikiText-2 by this project, not the released ELMo"
)


_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?")
# The devices the commands run on. torch.device also accepts "meta" (tensors without data), "xla", "hpu"...:
# refused by name here rather than failing later with a traceback.
_DEVICE = re.compile(r"auto|(?:cpu|mps|cuda)(?::[0-9]+)?")


class CliError(Exception):
    """An error to report as ``error: <message>`` with exit code 1."""


# ---------------------------------------------------------------------------------------------
# Shared helpers
# ---------------------------------------------------------------------------------------------


def check_model_name(model: str | None) -> None:
    """[`CliError`] for a ``--model`` that names no folder and is a misspelt released name (``orignal``), with the
    suggestion: at once, before the model loads or the Hub is asked."""
    if model is None or os.path.exists(model):
        return
    from modeling_elmo.hub.download import close_released_name

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
            from modeling_elmo.hub.download import DownloadError, canonical_name, download_released_model

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
    from modeling_elmo.demo_models.model import demo_model_path

    demo = demo_model_path()
    if not (demo / "config.json").is_file():
        raise CliError(
            f"no --model given and the bundled demo model is missing ({demo} has no config.json). "
            "Give --model FOLDER (convert the original weights with `elmo convert --help`), or train the demo "
            "model with scripts/train_demo_model.sh."
        )
    return str(demo)


def check_device_name(name: str) -> None:
    """Refuse a ``--device`` other than ``auto``, ``cpu``, ``cuda``, ``cuda:N`` or ``mps``, without importing torch."""
    if not _DEVICE.fullmatch(name):
        why = " (meta tensors hold no data)" if name.partition(":")[0] == "meta" else ""
        raise CliError(
            f"--device {name!r} is not a device this command can run on{why}; use auto, cpu, cuda, cuda:1 or mps"
        )


def resolve_device(name: str, local_rank: int = 0):
    """``auto`` (CUDA if available, one GPU per local process, else CPU) or ``cpu``, ``cuda[:N]``, ``mps``."""
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
        from modeling_elmo.inference.precision import choose_precision

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


def load_model(model: str | None, device, dtype: str = "float32", quantize: str | None = None):
    """Tokenizer and model (eval mode, on ``device``) from a folder or Hub id, or the demo model.

    ``dtype`` (``float32``, ``bfloat16``, ``float16``) is the precision of the weights and products (see
    ``ElmoBiLstmLayer``: the cell state stays float32); ``quantize="int8"`` quantizes a float32 CPU model with
    ``modeling_elmo.inference.quantize.quantize_int8``.
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
    from transformers.utils import logging as hf_logging

    from modeling_elmo import ElmoModel, ElmoTokenizer
    from modeling_elmo.hub.remote_code import hub_local_files_only

    offline = False
    if not os.path.exists(name):  # a Hub id: one quick check that it can be had, instead of minutes of retries
        try:
            offline = hub_local_files_only(name)
        except OSError as err:
            raise CliError(f"--model {name}: {err}") from err
    bar_was_on = hf_logging.is_progress_bar_enabled()
    verbosity = hf_logging.get_verbosity()
    hf_logging.disable_progress_bar()  # transformers' "Loading weights" bar; ours are enough
    # and no load report for a pretraining folder (its LM softmax is rightly left out); errors still show
    hf_logging.set_verbosity_error()
    try:
        tokenizer = ElmoTokenizer.from_pretrained(name, local_files_only=offline)
        elmo = ElmoModel.from_pretrained(name, local_files_only=offline, dtype=getattr(torch, dtype))
    except (OSError, ValueError, KeyError) as err:
        raise CliError(
            f"could not load an ELMo model from {name!r}: {err}. Give --model a folder made by `elmo convert` "
            "or `elmo train-lm`, or a Hugging Face Hub id."
        ) from err
    finally:
        hf_logging.set_verbosity(verbosity)
        if bar_was_on:
            hf_logging.enable_progress_bar()
    if quantize == "int8":
        from modeling_elmo.inference.quantize import quantize_int8

        return tokenizer, quantize_int8(elmo.eval())
    return tokenizer, elmo.to(device).eval()


def describe_model(model: str | None) -> str:
    return DEMO_MODEL_NOTE if model is None else model


# ---------------------------------------------------------------------------------------------
# Reading sentences
# ---------------------------------------------------------------------------------------------

# An end of sentence: . ! or ? (or an ellipsis), optionally closing quotes/brackets, then whitespace and
# an uppercase letter, a digit, or an opening quote/bracket.
_SENTENCE_END = re.compile(r"""(?:[.!?]+)['"\u2019\u201d)\]]*(?=\s+['"\u2018\u201c(\[]?[A-Z0-9\u00C0-\u00DE])""")
_ABBREVIATIONS = frozenset(
    "mr mrs ms dr prof st jr sr vs etc e.g i.e no fig gen col lt sgt capt rev jan feb mar apr jun jul aug sep sept "
    "oct nov dec inc ltd co corp mt ft u.s".split()
)


def split_sentences(paragraph: str) -> list[str]:
    """Split one paragraph of raw text into sentences (simple rules, no model).

    A sentence ends at ``.``, ``!`` or ``?`` (optionally followed by closing quotes or brackets) when
    whitespace and then an uppercase letter, a digit or an opening quote/bracket follow, except after
    a single letter (``J. Smith``) or a common abbreviation (``Mr.``, ``Dr.``, ``e.g.``, ``Inc.``...).
    Newlines inside the paragraph count as spaces.
    """
    text = " ".join(paragraph.split())
    sentences, start = [], 0
    for match in _SENTENCE_END.finditer(text):
        if text[match.start()] == ".":
            before = text[start : match.start()].rsplit(" ", 1)[-1].lstrip("(\"'")
            if len(before) == 1 and before.isalpha() or before.lower() in _ABBREVIATIONS:
                continue
        sentences.append(text[start : match.end()].strip())
        start = match.end()
    rest = text[start:].strip()
    if rest:
        sentences.append(rest)
    return sentences


def read_sentences(stream: TextIO, raw: bool) -> Iterator[str]:
    """Sentences of ``stream``: one per line, or with ``raw`` paragraphs (blank-line separated) split by
    [`split_sentences`]. Streams: holds one paragraph at a time. A line holding a NUL character is refused by
    number ([`CliError`]): it is not text (HDF5 cannot even store it as the words of a sentence)."""
    if not raw:
        for number, line in enumerate(stream, 1):
            _check_text_line(stream, number, line)
            yield line.rstrip("\r\n")
        return
    paragraph: list[str] = []
    for number, line in enumerate(stream, 1):
        _check_text_line(stream, number, line)
        if line.strip():
            paragraph.append(line)
            continue
        if paragraph:
            yield from split_sentences(" ".join(paragraph))
            paragraph = []
    if paragraph:
        yield from split_sentences(" ".join(paragraph))


def _nul_message(source: str, number: int) -> str:
    return (
        f"{source}: line {number} holds a NUL character (\\0), which is not text: is the file UTF-16 or binary? "
        "Convert it to UTF-8 text (e.g. with iconv) or remove the NUL characters"
    )


def _check_text_line(stream: TextIO, number: int, line: str) -> None:
    if "\0" in line:
        name = getattr(stream, "name", None)
        raise CliError(_nul_message("the input" if not isinstance(name, str) or name == "<stdin>" else name, number))


def scan_text_file(path: str) -> int:
    """Lines of a file as ``for line in file`` counts them (a last line without newline counts), checking on the way
    that it is UTF-8: [`CliError`] naming the first bad line otherwise. One pass over the file, before the model
    loads, so that a wrong file fails in a second, not after the model has loaded. A NUL character is refused too
    (UTF-16 or binary input), naming its line."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    count, last = 0, b"\n"
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            at = block.find(b"\0")
            if at >= 0:
                raise CliError(_nul_message(path, count + block.count(b"\n", 0, at) + 1))
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


# ---------------------------------------------------------------------------------------------
# elmo embed
# ---------------------------------------------------------------------------------------------

# Every file `elmo embed` writes next to the output has a hidden name marked as its own:
# ``.NAME.embed-partial-PID.tmp`` (one process), ``.NAME.embed-partN-of-W.tmp`` and ``.NAME.embed-merging-PID.tmp``
# (several processes), and the lock ``.NAME.embed.lock``. Only the PID-named ones of dead processes are stale.
_STALE_TEMP = re.compile(r"embed-(?:partial|merging)-(?P<pid>[0-9]+)\.tmp|embed-part[0-9]+-of-[0-9]+\.tmp")


class Terminated(BaseException):
    """SIGTERM arrived: unwinds like ``KeyboardInterrupt``, so that the partial output is removed."""


@contextlib.contextmanager
def _signals_unwind() -> Iterator[None]:
    """Within the block, SIGTERM raises [`Terminated`] and Ctrl-C ``KeyboardInterrupt``, both deferred while HDF5
    runs (``HDF5_CALL`` of ``modeling_elmo.inference.hdf5_file``). Only in the main thread, where signal handlers
    can be set."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    from modeling_elmo.inference.hdf5_file import HDF5_CALL

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


def _lock_name(output: str) -> str:
    folder, name = os.path.split(os.path.abspath(output))
    return os.path.join(folder, f".{name}.embed.lock")


def _lock_output(output: str) -> int | None:
    """Lock ``output`` for this run: an exclusive ``flock`` on ``.NAME.embed.lock`` next to it, so that a second
    `elmo embed` to the same output fails at once, with or without ``--overwrite``. The system releases the
    lock when the process dies, even by SIGKILL. Returns the lock file's descriptor for [`_unlock_output`]
    (``None`` where ``flock`` does not exist or the file system has no locks; publishing with
    [`_publish`] still never replaces a file without ``--overwrite``)."""
    try:
        import fcntl
    except ImportError:  # not POSIX
        return None
    path = _lock_name(output)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode("ascii", "replace").strip() or "unknown"
            os.close(fd)
            raise CliError(
                f"{output} is being written by another `elmo embed` (process {holder}); wait until it is done "
                "or choose another --output"
            ) from None
        except OSError:
            os.close(fd)
            return None
        # The previous holder removes the lock file when done, maybe after we opened it: then we hold a lock
        # on a file that no longer has a name, which nobody else would see. Lock the file that is there now.
        try:
            current = os.path.samestat(os.fstat(fd), os.stat(path))
        except FileNotFoundError:
            current = False
        if current:
            with contextlib.suppress(OSError):  # the PID is only for the message above
                os.ftruncate(fd, 0)
                os.write(fd, f"{os.getpid()}\n".encode())
            return fd
        os.close(fd)


def _unlock_output(output: str, fd: int | None) -> None:
    """Remove the lock file, then release the lock (in this order: see [`_lock_output`])."""
    from modeling_elmo.inference.hdf5_file import remove_file

    if fd is None:
        return
    remove_file(_lock_name(output))
    os.close(fd)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def remove_stale_partials(output: str, locked: bool = True) -> list[str]:
    """Delete what `elmo embed` processes that died (SIGKILL, power loss) left next to ``output``.

    Only files provably left by this command are deleted: a regular file of this user, named
    ``.NAME.embed-partial-PID.tmp`` or ``.NAME.embed-merging-PID.tmp`` for this very output, whose process
    ``PID`` is dead (or is this process, which has not created its own yet); and, when this process holds
    the output's lock (``locked``: no other run to this output is writing), the part files
    ``.NAME.embed-partN-of-W.tmp`` of a multi-process run, whose names carry no PID. Returns the deleted paths.
    """
    from modeling_elmo.inference.hdf5_file import remove_file

    folder, name = os.path.split(os.path.abspath(output))
    prefix = f".{name}."
    uid = os.getuid() if hasattr(os, "getuid") else None
    removed = []
    for entry in os.scandir(folder):
        if not entry.name.startswith(prefix):
            continue
        match = _STALE_TEMP.fullmatch(entry.name[len(prefix) :])
        if match is None or not entry.is_file(follow_symlinks=False):
            continue
        if match["pid"] is None:
            if not locked:
                continue
        elif int(match["pid"]) != os.getpid() and _pid_alive(int(match["pid"])):
            continue
        if uid is not None and entry.stat(follow_symlinks=False).st_uid != uid:
            continue
        remove_file(entry.path)
        removed.append(entry.path)
    return removed


def _publish(temp: str, output: str, overwrite: bool) -> None:
    """Give the complete file ``temp`` the name ``output``. With ``overwrite`` it replaces whatever is there;
    without, it never replaces a file, even one that another program created while this run was writing:
    ``os.link`` fails if ``output`` exists, where ``os.replace`` would silently replace it."""
    from modeling_elmo.inference.hdf5_file import remove_file

    if overwrite:
        os.replace(temp, output)
        return
    appeared = CliError(
        f"{output} was created by another program while this run was writing it; it was left as it is "
        "(pass --overwrite to replace it)"
    )
    try:
        os.link(temp, output)
    except FileExistsError:
        raise appeared from None
    except OSError:  # a file system without hard links: check, then rename (the lock keeps `elmo embed` out)
        if os.path.exists(output):
            raise appeared from None
        os.replace(temp, output)
        return
    remove_file(temp)


def run_embed(args: argparse.Namespace) -> int:
    """``elmo embed``: see the subcommand's ``--help``."""
    world = int(os.environ.get("WORLD_SIZE", "1") or 1)
    rank = int(os.environ.get("RANK", "0") or 0)
    local_rank = int(os.environ.get("LOCAL_RANK", str(rank)) or 0)
    if args.output_file is not None:  # AllenNLP's order: elmo embed INPUT OUTPUT
        if args.output is not None:
            raise CliError(f"two outputs: {args.output_file} and --output {args.output}; give one")
        args.output = args.output_file
    if args.output is None:
        args.output = DEFAULT_EMBED_OUTPUT
    if args.output_type in DEPRECATED_OUTPUT_TYPES:
        new = DEPRECATED_OUTPUT_TYPES[args.output_type]
        if rank == 0:
            print(
                f"elmo embed: note: --output_type {args.output_type} is deprecated and will be removed in the next "
                f"release; use --output_type {new}",
                file=sys.stderr,
            )
        args.output_type = new
    output = args.output
    if args.batch_size < 1 or args.max_batch_words < 1:
        raise CliError(
            f"--batch_size and --max_batch_words must be positive, got {args.batch_size} and {args.max_batch_words}"
        )
    if os.path.isdir(output):
        raise CliError(f"--output {output} is a folder; give a file name such as out.hdf5")
    if not os.path.isdir(os.path.dirname(os.path.abspath(output))):
        raise CliError(f"--output {output}: the folder {os.path.dirname(os.path.abspath(output))} does not exist")
    if os.path.exists(output) and not args.overwrite:
        raise CliError(f"{output} exists; pass --overwrite to replace it")
    stdin = args.input == "-"
    if stdin and world > 1:
        raise CliError("several processes cannot share stdin: give a text file when running under accelerate/torchrun")
    if stdin and sys.stdin.isatty():
        raise CliError("no input: give a text file, or pipe text in (e.g. `echo 'Hello world .' | elmo embed`)")
    if not stdin and os.path.isdir(args.input):
        raise CliError(f"input {args.input} is a folder, not a text file: give a file (one sentence per line)")
    if not stdin and not os.path.isfile(args.input):
        what = "not found" if not os.path.exists(args.input) else "is not a regular file"
        raise CliError(f"input file {args.input} {what}")
    check_device_name(args.device)
    check_model_name(args.model)
    check_precision_flags(args)
    # Before the model loads: a file that is not UTF-8 fails now (its lines are counted on the way, for the bar).
    args.input_lines = None if stdin else scan_text_file(args.input)

    with _signals_unwind():
        if world == 1:
            return _embed_single(args, output)
        return _embed_distributed(args, output, rank, world, local_rank)


def _start_output(args, output: str) -> int | None:
    """Lock ``output``, delete dead runs' partial files, and check again, under the lock, that it may be
    written. Returns the lock for [`_unlock_output`]."""
    lock = _lock_output(output)
    try:
        remove_stale_partials(output, locked=lock is not None)
        if os.path.exists(output) and not args.overwrite:
            raise CliError(f"{output} exists; pass --overwrite to replace it")
    except BaseException:
        _unlock_output(output, lock)
        raise
    return lock


def _embed_into(args, path: str, rank: int, world: int, local_rank: int) -> int:
    """Embed this process's share of the input into ``path``; returns the number of sentences."""
    from modeling_elmo.inference.hdf5_file import write_sentences

    device = resolve_device(args.device, local_rank)
    resolve_precision(args, device, say=rank == 0)  # the choice is said once
    tokenizer, model = load_model(args.model, device, args.dtype, args.quantize)
    if args.output_type not in ("all", "top", "average") and not model.config.num_output_representations:
        raise CliError(
            f"--output_type {args.output_type} needs a scalar mix; this model has none (use all, top or average)"
        )
    stream = sys.stdin if args.input == "-" else open(args.input, encoding="utf-8")  # noqa: SIM115
    total = None
    if args.input != "-" and not args.raw:
        lines = args.input_lines if getattr(args, "input_lines", None) is not None else scan_text_file(args.input)
        total = max(0, (lines - rank + world - 1) // world)
    attrs = {
        "output_type": args.output_type,
        "model": describe_model(args.model),
        "num_layers": model.config.n_layers + 1,
        "dim": 2 * model.config.projection_dim,
        "input_format": "raw" if args.raw else "tokenized" if args.tokenized else "lines",
        "precision": args.quantize or args.dtype,  # the model's products; the file is float32 either way
    }
    try:
        sentences = read_sentences(stream, args.raw)
        if world > 1:
            sentences = (s for i, s in enumerate(sentences) if i % world == rank)
        return write_sentences(
            path,
            model,
            tokenizer,
            sentences,
            args.output_type,
            args.batch_size,
            args.max_batch_words,
            progress=not args.disable_tqdm and rank == 0,
            total=total,
            attrs=attrs,
            label=args.output,
            tokenized=args.tokenized,
            sentence_index="none" if args.forget_sentences else "list" if world > 1 else "json",
        )
    except UnicodeDecodeError as err:
        raise CliError(f"{args.input} is not UTF-8 text ({err}); convert it, e.g. with iconv") from err
    finally:
        if stream is not sys.stdin:
            stream.close()


def _embed_single(args, output: str) -> int:
    from modeling_elmo.inference.hdf5_file import remove_file, temp_name

    lock = _start_output(args, output)
    try:
        temp = temp_name(output, f"embed-partial-{os.getpid()}")
        try:
            count = _embed_into(args, temp, 0, 1, 0)
            _publish(temp, output, args.overwrite)
        except BaseException:
            remove_file(temp)
            raise
    finally:
        _unlock_output(output, lock)
    _report_written(args, count, output)
    return 0


def _sentences(count: int) -> str:
    return f"{count} sentence" if count == 1 else f"{count} sentences"


def _report_written(args, count: int, output: str, world: int = 1) -> None:
    """The last line of `elmo embed` (stderr), and a warning when the input held no sentence at all: the run
    succeeds (exit 0, a valid file of zero sentences, so that a script over many files goes on), but an empty
    input is most often a mistake (the wrong file, a pipe that sent nothing)."""
    processes = f" from {world} processes" if world > 1 else ""
    print(f"Wrote {_sentences(count)} ({args.output_type}){processes} to {output}", file=sys.stderr)
    if count == 0:
        source = "stdin" if args.input == "-" else args.input
        print(
            f"elmo embed: warning: no sentences were read from {source}; {output} holds none",
            file=sys.stderr,
        )


def _embed_distributed(args, output: str, rank: int, world: int, local_rank: int) -> int:
    import torch
    import torch.distributed as dist

    from modeling_elmo.inference.hdf5_file import EmbeddingFileError, merge_parts, remove_file, temp_name

    started_here = not dist.is_initialized()
    if started_here:
        dist.init_process_group(backend="gloo")  # only a status flag travels; embeddings stay on each device

    def all_ok(ok: bool) -> bool:
        flag = torch.tensor([0 if ok else 1])
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return flag.item() == 0

    parts = [temp_name(output, f"embed-part{r}-of-{world}") for r in range(world)]
    lock = None
    writing = False  # until process 0 holds the lock, the part names may be another run's: leave them
    try:
        error: BaseException | None = None
        if rank == 0:  # process 0 holds the output's lock for the whole run; nobody writes before it has it
            try:
                lock = _start_output(args, output)
            except Exception as err:
                error = err
        if not all_ok(error is None):
            if error is not None:
                raise error
            raise CliError(f"process 0 could not start writing {output} (see its message); process {rank} stopped")
        writing = True
        try:
            _embed_into(args, parts[rank], rank, world, local_rank)
        except Exception as err:  # every process must reach the collective below
            error = err
        if not all_ok(error is None):
            remove_file(parts[rank])
            if error is not None:
                raise error
            raise CliError(f"another process failed (see its message); process {rank} stopped too")
        merge_error: BaseException | None = None
        if rank == 0:
            temp = temp_name(output, f"embed-merging-{os.getpid()}")
            try:
                count = merge_parts(parts, temp, label=output)
                _publish(temp, output, args.overwrite)
                for part in parts:
                    remove_file(part)
                _report_written(args, count, output, world)
            except Exception as err:
                remove_file(temp)
                merge_error = err
        if not all_ok(merge_error is None):
            remove_file(parts[rank])
            if merge_error is not None:
                if isinstance(merge_error, (CliError, EmbeddingFileError)):
                    raise merge_error
                raise CliError(f"merging the part files into {output} failed: {merge_error}") from merge_error
            raise CliError("process 0 could not merge the part files (see its message)")
        return 0
    except BaseException:
        if writing:
            remove_file(parts[rank])
        raise
    finally:
        _unlock_output(output, lock)
        if started_here:
            dist.destroy_process_group()


# ---------------------------------------------------------------------------------------------
# elmo similar
# ---------------------------------------------------------------------------------------------


def word_similarities(model, tokenizer, sentences: list[str], word: str, layer: int | str):
    """Vectors of ``word`` in each sentence and their cosine similarities.

    Returns ``(labels, similarity, similarity_layer0)``: one label ``"<sentence>"`` per occurrence (a
    sentence with the word twice gives two), the ``(n, n)`` cosine matrix of the chosen layer's vectors
    (``layer`` an index into the ``L + 1`` biLM layers, or ``"elmo"`` for the model's scalar mix),
    and the same for layer 0 (characters only, no context). Matching is exact, or case-insensitive
    when the exact word is absent from a sentence.
    """
    import torch

    words = [tokenizer.tokenize(s) for s in sentences]
    positions = []
    for i, ws in enumerate(words):
        hits = [k for k, w in enumerate(ws) if w == word] or [k for k, w in enumerate(ws) if w.lower() == word.lower()]
        if not hits:
            raise CliError(f"the word {word!r} is not in sentence {i + 1}: {sentences[i]!r} (words: {' '.join(ws)})")
        positions += [(i, k) for k in hits]
    batch = tokenizer(words, is_split_into_words=True, padding=True, return_tensors="pt")
    batch = {k: v.to(model.device) for k, v in batch.items()}
    with torch.inference_mode():
        out = model(**batch, output_hidden_states=True)
    chosen = out.elmo if layer == "elmo" else out.hidden_states[layer]

    def cosine(states):
        vectors = torch.stack([states[i, k] for i, k in positions]).float()
        vectors = torch.nn.functional.normalize(vectors, dim=-1)
        return (vectors @ vectors.T).cpu()

    labels = [sentences[i] for i, _ in positions]
    return labels, cosine(chosen), cosine(out.hidden_states[0])


def format_similarity_table(word: str, labels: list[str], sim, width: int = 60) -> str:
    """A small text table: one row per occurrence, cosine similarity to each other occurrence."""
    shown = [label if len(label) <= width else label[: width - 3] + "..." for label in labels]
    label_width = max(len(s) for s in shown)
    head = f"{'#':>2}  {'sentence':<{label_width}}  " + "  ".join(f"{j + 1:>5}" for j in range(len(labels)))
    rows = [head]
    for i, label in enumerate(shown):
        cells = "  ".join(f"{float(sim[i, j]):5.3f}" for j in range(len(labels)))
        rows.append(f"{i + 1:>2}  {label:<{label_width}}  {cells}")
    return "\n".join(rows)


def sense_summary(example: SimilarExample, sim) -> str:
    """One line saying what the table of a built-in example shows: the mean cosine similarity of the word's vectors
    between sentences of the same sense against that between sentences of different senses. ``sim``: ``(4, 4)``."""
    first, second = example.senses
    same = (float(sim[0, 1]) + float(sim[2, 3])) / 2
    different = float(sim[:2, 2:].mean())
    pairs = f"(means of {first}/{first}, {second}/{second} and {first}/{second} pairs)"
    if same > different:
        return f"Same sense {same:.3f} > different sense {different:.3f} {pairs}: the vectors depend on the context."
    return (
        f"Same sense {same:.3f}, different sense {different:.3f} {pairs}: this model does not tell these senses apart."
    )


def run_similar(args: argparse.Namespace) -> int:
    """``elmo similar``: see the subcommand's ``--help``."""
    word = args.word or DEFAULT_SIMILAR_WORD
    example = None if args.sentences else SIMILAR_EXAMPLES.get(word)
    if not args.sentences and example is None:
        raise CliError(
            f"no built-in sentences for --word {word!r} (there are for {', '.join(sorted(SIMILAR_EXAMPLES))}): "
            "give two or more sentences that contain it"
        )
    sentences = list(args.sentences) if example is None else list(example.sentences)
    if len(sentences) < 2:
        raise CliError("give at least two sentences to compare")
    check_model_name(args.model)
    if args.plot:  # checked before the model loads
        plot_dir = Path(args.plot).resolve().parent
        if not plot_dir.is_dir():
            raise CliError(f"--plot {args.plot}: the folder {plot_dir} does not exist")
        if importlib.util.find_spec("matplotlib") is None:
            raise CliError('--plot needs matplotlib: pip install matplotlib (or pip install "modeling-elmo[demo]")')
    device = resolve_device(args.device)
    resolve_precision(args, device)
    tokenizer, model = load_model(args.model, device, args.dtype, args.quantize)
    n_layers = model.config.n_layers
    if args.layer == "elmo":
        layer: int | str = "elmo"
        if not model.config.num_output_representations:
            raise CliError("--layer elmo needs a scalar mix; this model has none (use a layer number)")
        layer_name = "the ELMo scalar mix"
    else:
        try:
            layer = n_layers if args.layer == "top" else int(args.layer)
        except ValueError:
            raise CliError(f"--layer must be top, elmo or a number 0..{n_layers}, got {args.layer!r}") from None
        if not 0 <= layer <= n_layers:
            raise CliError(f"--layer must be between 0 and {n_layers} for this model, got {layer}")
        layer_name = f"biLM layer {layer} of {n_layers}" + (" (characters only)" if layer == 0 else "")
    labels, sim, sim0 = word_similarities(model, tokenizer, sentences, word, layer)
    print(f"Model: {describe_model(args.model)}")
    print(f'Cosine similarity of "{word}" in context ({layer_name}):')
    print()
    print(format_similarity_table(word, labels, sim))
    print()
    off_diagonal = [float(sim0[i, j]) for i in range(len(labels)) for j in range(len(labels)) if i != j]
    low = min(off_diagonal) if off_diagonal else 1.0
    same = "1.000 for every pair" if low > 0.99995 else f"at least {low:.3f} for every pair"
    print(f"Layer 0 (characters only, no context) gives {same}: the differences above come from the context.")
    if example is not None and len(labels) == 4:
        print(sense_summary(example, sim))
    if args.plot:
        from modeling_elmo.plots import save_similarity_plot

        print(f"Wrote the heatmap to {save_similarity_plot(args.plot, word, labels, sim, layer_name)}")
    return 0


# ---------------------------------------------------------------------------------------------
# Delegated subcommands and the parser
# ---------------------------------------------------------------------------------------------


# `elmo convert`'s input files and how its messages name them (modeling_elmo.hub.convert._check_readable).
_CONVERT_INPUTS = {"--options_file": "options file", "--weight_file": "weight file", "--vocab_file": "vocab file"}


def check_convert_inputs(argv: list[str]) -> None:
    """[`CliError`] for an input file of ``elmo convert ARGV`` that does not exist or is a folder, before the
    converter (torch, transformers: seconds) is imported. Anything else, usage errors included, is left to the
    converter's own checks."""
    if any(arg in ("-h", "--help") for arg in argv):
        return
    light = argparse.ArgumentParser(add_help=False)
    for flag in (*_CONVERT_INPUTS, "--manylangs_dir"):
        light.add_argument(flag)
    try:
        with open(os.devnull, "w") as null, contextlib.redirect_stderr(null):  # its usage errors are not ours
            known, _ = light.parse_known_args(argv)
    except SystemExit:
        return
    if known.manylangs_dir is not None:  # these flags are then a usage error, which the converter names
        return
    for flag, label in _CONVERT_INPUTS.items():
        path = getattr(known, flag.lstrip("-"))
        if path is None:
            continue
        if not os.path.exists(path):
            raise CliError(f"{label} not found: {path}")
        if os.path.isdir(path):
            raise CliError(f"{label} {path} is a folder, not a file ({flag})")


def run_delegated(command: str, argv: list[str]) -> int:
    """Run ``module.main(argv)`` of a delegated subcommand, with clear errors when it cannot be imported."""
    module_name, _ = DELEGATED[command]
    if command == "convert":
        check_convert_inputs(argv)
    if command.startswith("train-"):  # the training commands need the [train] extra; say so before transformers does
        missing = [name for name in TRAIN_EXTRA if importlib.util.find_spec(name) is None]
        if missing:
            raise CliError(
                f"`elmo {command}` needs {', '.join(missing)} (the [train] extra): "
                'pip install "modeling-elmo[train]" (from a checkout: pip install -e ".[train]")'
            )
    try:
        import_package()
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        if err.name == module_name:
            raise CliError(
                f"`elmo {command}` needs {module_name}, which this installation does not have "
                "(update the package: pip install -e .)"
            ) from err
        raise CliError(f"`elmo {command}` needs the package {err.name!r}, which is not installed") from err
    main_function = getattr(module, "main", None)
    if main_function is None:
        raise CliError(f"{module_name} has no main(argv) function")
    # The training commands name themselves `elmo train-lm` etc. in usage lines and notes when they take `prog`.
    takes_prog = "prog" in inspect.signature(main_function).parameters
    try:
        code = main_function(argv, prog=f"elmo {command}") if takes_prog else main_function(argv)
    except SystemExit as exit_:  # argparse's --help and usage errors
        code = exit_.code
    if code is None:
        return 0
    return code if isinstance(code, int) else 1


class _HiddenAlias(argparse.Action):
    """A hidden spelling of another flag: stores into that flag's destination and prints a note on stderr."""

    def __init__(self, option_strings, dest, new: str, why: str, shown: str, **kwargs):
        super().__init__(option_strings, dest, **kwargs)
        self.new, self.why, self.shown = new, why, shown

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"{parser.prog}: note: {option_string} is {self.why}; use {self.shown}", file=sys.stderr)
        setattr(namespace, self.dest, self.const if self.nargs == 0 else values)


def _hidden_alias(
    parser: argparse.ArgumentParser,
    old: str,
    new: str,
    const=None,
    why: str = "deprecated and will be removed in the next release",
    shown: str | None = None,
    **kwargs,
) -> None:
    """Accept ``old`` as a spelling of ``new`` without showing it in ``--help`` (a switch when ``const`` is given)."""
    dest = new.lstrip("-").replace("-", "_")
    extra = {"nargs": 0, "const": const} if const is not None else {}
    parser.add_argument(
        old,
        dest=dest,
        action=_HiddenAlias,
        new=new,
        why=why,
        shown=shown or new,
        default=argparse.SUPPRESS,
        help=argparse.SUPPRESS,
        **extra,
        **kwargs,
    )


def _cuda_device(value: str) -> str:
    """AllenNLP's ``--cuda-device N`` as a ``--device``: -1 is the CPU."""
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a GPU number (-1 for the CPU), got {value!r}") from None
    return "cpu" if number < 0 else f"cuda:{number}"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="elmo",
        description="ELMo from the command line: convert weights, embed text, compare words in context, train.",
        epilog=(
            "Without --model, embed and similar use the bundled demo model (a toy-sized biLM trained on "
            "WikiText-2 by this project, not the released ELMo). Exit codes: 0 ok, 1 error, 2 usage."
        ),
    )
    parser.add_argument("--version", action="store_true", help="print the package version and exit")
    sub = parser.add_subparsers(dest="command", metavar="SUBCOMMAND")
    for name, (_, help_text) in DELEGATED.items():
        sub.add_parser(name, help=f"{help_text} (options: elmo {name} --help)", add_help=False)

    embed = sub.add_parser(
        "embed",
        help="embed sentences from a text file or stdin into an HDF5 file",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="""Embed text into an HDF5 file of ELMo vectors, in the layout of AllenNLP's `allennlp elmo`.

Input: one sentence per line (line i is sentence i; an empty line is a sentence of zero words; an empty file
gives a file of zero sentences, exit 0, with a warning on stderr), UTF-8 (checked before the model loads). Each
line is split into words by the model's tokenizer (punctuation split off, as the released models were trained), or
with --tokenized on whitespace only, keeping your tokens (`I do n't know .` stays 5 words), as AllenNLP and
flair read lines. With --raw: free text, paragraphs (separated by blank lines) split into sentences at . ! ?
followed by a capitalised word (simple rules; abbreviations such as Mr. and e.g. do not end a sentence).

Output (HDF5), beside AllenNLP's `allennlp elmo` file, point by point:
  dataset str(i), float32, for sentence i (0-based)  same names, same dtype
    all:     (L + 1, words, 2P), every biLM layer     = AllenNLP --all (the default here; AllenNLP had none)
    top:     (words, 2P), the last LSTM layer         = AllenNLP --top
    average: (words, 2P), mean of the L + 1 layers    = AllenNLP --average (mean over layers, per word)
    elmo:    (words, 2P), the model's scalar mix      (not in AllenNLP; untrained mix: equal weights)
    sentence_mean: (2P,), mean of the ELMo vectors over the words, zeros for no words  (not in AllenNLP)
  dataset sentence_to_index, shape (1,), a string    same: json.loads(f["sentence_to_index"][0]) gives
    holding the JSON {sentence: "i"}                 {stripped line: str(i)}; a repeated line maps to its
                                                     last index; --forget_sentences leaves it out (as
                                                     AllenNLP's --forget-sentences)
  attribute "words" of each sentence's dataset:      not in AllenNLP (there, the words are line.split())
    its words joined by single spaces
  file attributes output_type, model, num_layers,    not in AllenNLP
    dim, num_sentences, input_format
  empty lines: sentences of zero words, (L + 1, 0, 2P)  AllenNLP refused a file with empty lines
AllenNLP's `allennlp elmo IN OUT --top` is `elmo embed IN OUT --tokenized --output_type top` (--all, --top and
--average are accepted too); its --use-sentence-keys is not supported. The old names --output_type layers and
mean still work (= all, sentence_mean), with a note.

Sentences are batched by length (--batch_size, --max_batch_words). The file is written under a temporary name
(.OUT.embed-partial-PID.tmp) and renamed when complete: a failed, interrupted (Ctrl-C) or terminated (SIGTERM)
run leaves no file, and a run removes the partial files that killed runs (SIGKILL) left for the same output. A
full disk stops the run at the first failed write. A run holds a lock on OUT (.OUT.embed.lock) until it ends: a
second run to the same OUT is refused, with or without --overwrite, and without --overwrite a file that appears
at OUT during the run is never replaced. sentence_to_index holds every distinct sentence in memory until the
end; for corpora larger than memory, pass --forget_sentences.
Several processes: accelerate launch --multi_gpu --num_processes N -m elmo_cli embed FILE -o OUT
(also on CPU; or torchrun --nproc_per_node N -m elmo_cli embed ...). Each process embeds every
N-th sentence into a part file; process 0 merges them in input order and deletes the parts.""",
    )
    embed.add_argument("input", nargs="?", default="-", help="UTF-8 text file; - or nothing reads stdin")
    embed.add_argument(
        "output_file",
        nargs="?",
        metavar="output",
        help=f"HDF5 file to write, as AllenNLP's second argument (or -o; default: {DEFAULT_EMBED_OUTPUT})",
    )
    embed.add_argument("-o", "--output", help="HDF5 file to write (the same as the second argument)")
    embed.add_argument(
        "--output_type",
        choices=OUTPUT_TYPES + tuple(DEPRECATED_OUTPUT_TYPES),
        metavar="{" + ",".join(OUTPUT_TYPES) + "}",
        default="all",
        help="what to store per sentence (default: all; see the table above)",
    )
    for name in ("all", "top", "average"):  # AllenNLP's switches for the same outputs
        embed.add_argument(f"--{name}", dest="output_type", action="store_const", const=name, help=argparse.SUPPRESS)
    lines = embed.add_mutually_exclusive_group()
    lines.add_argument("--tokenized", action="store_true", help="lines are tokenized: split on whitespace only")
    lines.add_argument("--raw", action="store_true", help="input is free text to split into sentences")
    embed.add_argument("--model", help="model folder or Hub id (default: the bundled demo model)")
    embed.add_argument("--device", default="auto", help="auto (CUDA if available), cpu, cuda, cuda:1, mps")
    embed.add_argument("--batch_size", type=int, default=64, help="most sentences per batch (default: %(default)s)")
    embed.add_argument(
        "--max_batch_words", type=int, default=4096, help="most padded word slots per batch (default: %(default)s)"
    )
    embed.add_argument("--overwrite", action="store_true", help="replace an existing output file")
    embed.add_argument(
        "--forget_sentences", action="store_true", help="write no sentence_to_index (AllenNLP's --forget-sentences)"
    )
    # A switch (the training commands' --disable_tqdm also takes a value; here that would swallow the input file).
    embed.add_argument("--disable_tqdm", action="store_true", help="no progress bar (as in the training commands)")
    # The old dashed spellings (and AllenNLP's): hidden, each with a note.
    _hidden_alias(embed, "--output-type", "--output_type", choices=OUTPUT_TYPES + tuple(DEPRECATED_OUTPUT_TYPES))
    _hidden_alias(embed, "--batch-size", "--batch_size", type=int)
    _hidden_alias(embed, "--max-batch-words", "--max_batch_words", type=int)
    _hidden_alias(embed, "--no-progress", "--disable_tqdm", const=True)
    _hidden_alias(embed, "--forget-sentences", "--forget_sentences", const=True, why="AllenNLP's spelling")
    _hidden_alias(
        embed, "--cuda-device", "--device", type=_cuda_device, why="AllenNLP's spelling", shown="--device cuda:N"
    )
    embed.add_argument(
        "--dtype",
        choices=["float32", "bfloat16", "float16"],
        help="precision of the weights and products; the cell state stays float32, the file float32 "
        "(bfloat16: faster on CPUs with AVX-512 BF16 or AMX; default: float32)",
    )
    embed.add_argument(
        "--quantize",
        choices=["int8"],
        help="int8 products (weights per channel, activations per call) on CPU, for a float32 model",
    )
    _add_precision_flag(embed)
    embed.set_defaults(func=run_embed)

    similar = sub.add_parser(
        "similar",
        help="compare one word's vectors in different sentences (the demo: one word, two senses)",
        description=(
            "Print the cosine similarities of WORD's contextual vectors across sentences: the same word gets "
            "different ELMo vectors in different contexts. Without sentences, compares WORD in two sentences of "
            f"each of two senses, built in for {' and '.join(repr(w) for w in SIMILAR_EXAMPLES)} (default: "
            f"{DEFAULT_SIMILAR_WORD!r}, the word whose senses the demo model separates best, measured by "
            "benchmarks/pick_demo_word.py; with a converted ELMo, try --word bank), and prints the mean "
            "similarity within and across senses."
        ),
    )
    similar.add_argument(
        "sentences", nargs="*", help="two or more sentences that contain WORD (default: the built-in examples)"
    )
    similar.add_argument("--word", help=f"the word to compare (default: {DEFAULT_SIMILAR_WORD})")
    similar.add_argument(
        "--layer", default="top", help="top (default), elmo (the scalar mix) or a layer number 0..L (0: characters)"
    )
    similar.add_argument("--model", help="model folder or Hub id (default: the bundled demo model)")
    similar.add_argument("--device", default="auto", help="auto (CUDA if available), cpu, cuda, mps")
    similar.add_argument("--plot", metavar="FILE", help="also draw the similarity heatmap into FILE (.png, .svg, .pdf)")
    _add_precision_flag(similar)
    similar.set_defaults(func=run_similar)
    return parser


def _add_precision_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--precision",
        choices=["auto", "float32", "bfloat16", "int8"],
        help="auto: the fastest precision whose error this CPU (or GPU) keeps within the documented bound, said on "
        "stderr (docs/speed.md); or one by name (default: float32)",
    )


def import_package() -> None:
    """Import ``modeling_elmo`` (which registers it with transformers) for a subcommand. The command's own output
    leaves out transformers' notice that the package's class now serves the stock "token-classification" task: a
    Python user sees it once, a command's user has nothing to do with it."""
    if "modeling_elmo" in sys.modules:
        return
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        importlib.import_module("modeling_elmo")
    finally:
        hf_logging.set_verbosity(verbosity)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``elmo`` command; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv and argv[0] in DELEGATED:
            return run_delegated(argv[0], argv[1:])
        parser = build_parser()
        try:
            args = parser.parse_args(argv)
        except SystemExit as exit_:
            return exit_.code if isinstance(exit_.code, int) else 2
        if args.version:
            from importlib.metadata import PackageNotFoundError, version

            try:
                print(f"elmo {version('modeling-elmo')}")
            except PackageNotFoundError:
                print("elmo (package not installed)")
            return 0
        if args.command is None:
            parser.print_help(sys.stderr)
            return 2
        import_package()
        return args.func(args)
    except CliError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except OSError as err:  # writing the output, reading the input...
        print(f"error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Terminated:  # SIGTERM during `elmo embed`: its partial output is removed on the way out
        print("terminated", file=sys.stderr)
        return 128 + signal.SIGTERM


def convert_main() -> int:
    """Entry point of ``elmo-convert``: the same as ``elmo convert`` (and as quiet)."""
    return main(["convert", *sys.argv[1:]])


if __name__ == "__main__":
    sys.exit(main())
