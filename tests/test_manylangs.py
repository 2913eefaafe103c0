"""ELMoForManyLangs models (issue 28 item 4): ``elmo convert --manylangs_dir``, their tokenizer, parity with the
`elmoformanylangs` package, stateful mode, the refusal of anything but plain state dicts, and ``elmo download`` of
the 44 languages from a local HTTP mirror.

The folders in ``tests/fixtures/manylangs`` were written by the `elmoformanylangs` package itself (random weights,
with and without a word embedding, in torch's zip and legacy pickle formats), with its outputs on German, Chinese,
emoji and one-word sentences (``make_fixtures.py``; see its NOTICE). The package is not needed here. A float64
step-by-step reference written below from the package's formulas (not from this package's code) checks both.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import shutil
import struct
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest
import torch
from test_download_safety import snapshot

import elmo_cli as cli
from modeling_elmo import ElmoConfig, ElmoModel, ElmoTokenizer
from modeling_elmo.hub.convert import ConversionError
from modeling_elmo.hub.convert_manylangs import convert_manylangs, load_state_dict, read_dictionary
from modeling_elmo.hub.download import DownloadError, canonical_name, download_released_model
from modeling_elmo.hub.download_manylangs import LANGUAGES, unpack_model, zip_url
from modeling_elmo.inference.embed_corpus import embed_corpus

pytestmark = pytest.mark.usefixtures("one_thread")

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "manylangs"
SENTENCES = json.loads((FIXTURES / "sentences.json").read_text(encoding="utf-8"))
FOLDERS = ["with-words", "with-words-legacy", "chars-only", "chars-only-legacy"]
# The bound. Measured: 1.4e-6 (with-words) and 9e-7 (chars-only), the float32 rounding of the two
# implementations' different summation orders (outputs up to 11 in size); both lie within 2e-6 of the float64
# reference below.
PARITY = 5e-5


def reference(name: str) -> dict[str, np.ndarray]:
    return dict(np.load(FIXTURES / f"{name.removesuffix('-legacy')}-reference.npz"))


@pytest.fixture(scope="module")
def converted(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("manylangs")
    return {name: convert_manylangs(FIXTURES / name, out / name) for name in FOLDERS}


def run(folder: Path, sentences: list[list[str]], **kwargs) -> list[np.ndarray]:
    """The ``L + 1`` layers of each sentence, ``(L + 1, n, 2P)``, one padded batch."""
    model = ElmoModel.from_pretrained(folder, **kwargs).eval()
    tokenizer = ElmoTokenizer.from_pretrained(folder)
    return layers_of(model, tokenizer, sentences)


def layers_of(model, tokenizer, sentences):
    batch = tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt")
    with torch.no_grad():
        layers = torch.stack(model(**batch, output_hidden_states=True).hidden_states, dim=1)
    return [layers[i, :, : len(s)].numpy() for i, s in enumerate(sentences)]


# ---------------------------------------------------------------------------------------------------------------
# A float64 step-by-step reference, from the package's formulas (MANYLANGS_FORMAT sections 6-7)
# ---------------------------------------------------------------------------------------------------------------


def float64_reference(folder: Path, sentence: list[str]) -> np.ndarray:
    """The package's three layers for one sentence, ``(3, n, 2P)``, computed in float64 from its own files."""
    arch_name = json.loads((folder / "config.json").read_text())["config_path"].rsplit("/", 1)[-1]
    arch = json.loads((folder / arch_name).read_text())
    te = {k: v.double().numpy() for k, v in torch.load(folder / "token_embedder.pkl", weights_only=True).items()}
    en = {k: v.double().numpy() for k, v in torch.load(folder / "encoder.pkl", weights_only=True).items()}
    chars, words = read_dictionary(folder / "char.dic"), read_dictionary(folder / "word.dic")
    cfg, enc = arch["token_embedder"], arch["encoder"]
    max_chars, act = cfg["max_characters_per_token"], np.tanh if cfg["activation"] == "tanh" else relu
    tokens = ["<bos>", *(t[: max_chars - 2] for t in sentence), "<eos>"]
    vectors = []
    for token in tokens:
        inner = [chars[token]] if token in ("<bos>", "<eos>") else [chars.get(c, chars["<oov>"]) for c in token]
        row = [chars["<eow>"], *inner, chars["<bow>"]] + [chars["<pad>"]] * (max_chars - len(inner) - 2)
        emb = te["char_emb_layer.embedding.weight"][row]  # (50, char_dim)
        features = []
        for i, (width, _) in enumerate(cfg["filters"]):
            w, b = te[f"convolutions.{i}.weight"], te[f"convolutions.{i}.bias"]
            conv = [np.einsum("ocw,wc->o", w, emb[p : p + width]) + b for p in range(max_chars - width + 1)]
            features.append(act(np.max(conv, axis=0)))
        x = np.concatenate(features)
        n = x.shape[0]
        for k in range(cfg["n_highway"]):
            p = te[f"highways._layers.{k}.weight"] @ x + te[f"highways._layers.{k}.bias"]
            gate = sigmoid(p[n:])
            x = gate * x + (1 - gate) * relu(p[:n])
        if cfg["word_dim"]:
            x = np.concatenate([te["word_emb_layer.embedding.weight"][words.get(token, words["<oov>"])], x])
        vectors.append(te["projection.weight"] @ x + te["projection.bias"])
    d = enc["dim"]
    layers = [np.concatenate([vectors, vectors], axis=1)]
    inputs = {"forward": vectors, "backward": vectors[::-1]}
    for layer in range(enc["n_layers"]):
        outputs = {}
        for direction, xs in inputs.items():
            key = f"{direction}_layer_{layer}"
            h, c, out = np.zeros(enc["projection_dim"]), np.zeros(d), []
            for x in xs:
                g = en[f"{key}.input_linearity.weight"] @ x + en[f"{key}.state_linearity.weight"] @ h
                g = g + en[f"{key}.state_linearity.bias"]
                c = sigmoid(g[:d]) * np.tanh(g[2 * d : 3 * d]) + sigmoid(g[d : 2 * d]) * c  # gates i, f, g, o
                c = np.clip(c, -enc["cell_clip"], enc["cell_clip"])
                h = np.clip(en[f"{key}.state_projection.weight"] @ (sigmoid(g[3 * d :]) * np.tanh(c)), *clip(enc))
                out.append(h + x if layer > 0 else h)  # the residual; the recurrence keeps h
            outputs[direction] = out
        inputs = {"forward": outputs["forward"], "backward": outputs["backward"]}
        layers.append(np.concatenate([outputs["forward"], outputs["backward"][::-1]], axis=1))
    return np.stack(layers)[:, 1:-1]


