"""Would a hand-written fused LSTM cell pay for itself? The model's words/s as it is, and with the element-wise part of
each step (``ElmoBiLstmLayer.cell``: three sigmoids, two tanh, the clip, about ten torch calls) done in one C++ pass.

The package ships no C++: every kernel it runs is torch's or oneDNN's, so that it installs and runs without a
compiler (issue 30 allows hand-written C++ only where it is measured to be needed). This script is that measurement.
It builds the fused cell below with ``torch.utils.cpp_extension.load_inline`` (a C++ compiler, ninja and Python's
headers; the build goes to ``--build_dir``), swaps it in for ``ElmoBiLstmLayer.cell``, and times both, alternating,
every other round in reverse order.

The kernel: per row and 512 columns at a time, it reads the four gates (float32 or bfloat16) into float32, computes
``c = clip(sigmoid(f) c + sigmoid(i) tanh(j))`` and ``sigmoid(o) tanh(c)`` in float32 (``tanh(x) = 2 sigmoid(2x) - 1``,
vectorised by the compiler, ``-O3 -march=native -ffast-math``) and writes the second in the gates' dtype; rows and
column blocks are spread over torch's threads. It matches the torch cell to ~1e-6 in float32; in bfloat16 it keeps
the gates' activations in float32 where torch rounds them to bfloat16, so it differs by bfloat16's rounding.

    python benchmarks/bench_fused_cell.py                       # original size, random weights, all modes
    python benchmarks/bench_fused_cell.py --modes bfloat16 --batch-sizes 1 --rounds 7
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_inference import MODES, build_model, cpu_description, make_batch, make_vocab  # noqa: E402

from modeling_elmo.modeling_elmo import ElmoBiLstmLayer  # noqa: E402
from modeling_elmo.utils.quantize_elmo import quantize_int8  # noqa: E402

CELL_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <cstring>

static inline float from_bf16(uint16_t b) { uint32_t u = uint32_t(b) << 16; float f; std::memcpy(&f, &u, 4); return f; }
static inline uint16_t to_bf16(float f) {  // round to nearest even, as torch
  uint32_t u; std::memcpy(&u, &f, 4); u += 0x7FFF + ((u >> 16) & 1); return uint16_t(u >> 16);
}
static inline float load(const float* p, int64_t k) { return p[k]; }
static inline float load(const uint16_t* p, int64_t k) { return from_bf16(p[k]); }
static inline void store(float* p, int64_t k, float v) { p[k] = v; }
static inline void store(uint16_t* p, int64_t k, float v) { p[k] = to_bf16(v); }
static inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

template <typename T>
static void cell(const T* gates, const float* c, float* c_out, T* memory, int64_t rows, int64_t d, float clip) {
  constexpr int64_t B = 512;
  const int64_t blocks = (d + B - 1) / B;
  at::parallel_for(0, rows * blocks, 4, [&](int64_t first, int64_t last) {
    alignas(64) float i[B], j[B], f[B], o[B], m[B];
    for (int64_t w = first; w < last; ++w) {
      const int64_t r = w / blocks, k0 = (w % blocks) * B, n = std::min(B, d - k0);
      const T* g = gates + r * 4 * d + k0;
      for (int64_t q = 0; q < n; ++q) {
        i[q] = load(g, q); j[q] = load(g, d + q); f[q] = load(g, 2 * d + q); o[q] = load(g, 3 * d + q);
      }
      const float* cr = c + r * d + k0;
      float* cw = c_out + r * d + k0;
      #pragma omp simd
      for (int64_t q = 0; q < n; ++q) {
        float v = sigmoid(f[q]) * cr[q] + sigmoid(i[q]) * (2.0f * sigmoid(2.0f * j[q]) - 1.0f);
        v = v < -clip ? -clip : (v > clip ? clip : v);
        cw[q] = v;
        m[q] = sigmoid(o[q]) * (2.0f * sigmoid(2.0f * v) - 1.0f);
      }
      for (int64_t q = 0; q < n; ++q) store(memory + r * d + k0, q, m[q]);
    }
  });
}

// gates (rows, 4D) float32 or bfloat16, c (rows, D) float32 -> (clipped c, sigmoid(o) tanh(c) in the gates' dtype)
std::vector<torch::Tensor> fused_cell(torch::Tensor gates, torch::Tensor c, double clip) {
  TORCH_CHECK(gates.is_contiguous() && c.is_contiguous() && c.scalar_type() == at::kFloat, "contiguous, c float32");
  const int64_t rows = c.size(0), d = c.size(1);
  auto c_out = torch::empty_like(c);
  auto memory = torch::empty({rows, d}, gates.options());
  if (gates.scalar_type() == at::kFloat) {
    cell(gates.data_ptr<float>(), c.data_ptr<float>(), c_out.data_ptr<float>(), memory.data_ptr<float>(), rows, d,
         float(clip));
  } else {
    TORCH_CHECK(gates.scalar_type() == at::kBFloat16, "gates float32 or bfloat16");
    cell(reinterpret_cast<const uint16_t*>(gates.data_ptr()), c.data_ptr<float>(), c_out.data_ptr<float>(),
         reinterpret_cast<uint16_t*>(memory.data_ptr()), rows, d, float(clip));
  }
  return {c_out, memory};
}
"""


