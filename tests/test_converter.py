"""Tests of ``convert_original_weights``: an original ELMo model (bilm-tf ``options.json`` + HDF5 weights) to a
Hugging Face folder.

Every model here is random, written in the original layout by ``tests/original_format.py``; nothing needs
``../shared``. The converted models are checked against a plain numpy ELMo written from the formulas of
ELMO_FACTS.md and the raw HDF5 arrays, never against the converter's own name mapping.

Bad inputs. Each raises ``FileNotFoundError`` or ``ConversionError`` with a message naming the problem, and leaves
neither the output folder nor a ``.partial`` staging folder behind:

- the options file does not exist (``FileNotFoundError``)
- the weight file does not exist (``FileNotFoundError``)
- the vocab file does not exist (``FileNotFoundError``)
- the options file is not valid JSON
- the options file lacks a required key (``lstm.projection_dim``; the message names it)
- the options name an unknown activation (``"gelu"``)
- the options give an impossible ``n_characters`` (300)
- the HDF5 file lacks a dataset (the message names its path)
- an HDF5 dataset's shape disagrees with the options (the message names the dataset)
- the options' LSTM size disagrees with the HDF5 file (the message names the LSTM datasets)
- the HDF5 file is truncated (a valid file cut to half its bytes)
- the weight file is not HDF5 at all
- an HDF5 dataset holds NaN (the message names the dataset)
- an HDF5 dataset holds an infinite value
- the vocab file does not start with ``<S>``, ``</S>``, ``<UNK>``
- output_dir exists and is not empty, without ``overwrite`` (its contents stay untouched)
- output_dir is an existing file
- with ``overwrite=True``, a bad weight file leaves the existing output folder untouched
- writing the folder fails half way (an ``OSError`` while saving): the error propagates, nothing is left behind
- on the command line, a missing weight file (a real process) and an invalid options file (``main()`` in
  process): exit status 1, ``error: ...`` on stderr, no traceback, no output folder
- on the command line, an output_dir below an existing file: exit status 1, ``error: ...``, nothing written
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from original_format import lstm_prefix, read_original_weights, write_original_model
from safetensors import safe_open
from transformers import AutoModel, AutoTokenizer

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:  # convert_original_weights.py is a top-level module of the checkout
    sys.path.insert(0, str(REPO_ROOT))

import modeling_elmo  # noqa: E402  (registers the Auto classes)
from modeling_elmo import ElmoModel, ElmoTokenizer  # noqa: E402
from modeling_elmo.commands.convert import main  # noqa: E402
from modeling_elmo.hub.convert import ConversionError, convert  # noqa: E402

MAX_CHARS = 50
ORIGINAL = {
    "lstm_dim": 4096,
    "projection_dim": 512,
    "n_layers": 2,
    "filters": [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]],
    "char_dim": 16,
    "n_highway": 2,
}
SMALL = {"lstm_dim": 32, "projection_dim": 8, "filters": [[1, 4], [2, 6], [3, 8]], "char_dim": 4, "n_highway": 1}
SENTENCES = [
    ["The", "cat", "sat", "on", "the", "mat", "."],
    ["Héllo", "wörld", "日本"],
    ["x" * 60, "!"],  # a word longer than 48 bytes is cut
]
# The float32 model vs the float64 numpy ELMo on the small models: measured at most 5.4e-7 on values up to 3.2
# (default, AVX2 and unvectorised kernels); a weight in the wrong place or layout is off by 1e-2 or more.
NUMPY_ATOL = 1e-5
VOCAB_LINES = ["<S>", "</S>", "<UNK>", "the", "cat", "sat", "."]
CLI_SCRIPT = "convert_original_weights.py"


# ---------------------------------------------------------------------------------------------
# A plain numpy ELMo, written from ELMO_FACTS.md and reading the raw HDF5 arrays
# ---------------------------------------------------------------------------------------------


def char_ids(word: str) -> list[int]:
    """The 50 character ids of a word, by hand: ``[258, bytes (at most 48), 259, 260...] + 1``; the boundaries
    ``<S>`` and ``</S>`` have the bytes 256 and 257."""
    if word == "<S>":
        inner = [256]
    elif word == "</S>":
        inner = [257]
    else:
        inner = list(word.encode("utf-8"))[: MAX_CHARS - 2]
    row = [258, *inner, 259] + [260] * (MAX_CHARS - 2 - len(inner))
    return [value + 1 for value in row]


def batch_ids(sentences: list[list[str]]) -> torch.Tensor:
    """``(B, W, 50)`` character ids, padded words all zeros."""
    ids = torch.zeros(len(sentences), max(map(len, sentences)), MAX_CHARS, dtype=torch.long)
    for row, sentence in enumerate(sentences):
        for position, word in enumerate(sentence):
            ids[row, position] = torch.tensor(char_ids(word))
    return ids


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


ACTIVATIONS = {"relu": lambda x: np.maximum(x, 0.0), "tanh": np.tanh}


def np_embed(w: dict[str, np.ndarray], word: str) -> np.ndarray:
    """``(50, char_dim)``: the stored ``char_embed`` row ``r`` is the character id ``r + 1``."""
    return w["char_embed"][np.array(char_ids(word)) - 1]


def np_conv(embedded: np.ndarray, kernel: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """One filter over all positions, no padding: ``(50, char_dim)`` chars and a ``(1, width, char_dim, count)``
    kernel give ``(50 - width + 1, count)``; explicit loops over positions and kernel offsets."""
    _, width, _, count = kernel.shape
    out = np.zeros((embedded.shape[0] - width + 1, count))
    for position in range(out.shape[0]):
        for offset in range(width):
            out[position] += embedded[position + offset] @ kernel[0, offset]
        out[position] += bias
    return out


def np_highway(w: dict[str, np.ndarray], k: int, x: np.ndarray) -> np.ndarray:
    t = sigmoid(x @ w[f"CNN_high_{k}/W_carry"] + w[f"CNN_high_{k}/b_carry"])
    return t * np.maximum(x @ w[f"CNN_high_{k}/W_transform"] + w[f"CNN_high_{k}/b_transform"], 0.0) + (1.0 - t) * x


def np_token_vector(w: dict[str, np.ndarray], options: dict, word: str) -> np.ndarray:
    """Layer 0 of a word: char CNN (max over positions, then the activation), highways, projection."""
    cnn = options["char_cnn"]
    activation = ACTIVATIONS[cnn["activation"]]
    embedded = np_embed(w, word)
    x = np.concatenate(
        [
            activation(np_conv(embedded, w[f"CNN/W_cnn_{i}"], w[f"CNN/b_cnn_{i}"]).max(axis=0))
            for i in range(len(cnn["filters"]))
        ]
    )
    for k in range(cnn["n_highway"]):
        x = np_highway(w, k, x)
    return x @ w["CNN_proj/W_proj"] + w["CNN_proj/b_proj"]


def np_lstm(xs: np.ndarray, w: dict[str, np.ndarray], prefix: str, cell_clip, proj_clip) -> np.ndarray:
    """One LSTM (TensorFlow ``LSTMCell`` with projection) over ``xs`` ``(T, P)`` from zero state; ``(T, P)``."""
    weights, bias, projection = w[f"{prefix}/W_0"], w[f"{prefix}/B"], w[f"{prefix}/W_P_0"]
    h = np.zeros(projection.shape[1])
    c = np.zeros(projection.shape[0])
    outputs = []
    for x in xs:
        i, j, f, o = np.split(np.concatenate([x, h]) @ weights + bias, 4)
        c = sigmoid(f + 1.0) * c + sigmoid(i) * np.tanh(j)  # forget bias 1.0, not stored in B
        if cell_clip is not None:
            c = np.clip(c, -cell_clip, cell_clip)
        h = (sigmoid(o) * np.tanh(c)) @ projection
        if proj_clip is not None:
            h = np.clip(h, -proj_clip, proj_clip)
        outputs.append(h)
    return np.stack(outputs)


def np_elmo_layers(w: dict[str, np.ndarray], options: dict, words: list[str], clip: bool = True) -> list[np.ndarray]:
    """The ``L + 1`` layers ``(n, 2P)`` of a sentence: the biLM reads ``<S> words </S>``, forward left to right and
    backward right to left; the boundaries are dropped at the end. ``clip=False`` ignores the options' clips."""
    lstm = options["lstm"]
    cell_clip = lstm.get("cell_clip") if clip else None
    proj_clip = lstm.get("proj_clip") if clip else None
    x = np.stack([np_token_vector(w, options, token) for token in ["<S>", *words, "</S>"]])
    layers = [np.concatenate([x, x], axis=1)]
    forward, backward = x, x[::-1]
    for layer in range(lstm["n_layers"]):
        new_forward = np_lstm(forward, w, lstm_prefix(0, layer), cell_clip, proj_clip)
        new_backward = np_lstm(backward, w, lstm_prefix(1, layer), cell_clip, proj_clip)
        if lstm.get("use_skip_connections", False) and layer > 0:
            new_forward, new_backward = new_forward + forward, new_backward + backward
        forward, backward = new_forward, new_backward
        layers.append(np.concatenate([forward, backward[::-1]], axis=1))
    return [layer[1:-1] for layer in layers]


