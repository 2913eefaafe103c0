"""The compiled path's C++ step loop (``native_steps_elmo.py``): the biLM layer's steps as the Python recurrence
computes them, used by a compiled model on the CPU, and a clear fallback where it cannot be built."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import pytest
import torch
from helpers import TINY, random_bilstm_layer

from modeling_elmo import ElmoConfig, ElmoModel
from modeling_elmo.fast_path_elmo import PrepackedProducts, _PrepackedWeights
from modeling_elmo.modeling_elmo import ElmoBiLstmLayer
from modeling_elmo.native_steps_elmo import namespace, native_forward, native_steps_available

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(autouse=True, scope="module")
def compiler():
    """A C++ compiler, as torch.compile needs on the CPU: without one these tests skip, saying so, or fail where
    ``ELMO_REQUIRE_TOOLCHAIN=1`` (CI, which installs one)."""
    name = os.environ.get("CXX") or "c++"
    if shutil.which(name) is None:
        reason = f"no C++ compiler ({name}) on PATH: the compiled step loop cannot be built (apt-get install g++)"
        if os.environ.get("ELMO_REQUIRE_TOOLCHAIN") == "1":
            pytest.fail(reason + "; ELMO_REQUIRE_TOOLCHAIN=1 forbids skipping")
        pytest.skip(reason)


BATCH_SIZES = [4, 4, 3, 3, 2, 1, 1]  # rows running at each step: rows end at steps 2, 4, 5 and 7


def _state(layer: ElmoBiLstmLayer, groups: int, dtype: torch.dtype):
    """Packed inputs ``(G, N, P)`` and non-zero initial states ``(G, B, P)``, ``(G, B, D)``: carried states are
    inputs too."""
    generator = torch.Generator().manual_seed(1)
    rows, steps = BATCH_SIZES[0], sum(BATCH_SIZES)
    inputs = torch.randn(groups, steps, layer.projection_dim, generator=generator).to(dtype)
    h = torch.randn(groups, rows, layer.projection_dim, generator=generator).to(dtype)
    c = torch.randn(groups, rows, layer.lstm_dim, generator=generator)
    return inputs, h, c


@pytest.mark.parametrize("block_rows", [1024, 3], ids=["one-block", "blocks-of-3-rows"])
@pytest.mark.parametrize("clips", [True, False], ids=["clipped", "unclipped"])
@pytest.mark.parametrize("products", ["plain", "prepacked"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
def test_native_steps_equal_the_python_recurrence(dtype, products, clips, block_rows, monkeypatch):
    """Against ``ElmoBiLstmLayer.forward``, step by step in Python: both directions with torch's batched products,
    or each with oneDNN's prepacked ones (the steps of one row with the plain product in float32, ``min_rows`` 2);
    rows that end early keep their last state; the input product in blocks; the residual added."""
    assert native_steps_available()
    layer = random_bilstm_layer(dtype, clips)
    monkeypatch.setattr(layer, "gate_block_rows", block_rows)
    monkeypatch.setattr(layer, "residual", clips)
    inputs, h, c = _state(layer, 2, dtype)
    with torch.no_grad():
        if products == "prepacked":
            if not _PrepackedWeights.supported(dtype):
                pytest.skip(f"oneDNN has no prepacked {dtype} products on this CPU")
            monkeypatch.setattr(layer, "prepack_min_elements", 0)
            chosen = layer.products(h)
            assert isinstance(chosen, PrepackedProducts) and chosen.min_rows == (2 if dtype == torch.float32 else 0)
        else:
            monkeypatch.setattr(layer, "use_prepacked_weights", False)
            assert layer.products(h) is layer
        want = layer(inputs, h, c, BATCH_SIZES)
        got = native_forward(layer, inputs, h, c, BATCH_SIZES)
    for name, g, w in zip(("outputs", "h", "c"), got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape, name
        if dtype == torch.float32:
            # The same products; the cell's exp is glibc's vector one, not torch's (measured up to 7.8e-7).
            torch.testing.assert_close(g, w, atol=5e-6, rtol=0, msg=name)
        else:
            # bfloat16 activations rounded as torch rounds them (measured: outputs equal, c within 2.4e-7); an exp 1
            # ulp apart can round one the other way, one bfloat16 step (7.8e-3 at 2): two steps allowed.
            torch.testing.assert_close(g.float(), w.float(), atol=1.6e-2, rtol=0, msg=name)
    assert not torch.equal(got[2], c)  # the states moved
    if clips:  # the clips bind
        assert want[2].abs().max() == 1.0 and want[1].abs().max() == 0.5


@pytest.mark.slow
def test_a_compiled_model_runs_the_native_steps():
    """``torch.compile(ElmoModel)`` on the CPU at inference: the profile holds the C++ ``lstm_steps`` (one call per
    layer) and the outputs equal eager's."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = ElmoModel(ElmoConfig(**TINY)).eval()
    ids = torch.randint(1, 262, (3, 6, 50))
    ids[..., 20:] = 260
    mask = torch.tensor([[1] * 6, [1] * 2 + [0] * 4, [1] * 5 + [0]])
    ids = ids * mask.unsqueeze(-1)
    compiled = torch.compile(model)
    with torch.no_grad():
        want = model(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states
        compiled(input_ids=ids, attention_mask=mask)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
            got = compiled(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states
    torch._dynamo.reset()
    calls = [event.key for event in profile.key_averages() if event.key == f"{namespace()}::lstm_steps"]
    assert calls, sorted({event.key for event in profile.key_averages()})
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, atol=1e-5, rtol=1e-5)


def test_without_a_compiler_one_warning_and_the_python_steps(tmp_path):
    """No compiler (``CXX`` names none): one warning that says why, nothing left in the extension folder, and the
    biLM operator (which a compiled model calls) runs the Python recurrence instead."""
    script = textwrap.dedent(
        """
        import logging, torch
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
        from modeling_elmo import ElmoConfig
        from modeling_elmo.compiled_ops_elmo import _bilstm_layer, bilstm_layer_consts, call
        from modeling_elmo.modeling_elmo import ElmoBiLstmLayer
        from modeling_elmo.native_steps_elmo import native_steps_available
        assert not native_steps_available()
        torch.manual_seed(0)
        layer = ElmoBiLstmLayer(ElmoConfig(lstm_dim=16, projection_dim=4, char_cnn_filters=[[1, 4]]), residual=False)
        for p in layer.parameters():
            torch.nn.init.normal_(p, 0, 0.5)
        tokens, lengths = torch.randn(2, 5, 4), torch.tensor([5, 3])
        with torch.no_grad():
            weights = [layer.input_kernel, layer.state_kernel, layer.bias, layer.projection]
            consts = bilstm_layer_consts(layer, True, True)
            got = call("bilstm_layer", [tokens, lengths, *weights], consts)
            want = _bilstm_layer([tokens, lengths, *weights], consts)  # the Python recurrence (the backward's)
        torch.testing.assert_close(got, want, atol=0, rtol=0)
        assert got[:, :3].abs().sum() > 0 and not got[[1, 3], 3:].any()  # rows of 5 and 3 steps
        print("ok")
        """
    )
    env = {**os.environ, "CXX": str(tmp_path / "no-such-compiler"), "TORCH_EXTENSIONS_DIR": str(tmp_path / "ext")}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-3000:]
    warnings = [line for line in result.stderr.splitlines() if line.startswith("WARNING")]
    assert len(warnings) == 1 and "runs its recurrence in Python" in warnings[0], result.stderr[-3000:]
    assert "no-such-compiler" in warnings[0]
    assert not any((tmp_path / "ext").iterdir())  # no half-built library, no temporary folder


