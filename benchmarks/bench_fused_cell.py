"""Would hand-written C++ pay for itself in the biLSTM? The model's words/s as it is, with a fused cell, and with a C++
step loop, on the CPU at hand.

- **fused cell**: the element-wise part of each step (``ElmoBiLstmLayer.cell``: three sigmoids, two tanh, the clip,
  about ten torch calls) in one C++ pass;
- **C++ step loop**: all the steps of a layer (``ElmoBiLstmLayer.recurrence``) in one C++ call: the same products as
  the model picks (torch's batched ones, oneDNN's prepacked ones or int8 ones, called through torch's dispatcher),
  the fused cell, and no Python between the steps.

The eager path ships no C++: every kernel it runs is torch's or oneDNN's, so that it installs and runs without a
compiler (issue 30 allows hand-written C++ only where it is measured to be needed). This script is that measurement.
Under ``torch.compile``, where a compiler is needed anyway, the package builds its own step loop
(``modeling_elmo/native_steps_elmo.py``, float32 and bfloat16, no int8).
It builds both with ``torch.utils.cpp_extension.load_inline`` (a C++ compiler, ninja and Python's headers; the build
goes to ``--build_dir``), swaps them in for the model's methods, and times the three variants in turn, every other
round in reverse order.

The cell kernel: per row and 512 columns at a time, it reads the four gates (float32 or bfloat16) into float32,
computes ``c = clip(sigmoid(f) c + sigmoid(i) tanh(j))`` and ``sigmoid(o) tanh(c)`` in float32 (``tanh(x) =
2 sigmoid(2x) - 1``, vectorised by the compiler, ``-O3 -march=native -ffast-math``) and writes the second in the
gates' dtype; rows and column blocks are spread over torch's threads. It matches the torch cell to ~1e-6 in float32;
in bfloat16 it keeps the gates' activations in float32 where torch rounds them to bfloat16, so it differs by
bfloat16's rounding.

    python benchmarks/bench_fused_cell.py                       # original size, random weights, all modes
    python benchmarks/bench_fused_cell.py --modes bfloat16 --batch-sizes 1 --rounds 7
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_inference import (  # noqa: E402
    MODES,
    build_model,
    ceiling_spec,
    cpu_description,
    make_vocab,
    measure_ceiling,
    useful_gflop,
    wikitext_sentences,
)

from modeling_elmo.characters import word_to_char_ids  # noqa: E402
from modeling_elmo.inference.quantize import quantize_int8  # noqa: E402
from modeling_elmo.modeling_elmo import ElmoBiLstmLayer  # noqa: E402

CELL_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/jit/api/object.h>
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

static at::Tensor call(const c10::OperatorHandle& op, torch::jit::Stack stack) {
  op.callBoxed(&stack);
  return stack[0].toTensor();
}

// All the steps of G directions (G = 1 except for kind 0), as ElmoBiLstmLayer.recurrence: input_gates (G, N, 4D),
// h (G, B, P), c (G, B, D) float32 -> outputs (G, N, P), final h, final c. The products, by kind: 0 torch's
// batched ones (state (G, P, 4D), projection (G, D, P)); 1 oneDNN's prepacked ones (packed weight tensors; steps of
// fewer than min_rows rows take the plain ones); 2 int8 ones (linear_dynamic's packed weights).
std::vector<torch::Tensor> step_loop(torch::Tensor input_gates, torch::Tensor h, torch::Tensor c,
                                     std::vector<int64_t> batch_sizes, int64_t kind, torch::Tensor state,
                                     torch::Tensor projection, py::object state_packed, py::object projection_packed,
                                     int64_t min_rows, bool reduce_range, double cell_clip, double proj_clip) {
  auto& dispatcher = c10::Dispatcher::singleton();
  static auto linear = dispatcher.findSchemaOrThrow("mkldnn::_linear_pointwise", "");
  static auto linear_add = dispatcher.findSchemaOrThrow("mkldnn::_linear_pointwise", "binary");
  static auto dynamic = dispatcher.findSchemaOrThrow("quantized::linear_dynamic", "");
  TORCH_CHECK(kind == 0 || h.size(0) == 1, "kinds 1 and 2 run one direction");
  c10::IValue state_weight, projection_weight;
  if (kind == 1) {
    state_weight = py::cast<torch::Tensor>(state_packed);
    projection_weight = py::cast<torch::Tensor>(projection_packed);
  } else if (kind == 2) {
    state_weight = c10::IValue(py::cast<torch::jit::Object>(state_packed)._ivalue());
    projection_weight = c10::IValue(py::cast<torch::jit::Object>(projection_packed)._ivalue());
  }
  c10::impl::GenericList no_scalars(c10::OptionalType::create(c10::NumberType::get()));
  const int64_t groups = h.size(0), d = c.size(2);
  auto outputs = torch::empty({groups, input_gates.size(1), h.size(2)}, h.options());
  auto h_final = torch::empty_like(h), c_final = torch::empty_like(c);
  int64_t offset = 0, running = h.size(1);
  for (int64_t n : batch_sizes) {
    if (n < running) {  // rows n.. ended at the previous step
      h_final.narrow(1, n, running - n).copy_(h.narrow(1, n, running - n));
      c_final.narrow(1, n, running - n).copy_(c.narrow(1, n, running - n));
      h = h.narrow(1, 0, n);
      c = c.narrow(1, 0, n);
      running = n;
    }
    auto step_gates = input_gates.narrow(1, offset, n);
    const bool packed = kind == 2 || (kind == 1 && n >= min_rows);
    torch::Tensor gates;
    if (kind == 2) {
      gates = call(dynamic, {h[0].contiguous(), state_weight, reduce_range}).add_(step_gates[0]).unsqueeze(0);
    } else if (packed) {
      gates = call(linear_add, {h[0].contiguous(), step_gates[0].contiguous(), state_weight, c10::IValue(),
                                std::string("add")}).unsqueeze(0);
    } else {
      gates = torch::baddbmm(step_gates, h, state);
    }
    auto cell_out = fused_cell(gates.reshape({groups * n, 4 * d}).contiguous(), c.reshape({groups * n, d}).contiguous(),
                               cell_clip);
    auto memory = cell_out[1].view({groups, n, d});
    torch::Tensor h_new;
    if (kind == 2) {
      h_new = call(dynamic, {memory[0], projection_weight, reduce_range}).unsqueeze(0);
    } else if (packed) {
      h_new = call(linear, {memory[0], projection_weight, c10::IValue(), std::string("none"), no_scalars,
                            std::string("")}).unsqueeze(0);
    } else {
      h_new = torch::bmm(memory, projection);
    }
    h_new.clamp_(-proj_clip, proj_clip);
    outputs.narrow(1, offset, n).copy_(h_new);
    h = h_new;
    c = cell_out[0].view({groups, n, d});
    offset += n;
  }
  h_final.narrow(1, 0, running).copy_(h);
  c_final.narrow(1, 0, running).copy_(c);
  return {outputs, h_final, c_final};
}
"""