def relu(x):
    return np.maximum(x, 0)


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def clip(enc):
    return -enc["proj_clip"], enc["proj_clip"]


# ---------------------------------------------------------------------------------------------------------------
# Parity
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", FOLDERS)
def test_outputs_match_the_package_on_all_three_layers(converted, name):
    """German, Chinese, emoji, one-word, a word over 48 characters, <bos> as a word, unknown characters and words,
    an empty sentence: every layer within 5e-5 of ``Embedder.sents2elmo(..., output_layer=-2)``."""
    ref = reference(name)
    ours = run(converted[name], SENTENCES["sentences"])
    for i, layers in enumerate(ours):
        expected = ref[f"sentence_{i}"]
        assert layers.shape == expected.shape == (3, len(SENTENCES["sentences"][i]), layers.shape[-1])
        if expected.size:
            np.testing.assert_allclose(layers, expected, rtol=0, atol=PARITY)


@pytest.mark.parametrize("name", ["with-words", "chars-only"])
def test_float64_reference(converted, name):
    """Against a float64 step-by-step computation from the package's files: this package's float32 path lies as far
    from it as the package's own float32 outputs (measured 1.8e-6 and 8.8e-7 here, the package 1.6e-6 and 5.8e-7;
    the issue's figure for the package is up to 1.3e-5), and run in float64 it equals the reference to 4e-15: the
    mapping of the weights is exact."""
    model = ElmoModel.from_pretrained(converted[name]).eval()
    tokenizer = ElmoTokenizer.from_pretrained(converted[name])
    sentences = [s for s in SENTENCES["sentences"] if s]
    ours32 = layers_of(model, tokenizer, sentences)
    ours64 = layers_of(model.double(), tokenizer, sentences)
    package = [reference(name)[f"sentence_{i}"] for i, s in enumerate(SENTENCES["sentences"]) if s]
    for sentence, a, b, c in zip(sentences, ours32, ours64, package, strict=True):
        expected = float64_reference(FIXTURES / name, sentence)
        np.testing.assert_allclose(a, expected, rtol=0, atol=5e-6)
        np.testing.assert_allclose(b, expected, rtol=0, atol=1e-12)
        np.testing.assert_allclose(c, expected, rtol=0, atol=1.3e-5)


@pytest.mark.skipif(
    not os.environ.get("ELMO_MANYLANGS_FULL_DIR"),
    reason="the full-size ELMoForManyLangs check runs on request: make its folder with `python "
    "tests/fixtures/manylangs/make_fixtures.py --full-size DIR` (needs elmoformanylangs), then set "
    "ELMO_MANYLANGS_FULL_DIR=DIR",
)
def test_the_releases_size(tmp_path):
    """A folder of the releases' architecture (the package's default config, built in here), written by the package:
    measured 1.5e-5 from its outputs (values up to 6), where the package itself lies 9.9e-6 from float64."""
    full = Path(os.environ["ELMO_MANYLANGS_FULL_DIR"])
    ref = np.load(full / "reference.npz")
    folder = convert_manylangs(full / "model", tmp_path / "out")
    assert ElmoConfig.from_pretrained(folder).lstm_dim == 4096
    for i, layers in enumerate(run(folder, SENTENCES["sentences"])):
        np.testing.assert_allclose(layers, ref[f"sentence_{i}"], rtol=0, atol=PARITY)


def test_stateful_mode_reproduces_the_packages_carried_states(converted):
    """The package's Embedder is stateful: its second call starts each batch row (sentences sorted longest first)
    from the states the first call left. ``stateful=True`` fed in that order gives its outputs."""
    for name in ("with-words", "chars-only"):
        ref = reference(name)
        model = ElmoModel.from_pretrained(converted[name], stateful=True).eval()
        tokenizer = ElmoTokenizer.from_pretrained(converted[name])
        for call, key in ((SENTENCES["sentences"], "sentence"), (SENTENCES["stateful_sentences"], "stateful")):
            order = sorted(range(len(call)), key=lambda i: -len(call[i]))  # stable, as the package's sort
            layers = layers_of(model, tokenizer, [call[i] for i in order])
            for row, i in enumerate(order):
                if call[i]:
                    np.testing.assert_allclose(layers[row], ref[f"{key}_{i}"], rtol=0, atol=PARITY)
        # A fresh (stateless) model does not give the second call's outputs: the states matter here.
        fresh = run(converted[name], SENTENCES["stateful_sentences"])
        assert np.abs(fresh[0] - ref["stateful_0"]).max() > 1e-3


