"""ELMo configuration: the biLM's sizes (everything an original ``options.json`` holds) and the
settings of the task-specific scalar mixes.

The ground floor of the package: it imports nothing from the model, the tokenizer or the Hub helpers, and saving
it writes ``config.json`` only, with no ``auto_map`` unless remote code is asked for (``hub/remote_code.py``).
No ``from __future__ import annotations`` here: ``@strict`` checks the field types from the
annotations, which must be types, not strings.
"""

import functools
import json
import math
import os
import re
import reprlib
from dataclasses import field, fields
from typing import Any, Literal, Union, get_args, get_origin

from huggingface_hub.dataclasses import strict
from huggingface_hub.errors import StrictDataclassError
from transformers import PreTrainedConfig

# Upper bounds of the sizes (issue #13): far above every released ELMo (the largest, 2x4096_512: lstm_dim 4096,
# projection_dim 512, 2 layers, 2 highway layers, 7 filters of width <= 7 and 2048 channels in all, 16-dim
# character embeddings, 50 characters per word, a 793,471-word LM vocabulary), far below what exhausts memory.
# Each alone stays within MAX_PARAMETERS with the other sizes at the original's; together they are bounded by it.
SIZE_LIMITS: dict[str, int] = {
    "char_embedding_dim": 1024,
    "max_characters_per_token": 1024,  # also the tokenizer's bound (tokenizer_config.json)
    "n_highway": 32,
    "lstm_dim": 32768,
    "projection_dim": 8192,
    "n_layers": 32,
    "num_output_representations": 32,
    "lm_vocab_size": 1 << 22,  # 4,194,304
    "lm_num_samples": 1 << 22,
    "lm_bos_vocab_id": 1 << 22,
    "lm_eos_vocab_id": 1 << 22,
    "tagger_word_vocab_size": 1 << 22,
    # ELMoForManyLangs (manylangs.py): a per-model character vocabulary (every Unicode code point and the marks at
    # most) and a word embedding before the projection (the releases: 2,677 characters, 172,763 x 100 words).
    "n_characters": 0x110000 + 7,
    "word_vocab_size": 1 << 22,
    "word_embedding_dim": 8192,
    "tagger_word_embedding_dim": 8192,
    "tagger_hidden_size": 8192,
    "tagger_num_layers": 32,
    "classifier_hidden_size": 8192,
    "num_labels": 4096,  # the CRF holds num_labels**2 transitions and computes (B, K, K) scores per word
}
MAX_FILTERS = 64  # [width, count] pairs in char_cnn_filters (7 in the released models)
MAX_FILTER_CHANNELS = 16384  # channels of one filter and of all together (2048 in all in the largest release)
# Parameters the sizes may describe: 1e9 (4 GB in float32), 10x the largest released biLM (93.6M); its training-time
# LM softmax over the 793,471-word 1B Word Benchmark vocabulary (407M more) fits too.
MAX_PARAMETERS = 1_000_000_000

# Where each biLM field comes from in an original options.json (errors of `from_options` name the options key).
OPTIONS_KEYS: dict[str, str] = {
    "char_embedding_dim": "char_cnn.embedding.dim",
    "char_cnn_filters": "char_cnn.filters",
    "char_cnn_activation": "char_cnn.activation",
    "n_highway": "char_cnn.n_highway",
    "max_characters_per_token": "char_cnn.max_characters_per_token",
    "n_characters": "char_cnn.n_characters",
    "lstm_dim": "lstm.dim",
    "projection_dim": "lstm.projection_dim",
    "n_layers": "lstm.n_layers",
    "cell_clip": "lstm.cell_clip",
    "proj_clip": "lstm.proj_clip",
    "use_skip_connections": "lstm.use_skip_connections",
}

# Values echoed in errors are cut short: a hostile file may hold a list of millions of numbers (issue #13 saw a
# 39 MB error line).
_short_repr = reprlib.Repr()
_short_repr.maxlevel, _short_repr.maxlist, _short_repr.maxdict, _short_repr.maxtuple = 2, 4, 4, 4
_short_repr.maxstring = _short_repr.maxother = 40
_MAX_MESSAGE = 300


