"""ELMo (Peters et al., NAACL 2018, "Deep contextualized word representations") as a Hugging Face model.

The parts, in the paper's order, top to bottom in this file:

    characters -> character CNN -> highway -> projection      (ElmoCharacterEncoder: layer 0)
               -> forward and backward LSTM stacks            (ElmoBiLstmLayer, ElmoBiLm: layers 1..L)
               -> scalar mix of the L+1 layers                (ElmoScalarMix)
    ElmoModel ties them together: it adds <S>/</S> around every sentence, runs the biLM,
    removes the boundaries again and returns the layers and the mixes.

ElmoModel.forward is the one way in, for users and heads alike (as BertModel.forward is for BERT's heads): it
returns the word mask, the layers (``hidden_states``) and the mixes, and has a stream mode for the LM head's
stream training and a token-layer-only mode. The LSTM state is explicit, in and out (ElmoLstmState, as
transformers models pass ``past_key_values``); ``config.stateful`` keeps one between calls. What trains is
decided by ``requires_grad`` alone: the biLM runs without autograd only when none of its parameters requires
grad. ElmoPreTrainedModel.from_pretrained is the one post-load hook (``apply_freezing``) of all heads, and
``_init_weights`` holds the initialisation policies (``init_pretraining_scales`` for the LM head's biLM).

The paper's 2L + 1 representations of a word (x, and forward and backward h of each LSTM layer)
are returned as L + 1 tensors of width 2P: ``[x; x]`` and ``[forward_h_j; backward_h_j]``, j = 1..L.

Shapes: B sentences, W words (after padding), C characters per word (50), P = projection_dim,
D = lstm_dim, T = W + 2 (words plus the sentence boundaries the model adds).
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging as std_logging
import math
import operator
import os
import re
import weakref
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm
from transformers import PreTrainedModel
from transformers import initialization as init
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.utils import ModelOutput, can_return_tuple, logging

from .characters import NUM_CHARACTERS, PADDING_CHAR, begin_of_sentence_ids, end_of_sentence_ids, word_to_char_ids
from .configuration_elmo import ElmoConfig
from .manylangs import PAD_CHAR as MANYLANGS_PAD_CHAR
from .manylangs import ElmoWordInput, append_word_ids, boundary_rows

logger = logging.get_logger(__name__)

PADDING_ID = PADDING_CHAR + 1  # the padding mark after the +1 shift of all character ids
# Memory bounds for long inputs (issue #8), exact (outputs do not depend on them beyond float rounding):
# words per character-CNN call (up to ~0.37 MB of activations a word at the original size), and packed biLSTM
# steps whose input gates are computed at once (2 x 4D floats each: 128 KB at the original size).
CHAR_CNN_BLOCK_WORDS = 1024
GATE_BLOCK_ROWS = 1024

# One layer's recurrent state, both directions: (projected output h (2, n, P), cell c (2, n, D)).
LstmState = tuple[torch.Tensor, torch.Tensor]


# ---------------------------------------------------------------------------------------------
# Layer 0: characters -> character CNN -> highway -> projection
# ---------------------------------------------------------------------------------------------


class ElmoHighway(nn.Module):
    """One highway layer: ``y = t * relu(x W_transform + b) + (1 - t) * x`` with ``t = sigmoid(x W_carry + b)``."""

    def __init__(self, size: int):
        super().__init__()
        self.carry = nn.Linear(size, size)
        self.transform = nn.Linear(size, size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate = torch.sigmoid(self.carry(x))
        return gate * F.relu(self.transform(x)) + (1.0 - gate) * x


class ElmoCharacterEncoder(nn.Module):
    """The context-independent token encoder: a word's character ids to its layer-0 vector.

    Character embedding, one 1-D convolution per ``(width, count)`` filter (max over positions,
    then the activation), ``n_highway`` highway layers, and a linear projection to ``P``.

    Input ``(..., C)`` character ids; output ``(..., P)``. A model with a word input (ELMoForManyLangs, see
    ``manylangs.py``) reads ``(..., C + 1)``: each word's character ids, then its word id, whose term
    ``word_input`` adds to the projection.
    """

    def __init__(self, config: ElmoConfig):
        super().__init__()
        self.char_embedding = nn.Embedding(config.n_characters, config.char_embedding_dim, padding_idx=0)
        self.convolutions = nn.ModuleList(
            nn.Conv1d(config.char_embedding_dim, count, kernel_size=width) for width, count in config.char_cnn_filters
        )
        self.activation = torch.tanh if config.char_cnn_activation == "tanh" else F.relu
        self.highways = nn.ModuleList(ElmoHighway(config.n_filters) for _ in range(config.n_highway))
        self.projection = nn.Linear(config.n_filters, config.projection_dim)
        self.padding_id = MANYLANGS_PAD_CHAR if config.char_vocabulary == "manylangs" else PADDING_ID
        self.word_input = ElmoWordInput(config) if config.word_vocab_size else None

    def forward(self, char_ids: torch.Tensor) -> torch.Tensor:
        batch_shape, width = char_ids.shape[:-1], char_ids.shape[-1]
        char_ids = char_ids.reshape(-1, width)
        if char_ids.shape[0] > CHAR_CNN_BLOCK_WORDS:  # bounded convolution activations for many words
            return torch.cat([self(block) for block in char_ids.split(CHAR_CNN_BLOCK_WORDS)]).reshape(*batch_shape, -1)
        word_ids = None
        if self.word_input is not None:
            char_ids, word_ids = char_ids[:, :-1], char_ids[:, -1]
        chars = char_ids.shape[-1]
        padding_id = self.padding_id
        # Words are far shorter than C: positions past the longest word hold only the padding mark,
        # and every window made only of padding has the same value. Convolve up to the longest word
        # and let that one value stand in for the windows past it (the result is the same).
        span = int(char_ids.ne(padding_id).sum(dim=-1).max()) if char_ids.numel() else chars
        widest = max(conv.kernel_size[0] for conv in self.convolutions)
        embedded = self.char_embedding(char_ids[:, : min(chars, span + widest - 1)]).transpose(1, 2)  # (N, dim, C')
        features = []
        for conv in self.convolutions:
            width = conv.kernel_size[0]
            keep = min(chars, span + width - 1)
            feature = conv(embedded[:, :, :keep]).amax(dim=-1)  # (N, count)
            if keep < chars:
                padding_only = self.char_embedding.weight[padding_id].unsqueeze(-1).expand(-1, width)
                feature = torch.maximum(feature, conv(padding_only.unsqueeze(0))[0, :, 0])
            # Max over positions first: relu and tanh are monotonic, so this equals the original's order.
            features.append(self.activation(feature))
        x = torch.cat(features, dim=-1)  # (N, n_filters)
        for highway in self.highways:
            x = highway(x)
        x = self.projection(x)
        if word_ids is not None:
            x = x + self.word_input(word_ids)
        return x.reshape(*batch_shape, -1)


# ---------------------------------------------------------------------------------------------
# Layers 1..L: the biLSTM language model
# ---------------------------------------------------------------------------------------------


class _PrepackedWeights:
    """oneDNN's prepacked copies of one [`ElmoBiLstmLayer`]'s weights, for its products on the CPU at inference.

    A plain matrix product re-lays its weight out into the kernel's blocked format on every call; for the LSTM's
    products, whose weights are large and whose rows are few (a batch's rows at one step), that is most of the
    cost. These copies are laid out once, then reused by every step until the weights change. They take as much
    memory again as the LSTM weights (about 300 MB at the original size in float32), and are built lazily and
    held outside the module (``deepcopy``, ``state_dict`` and saving do not see them).
    """

    _cache: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

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
        packed = cls._cache.get(layer)
        if packed is None or not packed.current(weights, min_elements):
            cls._cache.pop(layer, None)  # free the old copies before making new ones
            packed = cls._cache[layer] = cls(weights, min_elements)
        return packed


def _stacked(parts: Sequence[torch.Tensor]) -> torch.Tensor:
    """``(G, ...)`` from ``G`` tensors; a single one becomes a view, not a copy."""
    return parts[0].unsqueeze(0) if len(parts) == 1 else torch.stack(list(parts))


def _tanh(x: torch.Tensor) -> torch.Tensor:
    """``tanh(x)``. In float32 on the CPU without autograd, for tensors of at least 2^15 elements, as
    ``2 sigmoid(2x) - 1``, the same function to within ~1e-7: torch's CPU tanh is ~3x slower than its sigmoid
    (measured), and the LSTM's two tanh per step were its largest element-wise cost. Smaller tensors (a step of a
    few rows) take the one call: the three extra calls cost more there than they save."""
    if (
        x.device.type != "cpu"
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


BOTH_DIRECTIONS = slice(0, 2)


class ElmoBiLstmLayer(GradientCheckpointingLayer):
    """Layer ``k`` of the biLM: a forward and a backward LSTM (independent weights), each with a
    projected, clipped output. Index 0 of every parameter is the forward direction, 1 the backward.

    The original (TensorFlow ``LSTMCell`` with ``num_proj``), per direction and step::

        i, j, f, o = [x_t; h_{t-1}] W_0 + B                        (gate order of the original weights)
        c_t = sigmoid(f + 1) * c_{t-1} + sigmoid(i) * tanh(j)      (the forget bias 1 is not stored in B)
        c_t = clip(c_t, cell_clip)
        h_t = clip((sigmoid(o) * tanh(c_t)) W_P, proj_clip)

    ``W_0`` is kept as ``input_kernel`` (its rows that multiply ``x_t``) and ``state_kernel`` (those
    that multiply ``h_{t-1}``): the input part of all steps is then one matrix product per layer,
    and each step is one batched product for both directions (on the CPU with prepacked or int8 products, the
    directions run one after the other: see ``runs_directions_apart``). With ``residual`` the layer's input is
    added to its output; the recurrent state stays the un-added ``h_t``.

    Parameters: ``input_kernel``, ``state_kernel`` ``(2, P, 4D)``, ``bias`` ``(2, 4D)``,
    ``projection`` ``(2, D, P)``, all in the original ``x @ W`` layout.
    """

    def __init__(self, config: ElmoConfig, residual: bool):
        super().__init__()
        p, d = config.projection_dim, config.lstm_dim
        self.projection_dim, self.lstm_dim = p, d
        self.input_kernel = nn.Parameter(torch.empty(2, p, 4 * d))
        self.state_kernel = nn.Parameter(torch.empty(2, p, 4 * d))
        self.bias = nn.Parameter(torch.empty(2, 4 * d))
        self.projection = nn.Parameter(torch.empty(2, d, p))
        self.cell_clip = config.cell_clip
        self.proj_clip = config.proj_clip
        self.residual = residual

    # The three matrix products of a step. Subclasses change how they are computed (the int8 layer of
    # ``modeling_elmo.utils.quantize_elmo``); the recurrence in ``forward`` stays the same. On the CPU, without
    # autograd, they use prepacked weights (see [`_PrepackedWeights`]; ``use_prepacked_weights = False`` turns it off)
    # for weights of at least ``prepack_min_elements`` per direction and products of at least ``prepack_min_rows``
    # rows: for smaller weights (the LSTMs smaller than 2x2048_256), oneDNN's per-call overhead costs more than the
    # re-layout it saves, and a one-row product (a step of one sentence) ran 2x slower prepacked than with bmm.

    use_prepacked_weights: bool = True
    prepack_min_elements: int = 1 << 20
    prepack_min_rows: int = 2

    def prepacked(self, x: torch.Tensor, weight: int) -> list[torch.Tensor] | None:
        """The prepacked ``input_kernel`` (``weight=0``), ``state_kernel`` (1) or ``projection`` (2), one per direction,
        for a product with ``x``; ``None`` where the plain product runs: off the CPU, with gradients to compute,
        without oneDNN for the dtype, for a weight below ``prepack_min_elements`` or fewer than ``prepack_min_rows``
        rows in ``x (2, rows, in)``."""
        weights = (self.input_kernel, self.state_kernel, self.projection)
        if (
            not self.use_prepacked_weights
            or x.device.type != "cpu"
            or x.dtype != self.input_kernel.dtype
            or weights[weight][0].numel() < self.prepack_min_elements
            or x.shape[-2] < self.prepack_min_rows
            or (torch.is_grad_enabled() and (x.requires_grad or any(w.requires_grad for w in weights)))
            or not _PrepackedWeights.supported(x.dtype)
        ):
            return None
        return _PrepackedWeights.of(self, weights, self.prepack_min_elements).packed[weight]

    def gate_bias(self) -> torch.Tensor:
        """``B`` plus the forget bias 1, ``(2, 4D)``, in the weights' dtype."""
        d = self.lstm_dim
        return self.bias + F.pad(self.bias.new_ones(d), (2 * d, d))

    # Each product takes the ``directions`` its ``G`` leading rows belong to: both (``BOTH_DIRECTIONS``, G = 2) or
    # one (``slice(k, k + 1)``, G = 1; see ``runs_directions_apart``).

    def input_gates(
        self, inputs: torch.Tensor, bias: torch.Tensor, directions: slice = BOTH_DIRECTIONS
    ) -> torch.Tensor:
        """``inputs (G, n, P) @ input_kernel + bias (G, 4D)`` -> ``(G, n, 4D)``."""
        packed = self.prepacked(inputs, 0)
        if packed is not None:
            return _packed_products(inputs, packed[directions], bias=bias)
        return torch.baddbmm(bias.unsqueeze(1), inputs, self.input_kernel[directions])

    def add_state_gates(
        self, input_gates: torch.Tensor, h: torch.Tensor, directions: slice = BOTH_DIRECTIONS
    ) -> torch.Tensor:
        """``input_gates (G, n, 4D) + h (G, n, P) @ state_kernel`` -> ``(G, n, 4D)``."""
        packed = self.prepacked(h, 1)
        if packed is not None:
            return _packed_products(h, packed[directions], add=input_gates)
        return torch.baddbmm(input_gates, h, self.state_kernel[directions])

    def project(self, memory: torch.Tensor, directions: slice = BOTH_DIRECTIONS) -> torch.Tensor:
        """``memory (G, n, D) @ projection`` -> ``h (G, n, P)`` in the weights' dtype."""
        memory = memory.to(self.projection.dtype)
        packed = self.prepacked(memory, 2)
        if packed is not None:
            return _packed_products(memory, packed[directions])
        return torch.bmm(memory, self.projection[directions])

    def runs_directions_apart(self, h: torch.Tensor) -> bool:
        """Whether the two directions run one after the other instead of together, for a batch whose initial
        ``h`` is ``(2, B, P)``: where each direction's product is a call of its own anyway (prepacked weights),
        joining the two results at every step would only copy them (``torch.stack``: ~6% of the CPU time in the
        profiler at the original size and batch 32; running apart measured ~3% faster there)."""
        return self.prepacked(h, 1) is not None

    @staticmethod
    def state_dtype(dtype: torch.dtype) -> torch.dtype:
        """The dtype of the cell state, its update and its clip for weights of ``dtype``: float32 for
        bfloat16 and float16 weights (their 8 or 11 bits of mantissa would be rounded off the cell state at every
        step, and the error carried through the sentence), else ``dtype`` itself."""
        return torch.float32 if dtype in (torch.bfloat16, torch.float16) else dtype

    def forward(
        self,
        inputs: torch.Tensor,
        h: torch.Tensor,
        c: torch.Tensor,
        batch_sizes: Sequence[int],
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Run both directions over packed sequences (rows sorted by length, longest first).

        Args:
            inputs: ``(2, N, P)``, the ``N`` valid steps of the batch packed time-major: step 0 of
                every row, then step 1 of the rows still running, ... (as ``PackedSequence``).
                Index 0 is the forward direction's input, 1 the backward direction's (sequences
                already reversed within their lengths).
            h, c: initial states ``(2, B, P)`` and ``(2, B, D)``.
            batch_sizes: rows running at each step (non-increasing, summing to ``N``).

        Returns:
            ``outputs (2, N, P)`` packed like ``inputs``, and the states after each row's last
            step, ``h (2, B, P)`` and ``c (2, B, D)``.

        Reduced precision (bfloat16 or float16 weights): the products and the gates' pre-activations are in the
        weights' dtype (the products accumulate in float32 inside the kernels), while the cell state ``c`` is kept,
        updated and clipped in float32 (and returned in float32); ``h`` and the outputs are in the weights' dtype.
        """
        # The forget bias, added once for all steps instead of once per step.
        bias = self.gate_bias()
        c = c.to(self.state_dtype(bias.dtype))
        h = h.to(inputs.dtype)
        if self.runs_directions_apart(h):
            one = [slice(k, k + 1) for k in range(2)]
            runs = [self.recurrence(inputs[d], h[d], c[d], bias[d], batch_sizes, d) for d in one]
            output, h, c = (torch.cat(parts) for parts in zip(*runs, strict=True))
        else:
            output, h, c = self.recurrence(inputs, h, c, bias, batch_sizes, BOTH_DIRECTIONS)
        if self.residual:
            output = output + inputs
        return output, h, c

    def recurrence(
        self,
        inputs: torch.Tensor,
        h: torch.Tensor,
        c: torch.Tensor,
        bias: torch.Tensor,
        batch_sizes: Sequence[int],
        directions: slice,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The LSTM steps of ``directions`` (``G`` of them): ``inputs (G, N, P)``, ``h (G, B, P)``, ``c (G, B, D)``,
        ``bias (G, 4D)`` -> the un-added outputs ``(G, N, P)`` and the final ``h``, ``c`` (as ``forward``)."""
        # The input part of the gates, for blocks of GATE_BLOCK_ROWS packed steps at a time (usually all of
        # them at once): memory does not grow with N x 4D for very long inputs.
        input_gates, block_start, block_end = None, 0, 0
        outputs, ended_h, ended_c = [], [], []
        offset = 0
        for n in batch_sizes:
            if n < h.shape[1]:  # the last rows ended at the previous step: keep their final states
                ended_h.append(h[:, n:])
                ended_c.append(c[:, n:])
                h, c = h[:, :n], c[:, :n]
            if offset + n > block_end:
                block_start, block_end = offset, offset + max(n, GATE_BLOCK_ROWS)
                input_gates = None  # free the previous block first
                input_gates = self.input_gates(inputs[:, block_start:block_end], bias, directions)
            start = offset - block_start
            gates = self.add_state_gates(input_gates[:, start : start + n], h, directions)  # (G, n, 4D)
            i, j, f, o = gates.chunk(4, dim=-1)
            c = torch.addcmul(torch.sigmoid(f) * c, torch.sigmoid(i), _tanh(j))
            if self.cell_clip is not None:
                c = c.clamp(-self.cell_clip, self.cell_clip)
            h = self.project(torch.sigmoid(o) * _tanh(c), directions)
            if self.proj_clip is not None:
                h = h.clamp(-self.proj_clip, self.proj_clip)
            outputs.append(h)
            offset += n
        output = torch.cat(outputs, dim=1) if outputs else torch.zeros_like(inputs)
        # Rows that ended last come first: the batch is sorted by length.
        return output, torch.cat([h, *ended_h[::-1]], dim=1), torch.cat([c, *ended_c[::-1]], dim=1)


def _reverse_padded(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Reverse each row of ``x (B, T, ...)`` within its length; positions past the length stay put."""
    steps = torch.arange(x.shape[1], device=x.device).unsqueeze(0)
    index = torch.where(steps < lengths.unsqueeze(1), lengths.unsqueeze(1) - 1 - steps, steps)
    return x.gather(1, index.view(*index.shape, *([1] * (x.dim() - 2))).expand_as(x))


class ElmoLstmState:
    """The biLM's recurrent state, carried from one call to the next as transformers models carry
    ``past_key_values``: per LSTM layer, ``(h (2, R, P), c (2, R, D))`` for ``R`` batch rows (index 0 of the
    first dimension is the forward direction, 1 the backward one).

    [`ElmoModel.forward`] takes one (``lstm_state=``), starts each batch row from that row's state, and
    [`update`]s it in place with the states the rows end with (returned as ``ElmoModelOutput.lstm_state``).
    An empty state (``ElmoLstmState()``, or after [`reset`]) means zeros, and rows past its end start from
    zero. Stored states are detached from the autograd graph: backpropagation stops at the start of a call.

    ```python
    state = ElmoLstmState()
    for batch in batches:  # row b of every batch continues row b of the previous one
        out = model(**batch, lstm_state=state)
    state.reset()  # start again from zero
    ```
    """

    def __init__(self, layers: Sequence[LstmState] | None = None):
        self.layers: list[LstmState] = list(layers) if layers is not None else []

    @property
    def num_rows(self) -> int:
        """Rows ``R`` held (0 when empty)."""
        return self.layers[0][0].shape[1] if self.layers else 0

    def select(self, rows: torch.Tensor) -> ElmoLstmState:
        """The states of ``rows`` ``(n,)`` (long), in that order; rows past the end are zeros. Empty stays empty."""
        if not self.layers:
            return ElmoLstmState()
        size = max(self.num_rows, int(rows.max()) + 1 if rows.numel() else 0)
        rows = rows.to(self.layers[0][0].device)
        padded = [(_pad_rows(h, size), _pad_rows(c, size)) for h, c in self.layers]
        return ElmoLstmState([(h.index_select(1, rows), c.index_select(1, rows)) for h, c in padded])

    def update(self, rows: torch.Tensor, new: ElmoLstmState) -> ElmoLstmState:
        """Set the states of ``rows`` ``(n,)`` to ``new`` (``n`` rows; detached), growing with zero rows as
        needed; the other rows keep theirs. Returns this state."""
        if not new.layers or rows.numel() == 0:
            return self
        size = max(self.num_rows, int(rows.max()) + 1)
        if not self.layers:
            self.layers = [(h.new_zeros(2, 0, h.shape[2]), c.new_zeros(2, 0, c.shape[2])) for h, c in new.layers]
        self._grow(size)
        rows = rows.to(new.layers[0][0].device)
        self.layers = [
            (old_h.to(h).index_copy(1, rows, h.detach()), old_c.to(c).index_copy(1, rows, c.detach()))
            for (old_h, old_c), (h, c) in zip(self.layers, new.layers, strict=True)
        ]
        return self

    def reset(self) -> None:
        """Forget every row's state (back to zeros)."""
        self.layers = []

    def _grow(self, rows: int) -> None:
        if rows > self.num_rows:
            self.layers = [(_pad_rows(h, rows), _pad_rows(c, rows)) for h, c in self.layers]

    def __repr__(self) -> str:
        return f"ElmoLstmState(layers={len(self.layers)}, rows={self.num_rows})"

    def __getitem__(self, row: int) -> ElmoLstmState:
        """Row ``row``'s state alone (one row; zeros past the end, as [`select`]), as ``tensor[b]`` is row ``b``:
        this is how transformers' pipelines split a batched output (``ElmoModelOutput.lstm_state``) by sentence."""
        row = operator.index(row)
        if row < 0:
            raise IndexError(f"ElmoLstmState rows are indexed from 0, got {row}")
        return self.select(torch.tensor([row]))

    __iter__ = None  # rows past the end read as zeros, so there is no end to iterate to: use range(num_rows)


def _pad_rows(state: torch.Tensor, rows: int) -> torch.Tensor:
    """Extend a ``(2, n, size)`` state with zero rows to ``(2, rows, size)``."""
    return F.pad(state, (0, 0, 0, rows - state.shape[1]))


class ElmoBiLm(nn.Module):
    """The biLSTM: ``n_layers`` [`ElmoBiLstmLayer`]s, each reading the one below, direction by direction.

    The backward direction reads each sentence right to left; both directions take their inputs together, the
    backward one's reversed within each sentence's length. Layer ``k``'s output is ``[forward_h; backward_h]``.
    States come in and go out as an [`ElmoLstmState`] (empty: zeros).
    """

    def __init__(self, config: ElmoConfig):
        super().__init__()
        self.layers = nn.ModuleList(
            ElmoBiLstmLayer(config, residual=config.use_skip_connections and k > 0) for k in range(config.n_layers)
        )

    def _initial(self, state: ElmoLstmState | None, rows: int, like: torch.Tensor) -> list[LstmState]:
        """Per layer ``(h (2, rows, P), c (2, rows, D))`` from ``state`` (``rows`` rows) or zeros."""
        if state is not None and state.layers:
            return [
                (h.to(like), c.to(device=like.device, dtype=layer.state_dtype(like.dtype)))
                for layer, (h, c) in zip(self.layers, state.layers, strict=True)
            ]
        return [
            (
                like.new_zeros(2, rows, layer.projection_dim),
                like.new_zeros(2, rows, layer.lstm_dim, dtype=layer.state_dtype(like.dtype)),
            )
            for layer in self.layers
        ]

    def forward(
        self,
        token_embeddings: torch.Tensor,
        lengths: torch.Tensor,
        initial_state: ElmoLstmState | None = None,
    ) -> tuple[list[torch.Tensor], ElmoLstmState]:
        """Run both directions of every layer.

        Args:
            token_embeddings: ``(B, T, P)``, zero past each sequence's end.
            lengths: ``(B,)`` steps per sequence, each at least 1.
            initial_state: ``B`` rows to start from; ``None`` or empty: zeros.

        Returns:
            The ``n_layers`` outputs, each ``(B, T, 2P)``, and the final states (``B`` rows): after each
            sequence's last step for the forward direction, after its first for the backward one.
        """
        # Sort longest first, so the rows still running at any step are a prefix of the batch, and
        # pack the valid steps time-major: each step's rows are then one contiguous block.
        batch, steps, width = token_embeddings.shape
        sorted_lengths, order = lengths.sort(descending=True)
        restore = order.argsort()
        valid = torch.arange(steps, device=lengths.device) < sorted_lengths.unsqueeze(1)  # (B, T)
        step_index, row_index = valid.t().nonzero(as_tuple=True)
        packed_index = row_index * steps + step_index  # (N,) into the flattened (B * T)
        batch_sizes = [n for n in valid.sum(dim=0).tolist() if n > 0]

        x = token_embeddings.index_select(0, order)
        both = torch.stack([x, _reverse_padded(x, sorted_lengths)])  # (2, B, T, P)
        inputs = both.reshape(2, batch * steps, width).index_select(1, packed_index)  # (2, N, P)
        outputs, final_states = [], []
        for layer, (h, c) in zip(self.layers, self._initial(initial_state, batch, x), strict=True):
            inputs, h, c = layer(inputs, h.index_select(1, order), c.index_select(1, order), batch_sizes)
            full = inputs.new_zeros(2, batch * steps, width).index_copy(1, packed_index, inputs)
            full = full.view(2, batch, steps, width)
            forward, backward = full[0], _reverse_padded(full[1], sorted_lengths)
            outputs.append(torch.cat([forward, backward], dim=-1).index_select(0, restore))
            final_states.append((h.index_select(1, restore), c.index_select(1, restore)))
        return outputs, ElmoLstmState(final_states)

    def forward_streams(
        self, tokens: torch.Tensor, initial_state: ElmoLstmState | None = None
    ) -> tuple[list[torch.Tensor], ElmoLstmState]:
        """Run each direction left to right over its own full window of tokens (stream training).

        Args:
            tokens: ``(2, B, T, P)``: index 0 the forward direction's tokens, 1 the backward direction's (its
                stream is the text reversed, so it too is read left to right). No padding.
            initial_state: ``B`` rows to start from; ``None`` or empty: zeros.

        Returns:
            The ``n_layers`` outputs, each ``(2, B, T, P)`` (same layout as ``tokens``), and the final states.
        """
        _, batch, steps, width = tokens.shape
        inputs = tokens.transpose(1, 2).reshape(2, steps * batch, width)  # time-major: all rows run every step
        outputs, final_states = [], []
        for layer, (h, c) in zip(self.layers, self._initial(initial_state, batch, tokens), strict=True):
            inputs, h, c = layer(inputs, h, c, [batch] * steps)
            outputs.append(inputs.view(2, steps, batch, width).transpose(1, 2))
            final_states.append((h, c))
        return outputs, ElmoLstmState(final_states)


# ---------------------------------------------------------------------------------------------
# The scalar mix: ELMo_k = gamma * sum_j softmax(w)_j h_{k,j}
# ---------------------------------------------------------------------------------------------


class ElmoScalarMix(nn.Module):
    """A task's learned mix of the biLM layers: ``gamma * sum_j softmax(w)_j * norm(h_j)``, then dropout.

    Args:
        num_layers: layers to mix (``L + 1``: the token layer and the L biLSTM layers).
        layer_norm: ``None``; ``"batch"``: normalise each layer with the mean and variance of all
            its unmasked elements in the batch, as the original does (the result then depends on
            the rest of the batch); ``"token"``: normalise each word vector on its own.
        dropout: dropout on the mixed vector.

    ``l2_penalty()`` is ``||w||^2``; heads add ``lambda * l2_penalty()`` to their loss.
    """

    def __init__(self, num_layers: int, layer_norm: str | None = None, dropout: float = 0.0):
        super().__init__()
        if layer_norm not in (None, "batch", "token"):
            raise ValueError(f"layer_norm must be None, 'batch' or 'token', got {layer_norm!r}")
        self.scalar_parameters = nn.Parameter(torch.zeros(num_layers))
        self.gamma = nn.Parameter(torch.ones(1))
        self.layer_norm = layer_norm
        self.dropout = nn.Dropout(dropout)

    def forward(self, layers: Sequence[torch.Tensor], mask: torch.Tensor) -> torch.Tensor:
        """Mix ``layers`` (each ``(B, W, H)``) under ``mask`` ``(B, W)``; returns ``(B, W, H)``, zero where masked."""
        if len(layers) != self.scalar_parameters.numel():
            raise ValueError(f"expected {self.scalar_parameters.numel()} layers to mix, got {len(layers)}")
        weights = torch.softmax(self.scalar_parameters, dim=0)
        keep = mask.unsqueeze(-1).to(layers[0].dtype)
        mixed = sum(w * self._normalize(layer, keep) for w, layer in zip(weights, layers, strict=True))
        return self.dropout(self.gamma * mixed) * keep

    def _normalize(self, layer: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        if self.layer_norm == "token":
            return F.layer_norm(layer, layer.shape[-1:], eps=1e-12)
        if self.layer_norm == "batch":
            count = (keep.sum() * layer.shape[-1]).clamp(min=1)
            mean = (layer * keep).sum() / count
            variance = (((layer - mean) * keep) ** 2).sum() / count
            return (layer - mean) / torch.sqrt(variance + 1e-12)
        return layer

    def l2_penalty(self) -> torch.Tensor:
        """``||w||^2`` of the (pre-softmax) mixing weights."""
        return (self.scalar_parameters**2).sum()


# ---------------------------------------------------------------------------------------------
# Input validation (issue #13): one function for the eager model and for callers of an exported graph
# ---------------------------------------------------------------------------------------------


def _follow_umask(paths: Iterable[Path]) -> None:
    """Give ``paths`` the mode a new file gets under the user's umask: transformers writes the weights privately
    (0600), so a folder saved to share or package would hold weights that only its owner can read."""
    umask = os.umask(0)
    os.umask(umask)
    for path in paths:
        path.chmod(0o666 & ~umask)


def check_inputs(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None,
    max_characters_per_token: int,
    n_characters: int = NUM_CHARACTERS,
) -> torch.Tensor:
    """Validate a batch for [`ElmoModel`] and return its word mask ``(B, W)`` bool.

    Args:
        input_ids: ``(B, W, C)`` int64 or int32 character ids in ``[0, n_characters)`` (262, or the model's own
            count for an ELMoForManyLangs model; ``C = max_characters_per_token``), as [`ElmoTokenizer`] makes
            them; a padded word is a row of zeros.
        attention_mask: ``None`` (then the words are the non-zero character rows), or a ``(B, W)`` tensor of
            bool or integer dtype holding only 0 and 1, right-padded (each sentence's words first, then
            padding). Floating-point masks are refused by name, as are lists and arrays: 0.5, 2, -1 or NaN
            have no meaning as a mask, and a float mask is easily a mask of weights rather than of words.
            With a mask, the ids are checked at the words only: padded positions may hold any id (the model
            ignores them, as transformers models do), e.g. a pipeline's collation pads with the tokenizer's
            ``pad_token_id``.

    Raises:
        TypeError: ``attention_mask`` is not a tensor.
        ValueError: naming ``input_ids`` or ``attention_mask`` and what is wrong (shape, dtype, values, padding).
    """
    chars = max_characters_per_token
    if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 3 or input_ids.shape[-1] != chars:
        shape = tuple(input_ids.shape) if isinstance(input_ids, torch.Tensor) else type(input_ids).__name__
        raise ValueError(
            f"input_ids must be a (batch, words, {chars}) tensor of character ids from ElmoTokenizer, got {shape}"
        )
    if input_ids.dtype not in (torch.int64, torch.int32):
        raise ValueError(f"input_ids must hold integer character ids (int64 or int32), got dtype {input_ids.dtype}")
    if attention_mask is None:
        _check_character_ids(input_ids, n_characters)
        return input_ids.ne(0).any(dim=-1)
    if not isinstance(attention_mask, torch.Tensor):
        raise TypeError(
            f"attention_mask must be a torch.Tensor of 0/1 (bool or integer dtype), got {type(attention_mask).__name__}"
        )
    if tuple(attention_mask.shape) != tuple(input_ids.shape[:2]):
        raise ValueError(
            f"attention_mask must have shape (batch, words) = {tuple(input_ids.shape[:2])}, "
            f"got {tuple(attention_mask.shape)}"
        )
    if attention_mask.dtype != torch.bool:
        if attention_mask.is_floating_point() or attention_mask.is_complex():
            raise ValueError(
                f"attention_mask must have a bool or integer dtype (1 for words, 0 for padding), got "
                f"{attention_mask.dtype}; pass mask.long() or mask.bool() if it holds only 0 and 1"
            )
        bad = attention_mask.ne(0) & attention_mask.ne(1)
        if bad.any():
            where = tuple(bad.nonzero()[0].tolist())
            raise ValueError(
                f"attention_mask must hold only 0 (padding) and 1 (words), got {attention_mask[where].item()} "
                f"at {where}"
            )
    mask = attention_mask.bool()
    prefix = torch.arange(mask.shape[1], device=mask.device) < mask.sum(dim=1, keepdim=True)
    if not torch.equal(mask, prefix):
        raise ValueError("attention_mask must be right-padded: the words of a sentence first, then padding")
    # Only the words' ids: padded positions may hold anything (a pipeline pads input_ids with the tokenizer's
    # word-level pad id, e.g. 10000), and the model reads zeros there instead (ElmoModel.forward).
    _check_character_ids(input_ids[mask], n_characters)
    return mask


def _check_character_ids(ids: torch.Tensor, n_characters: int = NUM_CHARACTERS) -> None:
    """Refuse character ids outside ``[0, n_characters)`` (``ids`` of any shape)."""
    if ids.numel() and (ids.min() < 0 or ids.max() >= n_characters):
        raise ValueError(f"character ids must be in [0, {n_characters}); is this the output of ElmoTokenizer?")


# ---------------------------------------------------------------------------------------------
# The model
# ---------------------------------------------------------------------------------------------


@dataclass
class ElmoModelOutput(ModelOutput):
    """Output of [`ElmoModel`].

    Args:
        elmo: ``(B, W, 2P)``, the first scalar mix (``None`` when the config asks for no mix).
        mixes: ``(B, M, W, 2P)``, all ``M = num_output_representations`` mixes stacked batch-first (``None`` when
            there is none); read them as [`elmo_representations`].
        hidden_states: with ``output_hidden_states=True``, the ``L + 1`` biLM layers (the paper's ``2L + 1``
            representations, forward and backward side by side), each
            ``(B, W, 2P)``: ``[0]`` is the token layer ``[x; x]``, ``[k]`` is ``[forward_h; backward_h]``
            of LSTM layer ``k``. With ``token_layer_only=True`` only ``[0]``.
        mask: ``(B, W)`` int64, 1 for words and 0 for padding: the validated ``attention_mask``, in its form (as
            every transformers output, no bool tensor). Every output is exactly zero where it is 0; index with
            ``mask.bool()``.
        lstm_state: the [`ElmoLstmState`] after this call, when states are carried (``lstm_state=`` given,
            ``config.stateful``, or ``return_lstm_state=True``); otherwise ``None``. ``lstm_state[b]`` is row
            ``b``'s alone.

    Why the mixes are one batch-first tensor: every field must be indexable by batch row, because transformers'
    pipelines split a batched output into its sentences by indexing each field with the sentence's row
    (``PipelineIterator.loader_batch_item``; only ``hidden_states``/``attentions`` tuples are special-cased). A
    field holding the tuple of mixes would be indexed by mix instead: the wrong vectors, or an ``IndexError``.
    AllenNLP's form stays available, as [`elmo_representations`] (also ``out["elmo_representations"]``).
    """

    elmo: torch.Tensor | None = None
    mixes: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    mask: torch.Tensor | None = None
    lstm_state: ElmoLstmState | None = None

    @property
    def elmo_representations(self) -> tuple[torch.Tensor, ...]:
        """The ``M`` mixes as AllenNLP's ``Elmo`` returns them: a tuple of ``(B, W, 2P)`` tensors (views of
        ``mixes``; ``()`` without mixes)."""
        return () if self.mixes is None else tuple(self.mixes.unbind(dim=1))

    def __getitem__(self, key):
        # AllenNLP's dict key, for code written against its Elmo: out["elmo_representations"].
        if isinstance(key, str) and key == "elmo_representations":
            return self.elmo_representations
        return super().__getitem__(key)


# ---------------------------------------------------------------------------------------------
# Loading checks (issues #8, #13): safetensors only, floating and finite weights, clear errors for bad sources
# ---------------------------------------------------------------------------------------------

# Seconds to wait for the Hugging Face Hub before loading a Hub id: without it, an unreachable Hub costs
# huggingface_hub's 5 retries with backoff (~23 s) per file, 212 s for `elmo embed` (issue #13).
HUB_PROBE_TIMEOUT = 5.0
_SAFETENSORS_INDEX_SUFFIX = ".safetensors.index.json"


def _check_safetensors_indexes(folder: str) -> None:
    """Refuse an index (``*.safetensors.index.json`` in ``folder``) that names any file but a ``.safetensors`` file
    of that folder: transformers would open a ``pytorch_model.bin`` it names with ``torch.load`` (a pickle)."""
    for name in sorted(os.listdir(folder)):
        if not name.endswith(_SAFETENSORS_INDEX_SUFFIX):
            continue
        index = os.path.join(folder, name)
        try:
            with open(index, encoding="utf-8") as handle:
                weight_map = json.load(handle).get("weight_map")
        except (OSError, UnicodeDecodeError, ValueError, AttributeError, RecursionError) as error:
            raise OSError(f"cannot read the safetensors index {index}: {error}") from error
        if not isinstance(weight_map, dict):
            raise OSError(f"the safetensors index {index} has no weight_map object")
        for shard in sorted({repr(v) if not isinstance(v, str) else v for v in weight_map.values()}):
            # a plain name: no folder part (another folder, an absolute path, a Windows path), not "." or ".."
            plain = os.path.basename(shard) == shard and "\\" not in shard and shard not in (".", "..")
            if not (plain and shard.endswith(".safetensors")):
                raise OSError(
                    f"the safetensors index {index} names {shard!r}: an index may name only .safetensors files in "
                    "its own folder (pickled weights such as pytorch_model.bin are never loaded)"
                )


def _floating_names(model: nn.Module) -> set[str]:
    """The state-dict names of ``model``'s floating tensors, also with the base model's prefix added and removed
    (a head loads a base checkpoint and the other way round)."""
    prefix = getattr(model, "base_model_prefix", "") + "."
    names = {name for name, tensor in model.state_dict().items() if tensor.is_floating_point()}
    return names | {prefix + name for name in names} | {name.removeprefix(prefix) for name in names}


def _check_checkpoint_dtypes(files: Sequence[str], floating: set[str]) -> None:
    """Refuse checkpoint files other than safetensors, and non-floating tensors for the model's floating ones.

    Reads only the files' headers. Integer or bool weights would be cast to the model's dtype and give
    all-zero or meaningless outputs; complex ones would lose their imaginary part. Tensors the model keeps in
    another dtype (the CRF's bool ``constraint_mask``), or does not load at all, are not checked.
    """
    from safetensors import safe_open

    for file in files:
        if not os.fspath(file).endswith(".safetensors"):
            raise OSError(
                f"{os.fspath(file)} is not a .safetensors file: ELMo weights load only from safetensors (is it named "
                f"by a {_SAFETENSORS_INDEX_SUFFIX}?)"
            )
        with safe_open(file, framework="pt") as handle:
            dtypes = {key: handle.get_slice(key).get_dtype() for key in handle.keys() if key in floating}
        bad = [f"{key} ({dtype})" for key, dtype in sorted(dtypes.items()) if not dtype.startswith(("F", "BF"))]
        if bad:
            shown = ", ".join(bad[:8]) + (f" and {len(bad) - 8} more" if len(bad) > 8 else "")
            raise ValueError(
                f"{os.fspath(file)} holds weights of a non-floating dtype: {shown}; ELMo weights must be "
                "floating point (F16, BF16, F32 or F64)"
            )


def _floating_or_not_a_tensor(value) -> bool:
    return not isinstance(value, torch.Tensor) or value.is_floating_point()  # other values: transformers decides


def _check_finite(model: nn.Module, source: str) -> None:
    """Refuse NaN or infinite values in a loaded model's floating weights and buffers (one pass over them)."""
    bad = [
        name
        for name, tensor in model.state_dict().items()
        if tensor.is_floating_point() and tensor.device.type != "meta" and not bool(torch.isfinite(tensor).all())
    ]
    if bad:
        shown = ", ".join(bad[:8]) + (f" and {len(bad) - 8} more" if len(bad) > 8 else "")
        raise ValueError(f"the weights in {source} hold NaN or infinite values: {shown}")


def _is_hub_id(name: str) -> bool:
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(name)
    except HFValidationError:
        return False
    return True


def hub_local_files_only(
    name: str, local_files_only: bool = False, revision: str | None = None, cache_dir=None
) -> bool:
    """Check that ``name``, which is no local path, can be loaded as a Hugging Face Hub id; say whether to load it
    from the local cache only (``local_files_only``).

    Offline (``HF_HUB_OFFLINE=1``, or ``local_files_only``) the model must be in the cache. Online, the Hub is
    probed once with a ``HUB_PROBE_TIMEOUT`` s request (through the same proxies as the downloads); if it cannot
    be reached, a cached copy is used, else the error comes at once instead of after minutes of retries.

    Raises:
        OSError: ``name`` is no folder and not a Hub id; or it is not cached and cannot be downloaded.
    """
    from huggingface_hub import constants, try_to_load_from_cache

    if not _is_hub_id(name):
        raise OSError(f"no such folder {name} (and not a Hugging Face Hub id such as owner/name)")
    try:
        cached = isinstance(try_to_load_from_cache(name, "config.json", cache_dir=cache_dir, revision=revision), str)
    except Exception:  # an unusual revision or cache layout: let the download decide
        cached = False
    if local_files_only or constants.is_offline_mode():
        if not cached:
            raise OSError(
                f"no such folder {name}, and the Hub id {name} is not in the local Hugging Face cache (offline: "
                "HF_HUB_OFFLINE or local_files_only is set)"
            )
        return True
    from huggingface_hub.utils import get_session

    try:
        get_session().head(constants.ENDPOINT, timeout=HUB_PROBE_TIMEOUT)
    except Exception as error:  # DNS, refused, timeout, proxy, TLS: any answer at all would do
        if cached:
            logger.warning(f"cannot reach {constants.ENDPOINT} ({error}): loading {name} from the local cache")
            return True
        raise OSError(
            f"no such folder {name}, and the Hugging Face Hub ({constants.ENDPOINT}) cannot be reached to download "
            f"it as a Hub id ({type(error).__name__}: {error}). Check the path, or the network (HF_HUB_OFFLINE=1 "
            "loads only from the local cache)"
        ) from error
    return False


class _HeldRecords(std_logging.Filter):
    """A logging filter that holds back the records whose message contains ``marker``, until [`release`]."""

    def __init__(self, logger: std_logging.Logger, marker: str) -> None:
        super().__init__()
        self.logger, self.marker = logger, marker
        self.records: list[std_logging.LogRecord] = []

    def filter(self, record: std_logging.LogRecord) -> bool:
        if self.marker in record.getMessage():
            self.records.append(record)
            return False
        return True

    def release(self) -> None:
        """Log the held records now (once)."""
        self.logger.removeFilter(self)
        records, self.records = self.records, []
        for record in records:
            self.logger.handle(record)


@contextlib.contextmanager
def _held_load_report() -> Iterator[_HeldRecords]:
    """Within the block, transformers' LOAD REPORT is held back; ``release()`` logs it, else it is dropped."""
    held = _HeldRecords(logging.get_logger("transformers.modeling_utils"), "LOAD REPORT")
    held.logger.addFilter(held)
    try:
        yield held
    finally:
        held.logger.removeFilter(held)


class ElmoPreTrainedModel(PreTrainedModel):
    config_class = ElmoConfig
    base_model_prefix = "elmo"
    main_input_name = "input_ids"
    supports_gradient_checkpointing = True
    _no_split_modules = ["ElmoBiLstmLayer", "ElmoCharacterEncoder"]
    # Checkpoint keys (regular expressions, searched) that a load from another kind of ELMo folder rightly lacks
    # or has in excess: when every missing and unexpected key is one of these, transformers' LOAD REPORT is not
    # shown (issue 15 item 3); output_loading_info still lists them all. Not transformers'
    # _keys_to_ignore_on_load_missing/_unexpected: those also drop the keys from output_loading_info, which callers
    # read (train-lm refuses to evaluate a softmax missing from the checkpoint). The biLM's own weights (char_cnn.*,
    # bilm.*) are never expected to differ: from_pretrained raises for them.
    _expected_missing_on_load: tuple[str, ...] = ()
    _expected_unexpected_on_load: tuple[str, ...] = ()

    # Loading (issue #8): weights only from safetensors (never a pickle), and a checkpoint that does not fit the
    # config is an error, not a silent random init of the parts that do not fit.
    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *model_args, **kwargs):
        """As ``PreTrainedModel.from_pretrained``, with these checks.

        - Weights are read only from safetensors files: ``pytorch_model.bin`` (a pickle) is never
          opened, ``use_safetensors=False`` is refused (``ValueError``), and a ``*.safetensors.index.json``
          that names any file but a ``.safetensors`` file of its folder is refused (``OSError`` naming the
          index and the file) before anything is read.
        - A corrupt or truncated ``model.safetensors`` raises ``OSError`` naming the file.
        - Weights must be floating point and finite: tensors of integer, bool or complex dtype (read from the
          files' headers) or with NaN or infinite values (one pass over the loaded weights, about as long as
          copying them once) raise ``ValueError`` naming them.
        - Biases and weights of the biLM (``char_cnn.*``, ``bilm.*``) whose shape differs from the
          config's, or that the checkpoint lacks or has in excess (e.g. another ``n_layers``), raise
          ``ValueError`` listing them, unless ``ignore_mismatched_sizes=True`` (then transformers
          re-initialises the mismatched ones). New heads and extra scalar mixes may still be missing. This is a
          deliberate departure from transformers, which would initialise a missing biLM with a warning: a
          random biLM gives plausible-looking, meaningless vectors (the common test that expects it is skipped,
          saying so). ``from_pretrained(None, config=..., state_dict=...)`` initialises what the given state
          lacks, as transformers does.
        - Clear errors for a wrong source (``OSError``): a folder without ``config.json`` (unless ``config`` is
          given), a path that does not exist and is no Hub id, and a Hub id while the Hub cannot be reached and
          the model is not cached (found out with one short request, not minutes of retries: see
          [`hub_local_files_only`]).
        """
        if kwargs.get("use_safetensors") is False:
            raise ValueError(
                "ELMo models load only from safetensors (pickled weights can run code): use_safetensors=False "
                "is not supported; convert the checkpoint with save_pretrained or convert_original_weights.py"
            )
        kwargs["use_safetensors"] = True
        name = pretrained_model_name_or_path
        if (
            isinstance(name, (str, os.PathLike))
            and os.path.isfile(name)
            and not os.fspath(name).endswith(".safetensors")
        ):
            raise ValueError(f"{os.fspath(name)} is not a .safetensors file: ELMo weights load only from safetensors")
        if isinstance(name, (str, os.PathLike)) and os.path.isdir(name):
            folder = os.path.join(name, kwargs["subfolder"]) if kwargs.get("subfolder") else os.fspath(name)
            files = set(os.listdir(folder)) if os.path.isdir(folder) else set()
            if kwargs.get("config") is None and "config.json" not in files:
                raise OSError(
                    f"{folder} is not a folder with config.json: an ELMo model folder (made by save_pretrained, "
                    "`elmo convert` or `elmo train-lm`) holds config.json and model.safetensors"
                )
            if not any(f.endswith(".safetensors") or f.endswith(_SAFETENSORS_INDEX_SUFFIX) for f in files):
                pickles = sorted(f for f in files if f.endswith((".bin", ".pt", ".pth", ".ckpt", ".pkl")))
                found = f" (found {', '.join(pickles)}: pickled weights are never loaded)" if pickles else ""
                raise OSError(f"no model.safetensors in {folder}{found}")
            _check_safetensors_indexes(folder)
        elif isinstance(name, (str, os.PathLike)) and not os.path.exists(name):
            kwargs["local_files_only"] = hub_local_files_only(
                os.fspath(name), kwargs.get("local_files_only", False), kwargs.get("revision"), kwargs.get("cache_dir")
            )
        # What the messages call the source: a path, or the state_dict given with no path.
        source = os.fspath(name) if isinstance(name, (str, os.PathLike)) else "the given state_dict"
        ignore_mismatched = kwargs.pop("ignore_mismatched_sizes", False)
        want_info = kwargs.pop("output_loading_info", False)
        # transformers logs its load report during the load: held back, so that a checkpoint that does not fit
        # gives one error (below), not a table of "Reinit due to size mismatch" and then the error.
        with _held_load_report() as report:
            try:
                model, info = super().from_pretrained(
                    name, *model_args, ignore_mismatched_sizes=True, output_loading_info=True, **kwargs
                )
            except Exception as error:
                report.release()
                if type(error).__name__ != "SafetensorError":
                    raise
                raise OSError(
                    f"cannot read the safetensors weights of {source}: corrupt or truncated ({error})"
                ) from error
        prefix = cls.base_model_prefix + "."
        core = ("char_cnn.", "bilm.")
        problems = []
        if not ignore_mismatched:
            problems += [
                f"{k}: checkpoint {tuple(a)}, config {tuple(b)}" for k, a, b in sorted(info["mismatched_keys"])
            ]
        # from_pretrained(None, config=..., state_dict=...): the caller chose the weights, missing ones are initialised
        kinds = ("missing_keys", "unexpected_keys") if name is not None else ("unexpected_keys",)
        for kind in kinds:
            for key in sorted(info[kind]):
                if key.removeprefix(prefix).startswith(core):
                    problems.append(
                        f"{key}: {'not in the checkpoint' if kind == 'missing_keys' else 'not in the model'}"
                    )
        if problems:
            shown = "; ".join(problems[:8]) + (f"; and {len(problems) - 8} more" if len(problems) > 8 else "")
            raise ValueError(
                f"the weights in {source} do not fit the config (wrong sizes or layer counts in config.json "
                f"or in from_pretrained arguments?): {shown}"
            )
        if not cls._only_expected_differences(info, ignore_mismatched):
            report.release()  # something else differs: transformers' table is worth a look
        _check_finite(model, source)
        model._after_loading()
        return (model, info) if want_info else model

    @classmethod
    def _only_expected_differences(cls, info: dict, ignore_mismatched: bool) -> bool:
        """Whether every key that a load found missing or unexpected is one this class expects to differ (and,
        with ``ignore_mismatched_sizes=True``, none was re-initialised for its size)."""
        if ignore_mismatched and info["mismatched_keys"]:
            return False
        for kind, patterns in (
            ("missing_keys", cls._expected_missing_on_load),
            ("unexpected_keys", cls._expected_unexpected_on_load),
        ):
            if any(not any(re.search(p, key) for p in patterns) for key in info[kind]):
                return False
        return True

    @staticmethod
    def _load_pretrained_model(model, state_dict, checkpoint_files, load_config, *args, **kwargs):
        # The one place that sees the resolved weight files, local or downloaded from the Hub, before they are
        # read: refuse anything but safetensors, and non-floating tensors (from the headers only).
        floating = _floating_names(model)
        if checkpoint_files:
            _check_checkpoint_dtypes(checkpoint_files, floating)
        if state_dict:
            bad = sorted(k for k, v in state_dict.items() if k in floating and not _floating_or_not_a_tensor(v))
            if bad:
                raise ValueError(f"state_dict holds weights of a non-floating dtype: {', '.join(bad[:8])}")
        return PreTrainedModel._load_pretrained_model(model, state_dict, checkpoint_files, load_config, *args, **kwargs)

    def _after_loading(self) -> None:
        """The one post-load hook of all ELMo models, run by [`from_pretrained`] once the weights are in.

        Loading re-creates every loaded tensor as a trainable parameter, so what ``__init__`` froze must be
        frozen again here: heads that freeze parts (the tagger's ``freeze_bilm``) override [`apply_freezing`].
        """
        self.apply_freezing()

    def apply_freezing(self) -> None:
        """Set ``requires_grad`` from the config; called after ``__init__`` and after loading. Nothing by default."""

    def set_input_embeddings(self, value: nn.Module) -> None:
        """Replace the character embedding of the biLM's character encoder (see [`ElmoModel.set_input_embeddings`])."""
        self.base_model.set_input_embeddings(value)

    def save_pretrained(
        self,
        save_directory: str | os.PathLike,
        is_main_process: bool = True,
        state_dict: dict | None = None,
        push_to_hub: bool = False,
        **kwargs,
    ) -> None:
        """As ``PreTrainedModel.save_pretrained``, then make ``save_directory`` Hub-ready.

        Copies the shipped code files next to the weights, completes ``auto_map`` (and ``custom_pipelines`` for a
        token classifier) and writes ``config.json`` again with them, and writes a model card ``README.md`` unless
        the folder has a README that is not a generated card (``hub_elmo.prepare_hub_folder``). With
        ``push_to_hub=True`` the complete folder is uploaded (through ``push_to_hub``, with ``repo_id``,
        ``commit_message``, ``private``, ``create_pr`` and ``token`` from ``kwargs``).
        """
        from .hub_elmo import prepare_hub_folder

        int8 = [name for name, module in self.named_modules() if getattr(module, "holds_int8_weights", False)]
        if int8:  # refused before anything is written: int8 weights are packed outside the state dict
            raise ValueError(
                f"this model is quantized to int8 ({int8[0]} and {len(int8) - 1} more), which save_pretrained "
                "cannot store: save the float32 model, and quantize again after loading it"
            )
        hub = {key: kwargs.pop(key) for key in ("repo_id", "commit_message", "private", "create_pr") if key in kwargs}
        super().save_pretrained(save_directory, is_main_process=is_main_process, state_dict=state_dict, **kwargs)
        if not self.should_save_on_this_rank(is_main_process) or os.path.isfile(save_directory):
            return
        prepare_hub_folder(self.config, save_directory)
        self.config.save_pretrained(save_directory)  # again, with the auto_map and pipeline entries
        _follow_umask(Path(save_directory).glob("*.safetensors*"))
        if push_to_hub:
            repo_id = hub.pop("repo_id", os.path.basename(os.path.normpath(os.fspath(save_directory))))
            self.push_to_hub(repo_id, token=kwargs.get("token"), **hub)

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, ElmoScalarMix):
            init.zeros_(module.scalar_parameters)
            init.ones_(module.gamma)
        elif isinstance(module, ElmoBiLstmLayer):
            for param in (module.input_kernel, module.state_kernel, module.projection):
                init.normal_(param, mean=0.0, std=self.config.initializer_range)
            init.zeros_(module.bias)
        else:
            super()._init_weights(module)


@torch.no_grad()
def init_pretraining_scales(model: ElmoModel, module: nn.Module) -> bool:
    """Initialise ``module``, a part of ``model``'s biLM, with the original (bilm-tf) training scales; returns
    whether ``module`` is one it covers. ``ElmoModel._init_weights`` applies it module by module (leaves
    first) when built with ``pretraining_init=True``, as [`ElmoForPreTraining`] does.

    ``normal(0, initializer_range)`` everywhere shrinks the signal at every layer of the character CNN, so a
    new biLM would start with near-zero outputs and gradients. The original's scales keep unit-order activations:

    - character embedding ``U(-1, 1)``, row 0 (no character) zero; each convolution ``N(0, 1 / (width *
      char_dim))`` (``relu``) or ``U(+-sqrt(3 / (width * char_dim)))`` (``tanh``); highway and projection
      weights ``N(0, 1 / n_filters)``; the highway carry-gate bias -2 (the gate starts mostly closed: a layer
      starts near the identity);
    - LSTM kernels Glorot-uniform over the original ``W_0 (2P, 4D)`` and ``W_P (D, P)``; biases 0.

    The ``transformers.initialization`` functions leave tensors loaded from a checkpoint alone.
    """
    cnn = getattr(model, "char_cnn", None)
    if not isinstance(cnn, ElmoCharacterEncoder):  # a replaced character encoder keeps its own initialisation
        cnn = None
    if isinstance(module, ElmoBiLstmLayer):
        p, d = module.projection.shape[2], module.projection.shape[1]
        kernel_bound = math.sqrt(6.0 / (2 * p + 4 * d))
        init.uniform_(module.input_kernel, -kernel_bound, kernel_bound)
        init.uniform_(module.state_kernel, -kernel_bound, kernel_bound)
        projection_bound = math.sqrt(6.0 / (d + p))
        init.uniform_(module.projection, -projection_bound, projection_bound)
        init.zeros_(module.bias)
    elif cnn is None:
        return False
    elif module is cnn.char_embedding:
        # A slice loses the "loaded" flag that the init functions check: test the whole weight.
        if not getattr(module.weight, "_is_hf_initialized", False):
            init.uniform_(module.weight, -1.0, 1.0)
            init.zeros_(module.weight[0:1])
    elif any(module is conv for conv in cnn.convolutions):
        fan_in = module.kernel_size[0] * module.in_channels
        if model.config.char_cnn_activation == "tanh":
            bound = math.sqrt(3.0 / fan_in)
            init.uniform_(module.weight, -bound, bound)
        else:
            init.normal_(module.weight, 0.0, math.sqrt(1.0 / fan_in))
        init.zeros_(module.bias)
    elif module is cnn.projection or any(module is h.carry or module is h.transform for h in cnn.highways):
        init.normal_(module.weight, 0.0, math.sqrt(1.0 / module.in_features))
        carry = any(module is h.carry for h in cnn.highways)
        init.constant_(module.bias, -2.0 if carry else 0.0)
    else:
        return False
    return True


class ElmoModel(ElmoPreTrainedModel):
    r"""The ELMo biLM with its scalar mixes: words (as character ids) to contextual vectors.

    The model puts ``<S>`` before and ``</S>`` after every sentence, runs the character encoder and
    the biLM, and drops the boundary positions again, so every output has one vector per input word.

    ``forward`` is the one way in, for users and for the heads alike: it returns the word ``mask``, the
    ``L + 1`` layers (``hidden_states``) and the mixes, and takes and returns the LSTM state.

    Stateless by default: a sentence's vectors depend only on the sentence. The LSTM state is explicit,
    in and out: ``forward(..., lstm_state=state)`` starts each batch row from the [`ElmoLstmState`]'s row
    and updates it, as the original implementations carry it. ``config.stateful=True``
    (``ElmoModel.from_pretrained(path, stateful=True)``) is a convenience that keeps one such state in
    ``self.lstm_state`` between calls; this reproduces the original outputs, but the same sentence then
    gets different vectors on different calls. [`reset_states`] clears it.

    Args:
        config: the biLM's settings.
        num_output_representations: the number of scalar mixes to build (default
            ``config.num_output_representations``). Heads pass what they use (the tagger 1 or 2, the LM
            head 0) instead of writing into the config.
        pretraining_init: initialise the biLM at the original's training scales ([`init_pretraining_scales`],
            the LM head's choice) instead of ``normal(0, initializer_range)``.

    The biLM runs without autograd when none of the character encoder's and the LSTMs' parameters
    requires grad (a frozen biLM): ``requires_grad`` alone decides what trains.
    """

    # What a load from another kind of ELMo folder rightly lacks or has in excess (see ElmoPreTrainedModel): the
    # scalar mixes, a task's weights that start equal (an LM folder has none; num_output_representations may
    # differ), and the LM softmax of a folder written by `elmo train-lm`.
    _expected_missing_on_load = (r"(^|\.)scalar_mixes\.",)
    _expected_unexpected_on_load = (r"(^|\.)scalar_mixes\.", r"^softmax\.")

    def __init__(
        self, config: ElmoConfig, num_output_representations: int | None = None, pretraining_init: bool = False
    ):
        super().__init__(config)
        # The initialisation policy of `_init_weights` (used by __init__ and for weights missing on loading).
        self.pretraining_init = pretraining_init
        if num_output_representations is None:
            num_output_representations = config.num_output_representations
        self.char_cnn = ElmoCharacterEncoder(config)
        self.bilm = ElmoBiLm(config)
        self.scalar_mixes = nn.ModuleList(
            ElmoScalarMix(config.n_layers + 1, config.scalar_mix_layer_norm, config.elmo_dropout)
            for _ in range(num_output_representations)
        )
        # Stateful mode: the state carried between calls (see ElmoLstmState); empty means zeros.
        self.lstm_state = ElmoLstmState()
        self._token_cache: dict[bytes, int] | None = None  # character row -> row of _token_cache_vectors
        self._token_cache_vectors: torch.Tensor | None = None
        self._token_cache_weights: list[torch.Tensor] = []  # the encoder's weights the cache was built with
        # (2, C): the character ids of <S> and </S>, which forward puts around every sentence.
        self.register_buffer("boundary_ids", self._make_boundary_ids(config), persistent=False)
        self.post_init()

    @staticmethod
    def _make_boundary_ids(config: ElmoConfig) -> torch.Tensor:
        if config.char_vocabulary == "manylangs":
            return torch.tensor(boundary_rows(config))
        chars = config.max_characters_per_token
        return torch.tensor([begin_of_sentence_ids(chars), end_of_sentence_ids(chars)])

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        if not (self.pretraining_init and init_pretraining_scales(self, module)):
            super()._init_weights(module)
        if module is self:
            init.copy_(self.boundary_ids, self._make_boundary_ids(self.config))

    def get_input_embeddings(self) -> nn.Embedding:
        """The character embedding ``(262, char_embedding_dim)``, the first layer of the character encoder."""
        return self.char_cnn.char_embedding

    def set_input_embeddings(self, value: nn.Module) -> None:
        """Replace the character embedding (``(..., C)`` ids to ``(..., C, char_embedding_dim)``); the token cache,
        built with the old one, is dropped."""
        self.char_cnn.char_embedding = value
        self.clear_token_cache()

    def reset_states(self) -> None:
        """Forget the LSTM states carried between calls in stateful mode (``self.lstm_state``)."""
        self.lstm_state.reset()

    @property
    def bilm_requires_grad(self) -> bool:
        """Whether any parameter of the character encoder or the LSTMs requires grad (else they run without
        autograd)."""
        return any(p.requires_grad for module in (self.char_cnn, self.bilm) for p in module.parameters())

    @property
    def needs_vocab_ids(self) -> bool:
        """Whether ``forward`` needs ``vocab_ids`` (a model with a word input: ELMoForManyLangs')."""
        return self.config.word_vocab_size > 0

    def word_mask(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """The ``(B, W)`` bool word mask ``forward`` uses, after checking ``input_ids`` ``(B, W, C)`` and
        ``attention_mask`` ``(B, W)`` (``ValueError`` naming the problem). Default: the non-zero character rows."""
        return self._word_mask(input_ids, attention_mask)

    def embed_words(self, char_ids: torch.Tensor) -> torch.Tensor:
        """Layer 0 (without the ``[x; x]`` doubling) of words given as character ids ``(N, C)``: ``(N, P)``
        (``(N, C + 1)`` with the word ids last for a model with a word input).

        Each distinct word is encoded once; words in the token cache (see [`build_token_cache`]) are
        looked up instead, unless the character encoder is being trained. A cache built for other weights
        than the character encoder's current ones is dropped first (see [`build_token_cache`]).
        """
        unique, inverse = torch.unique(char_ids, dim=0, return_inverse=True)
        if self._token_cache is not None and not self._token_cache_is_current():
            logger.warning(
                "the token cache was built for other character-encoder weights (they changed, or the model moved "
                "to another device or dtype): dropped it; call build_token_cache again to use one"
            )
            self.clear_token_cache()
        cache = self._token_cache
        trainable = torch.is_grad_enabled() and any(p.requires_grad for p in self.char_cnn.parameters())
        if cache is None or trainable or unique.shape[0] == 0:
            return self.char_cnn(unique)[inverse]
        keys = unique.to(self._token_cache_dtype).cpu().numpy()
        slots = torch.tensor([cache.get(row.tobytes(), -1) for row in keys], device=unique.device)
        cached = self._token_cache_vectors.to(device=unique.device, dtype=self.dtype)
        vectors = cached.index_select(0, slots.clamp(min=0))
        missing = slots.lt(0).nonzero().squeeze(1)
        if missing.numel():
            vectors[missing] = self.char_cnn(unique.index_select(0, missing))
        return vectors[inverse]

    def _token_cache_is_current(self) -> bool:
        """Whether the character encoder's weights are still those the token cache was built with.

        Compares the weights themselves with the copy taken by [`build_token_cache`] (dtype, device, shape and
        every value), so any change counts: an optimizer step (fused kernels too, which autograd's version
        counters do not see), ``load_state_dict``, in-place edits (also through ``.data``), ``.to()``. The cost is
        one read of the encoder's weights per call (18M values for the original model: ~30 ms on one CPU
        thread, a few % of what the cache saves on a batch of 640 words).
        """
        saved = self._token_cache_weights
        params = list(self.char_cnn.parameters())
        return len(saved) == len(params) and all(
            old.dtype == new.dtype and old.device == new.device and old.shape == new.shape and torch.equal(old, new)
            for old, new in zip(saved, params, strict=True)
        )

    @torch.no_grad()
    def build_token_cache(
        self, words: Iterable[str] | torch.Tensor, batch_size: int = 2048, progress: bool = True
    ) -> int:
        """Precompute layer 0 for a vocabulary, as the original's cached-vocabulary mode does.

        Later calls look these words up instead of running the character CNN on them; other words
        still go through the CNN, so outputs do not change. The cache is not saved with the model;
        it is ignored while the character encoder is being trained, and dropped (with a warning) at the
        next call once the encoder's weights differ from those it was built with: after an optimizer
        step, ``load_state_dict``, any in-place edit, or moving the model to another device or dtype
        (build it after ``.to()``). It keeps a copy of the encoder's weights for that check. A new
        cache replaces the old one.

        Args:
            words: e.g. ``tokenizer.get_vocab()`` or the lines of a bilm-tf vocabulary file; or the words'
                character ids ``(N, C)`` as the tokenizer gives them (rows may repeat).
            batch_size: words per character-CNN call.
            progress: show a progress bar.

        Returns:
            The number of distinct words cached.

        Raises:
            ValueError: character ids that are not ``(N, C)`` with ``C = config.max_characters_per_token``.
        """
        chars = self.boundary_ids.shape[-1]  # C, or C + 1 with a word id (a word input)
        if isinstance(words, torch.Tensor):
            if words.dim() != 2 or words.shape[1] != chars:
                raise ValueError(f"character ids must be (words, {chars}), got shape {tuple(words.shape)}")
            _check_character_ids(words[:, : self.config.max_characters_per_token], self.config.n_characters)
            table = words.to(device="cpu", dtype=self._token_cache_dtype)
        elif self.config.char_vocabulary != "elmo":
            raise ValueError(
                "this model reads its own character vocabulary: give build_token_cache the rows of its tokenizer "
                "(input_ids, with vocab_ids as a last column if the model has a word input), not words"
            )
        else:
            table = torch.tensor([word_to_char_ids(w, chars) for w in words], dtype=torch.int16).view(-1, chars)
        table = torch.unique(table, dim=0)  # distinct rows (two long words may share their first C - 2 bytes)
        vectors = []
        bar_off = not progress or not logging.is_progress_bar_enabled()  # transformers' switch too
        for start in tqdm(range(0, len(table), batch_size), desc="Caching word vectors", disable=bar_off):
            vectors.append(self.char_cnn(table[start : start + batch_size].long().to(self.device)))
        self.clear_token_cache()
        if vectors:
            self._token_cache = {row.numpy().tobytes(): index for index, row in enumerate(table)}
            self._token_cache_vectors = torch.cat(vectors)
            self._token_cache_weights = [p.detach().clone() for p in self.char_cnn.parameters()]
        return len(table)

    @property
    def _token_cache_dtype(self) -> torch.dtype:
        """The dtype of the token cache's keys: int16 holds ELMo's 262 character ids; a per-model character vocabulary
        or a word id may need more."""
        small = self.config.n_characters <= 1 << 15 and not self.needs_vocab_ids
        return torch.int16 if small else torch.int32

    @property
    def token_cache_size(self) -> int:
        """The number of words in the token cache of [`build_token_cache`] (0: there is none)."""
        return len(self._token_cache) if self._token_cache is not None else 0

    def clear_token_cache(self) -> None:
        """Drop the cache of [`build_token_cache`]."""
        self._token_cache = self._token_cache_vectors = None
        self._token_cache_weights = []

    def mix_l2_penalty(self) -> torch.Tensor:
        """``scalar_mix_l2_coef * sum ||w||^2`` over the mixes, for a head to add to its loss."""
        penalty = sum((mix.l2_penalty() for mix in self.scalar_mixes), torch.zeros((), device=self.device))
        return self.config.scalar_mix_l2_coef * penalty

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor,
        attention_mask: torch.Tensor | None = None,
        output_hidden_states: bool | None = None,
        lstm_state: ElmoLstmState | None = None,
        return_lstm_state: bool | None = None,
        token_layer_only: bool = False,
        backward_input_ids: torch.LongTensor | None = None,
        vocab_ids: torch.LongTensor | None = None,
    ) -> ElmoModelOutput:
        r"""
        Args:
            input_ids: ``(B, W, C)`` character ids from [`ElmoTokenizer`]; a padded word is a row of zeros.
            attention_mask: ``(B, W)``, 1 for words, 0 for padding (right padding only). Default:
                the words whose character row is not all zero.
            output_hidden_states: also return the ``L + 1`` layers (default ``config.output_hidden_states``).
            lstm_state: an [`ElmoLstmState`] to start from, row ``b`` for batch row ``b``; it is updated in
                place (rows without words keep theirs) and returned. Default: ``self.lstm_state`` with
                ``config.stateful``, else zeros.
            return_lstm_state: return the states the rows end with (default: when a state was carried).
            token_layer_only: run only the character encoder: ``hidden_states`` is ``(layer 0,)`` and there
                are no mixes (for heads that use the context-free word vectors alone).
            backward_input_ids: stream mode (the original's LM training): ``input_ids`` and
                ``backward_input_ids`` ``(B, T, C)`` are full windows (no padding, no ``<S>``/``</S>`` added)
                of the forward direction's and of the backward direction's own token streams, each read left
                to right; ``hidden_states[k]`` is then ``[forward_h; backward_h]`` position by position of
                their own streams (``[0]``: ``[x_forward; x_backward]``), and there are no mixes.
            vocab_ids: ``(B, W)`` word ids from the tokenizer (any value at padding), for a model with a word
                input (ELMoForManyLangs, ``needs_vocab_ids``); ignored otherwise.

        Returns:
            [`ElmoModelOutput`]; with ``return_dict=False`` a tuple of its non-``None`` fields.
        """
        output_hidden_states = (
            output_hidden_states if output_hidden_states is not None else self.config.output_hidden_states
        )
        state = lstm_state if lstm_state is not None else (self.lstm_state if self.config.stateful else None)
        if return_lstm_state is None:
            return_lstm_state = state is not None
        if return_lstm_state and state is None:
            state = ElmoLstmState()
        if backward_input_ids is not None:
            if self.needs_vocab_ids:
                raise ValueError("stream mode (backward_input_ids) does not take a model with a word input")
            mask = self._stream_mask(input_ids, backward_input_ids)
        else:
            mask = self._word_mask(input_ids, attention_mask)
            if attention_mask is not None:
                # Whatever ids sit at padded positions (a pipeline pads with the tokenizer's pad id), the model
                # reads the empty word there (all zeros), so outputs equal those of the unpadded batch.
                input_ids = input_ids.masked_fill(~mask.unsqueeze(-1), 0)
            if self.needs_vocab_ids:  # ELMoForManyLangs: the word id becomes a last column of each word's row
                input_ids = append_word_ids(input_ids, vocab_ids, mask, self.config.word_vocab_size)
        # A frozen biLM (no parameter requires grad) needs no autograd graph; the mixes above it may train.
        with torch.set_grad_enabled(torch.is_grad_enabled() and self.bilm_requires_grad):
            if backward_input_ids is not None:
                layers = self._stream_layers(input_ids, backward_input_ids, state)
            elif token_layer_only:
                layers = [self._token_layer(input_ids, mask)]
            else:
                layers = self._compute_layers(input_ids, mask, state)
        run_mixes = backward_input_ids is None and not token_layer_only
        mixes = tuple(mix(layers, mask) for mix in self.scalar_mixes) if run_mixes else ()
        # (B, M, W, 2P), batch-first for the pipelines (see ElmoModelOutput); one mix (the default) is not copied.
        stacked = mixes[0].unsqueeze(1) if len(mixes) == 1 else torch.stack(mixes, dim=1) if mixes else None
        return ElmoModelOutput(
            elmo=mixes[0] if mixes else None,
            mixes=stacked,
            hidden_states=tuple(layers) if output_hidden_states else None,
            mask=mask.long(),
            lstm_state=state if return_lstm_state else None,
        )

    def _token_layer(self, input_ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Layer 0 ``[x; x]`` ``(B, W, 2P)`` of the words, zero where ``mask`` is False; the LSTMs do not run."""
        tokens = input_ids.new_zeros((*mask.shape, self.config.projection_dim), dtype=self.dtype)
        tokens[mask] = self.embed_words(input_ids[mask])
        return torch.cat([tokens, tokens], dim=-1)

    def _compute_layers(
        self, input_ids: torch.Tensor, mask: torch.Tensor, state: ElmoLstmState | None
    ) -> list[torch.Tensor]:
        """The ``L + 1`` biLM layers of the words, each ``(B, W, 2P)``, zero where ``mask`` ``(B, W)`` is False.

        With ``state``, row ``b`` starts from its row ``b`` and the rows with words are updated in place.
        """
        batch, words = mask.shape
        width = 2 * self.config.projection_dim
        lengths = mask.sum(dim=1)
        rows = lengths.nonzero().squeeze(1)  # sentences with at least one word
        if rows.numel() == 0:
            zeros = input_ids.new_zeros((batch, words, width), dtype=self.dtype)
            return [zeros] * (self.config.n_layers + 1)

        # <S> w_1 .. w_n </S> for each sentence, as char ids (R, T, C) and embeddings (R, T, P).
        ids, steps = self._add_boundaries(input_ids.index_select(0, rows), mask.index_select(0, rows))
        present = ids.ne(0).any(dim=-1)
        tokens = ids.new_zeros((*present.shape, self.config.projection_dim), dtype=self.dtype)
        tokens[present] = self.embed_words(ids[present])

        layers, final = self.bilm(tokens, steps, state.select(rows) if state is not None else None)
        if state is not None:
            state.update(rows, final)

        # Drop <S> (position 0) and </S> (position n + 1, which the mask zeroes).
        keep = mask.index_select(0, rows).unsqueeze(-1).to(tokens.dtype)
        outputs = [torch.cat([tokens, tokens], dim=-1)] + layers
        outputs = [layer[:, 1 : words + 1] * keep for layer in outputs]
        if rows.numel() < batch:
            outputs = [layer.new_zeros(batch, words, width).index_copy(0, rows, layer) for layer in outputs]
        return outputs

    def _stream_mask(self, input_ids: torch.Tensor, backward_input_ids: torch.Tensor) -> torch.Tensor:
        """Check the two stream windows (same shape, valid ids, no padding); ``(B, T)`` all True."""
        for name, ids in (("input_ids", input_ids), ("backward_input_ids", backward_input_ids)):
            mask = self._word_mask(ids, None)  # validates the shape and the ids
            if not bool(mask.all()):
                raise ValueError(f"stream training takes full windows: {name} has padded (all-zero) positions")
        if backward_input_ids.shape != input_ids.shape:
            raise ValueError(
                "input_ids and backward_input_ids must have the same shape (batch, tokens, chars), got "
                f"{tuple(input_ids.shape)} and {tuple(backward_input_ids.shape)}"
            )
        return mask

    def _stream_layers(
        self, input_ids: torch.Tensor, backward_input_ids: torch.Tensor, state: ElmoLstmState | None
    ) -> list[torch.Tensor]:
        """Stream mode's ``L + 1`` layers ``(B, T, 2P)`` (see ``forward``); ``state`` (all ``B`` rows) is updated."""
        batch, steps, chars = input_ids.shape
        ids = torch.stack([input_ids, backward_input_ids]).reshape(-1, chars)
        tokens = self.embed_words(ids).view(2, batch, steps, self.config.projection_dim)
        rows = torch.arange(batch, device=input_ids.device)
        layers, final = self.bilm.forward_streams(tokens, state.select(rows) if state is not None else None)
        if state is not None:
            state.update(rows, final)
        return [torch.cat([layer[0], layer[1]], dim=-1) for layer in (tokens, *layers)]

    def _word_mask(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        """The validated word mask ``(B, W)`` bool of a batch: see [`check_inputs`]."""
        return check_inputs(input_ids, attention_mask, self.config.max_characters_per_token, self.config.n_characters)

    def _add_boundaries(self, input_ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(R, W, C)`` words -> ``(R, W + 2, C)`` with ``<S>`` first and ``</S>`` after the last word."""
        rows, words, chars = input_ids.shape
        lengths = mask.sum(dim=1)
        bos, eos = self.boundary_ids.to(input_ids.dtype)
        ids = input_ids.new_zeros(rows, words + 2, chars)
        ids[:, 0] = bos
        ids[:, 1 : words + 1] = input_ids * mask.unsqueeze(-1).to(input_ids.dtype)
        ids[torch.arange(rows, device=ids.device), lengths + 1] = eos
        return ids, lengths + 2

    # -----------------------------------------------------------------------------------------
    # Sentence embeddings and named layers, as TF-Hub's ELMo module (issue #5)
    # -----------------------------------------------------------------------------------------

    @torch.no_grad()
    def tf_hub_outputs(
        self,
        input_ids: torch.LongTensor,
        attention_mask: torch.Tensor | None = None,
        vocab_ids: torch.LongTensor | None = None,
    ) -> dict[str, torch.Tensor]:
        """The outputs of TF-Hub's ELMo module, by the names it uses, for one tokenized batch.

        An inference helper, as the TF-Hub module with ``trainable=False``: it runs without gradients (no tensor
        requires grad); the model's mode (``eval()`` / ``train()``, i.e. dropout) is the caller's. To train through
        ELMo, call the model itself (``model(**batch).elmo``). [`embed_sentences`] does the same from text, batch by
        batch, and returns one of these outputs.

        Args:
            input_ids: ``(B, W, C)`` character ids from [`ElmoTokenizer`].
            attention_mask: ``(B, W)``, 1 for words (right padding); default: the non-empty character rows.
            vocab_ids: ``(B, W)`` word ids, for a model with a word input (ELMoForManyLangs).

        Returns:
            A dict of tensors, zero at padded words:

            - ``word_emb``: ``(B, W, P)``, layer 0, the character-based word vectors (not doubled).
            - ``lstm_outputs1``, ``lstm_outputs2`` (one per LSTM layer, ``lstm_outputs{k}``): ``(B, W, 2P)``,
              ``[forward_h; backward_h]`` of layer ``k``.
            - ``elmo``: ``(B, W, 2P)``, the first scalar mix (the learned weighted sum of the layers, as TF-Hub's
              trainable ``elmo``); a model without mixes (``num_output_representations=0``) uses equal weights.
            - ``default``: ``(B, 2P)``, the mean of ``elmo`` over each sentence's words (an empty sentence gets
              zeros): TF-Hub's fixed mean-pooled sentence vector.
            - ``sequence_len``: ``(B,)`` words per sentence.
        """
        out = self(
            input_ids, attention_mask=attention_mask, output_hidden_states=True, return_dict=True, vocab_ids=vocab_ids
        )
        mask, layers = out.mask.bool(), out.hidden_states
        elmo = out.elmo if out.elmo is not None else torch.stack(layers).mean(dim=0)
        lengths = mask.sum(dim=1)
        outputs = {"word_emb": layers[0][..., : self.config.projection_dim]}
        outputs.update({f"lstm_outputs{k}": layer for k, layer in enumerate(layers[1:], start=1)})
        outputs["elmo"] = elmo
        # Masked mean: padded positions are exactly zero, so a sum over words divided by the count.
        outputs["default"] = elmo.sum(dim=1) / lengths.clamp(min=1).unsqueeze(-1).to(elmo.dtype)
        outputs["sequence_len"] = lengths
        return outputs

    def embed_sentences(
        self,
        sentences: Sequence[str] | Sequence[Sequence[str]],
        tokenizer=None,
        output: str = "default",
        batch_size: int = 32,
        is_split_into_words: bool | None = None,
    ) -> torch.Tensor | list[torch.Tensor]:
        """Embed sentences (raw text, or lists of words): one output of [`tf_hub_outputs`], in eval mode and without
        gradients, tokenized and batched here.

        Unlike [`tf_hub_outputs`], which returns a dict of every output for one tokenized batch, this returns the
        one output asked for, without padding: a tensor of sentence vectors for ``"default"``, else one tensor per
        sentence.

        Args:
            sentences: strings (split into words by the tokenizer) or lists of words.
            tokenizer: an [`ElmoTokenizer`] (e.g. ``ElmoTokenizer.from_pretrained(path)``; any one works: character
                ids do not depend on a vocabulary). Required: the model code does not import the tokenizer.
            output: a key of [`tf_hub_outputs`]: ``"default"`` (sentence vectors), ``"word_emb"``,
                ``"lstm_outputs1"``, ``"lstm_outputs2"``, ``"elmo"``.
            batch_size: sentences per forward pass.
            is_split_into_words: default: True when the first sentence is a list of words.

        Returns:
            ``output="default"``: a ``(N, 2P)`` tensor. Otherwise a list of ``N`` tensors ``(words_i, width)``.
        """
        valid = ("default", "word_emb", "elmo") + tuple(f"lstm_outputs{k}" for k in range(1, self.config.n_layers + 1))
        if output not in valid:
            raise ValueError(f"output must be one of {valid}, got {output!r}")
        if isinstance(sentences, str):
            raise TypeError("embed_sentences takes a list of sentences; wrap a single sentence in a list")
        sentences = list(sentences)
        if tokenizer is None:
            raise TypeError(
                "embed_sentences needs the tokenizer: model.embed_sentences(sentences, tokenizer=ElmoTokenizer()) "
                "or ElmoTokenizer.from_pretrained(path)"
            )
        if is_split_into_words is None:
            is_split_into_words = bool(sentences) and not isinstance(sentences[0], str)
        was_training = self.training
        self.eval()
        results: list[torch.Tensor] = []
        try:
            with torch.no_grad():
                for start in range(0, len(sentences), batch_size):
                    chunk = sentences[start : start + batch_size]
                    batch = tokenizer(chunk, is_split_into_words=is_split_into_words, padding=True, return_tensors="pt")
                    ids = batch["input_ids"].to(self.device)
                    if ids.dim() != 3:  # a chunk of empty sentences pads to (n, 0)
                        ids = ids.reshape(len(chunk), -1, self.config.max_characters_per_token)
                    mask = batch["attention_mask"].to(self.device).reshape(ids.shape[:2])
                    vocab_ids = batch.get("vocab_ids")
                    vocab_ids = None if vocab_ids is None else vocab_ids.to(self.device).reshape(ids.shape[:2])
                    out = self.tf_hub_outputs(ids, mask, vocab_ids)[output]
                    if output == "default":
                        results.append(out)
                    else:
                        results.extend(row[:n] for row, n in zip(out, mask.sum(dim=1).tolist(), strict=True))
        finally:
            self.train(was_training)
        if output == "default":
            width = 2 * self.config.projection_dim
            return torch.cat(results) if results else torch.zeros(0, width, dtype=self.dtype, device=self.device)
        return results


__all__ = [
    "ElmoBiLm",
    "ElmoBiLstmLayer",
    "ElmoCharacterEncoder",
    "ElmoModel",
    "ElmoModelOutput",
    "ElmoPreTrainedModel",
    "ElmoScalarMix",
    "ElmoLstmState",
    "init_pretraining_scales",
]
