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