def check_model_name(name: Any) -> None:
    """Refuse at once, with no network call, a model name that is neither an existing path nor a Hugging Face Hub
    id of the form ``owner/name`` (every ELMo on the Hub has an owner): a released model's short name such as
    ``"original"`` or ``"elmo-original"`` would otherwise wait through the Hub client's retries (minutes offline).

    A path that does not exist and is no valid id (``/no/such/folder``) is named as a missing folder. ``owner/name``
    ids are left to transformers (``HF_HUB_OFFLINE=1`` keeps it off the network).

    Raises:
        OSError: naming the problem and how to get a released model (``elmo download NAME``).
    """
    if not isinstance(name, (str, os.PathLike)) or os.path.exists(name):
        return
    name = os.fspath(name)
    if "/" in name.strip("/") or "\\" in name:
        from huggingface_hub.utils import HFValidationError, validate_repo_id

        try:
            validate_repo_id(name)  # the id's form only: no network
        except HFValidationError:
            raise OSError(f"no such folder {name} (and not a Hugging Face Hub id such as owner/name)") from None
        return
    raise OSError(
        f"{name!r} is no folder, and no Hugging Face Hub id (owner/name). For a released ELMo model (small, medium, "
        "original, ...), run `elmo download NAME` (it converts the model once and prints its folder) and pass that "
        "folder; in Python, modeling_elmo.hub.download.resolve_pretrained(NAME) returns it"
    )


def _show(value: Any) -> str:
    """A short, safe description of ``value`` for an error message: its type and a truncated repr."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**18:
        # repr of a huge int is slow (and refused beyond 4300 digits)
        return f"int of {value.bit_length()} bits"
    return f"{type(value).__name__} {_short_repr.repr(value)}"


def _number(value: Any) -> str:
    """A number for an error message: itself, or its size if it is a huge int."""
    shown = _show(value)
    if shown.startswith("int of"):
        return f"an {shown}"
    return shown.removeprefix("int ").removeprefix("float ")


def _is_finite(value: float | int) -> bool:
    """``math.isfinite``, false for an int beyond float range (10**400) instead of ``OverflowError``."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _default_filters() -> list[list[int]]:
    return [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]]


def _describe(annotation: Any) -> str:
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin is Union or type(annotation).__name__ == "UnionType":
        kinds = [_describe(a) for a in args if a is not int or float not in args]
        return " or ".join(kinds)
    return {int: "an int", float: "a finite number", bool: "a bool (true or false)", type(None): "null/None"}.get(
        annotation, str(annotation)
    )


