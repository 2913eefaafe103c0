"""Hub sharing (issues #5 and 27): plain saved folders, remote code on request (loading without the package),
pipelines, TF-Hub style outputs, dtype/device_map, and push_to_hub with the Hub client mocked.

Tiny random models only; the remote-code test runs one subprocess (about 15 s).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
import torch
from helpers import BATCHING_ATOL
from transformers import AutoConfig, AutoModel, AutoTokenizer, pipeline

from modeling_elmo import ElmoConfig, ElmoModel, ElmoTokenizer
from modeling_elmo.demo_models.model import demo_model_path
from modeling_elmo.hub.model_card import GENERATED_MARKER, bilm_parameter_count, write_model_card
from modeling_elmo.hub.remote_code import FORBIDDEN_IMPORTS, remote_code, save_with_remote_code, shipped_files
from modeling_elmo.inference.tf_hub import embed_sentences, tf_hub_outputs

REPO = Path(__file__).resolve().parent.parent
SENTENCES = ["The cat sat on the mat.", "Hello!", "John Smith lives in New York."]
LABELS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
NER_TEXT = "John Smith lives in New York."
NER_TAGS = ["B-PER", "I-PER", "O", "O", "B-LOC", "I-LOC", "O"]  # John Smith lives in New York .


def _optional_class(module: str, name: str):
    """A head class written by another part of the project; ``None`` while its module does not exist."""
    try:
        mod = __import__(f"modeling_elmo.{module}", fromlist=[name])
    except ModuleNotFoundError as error:
        if error.name == f"modeling_elmo.{module}":
            return None
        raise
    return getattr(mod, name)


ElmoForTokenClassification = _optional_class("modeling_elmo_tagging", "ElmoForTokenClassification")
ElmoForPreTraining = _optional_class("modeling_elmo_pretraining", "ElmoForPreTraining")
needs_tagger = pytest.mark.skipif(
    ElmoForTokenClassification is None, reason="modeling_elmo/modeling_elmo_tagging.py (the tagger) does not exist yet"
)
needs_pretraining = pytest.mark.skipif(
    ElmoForPreTraining is None, reason="modeling_elmo/modeling_elmo_pretraining.py (the biLM head) does not exist yet"
)


def tiny_config(**kwargs) -> ElmoConfig:
    settings = dict(
        lstm_dim=32,
        projection_dim=8,
        char_embedding_dim=4,
        char_cnn_filters=[[1, 4], [2, 8]],
        n_highway=1,
        initializer_range=0.3,  # big enough that the outputs are not all near zero
    )
    settings.update(kwargs)
    return ElmoConfig(**settings)


def tiny_tagger_config() -> ElmoConfig:
    return tiny_config(
        id2label=dict(enumerate(LABELS)),
        label2id={label: i for i, label in enumerate(LABELS)},
        tagger_hidden_size=8,
        tagger_num_layers=1,
        tagger_dropout=0.0,
        elmo_dropout=0.0,
        use_crf=False,
        freeze_bilm=True,
    )


def _train_tagger(model, tokenizer) -> float:
    """Memorise one sentence, so that the pipeline's spans are known."""
    batch = tokenizer([NER_TEXT], return_tensors="pt")
    labels = torch.tensor([[LABELS.index(tag) for tag in NER_TAGS]])
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=0.05)
    model.train()
    for _ in range(40):
        loss = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    return loss.item()


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    """Plain saved folders ``base`` (ElmoModel), ``tagger`` and ``pretraining``, and the same models saved with
    remote code (``save_with_remote_code``) as ``remote/<kind>``."""
    root = tmp_path_factory.mktemp("hub")
    tokenizer = ElmoTokenizer()
    torch.manual_seed(0)
    models = {"base": ElmoModel(tiny_config()).eval()}
    torch.manual_seed(1)
    tagger = ElmoForTokenClassification(tiny_tagger_config())
    assert _train_tagger(tagger, tokenizer) < 0.05
    models["tagger"] = tagger
    torch.manual_seed(2)
    models["pretraining"] = ElmoForPreTraining(tiny_config(lm_vocab_size=3)).eval()
    out = {}
    for kind, model in models.items():
        out[kind] = root / kind
        model.save_pretrained(out[kind])
        tokenizer.save_pretrained(out[kind])
    for kind, model in models.items():
        out[f"remote/{kind}"] = root / "remote" / kind
        save_with_remote_code(model, ElmoTokenizer(), out[f"remote/{kind}"])
    return out


