"""Plots: a word's similarity heatmap across sentences, and a tagger's learned scalar-mix weights per layer.

matplotlib is imported when a plot is drawn, with the non-interactive Agg backend when none was chosen (so that a
command or a server draws without a display). It comes with the [train] and [demo] extras.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path


def _pyplot():
    """``matplotlib.pyplot`` on the Agg backend, or a clear error when matplotlib is missing."""
    try:
        import matplotlib
    except ImportError as err:
        raise ImportError(
            'plots need matplotlib: pip install matplotlib (or pip install "modeling-elmo[train]")'
        ) from err
    if "matplotlib.pyplot" not in sys.modules:
        matplotlib.use("Agg")  # no display needed; a notebook that imported pyplot first keeps its backend
    import matplotlib.pyplot as plt

    return plt


# What keeps a heatmap's cost about linear in its rows n (a figure of n x n cells, one per layer, in a web server):
# the values are written in the cells up to CELL_VALUES_MAX rows (n^2 text labels), every row and column is named
# up to TICK_LABELS_MAX rows (then about that many ticks), and the figure grows with n up to MAX_FIGURE_HEIGHT.
CELL_VALUES_MAX = 12
TICK_LABELS_MAX = 30
MAX_FIGURE_HEIGHT = 9.0  # inches


def _short(text: str, width: int = 40) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def draw_similarity(ax, sim, labels: Sequence[str], title: str, show_labels: bool = True):
    """Draw the ``(n, n)`` cosine matrix ``sim`` on ``ax``; returns the image (for a colour bar).

    Rows and columns are numbered from 1 (rows also named by ``labels`` when ``show_labels``). Up to
    ``CELL_VALUES_MAX`` rows the values are written in the cells; past ``TICK_LABELS_MAX`` about that many ticks
    are numbered, and no row is named.
    """
    import numpy as np

    values = np.asarray(sim, dtype=np.float64)
    n = len(labels)
    if values.shape != (n, n):
        raise ValueError(f"sim must be ({n}, {n}), one row and column per label, got {values.shape}")
    low = min(0.0, float(values.min()))
    image = ax.imshow(values, vmin=low, vmax=1.0, cmap="viridis")
    step = -(-n // TICK_LABELS_MAX)  # 1 up to TICK_LABELS_MAX rows
    ticks = range(0, n, step)
    ax.set_xticks(ticks, [str(i + 1) for i in ticks])
    named = show_labels and step == 1
    ax.set_yticks(ticks, [f"{i + 1}: {_short(labels[i])}" if named else str(i + 1) for i in ticks])
    if n <= CELL_VALUES_MAX:
        for i in range(n):
            for j in range(n):
                # Dark text on the bright (high) end of viridis, white on the dark end.
                color = "black" if values[i, j] > low + 0.6 * (1.0 - low) else "white"
                ax.text(j, i, f"{values[i, j]:.2f}", ha="center", va="center", color=color, fontsize=8)
    ax.set_title(title, fontsize=10)
    return image


def similarity_figure(
    word: str, labels: Sequence[str], sims: Sequence, titles: Sequence[str], sentence_labels: bool = True
):
    """A figure with one heatmap per matrix in ``sims`` (e.g. one per biLM layer), side by side; the first one's rows
    are labelled with the (shortened) sentences, or only numbered when ``sentence_labels`` is false.

    Its height grows with the rows up to ``MAX_FIGURE_HEIGHT`` inches; see [`draw_similarity`] for the labels."""
    plt = _pyplot()
    n = len(sims)
    width = 3.2 * n + 3.0
    height = min(0.45 * len(labels) + 2.2, MAX_FIGURE_HEIGHT)
    fig, axes = plt.subplots(1, n, figsize=(width, height), squeeze=False)
    image = None
    for k, (ax, sim, title) in enumerate(zip(axes[0], sims, titles, strict=True)):
        image = draw_similarity(ax, sim, labels, title, show_labels=sentence_labels and k == 0)
    fig.colorbar(image, ax=axes[0].tolist(), shrink=0.8, label="cosine similarity")
    fig.suptitle(f'"{word}" in context: cosine similarity of its vectors', fontsize=11)
    return fig


def save_similarity_plot(path: str | os.PathLike, word: str, labels: Sequence[str], sim, title: str) -> Path:
    """``elmo similar --plot FILE``: the heatmap of one layer's matrix, saved as an image (PNG, SVG, PDF...)."""
    fig = similarity_figure(word, labels, [sim], [title])
    return _save(fig, path)


def scalar_mix_weights(model) -> list[tuple[list[float], float]]:
    """The normalised layer weights ``softmax(w)`` and ``gamma`` of each of ``model``'s scalar mixes.

    ``model``: an [`ElmoModel`] or a head with one (``model.elmo``). Returns one ``(weights, gamma)`` per mix,
    ``weights`` of length ``L + 1`` (layer 0 first).
    """
    import torch

    elmo = getattr(model, "elmo", model)
    result = []
    for mix in getattr(elmo, "scalar_mixes", ()):
        with torch.no_grad():
            weights = torch.softmax(mix.scalar_parameters.float(), dim=0).tolist()
            result.append((weights, float(mix.gamma.item())))
    return result


def save_scalar_mix_plot(path: str | os.PathLike, mixes: Sequence[tuple[Sequence[float], float]], names=None) -> Path:
    """A bar chart of each mix's layer weights (with its gamma in the legend), as in the paper's Figure 2."""
    if not mixes:
        raise ValueError("no scalar mix to plot (a model without ELMo mixes)")
    plt = _pyplot()
    names = list(names or [f"mix {k}" for k in range(len(mixes))])
    n_layers = len(mixes[0][0])
    fig, ax = plt.subplots(figsize=(1.2 * n_layers + 3.0, 3.2))
    width = 0.8 / len(mixes)
    for k, ((weights, gamma), name) in enumerate(zip(mixes, names, strict=True)):
        xs = [layer + (k - (len(mixes) - 1) / 2) * width for layer in range(n_layers)]
        bars = ax.bar(xs, weights, width=width, label=f"{name} (gamma {gamma:.2f})")
        ax.bar_label(bars, fmt="%.2f", fontsize=8)
    ax.axhline(1.0 / n_layers, color="gray", linestyle="--", linewidth=1, label="equal weights")
    ax.set_xticks(range(n_layers), ["0 (characters)"] + [f"{layer} (LSTM)" for layer in range(1, n_layers)])
    ax.set_xlabel("biLM layer")
    ax.set_ylabel("softmax-normalised weight")
    ax.set_ylim(0, max(max(w) for w, _ in mixes) * 1.15)
    ax.set_title("Learned scalar-mix weights per layer", fontsize=11)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the bars, never over them
    fig.tight_layout()
    return _save(fig, path)


def _save(fig, path: str | os.PathLike) -> Path:
    """Save under a temporary name and rename, so that a failed save leaves no half-written image."""
    plt = _pyplot()
    from ..inference.new_files import create_temp

    path = Path(path)
    out, temp = create_temp(path.parent, f".{path.name}.partial-", path.suffix)  # never through a planted link
    try:
        with out:
            fig.savefig(out, format=path.suffix[1:].lower() or None, dpi=110, bbox_inches="tight")
        os.replace(temp, path)
    finally:
        plt.close(fig)
        Path(temp).unlink(missing_ok=True)
    return path


__all__ = [
    "draw_similarity",
    "save_scalar_mix_plot",
    "save_similarity_plot",
    "scalar_mix_weights",
    "similarity_figure",
]
