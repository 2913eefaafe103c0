"""Export (issue #5): ElmoExportWrapper equals the eager model; torch.export and ONNX graphs with dynamic batch
size and length equal it too (1e-5), on shapes other than the export example's."""

from __future__ import annotations

import pytest
import torch

from modeling_elmo import ElmoConfig, ElmoModel
from modeling_elmo.inference.export import (
    ElmoExportWrapper,
    ElmoOnnxSession,
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


@pytest.fixture(scope="module")
def onnx_path(model, tmp_path_factory) -> str:
    """The model exported to ONNX once (about a minute on a busy machine)."""
    pytest.importorskip("onnx", reason="ONNX export needs the [export] extra")
    pytest.importorskip("onnxscript", reason="the torch.onnx dynamo exporter needs the [export] extra")
    pytest.importorskip("onnxruntime", reason="running the ONNX file (onnxruntime) needs the [test] extra")
    return export_onnx(ElmoExportWrapper(model), tmp_path_factory.mktemp("onnx") / "elmo.onnx")


def test_onnx_runs_in_onnxruntime(model, onnx_path):
    import onnxruntime as ort

    session = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
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


# ---------------------------------------------------------------------------------------------
# Inputs the eager model refuses (issue 26, 6): NaN rows in the graphs, errors from ElmoOnnxSession
# ---------------------------------------------------------------------------------------------


def _broken_batches(model) -> dict[str, tuple[torch.Tensor, torch.Tensor, int, str]]:
    """``name -> (input_ids, attention_mask, broken row, the eager model's error)``: row 1 of a (3, 6) batch
    breaks the contract, rows 0 and 2 keep it."""
    ids, mask = example_inputs(model.config, 3, 6, seed=40)
    mask[1] = torch.tensor([1, 1, 1, 0, 0, 0])
    ids[1, 3:] = 0
    left_ids, left_mask = ids.clone(), mask.clone()
    left_ids[1], left_mask[1] = ids[1].roll(3, dims=0), mask[1].roll(3)  # the same words, left-padded
    negative = ids.clone()
    negative[1, 0, 2] = -3  # a character id at a word
    two = mask.clone()
    two[1, 0] = 2
    return {
        "left-padded": (left_ids, left_mask, 1, "right-padded"),
        "id -3": (negative, mask, 1, r"character ids must be in \[0, 262\)"),
        "mask 2": (ids, two, 1, "must hold only 0 .padding. and 1 .words."),
    }


def _assert_nan_row_only(model, ids, mask, elmo, layers, row: int) -> None:
    """Row ``row`` is NaN everywhere; the others equal the eager model's outputs for them alone (the sentences of
    a batch are independent)."""
    elmo, layers = torch.as_tensor(elmo), torch.as_tensor(layers)
    assert torch.isnan(elmo[row]).all() and torch.isnan(layers[:, row]).all()
    keep = [r for r in range(ids.shape[0]) if r != row]
    expected_elmo, expected_layers = _eager(model, ids[keep], mask[keep])
    torch.testing.assert_close(elmo[keep], expected_elmo, atol=TOLERANCE, rtol=0)
    torch.testing.assert_close(layers[:, keep], expected_layers, atol=TOLERANCE, rtol=0)


@pytest.mark.parametrize("case", ["left-padded", "id -3", "mask 2"])
def test_torch_export_program_gives_nan_for_a_sentence_outside_the_contract(model, program, case):
    """Before: a left-padded mask and mask value 2 gave finite, meaningless outputs, id -3 an IndexError."""
    ids, mask, row, error = _broken_batches(model)[case]
    with pytest.raises(ValueError, match=error):
        _eager(model, ids, mask)
    with pytest.raises(ValueError, match=error):
        check_export_inputs(ids, mask, model.config)
    with torch.no_grad():
        elmo, layers = program.module()(ids, mask)
    _assert_nan_row_only(model, ids, mask, elmo, layers, row)


def test_onnx_graph_gives_nan_and_the_checked_session_refuses(model, onnx_path):
    """Before: the ONNX graph returned finite outputs for a left-padded mask, id -3 and mask value 2."""
    import onnxruntime as ort

    raw = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
    checked = ElmoOnnxSession(onnx_path)
    assert checked.max_characters_per_token == model.config.max_characters_per_token
    ids, mask = example_inputs(model.config, 3, 6, seed=41)
    expected_elmo, expected_layers = _eager(model, ids, mask)
    elmo, layers = checked(ids, mask)  # tensors or numpy arrays
    torch.testing.assert_close(torch.from_numpy(elmo), expected_elmo, atol=TOLERANCE, rtol=0)
    torch.testing.assert_close(torch.from_numpy(layers), expected_layers, atol=TOLERANCE, rtol=0)
    for bad_ids, bad_mask, row, error in _broken_batches(model).values():
        with pytest.raises(ValueError, match=error):
            checked(bad_ids.numpy(), bad_mask.numpy())
        elmo, layers = raw.run(None, {"input_ids": bad_ids.numpy(), "attention_mask": bad_mask.numpy()})
        _assert_nan_row_only(model, bad_ids, bad_mask, elmo, layers, row)
    with pytest.raises(ValueError, match="must be int64"):
        checked(ids.int(), mask)
    with pytest.raises(TypeError, match="numpy array or a torch.Tensor"):
        checked(ids.tolist(), mask)


def test_the_programs_size_bound_is_named_and_documented(model, program):
    """Issue 49: a ``torch.export`` program takes at most 4,096 sentences of 4,096 words (its ``Dim`` ranges) and
    said so nowhere; ``check_export_inputs`` names the bound, the docs state it, and an ONNX file has none."""
    from pathlib import Path

    from modeling_elmo.inference import export

    ids, mask = example_inputs(model.config, 1, export.MAX_WORDS + 1)
    with pytest.raises(ValueError, match=r"takes at most 4096 sentences of 4096 words"):
        check_export_inputs(ids, mask, model.config)
    check_export_inputs(ids, mask, model.config, program=False)  # the ONNX file's session checks no size
    with pytest.raises(Exception, match=r"<= 4096"):  # the program's own guard, which that message stands for
        program.module()(ids, mask)
    page = (Path(__file__).resolve().parents[1] / "docs" / "export-checks.md").read_text(encoding="utf-8")
    for text in (export.__doc__, export.export_program.__doc__, page):
        assert "4,096" in text