def model_layers(model: ElmoModel, sentences: list[list[str]]) -> tuple[torch.Tensor, ...]:
    with torch.no_grad():
        return model(batch_ids(sentences), output_hidden_states=True).hidden_states


def assert_matches_numpy(model: ElmoModel, weights, options: Path, sentences, atol: float) -> None:
    """``weights``: the HDF5 path, or its arrays already read."""
    w = weights if isinstance(weights, dict) else read_original_weights(weights)
    opts = json.loads(options.read_text())
    layers = model_layers(model, sentences)
    assert len(layers) == opts["lstm"]["n_layers"] + 1
    for row, words in enumerate(sentences):
        expected = np_elmo_layers(w, opts, words)
        for index, (got, want) in enumerate(zip(layers, expected, strict=True)):
            where = f"sentence {row} layer {index}"
            np.testing.assert_allclose(got[row, : len(words)].double().numpy(), want, rtol=0, atol=atol, err_msg=where)
            assert not got[row, len(words) :].any(), "padded positions must be zero"


# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------


def staging_leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if ".partial" in p.name)


def convert_fails(error: type[Exception], options, weights, out: Path, **kwargs) -> str:
    """Run ``convert``, which must raise ``error`` and leave nothing behind; return the message."""
    with pytest.raises(error) as info:
        convert(options, weights, out, progress=False, **kwargs)
    assert not out.exists(), "a failed conversion must not leave the output folder"
    assert staging_leftovers(out.parent) == []
    return str(info.value)