def test_character_and_word_ids_are_the_packages(converted):
    """The tokenizer gives the package frontend's ids (swapped word marks, the <pad> row, the 48-character cut,
    unknown characters and words as <oov>, <bos> as the sentence mark), in this package's numbering."""
    for name in ("with-words", "chars-only"):
        ref = reference(name)
        tokenizer = ElmoTokenizer.from_pretrained(converted[name])
        model = ElmoModel.from_pretrained(converted[name])
        old_chars = {index: key for key, index in read_dictionary(FIXTURES / name / "char.dic").items()}
        new_ids = {mark: i for i, mark in enumerate(["<bos>", "<eos>", "<oov>", "<pad>", "<bow>", "<eow>"], 1)}
        new_ids |= {c: i for i, c in enumerate(tokenizer.char_vocab, 7)}
        assert ("vocab_ids" in tokenizer.model_input_names) == (name == "with-words")
        renumber = np.vectorize(lambda index, new=new_ids, old=old_chars: new[old[index]])
        for i, sentence in enumerate(SENTENCES["sentences"]):
            expected = renumber(ref[f"chars_{i}"])
            enc = tokenizer(sentence, is_split_into_words=True, return_vocab_ids=True)
            np.testing.assert_array_equal(np.array(enc["input_ids"]).reshape(-1, 50), expected[1:-1])
            np.testing.assert_array_equal(model.boundary_ids[:, :50].numpy(), expected[[0, -1]])
            if f"words_{i}" in ref:  # word.dic order is kept: <oov> <bos> <eos> <pad> first
                assert enc["vocab_ids"] == ref[f"words_{i}"][1:-1].tolist()
                assert model.boundary_ids[:, 50].tolist() == ref[f"words_{i}"][[0, -1]].tolist()
        assert tokenizer.decode(tokenizer(["Brücke", "ℵ"], is_split_into_words=True)["input_ids"]) == "Brücke \ufffd"


def test_embed_corpus_and_elmo_embed(converted, tmp_path):
    """``embed_corpus`` (with its per-chunk word cache) and ``elmo embed`` pass the word ids: the same outputs."""
    folder = converted["with-words"]
    sentences = [s for s in SENTENCES["sentences"] if s]
    expected = run(folder, sentences)
    model = ElmoModel.from_pretrained(folder).eval()
    tokenizer = ElmoTokenizer.from_pretrained(folder)
    got = dict(embed_corpus(model, tokenizer, sentences, batch_size=3, progress=False))
    for i, layers in enumerate(expected):
        np.testing.assert_allclose(got[i], layers, rtol=0, atol=1e-6)
    text = tmp_path / "in.txt"
    text.write_text("\n".join(" ".join(s) for s in sentences[:3]) + "\n", encoding="utf-8")
    assert cli.main(["embed", "--model", str(folder), "--tokenized", str(text), "-o", str(tmp_path / "out.hdf5")]) == 0
    import h5py

    with h5py.File(tmp_path / "out.hdf5") as f:
        np.testing.assert_allclose(f["0"][()], expected[0], rtol=0, atol=1e-6)


def test_a_word_input_model_needs_vocab_ids(converted):
    folder = converted["with-words"]
    model = ElmoModel.from_pretrained(folder).eval()
    tokenizer = ElmoTokenizer.from_pretrained(folder)
    batch = tokenizer([["die", "Brücke"]], is_split_into_words=True, return_tensors="pt")
    with pytest.raises(ValueError, match="pass vocab_ids"):
        model(batch["input_ids"], batch["attention_mask"])
    with pytest.raises(ValueError, match=r"vocab_ids must be word ids in \[0, "):
        model(**{**batch, "vocab_ids": batch["vocab_ids"] + 10**6})


def test_heads_and_the_pipeline_pass_the_word_ids(converted):
    """The task heads and the feature-extraction pipeline take a word-input biLM as any other: their inputs are
    ``tokenizer(...)``'s, ``vocab_ids`` included."""
    from transformers import pipeline

    from modeling_elmo import ElmoForSequenceClassification, ElmoForTokenClassification
    from modeling_elmo.inference.export import ElmoExportWrapper

    folder = converted["with-words"]
    tokenizer = ElmoTokenizer.from_pretrained(folder)
    batch = tokenizer([["die", "Brücke"], ["好"]], is_split_into_words=True, padding=True, return_tensors="pt")
    tagger = ElmoForTokenClassification.from_pretrained(folder, num_labels=3).eval()
    assert tagger.needs_vocab_ids and tagger(**batch).logits.shape == (2, 2, 3)
    classifier = ElmoForSequenceClassification.from_pretrained(folder, num_labels=2).eval()
    assert classifier(**batch).logits.shape == (2, 2)
    extractor = pipeline("elmo-feature-extraction", model=folder, batch_size=2)
    vectors = extractor(["die Brücke .", "北京"])
    expected = ElmoModel.from_pretrained(folder).eval()(**tokenizer(["die Brücke ."], return_tensors="pt")).elmo
    np.testing.assert_allclose(np.array(vectors[0]), expected.detach().numpy(), rtol=0, atol=1e-6)
    with pytest.raises(ValueError, match="ELMoForManyLangs"):
        ElmoExportWrapper(ElmoModel.from_pretrained(folder))


