"""The biLSTM's CPU fast path: oneDNN's prepacked weights for the LSTM products at inference, and a faster tanh;
and where the character CNN splits a batch's words by length (``length_split``).

[`ElmoBiLstmLayer.forward`] chooses it at one place: ``PrepackedProducts.for_layer(layer, h)`` gives the products
of this module where they apply (on the CPU, without autograd, with oneDNN for the dtype, for weights of at least
``layer.prepack_min_elements`` per direction), else ``None`` and the layer computes its own plain products. The
recurrence is the same either way; only the matrix products differ, and their results agree to float rounding
(tests/test_prepacked.py).

Why prepacking: a plain matrix product re-lays its weight out into the kernel's blocked format on every call; for
the LSTM's products, whose weights are large and whose rows are few (a batch's rows at one step), that is most of
the cost. Prepacked copies are laid out once and reused by every step until the weights change.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import torch
from torch import nn
from torch.utils.weak import WeakIdKeyDictionary

from .graph_path_elmo import in_graph

BOTH_DIRECTIONS = slice(0, 2)


class _PrepackedWeights:
    """oneDNN's prepacked copies of one LSTM layer's weights, for its products on the CPU at inference.

    They take as much memory again as the LSTM weights (about 300 MB at the original size in float32), and are
    built lazily and held outside the module (``deepcopy``, ``state_dict`` and saving do not see them).
    """

    _cache: WeakIdKeyDictionary = WeakIdKeyDictionary()

    def __init__(self, weights: Sequence[torch.Tensor], min_elements: int):
        # Aliases of the packed weights keep their memory alive, so an address seen again is the same tensor.
        self.sources = [w.detach() for w in weights]
        self.versions = [w._version for w in weights]
        # Per weight ``(2, in, out)``, per direction the ``(out, in)`` weight in oneDNN's layout; ``None`` for a
        # weight below ``min_elements`` per direction, which the plain product serves faster.
        self.packed = [
            [torch.ops.mkldnn._reorder_linear_weight(w[k].t().contiguous(), 32) for k in range(2)]
            if w[0].numel() >= min_elements
            else None
            for w in self.sources
        ]
        self.min_elements = min_elements

    def current(self, weights: Sequence[torch.Tensor], min_elements: int) -> bool:
        return min_elements == self.min_elements and all(
            s.data_ptr() == w.data_ptr() and s.dtype == w.dtype and v == w._version
            for s, v, w in zip(self.sources, self.versions, weights, strict=True)
        )

    @staticmethod
    @functools.cache
    def supported(dtype: torch.dtype) -> bool:
        """Whether this torch build has oneDNN's prepacked products for ``dtype`` on this CPU."""
        if not torch.backends.mkldnn.is_available() or not hasattr(torch.ops.mkldnn, "_linear_pointwise"):
            return False
        if dtype == torch.bfloat16:
            return torch.ops.mkldnn._is_mkldnn_bf16_supported()
        return dtype == torch.float32

    @classmethod
    def of(cls, layer: nn.Module, weights: Sequence[torch.Tensor], min_elements: int) -> _PrepackedWeights:
        # Keyed by the layer, or by its ``prepack_key`` (a compiled graph's operator sees a transient view of the
        # layer: compiled_ops_elmo; its key is the layer's input kernel, alive as long as the layer).
        key = getattr(layer, "prepack_key", layer)
        packed = cls._cache.get(key)
        if packed is None or not packed.current(weights, min_elements):
            cls._cache.pop(key, None)  # free the old copies before making new ones
            packed = cls._cache[key] = cls(weights, min_elements)
        return packed


def _stacked(parts: Sequence[torch.Tensor]) -> torch.Tensor:
    """``(G, ...)`` from ``G`` tensors; a single one becomes a view, not a copy."""
    return parts[0].unsqueeze(0) if len(parts) == 1 else torch.stack(list(parts))


def cpu_tanh(x: torch.Tensor) -> torch.Tensor:
    """``tanh(x)``. In float32 on the CPU without autograd, for tensors of at least 2^15 elements, as
    ``2 sigmoid(2x) - 1``, the same function to within ~1e-7: torch's CPU tanh is ~3x slower than its sigmoid
    (measured), and the LSTM's two tanh per step were its largest element-wise cost. Smaller tensors (a step of a
    few rows) take the one call: the three extra calls cost more there than they save."""
    if (
        in_graph()  # compiled: one call that inductor fuses; and no guard on the tensor's size
        or x.device.type != "cpu"
        or x.dtype != torch.float32
        or x.numel() < 1 << 15
        or (torch.is_grad_enabled() and x.requires_grad)
    ):
        return torch.tanh(x)
    return torch.sigmoid(x * 2).mul_(2).sub_(1)


def _packed_products(
    x: torch.Tensor, packed: Sequence[torch.Tensor], bias: torch.Tensor | None = None, add: torch.Tensor | None = None
) -> torch.Tensor:
    """``x (G, n, in)``, row ``g`` times ``packed[g]`` (prepacked), plus ``bias (G, out)`` or ``add (G, n, out)``
    (fused into the product): ``(G, n, out)``."""
    linear = torch.ops.mkldnn._linear_pointwise
    products = []
    for g, (part, weight) in enumerate(zip(x, packed, strict=True)):
        if add is not None:
            products.append(linear.binary(part.contiguous(), add[g].contiguous(), weight, None, "add"))
        else:
            products.append(linear(part.contiguous(), weight, None if bias is None else bias[g], "none", [], ""))
    return _stacked(products)


