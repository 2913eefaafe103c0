"""ELMo as a spaCy pipeline component: contextual token, span and doc vectors, and similarities from them.

    import spacy
    import modeling_elmo.integrations.spacy  # registers the factory (an installed package also does it by entry point)

    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"model": "demo", "layer": "elmo"})
    doc = nlp("The bank raised its rates .")
    doc[1].vector        # (2P,) float32: the ELMo vector of "bank" in this sentence
    doc.similarity(nlp("He sat on the river bank ."))

The component runs the biLM over each doc's words (spaCy's tokens, without whitespace tokens) and stores the vectors
in ``doc._.elmo`` (``(len(doc), 2P)``, zero rows for whitespace tokens). It sets the doc's user hooks, so that
``vector``, ``has_vector`` and ``similarity`` of the doc, its spans and its tokens use them: a token's vector is its
row, a span's or a doc's the mean of its non-whitespace tokens' rows, and similarity is the cosine of two vectors
(0.0 when one of them is zero). Hooks are not serialized: a doc read back from a ``DocBin`` keeps ``doc._.elmo`` but
not the hooks.

Importing this module registers the ``"elmo"`` factory; the package also declares it as a ``spacy_factories`` entry
point, which spaCy imports when it builds a pipeline. torch and the model load only when the component is created.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np

try:
    from spacy.language import Language
    from spacy.tokens import Doc
except ModuleNotFoundError as err:
    if err.name != "spacy":
        raise
    raise ModuleNotFoundError(
        'modeling_elmo.integrations.spacy needs spaCy: pip install "modeling-elmo[spacy]"', name="spacy"
    ) from None

from . import check_device, check_layer, resolve_model_path, select_layer

if not Doc.has_extension("elmo"):
    Doc.set_extension("elmo", default=None)


def _vector_of(rows: np.ndarray, tokens) -> np.ndarray:
    """The mean of the rows of the non-whitespace ``tokens`` (zeros if there are none)."""
    keep = [token.i for token in tokens if not token.is_space]
    if not keep:
        return np.zeros(rows.shape[1], dtype=np.float32)
    return rows[keep].mean(axis=0)


def _rows(doc: Doc) -> np.ndarray:
    rows = doc._.elmo
    if rows is None:
        raise ValueError("this doc has no ELMo vectors (doc._.elmo is None): run it through the 'elmo' component")
    return rows


def _doc_vector(doc: Doc) -> np.ndarray:
    return _vector_of(_rows(doc), doc)


def _span_vector(span) -> np.ndarray:
    return _vector_of(_rows(span.doc), span)


def _token_vector(token) -> np.ndarray:
    return _rows(token.doc)[token.i]


def _has_vector(obj) -> bool:
    return bool(np.any(obj.vector))


def _similarity(obj, other) -> float:
    """The cosine of the two vectors; 0.0 when one of them is zero."""
    a, b = np.asarray(obj.vector, dtype=np.float64), np.asarray(other.vector, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"cannot compare vectors of {a.shape[0]} and {b.shape[0]} values (ELMo and other vectors?)")
    norms = np.linalg.norm(a) * np.linalg.norm(b)
    return float(a @ b / norms) if norms else 0.0


class ElmoComponent:
    """The ``"elmo"`` pipeline component (see the module's docstring); made by [`make_elmo`].

    Args:
        name: the component's name in the pipeline.
        model: a model folder, Hub id, released model's name, or ``"demo"`` (the bundled toy-sized demo model).
        layer: ``"elmo"`` (the first scalar mix), ``"average"`` (the mean of the ``L + 1`` layers), ``"top"``, or a
            layer number ``0..L`` (0: the context-free vectors).
        batch_size: docs per forward pass.
        device: ``"cpu"``, ``"cuda"``, ``"cuda:1"``, ``"mps"``; checked before the model loads (``ValueError`` for
            ``"meta"`` or a device this machine does not have).
    """

    def __init__(self, name: str, model: str, layer: str | int, batch_size: int, device: str):
        from ..modeling_elmo import ElmoModel
        from ..tokenization_elmo import ElmoTokenizer

        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
        device = check_device(device)
        path = resolve_model_path(model)
        self.name = name
        self.tokenizer = ElmoTokenizer.from_pretrained(path)
        self.model = ElmoModel.from_pretrained(path).to(device).eval()
        self.layer = check_layer(layer, self.model.config.n_layers, bool(self.model.scalar_mixes))
        self.batch_size = batch_size

    def __call__(self, doc: Doc) -> Doc:
        self._set_vectors([doc])
        return doc

    def pipe(self, stream: Iterable[Doc], batch_size: int | None = None) -> Iterator[Doc]:
        size = batch_size or self.batch_size
        batch: list[Doc] = []
        for doc in stream:
            batch.append(doc)
            if len(batch) == size:
                self._set_vectors(batch)
                yield from batch
                batch = []
        if batch:
            self._set_vectors(batch)
            yield from batch

    def _set_vectors(self, docs: list[Doc]) -> None:
        """Run the biLM over the docs' non-whitespace tokens, one doc per batch row, and set ``doc._.elmo`` and the
        hooks."""
        import torch

        positions = [[token.i for token in doc if not token.is_space] for doc in docs]
        words = [[doc[i].text for i in kept] for doc, kept in zip(docs, positions, strict=True)]
        width = 2 * self.model.config.projection_dim
        batch = self.tokenizer(words, is_split_into_words=True, padding=True, return_tensors="pt")
        ids, mask = batch["input_ids"], batch["attention_mask"]
        if ids.dim() != 3:  # no doc has a word: (B, 0)
            ids = ids.reshape(len(docs), -1, self.model.config.max_characters_per_token)
            mask = mask.reshape(ids.shape[:2])
        with torch.inference_mode():
            out = self.model(
                ids.to(self.model.device),
                attention_mask=mask.to(self.model.device),
                output_hidden_states=self.layer != "elmo",
            )
            vectors = select_layer(out, self.layer).float().cpu().numpy()  # (B, W, 2P)
        for row, (doc, kept) in enumerate(zip(docs, positions, strict=True)):
            rows = np.zeros((len(doc), width), dtype=np.float32)
            rows[kept] = vectors[row, : len(kept)]
            doc._.elmo = rows
            for hooks, vector in (
                (doc.user_hooks, _doc_vector),
                (doc.user_span_hooks, _span_vector),
                (doc.user_token_hooks, _token_vector),
            ):
                hooks["vector"] = vector
                hooks["has_vector"] = _has_vector
                hooks["similarity"] = _similarity


@Language.factory(
    "elmo",
    default_config={"model": "demo", "layer": "elmo", "batch_size": 32, "device": "cpu"},
    assigns=["doc._.elmo"],
)
def make_elmo(nlp: Language, name: str, model: str, layer: str | int, batch_size: int, device: str) -> ElmoComponent:
    """The ``"elmo"`` factory: ``nlp.add_pipe("elmo", config={"model": ..., "layer": ..., "batch_size": ...,
    "device": ...})``; see [`ElmoComponent`]."""
    return ElmoComponent(name, model, layer, batch_size, device)


__all__ = ["ElmoComponent", "make_elmo"]
