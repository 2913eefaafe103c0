"""Export ELMo for stateless inference: ``torch.export`` and ONNX, with dynamic batch size and sentence length.

[`ElmoModel`] runs the biLSTM on packed steps whose count depends on the sentence lengths (a Python loop), and
its character encoder skips positions past the longest word: both are data-dependent control flow that an
exported graph cannot hold. [`ElmoExportWrapper`] computes the same function with a fixed structure:

- the character CNN over all ``C`` positions of every word slot;
- ``<S>``/``</S>`` placed by comparisons with the lengths (no indexing by Python ints);
- each biLSTM layer as one ``scan`` (``torch._higher_order_ops.scan``) over all ``T = W + 2`` steps, both
  directions at once; the backward direction reads each sentence reversed within its length, so the steps past
  a sentence's end come after its real steps and never reach them. They are zeroed at the end.

Outputs equal the eager model's on the words (about 1e-6); padded positions are exactly zero.

    wrapper = ElmoExportWrapper(model).eval()
    program = export_program(wrapper)                 # torch.export.ExportedProgram
    export_onnx(wrapper, "elmo.onnx")                 # inputs input_ids, attention_mask; outputs elmo, layers

Stateless only (``config.stateful`` is ignored): every sentence starts from zero states.

The contract of an exported graph (``torch.export`` program or ONNX file). A graph cannot raise an error, so it
marks what it cannot refuse: each sentence whose inputs break the contract gets NaN in all its outputs (``elmo``
and every layer), the other sentences of the batch their normal values. To be refused with a clear error, run an
ONNX file through [`ElmoOnnxSession`] (an ``onnxruntime`` session that checks each batch first), or call
[`check_export_inputs`] (numpy arrays or tensors) on every batch before the graph. The eager
[`ElmoExportWrapper`] checks them itself.

- ``input_ids``: ``(B, W, C)`` int64, ``C = config.max_characters_per_token``, ``B, W >= 1``; every id of a
  word (mask 1) in ``[0, 262)`` (as [`ElmoTokenizer`] makes them). ONNX ``Gather`` counts a negative id from the
  end of the character embedding (silently another character); an id >= 262 is an error or garbage, by runtime.
  Ids at padded positions (mask 0) are ignored, as by the eager model: the graph zeroes them before the lookup.
- ``attention_mask``: ``(B, W)`` int64 of 0 and 1 only, right-padded: each sentence's words first, then 0s.
  The graph takes ``sum(mask)`` of a row as its length and also zeroes the words where the mask is 0, so a
  left-padded or gapped mask gives meaningless outputs, and other values (2, -1) count as 1.

    session = ElmoOnnxSession("elmo.onnx")            # onnxruntime, CPU by default
    elmo, layers = session(input_ids, attention_mask)  # numpy; ValueError/TypeError outside the contract
"""

from __future__ import annotations

import importlib.util
import os

import torch
import torch.nn.functional as F
from torch import nn

from ..characters import NUM_CHARACTERS

INPUT_NAMES = ("input_ids", "attention_mask")
OUTPUT_NAMES = ("elmo", "layers")