def build(build_dir: str):
    """The compiled kernels (``.fused_cell``, ``.step_loop``), built in ``build_dir``; a clear error where no C++
    toolchain is found."""
    from torch.utils.cpp_extension import load_inline

    os.makedirs(build_dir, exist_ok=True)
    try:
        return load_inline(
            "elmo_bench_fused_cell",
            cpp_sources=CELL_SOURCE,
            functions=["fused_cell", "step_loop"],
            extra_cflags=["-O3", "-march=native", "-ffast-math", "-fopenmp"],
            extra_ldflags=["-fopenmp"],  # torch's own OpenMP runtime (same soname) serves at::parallel_for
            build_directory=build_dir,
        )
    except (RuntimeError, OSError, FileNotFoundError) as error:
        needs = "a C++ compiler, ninja and Python's headers"
        raise SystemExit(f"could not build the C++ kernels (they need {needs}): {error}") from error


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


@contextlib.contextmanager
def step_loop_in_place(kernel):
    """Every ``ElmoBiLstmLayer`` runs its steps (``recurrence``) in ``kernel.step_loop`` inside the block: the
    products of the same kind as the model picks (``products``: the layer's own, the CPU fast path's, or int8), the
    fused cell, and no Python between the steps. The input product of all steps stays in Python, as in the model."""
    from modeling_elmo.fast_path_elmo import PrepackedProducts
    from modeling_elmo.inference.quantize import Int8BiLstmLayer, needs_reduced_range

    def recurrence(layer, products, inputs, h, c, bias, batch_sizes, directions):
        input_gates = products.input_gates(inputs, bias, directions)
        if isinstance(layer, Int8BiLstmLayer):
            empty = torch.empty(0)
            weights = (2, empty, empty, layer._state[directions][0], layer._projection[directions][0], 0)
            weights += (needs_reduced_range(),)
        else:
            plain = layer.state_kernel[directions], layer.projection[directions]
            if isinstance(products, PrepackedProducts):
                packed = [products.packed[weight][directions][0] for weight in (1, 2)]
                weights = (1, *plain, *packed, products.min_rows, False)
            else:
                weights = (0, *plain, None, None, 0, False)
        clips = [math.inf if clip is None else clip for clip in (layer.cell_clip, layer.proj_clip)]
        return kernel.step_loop(input_gates, h, c.contiguous(), list(batch_sizes), *weights, *clips)

    own = ElmoBiLstmLayer.recurrence
    ElmoBiLstmLayer.recurrence = recurrence
    try:
        yield
    finally:
        ElmoBiLstmLayer.recurrence = own


VARIANTS = {"torch": contextlib.nullcontext, "fused cell": fused_cell_in_place, "C++ step loop": step_loop_in_place}


