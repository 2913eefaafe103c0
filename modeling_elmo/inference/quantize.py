"""Int8 inference: the biLM's matrix products with int8 weights and dynamically quantized int8 activations.

    from modeling_elmo import ElmoModel
    from modeling_elmo.inference.quantize import quantize_int8

    model = quantize_int8(ElmoModel.from_pretrained("elmo-original").eval())   # CPU, float32 model, in place
    tagger = quantize_int8(ElmoForTokenClassification.from_pretrained("my-tagger"))  # its biLM; the head stays

What is quantized: the products that hold nearly all of the work and of the weights, the LSTMs' input, recurrent
and projection products, and the highway and projection layers of the character encoder. Their weights are
stored as int8 with one scale per output column (per channel, symmetric); each call quantizes its input rows to
uint8 with a scale and zero point taken from the rows themselves (dynamic quantization), multiplies in int8 with
int32 accumulation, and gives float32 back. The cell state, the gate activations, the clips, the character
convolutions and the scalar mixes stay in float32.

The kernels are PyTorch's own (``torch.ops.quantized.linear_dynamic``, the backend of
``torch.ao.nn.quantized.dynamic.Linear``: FBGEMM on x86, which uses AVX-512 VNNI or AVX2), so nothing beyond torch
is needed. On a CPU without VNNI they still give the same results, more slowly. The model is for inference only
(no gradients) and on CPU only; ``save_pretrained`` refuses it, before writing anything (quantize again after
loading the float32 model).

A model with a head (a tagger, a classifier, the LM head) is quantized in its base biLM (``model.elmo``) only: the
head keeps its float32 weights and reads the biLM's float32 outputs.
"""

from __future__ import annotations

import functools
import warnings

import torch
from torch import nn

from ..fast_path_elmo import BOTH_DIRECTIONS, _stacked
from ..modeling_elmo import ElmoBiLstmLayer, ElmoModel, ElmoPreTrainedModel


def _quantize_weight(weight: torch.Tensor) -> torch.Tensor:
    """``weight (out, in)`` float to a per-output-channel symmetric qint8 tensor."""
    scales = weight.detach().abs().amax(dim=1).clamp(min=1e-12) / 127.0
    zero_points = torch.zeros(weight.shape[0], dtype=torch.long)
    with warnings.catch_warnings():  # torch marks quantized tensors for a future replacement; the ops are current
        warnings.simplefilter("ignore")
        return torch.quantize_per_channel(weight.detach().float(), scales.double(), zero_points, 0, torch.qint8)


def _pack(weight: torch.Tensor, bias: torch.Tensor | None = None):
    """Pack ``weight (out, in)`` (and ``bias (out,)``) for ``linear_dynamic``."""
    return torch.ops.quantized.linear_prepack(_quantize_weight(weight), None if bias is None else bias.detach().float())


@functools.cache
def needs_reduced_range() -> bool:
    """Whether this CPU's int8 kernel saturates full-range (8-bit) activations, so that they must be 7-bit.

    Without VNNI (or AMX-INT8), x86 kernels add pairs of ``uint8 * int8`` products in int16 (``vpmaddubsw``),
    which overflows for large activations and weights: PyTorch then reduces activations to 7 bits (its
    ``reduce_range``), at some cost in accuracy. Rather than guess from CPU flags (or from what the kernel
    library was told to use, e.g. ``FBGEMM_ENABLE_INSTRUCTIONS``), this asks the kernel: it multiplies ones by ones,
    whose product is exact unless the pairs saturate.
    """
    ones = torch.ones(64, 512)
    exact = torch.ops.quantized.linear_dynamic(ones, _pack(torch.ones(16, 512)), False)
    return not bool((exact - 512).abs().max() < 1.0)


def _linear(x: torch.Tensor, packed) -> torch.Tensor:
    """``x (n, in)`` float32 times the packed int8 weight: ``(n, out)`` float32 (activations quantized per call)."""
    return torch.ops.quantized.linear_dynamic(x, packed, needs_reduced_range())


