"""Runs ``examples/quickstart.ipynb`` from top to bottom (issue #7), so that it cannot rot."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
NOTEBOOK = REPO / "examples" / "quickstart.ipynb"


def test_quickstart_notebook_runs(tmp_path):
    nbformat = pytest.importorskip(
        "nbformat", reason="the notebook test needs the test extra: pip install -e '.[test]'"
    )
    nbclient = pytest.importorskip(
        "nbclient", reason="the notebook test needs the test extra: pip install -e '.[test]'"
    )
    pytest.importorskip("ipykernel", reason="the notebook test needs the test extra: pip install -e '.[test]'")
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(
        notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()  # raises CellExecutionError, with the cell and its traceback, if a cell fails
    outputs = "\n".join(
        output.get("text", "") for cell in notebook.cells if cell.cell_type == "code" for output in cell.outputs
    )
    assert "-> elmo" in outputs
    assert "layer 0 (characters only): min similarity 1.0" in outputs
    assert "training loss" in outputs or "skipping the tagger" in outputs
    images = [o for cell in notebook.cells for o in cell.get("outputs", []) if "image/png" in o.get("data", {})]
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        pass
    else:
        assert images, 'the "record" comparison should be plotted when matplotlib is installed'
