"""ELMo as the first module of a sentence-transformers model: text in, ELMo token vectors out.

Two ways, with the same vectors:

- [`elmo_transformer`] builds sentence-transformers' own ``Transformer`` module around [`ElmoModel`] (transformers'
  ``AutoModel`` finds it once ``modeling_elmo`` is imported). ``modules.json`` then names only sentence-transformers
  classes, so a saved model loads again with a plain ``SentenceTransformer(path)``, no ``trust_remote_code``:

      import modeling_elmo  # registers ELMo with AutoConfig, AutoModel and AutoTokenizer
      from sentence_transformers import SentenceTransformer
      from sentence_transformers.sentence_transformer.modules import Pooling
      from modeling_elmo.integrations.sentence_transformers import elmo_transformer

      elmo = elmo_transformer("demo")  # or a converted folder, a Hub id, a released model's name ("original")
      model = SentenceTransformer(modules=[elmo, Pooling(elmo.get_embedding_dimension(), "mean")])
      embeddings = model.encode(["The bank raised its rates .", "He sat on the river bank ."])  # (2, 2P)
      model.save("elmo-sentences")
      again = SentenceTransformer("elmo-sentences")

- [`ElmoModule`], this package's own module class. ``modules.json`` names it, and sentence-transformers >= 6.0
  imports a module class from outside its own namespace only with ``trust_remote_code=True``, also for a local
  folder (before 6.0 it loaded with a warning). It keeps ``freeze_bilm`` across saving, which the stock module
  cannot (see [`elmo_transformer`]). ``trust_remote_code=True`` runs code the folder chooses (the class its
  ``modules.json`` names, first from a Python file in the folder): pass it only for folders you made or trust.
"""

from __future__ import annotations

import os
from typing import Any

import torch

try:  # sentence-transformers >= 6.0
    from sentence_transformers.base.modules import Module
except ModuleNotFoundError as err:
    if err.name != "sentence_transformers" and not (err.name or "").startswith("sentence_transformers."):
        raise
    try:  # 5.x
        from sentence_transformers.models import Module
    except ModuleNotFoundError as err5:
        if err5.name != "sentence_transformers":
            raise
        raise ModuleNotFoundError(
            "modeling_elmo.integrations.sentence_transformers needs sentence-transformers: "
            'pip install "modeling-elmo[sentence-transformers]"',
            name="sentence_transformers",
        ) from None

from . import check_layer, resolve_model_path, select_layer


