"""``elmo embed``: a text file (or stdin) to an HDF5 file of ELMo vectors, one dataset per sentence.

The layout is AllenNLP's ``allennlp elmo`` (see ``--help``). Under ``accelerate launch`` or ``torchrun`` (which set
``RANK``/``WORLD_SIZE``) each process embeds the sentences ``i`` with ``i % world_size == rank`` into a part file,
and process 0 merges the parts into one file in input order. The output is published by ``output_files``. With
``--output_dir`` (a dataset to Parquet shards) the run is ``embed_parquet``'s.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Iterator
from typing import TextIO

from .common import (
    CliError,
    add_precision_argument,
    check_device_name,
    check_model_name,
    check_precision_flags,
    check_text_line,
    describe_model,
    load_model,
    resolve_device,
    resolve_precision,
    scan_text_file,
    signals_unwind,
)
from .embed_parquet import EPILOG, add_dataset_arguments, wants_dataset
from .embed_parquet import run as run_parquet
from .output_files import check_output, finish_output, partial_name, publish, start_output, writing

COMMAND = "embed"
# `--output_type`: AllenNLP's three (same meanings as `allennlp elmo --all/--top/--average`), then this package's
# two. Kept equal to modeling_elmo.inference.embed_corpus.OUTPUTS (not imported: it imports torch).
OUTPUT_TYPES = ("all", "top", "average", "elmo", "sentence_mean")
# The old names, accepted with a note for one release.
DEPRECATED_OUTPUT_TYPES = {"layers": "all", "mean": "sentence_mean"}
DEFAULT_EMBED_OUTPUT = "elmo_embeddings.hdf5"

DESCRIPTION = """Embed text into an HDF5 file of ELMo vectors, in the layout of AllenNLP's `allennlp elmo`.

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
at OUT during the run is never replaced. OUT may not be the input file. sentence_to_index holds every distinct
sentence in memory until the end; for corpora larger than memory, pass --forget_sentences.
Several processes: accelerate launch --multi_gpu --num_processes N -m elmo_cli embed FILE -o OUT
(also on CPU; or torchrun --nproc_per_node N -m elmo_cli embed ...). Each process embeds every
N-th sentence into a part file; process 0 merges them in input order and deletes the parts."""


# ---------------------------------------------------------------------------------------------
# Arguments
# ---------------------------------------------------------------------------------------------


class _HiddenAlias(argparse.Action):
    """A hidden spelling of another flag: stores into that flag's destination and prints a note on stderr."""

    def __init__(self, option_strings, dest, new: str, why: str, shown: str, **kwargs):
        super().__init__(option_strings, dest, **kwargs)
        self.new, self.why, self.shown = new, why, shown

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"{parser.prog}: note: {option_string} is {self.why}; use {self.shown}", file=sys.stderr)
        setattr(namespace, self.dest, self.const if self.nargs == 0 else values)