def edit_options(options: Path, edit) -> None:
    data = json.loads(options.read_text())
    edit(data)
    options.write_text(json.dumps(data))


def run_cli(*args, cwd: Path = REPO_ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, CLI_SCRIPT, *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture
def small(tmp_path: Path) -> tuple[Path, Path]:
    """A small random original model: ``(options_path, weight_path)``."""
    return write_original_model(tmp_path / "original", **SMALL)


@pytest.fixture
def vocab_file(tmp_path: Path) -> Path:
    path = tmp_path / "vocab.txt"
    path.write_text("\n".join(VOCAB_LINES) + "\n", encoding="utf-8")
    return path


# ---------------------------------------------------------------------------------------------
# The original size, end to end
# ---------------------------------------------------------------------------------------------


def expected_char_cnn_state(w: dict[str, np.ndarray], n_highway: int, n_conv: int) -> dict[str, np.ndarray]:
    """The character encoder's parameters (standard torch modules) re-derived from the HDF5 arrays: ``nn.Linear``
    stores ``W.T`` of ``x @ W``, ``Conv1d`` stores ``(count, char_dim, width)``, the embedding gets a zero row 0.
    (The biLM's parameter layout is the model's own business: it is checked through its outputs.)"""
    char_dim = w["char_embed"].shape[1]
    state = {"char_cnn.char_embedding.weight": np.vstack([np.zeros((1, char_dim)), w["char_embed"]])}
    for i in range(n_conv):
        state[f"char_cnn.convolutions.{i}.weight"] = np.transpose(w[f"CNN/W_cnn_{i}"][0], (2, 1, 0))
        state[f"char_cnn.convolutions.{i}.bias"] = w[f"CNN/b_cnn_{i}"]
    for k in range(n_highway):
        for part in ("carry", "transform"):
            state[f"char_cnn.highways.{k}.{part}.weight"] = w[f"CNN_high_{k}/W_{part}"].T
            state[f"char_cnn.highways.{k}.{part}.bias"] = w[f"CNN_high_{k}/b_{part}"]
    state["char_cnn.projection.weight"] = w["CNN_proj/W_proj"].T
    state["char_cnn.projection.bias"] = w["CNN_proj/b_proj"]
    return state


@pytest.mark.slow
def test_round_trip_at_original_size(tmp_path: Path):
    """2x4096_512 (93.6M parameters): convert, check the weights and outputs against the HDF5 arrays, save again,
    reload, and get identical outputs."""
    options, weights = write_original_model(tmp_path / "original", **ORIGINAL)
    out = convert(options, weights, tmp_path / "converted", progress=False)
    assert out == tmp_path / "converted"
    assert staging_leftovers(tmp_path) == []
    model, info = ElmoModel.from_pretrained(out, output_loading_info=True)
    model.eval()
    assert not any(info.values()), info
    config = model.config
    assert (config.lstm_dim, config.projection_dim, config.n_layers, config.n_highway) == (4096, 512, 2, 2)
    assert (config.char_embedding_dim, config.n_filters, config.char_cnn_filters) == (16, 2048, ORIGINAL["filters"])
    assert (config.cell_clip, config.proj_clip, config.use_skip_connections) == (3, 3, True)
    assert (config.char_cnn_activation, config.n_characters, config.max_characters_per_token) == ("relu", 262, 50)
    parameters = {name: p.numel() for name, p in model.named_parameters() if not name.startswith("scalar_mixes.")}
    assert sum(parameters.values()) == 93_600_848 + 16  # the paper's 93.6M, plus the zero padding row of the embedding
    lstm_parameters = sum(n for name, n in parameters.items() if name.startswith("bilm."))
    assert lstm_parameters == 2 * 2 * (1024 * 16384 + 16384 + 4096 * 512)  # W_0, B, W_P_0 per direction and layer

    # The character encoder's parameters, exactly (a float32 array is exact in float64).
    w = read_original_weights(weights)
    expected = expected_char_cnn_state(w, n_highway=2, n_conv=len(ORIGINAL["filters"]))
    state = model.state_dict()
    assert sorted(name for name in state if name.startswith("char_cnn.")) == sorted(expected)
    for name, array in expected.items():
        assert torch.equal(state[name], torch.from_numpy(array.astype(np.float32))), name

    # The convolution layout, functionally: each filter over the 50 positions of a word, numpy loops vs Conv1d.
    word = "Tokenization"
    with torch.no_grad():
        embedded = model.char_cnn.char_embedding(torch.tensor([char_ids(word)])).transpose(1, 2)
        for i, conv in enumerate(model.char_cnn.convolutions):
            want = np_conv(np_embed(w, word), w[f"CNN/W_cnn_{i}"], w[f"CNN/b_cnn_{i}"])  # (positions, count)
            got = conv(embedded)[0].T.double().numpy()
            np.testing.assert_allclose(got, want, rtol=0, atol=2e-5, err_msg=f"filter {i}")  # measured 1.8e-6 at 4.2
        # Highways: x @ W_carry / W_transform, not x @ W.T.
        x = np.random.default_rng(1).standard_normal(2048)
        for k, highway in enumerate(model.char_cnn.highways):
            got = highway(torch.from_numpy(x).float()[None])[0].double().numpy()
            np.testing.assert_allclose(got, np_highway(w, k, x), rtol=0, atol=1e-4, err_msg=f"highway {k}")  # 1.6e-6

    # All layers, both directions, against the numpy ELMo: this checks the LSTM weights (W_0's input and recurrent
    # halves, B, W_P_0, both directions, both layers) whatever their layout in the model. Float32 sums over
    # thousands of terms: measured 1.9e-6, 1e-4 leaves room for other kernels; a misplaced half is off by > 1e-2.
    sentences = [["The", "cat", "sat", "on", "the", "mat", "."], ["Hello", "world"]]
    assert_matches_numpy(model, w, options, sentences[1:], atol=1e-4)
    del w, expected, state

    # Through the converted tokenizer, then save_pretrained / from_pretrained: identical outputs.
    tokenizer = ElmoTokenizer.from_pretrained(out)
    encoding = tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt")
    assert torch.equal(encoding["input_ids"], batch_ids(sentences))
    with torch.no_grad():
        before = model(**encoding, output_hidden_states=True)
    model.save_pretrained(tmp_path / "resaved")
    tokenizer.save_pretrained(tmp_path / "resaved")
    reloaded = ElmoModel.from_pretrained(tmp_path / "resaved").eval()
    encoding = ElmoTokenizer.from_pretrained(tmp_path / "resaved")(
        sentences, is_split_into_words=True, padding=True, return_tensors="pt"
    )
    with torch.no_grad():
        after = reloaded(**encoding, output_hidden_states=True)
    assert torch.equal(before.elmo, after.elmo)
    for a, b in zip(before.hidden_states, after.hidden_states, strict=True):
        assert torch.equal(a, b)
    assert torch.isfinite(before.elmo).all() and before.elmo.abs().max() > 0


# ---------------------------------------------------------------------------------------------
# Numbers, at a small size
# ---------------------------------------------------------------------------------------------

NUMERIC_CASES = {
    "relu-2layers-1highway-clipped": dict(SMALL, cell_clip=1.0, proj_clip=0.3),
    "tanh-3layers-2highways": dict(SMALL, activation="tanh", n_layers=3, n_highway=2),
    "relu-1layer-no-highway-no-clips": dict(SMALL, n_layers=1, n_highway=0, cell_clip=None, proj_clip=None),
}


@pytest.mark.parametrize("case", list(NUMERIC_CASES))
def test_converted_model_matches_numpy_elmo(tmp_path: Path, case: str):
    """Every layer, both directions, of a few sentences in one padded batch, vs the numpy ELMo (1e-5)."""
    spec = NUMERIC_CASES[case]
    options, weights = write_original_model(tmp_path / "original", seed=7, **spec)
    model = ElmoModel.from_pretrained(convert(options, weights, tmp_path / "converted", progress=False)).eval()
    assert model.config.char_cnn_activation == spec.get("activation", "relu")
    assert model.config.n_layers == spec.get("n_layers", 2)
    assert model.config.cell_clip == spec.get("cell_clip", 3)
    assert_matches_numpy(model, weights, options, SENTENCES, atol=NUMPY_ATOL)

    if case.endswith("-clipped"):  # the clips must matter in this case, or it tests nothing
        w, opts = read_original_weights(weights), json.loads(options.read_text())
        clipped = np_elmo_layers(w, opts, SENTENCES[0])
        unclipped = np_elmo_layers(w, opts, SENTENCES[0], clip=False)
        assert np.abs(clipped[1] - unclipped[1]).max() > 1e-3


def test_token_layer_and_first_step_by_hand(small, tmp_path: Path):
    """Layer 0 of one word, and the forward LSTM's first output, spelled out from the formulas."""
    options, weights = small
    model = ElmoModel.from_pretrained(convert(options, weights, tmp_path / "converted", progress=False)).eval()
    w = read_original_weights(weights)
    layers = model_layers(model, [["cat"]])
    p = SMALL["projection_dim"]

    x_cat = np_token_vector(w, json.loads(options.read_text()), "cat")
    np.testing.assert_allclose(
        layers[0][0, 0].double().numpy(), np.concatenate([x_cat, x_cat]), atol=NUMPY_ATOL, rtol=0
    )

    # Forward layer 0 at "cat": one step from the state after <S> (which itself started from zero).
    def step(x, h, c, prefix):
        z = np.concatenate([x, h]) @ w[f"{prefix}/W_0"] + w[f"{prefix}/B"]
        i, j, f, o = z[:32], z[32:64], z[64:96], z[96:]  # lstm_dim 32, gate order i, j, f, o
        c = np.clip(sigmoid(f + 1.0) * c + sigmoid(i) * np.tanh(j), -3, 3)
        return np.clip((sigmoid(o) * np.tanh(c)) @ w[f"{prefix}/W_P_0"], -3, 3), c

    x_bos = np_token_vector(w, json.loads(options.read_text()), "<S>")
    h, c = step(x_bos, np.zeros(p), np.zeros(32), lstm_prefix(0, 0))
    h, c = step(x_cat, h, c, lstm_prefix(0, 0))
    np.testing.assert_allclose(layers[1][0, 0, :p].double().numpy(), h, atol=NUMPY_ATOL, rtol=0)


def test_non_residual_model(tmp_path: Path):
    """``use_skip_connections: false`` converts, runs as the numpy ELMo without residuals, and differs from the
    same weights with skip connections from layer 2 on (layer 1 has no residual in either)."""
    options, weights = write_original_model(tmp_path / "plain", use_skip_connections=False, seed=3, **SMALL)
    plain = ElmoModel.from_pretrained(convert(options, weights, tmp_path / "plain-hf", progress=False)).eval()
    assert plain.config.use_skip_connections is False
    assert_matches_numpy(plain, weights, options, SENTENCES, atol=NUMPY_ATOL)

    options_r, weights_r = write_original_model(tmp_path / "residual", use_skip_connections=True, seed=3, **SMALL)
    residual = ElmoModel.from_pretrained(convert(options_r, weights_r, tmp_path / "residual-hf", progress=False))
    plain_layers, residual_layers = model_layers(plain, SENTENCES), model_layers(residual.eval(), SENTENCES)
    assert torch.equal(plain_layers[0], residual_layers[0])
    assert torch.equal(plain_layers[1], residual_layers[1])
    assert (plain_layers[2] - residual_layers[2]).abs().max() > 1e-2


def test_clips_absent_from_options(tmp_path: Path):
    """Options without ``cell_clip``/``proj_clip`` mean no clipping: the config says None and the outputs match
    the numpy ELMo without clips, and differ from the same weights with tiny clips."""
    options, weights = write_original_model(tmp_path / "noclip", cell_clip=None, proj_clip=None, **SMALL)
    lstm_options = json.loads(options.read_text())["lstm"]
    assert "cell_clip" not in lstm_options and "proj_clip" not in lstm_options
    model = ElmoModel.from_pretrained(convert(options, weights, tmp_path / "noclip-hf", progress=False)).eval()
    assert model.config.cell_clip is None and model.config.proj_clip is None
    assert_matches_numpy(model, weights, options, SENTENCES, atol=NUMPY_ATOL)

    options_c, weights_c = write_original_model(tmp_path / "clip", cell_clip=0.05, proj_clip=0.05, **SMALL)
    clipped = ElmoModel.from_pretrained(convert(options_c, weights_c, tmp_path / "clip-hf", progress=False))
    assert clipped.config.cell_clip == 0.05
    assert (model_layers(model, SENTENCES)[1] - model_layers(clipped.eval(), SENTENCES)[1]).abs().max() > 1e-2


def test_training_options_n_characters_261(tmp_path: Path):
    """Training-time options say ``n_characters: 261``; the model still has 262 rows, row 0 all zero."""
    options, weights = write_original_model(tmp_path / "original", n_characters=261, **SMALL)
    model = ElmoModel.from_pretrained(convert(options, weights, tmp_path / "converted", progress=False))
    assert model.config.n_characters == 262
    embedding = model.char_cnn.char_embedding.weight
    assert embedding.shape == (262, SMALL["char_dim"])
    assert not embedding[0].any()
    assert_matches_numpy(model.eval(), weights, options, SENTENCES[:1], atol=NUMPY_ATOL)


@pytest.mark.parametrize("dtype", ["float16", "float64"])
def test_hdf5_storage_dtype_is_converted_to_float32(tmp_path: Path, dtype: str):
    options, weights = write_original_model(tmp_path / "original", dtype=dtype, **SMALL)
    out = convert(options, weights, tmp_path / "converted", progress=False)
    with safe_open(str(out / "model.safetensors"), framework="pt") as handle:
        for key in handle.keys():
            assert handle.get_tensor(key).dtype == torch.float32, key
    model = ElmoModel.from_pretrained(out)
    with h5py.File(weights, "r") as handle:
        raw = handle["CNN_proj/W_proj"][()]
    assert raw.dtype == np.dtype(dtype)
    assert torch.equal(model.char_cnn.projection.weight, torch.from_numpy(raw.astype(np.float32).T))


# ---------------------------------------------------------------------------------------------
# Tokenizer files
# ---------------------------------------------------------------------------------------------


def test_vocab_file_gives_bilm_vocab_ids(small, tmp_path: Path, vocab_file: Path):
    options, weights = small
    out = convert(options, weights, tmp_path / "converted", vocab_file=vocab_file, progress=False)
    tokenizer = ElmoTokenizer.from_pretrained(out)
    encoding = tokenizer(["the cat sat on the mat.", "cat"], padding=True, return_vocab_ids=True)
    assert encoding["vocab_ids"] == [[3, 4, 5, 2, 3, 2, 6], [4, -100, -100, -100, -100, -100, -100]]
    special = tokenizer(["<S>", "</S>", "<UNK>"], is_split_into_words=True, return_vocab_ids=True)
    assert special["vocab_ids"] == [0, 1, 2]
    assert (out / "vocab.txt").read_text(encoding="utf-8").split("\n")[:-1] == VOCAB_LINES
    assert torch.equal(
        tokenizer(SENTENCES, is_split_into_words=True, padding=True, return_tensors="pt")["input_ids"],
        batch_ids(SENTENCES),
    )


def test_without_vocab_file_the_tokenizer_has_the_three_special_words(small, tmp_path: Path):
    options, weights = small
    tokenizer = ElmoTokenizer.from_pretrained(convert(options, weights, tmp_path / "converted", progress=False))
    assert tokenizer(["the <S> cat"], return_vocab_ids=True)["vocab_ids"] == [[2, 0, 2]]


# ---------------------------------------------------------------------------------------------
# The output folder
# ---------------------------------------------------------------------------------------------


def test_overwrite_replaces_existing_folder(small, tmp_path: Path):
    options, weights = small
    out = tmp_path / "converted"
    out.mkdir()
    (out / "stale.txt").write_text("old")
    (out / "config.json").write_text("{}")
    assert convert(options, weights, out, overwrite=True, progress=False) == out
    assert not (out / "stale.txt").exists()
    assert {"config.json", "model.safetensors", "tokenizer_config.json"} <= {p.name for p in out.iterdir()}
    assert ElmoModel.from_pretrained(out).config.lstm_dim == SMALL["lstm_dim"]
    assert staging_leftovers(tmp_path) == []


def test_existing_empty_output_dir_is_used(small, tmp_path: Path):
    options, weights = small
    out = tmp_path / "converted"
    out.mkdir()
    convert(options, weights, out, progress=False)
    assert (out / "model.safetensors").is_file()
    assert staging_leftovers(tmp_path) == []


def test_missing_parent_folders_are_created(small, tmp_path: Path):
    options, weights = small
    out = convert(options, weights, tmp_path / "a" / "b" / "converted", progress=False)
    assert (out / "config.json").is_file()
    assert staging_leftovers(out.parent) == []


# ---------------------------------------------------------------------------------------------
# Bad inputs
# ---------------------------------------------------------------------------------------------


def test_missing_options_file(small, tmp_path: Path):
    _, weights = small
    message = convert_fails(FileNotFoundError, tmp_path / "absent.json", weights, tmp_path / "out")
    assert "options file" in message and "absent.json" in message


def test_missing_weight_file(small, tmp_path: Path):
    options, _ = small
    message = convert_fails(FileNotFoundError, options, tmp_path / "absent.hdf5", tmp_path / "out")
    assert "weight file" in message and "absent.hdf5" in message


def test_missing_vocab_file(small, tmp_path: Path):
    options, weights = small
    message = convert_fails(
        FileNotFoundError, options, weights, tmp_path / "out", vocab_file=tmp_path / "absent_vocab.txt"
    )
    assert "vocab file" in message and "absent_vocab.txt" in message


def test_options_not_valid_json(small, tmp_path: Path):
    options, weights = small
    options.write_text('{"lstm": {"dim": 32,', encoding="utf-8")
    message = convert_fails(ConversionError, options, weights, tmp_path / "out")
    assert "JSON" in message and str(options) in message


def test_options_missing_required_key(small, tmp_path: Path):
    options, weights = small
    edit_options(options, lambda data: data["lstm"].pop("projection_dim"))
    message = convert_fails(ConversionError, options, weights, tmp_path / "out")
    assert "missing" in message and "lstm" in message and "projection_dim" in message


def test_options_unknown_activation(small, tmp_path: Path):
    options, weights = small
    edit_options(options, lambda data: data["char_cnn"].update(activation="gelu"))
    message = convert_fails(ConversionError, options, weights, tmp_path / "out")
    assert "gelu" in message and "activation" in message


def test_options_impossible_n_characters(small, tmp_path: Path):
    options, weights = small
    edit_options(options, lambda data: data["char_cnn"].update(n_characters=300))
    message = convert_fails(ConversionError, options, weights, tmp_path / "out")
    assert "n_characters" in message and "300" in message


def test_hdf5_missing_dataset(small, tmp_path: Path):
    options, weights = small
    missing = "RNN_1/RNN/MultiRNNCell/Cell1/LSTMCell/W_P_0"
    with h5py.File(weights, "a") as handle:
        del handle[missing]
    message = convert_fails(ConversionError, options, weights, tmp_path / "out")
    assert missing in message and "missing" in message
    assert "W_0" not in message  # only the problem is named


def test_hdf5_shape_disagrees_with_options(small, tmp_path: Path):
    options, weights = small
    with h5py.File(weights, "a") as handle:
        del handle["CNN_proj/W_proj"]
        handle.create_dataset("CNN_proj/W_proj", data=np.zeros((18, 9), np.float32))
    message = convert_fails(ConversionError, options, weights, tmp_path / "out")
    assert "CNN_proj/W_proj" in message and "(18, 9)" in message and "(18, 8)" in message
    assert "b_proj" not in message


def test_options_lstm_dim_disagrees_with_hdf5(small, tmp_path: Path):
    options, weights = small
    edit_options(options, lambda data: data["lstm"].update(dim=64))
    message = convert_fails(ConversionError, options, weights, tmp_path / "out")
    for name in ("W_0", "B", "W_P_0"):
        assert f"{lstm_prefix(0, 0)}/{name}" in message
    assert "char_embed" not in message


def test_truncated_hdf5(small, tmp_path: Path):
    options, weights = small
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])
    message = convert_fails(ConversionError, options, weights, tmp_path / "out")
    assert str(weights) in message and "truncated" in message