def test_loading_the_library_leaves_subnormal_numbers_alone(tmp_path):
    """The library is compiled with ``-ffast-math`` (vectorised exp and tanh) but linked without it: linked with it,
    the compiler's ``crtfastmath.o`` set flush-to-zero and denormals-are-zero for the whole process as the library
    loaded, and every later float computation of the user's process (torch's, numpy's) lost its subnormal numbers
    (hypothesis refused to run in the same test worker). Checked in a new process, with a new build."""
    script = textwrap.dedent(
        """
        import numpy as np
        import torch
        from modeling_elmo.native_steps_elmo import native_steps_available
        before = (float(torch.tensor(1e-40) * 1.0), float(np.float32(1e-40) * np.float32(1.0)))
        assert native_steps_available()
        after = (float(torch.tensor(1e-40) * 1.0), float(np.float32(1e-40) * np.float32(1.0)))
        print(*before, *after)
        """
    )
    env = {**os.environ, "TORCH_EXTENSIONS_DIR": str(tmp_path / "ext")}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    values = [float(word) for word in result.stdout.split()]
    before, after = values[:2], values[2:]
    assert all(value > 0 for value in before), before
    assert after == before, f"subnormals flushed to zero after loading the library: {before} -> {after}"


@pytest.mark.parametrize("lstm_order", [False, True], ids=["ijfo", "ifgo"])
@pytest.mark.parametrize("projection", [True, False], ids=["projection", "no_projection"])
@pytest.mark.parametrize("clips", [True, False], ids=["clips", "no_clips"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_native_training_steps_equal_the_torch_steps(dtype, clips, projection, lstm_order):
    """``lstm_steps_saving`` and ``lstm_steps_backward`` (the compiled training operators' steps) against
    ``bptt_elmo``'s torch steps (themselves checked against autograd: ``tests/test_bptt.py``): the kept activations,
    states and outputs, and every gradient, with the gates in the original's order and in ``nn.LSTM``'s (the task
    BiLSTM's)."""
    from modeling_elmo.bptt_elmo import steps_backward, steps_saving
    from modeling_elmo.native_steps_elmo import native_steps_backward, native_steps_saving

    assert native_steps_available()
    layer = random_bilstm_layer(dtype, clips)
    total = sum(BATCH_SIZES)
    generator = torch.Generator().manual_seed(4)
    width = layer.projection_dim if projection else layer.lstm_dim
    state_kernel = torch.randn(2, width, 4 * layer.lstm_dim, generator=generator).mul(0.5).to(dtype)
    weights = (state_kernel, layer.projection.detach() if projection else None, layer.cell_clip, layer.proj_clip)
    if not projection:
        weights = (state_kernel, None, None, None)  # nn.LSTM's cell: no projection, no clips
    gates = torch.randn(2, total + 3, 4 * layer.lstm_dim, generator=generator).to(dtype)
    kept = {}
    for name, saving in (("torch", steps_saving), ("native", native_steps_saving)):
        activations = gates.clone()
        outputs, c_raw, p_raw = saving(activations, BATCH_SIZES, *weights, lstm_order)
        kept[name] = (outputs, activations, c_raw, p_raw)  # (the rows past the packed steps are room, unread)
    # Measured: up to 1.6e-6 in float32 (values up to 3). In bfloat16 the same values on AVX-512, but with AVX2
    # kernels one activation one bfloat16 step apart (6.1e-5 at 0.011: the C++ exp and torch's round it apart), as
    # in test_native_steps_equal_the_python_recurrence, whose bfloat16 bound this takes.
    forward_tolerance = 5e-6 if dtype == torch.float32 else 1.6e-2
    for got, want in zip(kept["native"], kept["torch"], strict=True):
        torch.testing.assert_close(got[:, :total].float(), want[:, :total].float(), atol=forward_tolerance, rtol=0)
    grad = torch.randn(kept["torch"][0].shape, generator=generator).to(dtype)
    _, activations, c_raw, p_raw = kept["torch"]
    found = [
        backward(grad, activations, c_raw, p_raw, BATCH_SIZES, *weights, lstm_order)
        for backward in (native_steps_backward, steps_backward)
    ]
    for got, want in zip(*found, strict=True):
        if want is None:
            assert got is None
            continue
        # Measured: up to 2.3e-6 in float32 (values up to 9); in bfloat16 up to 0.7% of the largest value (the C++
        # keeps each step's gradients in float32, torch's operations round each to bfloat16).
        scale = want.float().abs().max()
        tolerance = 1e-5 * max(1.0, float(scale)) if dtype == torch.float32 else 0.02 * float(scale)
        torch.testing.assert_close(got.float(), want.float(), atol=tolerance, rtol=0)


def test_native_activations_are_accurate_relative_to_their_size():
    """The C++ cell's activations at a first step (zero state: the pre-activations are the gates themselves) against
    float64, relative to each value's own size, on pre-activations from 1e-6 to 10. The cell once took
    ``tanh(x) = 2 sigmoid(2x) - 1`` (absolute error ~6e-8: a relative error up to 1e-2 near 0); backpropagation
    through time at the original size amplified it to gradients 8e-3 off eager's (relative to the largest), where
    eager's own float32 error is 1e-4. Measured with std::tanh: at most 2.4e-7 relative."""
    from modeling_elmo.bptt_elmo import steps_saving
    from modeling_elmo.native_steps_elmo import native_steps_saving

    assert native_steps_available()
    generator = torch.Generator().manual_seed(5)
    rows, d, p = 8, 64, 16
    magnitude = 10 ** torch.empty(2, rows, 4 * d).uniform_(-6, 1, generator=generator)
    gates = magnitude * torch.randn(2, rows, 4 * d, generator=generator).sign()
    state_kernel = torch.randn(2, p, 4 * d, generator=generator)
    projection = torch.randn(2, d, p, generator=generator)
    native = gates.clone()
    _, c_raw, _ = native_steps_saving(native, [rows], state_kernel, projection, None, None)
    exact = gates.double()
    _, c_exact, _ = steps_saving(exact, [rows], state_kernel.double(), projection.double(), None, None)
    torch.testing.assert_close(native.double(), exact, rtol=1e-6, atol=0)
    torch.testing.assert_close(c_raw.double(), c_exact, rtol=1e-6, atol=0)
