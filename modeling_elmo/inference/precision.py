"""``precision="auto"``: the fastest precision whose error this device keeps within the documented bound.

    from modeling_elmo.inference.precision import choose_precision, load_for_inference

    choice = choose_precision("cpu")              # PrecisionChoice(name="int8", reason="...")
    model = load_for_inference("elmo-original")   # precision="auto": loads float32, bfloat16 or int8, logs which

The rule, and the numbers in docs/speed.md it rests on (words/s of this package at batch 32 unless said):

- A CPU with AMX (``amx_bf16``) and oneDNN bfloat16 kernels: **bfloat16**. On the AMX Xeon of issue 30, bfloat16
  ran 2712 words/s against int8's 1653 and float32's 995 (``elmo embed``: 9.1x AllenNLP against 5.7x and 3.6x),
  and its minimum cosine to float32 is >= 0.99997 (original size) and >= 0.99993 (demo model), above the 0.999
  bound. (At batch 1 int8 was faster there, 414 against 162: the choice is for batches, as ``elmo embed`` runs.)
- Else, a CPU whose int8 kernel takes full-range (8-bit) activations (VNNI: ``avx512_vnni`` or ``avx_vnni``, and
  ``quantize_elmo.needs_reduced_range()`` false): **int8**. On the AVX-512 BF16 + VNNI EPYC (no AMX) int8 was the
  fastest mode: 938 words/s against bfloat16's 771 and float32's 393 at batch 32, 466 against 82 and 103 at batch
  1, ``elmo embed`` 6.1x AllenNLP against 5.0x and 3.3x; its minimum cosine to float32 is >= 0.9997 (original
  size) and >= 0.9957 (demo model), above the 0.995 bound.
- Else, bfloat16 units (``avx512_bf16``) without a full-range int8 kernel: **bfloat16**, about 2x float32's
  products. Either the CPU has no VNNI (no such x86 CPU is known, but the flags allow it), or its int8 kernel is
  limited below VNNI (``FBGEMM_ENABLE_INSTRUCTIONS=AVX2``) and takes 7-bit activations only; the reason says which.
- Else (AVX2 only): **float32**. There bfloat16 ran about 7.7x slower than float32, and int8 needs 7-bit
  activations, whose error misses the 0.995 bound on small models (min cosine 0.986 on the demo model; 0.9995 at
  the original size, for 1.97x float32's speed on the AVX2 EPYC and 1.1x on Zen 1): auto does not know the model
  when it chooses, so it keeps to float32. Ask for ``int8`` by name for a large model on such a CPU.
- CUDA: **bfloat16** where the GPU supports it (``torch.cuda.is_bf16_supported()``), else float32 (the int8
  kernels are CPU kernels). GPU speed has not been benchmarked: bfloat16 there is the general rule for tensor cores.
- Any other device (MPS...): float32.
"""

from __future__ import annotations

import logging
import os
from typing import NamedTuple

import torch

logger = logging.getLogger(__name__)

PRECISIONS = ("float32", "bfloat16", "int8")
# The documented minimum cosine of every word vector of every layer to float32 (issue 30, docs/speed.md).
DOCUMENTED_MIN_COSINE = {"float32": 1.0, "bfloat16": 0.999, "int8": 0.995}

# The CPU features the rule reads: the /proc/cpuinfo flags, and two answers of the kernels themselves.
CPU_FLAGS = ("amx_bf16", "avx512_bf16", "avx512_vnni", "avx_vnni")
ONEDNN_BF16 = "onednn_bf16"  # oneDNN runs bfloat16 products on matrix units here (not emulated)
INT8_FULL_RANGE = "int8_full_range"  # the int8 kernel takes 8-bit activations (no 7-bit fallback)
VNNI_FLAGS = frozenset({"avx512_vnni", "avx_vnni"})
BF16_FLAGS = frozenset({"amx_bf16", "avx512_bf16"})
# The environment variables that limit the kernels below the units the flags list (see ``cpu_capabilities``).
ONEDNN_LIMIT = "ONEDNN_MAX_CPU_ISA"
FBGEMM_LIMIT = "FBGEMM_ENABLE_INSTRUCTIONS"


class PrecisionChoice(NamedTuple):
    """What ``choose_precision`` picked (``float32``, ``bfloat16`` or ``int8``), and why, in one sentence."""

    name: str
    reason: str


def _cpuinfo_flags(path: str = "/proc/cpuinfo") -> set[str]:
    """The CPU flags of the first processor in ``path`` (empty where there is no such file, e.g. macOS)."""
    if not os.path.isfile(path):
        return set()
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if line.startswith("flags"):
                return set(line.partition(":")[2].split())
    return set()


def cpu_capabilities() -> frozenset[str]:
    """This CPU's features that the rule reads: those of ``CPU_FLAGS`` it lists, ``ONEDNN_BF16`` where oneDNN
    reports bfloat16 support, ``INT8_FULL_RANGE`` where the int8 kernel does not saturate 8-bit activations.

    The kernels are asked as well as the flags: a kernel limited by the environment (``ONEDNN_MAX_CPU_ISA``,
    ``FBGEMM_ENABLE_INSTRUCTIONS``) does not use the units the flags list.
    """
    from .quantize import needs_reduced_range

    found = _cpuinfo_flags() & set(CPU_FLAGS)
    if torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported():
        found.add(ONEDNN_BF16)
    if torch.backends.quantized.engine != "none" and not needs_reduced_range():
        found.add(INT8_FULL_RANGE)
    return frozenset(found)