class ElmoModule(Module):
    """Words to ELMo vectors: ``token_embeddings`` ``(B, W, 2P)`` and the word ``attention_mask`` ``(B, W)``, which
    ``Pooling`` (mean, max, cls...) turns into a sentence vector.

    Args:
        model_name_or_path: a model folder (``elmo convert``, ``elmo train-lm``), a Hub id, a released model's name
            (downloaded and converted on first use, see ``elmo download --list``), or ``None`` / ``"demo"`` for the
            bundled demo model (a toy-sized biLM, not the released ELMo).
        layer: which vectors: ``"elmo"`` (the model's first scalar mix, which trains with the model when the
            biLM is frozen; untrained it weighs the layers equally), ``"average"`` (the mean of the ``L + 1``
            layers), ``"top"`` (the last LSTM layer), or a layer number ``0..L`` (0: the context-free vectors).
        max_seq_length: keep at most this many words of a text (``None``: all; ELMo has no length limit).
        freeze_bilm: keep the character encoder and the LSTMs fixed (``requires_grad=False``) when the model trains,
            as the paper does: only the scalar mix (and the modules after this one) learn, and the biLM runs without
            autograd. ``False`` fine-tunes the whole biLM.
        model_kwargs: passed to ``ElmoModel.from_pretrained`` (e.g. ``{"dtype": torch.bfloat16}``).
    """

    config_file_name = "elmo_module_config.json"
    config_keys = ["layer", "max_seq_length", "freeze_bilm"]
    modalities = ["text"]

    def __init__(
        self,
        model_name_or_path: str | os.PathLike | None = None,
        layer: str | int = "elmo",
        max_seq_length: int | None = None,
        freeze_bilm: bool = True,
        model_kwargs: dict[str, Any] | None = None,
    ):
        super().__init__()
        from ..modeling_elmo import ElmoModel
        from ..tokenization_elmo import ElmoTokenizer

        path = resolve_model_path(model_name_or_path)
        self.tokenizer = ElmoTokenizer.from_pretrained(path)
        self.elmo = ElmoModel.from_pretrained(path, **(model_kwargs or {}))
        config = self.elmo.config
        self.layer = check_layer(layer, config.n_layers, bool(self.elmo.scalar_mixes))
        if max_seq_length is not None and (not isinstance(max_seq_length, int) or max_seq_length < 1):
            raise ValueError(f"max_seq_length must be a positive integer or None, got {max_seq_length!r}")
        self.max_seq_length = max_seq_length
        self.freeze_bilm = bool(freeze_bilm)
        for part in (self.elmo.char_cnn, self.elmo.bilm):
            part.requires_grad_(not self.freeze_bilm)

    def get_embedding_dimension(self) -> int:
        """The width of the token vectors, ``2 * projection_dim`` (``[forward; backward]``)."""
        return 2 * self.elmo.config.projection_dim

    def get_word_embedding_dimension(self) -> int:  # the name before sentence-transformers 6.0
        return self.get_embedding_dimension()

    def preprocess(self, inputs: list[str], prompt: str | None = None, **kwargs) -> dict[str, torch.Tensor]:
        """Texts to the tokenizer's ``input_ids`` ``(B, W, C)`` and ``attention_mask`` ``(B, W)``; a ``prompt`` is put
        before each text."""
        texts = []
        for item in inputs:
            if not isinstance(item, str):
                raise TypeError(f"ElmoModule embeds texts (str), got {type(item).__name__}: {item!r}")
            texts.append(prompt + item if prompt else item)
        limit = {"truncation": True, "max_length": self.max_seq_length} if self.max_seq_length else {}
        batch = self.tokenizer(texts, padding=True, return_tensors="pt", **limit)
        ids, mask = batch["input_ids"], batch["attention_mask"]
        if ids.dim() != 3:  # texts without words pad to (B, 0)
            ids = ids.reshape(len(texts), -1, self.elmo.config.max_characters_per_token)
            mask = mask.reshape(ids.shape[:2])
        return {"input_ids": ids, "attention_mask": mask}

    def tokenize(self, texts: list[str], **kwargs) -> dict[str, torch.Tensor]:  # what sentence-transformers 5 calls
        return self.preprocess(texts, **kwargs)

    def forward(self, features: dict[str, torch.Tensor], **kwargs) -> dict[str, torch.Tensor]:
        """Adds ``token_embeddings`` ``(B, W, 2P)`` (zero at padded words) to ``features``."""
        out = self.elmo(
            features["input_ids"], attention_mask=features["attention_mask"], output_hidden_states=self.layer != "elmo"
        )
        features["token_embeddings"] = select_layer(out, self.layer)
        return features

    def save(self, output_path: str, *args, safe_serialization: bool = True, **kwargs) -> None:
        """The ELMo folder (``config.json``, weights, tokenizer) and this module's settings into ``output_path``."""
        self.elmo.save_pretrained(output_path, safe_serialization=safe_serialization)
        self.tokenizer.save_pretrained(output_path)
        self.save_config(output_path)

    @classmethod
    def load(
        cls,
        model_name_or_path: str,
        subfolder: str = "",
        token: bool | str | None = None,
        cache_folder: str | None = None,
        revision: str | None = None,
        local_files_only: bool = False,
        model_kwargs: dict[str, Any] | None = None,
        **kwargs,
    ) -> ElmoModule:
        """The module saved by [`save`] in ``subfolder`` of a saved sentence-transformers model (folder or Hub id)."""
        hub = dict(
            subfolder=subfolder,
            token=token,
            cache_folder=cache_folder,
            revision=revision,
            local_files_only=local_files_only,
        )
        config = cls.load_config(model_name_or_path, **hub)
        folder = cls.load_dir_path(model_name_or_path, **hub)
        settings = {key: config[key] for key in cls.config_keys if key in config}
        return cls(folder, model_kwargs=model_kwargs, **settings)