class Int8Linear(nn.Module):
    """``nn.Linear`` with its product in int8 (per-channel weights, dynamic activations), float32 in and out."""

    holds_int8_weights = True  # packed outside the state dict: save_pretrained refuses the model

    def __init__(self, linear: nn.Linear):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self._packed = _pack(linear.weight, linear.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        return _linear(x.reshape(-1, shape[-1]).float(), self._packed).reshape(*shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8 weights per channel"


class Int8BiLstmLayer(ElmoBiLstmLayer):
    """An [`ElmoBiLstmLayer`] whose three products (input, recurrent, projection) run in int8; the recurrence,
    the float32 cell state and the clips are the float32 layer's own (``ElmoBiLstmLayer.forward``)."""

    holds_int8_weights = True
    use_prepacked_weights = False  # its products are int8 ones: the float32 CPU fast path does not apply

    def __init__(self, layer: ElmoBiLstmLayer):
        nn.Module.__init__(self)
        self.projection_dim, self.lstm_dim = layer.projection_dim, layer.lstm_dim
        self.cell_clip, self.proj_clip, self.residual = layer.cell_clip, layer.proj_clip, layer.residual
        self.bias = nn.Parameter(layer.bias.detach().float().clone(), requires_grad=False)
        # Per direction, weights as (out, in), the layout of linear_dynamic. The input product carries the gate bias
        # (B plus the forget bias), added inside the kernel instead of by a separate pass over all steps' gates.
        bias = layer.gate_bias().detach().float()
        self._input = [_pack(layer.input_kernel[k].t(), bias[k]) for k in range(2)]
        self._state = [_pack(layer.state_kernel[k].t()) for k in range(2)]
        self._projection = [_pack(layer.projection[k].t()) for k in range(2)]

    @staticmethod
    def _each(x: torch.Tensor, packed) -> torch.Tensor:
        """``x (G, n, in)`` through the ``G`` directions' packed weights: ``(G, n, out)`` float32."""
        return _stacked([_linear(part.float().contiguous(), weight) for part, weight in zip(x, packed, strict=True)])

    def input_gates(
        self, inputs: torch.Tensor, bias: torch.Tensor, directions: slice = BOTH_DIRECTIONS
    ) -> torch.Tensor:
        # ``bias`` is this layer's gate bias, packed with the input weights when the layer was quantized.
        return self._each(inputs, self._input[directions])

    def add_state_gates(
        self, input_gates: torch.Tensor, h: torch.Tensor, directions: slice = BOTH_DIRECTIONS
    ) -> torch.Tensor:
        return self._each(h, self._state[directions]).add_(input_gates)  # in place: no new (G, n, 4D) per step

    def project(self, memory: torch.Tensor, directions: slice = BOTH_DIRECTIONS) -> torch.Tensor:
        return self._each(memory, self._projection[directions])

    def runs_directions_apart(self, h: torch.Tensor) -> bool:
        return True  # each direction's int8 product is its own call

    def extra_repr(self) -> str:
        return f"P={self.projection_dim}, D={self.lstm_dim}, residual={self.residual}, int8 products"


def quantize_int8(model: ElmoPreTrainedModel) -> ElmoPreTrainedModel:
    """Quantize the biLM of ``model`` (float32, on CPU) in place for int8 inference, and return ``model``.

    ``model`` is an [`ElmoModel`], or a model with a head whose base model (``model.elmo``, its
    ``base_model_prefix``) is one, e.g. [`ElmoForTokenClassification`]. In the biLM, the LSTM layers become
    [`Int8BiLstmLayer`]s and the character encoder's highway and projection layers [`Int8Linear`]s (see the
    module's docstring for what stays float32), and every parameter left in the base model (its scalar mixes
    included) stops requiring grad: the int8 products have no gradient. The head's parameters are untouched
    (float32, ``requires_grad`` as they were). The whole model is put in eval mode.

    ``ValueError`` for anything else than such a model, for a base model on another device or in another dtype
    (or a head off the CPU), for a model quantized already (quantizing twice is refused, not a no-op: the int8
    weights cannot be quantized again) and for a NaN or infinite weight in the base model (named). Nothing is changed
    then. ``save_pretrained`` refuses the quantized model (the int8 weights are not in its state dict): save the
    float32 model and quantize after loading.
    """
    base = model.base_model if isinstance(model, ElmoPreTrainedModel) else None
    if not isinstance(base, ElmoModel):
        raise ValueError(
            "quantize_int8 takes an ElmoModel or a model whose base model (model.elmo) is an ElmoModel, got "
            f"{type(model).__name__}"
        )
    done = [name for name, module in base.named_modules() if getattr(module, "holds_int8_weights", False)]
    if done:
        raise ValueError(f"the model is already quantized to int8 ({done[0]} is int8): quantize_int8 runs once")
    devices = {p.device.type for p in model.parameters()}
    if devices != {"cpu"} or base.dtype != torch.float32:
        raise ValueError(
            f"quantize_int8 takes a float32 model on CPU (int8 kernels are CPU kernels), got a {base.dtype} biLM on "
            f"{', '.join(sorted(devices))}: load it without dtype= and quantize before moving it"
        )
    # A NaN or infinite weight has no int8 scale (torch fails on it with "min should be less than or equal to
    # max"): named here, before anything is changed.
    prefix = "" if base is model else f"{model.base_model_prefix}."
    for name, parameter in base.named_parameters():
        if parameter.is_floating_point() and not bool(torch.isfinite(parameter).all()):
            raise ValueError(
                f"quantize_int8: the weight {prefix}{name} holds NaN or infinite values; nothing was quantized"
            )
    base.token_cache = None  # built with the float32 encoder; build it again after quantizing if wanted
    encoder = base.char_cnn
    for highway in encoder.highways:
        highway.carry, highway.transform = Int8Linear(highway.carry), Int8Linear(highway.transform)
    encoder.projection = Int8Linear(encoder.projection)
    base.bilm.layers = nn.ModuleList(Int8BiLstmLayer(layer) for layer in base.bilm.layers)
    base.requires_grad_(False)
    return model.eval()
