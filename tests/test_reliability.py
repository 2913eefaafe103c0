"""Reliability (issue #8): property tests of the tokenizer and the model on any input, safe loading,
the converter under SIGKILL, long inputs and streaming memory, determinism.

The property tests run ``max_examples`` cases each under the hypothesis profile of ``tests/conftest.py``
("ci" by default; ``ELMO_HYPOTHESIS_PROFILE=nightly`` for >= 10,000 cases in all); the number of cases
run is printed at the end of the pytest output.
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import unicodedata
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import TINY, PickleBomb, copy_of
from hypothesis import example, given
from hypothesis import strategies as st

from modeling_elmo import ElmoConfig, ElmoModel, ElmoTokenizer
from modeling_elmo.characters import BOS_TOKEN, EOS_TOKEN, word_to_char_ids
from modeling_elmo.inference.token_cache import build_token_cache

REPO = Path(__file__).resolve().parent.parent
TOKENIZER = ElmoTokenizer()
# Stateless outputs of a sentence alone vs. in any batch. The batch's matrix shapes change float32 rounding, which
# accumulates over long sentences (1.4e-6 seen at 45 words); a state leaking between rows would be ~1e-1.
INDEPENDENCE = 1e-5


def tiny_config(**overrides) -> ElmoConfig:
    return ElmoConfig(**{**TINY, **overrides})


def tiny_model(seed: int = 0, **overrides) -> ElmoModel:
    torch.manual_seed(seed)
    return ElmoModel(tiny_config(**overrides)).eval()


MODEL = tiny_model()


pytestmark = pytest.mark.usefixtures("one_thread")


WIDTH = 2 * MODEL.config.projection_dim

# ---------------------------------------------------------------------------------------------
# Strategies: arbitrary Unicode (lone surrogates included), plus the awkward cases by name
# ---------------------------------------------------------------------------------------------

AWKWARD = [
    "",
    " ",
    "\t",
    "\n",
    "\r\n",
    "\u3000",  # ideographic space
    "\u00a0",  # no-break space
    "\u200b",  # zero-width space
    "\ufeff",  # byte-order mark
    "\u202e",  # right-to-left override
    "e\u0301",  # combining acute accent
    "\u0301",  # a combining mark alone
    "a\u0301\u0302\u0303\u0304",
    "שלום",  # Hebrew (RTL)
    "مرحبا",  # Arabic (RTL)
    "\u05d0\u200f\u05d1",  # RTL mark inside a word
    "👩\u200d👩\u200d👧",  # zero-width-joiner sequence
    "🇫🇷",  # flag
    "👍🏽",  # skin-tone modifier
    "🙂🙂🙂",
    "\ud800",  # lone surrogates
    "\udfff",
    "a\ud800b",
    "a" * 60,  # longer than 48 bytes
    "é" * 30,  # 60 bytes
    "a" * 47 + "é",  # a 2-byte character cut at the 48-byte limit
    "a" * 46 + "🙂",  # a 4-byte character cut at the 48-byte limit
    "a" * 45 + "中",  # a 3-byte character that just fits
    "中" * 17,  # 51 bytes
    BOS_TOKEN,
    EOS_TOKEN,
    "<UNK>",
    "<pad>",
    "don't",
    "U.S.",
    "...",
    "(x)",
    "\x00",
    "\x7f",
]
ANY_CHAR = st.characters(exclude_categories=())  # every code point, surrogates included

word = st.one_of(
    st.text(ANY_CHAR, max_size=8),
    st.sampled_from(AWKWARD),
    st.lists(st.one_of(st.sampled_from(AWKWARD), st.text(ANY_CHAR, max_size=3)), max_size=4).map("".join),
    st.text(ANY_CHAR, min_size=40, max_size=70),  # long words
)


@st.composite
def word_lists(draw, max_words: int = 10) -> list[str]:
    """0..max_words words; about one case in 25 has 100..500 words (built from a few drawn ones, for speed)."""
    if draw(st.integers(0, 24)) == 0:
        base = draw(st.lists(word, min_size=1, max_size=5))
        return [base[i % len(base)] for i in range(draw(st.integers(100, 500)))]
    return draw(st.lists(word, max_size=max_words))


SEPARATORS = st.sampled_from([" ", "  ", "\t", "\n", "\u3000", "\u00a0", "", "\u200b", " \u202e"])


@st.composite
def texts(draw) -> str:
    """Raw text: words glued with whitespace, separators, or nothing; or any string at all."""
    if draw(st.booleans()):
        return draw(st.text(ANY_CHAR, max_size=40))
    words = draw(word_lists())
    separator = draw(SEPARATORS)
    return separator.join(words)


def expected_word(word: str) -> str:
    """What decoding a word's character ids gives: its UTF-8 bytes cut to 48, undecodable ends as U+FFFD."""
    if word in (BOS_TOKEN, EOS_TOKEN):
        return word
    return word.encode("utf-8", errors="ignore")[:48].decode("utf-8", errors="replace")


