"""``benchmarks/bench_fused_cell.py``: the fused C++ cell it measures computes the LSTM cell's step as
``ElmoBiLstmLayer.cell`` does, its C++ step loop runs the steps as ``ElmoBiLstmLayer.recurrence`` does, and the
script runs.

The package's own step loop (``native_steps_elmo.py``, the compiled path's) is tested in test_native_steps.py; these
tests build the benchmark's kernel, so they need a C++ compiler, ninja and
Python's headers. Without them they skip, saying which is missing; ``.ci/run`` installs them and sets
``ELMO_REQUIRE_TOOLCHAIN=1``, which turns the skip into a failure.
"""

from __future__ import annotations

import os
import random
import shutil
import sys
import sysconfig
from pathlib import Path

import pytest
import torch
from helpers import TINY

from modeling_elmo import ElmoConfig, ElmoModel
from modeling_elmo.modeling_elmo import ElmoBiLstmLayer

REPO = Path(__file__).resolve().parent.parent
# Building the C++ kernel took 222 s on a busy 2-core machine: the quick subset (-m "not slow") leaves it out.
pytestmark = pytest.mark.slow


def _missing_toolchain() -> str | None:
    compiler = os.environ.get("CXX", "c++")
    if shutil.which(compiler) is None:
        return f"no C++ compiler ({compiler}) on PATH"
    if shutil.which("ninja") is None:
        return "no ninja on PATH"
    if not Path(sysconfig.get_paths()["include"], "Python.h").exists():
        return "no Python headers (Python.h: apt-get install python3-dev)"
    return None


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    missing = _missing_toolchain()
    if missing is not None:
        reason = f"the benchmark's fused cell cannot be built here: {missing} (apt-get install g++ ninja-build)"
        if os.environ.get("ELMO_REQUIRE_TOOLCHAIN") == "1":
            pytest.fail(reason + "; ELMO_REQUIRE_TOOLCHAIN=1 forbids skipping")
        pytest.skip(reason)
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import bench_fused_cell
    finally:
        sys.path.pop(0)
    build_dir = str(tmp_path_factory.mktemp("fused-cell-build"))
    return bench_fused_cell, bench_fused_cell.build(build_dir), build_dir


def _layer_and_step(dtype: torch.dtype):
    # D = 600: one full block of 512 columns and a partial one. Gates up to ~±9 and c up to ~±6, so the clip at 3
    # acts on part of the cell state.
    layer = ElmoBiLstmLayer(ElmoConfig(lstm_dim=600, projection_dim=8, cell_clip=3.0, proj_clip=3.0), residual=False)
    generator = torch.Generator().manual_seed(0)
    gates = (torch.randn(2, 5, 4 * 600, generator=generator) * 3).to(dtype)
    c = torch.randn(2, 5, 600, generator=generator) * 2
    return layer, gates, c


def test_fused_cell_computes_the_cell_as_torch_does_in_float32(bench):
    module, kernel, _ = bench
    layer, gates, c = _layer_and_step(torch.float32)
    expected_c, expected_memory = layer.cell(gates, c)
    with module.fused_cell_in_place(kernel):
        fused_c, fused_memory = layer.cell(gates, c)
    assert (expected_c.abs() == 3).any() and (expected_c.abs() < 3).any()  # the clip acted, and not everywhere
    # float32 rounding and the compiler's vectorised exp: measured at most 4.8e-7 (values up to 3); a wrong gate
    # or clip moves values by 1e-2 or more.
    assert (fused_c - expected_c).abs().max() <= 2e-6
    assert (fused_memory - expected_memory).abs().max() <= 2e-6


def test_fused_cell_in_bfloat16_is_the_float32_cell_rounded_once(bench):
    """From bfloat16 gates, the fused cell computes in float32 (torch's rounds each activation to bfloat16): its
    cell state is the float32 cell's on the same gates, and its output that cell's output rounded to bfloat16."""
    module, kernel, _ = bench
    layer, gates, c = _layer_and_step(torch.bfloat16)
    exact_c, exact_memory = layer.cell(gates.float(), c)
    with module.fused_cell_in_place(kernel):
        fused_c, fused_memory = layer.cell(gates, c)
    assert fused_c.dtype == torch.float32 and fused_memory.dtype == torch.bfloat16
    assert (fused_c - exact_c).abs().max() <= 2e-6
    # Rounding to bfloat16 (8 significant bits) moves a value by at most half a unit in its last place, 2^-8 of the
    # value; plus the float32 difference above. torch's bfloat16 cell, which rounds every activation, is off by up
    # to 5.0e-3 here (9.2e-3 in the cell state): this bound tells the two apart.
    bound = exact_memory.abs() * 2.0**-8 + 2e-6
    assert ((fused_memory.float() - exact_memory).abs() <= bound).all()
    assert not ((layer.cell(gates, c)[1].float() - exact_memory).abs() <= bound).all()


