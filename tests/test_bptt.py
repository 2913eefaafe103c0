"""Backpropagation through time for the compiled path's training operators (``bptt_elmo.py``,
``elmo::bilstm_layer_train``, ``elmo::task_lstm_layer_train``): the gradients of eager autograd through the layers'
own forward (``ElmoBiLstmLayer``'s recurrence; ``nn.LSTM``'s kernel for the task BiLSTM), in the plain torch steps
and in the C++ ones (``tests/test_native_steps.py`` compares those two directly)."""

from __future__ import annotations

import pytest
import torch
from helpers import random_bilstm_layer

from modeling_elmo import compiled_ops_elmo as ops
from modeling_elmo.bptt_elmo import steps_backward, steps_saving
from modeling_elmo.compiled_ops_elmo import bilstm_layer_consts, call
from modeling_elmo.native_steps_elmo import native_steps_available
from modeling_elmo.task_lstm_elmo import ElmoTaskLstm

pytestmark = pytest.mark.usefixtures("one_thread")

BATCH_SIZES = [4, 4, 3, 3, 2, 1, 1]


@pytest.mark.parametrize("clips", [True, False], ids=["clips", "no_clips"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
def test_steps_backward_equals_autograd_through_the_layers_recurrence(dtype, clips):
    layer = random_bilstm_layer(dtype, clips)
    layer.use_prepacked_weights = False
    generator = torch.Generator().manual_seed(1)
    total, rows = sum(BATCH_SIZES), BATCH_SIZES[0]
    inputs = torch.randn(2, total, layer.projection_dim, generator=generator, dtype=dtype, requires_grad=True)
    zeros_h = inputs.new_zeros(2, rows, layer.projection_dim)
    zeros_c = inputs.new_zeros(2, rows, layer.lstm_dim)
    want, _, _ = layer(inputs, zeros_h, zeros_c, BATCH_SIZES)
    grad = torch.randn(want.shape, generator=generator, dtype=dtype)
    want.backward(grad)
    if clips:
        assert layer.cell_clip is not None and layer.proj_clip is not None
    with torch.no_grad():
        gates = inputs.new_empty(2, total + 5, 4 * layer.lstm_dim)  # room past the packed steps, as the operator's
        gates[:, :total] = layer.input_gates(inputs, layer.gate_bias())
        clip_values = (layer.cell_clip, layer.proj_clip)
        got, c_raw, p_raw = steps_saving(gates, BATCH_SIZES, layer.state_kernel, layer.projection, *clip_values)
        d_gates, d_state, d_projection = steps_backward(
            grad, gates, c_raw, p_raw, BATCH_SIZES, layer.state_kernel, layer.projection, *clip_values
        )
        if clips:  # the clips bind, so the masks are exercised
            assert (c_raw[:, :total].abs() > layer.cell_clip).float().mean() > 0.02
            assert (p_raw[:, :total].abs() > layer.proj_clip).float().mean() > 0.02
        # Measured: 0 in float64, up to 1.2e-6 in float32 (gradients up to ~5).
        tolerance = 1e-12 if dtype == torch.float64 else 1e-5
        torch.testing.assert_close(got, want, atol=tolerance, rtol=0)
        found = {
            "inputs": torch.bmm(d_gates, layer.input_kernel.transpose(1, 2)),
            "input_kernel": torch.bmm(inputs.transpose(1, 2), d_gates),
            "state_kernel": d_state,
            "bias": d_gates.sum(1),
            "projection": d_projection,
        }
        expected = {"inputs": inputs.grad, **{name: p.grad for name, p in layer.named_parameters()}}
        for name, value in found.items():
            torch.testing.assert_close(value, expected[name], atol=tolerance, rtol=0, msg=name)


@pytest.fixture(params=["native", "torch", "torch_padded"])
def steps_kind(request, monkeypatch):
    """The training operators' steps: the C++ ones (where a compiler builds them), the plain torch ones, or those
    over every step of the padded batch, as on CUDA (where no value may be read into Python)."""
    if request.param == "native":
        if not native_steps_available():
            pytest.skip("the C++ steps could not be built here (no C++ compiler): the torch steps run instead")
    else:
        monkeypatch.setattr(ops, "_native_bptt", lambda tensor: False)
    if request.param == "torch_padded":
        monkeypatch.setattr(ops, "reads_values", lambda device: False)
    return request.param


@pytest.mark.parametrize("first", [True, False], ids=["tokens", "second_layer"])
def test_the_bilm_training_operator_has_eager_gradients(steps_kind, first):
    """``elmo::bilstm_layer_train`` run eagerly with autograd against the eager function it replaces
    (``_bilstm_layer``: the eager layer's recurrence over the packed steps), with differentiable inputs and weights,
    rows of several lengths, the residual on the second layer."""
    layer = random_bilstm_layer(torch.float32, clips=True, residual=not first)
    generator = torch.Generator().manual_seed(2)
    lengths = torch.tensor([5, 2, 7, 3])
    rows = lengths.shape[0] if first else 2 * lengths.shape[0]
    inputs = torch.randn(rows, 7, layer.projection_dim, generator=generator)
    weights = [layer.input_kernel, layer.state_kernel, layer.bias, layer.projection]
    consts = bilstm_layer_consts(layer, prepack=False, first=first)
    grads = []
    for train in (False, True):
        x = inputs.clone().requires_grad_()
        w = [t.detach().clone().requires_grad_() for t in weights]
        out = (
            call("bilstm_layer_train", [x, lengths, *w], consts)
            if train
            else ops._bilstm_layer([x, lengths, *w], consts)
        )
        out.backward(torch.randn(out.shape, generator=torch.Generator().manual_seed(3)))
        grads.append([out.detach(), x.grad, *(t.grad for t in w)])
    for name, got, want in zip(
        ["output", "inputs", "input_kernel", "state_kernel", "bias", "projection"], *grads[::-1], strict=True
    ):
        # Measured: up to 2e-6 (values up to ~10).
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5, msg=name)


def test_the_task_lstm_training_operator_has_nn_lstms_gradients(steps_kind):
    """``elmo::task_lstm_layer_train`` (the steps' cell in ``nn.LSTM``'s gate order) run eagerly with autograd
    against ``ElmoTaskLstm``'s eager forward (``torch.lstm`` on packed sequences), an empty row among the rows."""
    torch.manual_seed(0)
    lstm = ElmoTaskLstm(6, 5, num_layers=1, dropout=0.0)
    features = torch.randn(4, 7, 6)
    lengths = torch.tensor([5, 0, 7, 3])
    weights = [
        getattr(lstm, f"{kind}_l0{direction}")
        for direction in ("", "_reverse")
        for kind in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
    ]
    grad = torch.randn(4, 7, 10)
    x = features.clone().requires_grad_()
    want = lstm(x, lengths)
    want.backward(grad)
    expected = [want.detach(), x.grad, *(w.grad for w in weights)]
    lstm.zero_grad()
    x = features.clone().requires_grad_()
    got = call("task_lstm_layer_train", [x, lengths, *weights])
    got.backward(grad)
    found = [got.detach(), x.grad, *(w.grad for w in weights)]
    names = ["output", "features"] + [f"weight {k}" for k in range(8)]
    for name, value, reference in zip(names, found, expected, strict=True):
        # Measured: up to 3e-7.
        torch.testing.assert_close(value, reference, atol=1e-5, rtol=1e-5, msg=name)


def test_a_batch_of_no_rows_trains(steps_kind):
    layer = random_bilstm_layer(torch.float32, clips=True)
    weights = [p.detach().clone().requires_grad_() for p in layer.parameters()]
    x = torch.zeros(0, 4, layer.projection_dim, requires_grad=True)
    out = call(
        "bilstm_layer_train", [x, torch.zeros(0, dtype=torch.long), *weights], bilstm_layer_consts(layer, False, True)
    )
    assert out.shape == (0, 4, layer.projection_dim)
    out.sum().backward()
    assert all(w.grad is not None and not w.grad.any() for w in weights)
