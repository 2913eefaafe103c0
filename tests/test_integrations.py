"""The plug-ins with the real libraries: ELMo as a sentence-transformers module and as a spaCy component."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from modeling_elmo import ElmoModel, ElmoTokenizer
from modeling_elmo.demo_models.model import demo_model_path

pytestmark = pytest.mark.usefixtures("one_thread")
REPO = Path(__file__).resolve().parents[1]
SENTENCES = ["The bank raised its interest rate .", "He sat on the bank of the river .", "Rates rose ."]


def _require(module: str, extra: str):
    """Import ``module``; the extras are part of [dev], so CI (CI=true, ELMO_REQUIRE_SHARED=1) must have them."""
    if os.environ.get("CI") == "true" or os.environ.get("ELMO_REQUIRE_SHARED") == "1":
        import importlib

        return importlib.import_module(module)
    return pytest.importorskip(module, reason=f"needs the [{extra}] extra")


def _pooling():
    try:  # sentence-transformers >= 6.0
        from sentence_transformers.sentence_transformer.modules import Pooling
    except ImportError:
        from sentence_transformers.models import Pooling
    return Pooling


@pytest.fixture(scope="module")
def demo():
    """The demo model and its tokenizer, loaded apart from the plug-ins: the reference."""
    return ElmoModel.from_pretrained(demo_model_path()).eval(), ElmoTokenizer.from_pretrained(demo_model_path())


def _reference_layers(demo, sentences: list[list[str]]):
    """``(hidden_states, elmo, mask)`` of the demo model for word lists, one padded batch."""
    model, tokenizer = demo
    batch = tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt")
    with torch.no_grad():
        out = model(**batch, output_hidden_states=True)
    return out.hidden_states, out.elmo, out.mask.bool()


# Batches of other shapes change float32 sums in the last bits: measured at most 3.6e-7 between the plug-ins' batches
# and the reference's here (values up to 4), and up to 1.4e-6 for single values of layer 0 (test_static_vectors);
# 1e-5 is the batch-invariance bound the docs state (7.2e-7 seen on an AMX Xeon).
ATOL = 1e-5


# ---------------------------------------------------------------------------------------------
# sentence-transformers
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("layer", ["elmo", "average", "top", 0, 1])
def test_sentence_transformer_encodes_with_elmo(demo, layer):
    st = _require("sentence_transformers", "sentence-transformers")
    Pooling = _pooling()
    from modeling_elmo.integrations.sentence_transformers import ElmoModule

    elmo = ElmoModule("demo", layer=layer)
    model = st.SentenceTransformer(modules=[elmo, Pooling(elmo.get_embedding_dimension(), "mean")], device="cpu")
    got = model.encode(SENTENCES, convert_to_numpy=True, batch_size=2)
    tokenizer = demo[1]
    layers, mix, mask = _reference_layers(demo, [tokenizer.tokenize(s) for s in SENTENCES])
    chosen = {"elmo": mix, "average": torch.stack(layers).mean(0), "top": layers[-1]}.get(layer)
    chosen = layers[layer] if chosen is None else chosen
    expected = (chosen * mask.unsqueeze(-1)).sum(1) / mask.sum(1, keepdim=True)  # the mean over each sentence's words
    assert got.shape == (3, 2 * demo[0].config.projection_dim)
    np.testing.assert_allclose(got, expected.numpy(), rtol=0, atol=ATOL)


def test_sentence_transformer_saves_and_loads(tmp_path):
    st = _require("sentence_transformers", "sentence-transformers")
    Pooling = _pooling()
    from modeling_elmo.integrations.sentence_transformers import ElmoModule

    elmo = ElmoModule(demo_model_path(), layer="top", max_seq_length=4)
    model = st.SentenceTransformer(modules=[elmo, Pooling(elmo.get_embedding_dimension(), "max")], device="cpu")
    before = model.encode(SENTENCES, convert_to_numpy=True)
    model.save(str(tmp_path / "st"))
    # sentence-transformers >= 6.0 imports a module class from outside its namespace only with trust_remote_code
    # (docs/integrations.md); the class comes from this installed package, not from the folder.
    trust = {"trust_remote_code": True} if int(st.__version__.split(".")[0]) >= 6 else {}
    again = st.SentenceTransformer(str(tmp_path / "st"), device="cpu", **trust)
    assert type(again[0]) is ElmoModule and again[0].layer == "top" and again.max_seq_length == 4
    assert again[0].freeze_bilm and not any(p.requires_grad for p in again[0].elmo.bilm.parameters())
    np.testing.assert_array_equal(again.encode(SENTENCES, convert_to_numpy=True), before)
    # max_seq_length=4 keeps the first 4 words: the same as embedding those words alone.
    short = model.encode(["The bank raised its"], convert_to_numpy=True)
    np.testing.assert_allclose(before[0], short[0], rtol=0, atol=ATOL)


def test_sentence_transformer_trains_the_scalar_mix_of_a_frozen_bilm():
    st = _require("sentence_transformers", "sentence-transformers")
    from modeling_elmo.integrations.sentence_transformers import ElmoModule

    elmo = ElmoModule("demo")  # layer "elmo", freeze_bilm=True: the paper's recipe
    model = st.SentenceTransformer(modules=[elmo, _pooling()(elmo.get_embedding_dimension(), "mean")], device="cpu")
    model.train()
    features = model.preprocess(SENTENCES)
    model(features)["sentence_embedding"].pow(2).sum().backward()
    mix = elmo.elmo.scalar_mixes[0]
    assert mix.scalar_parameters.grad is not None and mix.scalar_parameters.grad.abs().sum() > 0
    assert mix.gamma.grad is not None
    assert all(p.grad is None for p in elmo.elmo.char_cnn.parameters())
    assert all(p.grad is None for p in elmo.elmo.bilm.parameters())
    unfrozen = ElmoModule("demo", freeze_bilm=False)
    unfrozen(unfrozen.preprocess(SENTENCES))["token_embeddings"].sum().backward()
    assert all(p.grad is not None for p in unfrozen.elmo.char_cnn.parameters())


def test_sentence_transformer_module_refuses_bad_settings():
    _require("sentence_transformers", "sentence-transformers")
    from modeling_elmo.integrations.sentence_transformers import ElmoModule

    with pytest.raises(ValueError, match="layer must be one of"):
        ElmoModule("demo", layer=3)  # the demo model has layers 0..2
    with pytest.raises(ValueError, match="max_seq_length"):
        ElmoModule("demo", max_seq_length=0)


def _require_st6():
    """sentence-transformers >= 6.0, whose stock Transformer module takes a ``modality_config``."""
    st = _require("sentence_transformers", "sentence-transformers")
    if int(st.__version__.split(".")[0]) < 6:
        pytest.skip('elmo_transformer needs sentence-transformers >= 6.0: pip install -U "sentence-transformers>=6"')
    return st


@pytest.mark.parametrize("layer", ["elmo", "average", "top", 0, 1])
def test_stock_transformer_module_encodes_with_elmo(demo, layer):
    st = _require_st6()
    from modeling_elmo.integrations.sentence_transformers import elmo_transformer

    elmo = elmo_transformer("demo", layer=layer)
    assert type(elmo).__module__.startswith("sentence_transformers.")  # the stock class, not a subclass
    assert elmo.get_embedding_dimension() == 2 * demo[0].config.projection_dim
    model = st.SentenceTransformer(modules=[elmo, _pooling()(elmo.get_embedding_dimension(), "mean")], device="cpu")
    got = model.encode(SENTENCES, convert_to_numpy=True, batch_size=2)
    tokenizer = demo[1]
    layers, mix, mask = _reference_layers(demo, [tokenizer.tokenize(s) for s in SENTENCES])
    chosen = {"elmo": mix, "average": torch.stack(layers).mean(0), "top": layers[-1]}.get(layer)
    chosen = layers[layer] if chosen is None else chosen
    expected = (chosen * mask.unsqueeze(-1)).sum(1) / mask.sum(1, keepdim=True)
    np.testing.assert_allclose(got, expected.numpy(), rtol=0, atol=ATOL)


@pytest.mark.parametrize("layer", ["top", "average"])
def test_stock_transformer_module_loads_without_trust_remote_code(tmp_path, layer):
    st = _require_st6()
    from modeling_elmo.integrations.sentence_transformers import ElmoModule, elmo_transformer

    elmo = elmo_transformer(demo_model_path(), layer=layer, max_seq_length=4)
    model = st.SentenceTransformer(modules=[elmo, _pooling()(elmo.get_embedding_dimension(), "max")], device="cpu")
    before = model.encode(SENTENCES, convert_to_numpy=True)
    folder = tmp_path / "st"
    model.save(str(folder))
    types = [entry["type"] for entry in json.loads((folder / "modules.json").read_text())]
    assert all(t.startswith("sentence_transformers.") for t in types), types
    again = st.SentenceTransformer(str(folder), device="cpu")  # no trust_remote_code
    assert again.max_seq_length == 4
    np.testing.assert_array_equal(again.encode(SENTENCES, convert_to_numpy=True), before)
    # The same vectors as ElmoModule with the same settings, and max_seq_length=4 keeps the first 4 words.
    plugin = ElmoModule(demo_model_path(), layer=layer, max_seq_length=4)
    reference = st.SentenceTransformer(modules=[plugin, _pooling()(plugin.get_embedding_dimension(), "max")])
    np.testing.assert_array_equal(reference.encode(SENTENCES, convert_to_numpy=True), before)
    short = model.encode(["The bank raised its"], convert_to_numpy=True)
    np.testing.assert_allclose(before[0], short[0], rtol=0, atol=ATOL)


@pytest.mark.slow  # issue 51: a fresh interpreter
def test_stock_transformer_module_loads_in_a_fresh_process(tmp_path):
    """The contract for a saved folder: ``import modeling_elmo`` (for transformers' Auto classes), then a plain
    ``SentenceTransformer(path)``, in a process that never built the module."""
    st = _require_st6()
    from modeling_elmo.integrations.sentence_transformers import elmo_transformer

    elmo = elmo_transformer("demo")
    model = st.SentenceTransformer(modules=[elmo, _pooling()(elmo.get_embedding_dimension(), "mean")], device="cpu")
    before = model.encode(SENTENCES, convert_to_numpy=True)
    model.save(str(tmp_path / "st"))
    script = textwrap.dedent(
        f"""
        import sys
        import numpy as np
        import modeling_elmo
        from sentence_transformers import SentenceTransformer
        model = SentenceTransformer({str(tmp_path / "st")!r}, device="cpu")
        assert "modeling_elmo.integrations" not in " ".join(sys.modules), "the plug-in module was imported"
        np.save({str(tmp_path / "again.npy")!r}, model.encode({SENTENCES!r}, convert_to_numpy=True))
        """
    )
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    subprocess.run([sys.executable, "-c", script], check=True, env=env, cwd=tmp_path, timeout=300)
    np.testing.assert_array_equal(np.load(tmp_path / "again.npy"), before)


def test_elmo_module_folder_needs_trust_remote_code(tmp_path):
    """Why the stock route exists: a folder naming ElmoModule is refused by sentence-transformers >= 6.0 without
    trust_remote_code (its util/misc.py import_module_class)."""
    st = _require_st6()
    from modeling_elmo.integrations.sentence_transformers import ElmoModule

    elmo = ElmoModule("demo")
    st.SentenceTransformer(modules=[elmo, _pooling()(elmo.get_embedding_dimension(), "mean")]).save(str(tmp_path))
    with pytest.raises(ValueError, match="trust_remote_code"):
        st.SentenceTransformer(str(tmp_path), device="cpu")


def test_stock_transformer_module_freezes_the_bilm():
    _require_st6()
    from modeling_elmo.integrations.sentence_transformers import elmo_transformer, set_bilm_frozen

    elmo = elmo_transformer("demo")  # freeze_bilm=True
    model = elmo.auto_model
    assert not any(p.requires_grad for part in (model.char_cnn, model.bilm) for p in part.parameters())
    assert all(p.requires_grad for p in model.scalar_mixes.parameters())
    set_bilm_frozen(elmo, False)
    assert all(p.requires_grad for part in (model.char_cnn, model.bilm) for p in part.parameters())
    assert all(p.requires_grad for p in elmo_transformer("demo", freeze_bilm=False).auto_model.bilm.parameters())
    with pytest.raises(TypeError, match="Transformer module holding an ElmoModel"):
        set_bilm_frozen(torch.nn.Linear(2, 2))


def test_stock_transformer_module_refuses_bad_settings():
    _require_st6()
    from modeling_elmo.integrations.sentence_transformers import elmo_transformer

    with pytest.raises(ValueError, match="layer must be one of"):
        elmo_transformer("demo", layer=3)
    with pytest.raises(ValueError, match="max_seq_length"):
        elmo_transformer("demo", max_seq_length=0)


# ---------------------------------------------------------------------------------------------
# spaCy
# ---------------------------------------------------------------------------------------------


def _cosine(a, b) -> float:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


@pytest.fixture(scope="module")
def nlp():
    spacy = _require("spacy", "spacy")
    import modeling_elmo.integrations.spacy  # noqa: F401  # registers the factory

    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"model": "demo", "layer": "average", "batch_size": 2})
    return nlp


def test_spacy_token_and_doc_vectors_are_elmo(nlp, demo):
    text_a, text_b = "The bank raised its interest rate.", "He sat on the bank of the river."
    a, b = nlp(text_a), nlp(text_b)
    words_a, words_b = [t.text for t in a], [t.text for t in b]
    layers, _, _ = _reference_layers(demo, [words_a, words_b])
    average = torch.stack(layers).mean(0).numpy()
    np.testing.assert_allclose(a._.elmo, average[0, : len(a)], rtol=0, atol=ATOL)
    np.testing.assert_allclose(a[1].vector, average[0, 1], rtol=0, atol=ATOL)
    np.testing.assert_allclose(a.vector, average[0, : len(a)].mean(0), rtol=0, atol=ATOL)
    np.testing.assert_allclose(a[1:3].vector, average[0, 1:3].mean(0), rtol=0, atol=ATOL)
    assert a[1].has_vector and a.has_vector
    # The similarities are the cosines of those vectors (spaCy's own would use its (empty) vectors table).
    bank_a, bank_b = a[1], b[4]
    assert bank_a.text == bank_b.text == "bank"
    assert bank_a.similarity(bank_b) == pytest.approx(_cosine(average[0, 1], average[1, 4]), abs=1e-5)
    assert a.similarity(b) == pytest.approx(
        _cosine(average[0, : len(a)].mean(0), average[1, : len(b)].mean(0)), abs=1e-5
    )
    assert a[0:3].similarity(b[0:3]) == pytest.approx(_cosine(average[0, :3].mean(0), average[1, :3].mean(0)), abs=1e-5)
    # In context: the same word gets two vectors.
    assert bank_a.similarity(bank_b) < 0.999


def test_spacy_whitespace_tokens_and_batches(nlp, demo):
    texts = ["Rates rose .\n\nThey fell .", "", "  ", "One"]
    piped = list(nlp.pipe(texts, batch_size=3))
    single = [nlp(text) for text in texts]
    for doc, alone in zip(piped, single, strict=True):
        np.testing.assert_allclose(doc._.elmo, alone._.elmo, rtol=0, atol=ATOL)  # batching does not change vectors
    doc = piped[0]
    space = [t.i for t in doc if t.is_space]
    assert space == [3] and not doc[3].has_vector and not doc[3].vector.any()
    # The whitespace token is not a word for ELMo: the others are the model's vectors of the sentence without it.
    words = [t.text for t in doc if not t.is_space]
    layers, _, _ = _reference_layers(demo, [words])
    average = torch.stack(layers).mean(0)[0].numpy()
    np.testing.assert_allclose(np.delete(doc._.elmo, 3, axis=0), average, rtol=0, atol=ATOL)
    assert piped[1]._.elmo.shape == (0, 128) and not piped[1].vector.any() and piped[1].similarity(doc) == 0.0
    assert not piped[2].has_vector


def test_spacy_pipeline_saves_and_loads(nlp, tmp_path):
    spacy = _require("spacy", "spacy")
    nlp.to_disk(tmp_path / "pipeline")
    again = spacy.load(tmp_path / "pipeline")
    assert again.pipe_names == ["elmo"]
    np.testing.assert_array_equal(again("The bank .")._.elmo, nlp("The bank .")._.elmo)


def test_spacy_refuses_bad_settings():
    spacy = _require("spacy", "spacy")
    import modeling_elmo.integrations.spacy  # noqa: F401

    with pytest.raises(ValueError, match="layer must be one of"):
        spacy.blank("en").add_pipe("elmo", config={"layer": "middle"})
    with pytest.raises(ValueError, match="batch_size"):
        spacy.blank("en").add_pipe("elmo", config={"batch_size": 0})


@pytest.mark.parametrize(
    ("device", "says"),
    [
        ("meta", r"device must be cpu, cuda, cuda:N or mps, got 'meta' \(meta tensors hold no data\)"),
        ("xla", r"device must be cpu, cuda, cuda:N or mps, got 'xla'"),
        ("gpu", r"device must be cpu, cuda, cuda:N or mps, got 'gpu'"),
        ("cuda:99", r"device 'cuda:99': (CUDA is not available here|there are only \d+ CUDA devices)"),
    ],
    ids=["meta", "xla", "gpu", "cuda:99"],
)
def test_spacy_refuses_a_device_the_model_cannot_run_on(device, says, monkeypatch):
    """Issue 36: ``device: meta`` failed with torch's RuntimeError; the factory checks the device first, before
    the model loads."""
    spacy = _require("spacy", "spacy")
    import modeling_elmo.integrations as integrations
    import modeling_elmo.integrations.spacy  # noqa: F401

    def no_loading(model):
        raise AssertionError("the model must not load for a device that is refused")

    monkeypatch.setattr(integrations.spacy, "resolve_model_path", no_loading)
    with pytest.raises(ValueError, match=says):
        spacy.blank("en").add_pipe("elmo", config={"device": device})


@pytest.mark.slow  # issue 51: a fresh interpreter
def test_spacy_finds_the_factory_by_entry_point(tmp_path):
    """The entry point declared in pyproject.toml, installed as package metadata: spaCy finds the factory without
    this package being imported first."""
    _require("spacy", "spacy")
    tomllib = pytest.importorskip("tomllib", reason="reading pyproject.toml needs Python 3.11")
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    factories = project["entry-points"]["spacy_factories"]
    assert factories == {"elmo": "modeling_elmo.integrations.spacy:make_elmo"}
    info = tmp_path / "modeling_elmo_entry_points-0.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: modeling-elmo-entry-points\nVersion: 0.0\n")
    lines = "".join(f"{name} = {target}\n" for name, target in factories.items())
    (info / "entry_points.txt").write_text(f"[spacy_factories]\n{lines}")
    code = textwrap.dedent(
        """
        import sys
        import spacy
        assert "modeling_elmo" not in sys.modules
        nlp = spacy.blank("en")
        nlp.add_pipe("elmo", config={"layer": 0})
        doc = nlp("bank bank")
        assert doc[0].similarity(doc[1]) > 0.9999  # layer 0: no context, the same word twice
        print("ok", doc._.elmo.shape)
        """
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(REPO)]), OMP_NUM_THREADS="1")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "ok (2, 128)" in done.stdout
