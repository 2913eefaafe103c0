"""The ``elmo convert`` command: original ELMo weights (or an ELMoForManyLangs folder) to a model folder.

Command::

    elmo convert --options_file OPTIONS.json --weight_file WEIGHTS.hdf5 \
        --output_dir OUT [--vocab_file VOCAB.txt] [--softmax_weight_file SOFTMAX.hdf5] [--overwrite]
    elmo convert --manylangs_dir DIR --output_dir OUT [--overwrite]

or ``python convert_original_weights.py ...`` from a checkout, or ``elmo-convert ...``. The conversion itself, with
its checks and its atomic output folder, is library code: ``modeling_elmo.hub.convert`` (:func:`convert`) and
``modeling_elmo.hub.convert_manylangs``.
"""

from __future__ import annotations

import argparse
import os
import sys

from elmo_flags.convert import add_arguments

from .common import UsageError, run_command

PROG = "elmo convert"


def push_to_hub(folder: str | os.PathLike, repo_id: str, private: bool | None = None) -> str:
    """Publish a converted ``folder`` as it is (weights, tokenizer, code files, model card) to the Hub model
    repository ``repo_id``, created if needed; returns the repository's URL. The token is the saved one
    (``hf auth login``) or ``HF_TOKEN``."""
    from huggingface_hub import HfApi

    api = HfApi()
    repo = api.create_repo(repo_id, private=private, exist_ok=True)
    repo_id = getattr(repo, "repo_id", repo_id)
    api.upload_folder(
        folder_path=os.fspath(folder),
        repo_id=repo_id,
        commit_message="Upload ELMo converted from the original weights with modeling_elmo",
    )
    return str(repo) if isinstance(repo, str) else f"https://huggingface.co/{repo_id}"  # a RepoUrl is its URL


def run(args: argparse.Namespace) -> int:
    """``elmo convert``: see ``--help``. Errors: ``error: ...`` and 1 for inputs the converter refuses or a failed
    write; [`UsageError`] for flags that do not go together."""
    if args.no_progress:
        print("note: --no_progress is deprecated and will be removed in the next release; use --disable_tqdm",
              file=sys.stderr)  # fmt: skip
    if args.private and not args.push_to_hub:
        raise UsageError("--private needs --push_to_hub REPO")
    if args.manylangs_dir is not None:
        if args.options_file or args.weight_file or args.vocab_file or args.softmax_weight_file or args.remote_code:
            raise UsageError(
                "--manylangs_dir takes no --options_file, --weight_file, --vocab_file, --softmax_weight_file or "
                "--remote_code"
            )
    elif not (args.options_file and args.weight_file):
        raise UsageError("the following arguments are required: --options_file, --weight_file (or --manylangs_dir)")
    if args.push_to_hub:  # a bad name fails now, not after the conversion
        from huggingface_hub.utils import HFValidationError, validate_repo_id

        try:
            validate_repo_id(args.push_to_hub)
        except HFValidationError as err:
            print(f"error: --push_to_hub {args.push_to_hub!r} is not a Hub repository id (owner/name): {err}",
                  file=sys.stderr)  # fmt: skip
            return 1
    from ..hub.convert import ConversionError, convert  # h5py: not for --help

    try:
        if args.manylangs_dir is not None:
            from ..hub.convert_manylangs import convert_manylangs

            out = convert_manylangs(args.manylangs_dir, args.output_dir, overwrite=args.overwrite)
        else:
            out = convert(
                args.options_file,
                args.weight_file,
                args.output_dir,
                vocab_file=args.vocab_file,
                overwrite=args.overwrite,
                progress=not (args.disable_tqdm or args.no_progress),
                softmax_weight_file=args.softmax_weight_file,
                remote_code=args.remote_code,
            )
    except (FileNotFoundError, ConversionError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except OSError as err:  # writing failed: permissions, disk full...; nothing was left behind
        print(f"error: could not write {args.output_dir}: {err}", file=sys.stderr)
        return 1
    print(f"Converted to {out}")
    if args.push_to_hub:
        try:
            url = push_to_hub(out, args.push_to_hub, private=args.private or None)
        except Exception as err:  # the Hub client raises HTTP, network, token and validation errors of many kinds
            print(
                f"error: converted to {out}, but publishing it to {args.push_to_hub} failed: {err}. The folder is "
                f"complete: publish it later with `hf upload {args.push_to_hub} {out}`",
                file=sys.stderr,
            )
            return 1
        print(f"Published to {url}")
    return 0


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    """``elmo convert ARGV`` (also ``python convert_original_weights.py``); returns the exit code."""
    return run_command(add_arguments, run, argv, prog)


if __name__ == "__main__":
    sys.exit(main())