def build(build_dir: str):
    """The compiled fused cell (``.fused_cell(gates, c, clip)``), built in ``build_dir``; a clear error where no
    C++ toolchain is found."""
    from torch.utils.cpp_extension import load_inline

    os.makedirs(build_dir, exist_ok=True)
    try:
        return load_inline(
            "elmo_bench_fused_cell",
            cpp_sources=CELL_SOURCE,
            functions=["fused_cell"],
            extra_cflags=["-O3", "-march=native", "-ffast-math", "-fopenmp"],
            extra_ldflags=["-fopenmp"],  # torch's own OpenMP runtime (same soname) serves at::parallel_for
            build_directory=build_dir,
        )
    except (RuntimeError, OSError, FileNotFoundError) as error:
        needs = "a C++ compiler, ninja and Python's headers"
        raise SystemExit(f"could not build the fused cell (it needs {needs}): {error}") from error


@contextlib.contextmanager
def fused_cell_in_place(kernel):
    """Every ``ElmoBiLstmLayer`` (the int8 one included) runs its cell with ``kernel`` inside the block."""

    def cell(layer, gates: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        groups, rows, d = c.shape
        clip = math.inf if layer.cell_clip is None else layer.cell_clip
        flat = gates.reshape(groups * rows, 4 * d), c.reshape(groups * rows, d).contiguous()
        c, memory = kernel.fused_cell(*flat, clip)
        return c.view(groups, rows, d), memory.view(groups, rows, d)

    own = ElmoBiLstmLayer.cell
    ElmoBiLstmLayer.cell = cell
    try:
        yield
    finally:
        ElmoBiLstmLayer.cell = own


def compare(model, batches: list[tuple[torch.Tensor, torch.Tensor]], kernel, rounds: int) -> dict:
    """``{"torch": seconds, "fused": seconds, "difference": max |top layer difference|}`` for one pass over
    ``batches``: medians over ``rounds`` alternating passes, after one of each."""

    def one_pass():
        with torch.inference_mode():
            return [
                model(input_ids=i, attention_mask=m, output_hidden_states=True).hidden_states[-1] for i, m in batches
            ]

    plain = one_pass()
    with fused_cell_in_place(kernel):
        fused = one_pass()
    difference = max(float((a.float() - b.float()).abs().max()) for a, b in zip(plain, fused, strict=True))
    seconds = {"torch": [], "fused": []}
    for turn in range(rounds):
        for name in ("torch", "fused") if turn % 2 == 0 else ("fused", "torch"):
            with fused_cell_in_place(kernel) if name == "fused" else contextlib.nullcontext():
                start = time.perf_counter()
                one_pass()
                seconds[name].append(time.perf_counter() - start)
    return {name: statistics.median(each) for name, each in seconds.items()} | {"difference": difference}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--modes", nargs="+", choices=list(MODES), default=list(MODES))
    parser.add_argument("--batch-sizes", nargs="+", type=int, default=[32, 1])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--smoke", action="store_true", help="tiny model, 1 round: a quick check that it runs")
    parser.add_argument("--build_dir", default=os.path.join(tempfile.gettempdir(), "elmo-bench-fused-cell"))
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    size, rounds = ("tiny", 1) if args.smoke else ("original", args.rounds)
    kernel = build(args.build_dir)
    vocab = make_vocab()
    print(f"# CPU: {cpu_description()}")
    print(f"# torch {torch.__version__}, {args.threads} threads, {size} size, random weights, {rounds} rounds")
    print("| mode | batch | words/s, torch's cell | words/s, fused cell | ratio | max difference, top layer |")
    print("|---|---|---|---|---|---|")
    for mode in args.modes:
        model = build_model(size, "cpu")
        if mode == "bfloat16":
            model = model.to(torch.bfloat16)
        elif mode == "int8":
            quantize_int8(model)
        for batch in args.batch_sizes:
            # 256 sentences of 12-37 words in batches of ``batch``; 8 of them one at a time at batch 1.
            count = 8 if batch == 1 else max(batch, 64)
            batches = [make_batch(batch, 12, 37, vocab, seed) for seed in range(count // batch)]
            words = sum(int(mask.sum()) for _, mask in batches)
            found = compare(model, batches, kernel, rounds)
            print(
                f"| {mode} | {batch} | {words / found['torch']:.0f} | {words / found['fused']:.0f} | "
                f"{found['torch'] / found['fused']:.2f}x | {found['difference']:.1e} |",
                flush=True,
            )
        del model


if __name__ == "__main__":
    main()