# ---------------------------------------------------------------------------------------------
# 1. Hub-ready folders
# ---------------------------------------------------------------------------------------------


def test_saved_folders_are_plain(folders):
    """Config, weights and tokenizer: no code files, no auto_map, no custom_pipelines (issue 27)."""
    for kind in ("base", "tagger", "pretraining"):
        files = set(os.listdir(folders[kind]))
        assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= files
        assert not [f for f in files if f.endswith(".py")], files
        config = json.loads((folders[kind] / "config.json").read_text())
        assert "auto_map" not in config and "custom_pipelines" not in config
        assert "auto_map" not in json.loads((folders[kind] / "tokenizer_config.json").read_text())
    # A plain save of a model loaded from a remote-code folder stays plain (its auto_map would name absent files).
    again = folders["base"].parent / "again"
    AutoModel.from_pretrained(folders["remote/base"]).save_pretrained(again)
    assert "auto_map" not in json.loads((again / "config.json").read_text())
    assert not [f for f in os.listdir(again) if f.endswith(".py")]


@pytest.mark.parametrize(
    ("kind", "auto_class", "entry"),
    [
        ("base", "AutoModel", "modeling_elmo.ElmoModel"),
        ("tagger", "AutoModelForTokenClassification", "modeling_elmo_tagging.ElmoForTokenClassification"),
        ("pretraining", "AutoModelForPreTraining", "modeling_elmo_pretraining.ElmoForPreTraining"),
    ],
)
def test_remote_code_on_request_holds_the_code(folders, kind, auto_class, entry):
    """``save_with_remote_code`` (register_for_auto_class): transformers copies the defining files and everything
    they import relatively, and writes auto_map; the config also names the token-classification pipeline."""
    folder = folders[f"remote/{kind}"]
    files = set(os.listdir(folder))
    code = {f for f in files if f.endswith(".py")}
    assert code <= {p.name for p in shipped_files()}
    config = json.loads((folder / "config.json").read_text())
    assert config["auto_map"]["AutoConfig"] == "configuration_elmo.ElmoConfig"
    assert config["auto_map"][auto_class] == entry
    assert {f"{entry.split('.')[0]}.py", "configuration_elmo.py", "modeling_elmo.py", "characters.py"} <= code
    tokenizer_config = json.loads((folder / "tokenizer_config.json").read_text())
    assert tokenizer_config["auto_map"]["AutoTokenizer"][0] == "tokenization_elmo.ElmoTokenizer"
    assert "tokenization_elmo.py" in code
    # Every kind names the ELMo pipeline for the stock task (a tagger fine-tuned from a shared biLM inherits it).
    impl = config["custom_pipelines"]["token-classification"]["impl"]
    assert impl == "pipelines_elmo.ElmoTokenClassificationPipeline" and "pipelines_elmo.py" in code


def test_shipped_code_needs_no_converter_or_training_libraries():
    from transformers.dynamic_module_utils import get_imports

    for path in shipped_files():
        imports = set(get_imports(path))
        assert not imports & set(FORBIDDEN_IMPORTS), f"{path.name} imports {imports & set(FORBIDDEN_IMPORTS)}"
        assert "cli.py" != path.name and "convert_original_weights.py" != path.name