def test_weight_file_not_hdf5(small, tmp_path: Path):
    options, _ = small
    not_hdf5 = tmp_path / "weights.hdf5"
    not_hdf5.write_bytes(b"this is a text file, not HDF5\n" * 100)
    message = convert_fails(ConversionError, options, not_hdf5, tmp_path / "out")
    assert str(not_hdf5) in message and "HDF5" in message


def test_hdf5_holding_nan(small, tmp_path: Path):
    options, weights = small
    with h5py.File(weights, "a") as handle:
        handle["CNN_high_0/W_carry"][3, 5] = np.nan
    message = convert_fails(ConversionError, options, weights, tmp_path / "out")
    assert "CNN_high_0/W_carry" in message and "NaN" in message


def test_hdf5_holding_infinity(small, tmp_path: Path):
    options, weights = small
    with h5py.File(weights, "a") as handle:
        handle[lstm_prefix(1, 0) + "/B"][0] = -np.inf
    message = convert_fails(ConversionError, options, weights, tmp_path / "out")
    assert f"{lstm_prefix(1, 0)}/B" in message and "infinite" in message


def test_invalid_vocab_file(small, tmp_path: Path):
    options, weights = small
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("the\ncat\n", encoding="utf-8")
    message = convert_fails(ConversionError, options, weights, tmp_path / "out", vocab_file=vocab)
    assert "vocab" in message and "<S>" in message


