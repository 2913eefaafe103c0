"""The biLM layer's steps as one C++ call (``SOURCE``: ``torch.ops.elmo_native_<hash>.lstm_steps``), for the
compiled path on the CPU only.

Why: under ``torch.compile`` the biLM layer is an operator whose implementation is the eager path's recurrence
(``compiled_ops_elmo.py``), so compiled ran at eager's speed at best. The step loop in C++ runs the same products
(oneDNN's prepacked ones at inference, torch's batched ones otherwise) with the cell in one pass over the four
gates and no Python between the steps, which is what makes the compiled path the faster one (docs/speed.md).
Inductor needs a C++ compiler at run time anyway; the eager path never builds or runs this, so the package still
installs and runs eagerly without one.

The library (``SOURCE``, below) is built at the first compiled call (about 7 s), with the compiler inductor would
use (``$CXX``, else ``c++``), for the CPU capability torch dispatches to (``torch.backends.cpu.get_cpu_capability()``,
which ``ATEN_CPU_CAPABILITY`` can lower), into torch's extension cache (``$TORCH_EXTENSIONS_DIR``, default
``~/.cache/torch_extensions``) under a name that hashes the source, the flags and torch's version; later processes
load it from there. The source is a string here, not a file beside this module, so that a model folder's remote code
(which carries Python files only) builds it too. Where it cannot be built (no compiler), one warning says why and
the compiled path keeps the Python recurrence: slower, the same results.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path

import torch
from torch.utils import cpp_extension

logger = logging.getLogger(__name__)


# The vector extensions of each CPU capability torch dispatches to (x86; others build with the compiler's default).
_CAPABILITY_FLAGS = {
    "AVX512": ["-mavx512f", "-mavx512dq", "-mavx512vl", "-mavx512bw", "-mfma"],
    "AVX2": ["-mavx2", "-mfma"],
}


def _command(source: Path, output: Path) -> list[str]:
    compiler = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++") or "clang++"
    library = Path(torch.__file__).parent / "lib"
    return [
        compiler,
        "-shared",
        "-fPIC",
        "-O3",
        "-std=c++20",
        "-ffast-math",  # the cell's exp vectorised (glibc's vector math); it never sees inf or NaN weights
        "-fopenmp",  # at::parallel_for's OpenMP loop, on torch's own runtime
        *_CAPABILITY_FLAGS.get(torch.backends.cpu.get_cpu_capability(), []),
        f"-D_GLIBCXX_USE_CXX11_ABI={int(torch.compiled_with_cxx11_abi())}",
        *(f"-I{path}" for path in cpp_extension.include_paths()),
        str(source),
        "-o",
        str(output),
        f"-L{library}",
        "-lc10",
        "-ltorch_cpu",
        f"-Wl,-rpath,{library}",
    ]


@functools.cache  # looked up at every call of the layer: the source is hashed once
def namespace() -> str:
    """The operator namespace of this module's library, ``elmo_native_<hash of SOURCE>``: a process that loads two
    versions (the package and an older model folder's remote code) gets each its own operator, never the other's
    under the same name with other arguments."""
    return "elmo_native_" + hashlib.sha256(SOURCE.encode()).hexdigest()[:12]


def _library_source() -> str:
    return SOURCE.replace("TORCH_LIBRARY(elmo_native,", f"TORCH_LIBRARY({namespace()},")


def _library_path() -> Path:
    """Where the built library for this source, torch and CPU capability lives."""
    key = hashlib.sha256()
    key.update(_library_source().encode())
    key.update(" ".join(_command(Path("source.cpp"), Path("out"))).encode())
    key.update(torch.__version__.encode())
    root = os.environ.get("TORCH_EXTENSIONS_DIR") or cpp_extension.get_default_build_root()
    return Path(root) / f"elmo_lstm_steps_{key.hexdigest()[:16]}.so"


def _build(path: Path) -> None:
    """Compile ``SOURCE`` to ``path`` in a temporary folder beside it, then rename the library into place: a process
    that loads ``path`` never sees half a library, and two processes that build at once both end with a whole one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=path.stem + ".", dir=path.parent) as folder:
        source, library = Path(folder) / "lstm_steps.cpp", Path(folder) / path.name
        source.write_text(_library_source(), encoding="utf-8")
        result = subprocess.run(_command(source, library), capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise RuntimeError(f"the C++ compiler failed ({result.returncode}): {result.stderr.strip()[-2000:]}")
        os.replace(library, path)


_LOADING = threading.Lock()


def native_steps_available() -> bool:
    """Whether ``lstm_steps`` is loaded (the library of [`namespace`]), building it on the first call (once per
    process; threads that ask meanwhile wait for the answer)."""
    with _LOADING:
        return _load()


@functools.cache
def _load() -> bool:
    if hasattr(getattr(torch.ops, namespace()), "lstm_steps"):  # loaded by another copy of this module's source
        return True
    try:
        path = _library_path()
        if not path.is_file():
            logger.info("building ELMo's compiled step loop into %s (once, about 7 s)", path)
            _build(path)
        torch.ops.load_library(str(path))
    except (OSError, RuntimeError, subprocess.SubprocessError) as error:
        logger.warning(
            "ELMo's compiled biLM runs its recurrence in Python (slower, the same results): its C++ step loop "
            "could not be built or loaded: %s",
            error,
        )
        return False
    return True


def native_forward(
    layer, inputs: torch.Tensor, h: torch.Tensor, c: torch.Tensor, batch_sizes: Sequence[int]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``ElmoBiLstmLayer.forward`` (same arguments and results) with all the steps of both directions in the
    library's ``lstm_steps``; the input product in the layer's blocks of steps (``step_blocks``), as
    ``ElmoBiLstmLayer.recurrence`` computes it."""
    bias = layer.gate_bias()
    c = c.to(layer.state_dtype(bias.dtype))
    h = h.to(inputs.dtype)
    products = layer.products(h)
    if products is layer:
        packed, min_rows = [[], []], 0
    else:  # the CPU fast path's PrepackedProducts: the prepacked weights of each direction
        packed, min_rows = [products.packed[weight] for weight in (1, 2)], products.min_rows
    clips = [None if clip is None else float(clip) for clip in (layer.cell_clip, layer.proj_clip)]
    outputs, offset, sizes = [], 0, list(batch_sizes)
    for first, last in layer.step_blocks(sizes):
        rows = sum(sizes[first:last])
        block = inputs[:, offset : offset + rows]
        if products is layer:  # one batched product
            gates = [layer.input_gates(block, bias)]
        else:  # one per direction: stacking them would copy N x 4D floats twice
            gates = [products.input_gates(block[k : k + 1], bias[k : k + 1], slice(k, k + 1)) for k in range(2)]
        output, h, c = getattr(torch.ops, namespace()).lstm_steps(
            gates, h, c, sizes[first:last], layer.state_kernel, layer.projection, *packed, min_rows, *clips
        )
        outputs.append(output)
        offset += rows
    output = torch.cat(outputs, dim=1) if outputs else torch.zeros_like(inputs)
    return (output + inputs if layer.residual else output), h, c


SOURCE = r"""
// The biLM layer's steps in one call (lstm_steps), for the compiled path on the CPU: the products the
// eager path picks (oneDNN's prepacked ones or torch's batched ones, through the dispatcher), the cell in one pass
// over the four gates, and no Python between the steps. ElmoBiLstmLayer.recurrence (modeling_elmo.py) is the same
// computation in Python.
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/baddbmm.h>
#include <ATen/ops/bmm.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <torch/library.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <tuple>
#include <vector>

namespace {

inline float from_bf16(uint16_t b) {
  uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t to_bf16(float f) {  // round to nearest even, as torch
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7FFF + ((u >> 16) & 1);
  return uint16_t(u >> 16);
}

inline float load(const float* p, int64_t k) { return p[k]; }
inline float load(const uint16_t* p, int64_t k) { return from_bf16(p[k]); }
inline void store(float* p, int64_t k, float v) { p[k] = v; }
inline void store(uint16_t* p, int64_t k, float v) { p[k] = to_bf16(v); }
inline float round_as(const float*, float v) { return v; }
inline float round_as(const uint16_t*, float v) { return from_bf16(to_bf16(v)); }
inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// ElmoBiLstmLayer.cell: gates (rows, 4D) i, j, f, o in T, c (rows, D) float32 -> the clipped new c (float32) and
// sigmoid(o) tanh(c) in T. In bfloat16 the gates' activations are rounded to bfloat16, as torch's bfloat16 ops
// round them in the eager cell; the cell state stays float32 there too.
template <typename T>
void cell(const T* gates, const float* c, float* c_out, T* memory, int64_t rows, int64_t d, float clip) {
  constexpr int64_t B = 512;
  const int64_t blocks = (d + B - 1) / B;
  at::parallel_for(0, rows * blocks, 4, [&](int64_t first, int64_t last) {
    alignas(64) float i[B], j[B], f[B], o[B], m[B];
    for (int64_t w = first; w < last; ++w) {
      const int64_t r = w / blocks, k0 = (w % blocks) * B, n = std::min(B, d - k0);
      const T* g = gates + r * 4 * d + k0;
      for (int64_t q = 0; q < n; ++q) {
        i[q] = load(g, q);
        j[q] = load(g, d + q);
        f[q] = load(g, 2 * d + q);
        o[q] = load(g, 3 * d + q);
      }
      const float* cr = c + r * d + k0;
      float* cw = c_out + r * d + k0;
#pragma omp simd
      for (int64_t q = 0; q < n; ++q) {
        i[q] = sigmoid(i[q]);
        j[q] = 2.0f * sigmoid(2.0f * j[q]) - 1.0f;  // tanh
        f[q] = sigmoid(f[q]);
        o[q] = sigmoid(o[q]);
      }
      for (int64_t q = 0; q < n; ++q) {
        i[q] = round_as(g, i[q]);
        j[q] = round_as(g, j[q]);
        f[q] = round_as(g, f[q]);
        o[q] = round_as(g, o[q]);
      }
#pragma omp simd
      for (int64_t q = 0; q < n; ++q) {
        float v = f[q] * cr[q] + i[q] * j[q];
        v = v < -clip ? -clip : (v > clip ? clip : v);
        cw[q] = v;
        m[q] = o[q] * (2.0f * sigmoid(2.0f * v) - 1.0f);
      }
      T* mw = memory + r * d + k0;
      for (int64_t q = 0; q < n; ++q) store(mw, q, m[q]);
    }
  });
}

// gates (G, n, 4D) float32 or bfloat16, c (G, n, D) float32 -> (new c, the projection's input in the gates' dtype).
std::tuple<at::Tensor, at::Tensor> run_cell(const at::Tensor& gates, const at::Tensor& c,
                                             std::optional<double> clip) {
  const int64_t rows = c.size(0) * c.size(1), d = c.size(2);
  auto g = gates.contiguous();
  auto cc = c.contiguous();
  auto c_out = at::empty_like(cc);
  auto memory = at::empty(cc.sizes(), g.options());
  // No clip: the largest float (not infinity, which -ffast-math assumes never occurs).
  const float limit = clip.has_value() ? float(*clip) : std::numeric_limits<float>::max();
  if (g.scalar_type() == at::kFloat) {
    cell(g.data_ptr<float>(), cc.data_ptr<float>(), c_out.data_ptr<float>(), memory.data_ptr<float>(), rows, d, limit);
  } else {
    cell(reinterpret_cast<const uint16_t*>(g.data_ptr()), cc.data_ptr<float>(), c_out.data_ptr<float>(),
         reinterpret_cast<uint16_t*>(memory.data_ptr()), rows, d, limit);
  }
  return {c_out, memory};
}

at::Tensor boxed(const c10::OperatorHandle& op, torch::jit::Stack stack) {
  op.callBoxed(&stack);
  return stack[0].toTensor();
}

// The steps of G directions run together (torch's batched products) or of one direction (oneDNN's prepacked
// products, G = 1): input_gates (G, N, 4D) (the input product of the N packed steps, bias included), h (G, B, P),
// c (G, B, D) float32, batch_sizes (rows running at each step, non-increasing, at most B) -> outputs (G, N, P), and
// the final h, c (rows that end take their state from their last step). With state_packed and projection_packed,
// oneDNN's products for steps of at least min_rows rows; else torch's with state_kernel (G, P, 4D) and projection
// (G, D, P).
std::tuple<at::Tensor, at::Tensor, at::Tensor> steps(
    const at::Tensor& input_gates, at::Tensor h, at::Tensor c, c10::IntArrayRef batch_sizes,
    const at::Tensor& state_kernel, const at::Tensor& projection, const std::optional<at::Tensor>& state_packed,
    const std::optional<at::Tensor>& projection_packed, int64_t min_rows, std::optional<double> cell_clip,
    std::optional<double> proj_clip) {
  static auto linear = c10::Dispatcher::singleton().findSchemaOrThrow("mkldnn::_linear_pointwise", "");
  static auto linear_add = c10::Dispatcher::singleton().findSchemaOrThrow("mkldnn::_linear_pointwise", "binary");
  const bool prepacked = state_packed.has_value() && projection_packed.has_value();
  const int64_t groups = h.size(0), rows = h.size(1);
  auto outputs = at::empty({groups, input_gates.size(1), h.size(2)}, h.options());
  auto h_final = at::empty_like(h), c_final = at::empty_like(c);
  c10::impl::GenericList no_scalars(c10::OptionalType::create(c10::NumberType::get()));
  int64_t offset = 0, running = rows;
  for (int64_t n : batch_sizes) {
    TORCH_CHECK(n <= running, "lstm_steps: batch_sizes must not increase");
    if (n < running) {  // rows n.. ended at the previous step
      h_final.narrow(1, n, running - n).copy_(h.narrow(1, n, running - n));
      c_final.narrow(1, n, running - n).copy_(c.narrow(1, n, running - n));
      h = h.narrow(1, 0, n);
      c = c.narrow(1, 0, n);
      running = n;
    }
    auto step_gates = input_gates.narrow(1, offset, n);
    const bool packed = prepacked && n >= min_rows;
    at::Tensor gates;
    if (packed) {
      gates = boxed(linear_add, {h[0].contiguous(), step_gates[0].contiguous(), *state_packed, c10::IValue(),
                                 std::string("add")})
                  .unsqueeze(0);
    } else {
      gates = at::baddbmm(step_gates, h, state_kernel);
    }
    auto [c_new, memory] = run_cell(gates, c, cell_clip);
    at::Tensor h_new;
    if (packed) {
      h_new = boxed(linear, {memory[0], *projection_packed, c10::IValue(), std::string("none"), no_scalars,
                             std::string("")})
                  .unsqueeze(0);
    } else {
      h_new = at::bmm(memory, projection);
    }
    if (proj_clip.has_value()) h_new.clamp_(-*proj_clip, *proj_clip);
    outputs.narrow(1, offset, n).copy_(h_new);
    h = h_new;
    c = c_new;
    offset += n;
  }
  h_final.narrow(1, 0, running).copy_(h);
  c_final.narrow(1, 0, running).copy_(c);
  return {outputs, h_final, c_final};
}

// ElmoBiLstmLayer.recurrence over both directions, G = 2 (arguments as steps). With prepacked weights (one per
// direction in state_packed and projection_packed, and input_gates (1, N, 4D) per direction), one direction's steps
// after the other's, each product on torch's threads (the two directions at once, each on a thread of its own,
// measured slower: 0.79x in bfloat16 at batch 1); without, one loop for both (input_gates: one (2, N, 4D) tensor).
std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm_steps(
    at::TensorList input_gates, const at::Tensor& h, const at::Tensor& c, c10::IntArrayRef batch_sizes,
    const at::Tensor& state_kernel, const at::Tensor& projection, at::TensorList state_packed,
    at::TensorList projection_packed, int64_t min_rows, std::optional<double> cell_clip,
    std::optional<double> proj_clip) {
  TORCH_CHECK(c.scalar_type() == at::kFloat, "lstm_steps: the cell state must be float32");
  TORCH_CHECK(input_gates[0].scalar_type() == at::kFloat || input_gates[0].scalar_type() == at::kBFloat16,
              "lstm_steps: float32 or bfloat16 gates");
  const int64_t groups = h.size(0);
  if (state_packed.empty()) {
    TORCH_CHECK(input_gates.size() == 1, "lstm_steps: the input gates of both directions in one tensor");
    return steps(input_gates[0], h, c, batch_sizes, state_kernel, projection, std::nullopt, std::nullopt, 0, cell_clip,
                 proj_clip);
  }
  TORCH_CHECK(int64_t(state_packed.size()) == groups && int64_t(projection_packed.size()) == groups &&
                  int64_t(input_gates.size()) == groups,
              "lstm_steps: one prepacked weight and one input gates tensor per direction");
  std::vector<std::tuple<at::Tensor, at::Tensor, at::Tensor>> runs(groups);
  auto run = [&](int64_t g) {
    runs[g] = steps(input_gates[g], h.narrow(0, g, 1), c.narrow(0, g, 1), batch_sizes,
                    state_kernel.narrow(0, g, 1), projection.narrow(0, g, 1), state_packed[g], projection_packed[g],
                    min_rows, cell_clip, proj_clip);
  };
  for (int64_t g = 0; g < groups; ++g) run(g);
  std::vector<at::Tensor> outputs, hs, cs;
  for (auto& [o, hh, cc] : runs) {
    outputs.push_back(o);
    hs.push_back(hh);
    cs.push_back(cc);
  }
  return {at::cat(outputs), at::cat(hs), at::cat(cs)};
}

}  // namespace

TORCH_LIBRARY(elmo_native, m) {
  m.def(
      "lstm_steps(Tensor[] input_gates, Tensor h, Tensor c, int[] batch_sizes, Tensor state_kernel, Tensor projection, "
      "Tensor[] state_packed, Tensor[] projection_packed, int min_rows, float? cell_clip, float? proj_clip) -> "
      "(Tensor, Tensor, Tensor)");
  m.impl("lstm_steps", c10::DispatchKey::CPU, TORCH_FN(lstm_steps));
  m.impl("lstm_steps", c10::DispatchKey::MkldnnCPU, TORCH_FN(lstm_steps));  // with oneDNN's prepacked weights
}
"""


__all__ = ["SOURCE", "namespace", "native_forward", "native_steps_available"]