def choose_precision(
    device: str | torch.device = "cpu", capabilities: frozenset[str] | set[str] | None = None
) -> PrecisionChoice:
    """The fastest precision on ``device`` whose error stays within its documented bound (the module's rule).

    ``capabilities``: the CPU's features (``cpu_capabilities()``'s names); default: this CPU's. Given, they stand
    in for this CPU's (to see what another CPU would get). Ignored for CUDA, which is asked directly.
    """
    device = torch.device(device)
    if device.type == "cuda":
        if torch.cuda.is_bf16_supported():
            return PrecisionChoice("bfloat16", "this GPU supports bfloat16")
        return PrecisionChoice("float32", "this GPU has no bfloat16 support, and int8 runs on CPU only")
    if device.type != "cpu":
        return PrecisionChoice("float32", f"no reduced precision is measured on {device.type}")
    caps = cpu_capabilities() if capabilities is None else frozenset(capabilities)
    bf16 = ONEDNN_BF16 in caps
    vnni_listed = bool(caps & VNNI_FLAGS)
    vnni = INT8_FULL_RANGE in caps and vnni_listed
    # The units the flags list but a kernel does not use, named in the reason (a VNNI CPU whose int8 kernel is
    # limited to 7-bit activations is not a CPU "without VNNI").
    int8_limited = f"the CPU has VNNI, but its int8 kernel takes 7-bit activations only here ({_limit(FBGEMM_LIMIT)})"
    if bf16 and "amx_bf16" in caps:
        return PrecisionChoice("bfloat16", "AMX, where bfloat16 ran fastest: 2.7x float32 at batch 32")
    if vnni:
        if "amx_bf16" in caps:
            return PrecisionChoice(
                "int8",
                "VNNI, where int8 ran fastest without AMX: 2.4x float32 at batch 32; the CPU has AMX, but oneDNN's "
                f"bfloat16 kernels do not use it here ({_limit(ONEDNN_LIMIT)})",
            )
        return PrecisionChoice("int8", "VNNI without AMX, where int8 ran fastest: 2.4x float32 at batch 32")
    if bf16 and "avx512_bf16" in caps:
        if vnni_listed:
            reason = f"AVX-512 BF16, where bfloat16 runs about 2x float32; {int8_limited}, which misses its bound"
            return PrecisionChoice("bfloat16", reason)
        return PrecisionChoice("bfloat16", "AVX-512 BF16 without VNNI, where bfloat16 runs about 2x float32")
    if caps & BF16_FLAGS and not bf16:
        no_bf16 = f"the CPU has bfloat16 units, but oneDNN does not use them here ({_limit(ONEDNN_LIMIT)})"
    else:
        no_bf16 = "no bfloat16 units"
    no_int8 = int8_limited if vnni_listed else "no VNNI"
    return PrecisionChoice(
        "float32", f"{no_bf16}; {no_int8}: bfloat16 is slower here and 7-bit int8 misses its error bound"
    )


def _limit(variable: str) -> str:
    """What limits a kernel below the units the CPU lists: ``variable``'s setting where it is set."""
    value = os.environ.get(variable)
    return f"{variable}={value}" if value else f"its kernels are limited, e.g. by {variable}"


def load_for_inference(
    name_or_path: str,
    precision: str = "auto",
    device: str | torch.device = "cpu",
    model_class=None,
    **from_pretrained_kwargs,
):
    """Load a model for inference (eval mode, on ``device``) in ``precision``: ``auto`` (``choose_precision``'s
    pick, logged at INFO), ``float32``, ``bfloat16`` or ``int8`` (CPU only; ``quantize_int8``).

    ``model_class``: the class to load (default [`ElmoModel`]; a head such as [`ElmoForTokenClassification`]: in
    int8 only its biLM is quantized, its head stays float32). The choice is also in ``model.inference_precision``.
    """
    from ..modeling_elmo import ElmoModel
    from .quantize import quantize_int8

    device = torch.device(device)
    if precision == "auto":
        choice = choose_precision(device)
        logger.info("precision auto: %s; %s", choice.name, choice.reason)
        precision = choice.name
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be auto or one of {', '.join(PRECISIONS)}, got {precision!r}")
    if precision == "int8" and device.type != "cpu":
        raise ValueError(f"precision int8 runs on CPU only, not on {device}")
    if "dtype" in from_pretrained_kwargs or "torch_dtype" in from_pretrained_kwargs:
        raise ValueError("give the precision with precision=, not dtype=")
    dtype = torch.bfloat16 if precision == "bfloat16" else torch.float32
    model = (model_class or ElmoModel).from_pretrained(name_or_path, dtype=dtype, **from_pretrained_kwargs)
    model = quantize_int8(model.eval()) if precision == "int8" else model.to(device).eval()
    model.inference_precision = precision
    return model