def _matches(value: Any, annotation: Any) -> bool:
    """Whether ``value`` has the type ``annotation`` (strictly: a bool is not an int, an int is a float only where
    the annotation says ``float | int``)."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Literal:
        return any(type(value) is type(a) and value == a for a in args)
    if origin is Union or type(annotation).__name__ == "UnionType":
        return any(_matches(value, a) for a in args)
    if annotation is type(None) or annotation is None:
        return value is None
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if annotation is float:
        return isinstance(value, float)
    if annotation is bool:
        return isinstance(value, bool)
    return True  # containers: checked by their own validators


def _normalise_filters(filters: Any) -> list[list[int]]:
    """``char_cnn_filters`` as a list of ``[width, count]`` int lists; ``TypeError``/``ValueError`` naming the
    entry. Lengths are checked before the entries, so a huge list is refused without walking it."""
    name = "char_cnn_filters"
    if not isinstance(filters, (list, tuple)):
        raise TypeError(f"{name} must be a list of [width, count] pairs, got {_show(filters)}")
    if not 1 <= len(filters) <= MAX_FILTERS:
        raise ValueError(f"{name} must hold 1 to {MAX_FILTERS} [width, count] pairs, got {len(filters)}")
    pairs = []
    for i, pair in enumerate(filters):
        if not isinstance(pair, (list, tuple)) or len(pair) != 2 or not all(_matches(v, int) for v in pair):
            raise TypeError(f"{name}[{i}] must be a [width, count] pair of ints, got {_show(pair)}")
        pairs.append([pair[0], pair[1]])
    return pairs


def _check_field_types(cls: type, kwargs: dict[str, Any]) -> None:
    """Strict types of the ELMo fields in ``kwargs``, before ``@strict``'s own checks see them (whose messages
    echo the whole value) and before the base class acts on ``num_labels``."""
    annotations = cls._elmo_field_types
    for name, value in kwargs.items():
        if name == "char_cnn_filters":
            kwargs[name] = _normalise_filters(value)
        elif name in annotations and not _matches(value, annotations[name]):
            raise TypeError(f"{name} must be {_describe(annotations[name])}, got {_show(value)}")
    if "num_labels" in kwargs:  # the base class builds an id2label dict of that size
        _check_size("num_labels", kwargs["num_labels"], minimum=1)


def _check_size(name: str, value: Any, minimum: int) -> None:
    if not _matches(value, int):
        raise TypeError(f"{name} must be an int, got {_show(value)}")
    if value < minimum:
        kind = "a non-negative" if minimum == 0 else "a positive"
        raise ValueError(f"{name} must be {kind} integer, got {_number(value)}")
    if value > SIZE_LIMITS[name]:
        raise ValueError(f"{name} must be at most {SIZE_LIMITS[name]}, got {_number(value)}")


def _check_fraction(name: str, value: Any) -> None:
    """A dropout probability: finite, in [0, 1)."""
    if not (_is_finite(value) and 0.0 <= value < 1.0):
        raise ValueError(f"{name} must be in [0, 1), got {_number(value)}")


def _plain_errors(cls: type) -> type:
    """Make building the config raise ``TypeError``/``ValueError`` with one short line naming the field.

    ``@strict`` reports a wrong field as ``StrictDataclassFieldValidationError`` and a failed ``validate_*`` as
    ``StrictDataclassClassValidationError``: neither is a ``ValueError``, both span two lines and echo the whole
    value. Callers (``from_pretrained``, the converter) expect ``ValueError``/``TypeError``.
    """
    cls._elmo_field_types = {f.name: f.type for f in fields(cls) if f.name in cls.__dict__.get("__annotations__", {})}
    strict_init = cls.__init__

    @functools.wraps(strict_init)
    def __init__(self, *args, **kwargs) -> None:
        _check_field_types(cls, kwargs)
        try:
            strict_init(self, *args, **kwargs)
        except StrictDataclassError as error:
            cause = error.__cause__
            kind = type(cause) if type(cause) in (ValueError, TypeError) else ValueError
            message = str(cause if cause is not None else error).replace("\n", " ")
            if len(message) > _MAX_MESSAGE:
                message = message[: _MAX_MESSAGE - 3] + "..."
            raise kind(message) from None

    cls.__init__ = __init__
    return cls


@_plain_errors
@strict
class ElmoConfig(PreTrainedConfig):
    r"""Configuration of an ELMo biLM and its scalar mixes.

    The defaults are the original 2x4096_512 model (93.6M parameters). Build a config from an
    original ``options.json`` with [`ElmoConfig.from_options`].

    Args:
        char_embedding_dim: size of a character embedding (16 in the released models).
        char_cnn_filters: ``[width, count]`` per convolution of the character CNN.
        char_cnn_activation: ``"relu"`` or ``"tanh"``, applied after the max over positions.
        n_highway: number of highway layers after the character CNN.
        max_characters_per_token: character ids per word, the word marks included.
        n_characters: rows of the character embedding, row 0 being the padding id. Original
            options files say 261 (training) or 262 (inference); both mean 262 rows here. With
            ``char_vocabulary="manylangs"``: the rows of the model's own character vocabulary.
        char_vocabulary: ``"elmo"``: characters are UTF-8 bytes and ELMo's marks (262 ids); ``"manylangs"``:
            a per-model vocabulary of code points, as ELMoForManyLangs (row 0 no word, rows 1-6 its marks
            ``<bos> <eos> <oov> <pad> <bow> <eow>``, then the characters; see ``manylangs.py``).
        word_vocab_size, word_embedding_dim: a word embedding (``word_vocab_size`` rows of the tokenizer's
            vocabulary) concatenated with the highway output before the projection, as ELMoForManyLangs' token
            encoder; the model then also takes ``vocab_ids``. 0 and 0: none (the released AllenNLP models).
        lstm_dim: LSTM cell size.
        projection_dim: size of the token vector and of each LSTM's projected output.
        n_layers: LSTM layers per direction.
        cell_clip: clip the LSTM cell to ``[-cell_clip, cell_clip]``; ``None`` for no clipping.
        proj_clip: clip the projected LSTM output likewise; ``None`` for no clipping.
        use_skip_connections: layers after the first add their input to their output.
        num_output_representations: how many scalar mixes ("ELMo representations") to compute.
        scalar_mix_layer_norm: ``None``; ``"batch"`` to normalise each layer over all unmasked
            elements of the batch before mixing, as the original does (the result then depends
            on the batch); ``"token"`` to normalise each word vector on its own.
        elmo_dropout: dropout on each mixed representation (active in training mode only).
        scalar_mix_l2_coef: ``lambda`` of the L2 penalty ``lambda * ||w||^2`` on the mix weights.
        stateful: carry LSTM states from one call to the next, row by row, as the original
            implementation does. Off by default: outputs then depend only on the sentence.

    Settings of the tagging head [`ElmoForTokenClassification`] (ignored by the other models):

    Args:
        freeze_bilm: keep the biLM (character encoder and LSTMs) fixed, as the paper does; the
            scalar mixes are trained either way. Also read by the classification head.
        tagger_word_input: the context-independent word vector ``x_k``: ``"embedding"`` (a trainable
            embedding of the tokenizer's vocabulary ids, ``vocab_ids``), ``"bilm"`` (the biLM's
            layer 0, the character-CNN vector) or ``None``.
        tagger_word_vocab_size: rows of that embedding (``len(tokenizer)``); needed for ``"embedding"``.
        tagger_word_embedding_dim: size of that embedding.
        tagger_elmo_input: concatenate a scalar mix with ``x_k`` as the task BiLSTM's input.
        tagger_elmo_output: concatenate a (second) scalar mix with the BiLSTM's output.
        tagger_hidden_size: the task BiLSTM's size per direction.
        tagger_num_layers: its layers (0: no BiLSTM, the classifier reads ``[x_k; ELMo_k]``).
        tagger_dropout: dropout on ``x_k``, between BiLSTM layers and before the classifier.
        use_crf: decode with a linear-chain CRF (loss: its negative log-likelihood) instead of a
            per-word softmax.
        crf_constraints: ``"auto"`` (BIO transition constraints when every label is ``O``/``B-X``/
            ``I-X``), ``"BIO"`` (required) or ``None``.

    Settings of the sequence classification head [`ElmoForSequenceClassification`] (ignored by the other models;
    ``freeze_bilm``, ``num_labels`` and ``problem_type`` as above and in transformers):

    Args:
        classifier_head: which head the model holds, and so what one row is: ``"sentence"`` (one text per row: the
            BiLSTM encoder, max/mean pooling and a linear layer) or ``"pair"`` (two texts per row, ``tokenizer(text,
            text_pair)``: ESIM's pair head, ``esim_elmo.py``, for entailment, paraphrase and zero-shot
            classification). The model holds only that head's weights, so every weight trains on every batch (as
            ``DistributedDataParallel`` with gradient checkpointing needs); the other kind of input is refused by
            name. ``from_pretrained(folder, classifier_head="pair")`` puts a new pair head on a biLM folder.
        classifier_hidden_size: the BiLSTM encoder's size per direction, over the scalar mix (both heads).
        classifier_pooling: how the encoder's word vectors become one sentence vector: ``"max_mean"``
            (max and mean over the words, concatenated), ``"max"`` or ``"mean"``.
        classifier_dropout: dropout on the pooled sentence vector, before the classifier (the pair head: on its
            enhanced features and its MLP's input and hidden layer).

    Settings of the language-model head [`ElmoForPreTraining`] (ignored by the other models):

    Args:
        lm_vocab_size: words of the LM softmax (the tokenizer's word vocabulary, ``<pad>`` excluded);
            0: no LM head (``ElmoForPreTraining`` needs it >= 1).
        lm_num_samples: negatives of the sampled softmax in training (8192 as the original; with
            ``>= lm_vocab_size`` every word is one, which equals the full softmax); 0: full softmax in
            training too. Evaluation always uses the full softmax.
        lm_dropout: dropout on the biLM's top layer before the softmax (training only; 0.1 as the original).
        lm_bos_vocab_id, lm_eos_vocab_id: vocabulary ids of ``<S>`` and ``</S>``, the targets at the
            sentence edges (0 and 1: the first lines of a bilm-tf vocabulary file).

    Validation follows transformers 5 (a ``@strict`` dataclass): every field has a type (``Literal`` where it takes
    one of a few values), and the ``validate_*`` methods check ranges and cross-field rules when the config is built
    and again before it is saved. Types are strict (``"false"`` is not a bool, ``true`` or ``2.0`` not an int),
    numbers finite, and every size has an upper bound (`SIZE_LIMITS`, far above the released models) plus a bound
    on the parameters the sizes describe (`MAX_PARAMETERS`), so that a hostile ``config.json`` or ``options.json``
    is refused before anything is allocated. Building a config raises ``TypeError`` (wrong type) or ``ValueError``
    (wrong value), one short line that names the field; assigning a wrong value to a field later raises
    huggingface_hub's ``StrictDataclassFieldValidationError``.
    """

    model_type = "elmo"
    attribute_map = {"num_hidden_layers": "n_layers"}
    # Outputs that Trainer's prediction_step leaves out of `predictions` (transformers' documented config attribute),
    # so that compute_metrics gets one array, as from a stock head: the tagger's `emissions` (its `logits` are what to
    # argmax), the LM head's per-direction scalar losses, and ElmoModel's fields beside its `elmo` mix (`outputs[0]`).
    keys_to_ignore_at_inference = [
        "emissions",
        "forward_loss",
        "backward_loss",
        "mixes",
        "mask",
        "lstm_state",
        "last_hidden_state",
    ]

    char_embedding_dim: int = 16
    char_cnn_filters: list[list[int]] = field(default_factory=_default_filters)
    char_cnn_activation: Literal["relu", "tanh"] = "relu"
    n_highway: int = 2
    max_characters_per_token: int = 50
    n_characters: int = 262
    char_vocabulary: Literal["elmo", "manylangs"] = "elmo"
    word_vocab_size: int = 0
    word_embedding_dim: int = 0
    lstm_dim: int = 4096
    projection_dim: int = 512
    n_layers: int = 2
    cell_clip: float | int | None = 3.0
    proj_clip: float | int | None = 3.0
    use_skip_connections: bool = True
    num_output_representations: int = 1
    scalar_mix_layer_norm: Literal["batch", "token"] | None = None
    elmo_dropout: float | int = 0.5
    scalar_mix_l2_coef: float | int = 0.0
    stateful: bool = False
    initializer_range: float | int = 0.05
    # Tagging head (ElmoForTokenClassification).
    freeze_bilm: bool = True
    tagger_word_input: Literal["embedding", "bilm"] | None = "bilm"
    tagger_word_vocab_size: int = 0
    tagger_word_embedding_dim: int = 100
    tagger_elmo_input: bool = True
    tagger_elmo_output: bool = False
    tagger_hidden_size: int = 200
    tagger_num_layers: int = 2
    tagger_dropout: float | int = 0.5
    use_crf: bool = True
    crf_constraints: Literal["auto", "BIO"] | None = "auto"
    # Sequence classification head (ElmoForSequenceClassification).
    classifier_head: Literal["sentence", "pair"] = "sentence"
    classifier_hidden_size: int = 300
    classifier_pooling: Literal["max_mean", "max", "mean"] = "max_mean"
    classifier_dropout: float | int = 0.5
    # Language-model head (ElmoForPreTraining).
    lm_vocab_size: int = 0
    lm_num_samples: int = 8192
    lm_dropout: float | int = 0.1
    lm_bos_vocab_id: int = 0
    lm_eos_vocab_id: int = 1

    def __post_init__(self, **kwargs):
        self.char_cnn_filters = _normalise_filters(self.char_cnn_filters)
        if self.n_characters == 261:  # training-time options count without the padding row
            self.n_characters = 262
        super().__post_init__(**kwargs)

    # ------------------------------------------------------------------------------------------------------------
    # Validation: `@strict` runs every `validate_*` method (in name order) after `__init__`, and `save_pretrained`
    # runs them again. Types are already checked; these check values. Sizes first, then the total they describe.
    # ------------------------------------------------------------------------------------------------------------

    def validate_bilm(self) -> None:
        """Check the biLM's sizes and settings (character CNN, highway, LSTMs, mixes); ``ValueError`` if wrong."""
        for name in ("char_embedding_dim", "lstm_dim", "projection_dim", "n_layers", "max_characters_per_token"):
            _check_size(name, getattr(self, name), minimum=1)
        _check_size("n_highway", self.n_highway, minimum=0)
        _check_size("num_output_representations", self.num_output_representations, minimum=0)
        _check_size("n_characters", self.n_characters, minimum=1)
        if self.char_vocabulary == "elmo" and self.n_characters != 262:
            raise ValueError(
                f"n_characters must be 261 or 262 (the ELMo character set), got {_show(self.n_characters)}"
            )
        if self.char_vocabulary == "manylangs":  # row 0 and the six marks, then at least one character
            _check_size("n_characters", self.n_characters, minimum=8)
        for name in ("word_vocab_size", "word_embedding_dim"):
            _check_size(name, getattr(self, name), minimum=0)
        if self.word_vocab_size and self.char_vocabulary != "manylangs":
            raise ValueError("a word input (word_vocab_size > 0) needs char_vocabulary='manylangs' (ELMoForManyLangs)")
        if (self.word_vocab_size == 0) != (self.word_embedding_dim == 0):
            raise ValueError(
                "word_vocab_size and word_embedding_dim must both be 0 (no word input) or both positive, got "
                f"{self.word_vocab_size} and {self.word_embedding_dim}"
            )
        total = 0
        for i, (width, count) in enumerate(self.char_cnn_filters):
            if not 1 <= width <= self.max_characters_per_token:
                raise ValueError(
                    f"char_cnn_filters[{i}] width must be in [1, max_characters_per_token="
                    f"{self.max_characters_per_token}], got {_number(width)}"
                )
            if not 1 <= count <= MAX_FILTER_CHANNELS:
                raise ValueError(
                    f"char_cnn_filters[{i}] count must be in [1, {MAX_FILTER_CHANNELS}], got {_number(count)}"
                )
            total += count
        if total > MAX_FILTER_CHANNELS:
            raise ValueError(f"char_cnn_filters has {total} channels in all, more than {MAX_FILTER_CHANNELS}")
        for name in ("cell_clip", "proj_clip"):
            value = getattr(self, name)
            if value is not None and not (_is_finite(value) and value > 0):
                raise ValueError(f"{name} must be a positive finite number or None (no clipping), got {_number(value)}")
        _check_fraction("elmo_dropout", self.elmo_dropout)
        if not (_is_finite(self.scalar_mix_l2_coef) and self.scalar_mix_l2_coef >= 0):
            raise ValueError(f"scalar_mix_l2_coef must be a finite number >= 0, got {self.scalar_mix_l2_coef!r}")
        if not (_is_finite(self.initializer_range) and self.initializer_range >= 0):
            raise ValueError(f"initializer_range must be a finite number >= 0, got {_number(self.initializer_range)}")

    def validate_lm(self) -> None:
        """Check the language-model head's settings (``lm_*``); ``ValueError`` if wrong."""
        for name in ("lm_vocab_size", "lm_num_samples", "lm_bos_vocab_id", "lm_eos_vocab_id"):
            _check_size(name, getattr(self, name), minimum=0)
        _check_fraction("lm_dropout", self.lm_dropout)
        if self.lm_vocab_size and max(self.lm_bos_vocab_id, self.lm_eos_vocab_id) >= self.lm_vocab_size:
            raise ValueError(
                f"lm_bos_vocab_id ({self.lm_bos_vocab_id}) and lm_eos_vocab_id ({self.lm_eos_vocab_id}) must be ids "
                f"of the LM vocabulary (lm_vocab_size={self.lm_vocab_size})"
            )

    def validate_tagger(self) -> None:
        """Check the tagging-head settings (``tagger_*``, ``use_crf``, ``crf_constraints``, the number of labels);
        ``ValueError`` if wrong."""
        for name in ("tagger_word_vocab_size", "tagger_num_layers"):
            _check_size(name, getattr(self, name), minimum=0)
        for name in ("tagger_word_embedding_dim", "tagger_hidden_size"):
            _check_size(name, getattr(self, name), minimum=1)
        _check_size("num_labels", self.num_labels, minimum=1)
        if self.tagger_word_input == "embedding" and self.tagger_word_vocab_size < 1:
            raise ValueError("tagger_word_input='embedding' needs tagger_word_vocab_size >= 1 (len(tokenizer))")
        if self.tagger_word_input is None and not self.tagger_elmo_input:
            raise ValueError("the tagger has no input: set tagger_word_input or tagger_elmo_input=True")
        if self.tagger_elmo_output and self.tagger_num_layers == 0:
            raise ValueError("tagger_elmo_output needs a task BiLSTM (tagger_num_layers >= 1)")
        _check_fraction("tagger_dropout", self.tagger_dropout)

    def validate_classifier(self) -> None:
        """Check the sequence-classification head's settings (``classifier_*``); ``ValueError`` if wrong."""
        _check_size("classifier_hidden_size", self.classifier_hidden_size, minimum=1)
        _check_fraction("classifier_dropout", self.classifier_dropout)

    def validate_total_size(self) -> None:
        """Refuse sizes that together describe more than `MAX_PARAMETERS` parameters, naming the fields that
        contribute most (see [`parameter_counts`])."""
        counts = self.parameter_counts()
        total = sum(counts.values())
        if total > MAX_PARAMETERS:
            largest = sorted(counts.items(), key=lambda item: -item[1])[:2]
            parts = "; ".join(f"{fields_}: {count:.3g}" for fields_, count in largest)
            raise ValueError(
                f"the config describes {total:.3g} parameters, more than {MAX_PARAMETERS:.0e} "
                f"({4 * MAX_PARAMETERS / 1e9:.0f} GB in float32); most from {parts}"
            )

    def parameter_counts(self) -> dict[str, int]:
        """Parameters of the biLM and of the heads that this config describes, by the fields that drive them.

        The biLM (``ElmoModel`` without its scalar mixes, which hold ``n_layers + 2`` numbers each), the LM
        softmax (if ``lm_vocab_size``), the tagger (its word embedding if ``tagger_word_input="embedding"``,
        BiLSTM, classifier and CRF) and the sequence classifier (``classifier_*``: its BiLSTM, then the sentence
        head's linear layer or ESIM's pair head, as ``classifier_head`` says), counted whichever head is built: the
        sum is an upper bound of any ELMo model's parameters with this config, exact for each part
        (tests/test_configuration.py checks it).
        """
        cd, p, d, h = self.char_embedding_dim, self.projection_dim, self.lstm_dim, self.tagger_hidden_size
        channels = sum(count for _, count in self.char_cnn_filters)
        labels = self.num_labels
        # The tagger's input: [x_k; ELMo_k], x_k being P (layer 0, one direction), an embedding or nothing.
        word = {"bilm": p, "embedding": self.tagger_word_embedding_dim}.get(self.tagger_word_input, 0)
        tagger_in = word + (2 * p if self.tagger_elmo_input else 0)
        tagger_lstm = sum(
            2 * 4 * h * ((tagger_in if layer == 0 else 2 * h) + h + 2) for layer in range(self.tagger_num_layers)
        )
        tagger_out = (2 * h + (2 * p if self.tagger_elmo_output else 0)) if self.tagger_num_layers else tagger_in
        # The sequence classifier: a one-layer BiLSTM over the 2P-wide mix, pooled (max and/or mean over 2C each).
        ch = self.classifier_hidden_size
        pooled = 2 * ch * (2 if self.classifier_pooling == "max_mean" else 1)
        return {
            "char_embedding_dim, char_cnn_filters": self.n_characters * cd
            + sum(count * (cd * width + 1) for width, count in self.char_cnn_filters),
            "char_cnn_filters, n_highway": self.n_highway * 2 * (channels * channels + channels),
            "char_cnn_filters, projection_dim": channels * p + p,
            # The word input (ELMoForManyLangs): its embedding and its columns of the projection.
            "word_vocab_size, word_embedding_dim": (self.word_vocab_size + p) * self.word_embedding_dim,
            # Per layer and direction: input and state kernels (P x 4D each), bias 4D, projection D x P.
            "lstm_dim, projection_dim, n_layers": self.n_layers * 2 * (2 * p * 4 * d + 4 * d + d * p),
            "lm_vocab_size, projection_dim": self.lm_vocab_size * (p + 1),
            "tagger_word_vocab_size, tagger_word_embedding_dim": (
                self.tagger_word_vocab_size * self.tagger_word_embedding_dim
                if self.tagger_word_input == "embedding"
                else 0
            ),
            "tagger_hidden_size, tagger_num_layers": tagger_lstm,
            "num_labels": tagger_out * labels + labels + ((labels + 2) * labels if self.use_crf else 0),
            "classifier_hidden_size": 2 * 4 * ch * (2 * p + ch + 2),
            # The sentence head's linear layer, or ESIM's pair head (esim_elmo.py): F (8C -> C), the composition
            # BiLSTM (C -> C), the MLP (8C -> C -> K). The model holds one of them (classifier_head).
            "classifier_head, classifier_pooling, num_labels": (
                pooled * labels + labels
                if self.classifier_head == "sentence"
                else 2 * (8 * ch * ch + ch) + 2 * 4 * ch * (2 * ch + 2) + ch * labels + labels
            ),
        }

    @property
    def hidden_size(self) -> int:
        """Width of every biLM layer's output: ``2 * projection_dim`` (forward and backward)."""
        return 2 * self.projection_dim

    @property
    def n_filters(self) -> int:
        """Channels of the character CNN: the sum of the filter counts."""
        return sum(n for _, n in self.char_cnn_filters)

    @classmethod
    def _dict_from_json_file(cls, json_file: str | os.PathLike) -> dict[str, Any]:
        """``config.json`` as a dict; ``ValueError`` naming the file if it nests too deeply to parse."""
        try:
            return super()._dict_from_json_file(json_file)
        except RecursionError:
            raise ValueError(f"{os.fspath(json_file)} nests too deeply to be a config") from None

    @classmethod
    def from_options(cls, options: str | os.PathLike | dict[str, Any], **kwargs) -> "ElmoConfig":
        """Build a config from an original ``options.json`` (a path or the parsed dict).

        ``kwargs`` override or add settings (e.g. ``num_output_representations=2``). A wrong type or value is a
        ``TypeError``/``ValueError`` that names the options key (e.g. ``lstm.dim``); ``NaN``/``Infinity`` (not
        JSON) and files nested too deeply to parse are ``ValueError``s. Nothing is allocated before the sizes
        are checked.
        """
        if not isinstance(options, dict):
            path = os.fspath(options)
            if not os.path.isfile(path):
                raise FileNotFoundError(f"options file not found: {path}")
            with open(path, encoding="utf-8") as f:
                options = _load_json(f, path)
        settings = options_to_config_kwargs(options)
        settings = {k: v for k, v in settings.items() if k not in kwargs}
        try:
            return cls(**settings, **kwargs)
        except (TypeError, ValueError) as error:
            message = str(error)
            # Name the options key that the faulty field came from.
            keys = {k: v for k, v in OPTIONS_KEYS.items() if k in settings}
            if keys:
                message = re.sub(r"\b(" + "|".join(keys) + r")\b", lambda m: keys[m.group(1)], message)
            raise type(error)(f"options.json: {message}") from None


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e400: valid JSON, but no float holds it
        raise ValueError(f"the number {text[:40]} is out of range")
    return value


def _load_json(file, path: str) -> Any:
    """Parse a JSON file strictly: ``NaN``/``Infinity`` and numbers beyond float range (``1e400``) refused, too
    deep a nesting refused, each as a ``ValueError`` naming the file."""
    try:
        return json.load(file, parse_constant=_refuse_constant, parse_float=_finite_float)
    except RecursionError:
        raise ValueError(f"options file {path} nests too deeply to be an options file") from None
    except UnicodeDecodeError as err:
        raise ValueError(f"options file {path} is not UTF-8 text: {err.reason}") from None
    except ValueError as err:  # json.JSONDecodeError, a refused constant, an int of too many digits
        raise ValueError(f"options file {path} is not valid JSON: {str(err)[:200]}") from None


def options_to_config_kwargs(options: dict[str, Any]) -> dict[str, Any]:
    """Map an original ``options.json`` dict to [`ElmoConfig`] arguments; name what is missing.

    Values are passed on as they are (no ``bool()``/``int()`` coercion): [`ElmoConfig`] checks their types.
    """

    def need(section: Any, key: str, where: str) -> Any:
        if not isinstance(section, dict):
            raise TypeError(
                f"options.json {where.rstrip('.') or 'top level'} must be a JSON object, got {_show(section)}"
            )
        if key not in section:
            raise ValueError(f"options.json is missing required key {where}{key}")
        return section[key]

    lstm = need(options, "lstm", "")
    cnn = need(options, "char_cnn", "")
    embedding = need(cnn, "embedding", "char_cnn.")
    need(lstm, "dim", "lstm.")  # lstm must be an object: checked before the optional keys are read
    return {
        "char_embedding_dim": need(embedding, "dim", "char_cnn.embedding."),
        "char_cnn_filters": need(cnn, "filters", "char_cnn."),
        "char_cnn_activation": need(cnn, "activation", "char_cnn."),
        "n_highway": need(cnn, "n_highway", "char_cnn."),
        "max_characters_per_token": cnn.get("max_characters_per_token", 50),
        "n_characters": cnn.get("n_characters", 262),
        "lstm_dim": need(lstm, "dim", "lstm."),
        "projection_dim": need(lstm, "projection_dim", "lstm."),
        "n_layers": need(lstm, "n_layers", "lstm."),
        "cell_clip": lstm.get("cell_clip"),
        "proj_clip": lstm.get("proj_clip"),
        "use_skip_connections": lstm.get("use_skip_connections", False),
    }


__all__ = ["MAX_PARAMETERS", "check_model_name", "SIZE_LIMITS", "ElmoConfig", "options_to_config_kwargs"]