def prepacked(layer: nn.Module, x: torch.Tensor, weight: int) -> list[torch.Tensor] | None:
    """The prepacked ``input_kernel`` (``weight=0``), ``state_kernel`` (1) or ``projection`` (2) of ``layer``, one
    per direction, for a product with ``x``; ``None`` where the plain product runs: with
    ``layer.use_prepacked_weights`` off, off the CPU, with gradients to compute, without oneDNN for the dtype, for a
    weight below ``layer.prepack_min_elements``, or in float32 for fewer than ``layer.prepack_min_rows`` rows in
    ``x (2, rows, in)``. In bfloat16 every row count prepacks: torch's own one-row bfloat16 product (a step at batch 1)
    ran at 0.6x its float32 one, oneDNN's prepacked one at 1.5x it (original size, AMD EPYC Zen 4).
    """
    if not layer.use_prepacked_weights:
        return None
    weights = (layer.input_kernel, layer.state_kernel, layer.projection)
    if (
        in_graph()  # compiled or exported: the plain products (a prepacked copy is looked up by data pointer)
        or x.device.type != "cpu"
        or x.dtype != layer.input_kernel.dtype
        or weights[weight][0].numel() < layer.prepack_min_elements
        or (x.dtype == torch.float32 and x.shape[-2] < layer.prepack_min_rows)
        or (torch.is_grad_enabled() and (x.requires_grad or any(w.requires_grad for w in weights)))
        or not _PrepackedWeights.supported(x.dtype)
    ):
        return None
    return _PrepackedWeights.of(layer, weights, layer.prepack_min_elements).packed[weight]


class PrepackedProducts:
    """The three products of an LSTM step (as [`ElmoBiLstmLayer`]'s methods of the same names) with prepacked
    weights, one direction at a time; a step with too few rows falls back to the layer's own product.

    The two directions run one after the other: each direction's product is a call of its own anyway, and joining
    the two results at every step would only copy them (``torch.stack``: ~6% of the CPU time in the profiler at
    the original size and batch 32; running apart measured ~3% faster there).
    """

    def __init__(self, layer: nn.Module, packed: Sequence[list[torch.Tensor] | None], min_rows: int):
        self.layer = layer
        self.packed = packed
        self.min_rows = min_rows

    @classmethod
    def for_layer(cls, layer: nn.Module, h: torch.Tensor) -> PrepackedProducts | None:
        """The fast path's products for ``layer`` and a batch whose initial ``h`` is ``(2, B, P)``, or ``None``
        where it does not apply (see [`prepacked`]; decided on the recurrent product). The packed weights are
        looked up here, once per call of the layer, not at every step (~11 us a look-up, against ~0.5 ms a step
        of one row in bfloat16)."""
        if prepacked(layer, h, 1) is None:
            return None
        weights = (layer.input_kernel, layer.state_kernel, layer.projection)
        packed = _PrepackedWeights.of(layer, weights, layer.prepack_min_elements).packed
        return cls(layer, packed, layer.prepack_min_rows if h.dtype == torch.float32 else 0)

    @staticmethod
    def runs_directions_apart(h: torch.Tensor) -> bool:
        return True

    def _packed(self, weight: int, x: torch.Tensor, directions: slice) -> list[torch.Tensor] | None:
        """Weight ``weight``'s packed copies for ``directions`` and ``x (G, rows, in)``, or ``None`` where the
        layer's own product serves it (a weight below the size, or too few rows: see [`prepacked`])."""
        packed = self.packed[weight]
        return None if packed is None or x.shape[-2] < self.min_rows else packed[directions]

    def input_gates(self, inputs: torch.Tensor, bias: torch.Tensor, directions: slice) -> torch.Tensor:
        packed = self._packed(0, inputs, directions)
        if packed is None:
            return self.layer.input_gates(inputs, bias, directions)
        return _packed_products(inputs, packed, bias=bias)

    def add_state_gates(self, input_gates: torch.Tensor, h: torch.Tensor, directions: slice) -> torch.Tensor:
        packed = self._packed(1, h, directions)
        if packed is None:
            return self.layer.add_state_gates(input_gates, h, directions)
        return _packed_products(h, packed, add=input_gates)

    def project(self, memory: torch.Tensor, directions: slice) -> torch.Tensor:
        memory = memory.to(self.layer.projection.dtype)
        packed = self._packed(2, memory, directions)
        if packed is None:
            return self.layer.project(memory, directions)
        return _packed_products(memory, packed)


def length_split(ranked: torch.Tensor, min_words: int = 64, min_saving: float = 0.25) -> int | None:
    """Where to cut the words, whose lengths (characters and marks) ``ranked (N,)`` holds in ascending order, into
    a short and a long group that the character CNN convolves apart, or ``None`` where one call serves better. The
    convolutions' work grows with each group's words times its longest word: split where that saves at least
    ``min_saving`` of it, for at least ``min_words`` words (fewer cost more in calls than they save)."""
    n = ranked.numel()
    if n < min_words:
        return None
    k = torch.arange(1, n, device=ranked.device)
    cost = k * ranked[:-1] + (n - k) * ranked[-1]  # the first k words up to their longest, the rest up to the last
    best = int(cost.argmin())
    if cost[best] > (1 - min_saving) * n * ranked[-1]:
        return None
    return best + 1


__all__ = ["BOTH_DIRECTIONS", "PrepackedProducts", "cpu_tanh", "length_split", "prepacked"]