def _hidden_alias(
    parser,
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


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``elmo embed``'s flags, one group each for the input, the output, the model and the batching: a new flag goes
    into its group's function below (or a new group of its own), and shows under that title in ``--help``."""
    parser.description = DESCRIPTION
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    add_input_arguments(parser.add_argument_group("input"))
    add_output_arguments(parser.add_argument_group("output"))
    add_model_arguments(parser.add_argument_group("model"))
    add_batching_arguments(parser.add_argument_group("batching"))
    add_dataset_arguments(parser.add_argument_group("dataset input, Parquet shards output (see the end)"))
    parser.epilog = EPILOG
    # The old dashed spellings (and AllenNLP's): hidden, each with a note.
    _hidden_alias(parser, "--output-type", "--output_type", choices=OUTPUT_TYPES + tuple(DEPRECATED_OUTPUT_TYPES))
    _hidden_alias(parser, "--batch-size", "--batch_size", type=int)
    _hidden_alias(parser, "--max-batch-words", "--max_batch_words", type=int)
    _hidden_alias(parser, "--no-progress", "--disable_tqdm", const=True)
    _hidden_alias(parser, "--forget-sentences", "--forget_sentences", const=True, why="AllenNLP's spelling")
    _hidden_alias(
        parser, "--cuda-device", "--device", type=_cuda_device, why="AllenNLP's spelling", shown="--device cuda:N"
    )


def add_input_arguments(group) -> None:
    group.add_argument("input", nargs="?", default="-", help="UTF-8 text file; - or nothing reads stdin")
    lines = group.add_mutually_exclusive_group()
    lines.add_argument("--tokenized", action="store_true", help="lines are tokenized: split on whitespace only")
    lines.add_argument("--raw", action="store_true", help="input is free text to split into sentences")


def add_output_arguments(group) -> None:
    group.add_argument(
        "output_file",
        nargs="?",
        metavar="output",
        help=f"HDF5 file to write, as AllenNLP's second argument (or -o; default: {DEFAULT_EMBED_OUTPUT})",
    )
    group.add_argument("-o", "--output", help="HDF5 file to write (the same as the second argument)")
    group.add_argument(
        "--output_type",
        choices=OUTPUT_TYPES + tuple(DEPRECATED_OUTPUT_TYPES),
        metavar="{" + ",".join(OUTPUT_TYPES) + "}",
        default="all",
        help="what to store per sentence (default: all; see the table above)",
    )
    for name in ("all", "top", "average"):  # AllenNLP's switches for the same outputs
        group.add_argument(f"--{name}", dest="output_type", action="store_const", const=name, help=argparse.SUPPRESS)
    group.add_argument("--overwrite", action="store_true", help="replace an existing output file")
    group.add_argument(
        "--forget_sentences", action="store_true", help="write no sentence_to_index (AllenNLP's --forget-sentences)"
    )


def add_model_arguments(group) -> None:
    group.add_argument("--model", help="model folder or Hub id (default: the bundled demo model)")
    group.add_argument("--device", default="auto", help="auto (CUDA if available), cpu, cuda, cuda:1, mps")
    group.add_argument(
        "--dtype",
        choices=["float32", "bfloat16", "float16"],
        help="precision of the weights and products; the cell state stays float32, the file float32 "
        "(bfloat16: faster on CPUs with AVX-512 BF16 or AMX; default: float32)",
    )
    group.add_argument(
        "--quantize",
        choices=["int8"],
        help="int8 products (weights per channel, activations per call) on CPU, for a float32 model",
    )
    add_precision_argument(group)


def add_batching_arguments(group) -> None:
    group.add_argument("--batch_size", type=int, default=64, help="most sentences per batch (default: %(default)s)")
    group.add_argument(
        "--max_batch_words", type=int, default=4096, help="most padded word slots per batch (default: %(default)s)"
    )
    # A switch (the training commands' --disable_tqdm also takes a value; here that would swallow the input file).
    group.add_argument("--disable_tqdm", action="store_true", help="no progress bar (as in the training commands)")


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
    name = getattr(stream, "name", None)
    source = "the input" if not isinstance(name, str) or name == "<stdin>" else name
    if not raw:
        for number, line in enumerate(stream, 1):
            check_text_line(source, number, line)
            yield line.rstrip("\r\n")
        return
    paragraph: list[str] = []
    for number, line in enumerate(stream, 1):
        check_text_line(source, number, line)
        if line.strip():
            paragraph.append(line)
            continue
        if paragraph:
            yield from split_sentences(" ".join(paragraph))
            paragraph = []
    if paragraph:
        yield from split_sentences(" ".join(paragraph))


# ---------------------------------------------------------------------------------------------
# Running
# ---------------------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    """``elmo embed``: see ``--help``. Errors: [`CliError`] (a bad input, output, model or device)."""
    if wants_dataset(args):  # a dataset to Parquet shards: modeling_elmo.commands.embed_parquet
        return run_parquet(args)
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
    stdin = args.input == "-"
    check_output(output, args.overwrite, inputs=[args.input])
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

    with signals_unwind():
        if world == 1:
            return _embed_single(args, output)
        return _embed_distributed(args, output, rank, world, local_rank)


def _embed_into(args, path: str, rank: int, world: int, local_rank: int) -> int:
    """Embed this process's share of the input into ``path``; returns the number of sentences."""
    from ..inference.hdf5_file import write_sentences

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
    with writing(output, COMMAND, args.overwrite, inputs=[args.input]) as temp:
        count = _embed_into(args, temp, 0, 1, 0)
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

    from ..inference.hdf5_file import EmbeddingFileError, merge_parts, remove_file, temp_name
    from ..training.distributed import finish_distributed

    started_here = not dist.is_initialized()
    if started_here:
        dist.init_process_group(backend="gloo")  # only a status flag travels; embeddings stay on each device

    def all_ok(ok: bool) -> bool:
        flag = torch.tensor([0 if ok else 1])
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return flag.item() == 0

    # Named without a PID, so that every process knows them (see output_files.remove_stale_partials).
    parts = [temp_name(output, f"{COMMAND}-part{r}-of-{world}") for r in range(world)]
    lock = None
    writing = False  # until process 0 holds the lock, the part names may be another run's: leave them
    try:
        error: BaseException | None = None
        if rank == 0:  # process 0 holds the output's lock for the whole run; nobody writes before it has it
            try:
                lock = start_output(output, COMMAND, args.overwrite, [args.input])
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
            temp = partial_name(output, COMMAND, "merging")
            try:
                count = merge_parts(parts, temp, label=output)
                publish(temp, output, args.overwrite)
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
        finish_distributed(destroy=started_here)  # a barrier, then the group we started ends, on every process
        return 0
    except BaseException:
        if writing:
            remove_file(parts[rank])
        raise
    finally:
        finish_output(output, COMMAND, lock)
        if started_here and dist.is_initialized():  # a failed run: no barrier (another process may be gone)
            dist.destroy_process_group()