def test_zero_shot_and_question_answering_pipelines_pass_pairs_and_word_ids(converted):
    """Issue 49: a ManyLangs tokenizer's ``model_input_names`` (saved as input_ids, attention_mask, vocab_ids) lacked
    ``token_type_ids``, so the zero-shot pipeline (which passes those names on) gave the model no pair; they name
    it now, and the QA pipeline passes ``vocab_ids`` too."""
    from transformers import pipeline

    from modeling_elmo import ElmoForQuestionAnswering, ElmoForSequenceClassification

    folder = converted["with-words"]
    tokenizer = ElmoTokenizer.from_pretrained(folder)
    assert tokenizer.model_input_names == ["input_ids", "attention_mask", "vocab_ids", "token_type_ids"]
    labels = {"id2label": {0: "entailment", 1: "contradiction"}, "label2id": {"entailment": 0, "contradiction": 1}}
    torch.manual_seed(0)
    classifier = ElmoForSequenceClassification.from_pretrained(folder, classifier_head="pair", **labels).eval()
    qa_model = ElmoForQuestionAnswering.from_pretrained(folder, classifier_hidden_size=8).eval()
    seen = []
    for model in (classifier, qa_model):
        model.register_forward_pre_hook(lambda module, args, kwargs: seen.append(sorted(kwargs)), with_kwargs=True)
    classify = pipeline("zero-shot-classification", model=classifier, tokenizer=tokenizer)
    assert sorted(classify("die Brücke", candidate_labels=["Brücke", "北京"])["labels"]) == ["Brücke", "北京"]
    qa = pipeline("elmo-question-answering", model=qa_model, tokenizer=tokenizer)
    answer = qa(question="wo ?", context="die Brücke in 北京 .")
    assert "die Brücke in 北京 ."[answer["start"] : answer["end"]] == answer["answer"]
    assert seen == [["attention_mask", "input_ids", "token_type_ids", "vocab_ids"]] * 3


# ---------------------------------------------------------------------------------------------------------------
# Untrusted files
# ---------------------------------------------------------------------------------------------------------------


class _Payload:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):  # unpickling it would create the marker file
        return (open, (str(self.marker), "w"))


def _copy(tmp_path: Path, name: str = "with-words") -> Path:
    folder = tmp_path / "source"
    shutil.copytree(FIXTURES / name, folder)
    return folder


def _refused(folder: Path, tmp_path: Path, *words: str) -> str:
    with pytest.raises(ConversionError) as error:
        convert_manylangs(folder, tmp_path / "out")
    message = str(error.value)
    for word in words:
        assert word in message, message
    assert not (tmp_path / "out").exists()
    return message


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")  # the raw pickle below: torch warns, then refuses
@pytest.mark.parametrize("legacy", [False, True])
def test_a_pickle_that_runs_code_is_refused_unrun(tmp_path, legacy):
    folder = _copy(tmp_path)
    marker = tmp_path / "pwned"
    state = torch.load(folder / "encoder.pkl", weights_only=True)
    state["forward_layer_0.state_linearity.bias"] = _Payload(marker)
    if legacy:
        (folder / "encoder.pkl").write_bytes(pickle.dumps(state))
    else:
        torch.save(state, folder / "encoder.pkl")
    _refused(folder, tmp_path, "encoder.pkl", "weights_only=True")
    assert not marker.exists()


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        (lambda s: s.update({"projection.bias": s["projection.bias"].long()}), ["projection.bias", "torch.int64"]),
        (lambda s: s.update({"projection.bias": s["projection.bias"][:-1]}), ["projection.bias", "shape"]),
        (lambda s: s.update({"extra": torch.zeros(1)}), ["unexpected entry 'extra'"]),
        (lambda s: s.pop("highways._layers.1.bias"), ["missing highways._layers.1.bias"]),
        (lambda s: s.update({"projection.bias": [1.0, 2.0]}), ["projection.bias is a list"]),
        (lambda s: s["projection.weight"].__setitem__((0, 0), float("nan")), ["NaN"]),
    ],
)
def test_state_dicts_are_checked(tmp_path, edit, words):
    folder = _copy(tmp_path)
    state = torch.load(folder / "token_embedder.pkl", weights_only=True)
    edit(state)
    torch.save(state, folder / "token_embedder.pkl")
    _refused(folder, tmp_path, "token_embedder.pkl", *words)


