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

from elmo_flags.download import add_arguments

from ..hub.download import (
    ALIASES,
    RELEASED_MODELS,
    download_released_model,
    lm_head_urls,
    model_urls,
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
