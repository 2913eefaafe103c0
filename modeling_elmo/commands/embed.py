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

from elmo_flags.embed import DEFAULT_EMBED_OUTPUT, DEPRECATED_OUTPUT_TYPES

from .common import (
    CliError,
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
from .embed_parquet import run as run_parquet
from .embed_parquet import wants_dataset
from .output_files import (
    check_output,
    finish_output,
    model_files,
    partial_name,
    publish,
    start_output,
    writes_through,
    writing,
)

COMMAND = "embed"
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
    check_output(output, args.overwrite, inputs=[args.input, *model_files(args.model)])  # the model's files too
    if world > 1 and writes_through(output):
        raise CliError(
            f"{output} is a device or a pipe: several processes write part files beside the output and merge them "
            "into it; give a file name (or run one process)"
        )
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
    with writing(output, COMMAND, args.overwrite, inputs=[args.input, *model_files(args.model)]) as temp:
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
                lock = start_output(output, COMMAND, args.overwrite, [args.input, *model_files(args.model)])
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