# What the pre-tokenizer may drop between words: whitespace and invisible separators (tokenization_elmo).
_DROPPABLE = set("\u200b\ufeff\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def droppable(char: str) -> bool:
    return char.isspace() or unicodedata.category(char) == "Cc" or char in _DROPPABLE


# ---------------------------------------------------------------------------------------------
# 1. Property tests: tokenizer
# ---------------------------------------------------------------------------------------------


@given(st.lists(texts(), min_size=1, max_size=4))
@example(["", "   ", "\u200b\n\t"])
@example(["\ud800", "a\ud800b " + "é" * 30])
def test_raw_text_properties(batch):
    enc = TOKENIZER(batch, padding=True, return_offsets_mapping=True, return_tensors="pt")
    ids, mask, offsets = enc["input_ids"], enc["attention_mask"], enc["offset_mapping"]
    assert ids.dim() == 3 and ids.shape[0] == len(batch) and ids.shape[2] == 50
    assert tuple(mask.shape) == tuple(ids.shape[:2]) and tuple(offsets.shape) == (*ids.shape[:2], 2)
    words_total = ids.shape[1]
    for b, text in enumerate(batch):
        n = int(mask[b].sum())
        assert mask[b, :n].all() and not mask[b, n:].any(), "padding is on the right"
        assert not ids[b, n:].any(), "padding rows are zero"
        spans = offsets[b, :n].tolist()
        words = [text[start:end] for start, end in spans]
        # Offsets give back the words: non-empty, in order, and only whitespace/separators between them.
        assert all(words)
        covered = set()
        previous_end = 0
        for start, end in spans:
            assert previous_end <= start < end <= len(text)
            covered.update(range(start, end))
            previous_end = end
        assert all(droppable(text[i]) for i in range(len(text)) if i not in covered)
        assert [ids[b, k].tolist() for k in range(n)] == [word_to_char_ids(w) for w in words]
        assert enc.word_ids(b) == list(range(n)) + [None] * (words_total - n)
        assert TOKENIZER.tokenize(text) == words
        assert TOKENIZER.decode(ids[b]) == " ".join(expected_word(w) for w in words)


@given(st.lists(word_lists(), min_size=1, max_size=4))
@example([[]])
@example([["", " ", "\u200b"], ["a" * 47 + "é", "a" * 46 + "🙂"]])
def test_pre_split_words_properties(batch):
    enc = TOKENIZER(batch, is_split_into_words=True, padding=True, return_offsets_mapping=True, return_tensors="pt")
    ids, mask = enc["input_ids"], enc["attention_mask"]
    longest = max(len(words) for words in batch)
    assert tuple(ids.shape) == (len(batch), longest, 50)
    for b, words in enumerate(batch):
        n = len(words)
        assert mask[b].tolist() == [1] * n + [0] * (longest - n)
        assert not ids[b, n:].any()
        assert [ids[b, k].tolist() for k in range(n)] == [word_to_char_ids(w) for w in words]
        assert enc.word_ids(b) == list(range(n)) + [None] * (longest - n)
        assert [words[k][s:e] for k, (s, e) in enumerate(enc["offset_mapping"][b, :n].tolist())] == words
        if n:
            assert TOKENIZER.convert_ids_to_tokens(ids[b, :n]) == [expected_word(w) for w in words]


# Anything a caller might pass by mistake.
junk = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(ANY_CHAR, max_size=4) | st.binary(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.tuples(inner, inner) | st.dictionaries(st.text(max_size=2), inner),
    max_leaves=6,
)


@given(junk, st.booleans())
@example([], False)
@example([], True)
@example([["a"], "b"], True)
@example([None], False)
def test_bad_input_gives_a_clear_error_or_works(value, split):
    try:
        enc = TOKENIZER(value, is_split_into_words=split, padding=True, return_tensors="pt")
    except (ValueError, TypeError) as error:
        assert len(str(error)) > 15, f"unclear error: {error!r}"
        return
    ids = enc["input_ids"]
    if ids.dim() == 2:  # one sentence
        ids, mask = ids.unsqueeze(0), enc["attention_mask"].unsqueeze(0)
    else:
        mask = enc["attention_mask"]
    with torch.no_grad():
        out = MODEL(input_ids=ids, attention_mask=mask)
    assert tuple(out.elmo.shape) == (*ids.shape[:2], WIDTH)


@given(
    st.lists(st.integers(0, 4), min_size=0, max_size=4),
    st.sampled_from([torch.int64, torch.int32, torch.int16, torch.uint8, torch.bool, torch.float32]),
    st.integers(-3, 300),
    st.booleans(),
)
@example([2, 3, 50], torch.int64, 300, False)
@example([2, 3, 50], torch.uint8, 5, False)
@example([0, 3, 50], torch.int64, 5, False)
def test_model_rejects_bad_tensors_clearly(shape, dtype, value, with_mask):
    if len(shape) == 3 and value % 2:
        shape = [shape[0], shape[1], 50]  # often the right width, to reach the later checks
    ids = torch.full(shape, value).to(dtype)
    kwargs = {"attention_mask": torch.ones(shape[:2], dtype=torch.long)} if with_mask and len(shape) >= 2 else {}
    try:
        with torch.no_grad():
            out = MODEL(input_ids=ids, **kwargs)
    except (ValueError, TypeError) as error:
        assert len(str(error)) > 15, f"unclear error: {error!r}"
        return
    assert tuple(out.elmo.shape) == (*ids.shape[:2], WIDTH)


# ---------------------------------------------------------------------------------------------
# 1. Property tests: model
# ---------------------------------------------------------------------------------------------


def run(model, ids, mask):
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=mask, output_hidden_states=True)