def _output_path(layer: str | int) -> str | list[str | int]:
    """Where ``layer`` sits in an ``ElmoModelOutput``, as the ``Transformer`` module's ``method_output_name``: a
    field or attribute name, or a path of keys (``["hidden_states", k]``: layer ``k`` of the ``L + 1``)."""
    if layer == "elmo":
        return "elmo"
    if layer == "average":
        return "layer_average"
    return ["hidden_states", -1 if layer == "top" else layer]


def elmo_transformer(
    model_name_or_path: str | os.PathLike | None = None,
    layer: str | int = "elmo",
    max_seq_length: int | None = None,
    freeze_bilm: bool = True,
    model_kwargs: dict[str, Any] | None = None,
):
    """sentence-transformers' stock ``Transformer`` module, holding [`ElmoModel`] and [`ElmoTokenizer`]: texts to
    ``token_embeddings`` ``(B, W, 2P)`` and the word ``attention_mask`` ``(B, W)``, for ``Pooling`` to follow.

    The same vectors as [`ElmoModule`] with the same settings. The choice of ``layer`` is saved as the module's
    ``modality_config`` (the output field it reads), ``max_seq_length`` as the tokenizer's ``model_max_length``, so
    that ``SentenceTransformer(path)`` rebuilds it from the saved folder with sentence-transformers' own classes
    alone; only ``import modeling_elmo`` must have run, for transformers' Auto classes to know ELMo.

    Args:
        model_name_or_path, layer, max_seq_length, model_kwargs: as for [`ElmoModule`]. ``layer="average"`` turns on
            the config's ``output_hidden_states`` (saved with the model), as the mean needs every layer.
        freeze_bilm: as for [`ElmoModule`], for this module. The stock module does not save ``requires_grad``: a
            model loaded again trains its whole biLM unless [`set_bilm_frozen`] freezes it again.

    Returns:
        a ``sentence_transformers`` ``Transformer`` (needs sentence-transformers >= 6.0).
    """
    try:
        from sentence_transformers.base.modules import Transformer
    except ModuleNotFoundError as err:
        if not (err.name or "").startswith("sentence_transformers"):
            raise
        raise ImportError(
            "elmo_transformer needs sentence-transformers >= 6.0 (its Transformer module's modality_config); "
            "with 5.x use ElmoModule, which 5.x loads again without trust_remote_code"
        ) from None
    from ..configuration_elmo import ElmoConfig

    path = resolve_model_path(model_name_or_path)
    config = ElmoConfig.from_pretrained(path)
    layer = check_layer(layer, config.n_layers, config.num_output_representations > 0)
    if max_seq_length is not None and (not isinstance(max_seq_length, int) or max_seq_length < 1):
        raise ValueError(f"max_seq_length must be a positive integer or None, got {max_seq_length!r}")
    module = Transformer(
        path,
        model_kwargs=model_kwargs,
        config_kwargs={"output_hidden_states": True} if layer == "average" else None,
        modality_config={"text": {"method": "forward", "method_output_name": _output_path(layer)}},
        module_output_name="token_embeddings",
        max_seq_length=max_seq_length,
    )
    set_bilm_frozen(module, freeze_bilm)
    return module


def set_bilm_frozen(module, frozen: bool = True) -> None:
    """Freeze (``requires_grad=False``) or unfreeze the character encoder and the LSTMs of the [`ElmoModel`] in a
    ``Transformer`` module from [`elmo_transformer`], e.g. ``set_bilm_frozen(model[0])`` after loading a saved model.
    The scalar mixes stay trainable."""
    from ..modeling_elmo import ElmoModel

    model = getattr(module, "auto_model", None)
    if not isinstance(model, ElmoModel):
        raise TypeError(
            f"set_bilm_frozen takes a sentence-transformers Transformer module holding an ElmoModel, got "
            f"{type(module).__name__}" + (f" holding {type(model).__name__}" if model is not None else "")
        )
    for part in (model.char_cnn, model.bilm):
        part.requires_grad_(not frozen)


__all__ = ["ElmoModule", "elmo_transformer", "set_bilm_frozen"]
