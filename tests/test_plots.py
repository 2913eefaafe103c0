"""Plots: ``elmo similar --plot FILE`` (the similarity heatmap) and the scalar-mix weights of a model."""

from __future__ import annotations

import pytest
import torch

from elmo_cli import main
from modeling_elmo import ElmoModel
from modeling_elmo.demo_models.model import DEMO_MODEL_DIR
from modeling_elmo.plots import save_scalar_mix_plot, scalar_mix_weights

pytest.importorskip("matplotlib")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _decoded_size(path):
    from matplotlib.image import imread

    height, width, _ = imread(path).shape  # a whole image, not a truncated file
    return height, width


def test_similar_plot_writes_the_heatmap(tmp_path, capsys):
    plot = tmp_path / "record.png"
    assert main(["similar", "--device", "cpu", "--plot", str(plot)]) == 0
    assert f"Wrote the heatmap to {plot}" in capsys.readouterr().out
    assert plot.read_bytes()[:8] == PNG_SIGNATURE
    height, width = _decoded_size(plot)
    assert height > 150 and width > 300
    assert [p.name for p in tmp_path.iterdir()] == ["record.png"]  # no partial file left


def test_similar_plot_into_a_missing_folder_is_refused_before_the_model_loads(tmp_path, capsys):
    assert main(["similar", "--model", str(tmp_path / "no-model"), "--plot", str(tmp_path / "no" / "x.png")]) == 1
    err = capsys.readouterr().err
    assert "--plot" in err and "does not exist" in err  # the plot folder is named, not the missing model


def test_scalar_mix_weights_are_the_softmax_of_the_parameters(tmp_path):
    model = ElmoModel.from_pretrained(DEMO_MODEL_DIR)
    with torch.no_grad():
        model.scalar_mixes[0].scalar_parameters.copy_(torch.tensor([0.0, 1.0, 2.0]))
        model.scalar_mixes[0].gamma.fill_(0.5)
    ((weights, gamma),) = scalar_mix_weights(model)
    e = [1.0, 2.718281828, 7.389056099]  # exp(0), exp(1), exp(2)
    assert weights == pytest.approx([x / sum(e) for x in e], abs=1e-6) and gamma == 0.5
    path = save_scalar_mix_plot(tmp_path / "mix.png", [(weights, gamma)], ["mix"])
    assert path.read_bytes()[:8] == PNG_SIGNATURE and min(_decoded_size(path)) > 100
    with pytest.raises(ValueError, match="no scalar mix"):
        save_scalar_mix_plot(tmp_path / "none.png", [])


def test_a_big_heatmap_costs_about_linearly(tmp_path):
    """200 sentences (3 layers, as the demo draws them): no number in the 40,000 cells of each heatmap, about
    ``TICK_LABELS_MAX`` ticks, and a figure of bounded height. Once, every cell got a text label and the figure grew
    with the rows: 128 s and gigabytes for 200 lines in the web demo."""
    from modeling_elmo.plots import CELL_VALUES_MAX, MAX_FIGURE_HEIGHT, TICK_LABELS_MAX, similarity_figure

    n = 200
    torch.manual_seed(0)
    vectors = torch.nn.functional.normalize(torch.randn(n, 8), dim=-1)
    sim = vectors @ vectors.T
    fig = similarity_figure("word", [f"sentence {i}" for i in range(n)], [sim] * 3, ["a", "b", "c"])
    heatmaps = fig.axes[:3]
    assert sum(len(ax.texts) for ax in heatmaps) == 0
    assert all(len(ax.get_yticks()) <= TICK_LABELS_MAX and len(ax.get_xticks()) <= TICK_LABELS_MAX for ax in heatmaps)
    assert fig.get_figheight() <= MAX_FIGURE_HEIGHT
    fig.savefig(tmp_path / "big.png", dpi=100)
    assert min(_decoded_size(tmp_path / "big.png")) > 300

    small = similarity_figure("word", ["a", "b", "c", "d"], [sim[:4, :4]], ["top"])
    (ax,) = small.axes[:1]
    assert len(ax.texts) == 16 and 4 <= CELL_VALUES_MAX  # a small table keeps its values in the cells
    assert [t.get_text() for t in ax.get_yticklabels()] == ["1: a", "2: b", "3: c", "4: d"]
    with pytest.raises(ValueError, match=r"sim must be \(3, 3\)"):
        similarity_figure("word", ["a", "b", "c"], [sim[:4, :4]], ["top"])
    import matplotlib.pyplot as plt

    plt.close("all")
