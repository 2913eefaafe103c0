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


def _commands(source: Path, output: Path) -> list[list[str]]:
    """The compiler's two calls: ``source`` to an object file, then the object to the library ``output``.

    Apart, because ``-ffast-math`` at the link would add the compiler's ``crtfastmath.o``, whose constructor sets the
    CPU's flush-to-zero and denormals-are-zero modes for the whole process when the library loads: every float
    computation of the user's process, not just this library's, would lose its subnormal numbers."""
    compiler = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++") or "clang++"
    library = Path(torch.__file__).parent / "lib"
    objects = output.with_suffix(".o")
    compile_source = [
        compiler,
        "-c",
        "-fPIC",
        "-O3",
        "-std=c++20",
        "-ffast-math",  # the cell's exp and tanh vectorised (glibc's vector math); it never sees inf or NaN weights
        "-fopenmp",  # at::parallel_for's OpenMP loop, on torch's own runtime
        *_CAPABILITY_FLAGS.get(torch.backends.cpu.get_cpu_capability(), []),
        f"-D_GLIBCXX_USE_CXX11_ABI={int(torch.compiled_with_cxx11_abi())}",
        *(f"-I{path}" for path in cpp_extension.include_paths()),
        str(source),
        "-o",
        str(objects),
    ]
    link = [
        compiler,
        "-shared",
        "-fopenmp",
        str(objects),
        "-o",
        str(output),
        f"-L{library}",
        "-lc10",
        "-ltorch_cpu",
        f"-Wl,-rpath,{library}",
    ]
    return [compile_source, link]


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
    key.update(repr(_commands(Path("source.cpp"), Path("out"))).encode())
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
        for command in _commands(source, library):
            result = subprocess.run(command, capture_output=True, text=True, check=False)
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