@given(st.one_of(st.lists(word_lists(), min_size=1, max_size=4), st.lists(texts(), min_size=1, max_size=4)))
@example([["a"], [], ["é" * 30, "\ud800", ""]])
@example(["", "Hello world !"])
def test_model_properties(batch):
    split = not isinstance(batch[0], str)
    enc = TOKENIZER(batch, is_split_into_words=split, padding=True, return_tensors="pt")
    ids, mask = enc["input_ids"], enc["attention_mask"]
    out = run(MODEL, ids, mask)
    layers = [out.elmo, *out.hidden_states]
    assert len(out.hidden_states) == MODEL.config.n_layers + 1
    assert out.mask.dtype == torch.long and torch.equal(out.mask, mask.long())
    for layer in layers:
        assert tuple(layer.shape) == (*ids.shape[:2], WIDTH)
        assert torch.isfinite(layer).all()
        assert not layer[~out.mask.bool()].any(), "padding positions must be exactly zero"
    for b in range(len(batch)):
        n = int(mask[b].sum())
        alone = run(MODEL, ids[b : b + 1, :n], mask[b : b + 1, :n])
        for layer, single in zip(layers, [alone.elmo, *alone.hidden_states], strict=True):
            torch.testing.assert_close(layer[b, :n], single[0], rtol=0, atol=INDEPENDENCE)


