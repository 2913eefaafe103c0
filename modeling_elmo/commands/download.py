"""The ``elmo download`` command: a released ELMo model by name, downloaded, converted once and cached.

Command::

    elmo download NAME [--cache_dir DIR] [--base_url URL] [--force] [--disable_tqdm]
    elmo download --list

prints the converted folder's path on stdout. The download, its checks and the cache are library code, in
``modeling_elmo.hub.download`` (``download_released_model``, ``resolve_pretrained``), which also serves
``--model NAME`` of the other commands.
"""

from __future__ import annotations

import argparse
import sys

from ..hub.download import (
    ALIASES,
    BASE_URL_ENV,
    CACHE_DIR_ENV,
    DEFAULT_BASE_URL,
    MIN_RATE_ENV,
    RELEASED_MODELS,
    download_released_model,
    lm_head_urls,
    model_urls,
    released_model_names,
)
from ..hub.download_manylangs import list_models
from .common import UsageError, run_command

PROG = "elmo download"


def _list_models(base_url: str | None) -> str:
    width = max(len(name) for name in RELEASED_MODELS)
    lines = []
    for name, model in RELEASED_MODELS.items():
        aliases = [alias for alias, target in ALIASES.items() if target == name]
        also = f" (also: {', '.join(aliases)})" if aliases else ""
        lines.append(f"{name:<{width}}  {model.description}{also}")
        lines.append(f"{'':<{width}}  {model_urls(name, base_url)[1]}")
        lines.extend(f"{'':<{width}}  {url}" for url in lm_head_urls(name, base_url) or ())
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Download a released ELMo model from AllenNLP (options.json + HDF5 weights), check it, convert it once "
        "into the cache, and print the folder (which --model, from_pretrained and the training commands take). "
        "An interrupted download resumes; a second call uses the cache without any request."
    )
    parser.epilog = (
        f"Names: {', '.join(released_model_names())}. Environment: {CACHE_DIR_ENV} (cache folder), "
        f"{BASE_URL_ENV} (a mirror of {DEFAULT_BASE_URL}), {MIN_RATE_ENV} (bytes/s a download must average over "
        "each minute, default 1024, 0 for none), HF_HUB_OFFLINE=1 (cache only)."
    )
    parser.add_argument(
        "name",
        nargs="?",
        help="released model: small, medium, original, original-5.5B, pubmed, pt; with the LM softmax: original-lm, "
        "original-5.5B-lm; or an ELMoForManyLangs language by ISO code or English name (de, German, manylangs-pt...)",
    )
    parser.add_argument("--list", action="store_true", help="list the released models and their URLs")
    parser.add_argument("--cache_dir", "--cache-dir", help=f"cache folder (default: ${CACHE_DIR_ENV} or HF_HOME's)")
    parser.add_argument("--base_url", "--base-url", help=f"where the files are (default: ${BASE_URL_ENV} or AllenNLP)")
    parser.add_argument("--force", action="store_true", help="download and convert again even if cached")
    parser.add_argument("--disable_tqdm", action="store_true", help="no progress bars (transformers' flag name)")
    parser.add_argument("--no_progress", action="store_true", help=argparse.SUPPRESS)  # the first spelling


def run(args: argparse.Namespace) -> int:
    """``elmo download``: prints the converted folder on stdout; ``error: ...`` on stderr and 1 on failure."""
    if args.list:
        print(_list_models(args.base_url))
        print(list_models(args.base_url))
        return 0
    if args.name is None:
        raise UsageError("give a model NAME (or --list)")
    try:
        folder = download_released_model(
            args.name,
            cache_dir=args.cache_dir,
            base_url=args.base_url,
            force=args.force,
            progress=not (args.disable_tqdm or args.no_progress),
        )
    except (ValueError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted: run the same command again to resume the download", file=sys.stderr)
        return 130
    print(folder)
    return 0


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    return run_command(add_arguments, run, argv, prog)


if __name__ == "__main__":
    sys.exit(main())
