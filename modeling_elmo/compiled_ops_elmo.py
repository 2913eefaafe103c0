"""ELMo's character encoder and recurrences as custom operators (``torch.ops.elmo_<hash>.*``, written ``elmo::*``
here; [`operator_namespace`]), for ``torch.compile``:
opaque to dynamo and inductor, which compile what surrounds them (boundaries, the layers' layout, mixes, heads).

Each operator's implementation is the eager path's own code on padded tensors: the token layer encodes each distinct
word once, with the convolutions up to the longest word (on the CPU only: it reads values into Python; on CUDA
inductor compiles the character CNN, see ``graph_path_elmo.py``), the biLM layer packs the valid
steps (on the CPU, with oneDNN's prepacked products at inference, as ``ElmoBiLstmLayer.forward``, and all its steps
in one C++ call where a compiler is found: ``native_steps_elmo.py``), the task BiLSTM layer runs ``torch.lstm`` on
packed sequences, the CRF's forward and forward-backward algorithms loop over
the steps. Why operators and not the scans of ``graph_path_elmo.py``: inductor (torch 2.13) cannot lower a scan of
symbolic length, gets some scan gradients wrong and fails at plain ``torch.compile`` (``DataDependentOutputException``
in ``decompose_scan_to_while_loop``); an operator runs only real steps, at the eager path's speed, at any length.

Off the CPU (CUDA) the implementations read no value into Python (no packing: every step of the padded batch, the
past-the-end outputs zeroed), so that a CUDA graph (``mode="reduce-overhead"``) can capture them.

Gradients. The character encoder and the recurrences have a training operator each (``elmo::token_layer_train``,
``elmo::bilstm_layer_train``, ``elmo::task_lstm_layer_train``), which the model calls where gradients are wanted: its
forward keeps what its backward needs (the highway layers' gates; what each step computed) and its backward operator
uses it (the recurrences walk the steps back: ``bptt_elmo.py``, in C++ where built). Their inference operators have
no backward. The CRF's recursions have a backward operator ``elmo::NAME_backward`` that re-runs the eager function
under ``torch.func.vjp`` and returns its vector-Jacobian product (a recomputation: nothing but the inputs is saved;
the functions draw no random numbers, so the recomputation is the forward's own function).

Every operator takes ``tensors: list[Tensor]`` and ``consts: list[float]`` (settings; ``nan`` for ``None``) and
returns one tensor ([`call`], the way in, returns the training operators' first output alone).
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence

from .bptt_elmo import state_dtype, steps_backward, steps_saving
from .characters import PADDING_CHAR
from .native_steps_elmo import native_forward, native_steps_available, native_steps_backward, native_steps_saving


def operator_namespace(module: str, source: bytes) -> str:
    """The operators' namespace for this file's ``source`` loaded as ``module``: ``elmo_<hash of the source>`` for
    the installed package, ``elmo_<module>_<hash>`` for a copy loaded as a model folder's remote code
    (``transformers_modules...``: an operator name can be registered once per process).

    The hash, because torch's compile caches key a compiled backward on its forward graph alone
    (pytorch/pytorch#144344): after an upgrade that changed an operator's autograd formula under the same name, a
    process would run the backward that an older version left in the cache (``/tmp/torchinductor_$USER``)."""
    digest = hashlib.sha256(source).hexdigest()[:8]
    if module == "modeling_elmo.compiled_ops_elmo":
        return f"elmo_{digest}"
    return "elmo_" + re.sub(r"\W", "_", module) + "_" + digest


NAMESPACE = operator_namespace(__name__, Path(__file__).read_bytes())
_OPS: dict[str, tuple[Callable, Callable]] = {}  # name -> (forward operator, eager function)

# The biLM layer class whose recurrence ``elmo::bilstm_layer`` runs, given by modeling_elmo.py ([`use_bilstm_layer`]):
# importing it here would close a loop (modeling_elmo -> checks_elmo -> graph_path_elmo -> this module).
_BILSTM_LAYER: list[type[nn.Module]] = []


def use_bilstm_layer(layer_class: type[nn.Module]) -> None:
    """Name the class (``ElmoBiLstmLayer``) whose ``forward`` is the biLM operator's recurrence."""
    _BILSTM_LAYER[:] = [layer_class]


def reverse_padded(x: Tensor, lengths: Tensor) -> Tensor:
    """Reverse each row of ``x (B, T, ...)`` within its length ``lengths (B,)``; positions past it stay put."""
    steps = torch.arange(x.shape[1], device=x.device).unsqueeze(0)
    index = torch.where(steps < lengths.unsqueeze(1), lengths.unsqueeze(1) - 1 - steps, steps)
    return x.gather(1, index.view(*index.shape, *([1] * (x.dim() - 2))).expand_as(x))


def _no_autocast(device: torch.device):
    """The operators' dtypes are their inputs' (cast by the caller, [`call`]): autocast must not recast inside."""
    return torch.autocast(device.type, enabled=False) if device.type in ("cpu", "cuda") else contextlib.nullcontext()


def _define(
    name: str,
    eager: Callable[[list[Tensor], list[float]], Tensor],
    fake: Callable,
    differentiable: bool = True,
) -> None:
    """Register ``elmo::name`` (``eager`` as its implementation, ``fake`` for tracing) and, if ``differentiable``, its
    backward operator, which re-runs ``eager`` under ``torch.func.vjp``."""

    def forward(tensors: list[Tensor], consts: list[float]) -> Tensor:
        with _no_autocast(tensors[0].device):
            return eager(list(tensors), list(consts)).contiguous()  # the fake's layout (inductor checks it)

    def backward(grad: Tensor, tensors: list[Tensor], consts: list[float]) -> list[Tensor]:
        # torch.func.vjp: an operator's implementation runs below the dispatcher's autograd keys, where
        # torch.autograd.grad sees no graph; a functorch transform differentiates there.
        floating = [k for k, t in enumerate(tensors) if t.is_floating_point()]

        def function(*differentiable: Tensor) -> Tensor:
            inputs = list(tensors)
            for k, t in zip(floating, differentiable, strict=True):
                inputs[k] = t
            return eager(inputs, list(consts))

        with _no_autocast(grad.device):
            _, pull_back = torch.func.vjp(function, *(tensors[k] for k in floating))
            grads = iter(pull_back(grad))
        # Not differentiable (lengths, masks): zeros, which the autograd formula drops.
        found = [next(grads) if t.is_floating_point() else None for t in tensors]
        # An operator's outputs may alias neither its inputs nor each other (autograd can hand the incoming gradient
        # back as is, or one tensor as two inputs' gradients): a copy where one would.
        seen = {x.untyped_storage().data_ptr() for x in (grad, *tensors)}
        results = []
        for g, t in zip(found, tensors, strict=True):
            g = t.new_zeros(t.shape) if g is None else g.contiguous()
            if g.untyped_storage().data_ptr() in seen:
                g = g.clone()
            seen.add(g.untyped_storage().data_ptr())
            results.append(g)
        return results

    tags = (torch.Tag.needs_contiguous_strides,)
    forward_op = torch.library.custom_op(f"{NAMESPACE}::{name}", forward, mutates_args=(), tags=tags)
    forward_op.register_fake(lambda tensors, consts: fake(list(tensors), list(consts)))
    _OPS[name] = (forward_op, eager)
    if not differentiable:
        return
    backward_op = torch.library.custom_op(f"{NAMESPACE}::{name}_backward", backward, mutates_args=(), tags=tags)
    backward_op.register_fake(lambda grad, tensors, consts: [t.new_empty(t.shape) for t in tensors])

    def setup_context(ctx, inputs, output):
        tensors, consts = inputs
        ctx.save_for_backward(*tensors)
        ctx.consts = consts

    def formula(ctx, grad):
        tensors = list(ctx.saved_tensors)
        grads = backward_op(grad.contiguous(), tensors, ctx.consts)
        grads = [g if t.is_floating_point() else None for g, t in zip(grads, tensors, strict=True)]
        # The inputs' structure as torch.library compares it: no gradient for the settings (None), except that an
        # empty list stays one.
        return grads, (None if ctx.consts else [])

    forward_op.register_autograd(formula, setup_context=setup_context)


def call(name: str, tensors: Sequence[Tensor], consts: Sequence[float] = ()) -> Tensor:
    """``torch.ops.elmo_<hash>.<name>(tensors, consts)``, its floating tensors cast to autocast's dtype where autocast
    is on (as the eager path's products run in it; the cell state stays float32 there too)."""
    device = tensors[0].device
    if device.type in ("cpu", "cuda") and torch.is_autocast_enabled(device.type):
        dtype = torch.get_autocast_dtype(device.type)
        tensors = [t.to(dtype) if t.is_floating_point() else t for t in tensors]
    return _OPS[name][0](list(tensors), [float(c) for c in consts])


def _define_kept(name: str, forward: Callable, fake: Callable, backward: Callable) -> None:
    """Register ``elmo::name``, whose forward returns its output and what its backward needs (kept: the recurrences'
    steps, the highway layers' gates), with ``backward(grad, tensors, kept, consts)`` as its gradient, and
    ``call(name, ...)`` as its output alone."""
    tags = (torch.Tag.needs_contiguous_strides,)
    forward_op = torch.library.custom_op(f"{NAMESPACE}::{name}", forward, mutates_args=(), tags=tags)
    forward_op.register_fake(fake)

    def backward_function(grad: Tensor, tensors: list[Tensor], kept: list[Tensor], consts: list[float]) -> list[Tensor]:
        return backward(grad, list(tensors), list(kept), list(consts))

    backward_op = torch.library.custom_op(
        f"{NAMESPACE}::{name}_backward", backward_function, mutates_args=(), tags=tags
    )
    backward_op.register_fake(lambda grad, tensors, kept, consts: [t.new_empty(t.shape) for t in tensors])

    def setup_context(ctx, inputs, output):
        tensors, consts = inputs
        ctx.save_for_backward(*tensors, *output[1:])
        ctx.inputs, ctx.consts = len(tensors), consts

    def formula(ctx, grad, *unused):
        tensors, kept = ctx.saved_tensors[: ctx.inputs], ctx.saved_tensors[ctx.inputs :]
        grads = backward_op(grad.contiguous(), list(tensors), list(kept), ctx.consts)
        grads = [g if t.is_floating_point() else None for g, t in zip(grads, tensors, strict=True)]
        return grads, (None if ctx.consts else [])  # as [`_define`]'s formula

    forward_op.register_autograd(formula, setup_context=setup_context)
    _OPS[name] = (lambda tensors, consts: forward_op(tensors, consts)[0], forward)


def _clip(value: float) -> float | None:
    return None if math.isnan(value) else value


def _setting(value: float | None) -> float:
    return math.nan if value is None else float(value)


# --------------------------------------------------------------------------------------- character encoder

# The character encoder class whose ``forward`` is ``elmo::token_layer``'s (``ElmoCharacterEncoder``), given by
# modeling_elmo.py ([`use_char_encoder`]), and its empty copies on the meta device, one per structure.
_CHAR_ENCODER: list[type[nn.Module]] = []
_ENCODER_VIEWS: dict[tuple, nn.Module] = {}


def use_char_encoder(encoder_class: type[nn.Module]) -> None:
    """Name the class (``ElmoCharacterEncoder``) whose ``forward`` the token-layer operator runs."""
    _CHAR_ENCODER[:] = [encoder_class]


def char_encoder_consts(cnn: nn.Module) -> list[float]:
    """The settings ``elmo::token_layer`` takes from an ``ElmoCharacterEncoder`` (its weights are the tensors):
    the number of convolutions and of highway layers, the activation, the character vocabulary, a word input."""
    return [
        float(len(cnn.convolutions)),
        float(len(cnn.highways)),
        float(cnn.activation is torch.tanh),
        float(cnn.padding_id != PADDING_CHAR + 1),  # ELMoForManyLangs' vocabulary pads with another id
        float(cnn.word_input is not None),
    ]


def _encoder_view(weights: Sequence[Tensor], consts: Sequence[float]) -> tuple[nn.Module, dict[str, Tensor]]:
    """An ``ElmoCharacterEncoder`` of the weights' structure on the meta device (no memory), and the weights by its
    parameter names, for ``torch.func.functional_call``."""
    (encoder_class,) = _CHAR_ENCODER
    key = (*(tuple(w.shape) for w in weights), *consts)
    if key not in _ENCODER_VIEWS:
        n_convolutions, n_highway = int(consts[0]), int(consts[1])
        embedding, convolutions = weights[0], weights[1 : 1 + 2 * n_convolutions : 2]
        projection = weights[1 + 2 * n_convolutions + 4 * n_highway]
        config = SimpleNamespace(
            n_characters=embedding.shape[0],
            char_embedding_dim=embedding.shape[1],
            char_cnn_filters=[[w.shape[-1], w.shape[0]] for w in convolutions],
            n_filters=sum(w.shape[0] for w in convolutions),
            char_cnn_activation="tanh" if consts[2] else "relu",
            n_highway=n_highway,
            projection_dim=projection.shape[0],
            char_vocabulary="manylangs" if consts[3] else "elmo",
            word_vocab_size=weights[-2].shape[0] if consts[4] else 0,
            word_embedding_dim=weights[-2].shape[1] if consts[4] else 0,
        )
        with torch.device("meta"):
            _ENCODER_VIEWS[key] = encoder_class(config)
    view = _ENCODER_VIEWS[key]
    return view, dict(zip((name for name, _ in view.named_parameters()), weights, strict=True))


def _distinct_words(ids: Tensor, steps: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """``ids (B, T, C)`` of ``steps (B,)`` tokens each -> ``present (B, T)`` bool, the distinct tokens ``(U, C)`` and
    where each present token is among them, ``(number present,)``."""
    present = torch.arange(ids.shape[1], device=ids.device) < steps.unsqueeze(1)
    unique, inverse = torch.unique(ids[present], dim=0, return_inverse=True)
    return present, unique, inverse


def _token_layer(tensors: list[Tensor], consts: list[float]) -> Tensor:
    """Layer 0 of the biLM's tokens, as the eager path computes it (each distinct word once, the convolutions up to
    the longest word): ``ids (B, T, C)`` (``C + 1`` with a word input) of ``steps (B,)`` tokens each (``<S>``, the
    words, ``</S>``), then the encoder's weights -> ``(B, T, P)``, zero past each row's steps. At inference; where
    gradients are wanted, ``elmo::token_layer_train`` runs instead (``graph_path_elmo.py``)."""
    ids, steps, *weights = tensors
    view, named = _encoder_view(weights, consts)
    projection = named["projection.weight"]
    tokens = projection.new_zeros(*ids.shape[:2], projection.shape[0])
    present, unique, inverse = _distinct_words(ids, steps)
    if unique.shape[0] == 0:
        return tokens
    embedded = torch.func.functional_call(view, named, (unique,))
    return tokens.to(embedded.dtype).index_put((present,), embedded[inverse])


def _token_layer_fake(tensors: list[Tensor], consts: list[float]) -> Tensor:
    ids, projection = tensors[0], tensors[3 + 2 * int(consts[0]) + 4 * int(consts[1])]
    return projection.new_empty(*ids.shape[:2], projection.shape[0])


_define("token_layer", _token_layer, _token_layer_fake, differentiable=False)


# ``elmo::token_layer_train``: ``elmo::token_layer`` (same arguments, same output first) where gradients are wanted.
# It also keeps, per distinct word, each highway layer's input, carry gate and transform, and the projection's input
# (``(3 n_highway + 1, B * T, F)``: room for every token, the first U rows the distinct words'), so that its
# backward differentiates the highway layers and the projection directly; only the character CNN's filters
# (embedding, convolutions, max, activation) run again, under ``torch.func.vjp``: their forward is about a third of
# the encoder's (measured at the small size), the highway layers' most of the rest.


class _Filters(nn.Module):
    """``ElmoCharacterEncoder.filters`` as a module's forward, so that ``torch.func.functional_call`` gives it the
    weights: ``char_ids (N, C)`` -> ``(N, n_filters)``, ``block_words`` words at a time as the encoder's forward."""

    def __init__(self, encoder: nn.Module):
        super().__init__()
        self.encoder = encoder

    def forward(self, char_ids: Tensor) -> Tensor:
        encoder = self.encoder
        blocks = char_ids.split(encoder.block_words) if char_ids.shape[0] else [char_ids]
        return torch.cat([encoder.filters(b, b.ne(encoder.padding_id).sum(dim=-1)) for b in blocks])


def _filter_weights(named: dict[str, Tensor]) -> dict[str, Tensor]:
    """The filters' weights (character embedding, convolutions) by their names in [`_Filters`]."""
    prefixes = ("char_embedding.", "convolutions.")
    return {"encoder." + name: w for name, w in named.items() if name.startswith(prefixes)}


def _word_input_weights(named: dict[str, Tensor]) -> dict[str, Tensor]:
    """The word input's weights by their names in ``ElmoWordInput``."""
    return {name.removeprefix("word_input."): w for name, w in named.items() if name.startswith("word_input.")}


def _token_layer_train(tensors: list[Tensor], consts: list[float]) -> tuple[Tensor, Tensor]:
    ids, steps, *weights = tensors
    with _no_autocast(ids.device):
        view, named = _encoder_view(weights, consts)
        projection = named["projection.weight"]
        n_highway, rows = int(consts[1]), ids.shape[0] * ids.shape[1]
        kept = projection.new_zeros(3 * n_highway + 1, rows, projection.shape[1])
        tokens = projection.new_zeros(*ids.shape[:2], projection.shape[0])
        present, unique, inverse = _distinct_words(ids, steps)
        chars = unique[:, :-1] if consts[4] else unique  # a word input's id comes last
        x = torch.func.functional_call(_Filters(view), _filter_weights(named), (chars,))  # (U, F)
        count = x.shape[0]
        for k in range(n_highway):  # ElmoHighway.forward, keeping its input, gate and transform
            carry, transform = f"highways.{k}.carry.", f"highways.{k}.transform."
            gate = torch.sigmoid(F.linear(x, named[carry + "weight"], named[carry + "bias"]))
            transformed = F.relu(F.linear(x, named[transform + "weight"], named[transform + "bias"]))
            kept[3 * k, :count], kept[3 * k + 1, :count], kept[3 * k + 2, :count] = x, gate, transformed
            x = gate * transformed + (1.0 - gate) * x
        kept[3 * n_highway, :count] = x
        embedded = F.linear(x, projection, named["projection.bias"])
        if consts[4]:
            word_input = torch.func.functional_call(view.word_input, _word_input_weights(named), (unique[:, -1],))
            embedded = embedded + word_input
        return tokens.index_put((present,), embedded[inverse]), kept


def _token_layer_train_fake(tensors: list[Tensor], consts: list[float]) -> tuple[Tensor, Tensor]:
    ids, projection = tensors[0], tensors[3 + 2 * int(consts[0]) + 4 * int(consts[1])]
    rows = ids.shape[0] * ids.shape[1]
    return (
        projection.new_empty(*ids.shape[:2], projection.shape[0]),
        projection.new_empty(3 * int(consts[1]) + 1, rows, projection.shape[1]),
    )


def _token_layer_train_backward(
    grad: Tensor, tensors: list[Tensor], kept: list[Tensor], consts: list[float]
) -> list[Tensor]:
    """The gradients of ``elmo::token_layer_train``'s inputs from its output's ``grad (B, T, P)``: through the
    projection and the highway layers with what the forward kept, ``y = t * r + (1 - t) * x`` with ``t =
    sigmoid(x W_carry + b)`` and ``r = relu(x W_transform + b)``; through the word input and the filters by
    ``torch.func.vjp`` of their forward."""
    ids, steps, *weights = tensors
    (kept,) = kept
    with _no_autocast(grad.device):
        view, named = _encoder_view(weights, consts)
        grads = {name: torch.zeros_like(w) for name, w in named.items()}
        present, unique, inverse = _distinct_words(ids, steps)
        count, n_highway = unique.shape[0], int(consts[1])
        d_y = grad.new_zeros(count, grad.shape[-1]).index_add_(0, inverse, grad[present])  # (U, P): per distinct word
        x = kept[3 * n_highway, :count]
        grads["projection.weight"], grads["projection.bias"] = d_y.t() @ x, d_y.sum(0)
        d_x = d_y @ named["projection.weight"]  # (U, F)
        if consts[4]:
            word_ids = unique[:, -1]
            _, pull_back = torch.func.vjp(
                lambda w: torch.func.functional_call(view.word_input, w, (word_ids,)), _word_input_weights(named)
            )
            grads |= {"word_input." + name: g for name, g in pull_back(d_y)[0].items()}
        for k in range(n_highway - 1, -1, -1):
            x, gate, transformed = kept[3 * k : 3 * k + 3, :count]
            d_carry = d_x * (transformed - x) * gate * (1.0 - gate)  # through the gate's sigmoid
            d_transform = d_x * gate * (transformed > 0).to(d_x.dtype)  # through the relu
            carry, transform = f"highways.{k}.carry.", f"highways.{k}.transform."
            grads[carry + "weight"], grads[carry + "bias"] = d_carry.t() @ x, d_carry.sum(0)
            grads[transform + "weight"], grads[transform + "bias"] = d_transform.t() @ x, d_transform.sum(0)
            d_x = d_x * (1.0 - gate) + d_carry @ named[carry + "weight"] + d_transform @ named[transform + "weight"]
        chars = unique[:, :-1] if consts[4] else unique
        filters = _Filters(view)
        _, pull_back = torch.func.vjp(
            lambda w: torch.func.functional_call(filters, w, (chars,)), _filter_weights(named)
        )
        grads |= {name.removeprefix("encoder."): g for name, g in pull_back(d_x)[0].items()}
        return [torch.zeros_like(ids), torch.zeros_like(steps), *(grads[name].contiguous() for name in named)]


_define_kept("token_layer_train", _token_layer_train, _token_layer_train_fake, _token_layer_train_backward)


# ------------------------------------------------------------------------------------------------ biLM layer


def bilstm_layer_consts(layer: nn.Module, prepack: bool, first: bool) -> list[float]:
    """The settings ``elmo::bilstm_layer`` takes from an ``ElmoBiLstmLayer``; ``prepack``: whether oneDNN's
    prepacked products may serve (the eager path's choice: at inference); ``first``: the inputs are the tokens."""
    return [
        _setting(layer.cell_clip),
        _setting(layer.proj_clip),
        float(prepack and layer.use_prepacked_weights),
        float(layer.prepack_min_elements),
        float(layer.prepack_min_rows),
        float(layer.residual),
        float(first),
    ]


def _layer_view(weights: Sequence[Tensor], consts: Sequence[float], native: bool = False) -> nn.Module:
    """An ``ElmoBiLstmLayer`` over the given weights (no copy, no new parameters), for its recurrence; ``native``:
    its steps in C++ (``native_steps_elmo.py``)."""
    (layer_class,) = _BILSTM_LAYER
    input_kernel, state_kernel, bias, projection = weights
    if native:
        layer_class = _native_layer_class(layer_class)
    view = layer_class.__new__(layer_class)
    nn.Module.__init__(view)
    view.input_kernel, view.state_kernel, view.bias, view.projection = input_kernel, state_kernel, bias, projection
    view.projection_dim, view.lstm_dim = projection.shape[-1], projection.shape[-2]
    view.cell_clip, view.proj_clip, view.residual = _clip(consts[0]), _clip(consts[1]), False
    view.use_prepacked_weights = bool(consts[2])
    view.prepack_min_elements, view.prepack_min_rows = int(consts[3]), int(consts[4])
    view.prepack_key = input_kernel  # the prepacked copies' cache key (the view itself lives for one call)
    return view


_NATIVE_CLASSES: dict[type[nn.Module], type[nn.Module]] = {}


def _native_layer_class(layer_class: type[nn.Module]) -> type[nn.Module]:
    """``layer_class`` with its ``forward`` (all the steps of both directions) in the C++ step loop."""
    if layer_class not in _NATIVE_CLASSES:
        _NATIVE_CLASSES[layer_class] = type(
            f"Native{layer_class.__name__}", (layer_class,), {"forward": native_forward}
        )
    return _NATIVE_CLASSES[layer_class]


def _both_inputs(inputs: Tensor, lengths: Tensor, consts: list[float]) -> Tensor:
    """The operator's ``inputs`` as ``(2, B, T, P)``: the directions' rows, or with ``consts[6]`` the first layer's
    tokens ``(B, T, P)`` and their reversal within each row's length."""
    if consts[6]:
        inputs = torch.stack([inputs, reverse_padded(inputs, lengths)])
    return inputs.view(2, lengths.shape[0], inputs.shape[-2], inputs.shape[-1])


def reads_values(device: torch.device) -> bool:
    """Whether the compiled path reads tensor values into Python on ``device`` (the CPU: the token layer's distinct
    words, the recurrences' packed steps), or reads none (CUDA: a CUDA graph can capture it; inductor compiles the
    character CNN, the recurrences run every step of the padded batch). The one place the layout is chosen: tests
    run the CUDA layout on the CPU by patching it."""
    return device.type == "cpu"


class _Steps:
    """Where the valid steps of a ``(2, B, T, ...)`` batch go in the time-major packed layout of the recurrences
    (``ElmoBiLm.forward``'s: rows longest first, step 0 of every row, then step 1 of the rows still running, ...)
    on the CPU. Off the CPU ([`reads_values`]) every step of every row, ``batch_sizes`` ``[B] * T``: the steps
    past a row's end come after its real ones and never reach them.

    ``pack``/``unpack`` move a part per direction; the ``*_read_both`` methods serve a layer whose two directions
    read one ``(B, T, F)`` input, the backward one reversed within each row's length (a task BiLSTM layer)."""

    def __init__(self, lengths: Tensor, steps: int):
        batch = lengths.shape[0]
        self.batch, self.steps, self.lengths = batch, steps, lengths
        self.live = torch.arange(steps, device=lengths.device) < lengths.unsqueeze(1)  # (B, T)
        # Packed layout only: where each packed step comes from in (B * T), read forward and reversed.
        self.index: Tensor | None = None
        self.reversed_index: Tensor | None = None
        if not reads_values(lengths.device):
            self.batch_sizes = [batch] * steps
            return
        _, order = lengths.sort(descending=True)
        valid = self.live.index_select(0, order)
        step_index, row_index = valid.t().nonzero(as_tuple=True)
        row = order[row_index]
        self.index = row * steps + step_index
        self.reversed_index = row * steps + lengths[row] - 1 - step_index
        self.batch_sizes = [n for n in valid.sum(dim=0).tolist() if n > 0]

    def pack(self, x: Tensor) -> Tensor:
        """``(2, B, T, F)`` -> ``(2, N, F)``."""
        width = x.shape[-1]
        if self.index is None:
            return x.transpose(1, 2).reshape(2, self.steps * self.batch, width)
        return x.reshape(2, self.batch * self.steps, width).index_select(1, self.index)

    def unpack(self, y: Tensor) -> Tensor:
        """``(2, N, F)`` -> ``(2, B, T, F)``, zero past each row's length."""
        width = y.shape[-1]
        if self.index is None:
            return y.view(2, self.steps, self.batch, width).transpose(1, 2) * self.live.unsqueeze(-1).to(y.dtype)
        full = y.new_zeros(2, self.batch * self.steps, width).index_copy_(1, self.index, y)
        return full.view(2, self.batch, self.steps, width)

    def pack_read_both(self, x: Tensor) -> Tensor:
        """``(B, T, F)`` -> ``(2, N, F)``: the forward direction's steps, and the backward one's reversed."""
        if self.index is None:
            return self.pack(torch.stack([x, reverse_padded(x, self.lengths)]))
        flat = x.reshape(self.batch * self.steps, x.shape[-1])
        packed = x.new_empty(2, self.index.shape[0], x.shape[-1])
        for k, index in enumerate((self.index, self.reversed_index)):
            torch.index_select(flat, 0, index, out=packed[k])
        return packed

    def unpack_read_both(self, y: Tensor) -> Tensor:
        """``(2, N, F)`` -> ``(B, T, F)``, the two directions' parts summed at the positions they read (the gradient
        of [`pack_read_both`]); zero past each row's length."""
        if self.index is None:
            both = self.unpack(y)
            return both[0] + reverse_padded(both[1], self.lengths)
        full = y.new_zeros(self.batch * self.steps, y.shape[-1])
        full.index_add_(0, self.index, y[0]).index_add_(0, self.reversed_index, y[1])
        return full.view(self.batch, self.steps, y.shape[-1])

    def unpack_side_by_side(self, y: Tensor) -> Tensor:
        """``(2, N, H)`` -> ``(B, T, 2H)``: the forward direction's output, then the backward one's, both in reading
        order; zero past each row's length."""
        if self.index is None:
            both = self.unpack(y)
            return torch.cat([both[0], reverse_padded(both[1], self.lengths)], dim=-1)
        hidden = y.shape[-1]
        full = y.new_zeros(self.batch * self.steps, 2, hidden)
        for k, index in enumerate((self.index, self.reversed_index)):
            full[:, k].index_copy_(0, index, y[k])
        return full.view(self.batch, self.steps, 2 * hidden)

    def pack_side_by_side(self, g: Tensor) -> Tensor:
        """``(B, T, 2H)`` -> ``(2, N, H)``: the gradient of [`unpack_side_by_side`]."""
        hidden = g.shape[-1] // 2
        if self.index is None:
            both = torch.stack([g[..., :hidden], reverse_padded(g[..., hidden:], self.lengths)])
            return self.pack(both * self.live.unsqueeze(-1).to(g.dtype))
        flat = g.reshape(self.batch * self.steps, 2, hidden)
        packed = g.new_empty(2, self.index.shape[0], hidden)
        for k, index in enumerate((self.index, self.reversed_index)):
            torch.index_select(flat[:, k], 0, index, out=packed[k])
        return packed


def _bilstm_layer(tensors: list[Tensor], consts: list[float], native: bool = False) -> Tensor:
    """One biLM layer from zero states, both directions: ``inputs (2B, T, P)``, the forward direction's rows then
    the backward one's (reversed within each row's length), or with ``consts[6]`` the first layer's tokens
    ``(B, T, P)`` in reading order (the operator reverses them); ``lengths (B,)`` steps per row; the layer's four
    weights -> the outputs ``(2B, T, P)`` in the two directions' layout, the residual added, zero past each row's
    length.

    Three dimensions and the previous operator's output or the tokens as inputs, not a stack made in the graph:
    inductor (torch 2.13) lays such 4-d tensors out channels-last or with symbolic strides it then fails to order
    when they are saved for the backward ("cannot determine truth value of Relational", stride assertions)."""
    inputs, lengths, *weights = tensors
    inputs = _both_inputs(inputs, lengths, consts)
    output = _bilstm_directions(inputs, lengths, weights, consts, native)
    output = output + inputs if consts[5] else output
    return output.reshape(2 * lengths.shape[0], inputs.shape[2], output.shape[-1])


def _bilstm_directions(
    inputs: Tensor, lengths: Tensor, weights: list[Tensor], consts: list[float], native: bool
) -> Tensor:
    # The C++ steps: on the CPU, for the dtypes the kernel takes.
    native = native and inputs.device.type == "cpu" and inputs.dtype in (torch.float32, torch.bfloat16)
    layer = _layer_view(weights, consts, native=native and native_steps_available())
    _, batch, steps, width = inputs.shape
    h = inputs.new_zeros(2, batch, width)
    c = inputs.new_zeros(2, batch, layer.lstm_dim, dtype=layer.state_dtype(weights[2].dtype))
    if batch == 0:
        return inputs.new_zeros(2, 0, steps, width)
    layout = _Steps(lengths, steps)
    output, _, _ = layer.forward(layout.pack(inputs), h, c, layout.batch_sizes)
    return layout.unpack(output)


def _bilstm_layer_fake(tensors: list[Tensor], consts: list[float]) -> Tensor:
    inputs, lengths, projection = tensors[0], tensors[1], tensors[-1]
    return inputs.new_empty(2 * lengths.shape[0], inputs.shape[1], projection.shape[-1], dtype=projection.dtype)


# At inference; where gradients are wanted, ``elmo::bilstm_layer_train`` runs instead (graph_path_elmo.op_layer).
_define(
    "bilstm_layer",
    lambda tensors, consts: _bilstm_layer(tensors, consts, native=True),
    _bilstm_layer_fake,
    differentiable=False,
)


# ------------------------------------------------------------------------------------ biLM layer, in training

# ``elmo::bilstm_layer_train``: ``elmo::bilstm_layer`` (same arguments, same output first) for a layer whose gradients
# are wanted, which also returns what its steps computed (``bptt_elmo.py``), so that its backward walks the steps
# in reverse instead of running them again: the activations ``(2, B*T, 4D)``, ``c_raw (2, B*T, D)`` and
# ``p_raw (2, B*T, P)``, their first ``N`` rows the packed steps' (room for every step: the fake must know the
# shape without reading the lengths). In C++ on the CPU where the library is built (``native_steps_elmo.py``), else
# the same steps in torch operations.


def _native_bptt(tensor: Tensor) -> bool:
    return tensor.device.type == "cpu" and tensor.dtype in (torch.float32, torch.bfloat16) and native_steps_available()


def _bilstm_layer_train(tensors: list[Tensor], consts: list[float]) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    inputs, lengths, input_kernel, state_kernel, bias, projection = tensors
    with _no_autocast(inputs.device):
        both = _both_inputs(inputs, lengths, consts)
        _, batch, steps, width = both.shape
        layout = _Steps(lengths, steps)
        packed = layout.pack(both)
        total, gate_bias = packed.shape[1], _layer_view(tensors[2:], consts).gate_bias()
        gates = packed.new_empty(2, batch * steps, input_kernel.shape[-1])
        for k in range(2):  # each direction's rows are contiguous in the room for all steps
            torch.addmm(gate_bias[k], packed[k], input_kernel[k], out=gates[k, :total])
        run = native_steps_saving if _native_bptt(gates) else steps_saving
        clips = _clip(consts[0]), _clip(consts[1])
        output, c_raw, p_raw = run(gates, layout.batch_sizes, state_kernel, projection, *clips)
        output = layout.unpack(output)
        output = output + both if consts[5] else output
        return output.reshape(2 * batch, steps, width).contiguous(), gates, c_raw, p_raw


def _bilstm_layer_train_fake(tensors: list[Tensor], consts: list[float]) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    inputs, lengths, input_kernel, projection = tensors[0], tensors[1], tensors[2], tensors[-1]
    batch, steps = lengths.shape[0], inputs.shape[1]
    d, p = projection.shape[-2], projection.shape[-1]
    rows = batch * steps
    return (
        inputs.new_empty(2 * batch, steps, p, dtype=projection.dtype),
        inputs.new_empty(2, rows, 4 * d, dtype=input_kernel.dtype),
        inputs.new_empty(2, rows, d, dtype=state_dtype(input_kernel.dtype)),
        inputs.new_empty(2, rows, p, dtype=projection.dtype),
    )


def _bilstm_layer_train_backward(
    grad: Tensor, tensors: list[Tensor], kept: list[Tensor], consts: list[float]
) -> list[Tensor]:
    """The gradients of ``elmo::bilstm_layer_train``'s inputs from its output's ``grad (2B, T, P)``."""
    inputs, lengths, input_kernel, state_kernel, bias, projection = tensors
    activations, c_raw, p_raw = kept
    with _no_autocast(grad.device):
        batch, steps, width = lengths.shape[0], inputs.shape[-2], inputs.shape[-1]
        layout = _Steps(lengths, steps)
        grad = grad.view(2, batch, steps, width)
        d_output = layout.pack(grad * layout.live.unsqueeze(-1).to(grad.dtype))  # the output is zero past the ends
        run = native_steps_backward if _native_bptt(activations) else steps_backward
        d_gates, d_state_kernel, d_projection = run(
            d_output,
            activations,
            c_raw,
            p_raw,
            layout.batch_sizes,
            state_kernel,
            projection,
            _clip(consts[0]),
            _clip(consts[1]),
        )
        packed = layout.pack_read_both(inputs) if consts[6] else layout.pack(inputs.view(2, batch, steps, width))
        d_input_kernel = torch.bmm(packed.transpose(1, 2), d_gates)
        d_packed = torch.bmm(d_gates, input_kernel.transpose(1, 2))
        if consts[6]:  # the tokens fed both directions, the backward one reversed
            d_inputs = layout.unpack_read_both(d_packed)
            if consts[5]:
                d_inputs = d_inputs + grad[0] + reverse_padded(grad[1], lengths)
        else:
            d_inputs = layout.unpack(d_packed) + grad if consts[5] else layout.unpack(d_packed)
        d_inputs = d_inputs.reshape(inputs.shape)
        d_bias = d_gates.sum(1)
        return [d_inputs.contiguous(), torch.zeros_like(lengths), d_input_kernel, d_state_kernel, d_bias, d_projection]


_define_kept("bilstm_layer_train", _bilstm_layer_train, _bilstm_layer_train_fake, _bilstm_layer_train_backward)


# ------------------------------------------------------------------------------------------- task BiLSTM layer


def _task_lstm_layer(tensors: list[Tensor], consts: list[float]) -> Tensor:
    """One layer of a task BiLSTM (``nn.LSTM``'s weights and gates), at inference: ``features (B, W, F)``,
    ``lengths (B,)``, then ``W_ih, W_hh, b_ih, b_hh`` of the forward and of the backward direction -> ``(B, W, 2H)``,
    zero past each row's length (an empty row runs one step at its first position, as in eager mode). Where
    gradients are wanted, ``elmo::task_lstm_layer_train`` runs instead ([`task_lstm`])."""
    features, lengths, *weights = tensors
    batch, words, _ = features.shape
    hidden = weights[1].shape[-1]
    if words == 0 or batch == 0:
        return features.new_zeros(batch, words, 2 * hidden)
    lengths = lengths.clamp(min=1)
    if reads_values(features.device):  # the eager path's packed sequences
        state = features.new_zeros(2, batch, hidden)
        packed = pack_padded_sequence(features, lengths.cpu(), batch_first=True, enforce_sorted=False)
        data, _, _ = torch.lstm(packed.data, packed.batch_sizes, (state, state), weights, True, 1, 0.0, False, True)
        output = PackedSequence(data, packed.batch_sizes, packed.sorted_indices, packed.unsorted_indices)
        return pad_packed_sequence(output, batch_first=True, total_length=words)[0]
    return _both_directions(features, lengths, weights, _lstm_direction)


def _both_directions(features: Tensor, lengths: Tensor, weights: list[Tensor], direction: Callable) -> Tensor:
    """Both directions on the padded batch, no value read into Python: ``direction(x (B, W, F), W_ih, W_hh, b_ih,
    b_hh) -> (B, W, H)`` reads left to right, the backward direction each row reversed within its length (its steps
    past the end come after its real ones and never reach them) -> ``(B, W, 2H)``, zero past each row's length."""
    runs = [
        direction(x, *weights[4 * k : 4 * k + 4]) for k, x in enumerate((features, reverse_padded(features, lengths)))
    ]
    output = torch.cat([runs[0], reverse_padded(runs[1], lengths)], dim=-1)
    live = torch.arange(features.shape[1], device=features.device) < lengths.unsqueeze(1)
    return output * live.unsqueeze(-1).to(output.dtype)


def _lstm_direction(x: Tensor, *weights: Tensor) -> Tensor:
    zero = x.new_zeros(1, x.shape[0], weights[1].shape[-1])
    return torch.lstm(x, (zero, zero), list(weights), True, 1, 0.0, False, False, True)[0]


def _task_lstm_layer_fake(tensors: list[Tensor], consts: list[float]) -> Tensor:
    features, w_hh = tensors[0], tensors[3]
    return features.new_empty(*features.shape[:-1], 2 * w_hh.shape[-1])


_define("task_lstm_layer", _task_lstm_layer, _task_lstm_layer_fake, differentiable=False)


# ``elmo::task_lstm_layer_train``: ``elmo::task_lstm_layer`` (same arguments, same output first) for a layer whose
# gradients are wanted, on the steps of ``bptt_elmo.py`` (the biLM's cell without a projection or clips, in
# ``nn.LSTM``'s gate order: its weights serve as they are), which also returns what they kept, as
# ``elmo::bilstm_layer_train``.


def _task_state_kernel(weights: list[Tensor]) -> Tensor:
    """``W_hh`` of both directions (``(4H, H)`` each) as the steps' ``state_kernel (2, H, 4H)`` (a transposed view)."""
    return torch.stack(weights[1::4]).transpose(1, 2)


def _task_lstm_layer_train(tensors: list[Tensor], consts: list[float]) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    features, lengths, *weights = tensors
    with _no_autocast(features.device):
        batch, words, _ = features.shape
        lengths = lengths.clamp(min=1)  # an empty row runs one step at its first position, as in eager mode
        layout = _Steps(lengths, words)
        packed = layout.pack_read_both(features)  # (2, N, F)
        gates = packed.new_empty(2, batch * words, weights[0].shape[0])
        for k in range(2):
            w_ih, _, b_ih, b_hh = weights[4 * k : 4 * k + 4]
            torch.addmm(b_ih + b_hh, packed[k], w_ih.t(), out=gates[k, : packed.shape[1]])
        run = native_steps_saving if _native_bptt(gates) else steps_saving
        output, c_raw, p_raw = run(gates, layout.batch_sizes, _task_state_kernel(weights), None, None, None, True)
        output = layout.unpack_side_by_side(output)
        return output.contiguous(), gates, c_raw, p_raw


def _task_lstm_layer_train_fake(tensors: list[Tensor], consts: list[float]) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    features, w_hh = tensors[0], tensors[3]
    hidden, rows = w_hh.shape[-1], features.shape[0] * features.shape[1]
    return (
        features.new_empty(*features.shape[:-1], 2 * hidden),
        features.new_empty(2, rows, 4 * hidden),
        features.new_empty(2, rows, hidden, dtype=state_dtype(features.dtype)),
        features.new_empty(2, rows, hidden),
    )


def _task_lstm_layer_train_backward(
    grad: Tensor, tensors: list[Tensor], kept: list[Tensor], consts: list[float]
) -> list[Tensor]:
    """The gradients of ``elmo::task_lstm_layer_train``'s inputs from its output's ``grad (B, W, 2H)``."""
    features, lengths, *weights = tensors
    activations, c_raw, p_raw = kept
    with _no_autocast(grad.device):
        layout = _Steps(lengths.clamp(min=1), features.shape[1])
        run = native_steps_backward if _native_bptt(activations) else steps_backward
        d_gates, d_state_kernel, _ = run(
            *(layout.pack_side_by_side(grad), activations, c_raw, p_raw, layout.batch_sizes),
            *(_task_state_kernel(weights), None, None, None, True),
        )
        packed = layout.pack_read_both(features)
        d_packed, d_weights = torch.empty_like(packed), []
        for k in range(2):  # nn.LSTM's layouts: W_ih (4H, F), W_hh (4H, H)
            torch.mm(d_gates[k], weights[4 * k], out=d_packed[k])
            d_bias = d_gates[k].sum(0)
            d_weights += [d_gates[k].t() @ packed[k], d_state_kernel[k].t().contiguous(), d_bias, d_bias.clone()]
        d_features = layout.unpack_read_both(d_packed)
        return [d_features.contiguous(), torch.zeros_like(tensors[1]), *d_weights]


_define_kept(
    "task_lstm_layer_train", _task_lstm_layer_train, _task_lstm_layer_train_fake, _task_lstm_layer_train_backward
)


def task_lstm(lstm: nn.Module, features: Tensor, lengths: Tensor) -> Tensor:
    """``ElmoTaskLstm``'s forward as one operator call per layer (the training operator where gradients are wanted),
    the module's dropout between the layers, in the graph: ``(B, W, F)``, ``(B,)`` -> ``(B, W, 2H)``."""
    x = features
    for k in range(lstm.num_layers):
        if k > 0:
            x = F.dropout(x, lstm.dropout, lstm.training)
        weights = [
            getattr(lstm, f"{kind}_l{k}{direction}")
            for direction in ("", "_reverse")
            for kind in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
        ]
        training = torch.is_grad_enabled() and (x.requires_grad or any(w.requires_grad for w in weights))
        x = call("task_lstm_layer_train" if training else "task_lstm_layer", [x, lengths, *weights])
    return x


# ------------------------------------------------------------------------------------------------------ CRF


def crf_alphas(emissions: Tensor, mask: Tensor, transitions: Tensor, start: Tensor, reduce, steps: int) -> Tensor:
    """The CRF's forward recursion over the first ``steps`` positions: ``alpha (B, K)`` after the last, carried
    unchanged past each row's end (``mask (B, W)`` right-padded), with ``reduce`` over the previous tag. The steps
    from ``unbind`` (one stack in the backward, not a zero tensor of all emissions per step)."""
    emission, real = emissions.unbind(1), mask.unbind(1)
    alpha = start.unsqueeze(0) + emission[0]
    for t in range(1, steps):
        step = reduce(alpha.unsqueeze(2) + transitions, dim=1) + emission[t]
        alpha = torch.where(real[t].unsqueeze(1), step, alpha)
    return alpha


def _crf_log_partition(tensors: list[Tensor], consts: list[float]) -> Tensor:
    """``log Z (B,)`` from ``emissions (B, W, K)`` (``W >= 1``), ``mask (B, W)`` bool and the effective
    ``transitions (K, K)``, ``start``, ``end (K,)``; 0 for an empty row. All ``W`` steps (masked ones carry alpha)."""
    emissions, mask, transitions, start, end = tensors
    alpha = crf_alphas(emissions, mask, transitions, start, torch.logsumexp, emissions.shape[1])
    log_z = torch.logsumexp(alpha + end.unsqueeze(0), dim=1)
    return torch.where(mask[:, 0], log_z, torch.zeros_like(log_z))


_define("crf_log_partition", _crf_log_partition, lambda tensors, consts: tensors[0].new_empty(tensors[0].shape[0]))


def _crf_through_each_tag(tensors: list[Tensor], consts: list[float]) -> Tensor:
    """Forward-backward: ``alpha + beta (B, W, K)`` per position and tag (arguments as [`_crf_log_partition`];
    ``consts[0]``: 1 for max-product, 0 for sum-product); values at masked positions are for the caller to zero."""
    emissions, mask, transitions, start, end = tensors
    reduce = torch.amax if consts[0] else torch.logsumexp
    batch, steps, num_tags = emissions.shape
    emission, real = emissions.unbind(1), mask.unbind(1)  # as in crf_alphas
    alphas = [start.unsqueeze(0) + emission[0]]
    for t in range(1, steps):
        alphas.append(reduce(alphas[-1].unsqueeze(2) + transitions, dim=1) + emission[t])
    final = end.unsqueeze(0).expand(batch, num_tags)
    betas = [final]
    for t in range(steps - 2, -1, -1):
        step = reduce(transitions.unsqueeze(0) + (emission[t + 1] + betas[-1]).unsqueeze(1), dim=2)
        betas.append(torch.where(real[t + 1].unsqueeze(1), step, final))
    return torch.stack(alphas, dim=1) + torch.stack(betas[::-1], dim=1)


_define("crf_through_each_tag", _crf_through_each_tag, lambda tensors, consts: torch.empty_like(tensors[0]))


__all__ = [
    "NAMESPACE",
    "bilstm_layer_consts",
    "call",
    "crf_alphas",
    "operator_namespace",
    "reads_values",
    "reverse_padded",
    "task_lstm",
    "use_bilstm_layer",
]
