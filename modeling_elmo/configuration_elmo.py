"""ELMo configuration: the biLM's sizes (everything an original ``options.json`` holds) and the
settings of the task-specific scalar mixes."""

from __future__ import annotations

import json
import os
from dataclasses import field
from typing import Any

from transformers import PreTrainedConfig

from .hub_elmo import ELMO_AUTO_MAP

_ACTIVATIONS = ("relu", "tanh")
_LAYER_NORM_MODES = (None, "batch", "token")
_TAGGER_WORD_INPUTS = ("embedding", "bilm", None)
_CRF_CONSTRAINTS = ("auto", "BIO", None)


def _default_filters() -> list[list[int]]:
    return [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]]


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
            options files say 261 (training) or 262 (inference); both mean 262 rows here.
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
            scalar mixes are trained either way.
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
    """

    model_type = "elmo"
    attribute_map = {"num_hidden_layers": "n_layers"}
    # Saving copies this file (and the rest of the shipped code, see `save_pretrained`) for `trust_remote_code`.
    _auto_class = "AutoConfig"

    char_embedding_dim: int = 16
    char_cnn_filters: list = field(default_factory=_default_filters)
    char_cnn_activation: str = "relu"
    n_highway: int = 2
    max_characters_per_token: int = 50
    n_characters: int = 262
    lstm_dim: int = 4096
    projection_dim: int = 512
    n_layers: int = 2
    cell_clip: float | None = 3.0
    proj_clip: float | None = 3.0
    use_skip_connections: bool = True
    num_output_representations: int = 1
    scalar_mix_layer_norm: str | None = None
    elmo_dropout: float = 0.5
    scalar_mix_l2_coef: float = 0.0
    stateful: bool = False
    initializer_range: float = 0.05
    # Tagging head (ElmoForTokenClassification).
    freeze_bilm: bool = True
    tagger_word_input: str | None = "bilm"
    tagger_word_vocab_size: int = 0
    tagger_word_embedding_dim: int = 100
    tagger_elmo_input: bool = True
    tagger_elmo_output: bool = False
    tagger_hidden_size: int = 200
    tagger_num_layers: int = 2
    tagger_dropout: float = 0.5
    use_crf: bool = True
    crf_constraints: str | None = "auto"
    # Language-model head (ElmoForPreTraining).
    lm_vocab_size: int = 0
    lm_num_samples: int = 8192
    lm_dropout: float = 0.1
    lm_bos_vocab_id: int = 0
    lm_eos_vocab_id: int = 1

    def __post_init__(self, **kwargs):
        self.char_cnn_filters = [[int(w), int(n)] for w, n in _check_filters(self.char_cnn_filters)]
        if self.n_characters == 261:  # training-time options count without the padding row
            self.n_characters = 262
        self._validate()
        super().__post_init__(**kwargs)
        # Every config names all ELMo classes, so that any saved folder loads with every Auto class and
        # `trust_remote_code=True` (a head's save would otherwise only write its own entry).
        self.auto_map = {**ELMO_AUTO_MAP, **(getattr(self, "auto_map", None) or {})}

    def _validate(self) -> None:
        if self.char_cnn_activation not in _ACTIVATIONS:
            raise ValueError(f"char_cnn_activation must be one of {_ACTIVATIONS}, got {self.char_cnn_activation!r}")
        if self.scalar_mix_layer_norm not in _LAYER_NORM_MODES:
            raise ValueError(
                f"scalar_mix_layer_norm must be one of {_LAYER_NORM_MODES}, got {self.scalar_mix_layer_norm!r}"
            )
        for name in ("char_embedding_dim", "lstm_dim", "projection_dim", "n_layers", "max_characters_per_token"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if not isinstance(self.n_highway, int) or self.n_highway < 0:
            raise ValueError(f"n_highway must be a non-negative integer, got {self.n_highway!r}")
        if self.n_characters != 262:
            raise ValueError(f"n_characters must be 261 or 262 (the ELMo character set), got {self.n_characters!r}")
        widest = max(w for w, _ in self.char_cnn_filters)
        if widest > self.max_characters_per_token:
            raise ValueError(
                f"a filter of width {widest} is wider than max_characters_per_token={self.max_characters_per_token}"
            )
        for name in ("cell_clip", "proj_clip"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ValueError(f"{name} must be positive or None (no clipping), got {value!r}")
        if self.num_output_representations < 0:
            raise ValueError("num_output_representations must be >= 0")
        if not 0.0 <= self.elmo_dropout < 1.0:
            raise ValueError(f"elmo_dropout must be in [0, 1), got {self.elmo_dropout!r}")
        self.validate_tagger()
        self.validate_lm()

    def validate_lm(self) -> None:
        """Check the language-model head's settings (``lm_*``); ``ValueError`` if wrong."""
        for name in ("lm_vocab_size", "lm_num_samples", "lm_bos_vocab_id", "lm_eos_vocab_id"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
        if not 0.0 <= self.lm_dropout < 1.0:
            raise ValueError(f"lm_dropout must be in [0, 1), got {self.lm_dropout!r}")
        if self.lm_vocab_size and max(self.lm_bos_vocab_id, self.lm_eos_vocab_id) >= self.lm_vocab_size:
            raise ValueError(
                f"lm_bos_vocab_id ({self.lm_bos_vocab_id}) and lm_eos_vocab_id ({self.lm_eos_vocab_id}) must be ids "
                f"of the LM vocabulary (lm_vocab_size={self.lm_vocab_size})"
            )

    def validate_tagger(self) -> None:
        """Check the tagging-head settings (``tagger_*``, ``use_crf``, ``crf_constraints``); ``ValueError`` if wrong."""
        if self.tagger_word_input not in _TAGGER_WORD_INPUTS:
            raise ValueError(f"tagger_word_input must be one of {_TAGGER_WORD_INPUTS}, got {self.tagger_word_input!r}")
        if self.crf_constraints not in _CRF_CONSTRAINTS:
            raise ValueError(f"crf_constraints must be one of {_CRF_CONSTRAINTS}, got {self.crf_constraints!r}")
        for name in ("tagger_word_vocab_size", "tagger_num_layers"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
        for name in ("tagger_word_embedding_dim", "tagger_hidden_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.tagger_word_input == "embedding" and self.tagger_word_vocab_size < 1:
            raise ValueError("tagger_word_input='embedding' needs tagger_word_vocab_size >= 1 (len(tokenizer))")
        if self.tagger_word_input is None and not self.tagger_elmo_input:
            raise ValueError("the tagger has no input: set tagger_word_input or tagger_elmo_input=True")
        if self.tagger_elmo_output and self.tagger_num_layers == 0:
            raise ValueError("tagger_elmo_output needs a task BiLSTM (tagger_num_layers >= 1)")
        if not 0.0 <= self.tagger_dropout < 1.0:
            raise ValueError(f"tagger_dropout must be in [0, 1), got {self.tagger_dropout!r}")
        if self.scalar_mix_l2_coef < 0:
            raise ValueError(f"scalar_mix_l2_coef must be >= 0, got {self.scalar_mix_l2_coef!r}")

    def save_pretrained(self, save_directory: str | os.PathLike, push_to_hub: bool = False, **kwargs) -> None:
        """As ``PreTrainedConfig.save_pretrained``, and make ``save_directory`` Hub-ready.

        Copies the shipped code files (configuration, models, heads, tokenizer, pipeline) next to
        ``config.json``, completes ``auto_map`` (and ``custom_pipelines`` for a token classifier), and writes a
        model card ``README.md`` unless the folder has a README that is not a generated card. Every model's
        ``save_pretrained`` calls this.
        """
        if not os.path.isfile(save_directory):  # a file: the base class reports the error
            from .hub_elmo import prepare_hub_folder

            prepare_hub_folder(self, save_directory)
        super().save_pretrained(save_directory, push_to_hub=push_to_hub, **kwargs)

    @property
    def hidden_size(self) -> int:
        """Width of every biLM layer's output: ``2 * projection_dim`` (forward and backward)."""
        return 2 * self.projection_dim

    @property
    def n_filters(self) -> int:
        """Channels of the character CNN: the sum of the filter counts."""
        return sum(n for _, n in self.char_cnn_filters)

    @classmethod
    def from_options(cls, options: str | os.PathLike | dict[str, Any], **kwargs) -> ElmoConfig:
        """Build a config from an original ``options.json`` (a path or the parsed dict).

        ``kwargs`` override or add settings (e.g. ``num_output_representations=2``).
        """
        if not isinstance(options, dict):
            path = os.fspath(options)
            if not os.path.isfile(path):
                raise FileNotFoundError(f"options file not found: {path}")
            with open(path, encoding="utf-8") as f:
                try:
                    options = json.load(f)
                except json.JSONDecodeError as err:
                    raise ValueError(f"options file {path} is not valid JSON: {err}") from err
        return cls(**options_to_config_kwargs(options), **kwargs)


def _check_filters(filters: Any) -> list:
    try:
        pairs = [tuple(pair) for pair in filters]
    except TypeError:
        pairs = None
    if not pairs or any(len(p) != 2 or any(isinstance(v, bool) or int(v) != v or v < 1 for v in p) for p in pairs):
        raise ValueError(f"char_cnn_filters must be a non-empty list of [width, count] positive pairs, got {filters!r}")
    return pairs


def options_to_config_kwargs(options: dict[str, Any]) -> dict[str, Any]:
    """Map an original ``options.json`` dict to [`ElmoConfig`] arguments; name what is missing."""

    def need(section: dict, key: str, where: str):
        if not isinstance(section, dict) or key not in section:
            raise ValueError(f"options.json is missing required key {where}{key}")
        return section[key]

    lstm = need(options, "lstm", "")
    cnn = need(options, "char_cnn", "")
    embedding = need(cnn, "embedding", "char_cnn.")
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
        "use_skip_connections": bool(lstm.get("use_skip_connections", False)),
    }


__all__ = ["ElmoConfig", "options_to_config_kwargs"]