def test_model_card_metadata_and_sizes(folders, tmp_path):
    model = ElmoModel(tiny_config())
    write_model_card(tmp_path / "plain", model.config)
    text = (tmp_path / "plain" / "README.md").read_text()
    header = text.split("---")[1]
    assert "library_name: transformers" in header
    assert "pipeline_tag: feature-extraction" in header and "custom_code" not in header
    assert "- elmo" in header and "cell 32, projection 8" in text  # sizes in the card's table, not in metadata
    assert "trust_remote_code" not in text and "import modeling_elmo" in text and GENERATED_MARKER in text
    # A remote-code folder's card says how to load it without the package.
    remote = ElmoConfig.from_pretrained(folders["remote/tagger"])
    write_model_card(tmp_path / "remote", remote)
    text = (tmp_path / "remote" / "README.md").read_text()
    assert "trust_remote_code=True" in text and "custom_code" in text and "pipeline_tag: token-classification" in text

    bilm = sum(p.numel() for name, p in model.named_parameters() if not name.startswith("scalar_mixes"))
    assert bilm_parameter_count(model.config) == bilm
    # The released original model: 93.6M parameters.
    assert round(bilm_parameter_count(ElmoConfig()) / 1e6, 1) == 93.6

    # A user's README is never replaced.
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "README.md").write_text("# my notes\n")
    assert write_model_card(tmp_path / "mine", model.config) is None
    assert (tmp_path / "mine" / "README.md").read_text() == "# my notes\n"


def test_converter_writes_card_with_provenance(converted_fixture):
    text = (converted_fixture / "README.md").read_text()
    assert "lm_weights.hdf5" in text and "convert_original_weights" in text
    assert "auto_map" not in json.loads((converted_fixture / "config.json").read_text())
    assert not [f for f in os.listdir(converted_fixture) if f.endswith(".py")]


# ---------------------------------------------------------------------------------------------
# 2. Loading with trust_remote_code where the package cannot be imported
# ---------------------------------------------------------------------------------------------

# Runs in a subprocess started with `python -I` (no current folder, no PYTHONPATH on sys.path). The package is
# installed in editable mode (a .pth path or a meta-path finder): a finder placed first on sys.meta_path refuses
# it and the top-level modules of this repository, and the repository is dropped from sys.path. The script checks
# that the import really fails, and at the end that no loaded module comes from the repository.
REMOTE_SCRIPT = textwrap.dedent(
    r"""
    import importlib.abc, json, sys
    from pathlib import Path

    repo, folders_json, out_dir = Path(sys.argv[1]).resolve(), sys.argv[2], Path(sys.argv[3])
    BLOCKED = {"modeling_elmo", "configuration_elmo", "convert_original_weights"}

    class Blocker(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ModuleNotFoundError(f"No module named {name!r} (blocked for this test)", name=name)
            return None

    sys.meta_path.insert(0, Blocker())
    sys.path[:] = [p for p in sys.path if p and Path(p).resolve() != repo]
    try:
        import modeling_elmo  # noqa: F401
    except ModuleNotFoundError:
        pass
    else:
        raise SystemExit("modeling_elmo is importable: the isolation failed")

    import numpy as np
    import torch
    from transformers import (AutoConfig, AutoModel, AutoModelForPreTraining, AutoModelForTokenClassification,
                              AutoTokenizer, pipeline)

    folders = json.loads(folders_json)
    report = {}

    def tensors(output):
        return {k: v.detach().numpy() for k, v in output.items() if isinstance(v, torch.Tensor)}

    base = folders["base"]
    config = AutoConfig.from_pretrained(base, trust_remote_code=True)
    tokenizer = AutoTokenizer.from_pretrained(base, trust_remote_code=True)
    model = AutoModel.from_pretrained(base, trust_remote_code=True).eval()
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    with torch.no_grad():
        np.savez(out_dir / "base.npz", **tensors(model(**batch, output_hidden_states=True)))
    report["classes"] = [type(o).__module__ for o in (config, tokenizer, model)]
    fe = pipeline("feature-extraction", model=base, trust_remote_code=True)
    report["feature_extraction"] = fe("The cat sat.")

    if "tagger" in folders:
        tagger = AutoModelForTokenClassification.from_pretrained(folders["tagger"], trust_remote_code=True).eval()
        with torch.no_grad():
            np.savez(out_dir / "tagger.npz", **tensors(tagger(**batch)))
        report["classes"].append(type(tagger).__module__)
        ner = pipeline("token-classification", model=folders["tagger"], trust_remote_code=True,
                       aggregation_strategy="simple")
        report["ner"] = [{k: (float(v) if k == "score" else v) for k, v in e.items()} for e in ner(NER_TEXT)]
        report["ner_class"] = type(ner).__module__ + "." + type(ner).__name__
    if "pretraining" in folders:
        lm = AutoModelForPreTraining.from_pretrained(folders["pretraining"], trust_remote_code=True).eval()
        with torch.no_grad():
            np.savez(out_dir / "pretraining.npz", **tensors(lm(**batch, return_logits=True)))
        report["classes"].append(type(lm).__module__)

    # A virtual environment may live inside the checkout (CI's .venv-ci): its site-packages are not the repo.
    env_prefixes = tuple(str(Path(p).resolve()) + "/" for p in {sys.prefix, sys.base_prefix, sys.exec_prefix})

    def from_checkout(module):
        path = str(Path(getattr(module, "__file__", None) or "/").resolve())
        return path.startswith(str(repo) + "/") and not path.startswith(env_prefixes)

    from_repo = sorted(name for name, module in list(sys.modules.items()) if from_checkout(module))
    report["modules_from_repo"] = from_repo
    (out_dir / "report.json").write_text(json.dumps(report))
    """
)


