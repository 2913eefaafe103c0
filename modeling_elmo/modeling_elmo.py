"""ELMo (Peters et al., NAACL 2018, "Deep contextualized word representations") as a Hugging Face model.

The parts, in the paper's order, top to bottom in this file:

    characters -> character CNN -> highway -> projection      (ElmoCharacterEncoder: layer 0)
               -> forward and backward LSTM stacks            (ElmoBiLstmLayer, ElmoBiLm: layers 1..L)
                  with projection and clipping
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

Beside this file: ``fast_path_elmo.py`` (the LSTM's CPU fast path, chosen at one place in
``ElmoBiLstmLayer.forward``), ``lstm_state_elmo.py`` (``ElmoLstmState``), ``checks_elmo.py`` (input and loading
checks); inference helpers are in ``modeling_elmo/inference/``.

The paper's 2L + 1 representations of a word (x, and forward and backward h of each LSTM layer)
are returned as L + 1 tensors of width 2P: ``[x; x]`` and ``[forward_h_j; backward_h_j]``, j = 1..L.

Shapes: B sentences, W words (after padding), C characters per word (50), P = projection_dim,
D = lstm_dim, T = W + 2 (words plus the sentence boundaries the model adds).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PreTrainedModel
from transformers import initialization as init
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.utils import ModelOutput, can_return_tuple, logging

from .auto_map_elmo import code_for_save
from .character_inputs_elmo import ElmoCharacterInputs
from .characters import PADDING_CHAR, begin_of_sentence_ids, end_of_sentence_ids
from .checks_elmo import (
    check_conventional_arguments,
    check_inputs,
    check_loaded,
    check_source,
    follow_umask,
    mismatched_shapes,
)
from .compiled_ops_elmo import use_bilstm_layer, use_char_encoder
from .configuration_elmo import ElmoConfig
from .fast_path_elmo import BOTH_DIRECTIONS, PrepackedProducts, cpu_tanh, length_split
from .graph_path_elmo import graph_layers, in_graph
from .graph_path_elmo import reverse_padded as _reverse_padded
from .lstm_state_elmo import ElmoLstmState, LstmState
from .manylangs import PAD_CHAR as MANYLANGS_PAD_CHAR
from .manylangs import ElmoWordInput, append_word_ids, boundary_rows
from .pairs_elmo import pair_layers
from .scalar_mix_elmo import ElmoScalarMix
from .task_lstm_elmo import ElmoTaskLstm

logger = logging.get_logger(__name__)

PADDING_ID = PADDING_CHAR + 1  # the padding mark after the +1 shift of all character ids


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

    # A memory bound for long inputs (issue #8; outputs do not depend on it beyond float rounding): words encoded at
    # once (up to ~0.37 MB of activations a word at the original size).
    block_words: int = 1024

    def forward(self, char_ids: torch.Tensor) -> torch.Tensor:
        batch_shape, width = char_ids.shape[:-1], char_ids.shape[-1]
        char_ids = char_ids.reshape(-1, width)
        if char_ids.shape[0] > self.block_words:
            return torch.cat([self(block) for block in char_ids.split(self.block_words)]).reshape(*batch_shape, -1)
        word_ids = None
        if self.word_input is not None:
            char_ids, word_ids = char_ids[:, :-1], char_ids[:, -1]
        x = self.filters(char_ids, char_ids.ne(self.padding_id).sum(dim=-1))  # (N, n_filters)
        for highway in self.highways:
            x = highway(x)
        x = self.projection(x)
        if word_ids is not None:
            x = x + self.word_input(word_ids)
        return x.reshape(*batch_shape, -1)

    def filters(self, char_ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """The convolutions, each maxed over positions, then the activation: ``char_ids (N, C)`` of words of
        ``lengths (N,)`` characters and marks -> ``(N, n_filters)``.

        Words are far shorter than C: positions past the longest word hold only the padding mark, and every window
        made only of padding has the same value. The convolutions run up to the longest word, and that one value
        stands in for the windows past it (the result is the same). Where the lengths differ enough (see
        [`length_split`]), the short and the long words are convolved apart, each group up to its own longest.
        """
        ranked, order = lengths.sort()
        split = length_split(ranked)
        if split is not None:
            parts = [self.filters(char_ids[group], lengths[group]) for group in (order[:split], order[split:])]
            return torch.cat(parts)[order.argsort()]
        chars = char_ids.shape[-1]
        span = int(lengths.max()) if char_ids.numel() else chars
        widest = max(conv.kernel_size[0] for conv in self.convolutions)
        embedded = self.char_embedding(char_ids[:, : min(chars, span + widest - 1)]).transpose(1, 2)  # (N, dim, C')
        features = []
        for conv in self.convolutions:
            width = conv.kernel_size[0]
            keep = min(chars, span + width - 1)
            feature = conv(embedded[:, :, :keep]).amax(dim=-1)  # (N, count)
            if keep < chars:
                padding_only = self.char_embedding.weight[self.padding_id].unsqueeze(-1).expand(-1, width)
                feature = torch.maximum(feature, conv(padding_only.unsqueeze(0))[0, :, 0])
            # Max over positions first: relu and tanh are monotonic, so this equals the original's order.
            features.append(self.activation(feature))
        return torch.cat(features, dim=-1)


use_char_encoder(ElmoCharacterEncoder)  # the encoder that torch.compile's token-layer operator runs (compiled_ops_elmo)


# ---------------------------------------------------------------------------------------------
# Layers 1..L: the biLSTM language model, with projection and clipping
# ---------------------------------------------------------------------------------------------


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
    and each step is one batched product for both directions (with the CPU fast path or int8 products, the
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

    # The three matrix products of a step, plain (batched over the directions). Where the CPU fast path applies
    # (fast_path_elmo.PrepackedProducts), its products replace them; subclasses may compute them otherwise (the int8
    # layer of ``modeling_elmo.inference.quantize``); the recurrence stays the same. ``use_prepacked_weights = False``
    # turns the fast path off; it serves weights of at least ``prepack_min_elements`` per direction and, in float32,
    # products of at least ``prepack_min_rows`` rows (below, oneDNN's per-call overhead costs more than it saves: a
    # float32 one-row product ran 2x slower prepacked than with bmm; in bfloat16 2.5x faster).

    use_prepacked_weights: bool = True
    prepack_min_elements: int = 1 << 20
    prepack_min_rows: int = 2
    gate_block_rows: int = 1024  # packed steps whose input product runs at once (a memory bound, as block_words)

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
        return torch.baddbmm(bias.unsqueeze(1), inputs, self.input_kernel[directions])

    def add_state_gates(
        self, input_gates: torch.Tensor, h: torch.Tensor, directions: slice = BOTH_DIRECTIONS
    ) -> torch.Tensor:
        """``input_gates (G, n, 4D) + h (G, n, P) @ state_kernel`` -> ``(G, n, 4D)``."""
        return torch.baddbmm(input_gates, h, self.state_kernel[directions])

    def project(self, memory: torch.Tensor, directions: slice = BOTH_DIRECTIONS) -> torch.Tensor:
        """``memory (G, n, D) @ projection`` -> ``h (G, n, P)`` in the weights' dtype."""
        return torch.bmm(memory.to(self.projection.dtype), self.projection[directions])

    def runs_directions_apart(self, h: torch.Tensor) -> bool:
        """Whether this layer's own products run the two directions one after the other (no: one batched product
        serves both)."""
        return False

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
        products = self.products(h)
        if products.runs_directions_apart(h):
            one = [slice(k, k + 1) for k in range(2)]
            runs = [self.recurrence(products, inputs[d], h[d], c[d], bias[d], batch_sizes, d) for d in one]
            output, h, c = (torch.cat(parts) for parts in zip(*runs, strict=True))
        else:
            output, h, c = self.recurrence(products, inputs, h, c, bias, batch_sizes, BOTH_DIRECTIONS)
        if self.residual:
            output = output + inputs
        return output, h, c

    def step_blocks(self, batch_sizes: Sequence[int]) -> list[tuple[int, int]]:
        """The steps whose input product runs at once, as ``(first, last)`` step indices: whole steps of at most
        ``gate_block_rows`` packed rows together, at least one step a block."""
        blocks, first = [], 0
        while first < len(batch_sizes):
            last, rows = first + 1, batch_sizes[first]
            while last < len(batch_sizes) and rows + batch_sizes[last] <= self.gate_block_rows:
                rows += batch_sizes[last]
                last += 1
            blocks.append((first, last))
            first = last
        return blocks

    def products(self, h: torch.Tensor):
        """What computes the products of a batch whose initial ``h`` is ``h (2, B, P)``: the one place where the CPU
        fast path is chosen (oneDNN's prepacked products where they apply: ``PrepackedProducts``), else this layer."""
        return PrepackedProducts.for_layer(self, h) or self

    def cell(self, gates: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The element-wise part of a step: ``gates (G, n, 4D)`` (``i, j, f, o``, their bias and forget bias
        included) and ``c (G, n, D)`` -> the new clipped ``c`` and ``sigmoid(o) * tanh(c)`` (``(G, n, D)`` each),
        the vector the projection takes."""
        i, j, f, o = gates.chunk(4, dim=-1)
        c = torch.addcmul(torch.sigmoid(f) * c, torch.sigmoid(i), cpu_tanh(j))
        if self.cell_clip is not None:
            c = c.clamp(-self.cell_clip, self.cell_clip)
        return c, torch.sigmoid(o) * cpu_tanh(c)

    def recurrence(
        self,
        products,
        inputs: torch.Tensor,
        h: torch.Tensor,
        c: torch.Tensor,
        bias: torch.Tensor,
        batch_sizes: Sequence[int],
        directions: slice,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The LSTM steps of ``directions`` (``G`` of them) with the three products of ``products`` (this layer, or
        the fast path's): ``inputs (G, N, P)``, ``h (G, B, P)``, ``c (G, B, D)``, ``bias (G, 4D)`` -> the un-added
        outputs ``(G, N, P)`` and the final ``h``, ``c`` (as ``forward``)."""
        # The input part of the gates, a block of steps at a time (step_blocks; usually all of them at once): memory
        # does not grow with N x 4D for very long inputs. Each block is split into its steps at once: the backward
        # of one split is one concatenation, where a slice per step cost a zero-filled N x 4D gradient per step
        # (measured: a quarter of a training step).
        sizes = list(batch_sizes)
        blocks = iter(self.step_blocks(sizes))
        step_gates: list[torch.Tensor] = []  # the current block's steps, last first
        outputs, ended_h, ended_c = [], [], []
        offset = 0
        for n in sizes:
            if n < h.shape[1]:  # the last rows ended at the previous step: keep their final states
                ended_h.append(h[:, n:])
                ended_c.append(c[:, n:])
                h, c = h[:, :n], c[:, :n]
            if not step_gates:
                first, last = next(blocks)
                block = products.input_gates(inputs[:, offset : offset + sum(sizes[first:last])], bias, directions)
                step_gates = list(block.split(sizes[first:last], dim=1))[::-1]
                del block  # the block's memory goes with its last step
            gates = products.add_state_gates(step_gates.pop(), h, directions)  # (G, n, 4D)
            c, memory = self.cell(gates, c)
            h = products.project(memory, directions)
            if self.proj_clip is not None:
                h = h.clamp(-self.proj_clip, self.proj_clip)
            outputs.append(h)
            offset += n
        output = torch.cat(outputs, dim=1) if outputs else torch.zeros_like(inputs)
        # Rows that ended last come first: the batch is sorted by length.
        return output, torch.cat([h, *ended_h[::-1]], dim=1), torch.cat([c, *ended_c[::-1]], dim=1)


use_bilstm_layer(ElmoBiLstmLayer)  # the recurrence that torch.compile's biLM operator runs (compiled_ops_elmo.py)


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
        last_hidden_state: ``(B, W, 2P)``, the top layer of the biLM, ``[forward_h_L; backward_h_L]`` (the same
            tensor as ``hidden_states[-1]``, returned whether or not ``output_hidden_states`` is set): what recipes
            written for transformers' encoders read. It is not ELMo's task representation: that is ``elmo``, the
            scalar mix of all layers, which stays ``outputs[0]`` (the feature-extraction pipelines return it). With
            ``token_layer_only=True`` it is layer 0 ``[x; x]``. It comes last in the tuple form, so that the
            positions of the other fields are those of earlier versions.

    Why the mixes are one batch-first tensor: transformers' pipelines split a batched output into sentences by
    indexing every field with the sentence's row (``PipelineIterator.loader_batch_item``; only ``hidden_states`` and
    ``attentions`` tuples are special-cased), so a tuple of mixes would be indexed by mix: wrong vectors, or an
    ``IndexError``. AllenNLP's form stays available: [`elmo_representations`] (``out["elmo_representations"]``).
    """

    elmo: torch.Tensor | None = None
    mixes: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    mask: torch.Tensor | None = None
    lstm_state: ElmoLstmState | None = None
    last_hidden_state: torch.Tensor | None = None

    @property
    def elmo_representations(self) -> tuple[torch.Tensor, ...]:
        """The ``M`` mixes as AllenNLP's ``Elmo`` returns them: a tuple of ``(B, W, 2P)`` tensors (views of
        ``mixes``; ``()`` without mixes)."""
        return () if self.mixes is None else tuple(self.mixes.unbind(dim=1))

    @property
    def layer_average(self) -> torch.Tensor:
        """``(B, W, 2P)``: the mean of the ``L + 1`` layers of ``hidden_states`` (computed with
        ``output_hidden_states=True``), the fixed mix with equal weights. An attribute, so that code reading an
        output by name (sentence-transformers' ``method_output_name``) can ask for it."""
        if self.hidden_states is None:
            raise ValueError("layer_average needs the layers: call the model with output_hidden_states=True")
        return torch.stack(self.hidden_states).mean(dim=0)

    def __getitem__(self, key):
        # AllenNLP's dict key, for code written against its Elmo: out["elmo_representations"].
        if isinstance(key, str) and key == "elmo_representations":
            return self.elmo_representations
        return super().__getitem__(key)


# ---------------------------------------------------------------------------------------------
# The pretrained-model base class and ElmoModel
# ---------------------------------------------------------------------------------------------


class ElmoPreTrainedModel(ElmoCharacterInputs, PreTrainedModel):
    config_class = ElmoConfig
    base_model_prefix = "elmo"
    main_input_name = "input_ids"
    supports_gradient_checkpointing = True
    _no_split_modules = ["ElmoBiLstmLayer", "ElmoCharacterEncoder"]

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *model_args, **kwargs):
        """As ``PreTrainedModel.from_pretrained``, with these checks (``checks_elmo.py``) before and after it.

        - Weights are read only from safetensors files: ``use_safetensors=False`` is refused (``ValueError``), a
          folder without safetensors weights (a ``pytorch_model.bin`` is a pickle, never opened) and a
          ``*.safetensors.index.json`` that names any file but a ``.safetensors`` file of its folder are refused
          (``OSError``) before anything is read. A corrupt or truncated ``model.safetensors`` raises ``OSError``.
        - Weights must be floating point and finite: tensors of integer, bool or complex dtype (read from the
          files' headers) or with NaN or infinite values raise ``ValueError`` naming them.
        - The biLM's weights (``char_cnn.*``, ``bilm.*``) must all come from the checkpoint: missing or in excess
          (e.g. another ``n_layers``) they raise ``ValueError`` listing them (a random biLM gives plausible-looking,
          meaningless vectors). Weights of the wrong shape raise transformers' error after its load report
          (``ignore_mismatched_sizes=True`` re-initialises them). A new head is initialised, and transformers'
          report lists it. ``from_pretrained(None, config=..., state_dict=...)`` initialises what the state lacks.
        - A source that cannot be a model fails at once (``OSError``): a folder without ``config.json`` (unless
          ``config`` is given), and a name that is no path and no ``owner/name`` Hub id, such as a released
          model's short name (``configuration_elmo.check_model_name``). Hub ids are transformers' to download.
        """
        name = pretrained_model_name_or_path
        check_source(name, kwargs)
        want_info = kwargs.pop("output_loading_info", False)
        source = os.fspath(name) if isinstance(name, (str, os.PathLike)) else "the given state_dict"
        try:
            model, info = super().from_pretrained(name, *model_args, output_loading_info=True, **kwargs)
        except RuntimeError as error:
            if "ignore_mismatched_sizes" not in str(error):
                raise
            problems = mismatched_shapes(cls, name, kwargs) if isinstance(name, (str, os.PathLike)) else []
            shown = "; ".join(problems[:8]) + (f"; and {len(problems) - 8} more" if len(problems) > 8 else "")
            core = tuple(p + part for p in ("", cls.base_model_prefix + ".") for part in ("char_cnn.", "bilm."))
            if problems and not any(problem.startswith(core) for problem in problems):  # a head's weights: re-heading
                shown += ". To start them anew (a head for another num_labels), pass ignore_mismatched_sizes=True"
            raise ValueError(
                f"the weights in {source} do not fit the config (wrong sizes in config.json or in from_pretrained "
                f"arguments?): {shown or 'see the load report above'}"
            ) from error
        except Exception as error:
            if type(error).__name__ != "SafetensorError":
                raise
            raise OSError(f"cannot read the safetensors weights of {source}: corrupt or truncated ({error})") from error
        check_loaded(model, info, name, kwargs)
        model._after_loading()
        return (model, info) if want_info else model

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

    def save_pretrained(self, save_directory: str | os.PathLike, *args, **kwargs) -> None:
        """As ``PreTrainedModel.save_pretrained``; the weight files then get the mode of a new file under the user's
        umask (transformers writes them 0600). A plain folder: config and weights, with code files and ``auto_map``
        only when remote code was asked for (``register_for_auto_class``, see ``modeling_elmo.hub.remote_code``); the
        ``auto_map`` of a config read from a remote-code folder is left out of a plain save (it has no code to name)."""
        int8 = [name for name, module in self.named_modules() if getattr(module, "holds_int8_weights", False)]
        if int8:  # refused before anything is written: int8 weights are packed outside the state dict
            raise ValueError(
                f"this model is quantized to int8 ({int8[0]} and {len(int8) - 1} more), which save_pretrained "
                "cannot store: save the float32 model, and quantize again after loading it"
            )
        with code_for_save(self, save_directory):  # auto_map, custom_pipelines: only the code the folder holds
            super().save_pretrained(save_directory, *args, **kwargs)
        if os.path.isdir(save_directory):
            follow_umask(Path(save_directory).glob("*.safetensors*"))

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, ElmoScalarMix):
            init.zeros_(module.scalar_parameters)
            init.ones_(module.gamma)
        elif isinstance(module, ElmoBiLstmLayer):
            for param in (module.input_kernel, module.state_kernel, module.projection):
                init.normal_(param, mean=0.0, std=self.config.initializer_range)
            init.zeros_(module.bias)
        elif isinstance(module, ElmoTaskLstm):  # as transformers initialises an nn.LSTM
            for name, param in module.named_parameters():
                (init.xavier_uniform_ if name.startswith("weight") else init.zeros_)(param)
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

    # What a load from another kind of ELMo folder rightly lacks or has in excess: the scalar mixes, a task's weights
    # that start equal (an LM folder has none; num_output_representations may differ), and the LM softmax of a
    # folder written by `elmo train-lm`.
    _keys_to_ignore_on_load_missing = [r"(^|\.)scalar_mixes\."]
    _keys_to_ignore_on_load_unexpected = [r"(^|\.)scalar_mixes\.", r"^softmax\."]

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
        # Layer 0 of known words, looked up instead of computed (``modeling_elmo.inference.token_cache``); None: none.
        self.token_cache = None
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
        self.token_cache = None

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

        Each distinct word is encoded once. With a token cache (``self.token_cache``, see
        ``modeling_elmo.inference.token_cache.build_token_cache``), the cached words are looked up instead, unless the
        character encoder is being trained; the cache itself drops out once it no longer fits the encoder.
        """
        unique, inverse = torch.unique(char_ids, dim=0, return_inverse=True)
        trainable = torch.is_grad_enabled() and any(p.requires_grad for p in self.char_cnn.parameters())
        if self.token_cache is not None and not trainable and unique.shape[0]:
            return self.token_cache.embed(self, unique)[inverse]
        return self.char_cnn(unique)[inverse]

    def mix_l2_penalty(self) -> torch.Tensor:
        """``scalar_mix_l2_coef * sum ||w||^2`` over the mixes, for a head to add to its loss."""
        penalty = sum((mix.l2_penalty() for mix in self.scalar_mixes), torch.zeros((), device=self.device))
        return self.config.scalar_mix_l2_coef * penalty

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        output_hidden_states: bool | None = None,
        lstm_state: ElmoLstmState | None = None,
        return_lstm_state: bool | None = None,
        token_layer_only: bool = False,
        backward_input_ids: torch.LongTensor | None = None,
        vocab_ids: torch.LongTensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        head_mask: torch.Tensor | None = None,
        output_attentions: bool | None = None,
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
            token_type_ids: ``(B, W)``, 0 for the first text's words and 1 for the second's, as the tokenizer gives
                them for a pair of texts; all zero (or ``None``) for single sentences. Given, the biLM reads each
                text on its own (its own ``<S>``/``</S>``, fresh states; ``pairs_elmo.py``), and the mixes run over
                all words.
            inputs_embeds, position_ids, head_mask, output_attentions: transformers' conventional arguments,
                accepted by name so that generic code (PEFT, pipelines) can pass them as ``None``/``False``; any
                other value is refused with the reason (``checks_elmo.check_conventional_arguments``).

        Returns:
            [`ElmoModelOutput`]; with ``return_dict=False`` a tuple of its non-``None`` fields.
        """
        check_conventional_arguments(input_ids, inputs_embeds, position_ids, head_mask, output_attentions)
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
            elif token_type_ids is not None:  # each text of a pair read on its own, in one pass (pairs_elmo.py)
                layers = pair_layers(self._compute_layers, input_ids, mask, token_type_ids, state)
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
            last_hidden_state=layers[-1],
        )

    def _token_layer(self, input_ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Layer 0 ``[x; x]`` ``(B, W, 2P)`` of the words, zero where ``mask`` is False; the LSTMs do not run."""
        return torch.cat([self._scatter_words(input_ids, mask)] * 2, dim=-1)

    def _scatter_words(self, input_ids: torch.Tensor, present: torch.Tensor) -> torch.Tensor:
        """Layer 0 ``(R, T, P)`` of the words of ``input_ids`` ``(R, T, C)`` where ``present`` ``(R, T)``, else zero.

        Allocated in the dtype the character encoder returns, not the model's: under ``torch.autocast`` that is the
        autocast dtype (bfloat16, float16), and the two must match for the scatter."""
        embedded = self.embed_words(input_ids[present])  # (N, P)
        tokens = embedded.new_zeros((*present.shape, embedded.shape[-1]))
        tokens[present] = embedded
        return tokens

    def _compute_layers(
        self, input_ids: torch.Tensor, mask: torch.Tensor, state: ElmoLstmState | None
    ) -> list[torch.Tensor]:
        """The ``L + 1`` biLM layers of the words, each ``(B, W, 2P)``, zero where ``mask`` ``(B, W)`` is False.

        With ``state``, row ``b`` starts from its row ``b`` and the rows with words are updated in place.
        """
        if in_graph():  # torch.compile / torch.export: the same function without data-dependent control flow
            if state is not None:
                raise ValueError(
                    "a carried LSTM state (lstm_state=, config.stateful) is not supported under torch.compile or "
                    "torch.export: run the model eagerly, or stateless"
                )
            return graph_layers(self, input_ids, mask)
        batch, words = mask.shape
        width = 2 * self.config.projection_dim
        lengths = mask.sum(dim=1)
        rows = lengths.nonzero().squeeze(1)  # sentences with at least one word
        if rows.numel() == 0:
            zeros = input_ids.new_zeros((batch, words, width), dtype=self.dtype)
            return [zeros] * (self.config.n_layers + 1)

        # <S> w_1 .. w_n </S> for each sentence, as char ids (R, T, C) and embeddings (R, T, P).
        ids, steps = self.add_boundaries(input_ids.index_select(0, rows), mask.index_select(0, rows))
        present = ids.ne(0).any(dim=-1)
        tokens = self._scatter_words(ids, present)

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

    def add_boundaries(self, input_ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(R, W, C)`` words -> ``(R, W + 2, C)`` with ``<S>`` first and ``</S>`` after the last word."""
        rows, words, chars = input_ids.shape
        lengths = mask.sum(dim=1)
        bos, eos = self.boundary_ids.to(input_ids.dtype)
        ids = input_ids.new_zeros(rows, words + 2, chars)
        ids[:, 0] = bos
        ids[:, 1 : words + 1] = input_ids * mask.unsqueeze(-1).to(input_ids.dtype)
        ids[torch.arange(rows, device=ids.device), lengths + 1] = eos
        return ids, lengths + 2


__all__ = [
    "ElmoBiLm",
    "ElmoBiLstmLayer",
    "ElmoCharacterEncoder",
    "ElmoLstmState",
    "ElmoModel",
    "ElmoModelOutput",
    "ElmoPreTrainedModel",
    "ElmoScalarMix",
    "init_pretraining_scales",
]
