"""``elmo download``'s flags (the download: ``modeling_elmo/commands/download.py``, ``modeling_elmo.hub.download``)."""

from __future__ import annotations

import argparse

# The environment variables of modeling_elmo.hub.download(_core), named here without importing it (it would import
# the package); tests/test_cli_layout.py checks that they agree.
CACHE_DIR_ENV = "ELMO_CACHE_DIR"
BASE_URL_ENV = "ELMO_DOWNLOAD_BASE_URL"
MIN_RATE_ENV = "ELMO_DOWNLOAD_MIN_RATE"
DEFAULT_BASE_URL = "https://s3-us-west-2.amazonaws.com/allennlp/models/elmo/"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Download a released ELMo model from AllenNLP (options.json + HDF5 weights), check it, convert it once "
        "into the cache, and print the folder (which --model, from_pretrained and the training commands take). "
        "An interrupted download resumes; a second call uses the cache without any request."
    )
    parser.epilog = (
        f"Names: elmo download --list. Environment: {CACHE_DIR_ENV} (cache folder), {BASE_URL_ENV} (a mirror of "
        f"{DEFAULT_BASE_URL}), {MIN_RATE_ENV} (bytes/s a download must average over each minute, default 1024, 0 for "
        "none), HF_HUB_OFFLINE=1 (cache only)."
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