def test_not_a_state_dict_and_bad_folders(tmp_path):
    folder = _copy(tmp_path)
    torch.save([torch.zeros(2)], folder / "encoder.pkl")
    _refused(folder, tmp_path, "holds a list, not a state dict")
    folder.joinpath("encoder.pkl").write_bytes(b"not a pickle")
    _refused(folder, tmp_path, "encoder.pkl", "not a plain PyTorch state dict")
    shutil.rmtree(folder)

    folder = _copy(tmp_path)
    text = (folder / "char.dic").read_text(encoding="utf-8").replace("<bow>\t", "<bxw>\t")
    (folder / "char.dic").write_text(text, encoding="utf-8")
    _refused(folder, tmp_path, "char.dic", "<bow>")
    (folder / "char.dic").write_text("a\t0\nb\tx\n", encoding="utf-8")
    _refused(folder, tmp_path, "char.dic line 2")
    shutil.rmtree(folder)

    folder = _copy(tmp_path)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "config_path": "/elsewhere/unknown.json"}))
    _refused(folder, tmp_path, "unknown.json", "cnn_50_100_512_4096_sample.json")
    # The releases name the package's default (built in): these tiny weights do not fit it.
    (folder / "config.json").write_text(json.dumps({**config, "config_path": "/x/cnn_50_100_512_4096_sample.json"}))
    _refused(folder, tmp_path, "token_embedder.pkl", "the architecture needs (35, 100)")
    (folder / "word.dic").unlink()
    with pytest.raises(FileNotFoundError, match="word.dic"):
        convert_manylangs(folder, tmp_path / "out")


def test_dictionaries_are_read_as_the_package_reads_them(tmp_path):
    """``line.strip().split('\\t')``: a whitespace character is lost to strip() and the line is U+3000's; later
    lines win; the line breaks are those of its codecs reader (U+2028 too)."""
    path = tmp_path / "char.dic"
    path.write_text("a\t0\n \t1\nb\t2\na\t3\nc\u2028\t4\n", encoding="utf-8")
    with pytest.raises(ConversionError, match="line 5"):  # 'c' then '\t4' on a line of its own
        read_dictionary(path)
    path.write_text("a\t0\n \t1\nb\t2\na\t3\n", encoding="utf-8")
    assert read_dictionary(path) == {"a": 3, "\u3000": 1, "b": 2}


def test_the_cli(tmp_path, capsys):
    out = tmp_path / "out"
    assert cli.main(["convert", "--manylangs_dir", str(FIXTURES / "chars-only"), "--output_dir", str(out)]) == 0
    assert "Converted to" in capsys.readouterr().out
    assert json.loads((out / "config.json").read_text())["char_vocabulary"] == "manylangs"
    assert cli.main(["convert", "--manylangs_dir", str(FIXTURES / "chars-only"), "--output_dir", str(out)]) == 1
    assert "not empty" in capsys.readouterr().err
    assert cli.main(["convert", "--manylangs_dir", "x", "--weight_file", "w", "--output_dir", str(out)]) == 2
    assert "takes no --options_file" in capsys.readouterr().err


def test_config_bounds_and_counts():
    with pytest.raises(ValueError, match="needs char_vocabulary='manylangs'"):
        ElmoConfig(word_vocab_size=10, word_embedding_dim=4)
    with pytest.raises(ValueError, match="n_characters must be 261 or 262"):
        ElmoConfig(n_characters=300)
    with pytest.raises(ValueError, match="both be 0"):
        ElmoConfig(char_vocabulary="manylangs", n_characters=20, word_vocab_size=10)
    config = ElmoConfig(
        char_vocabulary="manylangs", n_characters=20, word_vocab_size=11, word_embedding_dim=3, lstm_dim=8,
        projection_dim=4, char_embedding_dim=5, char_cnn_filters=[[1, 2], [2, 3]], n_highway=1,
    )  # fmt: skip
    counted = sum(p.numel() for n, p in ElmoModel(config).named_parameters() if "scalar_mix" not in n)
    counts = config.parameter_counts()
    assert counted == sum(v for k, v in counts.items() if not k.startswith(("lm_", "tagger_", "num_", "classifier_")))


# ---------------------------------------------------------------------------------------------------------------
# elmo download of the 44 languages, from a local HTTP mirror
# ---------------------------------------------------------------------------------------------------------------


class _Files(BaseHTTPRequestHandler):
    files: dict[str, bytes] = {}
    requests: list[str] = []

    def do_GET(self):  # noqa: N802
        self.requests.append(self.path)
        body = self.files.get(self.path)
        if body is None:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def mirror():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Files)
    _Files.files, _Files.requests = {}, []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield _Files.files, f"http://127.0.0.1:{server.server_address[1]}/repository/11/"
    server.shutdown()
    server.server_close()
    thread.join(10)


def _zip(folder: Path, prefix: str = "", extra: dict[str, bytes] | None = None) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path in sorted(folder.iterdir()):
            archive.write(path, prefix + path.name)
        archive.writestr(prefix + "README", "NLPL Word Vectors Repository")
        for name, data in (extra or {}).items():
            archive.writestr(name, data)
    return buffer.getvalue()


def test_names_of_the_44_languages():
    assert len(LANGUAGES) == 44 and len({i for _, i in LANGUAGES.values()}) == 44
    assert canonical_name("de") == canonical_name("German") == canonical_name("manylangs-de") == "manylangs-de"
    assert canonical_name("norwegian-bokmal") == canonical_name("Norwegian Bokmål") == "manylangs-nb"
    assert canonical_name("Ancient Greek") == "manylangs-grc" and canonical_name("zh") == "manylangs-zh"
    assert canonical_name("pt") == "pt" and canonical_name("manylangs-pt") == "manylangs-pt"  # AllenNLP's pt stays
    assert zip_url("manylangs-zh", None) == "http://vectors.nlpl.eu/repository/11/179.zip"
    assert canonical_name("klingon") is None