def _reverse_padded(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Reverse each row of ``x (B, T, ...)`` within its length; positions past the length stay put."""
    steps = torch.arange(x.shape[1], device=x.device).unsqueeze(0)
    index = torch.where(steps < lengths.unsqueeze(1), lengths.unsqueeze(1) - 1 - steps, steps)
    return x.gather(1, index.view(*index.shape, *([1] * (x.dim() - 2))).expand_as(x))


def _valid_rows(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """``(B,)`` bool: whether each sentence keeps the contract (mask of 0/1, right-padded, ids at words in
    ``[0, 262)``), computed with tensor operations only, so that an exported graph holds it."""
    binary = ((attention_mask == 0) | (attention_mask == 1)).all(dim=1)
    words = attention_mask != 0
    # Right-padded: the words are exactly the first sum(mask) positions (no slicing: it would specialise W).
    prefix = torch.arange(words.shape[1], device=words.device).unsqueeze(0) < words.sum(dim=1, keepdim=True)
    right_padded = (words == prefix).all(dim=1)
    bad_ids = ((input_ids < 0) | (input_ids >= NUM_CHARACTERS)) & words.unsqueeze(-1)
    return binary & right_padded & ~bad_ids.flatten(1).any(dim=1)


def _scan():
    try:
        from torch._higher_order_ops import scan
    except ImportError as error:  # older torch
        message = f"exporting ELMo needs torch with torch._higher_order_ops.scan (torch >= 2.6): {error}"
        raise RuntimeError(message) from error
    return scan


class ElmoExportWrapper(nn.Module):
    """An [`ElmoModel`]'s stateless forward pass with no data-dependent Python control flow.

    Shares the model's parameters (no copy). ``forward(input_ids (B, W, C) int64, attention_mask (B, W) int64)``
    returns ``elmo`` ``(B, W, 2P)`` (the first scalar mix, or the mean of the layers if the model has none) and
    ``layers`` ``(L + 1, B, W, 2P)`` (``[x; x]``, then ``[forward_h; backward_h]`` of each LSTM layer), both zero
    at padded words. The attention mask must be right-padded (1 for words, then 0). Called eagerly, it refuses inputs
    outside that contract with [`check_export_inputs`]; exported graphs cannot raise and give NaN for such a
    sentence instead (check before them, or run an ONNX file with [`ElmoOnnxSession`]).
    """

    def __init__(self, model: nn.Module):
        super().__init__()
        if getattr(model, "char_cnn", None) is None or getattr(model, "bilm", None) is None:
            raise TypeError(f"ElmoExportWrapper wraps an ElmoModel, got {type(model).__name__}")
        if model.config.char_vocabulary != "elmo":
            raise ValueError("exporting an ELMoForManyLangs model (its own characters and word input) is not supported")
        self.model = model
        self.config = model.config

    def _encode_characters(self, ids: torch.Tensor) -> torch.Tensor:
        """``(B, T, C)`` character ids -> ``(B, T, P)``: the character CNN over all positions."""
        cnn = self.model.char_cnn
        batch, steps, chars = ids.shape
        embedded = cnn.char_embedding(ids.reshape(batch * steps, chars)).transpose(1, 2)  # (N, dim, C)
        # max over positions, then the activation (same as the original's order: relu and tanh are monotonic)
        x = torch.cat([cnn.activation(conv(embedded).amax(dim=-1)) for conv in cnn.convolutions], dim=-1)
        for highway in cnn.highways:
            x = highway(x)
        return cnn.projection(x).reshape(batch, steps, -1)

    def _run_layer(self, layer: nn.Module, inputs: torch.Tensor) -> torch.Tensor:
        """One biLSTM layer, both directions: ``(2, B, T, P)`` -> ``(2, B, T, P)`` (index 1 reversed in time)."""
        _, batch, steps, width = inputs.shape
        d = layer.projection.shape[1]
        bias = layer.bias + F.pad(layer.bias.new_ones(d), (2 * d, d))  # TensorFlow's forget bias 1
        gates_in = torch.baddbmm(bias.unsqueeze(1), inputs.reshape(2, batch * steps, width), layer.input_kernel)
        gates_in = gates_in.reshape(2, batch, steps, 4 * d).permute(2, 0, 1, 3)  # (T, 2, B, 4D)
        state_kernel, projection = layer.state_kernel, layer.projection
        cell_clip, proj_clip = layer.cell_clip, layer.proj_clip

        def step(carry, gates_t):
            h, c = carry
            gates = gates_t + torch.bmm(h, state_kernel)
            i, j, f, o = gates.chunk(4, dim=-1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(j)
            if cell_clip is not None:
                c = c.clamp(-cell_clip, cell_clip)
            h = torch.bmm(torch.sigmoid(o) * torch.tanh(c), projection)
            if proj_clip is not None:
                h = h.clamp(-proj_clip, proj_clip)
            return (h, c), h.clone()  # scan forbids an output aliasing the carry

        init = (inputs.new_zeros(2, batch, width), inputs.new_zeros(2, batch, d))
        _, outputs = _scan()(step, init, gates_in)  # (T, 2, B, P)
        outputs = outputs.permute(1, 2, 0, 3)
        return outputs + inputs if layer.residual else outputs

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # Eager calls refuse what the model refuses; a graph cannot hold the checks (see check_export_inputs).
        if not (torch.compiler.is_compiling() or torch.compiler.is_exporting()):
            check_export_inputs(input_ids, attention_mask, self.config)
        batch, words, chars = input_ids.shape
        mask = attention_mask.to(torch.bool)
        lengths = mask.sum(dim=1)  # (B,)
        positions = torch.arange(words + 2, device=input_ids.device).unsqueeze(0)  # (1, T)
        # <S> w_1 .. w_n </S> 0 .. 0: the words shifted by one, </S> where the position is n + 1.
        bos, eos = self.model.boundary_ids.to(input_ids.dtype)
        ids = torch.cat(
            [
                bos.expand(batch, 1, chars),
                # clamped: an id outside [0, 262) at a word is no index error, but a NaN row (see below)
                (input_ids * mask.unsqueeze(-1).to(input_ids.dtype)).clamp(0, NUM_CHARACTERS - 1),
                input_ids.new_zeros(batch, 1, chars),
            ],
            dim=1,
        )
        ids = torch.where((positions == (lengths + 1).unsqueeze(1)).unsqueeze(-1), eos, ids)
        steps = lengths + 2
        present = (positions < steps.unsqueeze(1)).unsqueeze(-1)  # (B, T, 1)

        tokens = self._encode_characters(ids) * present.to(self.model.dtype)  # (B, T, P)
        inputs = torch.stack([tokens, _reverse_padded(tokens, steps)])  # (2, B, T, P)
        layers = [torch.cat([tokens, tokens], dim=-1)]
        for layer in self.model.bilm.layers:
            inputs = self._run_layer(layer, inputs)
            layers.append(torch.cat([inputs[0], _reverse_padded(inputs[1], steps)], dim=-1))

        keep = mask.unsqueeze(-1).to(tokens.dtype)
        layers = [layer[:, 1 : words + 1] * keep for layer in layers]
        if len(self.model.scalar_mixes) > 0:
            elmo = self.model.scalar_mixes[0](layers, mask)
        else:
            elmo = torch.stack(layers).mean(dim=0)
        # The graph cannot raise: a sentence outside the contract gets NaN everywhere, so that a caller who skipped
        # check_export_inputs sees it rather than plausible numbers.
        valid = _valid_rows(input_ids, attention_mask)
        nan = elmo.new_full((), float("nan"))
        elmo = torch.where(valid.view(-1, 1, 1), elmo, nan)
        return elmo, torch.where(valid.view(1, -1, 1, 1), torch.stack(layers), nan)


def check_export_inputs(input_ids, attention_mask, config) -> None:
    """Refuse inputs outside the contract of an exported ELMo graph (see the module docstring), as the eager model
    refuses them: call it on each batch before running a ``torch.export`` program or an ONNX session.

    Args:
        input_ids: ``(B, W, C)`` int64 character ids, a numpy array or a tensor.
        attention_mask: ``(B, W)`` int64 0/1 mask, right-padded; a numpy array or a tensor.
        config: the exported model's [`ElmoConfig`], or its ``max_characters_per_token`` (an int).

    Raises:
        TypeError: an input is neither a numpy array nor a tensor.
        ValueError: naming ``input_ids`` or ``attention_mask`` and what is wrong (dtype, shape, values, padding).
    """
    import numpy as np

    from ..modeling_elmo import check_inputs

    tensors = []
    for name, value in zip(INPUT_NAMES, (input_ids, attention_mask), strict=True):
        if isinstance(value, np.ndarray):
            value = torch.from_numpy(value)
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"{name} must be a numpy array or a torch.Tensor, got {type(value).__name__}")
        if value.dtype != torch.int64:  # the graph's input type
            raise ValueError(f"{name} of an exported ELMo graph must be int64, got {value.dtype}")
        if value.dim() < 2 or 0 in value.shape[:2]:
            raise ValueError(f"{name} must have at least one sentence and one word, got shape {tuple(value.shape)}")
        tensors.append(value)
    chars = config if isinstance(config, int) else config.max_characters_per_token
    check_inputs(tensors[0], tensors[1], chars)


class ElmoOnnxSession:
    """An ``onnxruntime`` session of an ELMo ONNX file (from [`export_onnx`]) that refuses, with the eager model's
    errors, every batch outside the graph's contract (which the graph itself would answer with NaN rows).

    ``session(input_ids (B, W, C), attention_mask (B, W))``, int64 numpy arrays or tensors, returns the numpy
    arrays ``(elmo (B, W, 2P), layers (L + 1, B, W, 2P))``. ``C`` is read from the file. Keyword arguments go to
    ``onnxruntime.InferenceSession`` (``providers`` defaults to the CPU); the session is ``.session``.
    """

    def __init__(self, path: str | os.PathLike, **session_kwargs):
        try:
            import onnxruntime
        except ImportError as error:
            raise ImportError(f"ElmoOnnxSession needs onnxruntime (pip install onnxruntime): {error}") from error
        session_kwargs.setdefault("providers", ["CPUExecutionProvider"])
        self.session = onnxruntime.InferenceSession(os.fspath(path), **session_kwargs)
        inputs = {i.name: i.shape for i in self.session.get_inputs()}
        outputs = [o.name for o in self.session.get_outputs()]
        shape = inputs.get(INPUT_NAMES[0])
        if set(inputs) != set(INPUT_NAMES) or outputs != list(OUTPUT_NAMES) or not isinstance(shape[-1], int):
            raise ValueError(f"{os.fspath(path)} is not an ELMo graph from export_onnx (inputs {sorted(inputs)})")
        self.max_characters_per_token = shape[-1]

    def __call__(self, input_ids, attention_mask):
        check_export_inputs(input_ids, attention_mask, self.max_characters_per_token)
        feed = {
            name: value.numpy(force=True) if isinstance(value, torch.Tensor) else value
            for name, value in zip(INPUT_NAMES, (input_ids, attention_mask), strict=True)
        }
        elmo, layers = self.session.run(list(OUTPUT_NAMES), feed)
        return elmo, layers


def example_inputs(config, batch: int = 2, words: int = 5, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Random ``(input_ids (batch, words, C), attention_mask (batch, words))`` with different lengths per row."""
    from ..characters import word_to_char_ids

    generator = torch.Generator().manual_seed(seed)
    lengths = [words] + [int(torch.randint(1, words + 1, (1,), generator=generator)) for _ in range(batch - 1)]
    ids = torch.zeros(batch, words, config.max_characters_per_token, dtype=torch.long)
    mask = torch.zeros(batch, words, dtype=torch.long)
    for row, length in enumerate(lengths):
        for position in range(length):
            size = int(torch.randint(1, 8, (1,), generator=generator))
            word = "".join(chr(97 + int(v)) for v in torch.randint(0, 26, (size,), generator=generator))
            ids[row, position] = torch.tensor(word_to_char_ids(word, config.max_characters_per_token))
            mask[row, position] = 1
    return ids, mask


def _dynamic_shapes():
    batch = torch.export.Dim("batch", min=1, max=4096)
    words = torch.export.Dim("words", min=1, max=4096)
    return {"input_ids": {0: batch, 1: words}, "attention_mask": {0: batch, 1: words}}


def export_program(wrapper: ElmoExportWrapper, example: tuple[torch.Tensor, torch.Tensor] | None = None):
    """``torch.export.export`` of the wrapper with dynamic batch size and number of words.

    Use an example with at least 2 sentences and 2 words (size-1 dimensions are specialised by ``torch.export``).
    """
    example = example if example is not None else example_inputs(wrapper.config, batch=2, words=3)
    with torch.no_grad():
        return torch.export.export(wrapper.eval(), example, dynamic_shapes=_dynamic_shapes())


def export_onnx(
    wrapper: ElmoExportWrapper, path: str | os.PathLike, example: tuple[torch.Tensor, torch.Tensor] | None = None
) -> str:
    """Write an ONNX file (the ``torch.onnx`` dynamo exporter; the time loop becomes an ONNX ``Scan``).

    Inputs ``input_ids`` ``(batch, words, C)`` int64 and ``attention_mask`` ``(batch, words)`` int64; outputs
    ``elmo`` and ``layers`` as [`ElmoExportWrapper`]. Needs the ``onnx`` and ``onnxscript`` packages (the
    ``[export]`` extra). Returns the path.
    """
    missing = [name for name in ("onnx", "onnxscript") if importlib.util.find_spec(name) is None]
    if missing:
        raise ImportError(
            f'export_onnx needs {" and ".join(missing)} (the [export] extra): pip install "modeling-elmo[export]" '
            '(from a checkout: pip install -e ".[export]")'
        )
    program = export_program(wrapper, example)
    example = example if example is not None else example_inputs(wrapper.config, batch=2, words=3)
    onnx_program = torch.onnx.export(
        program,
        example,
        input_names=list(INPUT_NAMES),
        output_names=list(OUTPUT_NAMES),
        dynamic_shapes=_dynamic_shapes(),
        dynamo=True,
        external_data=False,
        verbose=False,
    )
    onnx_program.save(os.fspath(path))
    return os.fspath(path)


__all__ = [
    "ElmoExportWrapper",
    "ElmoOnnxSession",
    "check_export_inputs",
    "example_inputs",
    "export_onnx",
    "export_program",
]