def test_non_empty_output_dir_without_overwrite(small, tmp_path: Path):
    options, weights = small
    out = tmp_path / "out"
    out.mkdir()
    (out / "precious.txt").write_text("keep me")
    (out / "sub").mkdir()
    (out / "sub" / "data.bin").write_bytes(b"\x00\x01")
    with pytest.raises(ConversionError, match="not empty") as info:
        convert(options, weights, out, progress=False)
    assert str(out) in str(info.value) and "overwrite" in str(info.value)
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*")) == ["precious.txt", "sub", "sub/data.bin"]
    assert (out / "precious.txt").read_text() == "keep me"
    assert (out / "sub" / "data.bin").read_bytes() == b"\x00\x01"
    assert staging_leftovers(tmp_path) == []


def test_output_dir_is_a_file(small, tmp_path: Path):
    options, weights = small
    out = tmp_path / "out"
    out.write_text("a file")
    with pytest.raises(ConversionError, match="not a folder"):
        convert(options, weights, out, overwrite=True, progress=False)
    assert out.read_text() == "a file"
    assert staging_leftovers(tmp_path) == []


def test_bad_weights_with_overwrite_keep_existing_folder(small, tmp_path: Path):
    options, weights = small
    out = convert(options, weights, tmp_path / "out", progress=False)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    with h5py.File(weights, "a") as handle:
        del handle["char_embed"]
    with pytest.raises(ConversionError, match="char_embed"):
        convert(options, weights, out, overwrite=True, progress=False)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert staging_leftovers(tmp_path) == []


