"""Run examples/quickstart.ipynb with nbclient (time-bounded) and save it with its outputs and plot.

Usage: python scripts/save_notebook_outputs.py [NOTEBOOK] [--timeout SECONDS]. Streams are tidied as a notebook
front end shows them: consecutive pieces joined, progress-bar redraws (carriage returns) reduced to their last state.
"""

from __future__ import annotations

import argparse
import re
import tempfile
from pathlib import Path

import nbclient
import nbformat

REPO = Path(__file__).resolve().parent.parent
# A headless kernel has no ipywidgets: tqdm.auto says so on stderr, which no notebook front end would show.
NOISE = re.compile(r".*TqdmWarning: IProgress not found.*\n(  from \.autonotebook import .*\n)?")


def _last_redraw(text: str) -> str:
    """What a terminal shows of ``text``: each line's last carriage-return segment."""
    return "\n".join(line.rsplit("\r", 1)[-1] for line in text.split("\n"))


def tidy(outputs: list) -> list:
    tidied: list = []
    for output in outputs:
        if output.output_type == "stream":
            if tidied and tidied[-1].output_type == "stream" and tidied[-1].name == output.name:
                tidied[-1].text += output.text
                continue
        tidied.append(output)
    kept = []
    for output in tidied:
        if output.output_type == "stream":
            output.text = NOISE.sub("", _last_redraw(output.text))
            output.text = re.sub(r"\n{2,}", "\n", output.text).lstrip("\n")
            if not output.text.strip():
                continue
        kept.append(output)
    return kept


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebook", nargs="?", default=str(REPO / "examples" / "quickstart.ipynb"))
    parser.add_argument("--timeout", type=int, default=300, help="seconds per cell (default: %(default)s)")
    args = parser.parse_args()
    notebook = nbformat.read(args.notebook, as_version=4)
    with tempfile.TemporaryDirectory() as work:  # the cells' working folder: nothing lands in the checkout
        client = nbclient.NotebookClient(
            notebook, timeout=args.timeout, kernel_name="python3", resources={"metadata": {"path": work}}
        )
        client.execute()
    for cell in notebook.cells:
        cell.metadata.pop("execution", None)  # timestamps: noise in the diff
        if cell.cell_type == "code":
            cell.outputs = tidy(cell.outputs)
    nbformat.write(notebook, args.notebook)
    print(f"saved {args.notebook} with its outputs")


if __name__ == "__main__":
    main()
