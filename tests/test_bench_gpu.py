"""benchmarks/bench_gpu.py --device cpu --smoke (issue 43): the GPU benchmark's harness runs in CI, on the CPU."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_gpu.py"


@pytest.mark.slow  # seconds on an idle machine; its compiles (aot_eager) take minutes on a busy 2-core one
def test_bench_gpu_smoke_on_the_cpu(tmp_path):
    spec = importlib.util.spec_from_file_location("bench_gpu", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    report = module.main(["--device", "cpu", "--smoke", "--out", str(tmp_path)])
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["rows"] == report["rows"] and saved["backend"] == "aot_eager"
    paths = {(r["dtype"], r["batch"], r["path"]) for r in saved["rows"]}
    for dtype in ("float32", "bfloat16"):
        for batch in (1, 4):
            assert {(dtype, batch, "eager"), (dtype, batch, "compiled")} <= paths
    assert ("float32", 1, "common") in paths and not any(p == "reduce-overhead" for *_, p in paths)  # CUDA only
    # The compiled graph path computes what eager computes (float32: the batching bound; bfloat16: its rounding).
    for row in saved["rows"]:
        assert row["words_per_s"] > 0
        assert row["max_abs_diff_to_eager"] <= (1e-5 if row["dtype"] == "float32" else 5e-2), row
    assert saved["training_step"]["loss"] > 0
    table = (tmp_path / "results.md").read_text()
    assert "| float32 | 4 | compiled |" in table and "Training step" in table