def test_failure_while_writing_leaves_nothing(small, tmp_path: Path, monkeypatch):
    options, weights = small

    def disk_full(self, *args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ElmoTokenizer, "save_pretrained", disk_full)
    with pytest.raises(OSError, match="No space left"):
        convert(options, weights, tmp_path / "out", progress=False)
    assert not (tmp_path / "out").exists()
    assert staging_leftovers(tmp_path) == []


# ---------------------------------------------------------------------------------------------
# The command line
# ---------------------------------------------------------------------------------------------


def test_cli_bad_input_exits_with_error_message(small, tmp_path: Path):
    """A real process: exit status 1, one ``error: ...`` line on stderr, no traceback, nothing written."""
    options, _ = small
    out = tmp_path / "out"
    absent = tmp_path / "absent.hdf5"
    result = run_cli("--options_file", options, "--weight_file", absent, "--output_dir", out, "--disable_tqdm")
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert f"error: weight file not found: {absent}" in result.stderr.splitlines()
    assert not out.exists() and staging_leftovers(tmp_path) == []


def test_cli_main_reports_conversion_error(small, tmp_path: Path, capsys):
    """``main()`` in process (what the script runs), on an invalid options file: returns 1, no exception."""
    options, weights = small
    options.write_text("not json", encoding="utf-8")
    out = tmp_path / "out"
    argv = ["--options_file", str(options), "--weight_file", str(weights), "--output_dir", str(out), "--disable_tqdm"]
    assert main(argv) == 1
    stderr = capsys.readouterr().err
    assert stderr.startswith("error: invalid options file") and "not valid JSON" in stderr
    assert not out.exists() and staging_leftovers(tmp_path) == []


