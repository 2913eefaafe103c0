"""The graph path of ElmoModel and of the heads: the same functions as the eager forward, with no data-dependent
Python control flow, for ``torch.compile`` (plain, ``fullgraph=True``, ``mode="reduce-overhead"``) and
``torch.export``.

``ElmoModel._compute_layers`` chooses it at one place, [`in_graph`]: while torch compiles or exports, else the eager
path runs (packed steps with a Python loop over their batch sizes, unique words, the length-split character CNN,
oneDNN's prepacked products: fast in eager, but each of them reads tensor values into Python).

What differs from the eager path, and why the outputs are the same (within float rounding, 1e-5 in float32):

- the character CNN over all ``C`` positions of every word slot, boundaries and padding included (the eager path
  stops at the longest word, whose windows past it equal this one's; padded slots are zeroed afterwards);
- ``<S>``/``</S>`` placed by comparisons with the lengths, not by indexing with Python ints;
- the recurrences (each biLSTM layer, a head's task BiLSTM, the CRF's forward and forward-backward algorithms):

  - under ``torch.compile`` ([`compiling`]), custom operators (``compiled_ops_elmo.py``:
    ``torch.ops.elmo_<hash>.*``) whose implementation is the eager path's code on the padded batch (packed real
    steps, prepacked products at inference); in training, the recurrences' operators keep their steps for a
    backward through time (``bptt_elmo.py``). Inductor compiles everything around them and lowers no recurrence;
    any length runs in the same graph.
  - under ``torch.export``, ``scan``s (``torch._higher_order_ops.scan``) over all ``T`` steps, both directions at
    once, ``T`` a symbolic size (an ONNX ``Scan`` of any length): [`run_layer`], [`run_task_lstm`],
    [`crf_log_partition`], [`crf_through_each_tag`]. The backward direction reads each sentence reversed within its
    length, so the steps past a sentence's end come after its real steps and never reach them; outputs there are
    zeroed at the end.

The heads' value checks become ``torch._assert_async`` in a graph.

Not on the graph path: a carried LSTM state (``lstm_state=``, ``config.stateful``: each row's state is looked up by
value), stream mode, the token cache and int8 layers (refused by name under ``torch.compile``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from . import compiled_ops_elmo
from .compiled_ops_elmo import bilstm_layer_consts, call, char_encoder_consts, reverse_padded


def in_graph() -> bool:
    """Whether torch is compiling (``torch.compile``) or exporting (``torch.export``) the code that calls this."""
    return torch.compiler.is_compiling() or torch.compiler.is_exporting()


def compiling() -> bool:
    """Whether ``torch.compile`` (not ``torch.export``) traces the code that calls this: the recurrences then run as
    the custom operators of ``compiled_ops_elmo.py``; under ``torch.export``, as scans."""
    return torch.compiler.is_compiling() and not torch.compiler.is_exporting()


def _scan():
    try:
        from torch._higher_order_ops import scan
    except ImportError as error:  # older torch
        raise RuntimeError(f"ELMo's graph path needs torch with torch._higher_order_ops.scan: {error}") from error
    return scan


def encode_characters(cnn: nn.Module, char_ids: torch.Tensor) -> torch.Tensor:
    """[`ElmoCharacterEncoder`]'s function over all ``C`` positions: ``(..., C)`` ids (``(..., C + 1)`` with the
    word id last for a model with a word input) -> ``(..., P)``."""
    batch_shape = char_ids.shape[:-1]
    char_ids = char_ids.reshape(-1, char_ids.shape[-1])
    word_ids = None
    if cnn.word_input is not None:
        char_ids, word_ids = char_ids[:, :-1], char_ids[:, -1]
    embedded = cnn.char_embedding(char_ids)  # (N, C, dim)
    # Each convolution as a product over its windows, not conv1d: conv1d's shape heuristics guard on the number of
    # words (N >= 16), which cost extra graphs for small batches. Max over positions, then the activation: the
    # original's order (relu and tanh are monotonic).
    features = []
    for conv in cnn.convolutions:
        windows = embedded.unfold(1, conv.kernel_size[0], 1)  # (N, C - width + 1, dim, width)
        scores = torch.einsum("nldw,fdw->nlf", windows, conv.weight) + conv.bias
        features.append(cnn.activation(scores.amax(dim=1)))
    x = torch.cat(features, dim=-1)
    for highway in cnn.highways:
        x = highway(x)
    x = cnn.projection(x)
    if word_ids is not None:
        x = x + cnn.word_input(word_ids)
    return x.reshape(*batch_shape, x.shape[-1])  # not -1: a batch of no sentences has no elements


def run_layer(layer: nn.Module, inputs: torch.Tensor) -> torch.Tensor:
    """One [`ElmoBiLstmLayer`], both directions, from zero states: ``inputs (2, B, T, P)`` (index 1 already
    reversed within each sentence) -> outputs ``(2, B, T, P)`` in the same layout, the residual added."""
    _, batch, steps, width = inputs.shape
    bias = layer.gate_bias()
    gates_in = layer.input_gates(inputs.reshape(2, batch * steps, width), bias)  # (2, B * T, 4D)
    gates_in = gates_in.reshape(2, batch, steps, -1).permute(2, 0, 1, 3)  # (T, 2, B, 4D), time first for scan
    proj_clip = layer.proj_clip

    def step(carry, gates_t):
        h, c = carry
        c, memory = layer.cell(layer.add_state_gates(gates_t, h), c)
        h = layer.project(memory)
        if proj_clip is not None:
            h = h.clamp(-proj_clip, proj_clip)
        # Clones of the carry too: under autograd, inductor refuses a carry that scan also saves for the backward
        # ("scan might be aliasing", torch 2.13, pytorch/pytorch#195977); aot_eager takes either.
        return (h.clone(), c.clone()), h.clone()

    h0 = gates_in.new_zeros(2, batch, width, dtype=inputs.dtype)
    c0 = gates_in.new_zeros(2, batch, layer.lstm_dim, dtype=layer.state_dtype(bias.dtype))
    _, outputs = _scan()(step, (h0, c0), gates_in)  # (T, 2, B, P); the final carry is dropped (see the docstring)
    outputs = outputs.permute(1, 2, 0, 3)
    return outputs + inputs if layer.residual else outputs


def graph_layers(model: nn.Module, input_ids: torch.Tensor, mask: torch.Tensor) -> list[torch.Tensor]:
    """``ElmoModel._compute_layers`` without a carried state: the ``L + 1`` layers ``(B, W, 2P)`` of ``input_ids``
    ``(B, W, C)`` (zero at padding) under ``mask`` ``(B, W)`` bool, zero where ``mask`` is False.

    Each biLSTM layer is one ``elmo::bilstm_layer`` operator under ``torch.compile``, one ``scan`` under
    ``torch.export`` (whose program and ONNX ``Scan`` take any length)."""
    if compiling():
        for layer in model.bilm.layers:
            if getattr(layer, "holds_int8_weights", False) or not hasattr(layer, "input_kernel"):
                raise ValueError(
                    f"a biLM with {type(layer).__name__} layers (their own products, e.g. int8-quantized) does not "
                    "run under torch.compile: run it eagerly (the int8 products are its fast path)"
                )
    return _layers(model, input_ids, mask, mask.sum(dim=1))


def _layers(model: nn.Module, input_ids: torch.Tensor, mask: torch.Tensor, lengths: torch.Tensor) -> list[torch.Tensor]:
    batch, words, chars = input_ids.shape
    positions = torch.arange(words + 2, device=input_ids.device).unsqueeze(0)  # (1, T)
    # <S> w_1 .. w_n </S> 0 .. 0: the words shifted by one, </S> where the position is n + 1.
    bos, eos = model.boundary_ids.to(input_ids.dtype)
    words_only = input_ids * mask.unsqueeze(-1).to(input_ids.dtype)
    ids = torch.cat([bos.expand(batch, 1, chars), words_only, input_ids.new_zeros(batch, 1, chars)], dim=1)
    ids = torch.where((positions == (lengths + 1).unsqueeze(1)).unsqueeze(-1), eos, ids)
    steps = lengths + 2
    if compiling() and compiled_ops_elmo.reads_values(ids.device):
        # The eager path's encoder as an operator: each distinct word once, the convolutions up to the longest word
        # (reads values into Python, which a CUDA graph cannot: there inductor compiles it over all C positions).
        cnn = model.char_cnn
        weights = list(cnn.parameters())
        training = torch.is_grad_enabled() and any(w.requires_grad for w in weights)  # keeps its highway's gates
        name = "token_layer_train" if training else "token_layer"
        tokens = call(name, [ids, steps, *weights], char_encoder_consts(cnn))  # (B, T, P)
    else:
        encoded = encode_characters(model.char_cnn, ids)  # (B, T, P), in autocast's dtype under autocast
        tokens = encoded * (positions < steps.unsqueeze(1)).unsqueeze(-1).to(encoded.dtype)
    layers = [torch.cat([tokens, tokens], dim=-1)]
    if compiling():  # operators on (2B, T, P): see compiled_ops_elmo._bilstm_layer
        inputs = tokens
        for k, layer in enumerate(model.bilm.layers):
            inputs = op_layer(layer, inputs, steps, first=k == 0)
            both = inputs.view(2, batch, *inputs.shape[1:])  # sizes, not -1: a batch may have no rows
            layers.append(torch.cat([both[0], reverse_padded(both[1], steps)], dim=-1))
    else:
        inputs = torch.stack([tokens, reverse_padded(tokens, steps)])  # (2, B, T, P)
        for layer in model.bilm.layers:
            inputs = run_layer(layer, inputs)
            layers.append(torch.cat([inputs[0], reverse_padded(inputs[1], steps)], dim=-1))
    # Drop <S> (position 0) and </S> (position n + 1, which the mask zeroes).
    keep = mask.unsqueeze(-1).to(tokens.dtype)
    return [layer[:, 1 : words + 1] * keep for layer in layers]


def op_layer(layer: nn.Module, inputs: torch.Tensor, steps: torch.Tensor, first: bool) -> torch.Tensor:
    """[`run_layer`] as the ``elmo::bilstm_layer`` operator (the eager path's recurrence, over real steps only):
    ``inputs (2B, T, P)`` (the directions' rows; ``first``: the tokens ``(B, T, P)``), ``steps (B,)`` ->
    ``(2B, T, P)``, the residual added."""
    weights = [layer.input_kernel, layer.state_kernel, layer.bias, layer.projection]
    training = torch.is_grad_enabled() and (inputs.requires_grad or any(w.requires_grad for w in weights))
    # In training, the operator that keeps its steps for its backward; at inference, the one that may use oneDNN's
    # prepacked products (the eager path's choice).
    name = "bilstm_layer_train" if training else "bilstm_layer"
    return call(name, [inputs, steps, *weights], bilstm_layer_consts(layer, not training, first))


def _task_lstm_step(w_forward: torch.Tensor, w_backward: torch.Tensor):
    """The scan step of a task LSTM layer, both directions, from the parameters ``W_hh`` ``(4H, H)`` of each."""

    def step(carry, gates_t):
        h, c = carry
        hidden_gates = torch.stack([h[0] @ w_forward.t(), h[1] @ w_backward.t()])
        i, f, g, o = (gates_t + hidden_gates).chunk(4, dim=-1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        return (h.clone(), c.clone()), h.clone()  # clones: see run_layer

    return step


def run_task_lstm(lstm: nn.Module, features: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """A task's bidirectional LSTM ([`ElmoTaskLstm`], ``nn.LSTM``'s weights) on padded input, as the eager path
    runs it on packed sequences: ``features (B, W, F)``, ``lengths (B,)`` -> ``(B, W, 2H)``, zero past each row's
    length.

    Each layer is one ``scan`` over the steps, both directions at once (gates in ``nn.LSTM``'s order: input, forget,
    cell, output). As in [`run_layer`], the backward direction reads each row reversed within its length, so padding
    never reaches a real step; between layers, the module's dropout."""
    words = features.shape[1]
    x = F.pad(features, (0, 0, 0, 1))  # (B, T, F), T = W + 1: a scan over a symbolic length is never empty
    batch, steps, _ = x.shape
    keep = (torch.arange(steps, device=x.device).unsqueeze(0) < lengths.unsqueeze(1)).unsqueeze(-1).to(x.dtype)
    for k in range(lstm.num_layers):
        names = [f"l{k}", f"l{k}_reverse"]
        w_ih = torch.stack([getattr(lstm, f"weight_ih_{n}") for n in names])  # (2, 4H, F)
        bias = torch.stack([getattr(lstm, f"bias_ih_{n}") + getattr(lstm, f"bias_hh_{n}") for n in names])
        inputs = torch.stack([x, reverse_padded(x, lengths)]).reshape(2, batch * steps, -1)  # (2, B * T, F)
        gates_in = torch.baddbmm(bias.unsqueeze(1), inputs, w_ih.transpose(1, 2))  # (2, B * T, 4H)
        gates_in = gates_in.reshape(2, batch, steps, -1).permute(2, 0, 1, 3)  # (T, 2, B, 4H)

        h0 = gates_in.new_zeros(2, batch, lstm.hidden_size)
        step = _task_lstm_step(*(getattr(lstm, f"weight_hh_{n}") for n in names))
        _, outputs = _scan()(step, (h0, h0.clone()), gates_in)  # (T, 2, B, H)
        outputs = outputs.permute(1, 2, 0, 3)  # (2, B, T, H)
        x = torch.cat([outputs[0], reverse_padded(outputs[1], lengths)], dim=-1) * keep  # (B, T, 2H)
        if k < lstm.num_layers - 1:
            x = F.dropout(x, lstm.dropout, lstm.training)
    return x[:, :words]


def _pad_steps(emissions: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``emissions (B, W, K)`` and ``mask (B, W)`` padded with one masked step, to ``T = W + 1`` steps (the scans
    run ``T - 1 >= 1``: a scan over a symbolic length is never empty)."""
    return F.pad(emissions, (0, 0, 0, 1)), F.pad(mask, (0, 1))


def crf_log_partition(
    emissions: torch.Tensor, mask: torch.Tensor, transitions: torch.Tensor, start: torch.Tensor, end: torch.Tensor
) -> torch.Tensor:
    """The CRF's forward algorithm (``ConditionalRandomField._log_partition``) as one ``scan``: ``emissions (B, W,
    K)``, right-padded ``mask (B, W)`` bool, the effective ``transitions (K, K)``, ``start``/``end (K,)`` -> ``log Z``
    ``(B,)``, 0 for an empty row."""
    emissions, mask = _pad_steps(emissions, mask)

    def step(alpha, inputs):
        emission, real = inputs
        forward = torch.logsumexp(alpha.unsqueeze(2) + transitions, dim=1) + emission
        alpha = torch.where(real.unsqueeze(1), forward, alpha)  # past a row's end: carried unchanged
        return alpha.clone(), alpha.clone()

    alpha = start.unsqueeze(0) + emissions[:, 0]  # (B, K)
    _, alphas = _scan()(step, alpha, (emissions[:, 1:].transpose(0, 1), mask[:, 1:].transpose(0, 1)))
    # The last output, not the final carry (whose gradient inductor gets wrong: see the module docstring).
    log_z = torch.logsumexp(alphas[-1] + end.unsqueeze(0), dim=1)
    return torch.where(mask[:, 0], log_z, torch.zeros_like(log_z))


def crf_through_each_tag(
    emissions: torch.Tensor,
    mask: torch.Tensor,
    transitions: torch.Tensor,
    start: torch.Tensor,
    end: torch.Tensor,
    reduce,
) -> torch.Tensor:
    """The CRF's forward-backward (``ConditionalRandomField._through_each_tag``) as two ``scan``s, before ``finish``:
    ``alpha + beta`` ``(B, W, K)`` per position and tag, with ``reduce`` (``torch.logsumexp`` or ``torch.amax``) over
    the neighbouring tag; arguments as in [`crf_log_partition`]. Masked positions hold values the caller zeroes."""
    words = emissions.shape[1]
    emissions, mask = _pad_steps(emissions, mask)
    following = (emissions[:, 1:].transpose(0, 1), mask[:, 1:].transpose(0, 1))  # (T - 1, B, K), (T - 1, B)

    def forward_step(alpha, emission):
        alpha = reduce(alpha.unsqueeze(2) + transitions, dim=1) + emission
        return alpha.clone(), alpha.clone()

    final = end.unsqueeze(0).expand(emissions.shape[0], -1).clone()  # (B, K): END alone after a row's last position

    def backward_step(beta, inputs):
        emission, real = inputs
        after = reduce(transitions.unsqueeze(0) + (emission + beta).unsqueeze(1), dim=2)
        beta = torch.where(real.unsqueeze(1), after, end.unsqueeze(0))
        return beta.clone(), beta.clone()

    first = start.unsqueeze(0) + emissions[:, 0]
    _, alphas = _scan()(forward_step, first, following[0])
    _, betas = _scan()(backward_step, final, following, reverse=True)
    alphas = torch.cat([first.unsqueeze(1), alphas.transpose(0, 1)], dim=1)  # (B, T, K)
    betas = torch.cat([betas.transpose(0, 1), final.unsqueeze(1)], dim=1)
    return (alphas + betas)[:, :words]


__all__ = [
    "compiling",
    "crf_log_partition",
    "crf_through_each_tag",
    "encode_characters",
    "graph_layers",
    "in_graph",
    "op_layer",
    "reverse_padded",
    "run_layer",
    "run_task_lstm",
]