def compare(model, batches: list[tuple[torch.Tensor, torch.Tensor]], kernel, rounds: int) -> dict:
    """Per variant of ``VARIANTS``, ``(seconds, difference)``: the median time of one pass over ``batches`` (after
    one untimed pass, ``rounds`` passes of every variant in turn, every other round in reverse order) and the
    largest difference of its top layer from torch's."""

    def one_pass():
        with torch.inference_mode():
            return [
                model(input_ids=i, attention_mask=m, output_hidden_states=True).hidden_states[-1] for i, m in batches
            ]

    outputs = {}
    for name, in_place in VARIANTS.items():
        with in_place(kernel) if in_place is not contextlib.nullcontext else in_place():
            outputs[name] = one_pass()
    seconds = {name: [] for name in VARIANTS}
    for turn in range(rounds):
        for name in list(VARIANTS) if turn % 2 == 0 else list(VARIANTS)[::-1]:
            in_place = VARIANTS[name]
            with in_place(kernel) if in_place is not contextlib.nullcontext else in_place():
                start = time.perf_counter()
                one_pass()
                seconds[name].append(time.perf_counter() - start)
    return {
        name: (
            statistics.median(seconds[name]),
            max(float((a.float() - b.float()).abs().max()) for a, b in zip(outputs["torch"], each, strict=True)),
        )
        for name, each in outputs.items()
    }


def char_batch(sentences: list[list[str]]) -> tuple[torch.Tensor, torch.Tensor]:
    """``(input_ids (B, W, 50), attention_mask (B, W))`` of ``sentences`` (the model adds ``<S>`` and ``</S>``)."""
    ids = torch.zeros(len(sentences), max(map(len, sentences)), 50, dtype=torch.long)
    mask = torch.zeros(ids.shape[:2], dtype=torch.long)
    for b, sentence in enumerate(sentences):
        ids[b, : len(sentence)] = torch.tensor([word_to_char_ids(w) for w in sentence])
        mask[b, : len(sentence)] = 1
    return ids, mask


def ceiling_of(sentences: list[list[str]], modes: list[str]) -> dict:
    """``bench_inference.measure_ceiling`` at the shapes of ``sentences`` run as one batch."""
    return measure_ceiling(ceiling_spec(sentences, modes))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--modes", nargs="+", choices=list(MODES), default=list(MODES))
    parser.add_argument("--batch-sizes", nargs="+", type=int, choices=[1, 32], default=[32, 1])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--smoke", action="store_true", help="tiny model, random words, 1 round: a quick check")
    parser.add_argument("--build_dir", default=os.path.join(tempfile.gettempdir(), "elmo-bench-fused-cell"))
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    kernel = build(args.build_dir)
    if args.smoke:  # the ceiling is measured at the original size's shapes: none for the tiny model
        size, rounds = "tiny", 1
        rng, vocab = random.Random(0), make_vocab(200)
        sentences = [rng.choices(vocab, k=rng.randint(12, 37)) for _ in range(32)]
    else:
        size, rounds = "original", args.rounds
        sentences = wikitext_sentences(32, 12, 37)
    print(f"# CPU: {cpu_description()}")
    print(f"# torch {torch.__version__}, {args.threads} threads, {size} size, random weights, {rounds} rounds")
    print("# the batches of bench_inference.py: 32 WikiText-2 sentences at once, and 8 of them one at a time")
    print("words/s, the ratio to torch's, the fraction of bench_inference.py's ceiling (its products' best rate),")
    print("and the top layer's largest difference from torch's:")
    print("| mode | batch | torch | fused cell | C++ step loop |")
    print("|---|---|---|---|---|")
    ceilings = (
        {}
        if args.smoke
        else {b: ceiling_of(sentences[:1] if b == 1 else sentences, args.modes) for b in args.batch_sizes}
    )
    for mode in args.modes:
        model = build_model(size, "cpu")
        if mode == "bfloat16":
            model = model.to(torch.bfloat16)
        elif mode == "int8":
            quantize_int8(model)
        for batch in args.batch_sizes:
            groups = [sentences] if batch == 32 else [[s] for s in sentences[:8]]
            words = sum(len(s) for group in groups for s in group)
            gflop = useful_gflop(groups)
            found = compare(model, [char_batch(group) for group in groups], kernel, rounds)
            base = found["torch"][0]
            cells = []
            for name, (seconds, difference) in found.items():
                cell = f"{words / seconds:.0f}"
                if name != "torch":
                    cell += f", {base / seconds:.2f}x"
                if ceilings:
                    cell += f", {gflop / seconds / ceilings[batch][mode]['combined']:.0%}"
                cells.append(cell if name == "torch" else f"{cell}, {difference:.1e}")
            print(f"| {mode} | {batch} | " + " | ".join(cells) + " |", flush=True)
        del model


if __name__ == "__main__":
    main()