def _tensors(output) -> dict[str, np.ndarray]:
    return {k: v.detach().numpy() for k, v in output.items() if isinstance(v, torch.Tensor)}


def _assert_same(expected: dict[str, np.ndarray], saved: Path):
    """The same code on the same weights and inputs: 0.0 difference."""
    got = dict(np.load(saved))
    assert set(expected) <= set(got)
    for key, value in expected.items():
        np.testing.assert_array_equal(got[key], value, err_msg=key)


@pytest.mark.slow  # issue 51: a fresh interpreter
def test_remote_code_loads_without_the_package(folders, tmp_path):
    script = "SENTENCES = " + repr(SENTENCES) + "\nNER_TEXT = " + repr(NER_TEXT) + "\n" + REMOTE_SCRIPT
    env = {
        **os.environ,
        "HF_MODULES_CACHE": str(tmp_path / "modules"),  # a fresh copy of the remote code
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_VERBOSITY": "error",
    }
    folders_json = json.dumps({k: str(folders[f"remote/{k}"]) for k in ("base", "tagger", "pretraining")})
    result = subprocess.run(
        [sys.executable, "-I", "-c", script, str(REPO), folders_json, str(tmp_path)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["modules_from_repo"] == []
    assert all(module.startswith("transformers_modules.") for module in report["classes"]), report["classes"]

    tokenizer = ElmoTokenizer.from_pretrained(folders["base"])
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    model = ElmoModel.from_pretrained(folders["base"]).eval()
    with torch.no_grad():
        expected = _tensors(model(**batch, output_hidden_states=True))
    _assert_same(expected, tmp_path / "base.npz")
    fe_words = np.asarray(report["feature_extraction"][0])
    assert fe_words.shape == (4, 16)  # The, cat, sat, .
    if "tagger" in folders:
        tagger = ElmoForTokenClassification.from_pretrained(folders["tagger"]).eval()
        with torch.no_grad():
            _assert_same(_tensors(tagger(**batch)), tmp_path / "tagger.npz")
        assert report["ner_class"].endswith("pipelines_elmo.ElmoTokenClassificationPipeline")
        assert [(e["entity_group"], e["word"], e["start"], e["end"]) for e in report["ner"]] == [
            ("PER", "John Smith", 0, 10),
            ("LOC", "New York", 20, 28),
        ]
    if "pretraining" in folders:
        lm = ElmoForPreTraining.from_pretrained(folders["pretraining"]).eval()
        with torch.no_grad():
            _assert_same(_tensors(lm(**batch, return_logits=True)), tmp_path / "pretraining.npz")


# The bundled demo folder (plain: data only), copied elsewhere and loaded where the package cannot be imported:
# transformers refuses the model (the model type "elmo" is unknown without the package). The tokenizer falls back to
# transformers' generic class over tokenizer.json: word ids, (batch, words), which no ELMo model accepts.
DEMO_PLAIN_SCRIPT = REMOTE_SCRIPT.split("\nimport numpy as np\n", 1)[0] + textwrap.dedent(
    r"""
    from transformers import AutoModel, AutoTokenizer

    folder = folders_json
    report = {}
    for name, auto in (("tokenizer", AutoTokenizer), ("model", AutoModel)):
        try:
            loaded = auto.from_pretrained(folder)
        except (ValueError, KeyError, OSError) as error:
            report[name] = f"refused: {type(error).__name__}: {error}"
        else:
            report[name] = f"loaded {type(loaded).__module__}.{type(loaded).__name__}"
            if name == "tokenizer":
                report["ids_shape"] = list(loaded(["a b"], return_tensors="pt")["input_ids"].shape)
    (out_dir / "report.json").write_text(json.dumps(report))
    """
)


@pytest.mark.slow  # issue 51: a fresh interpreter
def test_plain_demo_folder_is_refused_without_the_package(tmp_path):
    folder = tmp_path / "demo"
    shutil.copytree(demo_model_path(), folder)  # elsewhere: nothing but the folder itself to load from
    assert not [f for f in os.listdir(folder) if f.endswith(".py")]
    env = {**os.environ, "HF_MODULES_CACHE": str(tmp_path / "modules"), "HF_HUB_OFFLINE": "1"}
    result = subprocess.run(
        [sys.executable, "-I", "-c", DEMO_PLAIN_SCRIPT, str(REPO), str(folder), str(tmp_path)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["model"].startswith("refused") and "elmo" in report["model"], report["model"]
    assert "ElmoTokenizer" not in report["tokenizer"]
    if report["tokenizer"].startswith("loaded"):
        assert report["ids_shape"] == [1, 2]  # word ids, not (batch, words, 50) character ids


# ---------------------------------------------------------------------------------------------
# 3. Pipelines (package installed: no remote code needed)
# ---------------------------------------------------------------------------------------------


def test_feature_extraction_pipeline_gives_one_vector_per_word(folders):
    extractor = pipeline("feature-extraction", model=str(folders["base"]))
    vectors = np.asarray(extractor("The cat sat."))  # (1, words, 2P)
    model = ElmoModel.from_pretrained(folders["base"]).eval()
    batch = ElmoTokenizer.from_pretrained(folders["base"])("The cat sat.", return_tensors="pt")
    with torch.no_grad():
        expected = model(**batch).elmo.numpy()
    assert vectors.shape == (1, 4, 16)  # The, cat, sat, .
    np.testing.assert_allclose(vectors, expected, atol=1e-6)


@needs_tagger
def test_token_classification_pipeline_spans(folders):
    from modeling_elmo.pipelines_elmo import ElmoTokenClassificationPipeline

    ner = pipeline("token-classification", model=str(folders["tagger"]), aggregation_strategy="simple")
    assert isinstance(ner, ElmoTokenClassificationPipeline)
    entities = ner(NER_TEXT)
    assert [(e["entity_group"], e["word"], e["start"], e["end"]) for e in entities] == [
        ("PER", "John Smith", 0, 10),
        ("LOC", "New York", 20, 28),
    ]
    for entity in entities:
        assert NER_TEXT[entity["start"] : entity["end"]] == entity["word"] and 0 < entity["score"] <= 1
    # Without aggregation: one entry per tagged word, with its word index.
    words = ner(NER_TEXT, aggregation_strategy="none")
    assert [(w["entity"], w["index"], w["word"]) for w in words][:2] == [("B-PER", 0, "John"), ("I-PER", 1, "Smith")]
    # Pre-split words keep their offsets into the joined sentence.
    (split,) = ner(["John", "Smith", "lives", "in", "New", "York", "."], is_split_into_words=True)
    assert [(e["entity_group"], e["start"], e["end"]) for e in split] == [("PER", 0, 10), ("LOC", 20, 28)]


@pytest.mark.slow  # issue 51: trains a tagger
@needs_tagger
def test_token_classification_pipeline_with_a_word_embedding_tagger(tmp_path):
    """A tagger whose ``x_k`` is its own word embedding (train_tagger's default) needs ``vocab_ids``: the pipeline
    asks the tokenizer for them, and its tags are ``model.predict``'s."""
    words = ["<S>", "</S>", "<UNK>", *sorted(set(NER_TEXT.replace(".", " .").split()))]
    tokenizer = ElmoTokenizer(vocab={word: i for i, word in enumerate(words)})
    config = tiny_tagger_config()
    config.tagger_word_input, config.tagger_word_embedding_dim = "embedding", 4
    config.tagger_word_vocab_size = len(tokenizer)
    torch.manual_seed(3)
    tagger = ElmoForTokenClassification(config)
    batch = tokenizer([NER_TEXT], return_tensors="pt", return_vocab_ids=True)
    labels = torch.tensor([[LABELS.index(tag) for tag in NER_TAGS]])
    optimizer = torch.optim.Adam([p for p in tagger.parameters() if p.requires_grad], lr=0.05)
    for _ in range(40):
        loss = tagger(**batch, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    tagger.eval()
    assert tagger.predict(**batch) == [NER_TAGS]
    tagger.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    ner = pipeline("token-classification", model=str(tmp_path), aggregation_strategy="none")
    assert [w["entity"] for w in ner(NER_TEXT)] == [tag for tag in NER_TAGS if tag != "O"]


# ---------------------------------------------------------------------------------------------
# 4. TF-Hub style outputs
# ---------------------------------------------------------------------------------------------


def test_tf_hub_outputs_names_shapes_and_masked_mean(folders):
    model = ElmoModel.from_pretrained(folders["base"]).eval()
    tokenizer = ElmoTokenizer.from_pretrained(folders["base"])
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    with torch.no_grad():
        outputs = tf_hub_outputs(model, **batch)
        reference = model(**batch, output_hidden_states=True)
    b, w = batch["attention_mask"].shape
    assert set(outputs) == {"word_emb", "lstm_outputs1", "lstm_outputs2", "elmo", "default", "sequence_len"}
    assert outputs["word_emb"].shape == (b, w, 8) and outputs["lstm_outputs1"].shape == (b, w, 16)
    assert outputs["default"].shape == (b, 16)
    torch.testing.assert_close(outputs["word_emb"], reference.hidden_states[0][..., :8])
    torch.testing.assert_close(outputs["lstm_outputs2"], reference.hidden_states[2])
    torch.testing.assert_close(outputs["elmo"], reference.elmo)
    mask = batch["attention_mask"].bool()
    for row in range(b):
        torch.testing.assert_close(outputs["default"][row], reference.elmo[row][mask[row]].mean(dim=0))
    # The mean ignores padding: a sentence alone gives the same vector as in a padded batch.
    alone = embed_sentences(model, [SENTENCES[1]], tokenizer=tokenizer)
    torch.testing.assert_close(alone[0], outputs["default"][1], atol=BATCHING_ATOL, rtol=1e-5)
    per_word = embed_sentences(model, SENTENCES, tokenizer, output="lstm_outputs1", batch_size=2)
    assert [t.shape[0] for t in per_word] == mask.sum(dim=1).tolist()
    with pytest.raises(ValueError, match="output must be one of"):
        embed_sentences(model, SENTENCES, tokenizer, output="lstm_outputs3")


def test_tf_hub_outputs_and_embed_sentences_need_no_gradients(folders):
    """Both are inference helpers (issue 15 item 11): nothing they return requires grad, even on a trainable model
    outside ``torch.no_grad()``; ``embed_sentences`` returns one output (a tensor, or one tensor per sentence)."""
    model = ElmoModel.from_pretrained(folders["base"])
    model.requires_grad_(True)
    tokenizer = ElmoTokenizer.from_pretrained(folders["base"])
    outputs = tf_hub_outputs(model, **tokenizer(SENTENCES, padding=True, return_tensors="pt"))
    assert torch.is_grad_enabled() and isinstance(outputs, dict)
    assert [name for name, tensor in outputs.items() if tensor.requires_grad] == []
    vectors = embed_sentences(model, SENTENCES, tokenizer)
    assert isinstance(vectors, torch.Tensor) and vectors.shape == (3, 16) and not vectors.requires_grad
    words = embed_sentences(model, SENTENCES, tokenizer, output="elmo")
    assert [tuple(t.shape) for t in words] == [(7, 16), (2, 16), (7, 16)] and not any(t.requires_grad for t in words)


# ---------------------------------------------------------------------------------------------
# 6. dtype and device_map
# ---------------------------------------------------------------------------------------------


# Measured 9.1e-3 (bfloat16) and 9.6e-4 (float16) of the largest value, default and AVX2 kernels alike.
@pytest.mark.parametrize(("dtype", "tolerance"), [(torch.bfloat16, 5e-2), (torch.float16, 1e-2)])
def test_half_precision_loading_is_close_to_float32(folders, dtype, tolerance):
    """bfloat16 keeps ~3 significant digits, float16 ~4: the outputs must agree with float32 to within
    ``tolerance`` times the largest float32 value (5e-2 for bfloat16, 1e-2 for float16)."""
    tokenizer = ElmoTokenizer.from_pretrained(folders["base"])
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    full = AutoModel.from_pretrained(folders["base"]).eval()
    half = AutoModel.from_pretrained(folders["base"], dtype=dtype).eval()
    assert half.dtype == dtype and all(p.dtype == dtype for p in half.parameters())
    with torch.no_grad():
        expected = full(**batch).elmo
        got = half(**batch).elmo
    assert got.dtype == dtype
    scale = expected.abs().max()
    assert scale > 0.1
    assert (got.float() - expected).abs().max() <= tolerance * scale


def test_device_map_cpu(folders):
    pytest.importorskip("accelerate", reason="device_map (accelerate) needs the [train] extra")
    model = AutoModel.from_pretrained(folders["base"], device_map="cpu")
    assert model.device.type == "cpu"
    assert {p.device.type for p in model.parameters()} == {"cpu"}
    batch = AutoTokenizer.from_pretrained(folders["base"])(SENTENCES, padding=True, return_tensors="pt")
    with torch.no_grad():
        assert model(**batch).elmo.shape == (3, batch["attention_mask"].shape[1], 16)


def test_auto_classes_use_the_installed_package_without_trust_remote_code(folders):
    config = AutoConfig.from_pretrained(folders["base"])
    assert type(config) is ElmoConfig
    assert type(AutoTokenizer.from_pretrained(folders["base"])) is ElmoTokenizer
    assert type(AutoModel.from_pretrained(folders["base"])) is ElmoModel


# ---------------------------------------------------------------------------------------------
# 7. push_to_hub, with the Hub client mocked at HfApi
# ---------------------------------------------------------------------------------------------


class FakeHub:
    """Stands in for the Hub: records what ``HfApi.create_commit`` would upload (path in repo -> bytes)."""

    def __init__(self):
        self.commits: list[dict[str, bytes]] = []

    def create_repo(self, repo_id, *args, **kwargs):
        return mock.Mock(repo_id=repo_id)

    def create_commit(self, repo_id, operations, *args, **kwargs):
        files = {}
        for op in operations:
            source = op.path_or_fileobj
            files[op.path_in_repo] = Path(source).read_bytes() if isinstance(source, (str, Path)) else source.read()
        self.commits.append(files)
        return mock.Mock(commit_url=f"https://huggingface.co/{repo_id}/commit/0")

    def no_card(self, *args, **kwargs):
        from huggingface_hub.errors import EntryNotFoundError

        raise EntryNotFoundError("README.md not found (new repository)")


@pytest.fixture
def fake_hub():
    hub = FakeHub()
    with (
        mock.patch("huggingface_hub.HfApi.create_repo", side_effect=hub.create_repo, autospec=False),
        mock.patch("huggingface_hub.HfApi.create_commit", side_effect=hub.create_commit, autospec=False),
        mock.patch("huggingface_hub.HfApi.create_branch", autospec=False),
        mock.patch("huggingface_hub.ModelCard.load", side_effect=hub.no_card),
    ):
        yield hub


def test_push_to_hub_uploads_a_plain_folder_or_remote_code_on_request(folders, fake_hub):
    model = ElmoModel.from_pretrained(folders["base"])
    tokenizer = ElmoTokenizer.from_pretrained(folders["base"])
    model.push_to_hub("someone/elmo-tiny")
    tokenizer.push_to_hub("someone/elmo-tiny")
    model_files, tokenizer_files = fake_hub.commits
    assert {"config.json", "model.safetensors"} <= set(model_files)
    assert not [f for f in [*model_files, *tokenizer_files] if f.endswith(".py")]
    assert "auto_map" not in json.loads(model_files["config.json"])
    assert {"tokenizer.json", "tokenizer_config.json"} <= set(tokenizer_files)
    assert "auto_map" not in json.loads(tokenizer_files["tokenizer_config.json"])

    with remote_code(model, tokenizer):
        model.push_to_hub("someone/elmo-tiny")
        tokenizer.push_to_hub("someone/elmo-tiny")
    model_files, tokenizer_files = fake_hub.commits[2:]
    assert {"config.json", "model.safetensors", "modeling_elmo.py", "configuration_elmo.py"} <= set(model_files)
    config = json.loads(model_files["config.json"])
    assert config["auto_map"]["AutoModel"] == "modeling_elmo.ElmoModel"
    assert {"tokenizer.json", "tokenizer_config.json", "tokenization_elmo.py", "characters.py"} <= set(tokenizer_files)
    assert json.loads(tokenizer_files["tokenizer_config.json"])["auto_map"]["AutoTokenizer"][0] == (
        "tokenization_elmo.ElmoTokenizer"
    )


def test_convert_writes_remote_code_only_on_request(fixture_dir, tmp_path):
    """``elmo convert --remote_code``: the folder carries its code and loads through it (trust_remote_code);
    without the flag the converted folder is plain (test_converter_writes_card_with_provenance)."""
    from modeling_elmo.commands.convert import main as convert_main

    out = tmp_path / "remote"
    argv = ["--options_file", str(fixture_dir / "options.json"), "--weight_file", str(fixture_dir / "lm_weights.hdf5")]
    assert convert_main([*argv, "--output_dir", str(out), "--remote_code", "--disable_tqdm"]) == 0
    code = {f for f in os.listdir(out) if f.endswith(".py")}
    assert {"modeling_elmo.py", "configuration_elmo.py", "tokenization_elmo.py"} <= code
    assert code <= {p.name for p in shipped_files()}
    assert json.loads((out / "config.json").read_text())["auto_map"]["AutoModel"] == "modeling_elmo.ElmoModel"
    assert "trust_remote_code=True" in (out / "README.md").read_text()
    remote = AutoModel.from_pretrained(out, trust_remote_code=True).eval()  # the package's class when installed
    local = ElmoModel.from_pretrained(out).eval()
    batch = ElmoTokenizer.from_pretrained(out)(SENTENCES, padding=True, return_tensors="pt")
    with torch.no_grad():
        assert torch.equal(remote(**batch).elmo, local(**batch).elmo)
