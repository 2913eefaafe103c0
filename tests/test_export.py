"""Export (issue #5): ElmoExportWrapper equals the eager model; torch.export and ONNX graphs with dynamic batch
size and length equal it too (1e-5), on shapes other than the export example's."""

from __future__ import annotations

import pytest
import torch

from modeling_elmo import ElmoConfig, ElmoModel
from modeling_elmo.utils.export_elmo import (
    ElmoExportWrapper,
    check_export_inputs,
    example_inputs,
    export_onnx,
    export_program,
)

# The exported program vs the eager model: another graph of the same float32 ops (a batching-like rounding
# difference), measured at most 7.2e-7 on values up to 2.6; the 1e-5 batch-invariance bound.
TOLERANCE = 1e-5
# (batch, words) unlike the export example (2, 3): one sentence of one word, and a bigger padded batch.
SHAPES = [(1, 1), (4, 9)]


@pytest.fixture(scope="module")
def model() -> ElmoModel:
    torch.manual_seed(0)
    config = ElmoConfig(
        lstm_dim=32,
        projection_dim=8,
        char_embedding_dim=4,
        char_cnn_filters=[[1, 4], [2, 8]],
        n_highway=1,
        initializer_range=0.3,
        scalar_mix_layer_norm="token",
    )
    model = ElmoModel(config).eval()
    with torch.no_grad():  # a non-trivial mix
        model.scalar_mixes[0].scalar_parameters.copy_(torch.tensor([0.5, -0.2, 0.1]))
        model.scalar_mixes[0].gamma.fill_(1.5)
    return model


@pytest.fixture(scope="module")
def program(model):
    return export_program(ElmoExportWrapper(model))


def _eager(model, ids, mask):
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, output_hidden_states=True)
    return out.elmo, torch.stack(out.hidden_states)


@pytest.mark.parametrize("shape", [(2, 3), *SHAPES, (3, 7)])
def test_wrapper_equals_eager_model(model, shape):
    ids, mask = example_inputs(model.config, *shape, seed=sum(shape))
    with torch.no_grad():
        elmo, layers = ElmoExportWrapper(model)(ids, mask)
    expected_elmo, expected_layers = _eager(model, ids, mask)
    torch.testing.assert_close(elmo, expected_elmo, atol=TOLERANCE, rtol=0)
    torch.testing.assert_close(layers, expected_layers, atol=TOLERANCE, rtol=0)
    assert expected_elmo.abs().max() > 0.1  # not a trivially small comparison
    assert torch.all(elmo[~mask.bool()] == 0)


@pytest.mark.parametrize("shape", SHAPES)
def test_torch_export_dynamic_shapes(model, program, shape):
    ids, mask = example_inputs(model.config, *shape, seed=10 + sum(shape))
    with torch.no_grad():
        elmo, layers = program.module()(ids, mask)
    expected_elmo, expected_layers = _eager(model, ids, mask)
    torch.testing.assert_close(elmo, expected_elmo, atol=TOLERANCE, rtol=0)
    torch.testing.assert_close(layers, expected_layers, atol=TOLERANCE, rtol=0)


def test_onnx_runs_in_onnxruntime(model, tmp_path):
    pytest.importorskip("onnx", reason="ONNX export needs the onnx package (pip install onnx onnxscript)")
    pytest.importorskip("onnxscript", reason="the torch.onnx dynamo exporter needs onnxscript")
    ort = pytest.importorskip("onnxruntime", reason="running the ONNX file needs onnxruntime")
    path = export_onnx(ElmoExportWrapper(model), tmp_path / "elmo.onnx")
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == ["input_ids", "attention_mask"]
    for shape in SHAPES:
        ids, mask = example_inputs(model.config, *shape, seed=20 + sum(shape))
        elmo, layers = session.run(None, {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})
        expected_elmo, expected_layers = _eager(model, ids, mask)
        torch.testing.assert_close(torch.from_numpy(elmo), expected_elmo, atol=TOLERANCE, rtol=0)
        torch.testing.assert_close(torch.from_numpy(layers), expected_layers, atol=TOLERANCE, rtol=0)
    # Any ids at padded positions (as a pipeline's collation pads them), after the contract check: the same outputs.
    ids, mask = example_inputs(model.config, 4, 9, seed=30)
    junk = _junk_at_padding(ids, mask)
    check_export_inputs(junk.numpy(), mask.numpy(), model.config)
    elmo, _ = session.run(None, {"input_ids": junk.numpy(), "attention_mask": mask.numpy()})
    torch.testing.assert_close(torch.from_numpy(elmo), _eager(model, ids, mask)[0], atol=TOLERANCE, rtol=0)


def _junk_at_padding(ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``ids`` with out-of-range values (a word-level pad id, a negative id) where ``mask`` is 0."""
    assert not mask.bool().all()
    junk = torch.where(torch.rand(ids.shape, generator=torch.Generator().manual_seed(0)) < 0.5, 10_000, -5)
    return torch.where(mask.bool().unsqueeze(-1), ids, junk)


def test_ids_at_padded_positions_are_ignored_and_ids_at_words_checked(model, program):
    """The eager model, the wrapper and the exported program read only the words' ids; the contract check
    (check_export_inputs) refuses bad ids at words only, as the eager model does."""
    ids, mask = example_inputs(model.config, 4, 9, seed=31)
    junk = _junk_at_padding(ids, mask)
    expected_elmo, expected_layers = _eager(model, ids, mask)
    with torch.no_grad():
        for run in (lambda *x: _eager(model, *x), ElmoExportWrapper(model), program.module()):
            elmo, layers = run(junk, mask)
            torch.testing.assert_close(elmo, expected_elmo, atol=TOLERANCE, rtol=0)
            torch.testing.assert_close(layers, expected_layers, atol=TOLERANCE, rtol=0)
    check_export_inputs(junk, mask, model.config)
    bad = ids.clone()
    bad[0, 0, 3] = 262  # at a word
    with pytest.raises(ValueError, match=r"character ids must be in \[0, 262\)"):
        check_export_inputs(bad, mask, model.config)
    with pytest.raises(ValueError, match=r"character ids must be in \[0, 262\)"):
        _eager(model, bad, mask)


def test_wrapper_rejects_other_modules():
    with pytest.raises(TypeError, match="wraps an ElmoModel"):
        ElmoExportWrapper(torch.nn.Linear(2, 2))