def test_download_unpacks_and_converts_through_the_same_path(mirror, tmp_path, converted, monkeypatch, capsys):
    files, base = mirror
    monkeypatch.setenv("ELMO_MANYLANGS_BASE_URL", base)
    files["/repository/11/142.zip"] = _zip(FIXTURES / "with-words-legacy", prefix="de/")
    folder = download_released_model("German", cache_dir=tmp_path / "cache", progress=False)
    assert folder == tmp_path / "cache" / "manylangs-de"
    assert "language: de" in (folder / "README.md").read_text(encoding="utf-8")
    assert os.listdir(tmp_path / "cache") == ["manylangs-de"]  # no download, no lock file left
    expected = run(converted["with-words"], SENTENCES["sentences"][:4])
    for a, b in zip(run(folder, SENTENCES["sentences"][:4]), expected, strict=True):
        np.testing.assert_array_equal(a, b)
    files.clear()  # cached: no request
    assert cli.main(["download", "de", "--cache_dir", str(tmp_path / "cache")]) == 0
    assert capsys.readouterr().out.strip() == str(folder)


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        ({"../evil.json": b"{}"}, ["unsafe path", "../evil.json"]),
        ({"/abs/char.dic": b""}, ["unsafe path"]),
        ({"other/char.dic": b"x\t0\n"}, ["char.dic twice"]),
    ],
)
def test_unsafe_zips_are_refused(tmp_path, extra, words):
    archive = tmp_path / "m.zip"
    archive.write_bytes(_zip(FIXTURES / "chars-only", prefix="m/", extra=extra))
    with pytest.raises(DownloadError) as error:
        unpack_model(archive, tmp_path / "unpacked")
    for word in words:
        assert word in str(error.value)
    assert not (tmp_path / "evil.json").exists()


def test_a_zip_link_or_a_missing_file_is_refused(tmp_path, mirror, monkeypatch):
    archive = tmp_path / "m.zip"
    with zipfile.ZipFile(archive, "w") as out:
        info = zipfile.ZipInfo("char.dic")
        info.external_attr = 0o120777 << 16  # a symbolic link
        out.writestr(info, "/etc/passwd")
    with pytest.raises(DownloadError, match="a link"):
        unpack_model(archive, tmp_path / "unpacked")
    files, base = mirror
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as out:
        out.writestr("README", "no model here")
    files["/repository/11/179.zip"] = buffer.getvalue()
    with pytest.raises(DownloadError, match="lacks char.dic"):
        download_released_model("zh", cache_dir=tmp_path / "cache", base_url=base, progress=False)
    assert not (tmp_path / "cache" / "manylangs-zh").exists()
    assert not (tmp_path / "cache" / ".downloads").exists()


# ---------------------------------------------------------------------------------------------------------------
# The cache's safety (issue 26 entries 2 and 13) holds for the 44 languages too: they share download.py's flow
# ---------------------------------------------------------------------------------------------------------------


def _user_folder(tmp_path: Path) -> Path:
    """A user's folder outside the cache, shaped like a downloads folder (``unpacked/char.dic``, ``142.zip``)."""
    user = tmp_path / "user"
    (user / "unpacked").mkdir(parents=True)
    (user / "unpacked" / "char.dic").write_text("my characters\n", encoding="utf-8")
    (user / "142.zip").write_bytes(b"my zip")
    return user


@pytest.mark.parametrize("force", [False, True], ids=["first-download", "force"])
def test_symlinked_manylangs_downloads_folder_is_refused(mirror, tmp_path, force, capsys):
    """``CACHE/.downloads/manylangs-de`` a symlink to a user folder: a first download and ``--force`` on a cached
    model refuse it before any request, and the user folder survives untouched."""
    files, base = mirror
    files["/repository/11/142.zip"] = _zip(FIXTURES / "chars-only", prefix="de/")
    cache = tmp_path / "cache"
    if force:
        download_released_model("de", cache_dir=cache, base_url=base, progress=False)
    user = _user_folder(tmp_path)
    before = snapshot(user)
    link = cache / ".downloads" / "manylangs-de"
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(user)
    requests = len(_Files.requests)
    argv = ["download", "de", "--cache_dir", str(cache), "--base_url", base, "--disable_tqdm"]
    code = cli.main(argv + ["--force"] * force)
    err = capsys.readouterr().err
    assert code == 1 and err.startswith(f"error: {link} is a symbolic link: refusing"), err
    assert snapshot(user) == before and len(_Files.requests) == requests
    assert (cache / "manylangs-de").exists() == force  # a cached model stays as it was


def test_planted_link_in_the_unpacked_folder_is_not_written_through(mirror, tmp_path):
    """The zip is already downloaded and ``unpacked/char.dic`` is a symlink to a user file: the unpacking starts
    from a fresh folder (the link is removed, not what it points to), and the model converts."""
    files, base = mirror
    data = _zip(FIXTURES / "chars-only", prefix="de/")
    downloads = tmp_path / "cache" / ".downloads" / "manylangs-de"
    (downloads / "unpacked").mkdir(parents=True)
    (downloads / "142.zip").write_bytes(data)  # a complete download of an earlier call: reused, no request
    user = _user_folder(tmp_path)
    before = snapshot(user)
    (downloads / "unpacked" / "char.dic").symlink_to(user / "unpacked" / "char.dic")
    folder = download_released_model("de", cache_dir=tmp_path / "cache", base_url=base, progress=False)
    assert snapshot(user) == before and _Files.requests == []
    assert (folder / "model.safetensors").is_file() and not (tmp_path / "cache" / ".downloads").exists()


