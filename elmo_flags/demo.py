"""``elmo demo``'s flags (the web demo: ``modeling_elmo/commands/demo.py``)."""

from __future__ import annotations

import argparse

from . import port_number


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "A web demo of ELMo in the browser (Gradio), served on this machine: word senses (similarity "
        "heatmaps per layer), tagging (with --tagger) and fill-in-the-blank (for a model with an LM head)."
    )
    parser.add_argument("--model", help="model folder, Hub id or released name (default: the bundled demo model)")
    parser.add_argument("--tagger", metavar="FOLDER", help="a tagger folder made by `elmo train-tagger`")
    parser.add_argument("--port", type=port_number, default=7860, help="port to serve on (default: %(default)s)")
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to serve on (default: %(default)s, this machine only)"
    )
    parser.add_argument("--device", default="cpu", help="cpu (default), cuda, cuda:1, mps or auto")