def test_empty_inputs():
    with pytest.raises(ValueError, match="empty batch"):
        TOKENIZER([])
    enc = TOKENIZER(["", " \t\u3000", "\u200b"], padding=True, return_tensors="pt")
    assert tuple(enc["input_ids"].shape) == (3, 0, 50)
    out = run(MODEL, enc["input_ids"], enc["attention_mask"])
    assert tuple(out.elmo.shape) == (3, 0, WIDTH)
    for shape in [(0, 0, 50), (0, 4, 50), (2, 4, 50)]:
        out = run(MODEL, torch.zeros(shape, dtype=torch.long), None)
        assert tuple(out.elmo.shape) == (*shape[:2], WIDTH) and not out.elmo.any()


# ---------------------------------------------------------------------------------------------
# 2. Loading: safetensors only; corrupt files, wrong sizes, missing tokenizer files
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("saved") / "tiny"
    MODEL.save_pretrained(folder)
    TOKENIZER.save_pretrained(folder)
    return folder


def test_pickled_weights_are_never_loaded(saved: Path, tmp_path: Path):
    folder = tmp_path / "pickle-only"
    folder.mkdir()
    shutil.copy(saved / "config.json", folder)
    marker = tmp_path / "pickle-code-ran"
    state = dict(MODEL.state_dict())
    state["payload"] = PickleBomb(str(marker))
    torch.save(state, folder / "pytorch_model.bin", _use_new_zipfile_serialization=True)
    with pytest.raises(OSError, match=r"no model\.safetensors.*pytorch_model\.bin.*never loaded"):
        ElmoModel.from_pretrained(folder)
    with pytest.raises(ValueError, match="only from safetensors"):
        ElmoModel.from_pretrained(folder, use_safetensors=False)
    with pytest.raises(ValueError, match="not a .safetensors file"):
        ElmoModel.from_pretrained(folder / "pytorch_model.bin")
    # Both files present: the safetensors one is used, the pickle is not opened.
    shutil.copy(saved / "model.safetensors", folder)
    model = ElmoModel.from_pretrained(folder)
    assert all(torch.equal(model.state_dict()[k], v) for k, v in MODEL.state_dict().items())
    assert not marker.exists()