MANYLANGS_DAMAGES = {
    "empty config.json": (lambda f: (f / "config.json").write_bytes(b""), "config.json is not a JSON object"),
    "no char_vocab.json": (lambda f: (f / "char_vocab.json").unlink(), "char_vocab.json is missing"),
    "cut char_vocab.json": (
        lambda f: (f / "char_vocab.json").write_text('["<bos>"]', encoding="utf-8"),
        "char_vocab.json does not list",
    ),
    "cut vocab.txt": (lambda f: (f / "vocab.txt").write_text("<oov>\n", encoding="utf-8"), "vocab.txt has 1 lines"),
    "empty model.safetensors": (
        lambda f: (f / "model.safetensors").write_bytes(b""),
        "model.safetensors has no safetensors header",
    ),
}


@pytest.mark.parametrize("damage", list(MANYLANGS_DAMAGES))
def test_damaged_cached_manylangs_model_is_reported(mirror, tmp_path, damage):
    """A damaged ``CACHE/manylangs-de`` is an error naming the damage and ``--force``, without a request;
    ``force=True`` downloads and converts it again."""
    files, base = mirror
    files["/repository/11/142.zip"] = _zip(FIXTURES / "with-words", prefix="de/")
    cache = tmp_path / "cache"
    folder = download_released_model("de", cache_dir=cache, base_url=base, progress=False)
    expected = run(folder, SENTENCES["sentences"][:2])
    damage_folder, problem = MANYLANGS_DAMAGES[damage]
    damage_folder(folder)
    requests = len(_Files.requests)
    with pytest.raises(DownloadError) as info:
        download_released_model("German", cache_dir=cache, base_url=base, progress=False)
    message = str(info.value)
    assert f"the cached model {folder} is damaged ({problem}" in message, message
    assert "`elmo download manylangs-de --force`" in message and len(_Files.requests) == requests
    assert download_released_model("de", cache_dir=cache, base_url=base, force=True, progress=False) == folder
    for a, b in zip(run(folder, SENTENCES["sentences"][:2]), expected, strict=True):
        np.testing.assert_array_equal(a, b)


def test_a_downloaded_zip_with_a_parent_path_is_refused(mirror, tmp_path):
    """A served zip holding ``../evil.json`` (and ``de/../../evil.json``): refused before anything is unpacked,
    the download deleted, no model folder, and nothing written outside the cache."""
    files, base = mirror
    extra = {"../evil.json": b"{}", "de/../../evil.json": b"{}"}
    files["/repository/11/142.zip"] = _zip(FIXTURES / "chars-only", prefix="de/", extra=extra)
    cache = tmp_path / "cache"
    with pytest.raises(DownloadError) as info:
        download_released_model("de", cache_dir=cache, base_url=base, progress=False)
    message = str(info.value)
    assert "holds an unsafe path '../evil.json': refused" in message and "does not unpack" in message, message
    assert "elmo convert --manylangs_dir DIR" in message
    assert os.listdir(cache) == []
    assert not list(tmp_path.rglob("evil.json"))


# ---------------------------------------------------------------------------------------------------------------
# Damaged downloads are deleted, not kept (issue 36 point 6), and every hostile .pkl is one clear error
# ---------------------------------------------------------------------------------------------------------------


def _damaged_zip(folder: Path, compression: int) -> bytes:
    """``_zip(folder, "de/")`` compressed with ``compression``, 16 bytes of ``encoder.pkl``'s compressed data
    overwritten near its start: the central directory reads, the entry does not decompress (zlib.error, LZMAError,
    or bz2's OSError "Invalid data stream"), and its CRC is never reached."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=compression) as archive:
        for path in sorted(folder.iterdir()):
            archive.write(path, "de/" + path.name)
    data = bytearray(buffer.getvalue())
    with zipfile.ZipFile(io.BytesIO(bytes(data))) as archive:
        offset = archive.getinfo("de/encoder.pkl").header_offset
    name_length, extra_length = struct.unpack("<HH", data[offset + 26 : offset + 30])
    start = offset + 30 + name_length + extra_length + 9
    data[start : start + 16] = b"\xff" * 16
    return bytes(data)


@pytest.mark.parametrize(
    "compression", [zipfile.ZIP_DEFLATED, zipfile.ZIP_LZMA, zipfile.ZIP_BZIP2], ids=["deflate", "lzma", "bzip2"]
)
def test_a_zip_that_does_not_unpack_is_deleted_and_fetched_anew(mirror, tmp_path, compression, capsys):
    files, base = mirror
    files["/repository/11/142.zip"] = _damaged_zip(FIXTURES / "chars-only", compression)
    cache = tmp_path / "cache"
    argv = ["download", "de", "--cache_dir", str(cache), "--base_url", base, "--disable_tqdm"]
    assert cli.main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: the zip of 'manylangs-de' downloaded from {base}142.zip does not unpack: "), err
    assert "142.zip is damaged: 'de/encoder.pkl' does not unpack" in err and err.count("\n") == 1, err
    assert "it was deleted: the next call downloads it anew" in err and "could not write" not in err, err
    assert os.listdir(cache) == []  # no model, no download, no lock file
    # The next call fetches it anew (here: the mirror serves a sound zip now).
    files["/repository/11/142.zip"] = _zip(FIXTURES / "chars-only", prefix="de/")
    folder = download_released_model("de", cache_dir=cache, base_url=base, progress=False)
    assert (folder / "model.safetensors").is_file() and _Files.requests.count("/repository/11/142.zip") == 2


def _zip_with_a_bad_utf8_name() -> bytes:
    """A zip whose entry ``de/\u00e9.json`` (zipfile flags a non-ASCII name UTF-8, bit 11) is renamed, in both
    headers, to the bytes ``de/\\xff\\xfe.json``, which are not UTF-8."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path in sorted((FIXTURES / "chars-only").iterdir()):
            archive.write(path, "de/" + path.name)
        archive.writestr("de/\u00e9.json", b"{}")
    data = buffer.getvalue()
    name = "de/\u00e9.json".encode()
    assert data.count(name) == 2
    return data.replace(name, b"de/\xff\xfe.json")