@pytest.mark.parametrize("path", ["plain", "prepacked", "prepacked-bfloat16", "int8"])
def test_step_loop_runs_the_models_steps(bench, path):
    """The C++ step loop, with the products the model picks on each path, gives the top layer the model gives with
    the same fused cell, over sentences of different lengths (rows end at different steps)."""
    from modeling_elmo.inference.quantize import quantize_int8

    module, kernel, _ = bench
    torch.manual_seed(0)
    model = ElmoModel(ElmoConfig(**TINY)).eval()
    if path.startswith("prepacked"):
        for layer in model.bilm.layers:
            layer.prepack_min_elements = 1  # the tiny weights take oneDNN's prepacked products too
    if path == "prepacked-bfloat16":
        model = model.to(torch.bfloat16)
    if path == "int8":
        quantize_int8(model)
    rng, vocab = random.Random(3), module.make_vocab(50)
    batch = module.char_batch([rng.choices(vocab, k=rng.randint(1, 9)) for _ in range(6)])
    with torch.inference_mode():
        with module.fused_cell_in_place(kernel):
            expected = model(input_ids=batch[0], attention_mask=batch[1], output_hidden_states=True).hidden_states
        with module.step_loop_in_place(kernel):
            found = model(input_ids=batch[0], attention_mask=batch[1], output_hidden_states=True).hidden_states
    # The same kernels in the same order: measured 0 on every path. A step run on the wrong rows, or an ended row's
    # state lost, moves outputs by 1e-2 or more.
    for layer, (a, b) in enumerate(zip(expected, found, strict=True)):
        assert (a.float() - b.float()).abs().max() <= 1e-6, layer
    # The states after each row's last step, which the outputs above do not show.
    layer, batch_sizes = model.bilm.layers[0], [6, 6, 5, 3, 3, 1]
    dtype = layer.bias.dtype if path != "int8" else torch.float32
    inputs = torch.randn(2, sum(batch_sizes), 8).to(dtype)
    h, c = torch.randn(2, 6, 8).to(dtype), torch.randn(2, 6, 16)
    with torch.inference_mode():
        with module.fused_cell_in_place(kernel):
            expected = layer(inputs, h, c, batch_sizes)
        with module.step_loop_in_place(kernel):
            found = layer(inputs, h, c, batch_sizes)
    for name, a, b in zip(("outputs", "h", "c"), expected, found, strict=True):
        assert (a.float() - b.float()).abs().max() <= 1e-6, name


def test_benchmark_fused_cell_smoke(bench, capsys):
    module, _, build_dir = bench
    module.main(["--smoke", "--modes", "float32", "int8", "--batch-sizes", "1", "--build_dir", build_dir])
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith(("| float32", "| int8"))]
    assert len(rows) == 2
    for row in rows:
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        assert float(cells[2]) > 0
        for variant in cells[3:5]:  # "words/s, ratio x, difference" (no ceiling for the tiny model)
            rate, ratio, difference = (part.strip() for part in variant.split(","))
            assert float(rate) > 0 and ratio.endswith("x")
            assert float(difference) < 1e-4  # the tiny model's top layer


def test_ceiling_of_counts_the_rows_running_at_each_step(bench, monkeypatch):
    module, _, _ = bench
    seen = {}
    monkeypatch.setattr(module, "measure_ceiling", lambda spec: seen.update(spec) or {})
    module.ceiling_of([["a", "b", "c"], ["b"], ["d", "e"]], ["int8"])
    # 5, 3 and 4 steps with the boundaries; 5 distinct words and the two boundaries.
    assert seen == {"rows": [3, 3, 3, 2, 1], "distinct": 7, "modes": ["int8"]}