@pytest.mark.parametrize("damage", ["truncated", "half", "garbage", "empty"])
def test_corrupt_safetensors_gives_a_clear_error(saved: Path, tmp_path: Path, damage: str):
    folder = copy_of(saved, tmp_path)
    path = folder / "model.safetensors"
    data = path.read_bytes()
    path.write_bytes(
        {"truncated": data[:-7], "half": data[: len(data) // 2], "garbage": b"\xff" * 64, "empty": b""}[damage]
    )
    with pytest.raises(OSError, match=r"safetensors weights of .*corrupt or truncated"):
        ElmoModel.from_pretrained(folder)


@pytest.mark.parametrize(
    "change, names",
    [
        ({"lstm_dim": 32}, "bilm.layers.0.bias: checkpoint"),
        ({"projection_dim": 4}, "char_cnn.projection"),
        ({"n_layers": 3}, "bilm.layers.2.bias: not in the checkpoint"),
        ({"n_layers": 1}, "bilm.layers.1.bias: not in the model"),
        ({"n_highway": 2}, "char_cnn.highways.1"),
        ({"char_cnn_filters": [[1, 4], [2, 8], [3, 16]]}, "char_cnn.convolutions.2"),
    ],
    ids=lambda value: str(value) if isinstance(value, dict) else "",
)
def test_config_that_does_not_fit_the_weights_is_an_error(saved: Path, tmp_path: Path, change, names):
    folder = copy_of(saved, tmp_path)
    config = json.loads((folder / "config.json").read_text())
    config.update(change)
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="do not fit the config") as error:
        ElmoModel.from_pretrained(folder)
    assert names in str(error.value)
    with pytest.raises(ValueError, match="do not fit the config"):  # the same through from_pretrained arguments
        ElmoModel.from_pretrained(saved, **change)


def test_fitting_loads_still_work(saved: Path):
    model, info = ElmoModel.from_pretrained(saved, output_loading_info=True)
    assert not info["missing_keys"] and not info["mismatched_keys"]
    two = ElmoModel.from_pretrained(saved, num_output_representations=2)  # a new mix may be missing
    assert len(two.scalar_mixes) == 2
    wide = ElmoModel.from_pretrained(saved, lstm_dim=32, ignore_mismatched_sizes=True)  # explicitly asked for
    assert wide.config.lstm_dim == 32


@pytest.mark.parametrize(
    "remove, message",
    [
        (["tokenizer_config.json"], "missing tokenizer_config.json"),
        (["tokenizer.json", "vocab.txt"], r"missing tokenizer\.json \(or vocab\.txt\)"),
        (["tokenizer_config.json", "tokenizer.json", "vocab.txt"], "missing tokenizer_config.json and"),
    ],
)
def test_tokenizer_folder_missing_a_file(saved: Path, tmp_path: Path, remove, message):
    from transformers import AutoTokenizer

    folder = copy_of(saved, tmp_path)
    for name in remove:
        (folder / name).unlink()
    with pytest.raises(OSError, match=message):
        ElmoTokenizer.from_pretrained(folder)
    with pytest.raises(OSError, match=message):
        AutoTokenizer.from_pretrained(folder)


@pytest.mark.parametrize("keep", ["tokenizer.json", "vocab.txt"])
def test_tokenizer_loads_from_either_vocabulary_file(saved: Path, tmp_path: Path, keep: str):
    folder = copy_of(saved, tmp_path)
    (folder / ({"tokenizer.json", "vocab.txt"} - {keep}).pop()).unlink()
    assert ElmoTokenizer.from_pretrained(folder).get_vocab() == TOKENIZER.get_vocab()


# ---------------------------------------------------------------------------------------------
# 3. The converter under SIGKILL
# ---------------------------------------------------------------------------------------------

BIG = dict(lstm_dim=1024, projection_dim=256, filters=[[1, 32], [2, 64], [3, 128]], char_dim=16, n_highway=1)


def staging(parent: Path, name: str) -> list[Path]:
    return [p for p in parent.iterdir() if p.name.startswith(f".{name}.partial-")]


@pytest.mark.slow
def test_converter_killed_while_writing_leaves_no_output(tmp_path: Path):
    from original_format import write_original_model

    from modeling_elmo.hub.convert import convert

    options, weights = write_original_model(tmp_path / "original", **BIG)  # ~40 MB of weights
    out = tmp_path / "converted"
    command = [
        sys.executable,
        str(REPO / "convert_original_weights.py"),
        "--options_file",
        str(options),
        "--weight_file",
        str(weights),
        "--output_dir",
        str(out),
        "--disable_tqdm",
    ]
    process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not staging(tmp_path, out.name) and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.0005)
        assert process.poll() is None, "the converter ended before its staging folder was seen"
        process.send_signal(signal.SIGKILL)
    finally:
        process.wait(timeout=60)
    assert process.returncode == -signal.SIGKILL
    # The guarantee: the output folder never exists half-written. Only the hidden staging folder may remain...
    assert not out.exists()
    leftovers = staging(tmp_path, out.name)
    assert len(leftovers) <= 1
    # ...and the next conversion to the same folder removes it.
    convert(options, weights, out, progress=False)
    assert staging(tmp_path, out.name) == []
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= {
        p.name for p in out.iterdir()
    }
    ElmoModel.from_pretrained(out)


def test_stale_staging_of_live_process_is_kept(tmp_path: Path):
    from modeling_elmo.hub.convert import _make_staging, remove_stale_staging

    out = tmp_path / "model"
    live = _make_staging(out)  # this process's own: alive
    child = os.fork()  # a conversion that made its staging folders and was killed
    if child == 0:
        try:
            _make_staging(out)
            _make_staging(tmp_path / "other")
        finally:
            os._exit(0)
    os.waitpid(child, 0)
    dead = next(tmp_path.glob(f".model.partial-{child}-*"))
    other = next(tmp_path.glob(f".other.partial-{child}-*"))
    assert remove_stale_staging(out) == [dead]
    assert live.exists() and other.exists()