def native_steps_saving(
    gates: torch.Tensor,
    batch_sizes: Sequence[int],
    state_kernel: torch.Tensor,
    projection: torch.Tensor | None,
    cell_clip: float | None,
    proj_clip: float | None,
    lstm_order: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``bptt_elmo.steps_saving`` (same arguments and results) in the library's ``lstm_steps_saving``."""
    return getattr(torch.ops, namespace()).lstm_steps_saving(
        gates, list(batch_sizes), state_kernel, projection, cell_clip, proj_clip, lstm_order
    )


def native_steps_backward(
    grad: torch.Tensor,
    activations: torch.Tensor,
    c_raw: torch.Tensor,
    p_raw: torch.Tensor,
    batch_sizes: Sequence[int],
    state_kernel: torch.Tensor,
    projection: torch.Tensor | None,
    cell_clip: float | None,
    proj_clip: float | None,
    lstm_order: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """``bptt_elmo.steps_backward`` (same arguments and results) in the library's ``lstm_steps_backward``."""
    d_gates, d_state_kernel, d_projection = getattr(torch.ops, namespace()).lstm_steps_backward(
        grad.contiguous(),
        *(activations, c_raw, p_raw),
        list(batch_sizes),
        state_kernel,
        projection,
        *(cell_clip, proj_clip, lstm_order),
    )
    return d_gates, d_state_kernel, (None if projection is None else d_projection)


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
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <tuple>
#include <type_traits>
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
// round them in the eager cell; the cell state stays float32 there too. j_block: the block of j (1; 2 for nn.LSTM's
// order i, f, g, o, whose g is j: f is then block 1).
template <typename T>
void cell(const T* gates, const float* c, float* c_out, T* memory, int64_t rows, int64_t d, float clip,
          int64_t j_block, T* activations = nullptr, float* c_raw = nullptr) {
  const int64_t j_at = j_block * d, f_at = (3 - j_block) * d;
  constexpr int64_t B = 512;
  const int64_t blocks = (d + B - 1) / B;
  at::parallel_for(0, rows * blocks, 4, [&](int64_t first, int64_t last) {
    alignas(64) float i[B], j[B], f[B], o[B], m[B];
    for (int64_t w = first; w < last; ++w) {
      const int64_t r = w / blocks, k0 = (w % blocks) * B, n = std::min(B, d - k0);
      const T* g = gates + r * 4 * d + k0;
      for (int64_t q = 0; q < n; ++q) {
        i[q] = load(g, q);
        j[q] = load(g, j_at + q);
        f[q] = load(g, f_at + q);
        o[q] = load(g, 3 * d + q);
      }
      const float* cr = c + r * d + k0;
      float* cw = c_out + r * d + k0;
#pragma omp simd
      for (int64_t q = 0; q < n; ++q) {
        i[q] = sigmoid(i[q]);
        // tanh itself, not 2 sigmoid(2x) - 1: that one's absolute error (~6e-8) is a large relative error near 0,
        // which backpropagation through time amplified (gradients 8e-3 off at the original size).
        j[q] = std::tanh(j[q]);
        f[q] = sigmoid(f[q]);
        o[q] = sigmoid(o[q]);
      }
      for (int64_t q = 0; q < n; ++q) {
        i[q] = round_as(g, i[q]);
        j[q] = round_as(g, j[q]);
        f[q] = round_as(g, f[q]);
        o[q] = round_as(g, o[q]);
      }
      float* raw = nullptr;  // the unclipped state, for the backward (lstm_steps_saving)
      if (activations != nullptr) {
        T* a = activations + r * 4 * d + k0;
        raw = c_raw + r * d + k0;
        for (int64_t q = 0; q < n; ++q) {
          store(a, q, i[q]);
          store(a, j_at + q, j[q]);
          store(a, f_at + q, f[q]);
          store(a, 3 * d + q, o[q]);
        }
      }
#pragma omp simd
      for (int64_t q = 0; q < n; ++q) {
        float v = f[q] * cr[q] + i[q] * j[q];
        if (raw != nullptr) raw[q] = v;  // the value clipped next: the backward's clip mask is the forward's
        v = v < -clip ? -clip : (v > clip ? clip : v);
        cw[q] = v;
        m[q] = o[q] * std::tanh(v);
      }
      T* mw = memory + r * d + k0;
      for (int64_t q = 0; q < n; ++q) store(mw, q, m[q]);
    }
  });
}

// No clip: the largest float (not infinity, which -ffast-math assumes never occurs).
inline float limit_of(std::optional<double> clip) {
  return clip.has_value() ? float(*clip) : std::numeric_limits<float>::max();
}

template <typename T>
T* pointer(const at::Tensor& t) {
  return reinterpret_cast<T*>(t.data_ptr());
}

// gates (G, n, 4D) float32 or bfloat16, c (G, n, D) float32 -> (new c, the projection's input in the gates' dtype).
// With activations (G, n, 4D) and c_raw (G, n, D) (views whose directions may lie apart, each direction's rows
// contiguous), the cell also writes its activations and its unclipped state there.
std::tuple<at::Tensor, at::Tensor> run_cell(const at::Tensor& gates, const at::Tensor& c, std::optional<double> clip,
                                             int64_t j_block, const at::Tensor* activations = nullptr,
                                             const at::Tensor* c_raw = nullptr) {
  const int64_t groups = c.size(0), d = c.size(2);
  auto g = gates.contiguous();
  auto cc = c.contiguous();
  auto c_out = at::empty_like(cc);
  auto memory = at::empty(cc.sizes(), g.options());
  const float limit = limit_of(clip);
  auto run = [&](auto* type, int64_t first, int64_t count) {
    using T = std::remove_pointer_t<decltype(type)>;
    const int64_t rows = count * c.size(1);
    const int64_t at_row = first * c.size(1);
    cell(pointer<T>(g) + at_row * 4 * d, cc.data_ptr<float>() + at_row * d, c_out.data_ptr<float>() + at_row * d,
         pointer<T>(memory) + at_row * d, rows, d, limit, j_block,
         activations ? pointer<T>((*activations)[first]) : nullptr,
         c_raw ? (*c_raw)[first].data_ptr<float>() : nullptr);
  };
  auto all = [&](auto* type) {
    if (activations == nullptr) {
      run(type, 0, groups);
    } else {
      for (int64_t k = 0; k < groups; ++k) run(type, k, 1);
    }
  };
  if (g.scalar_type() == at::kFloat) {
    all(static_cast<float*>(nullptr));
  } else {
    all(static_cast<uint16_t*>(nullptr));
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
    const at::Tensor& state_kernel, const std::optional<at::Tensor>& projection,
    const std::optional<at::Tensor>& state_packed,
    const std::optional<at::Tensor>& projection_packed, int64_t min_rows, std::optional<double> cell_clip,
    std::optional<double> proj_clip, int64_t j_block = 1, const at::Tensor* c_raw = nullptr,
    const at::Tensor* p_raw = nullptr) {
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
    at::Tensor kept_activations, kept_c;  // lstm_steps_saving: this step's rows of what the backward needs
    if (c_raw != nullptr) {
      kept_activations = step_gates;  // the input gates, read above, make room for the activations
      kept_c = c_raw->narrow(1, offset, n);
    }
    auto [c_new, memory] =
        run_cell(gates, c, cell_clip, j_block, c_raw ? &kept_activations : nullptr, c_raw ? &kept_c : nullptr);
    at::Tensor h_new;
    if (packed) {
      h_new = boxed(linear, {memory[0], *projection_packed, c10::IValue(), std::string("none"), no_scalars,
                             std::string("")})
                  .unsqueeze(0);
    } else {
      h_new = projection.has_value() ? at::bmm(memory, *projection) : memory;
    }
    if (p_raw != nullptr) p_raw->narrow(1, offset, n).copy_(h_new);
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

// bptt_elmo.steps_saving: the steps of G directions from zero states, torch's batched products (without a projection,
// h = m: the task BiLSTM's cell; with lstm_order, nn.LSTM's gate order i, f, g, o). gates (G, R, 4D),
// its first N = sum(batch_sizes) rows the input products (bias included), is overwritten with the activations
// sigmoid(i), tanh(j), sigmoid(f), sigmoid(o) -> outputs (G, N, P), c_raw (G, R, D) float32, p_raw (G, R, P).
std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm_steps_saving(
    const at::Tensor& gates, c10::IntArrayRef batch_sizes, const at::Tensor& state_kernel,
    const std::optional<at::Tensor>& projection, std::optional<double> cell_clip, std::optional<double> proj_clip,
    bool lstm_order) {
  TORCH_CHECK(gates.is_contiguous(), "lstm_steps_saving: contiguous gates");
  const int64_t groups = gates.size(0), rows = gates.size(1), d = gates.size(2) / 4;
  const int64_t p = projection.has_value() ? projection->size(2) : d;
  const int64_t running = batch_sizes.empty() ? 0 : batch_sizes[0];
  auto c_raw = at::empty({groups, rows, d}, gates.options().dtype(at::kFloat));
  auto p_raw = at::empty({groups, rows, p}, gates.options());
  auto h = at::zeros({groups, running, p}, gates.options());
  auto c = at::zeros({groups, running, d}, gates.options().dtype(at::kFloat));
  int64_t total = 0;
  for (int64_t n : batch_sizes) total += n;
  TORCH_CHECK(total <= rows, "lstm_steps_saving: more packed steps than gates");
  auto outputs = std::get<0>(steps(gates.narrow(1, 0, total), h, c, batch_sizes, state_kernel, projection,
                                   std::nullopt, std::nullopt, 0, cell_clip, proj_clip, lstm_order ? 2 : 1, &c_raw,
                                   &p_raw));
  return std::make_tuple(outputs, c_raw, p_raw);
}

// One step of the backward, for rows whose cell kept activations (i, j, f, o), c_raw and, but at the first step,
// c_prev_raw (the previous step's): dm (the gradient of m = o tanh(c)) and d_carry (the next step's gradient of c,
// float32, updated in place to this step's c_prev gradient) -> d_gates (rows, 4D) and m (rows, D) for the
// projection's gradient. The clips pass a gradient where clip(x) = x (|x| <= clip), as torch's clamp.
template <typename T>
void cell_backward(const T* activations, const float* c_raw, const float* c_prev_raw, const T* dm, float* d_carry,
                   T* d_gates, T* memory, int64_t rows, int64_t d, float clip, int64_t j_block) {
  const int64_t j_at = j_block * d, f_at = (3 - j_block) * d;  // as in cell
  constexpr int64_t B = 512;
  const int64_t blocks = (d + B - 1) / B;
  at::parallel_for(0, rows * blocks, 4, [&](int64_t first, int64_t last) {
    for (int64_t w = first; w < last; ++w) {
      const int64_t r = w / blocks, k0 = (w % blocks) * B, n = std::min(B, d - k0);
      const T* a = activations + r * 4 * d + k0;
      const float* raw = c_raw + r * d + k0;
      const float* prev = c_prev_raw ? c_prev_raw + r * d + k0 : nullptr;
      const T* g = dm + r * d + k0;
      float* carry = d_carry + r * d + k0;
      T* out = d_gates + r * 4 * d + k0;
      T* m = memory + r * d + k0;
      for (int64_t q = 0; q < n; ++q) {
        const float i = load(a, q), j = load(a, j_at + q), f = load(a, f_at + q), o = load(a, 3 * d + q);
        const float x = raw[q];
        const float c = x < -clip ? -clip : (x > clip ? clip : x);
        const float tanh_c = std::tanh(c);
        const float grad_m = load(g, q);
        float dc = carry[q] + grad_m * o * (1.0f - tanh_c * tanh_c);
        if (x < -clip || x > clip) dc = 0.0f;
        const float c_prev = prev ? std::min(clip, std::max(-clip, prev[q])) : 0.0f;
        store(out, q, dc * j * i * (1.0f - i));
        store(out, j_at + q, dc * i * (1.0f - j * j));
        store(out, f_at + q, dc * c_prev * f * (1.0f - f));
        store(out, 3 * d + q, grad_m * tanh_c * o * (1.0f - o));
        store(m, q, o * tanh_c);
        carry[q] = dc * f;
      }
    }
  });
}

// bptt_elmo.steps_backward: grad (G, N, P), what lstm_steps_saving kept -> d_gates (G, N, 4D) in the gates' order,
// d_state_kernel (G, P, 4D), d_projection (G, D, P) (without a projection, an empty tensor).
std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm_steps_backward(
    const at::Tensor& grad, const at::Tensor& activations, const at::Tensor& c_raw, const at::Tensor& p_raw,
    c10::IntArrayRef batch_sizes, const at::Tensor& state_kernel, const std::optional<at::Tensor>& projection,
    std::optional<double> cell_clip, std::optional<double> proj_clip, bool lstm_order) {
  TORCH_CHECK(activations.is_contiguous() && c_raw.is_contiguous() && p_raw.is_contiguous(),
              "lstm_steps_backward: contiguous saved tensors");
  TORCH_CHECK(c_raw.scalar_type() == at::kFloat, "lstm_steps_backward: a float32 cell state");
  const int64_t groups = grad.size(0), total = grad.size(1), p = grad.size(2), d = c_raw.size(2);
  const int64_t steps_count = int64_t(batch_sizes.size());
  const int64_t running = steps_count ? batch_sizes[0] : 0;
  auto options = activations.options();
  auto d_gates = at::empty({groups, total, 4 * d}, options);
  auto memory = at::empty({groups, total, d}, options);
  auto d_projected = at::empty({groups, total, p}, grad.options());
  auto dh = at::zeros({groups, running, p}, grad.options());
  auto dc = at::zeros({groups, running, d}, c_raw.options());
  auto state_t = state_kernel.transpose(1, 2);
  std::vector<int64_t> offsets(steps_count);
  for (int64_t t = 0, o = 0; t < steps_count; o += batch_sizes[t], ++t) offsets[t] = o;
  const float clip = limit_of(cell_clip);
  for (int64_t t = steps_count - 1; t >= 0; --t) {
    const int64_t offset = offsets[t], n = batch_sizes[t];
    auto g = grad.narrow(1, offset, n).add(dh.narrow(1, 0, n));
    if (proj_clip.has_value()) {
      g = g.masked_fill(p_raw.narrow(1, offset, n).abs().gt(*proj_clip), 0);
    }
    d_projected.narrow(1, offset, n).copy_(g);
    auto dm = (projection.has_value() ? at::bmm(g, projection->transpose(1, 2)) : g).contiguous();
    TORCH_CHECK(dm.scalar_type() == activations.scalar_type(), "lstm_steps_backward: the gradient in the gates' dtype");
    auto carry = dc.narrow(1, 0, n).contiguous();
    for (int64_t k = 0; k < groups; ++k) {
      const float* raw = pointer<float>(c_raw[k]);
      float* d_carry = pointer<float>(carry[k]);
      auto run = [&](auto* type) {
        using T = std::remove_pointer_t<decltype(type)>;
        cell_backward(pointer<T>(activations[k]) + offset * 4 * d, raw + offset * d,
                      t ? raw + offsets[t - 1] * d : nullptr, pointer<T>(dm[k]), d_carry,
                      pointer<T>(d_gates[k]) + offset * 4 * d, pointer<T>(memory[k]) + offset * d, n, d, clip,
                      lstm_order ? 2 : 1);
      };
      if (activations.scalar_type() == at::kFloat) {
        run(static_cast<float*>(nullptr));
      } else {
        run(static_cast<uint16_t*>(nullptr));
      }
    }
    dc.narrow(1, 0, n).copy_(carry);
    dh.narrow(1, 0, n).copy_(at::bmm(d_gates.narrow(1, offset, n), state_t));
  }
  // The weights' gradients over all steps at once: h_{t-1} of each packed row (zero at step 0), and m.
  auto h_prev = at::zeros({groups, total, p}, grad.options());
  for (int64_t t = 1; t < steps_count; ++t) {
    auto previous = p_raw.narrow(1, offsets[t - 1], batch_sizes[t]);
    h_prev.narrow(1, offsets[t], batch_sizes[t])
        .copy_(proj_clip.has_value() ? previous.clamp(-*proj_clip, *proj_clip) : previous);
  }
  auto d_state_kernel = at::bmm(h_prev.transpose(1, 2), d_gates);
  auto d_projection = projection.has_value() ? at::bmm(memory.transpose(1, 2), d_projected) : at::empty({0}, options);
  return std::make_tuple(d_gates, d_state_kernel, d_projection);
}

}  // namespace

TORCH_LIBRARY(elmo_native, m) {
  m.def(
      "lstm_steps(Tensor[] input_gates, Tensor h, Tensor c, int[] batch_sizes, Tensor state_kernel, Tensor projection, "
      "Tensor[] state_packed, Tensor[] projection_packed, int min_rows, float? cell_clip, float? proj_clip) -> "
      "(Tensor, Tensor, Tensor)");
  m.impl("lstm_steps", c10::DispatchKey::CPU, TORCH_FN(lstm_steps));
  m.impl("lstm_steps", c10::DispatchKey::MkldnnCPU, TORCH_FN(lstm_steps));  // with oneDNN's prepacked weights
  m.def(
      "lstm_steps_saving(Tensor(a!) gates, int[] batch_sizes, Tensor state_kernel, Tensor? projection, "
      "float? cell_clip, float? proj_clip, bool lstm_order) -> (Tensor, Tensor, Tensor)");
  m.impl("lstm_steps_saving", c10::DispatchKey::CPU, TORCH_FN(lstm_steps_saving));
  m.def(
      "lstm_steps_backward(Tensor grad, Tensor activations, Tensor c_raw, Tensor p_raw, int[] batch_sizes, "
      "Tensor state_kernel, Tensor? projection, float? cell_clip, float? proj_clip, bool lstm_order) -> "
      "(Tensor, Tensor, Tensor)");
  m.impl("lstm_steps_backward", c10::DispatchKey::CPU, TORCH_FN(lstm_steps_backward));
}
"""


__all__ = [
    "SOURCE",
    "namespace",
    "native_forward",
    "native_steps_available",
    "native_steps_backward",
    "native_steps_saving",
]