def test_a_zip_entry_name_that_is_not_utf8_names_the_zip(mirror, tmp_path, capsys):
    archive = tmp_path / "m.zip"
    archive.write_bytes(_zip_with_a_bad_utf8_name())
    with pytest.raises(DownloadError) as info:
        unpack_model(archive, tmp_path / "unpacked")
    message = str(info.value)
    assert message.startswith("m.zip is not a readable zip file") and r"de/\xff\xfe.json" in message, message
    assert "flagged UTF-8" in message and not list((tmp_path / "unpacked").glob("*")), message

    files, base = mirror
    files["/repository/11/142.zip"] = _zip_with_a_bad_utf8_name()
    cache = tmp_path / "cache"
    assert cli.main(["download", "de", "--cache_dir", str(cache), "--base_url", base, "--disable_tqdm"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: the file downloaded from {base}142.zip is not a readable zip file"), err
    assert "flagged UTF-8" in err and "it was deleted" in err and err.count("\n") == 1, err
    assert os.listdir(cache) == []


class _System:
    """Unpickled, it would run ``touch MARKER`` through ``os.system`` (``posix.system``)."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _no_torch_advice(message: str) -> None:
    """One line of ours: torch's advice to load with ``weights_only=False`` (or to allow a global) never shows."""
    assert "\n" not in message and "False" not in message and "safe_globals" not in message, message


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
@pytest.mark.parametrize("legacy", [False, True], ids=["zip", "legacy"])
def test_a_refused_global_is_named(tmp_path, legacy):
    folder = _copy(tmp_path)
    marker = tmp_path / "pwned"
    state = torch.load(folder / "encoder.pkl", weights_only=True)
    state["forward_layer_0.state_linearity.bias"] = _System(marker)
    if legacy:
        evil = {"forward_layer_0.state_linearity.bias": _System(marker)}  # a protocol torch's legacy reader reads
        (folder / "encoder.pkl").write_bytes(pickle.dumps(evil, protocol=2))
    else:
        torch.save(state, folder / "encoder.pkl")
    message = _refused(folder, tmp_path, str(folder / "encoder.pkl"), "posix.system")
    _no_torch_advice(message)
    assert not marker.exists()


@pytest.mark.parametrize("kind", ["sparse", "meta"])
def test_sparse_and_meta_tensors_are_refused_by_name(tmp_path, kind):
    folder = _copy(tmp_path)
    state = torch.load(folder / "token_embedder.pkl", weights_only=True)
    bias = state["projection.bias"]
    state["projection.bias"] = bias.to_sparse() if kind == "sparse" else torch.empty_like(bias, device="meta")
    torch.save(state, folder / "token_embedder.pkl")
    words = ["sparse tensor (torch.sparse_coo)"] if kind == "sparse" else ["meta tensor (it holds no data)"]
    message = _refused(folder, tmp_path, str(folder / "token_embedder.pkl"), "projection.bias", *words)
    _no_torch_advice(message)


def test_a_pkl_cut_short_is_one_clear_error(tmp_path, capsys):
    """The zip-format ``encoder.pkl`` cut anywhere (torch raises OSError ``[Errno 22]``, RuntimeError or EOFError
    by where): always the same error naming the file, never "could not write OUT"."""
    folder = _copy(tmp_path)
    whole = (folder / "encoder.pkl").read_bytes()
    path = folder / "encoder.pkl"
    shapes = {"forward_layer_0.state_projection.weight": (1, 1)}
    for end in range(0, len(whole), 97):
        path.write_bytes(whole[:end])
        with pytest.raises(ConversionError) as error:
            load_state_dict(path, shapes)
        message = str(error.value)
        assert message.startswith(f"{path} is not a readable PyTorch state dict"), (end, message)
        _no_torch_advice(message)
    path.write_bytes(whole[: len(whole) // 5])  # torch's OSError [Errno 22]
    out = tmp_path / "out"
    assert cli.main(["convert", "--manylangs_dir", str(folder), "--output_dir", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path} is not a readable PyTorch state dict") and err.count("\n") == 1, err
    assert not out.exists()


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
def test_random_bytes_are_always_one_clear_error(tmp_path):
    """200 files of 4 KB of seeded random bytes (about 8% of which made the weights-only unpickler raise IndexError
    or KeyError): each one the same kind of error, naming the file."""
    path = tmp_path / "encoder.pkl"
    for seed in range(200):
        path.write_bytes(np.random.default_rng(seed).bytes(4096))
        with pytest.raises(ConversionError) as error:
            load_state_dict(path, {"weight": (2, 2)})
        message = str(error.value)
        assert message.startswith(str(path)) and len(message) < 500, (seed, message)
        _no_torch_advice(message)