# ---------------------------------------------------------------------------------------------
# 5. Long inputs: a 10,000-word sentence, and a corpus streamed with flat memory
# ---------------------------------------------------------------------------------------------


def test_ten_thousand_word_sentence(tmp_path: Path):
    words = [f"w{i % 997}" for i in range(10_000)]
    enc = TOKENIZER([words], is_split_into_words=True, return_tensors="pt")
    out = run(MODEL, enc["input_ids"], enc["attention_mask"])
    assert tuple(out.elmo.shape) == (1, 10_000, WIDTH) and torch.isfinite(out.elmo).all()
    # The forward direction at word k does not depend on the words after it.
    head = TOKENIZER([words[:50]], is_split_into_words=True, return_tensors="pt")
    first = run(MODEL, head["input_ids"], head["attention_mask"])
    forward = slice(0, MODEL.config.projection_dim)
    torch.testing.assert_close(out.hidden_states[2][0, :50, forward], first.hidden_states[2][0, :, forward])


def test_memory_blocks_do_not_change_outputs(monkeypatch):
    """The character CNN and the biLSTM input gates run in blocks on long inputs (bounded memory); tiny blocks
    give the same outputs as one block."""
    import modeling_elmo.modeling_elmo as modeling

    batch = [[f"w{i}" for i in range(n)] + ["é" * 30] for n in (40, 3, 17, 0)]
    enc = TOKENIZER(batch, is_split_into_words=True, padding=True, return_tensors="pt")
    whole = run(MODEL, enc["input_ids"], enc["attention_mask"])
    monkeypatch.setattr(modeling.ElmoCharacterEncoder, "block_words", 7)
    monkeypatch.setattr(modeling.ElmoBiLstmLayer, "gate_block_rows", 5)
    blocks = run(MODEL, enc["input_ids"], enc["attention_mask"])
    for a, b in zip(whole.hidden_states, blocks.hidden_states, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=INDEPENDENCE)


_STREAM_SCRIPT = textwrap.dedent(
    """
    import resource, sys, torch
    from modeling_elmo import ElmoConfig, ElmoModel, ElmoTokenizer
    from modeling_elmo.inference.embed_corpus import embed_corpus
    torch.manual_seed(0)
    torch.set_num_threads(1)
    config = ElmoConfig(char_embedding_dim=4, char_cnn_filters=[[1, 4], [2, 8], [3, 8]], n_highway=1,
                        lstm_dim=16, projection_dim=8)
    model, tokenizer = ElmoModel(config).eval(), ElmoTokenizer()
    small, large = int(sys.argv[1]) // 20, int(sys.argv[2]) // 20
    lines = (" ".join(f"w{(i * 7 + k) % 5000}" for k in range(20)) for i in range(large))
    total, checksum = 0, 0.0
    for index, value in embed_corpus(model, tokenizer, lines, output="all", chunk_size=512, progress=False):
        assert index == total and value.shape == (3, 20, 16)
        total += 1
        checksum += float(value[0, 0, 0])
        if total == small:
            peak_small = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(total, peak_small, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    """
)


