"""Export ELMo for stateless inference: ``torch.export`` and ONNX, with dynamic batch size and sentence length.

[`ElmoModel`]'s own forward exports too (``torch.export.export(model, (), kwargs)``, with the batch and word dimensions
dynamic): while torch exports, ``ElmoModel`` runs its graph path (``modeling_elmo/graph_path_elmo.py``: the character
CNN over all positions, ``<S>``/``</S>`` placed by comparisons, each biLSTM layer one ``scan``), and its input checks
become ``torch._assert_async`` nodes. Those asserts hold in a ``torch.export`` program but not in ONNX: the ONNX
exporter drops them, and a bad batch then gives plausible numbers (measured). [`ElmoExportWrapper`] runs the same graph
path and adds what a graph without errors needs, the contract below (NaN for each sentence outside it).

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
- Sizes: a ``torch.export`` program ([`export_program`]) takes ``B`` and ``W`` from 1 to 4,096 (``MAX_SENTENCES``,
  ``MAX_WORDS``: its ``torch.export.Dim`` ranges); a larger batch fails in the program's guards (``Guard failed:
  input_ids.size()[1] <= 4096``), so split a longer text into windows or a larger batch into several.
  [`check_export_inputs`] refuses them with a message that says so. An ONNX file has no such bound (5,000 words
  measured to match the eager wrapper); [`ElmoOnnxSession`] does not check it.

    session = ElmoOnnxSession("elmo.onnx")            # onnxruntime, CPU by default
    elmo, layers = session(input_ids, attention_mask)  # numpy; ValueError/TypeError outside the contract
"""

from __future__ import annotations

import importlib.util
import os

import torch
from torch import nn

from ..characters import NUM_CHARACTERS
from ..graph_path_elmo import graph_layers, in_graph

INPUT_NAMES = ("input_ids", "attention_mask")
OUTPUT_NAMES = ("elmo", "layers")
# The range of the dynamic dimensions of an exported program (torch.export.Dim): batches of 1 to 4,096 sentences of
# 1 to 4,096 words. The program's guards refuse anything larger; an ONNX file does not keep the bound.
MAX_SENTENCES = MAX_WORDS = 4096


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

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # Eager calls refuse what the model refuses; a graph cannot hold the checks (see check_export_inputs).
        if not in_graph():
            check_export_inputs(input_ids, attention_mask, self.config, program=False)  # eager: any size
        mask = attention_mask.to(torch.bool)
        # clamped: an id outside [0, 262) at a word is no index error, but a NaN row (see below)
        ids = (input_ids * mask.unsqueeze(-1).to(input_ids.dtype)).clamp(0, NUM_CHARACTERS - 1)
        layers = graph_layers(self.model, ids, mask)
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


def check_export_inputs(input_ids, attention_mask, config, program: bool = True) -> None:
    """Refuse inputs outside the contract of an exported ELMo graph (see the module docstring), as the eager model
    refuses them: call it on each batch before running a ``torch.export`` program or an ONNX session.

    Args:
        input_ids: ``(B, W, C)`` int64 character ids, a numpy array or a tensor.
        attention_mask: ``(B, W)`` int64 0/1 mask, right-padded; a numpy array or a tensor.
        config: the exported model's [`ElmoConfig`], or its ``max_characters_per_token`` (an int).
        program: check the sizes that a ``torch.export`` program takes too (``B``, ``W`` up to 4,096); False for
            an ONNX file, which has no such bound.

    Raises:
        TypeError: an input is neither a numpy array nor a tensor.
        ValueError: naming ``input_ids`` or ``attention_mask`` and what is wrong (dtype, shape, values, padding,
            a size beyond the program's).
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
    sentences, words = tensors[0].shape[:2]
    if program and (sentences > MAX_SENTENCES or words > MAX_WORDS):
        raise ValueError(
            f"input_ids of shape {tuple(tensors[0].shape)}: a torch.export program of export_program takes at most "
            f"{MAX_SENTENCES} sentences of {MAX_WORDS} words (its torch.export.Dim ranges); split the batch or the "
            "text (an ONNX file has no such bound)"
        )
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
        check_export_inputs(input_ids, attention_mask, self.max_characters_per_token, program=False)
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
    batch = torch.export.Dim("batch", min=1, max=MAX_SENTENCES)
    words = torch.export.Dim("words", min=1, max=MAX_WORDS)
    return {"input_ids": {0: batch, 1: words}, "attention_mask": {0: batch, 1: words}}


def export_program(wrapper: ElmoExportWrapper, example: tuple[torch.Tensor, torch.Tensor] | None = None):
    """``torch.export.export`` of the wrapper with dynamic batch size and number of words, each from 1 to 4,096
    (``MAX_SENTENCES``, ``MAX_WORDS``; the program's guards refuse more: see the module docstring).

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