def test_cli_main_output_dir_below_a_file(small, tmp_path: Path, capsys):
    options, weights = small
    (tmp_path / "a_file").write_text("x")
    out = tmp_path / "a_file" / "out"
    argv = ["--options_file", str(options), "--weight_file", str(weights), "--output_dir", str(out), "--disable_tqdm"]
    assert main(argv) == 1
    assert capsys.readouterr().err.startswith("error: ")
    assert staging_leftovers(tmp_path) == []


def test_cli_converts_and_auto_classes_load(small, tmp_path: Path, vocab_file: Path):
    options, weights = small
    out = tmp_path / "cli-out"
    result = run_cli(
        "--options_file", options, "--weight_file", weights, "--output_dir", out, "--vocab_file", vocab_file
    )
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert str(out) in result.stdout

    assert modeling_elmo.ElmoModel is ElmoModel  # importing the package registered the Auto classes
    model = AutoModel.from_pretrained(out).eval()
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert isinstance(model, ElmoModel) and isinstance(tokenizer, ElmoTokenizer)
    assert tokenizer("the cat sat on it.", return_vocab_ids=True)["vocab_ids"] == [3, 4, 5, 2, 2, 6]

    api = ElmoModel.from_pretrained(convert(options, weights, tmp_path / "api-out", progress=False))
    assert model.state_dict().keys() == api.state_dict().keys()
    for name, tensor in api.state_dict().items():
        assert torch.equal(model.state_dict()[name], tensor), name
    encoding = tokenizer(["the cat sat .", "hello"], padding=True, return_tensors="pt")
    with torch.no_grad():
        assert torch.equal(model(**encoding).elmo, api.eval()(**encoding).elmo)