@pytest.mark.slow
def test_embed_corpus_memory_does_not_grow_with_corpus_size():
    """Peak RSS of a process streaming a corpus through ``embed_corpus``, after 22k words (two chunks of 512
    sentences) and after 100k words: the same, within allocator noise. Keeping the outputs would add ~15 MB
    at this size (100k x 3 x 16 floats), ~1.2 GB at the original size."""
    result = subprocess.run(
        [sys.executable, "-c", _STREAM_SCRIPT, "22000", "100000"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    sentences, small, large = map(int, result.stdout.split())
    assert sentences == 100_000 // 20
    print(f"peak RSS after 22k words {small / 1024:.1f} MiB, after 100k words {large / 1024:.1f} MiB")
    assert large - small < 8 * 1024, (small, large)


# ---------------------------------------------------------------------------------------------
# 6. Determinism
# ---------------------------------------------------------------------------------------------

_DETERMINISM_SCRIPT = textwrap.dedent(
    """
    import hashlib, json, sys, torch
    from modeling_elmo import ElmoConfig, ElmoModel, ElmoTokenizer
    torch.manual_seed(0)
    config = ElmoConfig(**json.loads(sys.argv[1]))
    model, tokenizer = ElmoModel(config).eval(), ElmoTokenizer()
    enc = tokenizer(["The cat sat on the mat .", "Hi", "é 中 🙂 " * 20], padding=True, return_tensors="pt")
    with torch.no_grad():
        out = model(**enc, output_hidden_states=True)
    digest = hashlib.sha256()
    for layer in (out.elmo, *out.hidden_states):
        digest.update(layer.numpy().tobytes())
    print(digest.hexdigest())
    """
)


def digest_of(model, enc) -> str:
    out = run(model, enc["input_ids"], enc["attention_mask"])
    digest = hashlib.sha256()
    for layer in (out.elmo, *out.hidden_states):
        digest.update(layer.numpy().tobytes())
    return digest.hexdigest()


@pytest.mark.slow  # issue 51: a fresh interpreter
def test_stateless_inference_is_bit_identical_run_to_run():
    enc = TOKENIZER(["The cat sat on the mat .", "Hi", "é 中 🙂 " * 20], padding=True, return_tensors="pt")
    first = digest_of(MODEL, enc)
    assert {digest_of(MODEL, enc) for _ in range(3)} == {first}
    # With the token cache, the bits may differ from those without it (the character CNN ran on another
    # batch of words), but again not from run to run.
    build_token_cache(MODEL, ["The", "cat", "Hi"], progress=False)
    try:
        assert len({digest_of(MODEL, enc) for _ in range(3)}) == 1
    finally:
        MODEL.token_cache = None
    gc.collect()
    assert digest_of(MODEL, enc) == first
    # Across processes (same machine, same torch, same thread count): the same bits.
    env = {**os.environ, "OMP_NUM_THREADS": str(torch.get_num_threads())}
    other = subprocess.run(
        [sys.executable, "-c", _DETERMINISM_SCRIPT, json.dumps(TINY)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert other.stdout.strip() == first


def test_stateful_mode_is_reproducible_after_reset():
    model = tiny_model(stateful=True)
    enc = TOKENIZER(["a b c", "d e"], padding=True, return_tensors="pt")
    first = [digest_of(model, enc) for _ in range(3)]
    assert len(set(first)) == 3  # the states carry over: each call differs...
    model.reset_states()
    assert [digest_of(model, enc) for _ in range(3)] == first  # ...reproducibly from a reset


# ---------------------------------------------------------------------------------------------
# 4. Training resumes after SIGKILL with the losses of an uninterrupted run
# ---------------------------------------------------------------------------------------------

RESUME_STEPS, RESUME_SAVE_EVERY = 12, 4
_WORDS = "the cat sat on a mat dog ran to big red house and small tree".split()


def _complete_checkpoints(folder: Path) -> list[Path]:
    """Checkpoints whose trainer_state.json (the file the Trainer writes last) is there and complete."""
    found = []
    for path in folder.glob("checkpoint-*") if folder.is_dir() else []:
        try:
            json.loads((path / "trainer_state.json").read_text())
        except (OSError, ValueError):
            continue
        found.append(path)
    return found


def _step_losses(output_dir: Path) -> dict[int, float]:
    last = max(_complete_checkpoints(output_dir), key=lambda p: int(p.name.split("-")[1]))
    state = json.loads((last / "trainer_state.json").read_text())
    assert state["global_step"] == RESUME_STEPS
    return {entry["step"]: entry["loss"] for entry in state["log_history"] if "loss" in entry}


def _kill_and_resume(module: str, args: list[str], tmp_path: Path) -> tuple[dict, dict, int]:
    """Run ``module`` uninterrupted and, beside it, a second time that is SIGKILLed after its first complete
    checkpoint, then resume that one with ``--resume_from_checkpoint last``. Returns both per-step losses and
    the step the kill came after."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}

    def command(out: Path) -> list[str]:
        return [sys.executable, "-m", module, *args, "--output_dir", str(out)]

    whole, killed = tmp_path / "whole", tmp_path / "killed"
    reference = subprocess.Popen(
        command(whole), cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    victim = subprocess.Popen(command(killed), cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 400
        while not _complete_checkpoints(killed) and victim.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert victim.poll() is None, (
            "training ended before it could be killed: " + victim.stderr.read().decode()[-2000:]
        )
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=60)
        assert victim.returncode == -signal.SIGKILL
        killed_after = max(int(p.name.split("-")[1]) for p in _complete_checkpoints(killed))
        assert killed_after < RESUME_STEPS
        _, err = reference.communicate(timeout=600)
        assert reference.returncode == 0, err.decode()[-3000:]
    finally:
        for process in (reference, victim):
            if process.poll() is None:
                process.kill()
                process.wait()
    resumed = subprocess.run(
        command(killed) + ["--resume_from_checkpoint", "last"], cwd=tmp_path, env=env, capture_output=True, timeout=600
    )
    assert resumed.returncode == 0, resumed.stderr.decode()[-3000:]
    print(f"{module}: SIGKILLed after checkpoint-{killed_after}, resumed to step {RESUME_STEPS}")
    return _step_losses(whole), _step_losses(killed), killed_after


def _assert_same_losses(whole: dict, resumed: dict, killed_after: int) -> None:
    assert sorted(whole) == list(range(1, RESUME_STEPS + 1))
    after = [step for step in whole if step > killed_after]
    assert after, "the kill came after the last step"
    for step in whole:
        assert resumed.get(step) == pytest.approx(whole[step], rel=1e-5, abs=1e-6), (step, whole, resumed)


def _write_text(tmp_path: Path) -> Path:
    rng = np.random.default_rng(0)
    path = tmp_path / "train.txt"
    path.write_text("".join(" ".join(rng.choice(_WORDS, size=rng.integers(3, 12))) + "\n" for _ in range(300)))
    return path


@pytest.mark.slow
def test_lm_training_resumes_after_sigkill(tmp_path: Path):
    pytest.importorskip("datasets")
    pytest.importorskip("accelerate")
    train = _write_text(tmp_path)
    args = (
        f"--train_file {train} --lstm_dim 16 --projection_dim 8 --n_highway 1 --char_embedding_dim 4 "
        f"--char_cnn_filters 1:4,2:8 --num_samples 5 --dropout 0.1 --max_steps {RESUME_STEPS} "
        f"--save_steps {RESUME_SAVE_EVERY} --save_total_limit 10 --logging_steps 1 --per_device_train_batch_size 8 "
        "--seed 7 --disable_tqdm"
    ).split()
    whole, resumed, killed_after = _kill_and_resume("modeling_elmo.training.train_lm", args, tmp_path)
    _assert_same_losses(whole, resumed, killed_after)


@pytest.mark.slow
def test_tagger_training_resumes_after_sigkill(tmp_path: Path):
    pytest.importorskip("datasets")
    pytest.importorskip("seqeval")
    rng = np.random.default_rng(1)
    conll = tmp_path / "train.conll"
    lines = []
    for _ in range(200):
        for w in rng.choice(_WORDS, size=rng.integers(3, 9)):
            lines.append(f"{w} {'B-ANI' if w in ('cat', 'dog') else 'O'}")
        lines.append("")
    conll.write_text("\n".join(lines) + "\n")
    bilm = tmp_path / "bilm"
    MODEL.save_pretrained(bilm)
    TOKENIZER.save_pretrained(bilm)
    args = (
        f"--bilm {bilm} --train_file {conll} --word_dim 8 --hidden_size 8 --num_layers 1 --dropout 0.3 "
        f"--max_steps {RESUME_STEPS} --save_steps {RESUME_SAVE_EVERY} --save_total_limit 10 --logging_steps 1 "
        "--per_device_train_batch_size 8 --seed 7 --eval_strategy no --disable_tqdm true --use_cpu --min_word_freq 1"
    ).split()
    whole, resumed, killed_after = _kill_and_resume("modeling_elmo.training.train_tagger", args, tmp_path)
    _assert_same_losses(whole, resumed, killed_after)
