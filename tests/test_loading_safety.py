"""Loading and model inputs (issue #13): safetensors indexes, weight dtypes and values, attention masks, the token
cache after weight changes, the exported graph's input contract, and clear errors for wrong model sources.

Each test fails on the code before the fix of its issue item (noted in its docstring) and passes after it.
"""

from __future__ import annotations

import copy
import io
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import TINY, PickleBomb, copy_of
from safetensors.torch import load_file, save_file

import elmo_cli as cli
from modeling_elmo import ElmoConfig, ElmoForTokenClassification, ElmoModel, ElmoTokenizer
from modeling_elmo.inference.export import ElmoExportWrapper, check_export_inputs, example_inputs
from modeling_elmo.inference.token_cache import build_token_cache, token_cache_size

REPO = Path(__file__).resolve().parent.parent
TOKENIZER = ElmoTokenizer()
SENTENCES = [["the", "cat", "sat"], ["an", "unknown", "word", "the"]]
WORDS = ["the", "cat", "sat", "an", "word"]
# Seconds an unreachable Hub may cost: the probe's 5 s timeout and start-up, far below the 212 s seen before.
FAST = 30

pytestmark = pytest.mark.usefixtures("one_thread")


def tiny_model(seed: int = 0) -> ElmoModel:
    torch.manual_seed(seed)
    return ElmoModel(ElmoConfig(**TINY)).eval()


MODEL = tiny_model()


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("saved") / "tiny"
    MODEL.save_pretrained(folder)
    TOKENIZER.save_pretrained(folder)
    return folder


def _python(
    code: str, env: dict[str, str], timeout: float = 120, args: list[str] = ()
) -> tuple[subprocess.CompletedProcess, float]:
    start = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=timeout, cwd=REPO
    )
    return result, time.monotonic() - start


def _hub_env(tmp_path: Path, endpoint: str) -> dict[str, str]:
    """An environment whose Hub is ``endpoint`` and whose Hugging Face cache is empty (or what a test puts there)."""
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    env.update(
        PYTHONPATH=str(REPO),
        HF_ENDPOINT=endpoint,
        HF_HOME=str(tmp_path / "hf-home"),
        HF_HUB_CACHE=str(tmp_path / "hf-home" / "hub"),
        HF_HUB_DISABLE_TELEMETRY="1",
    )
    return env


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _cache_as_hub_model(folder: Path, tmp_path: Path, repo: str) -> None:
    """Put ``folder``'s files in the Hugging Face cache of ``_hub_env(tmp_path, ...)`` as Hub model ``repo``."""
    commit = "0123456789abcdef0123456789abcdef01234567"
    root = tmp_path / "hf-home" / "hub" / f"models--{repo.replace('/', '--')}"
    shutil.copytree(folder, root / "snapshots" / commit)
    (root / "refs").mkdir(parents=True)
    (root / "refs" / "main").write_text(commit)


# ---------------------------------------------------------------------------------------------
# Item 2: a safetensors index may name only safetensors files of its folder
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("payload", ["plain-state-dict", "code"])
def test_index_naming_a_pickle_is_refused_before_it_is_opened(saved: Path, tmp_path: Path, payload: str):
    """Before: the index made transformers torch.load pytorch_model.bin (a plain state dict loaded silently; the
    code-running pickle stopped only at torch's weights-only unpickler)."""
    folder = copy_of(saved, tmp_path)
    marker = tmp_path / "pickle-code-ran"
    state = dict(MODEL.state_dict())
    if payload == "code":
        state["payload"] = PickleBomb(str(marker))
    torch.save(state, folder / "pytorch_model.bin")
    (folder / "model.safetensors").unlink()
    index = {"metadata": {}, "weight_map": dict.fromkeys(MODEL.state_dict(), "pytorch_model.bin")}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(OSError, match=r"model\.safetensors\.index\.json names 'pytorch_model\.bin'"):
        ElmoModel.from_pretrained(folder)
    assert not marker.exists()


@pytest.mark.parametrize("shard", ["../outside.safetensors", "ABSOLUTE", "sub/model.safetensors"])
def test_index_naming_a_file_outside_its_folder_is_refused(saved: Path, tmp_path: Path, shard: str):
    """Before: the index's file was read from anywhere (here a valid safetensors file outside the folder)."""
    folder = copy_of(saved, tmp_path)
    outside = tmp_path / "outside.safetensors"
    (folder / "model.safetensors").rename(outside)
    if shard == "ABSOLUTE":
        shard = str(outside)
    elif shard.startswith("sub/"):
        (folder / "sub").mkdir()
        shutil.copy(outside, folder / shard)
    index = {"metadata": {}, "weight_map": dict.fromkeys(MODEL.state_dict(), shard)}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(OSError, match="an index may name only .safetensors files in its own folder"):
        ElmoModel.from_pretrained(folder)


def test_sharded_safetensors_still_load(saved: Path, tmp_path: Path):
    folder = tmp_path / "sharded"
    MODEL.save_pretrained(folder, max_shard_size="2KB")
    assert (folder / "model.safetensors.index.json").exists()
    model = ElmoModel.from_pretrained(folder)
    assert all(torch.equal(model.state_dict()[k], v) for k, v in MODEL.state_dict().items())


def _cache_pickled_hub_model(saved: Path, tmp_path: Path) -> Path:
    """Hub model ``some-user/pickled`` in the cache of ``_hub_env(tmp_path, ...)``: its index names a pickle that
    creates the returned marker file when unpickled."""
    folder = copy_of(saved, tmp_path, "hub-model")
    marker = tmp_path / "pickle-code-ran"
    torch.save({**MODEL.state_dict(), "payload": PickleBomb(str(marker))}, folder / "pytorch_model.bin")
    (folder / "model.safetensors").unlink()
    index = {"metadata": {}, "weight_map": dict.fromkeys(MODEL.state_dict(), "pytorch_model.bin")}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    _cache_as_hub_model(folder, tmp_path, "some-user/pickled")
    return marker


@pytest.mark.slow  # issue 51: a fresh interpreter (shared with the short-name loads)
def test_hub_model_whose_index_names_a_pickle_is_refused(closed_hub_loads):
    """The Hub path (a Hub id whose index is in the local cache): the index is checked before anything is read,
    with no network call of the package's own. Before: torch.load of the pickle (then an UnpicklingError from
    torch's weights-only unpickler)."""
    loads, marker = closed_hub_loads
    seconds, error = loads["pickled"]
    assert "OSError: " in error and "names 'pytorch_model.bin'" in error, error[-2000:]
    assert "an index may name only .safetensors files" in error
    assert not marker.exists() and seconds < FAST


# ---------------------------------------------------------------------------------------------
# Item 12: weights must be floating point and finite
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8, torch.bool])
def test_non_floating_weights_are_refused_by_name(saved: Path, tmp_path: Path, dtype: torch.dtype):
    """Before: loaded silently (cast to float: all-zero or meaningless outputs)."""
    folder = copy_of(saved, tmp_path)
    weights = load_file(folder / "model.safetensors")
    weights["bilm.layers.0.input_kernel"] = (weights["bilm.layers.0.input_kernel"] * 10).to(dtype)
    weights["char_cnn.projection.bias"] = weights["char_cnn.projection.bias"].to(dtype)
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match="non-floating dtype") as error:
        ElmoModel.from_pretrained(folder)
    assert "bilm.layers.0.input_kernel" in str(error.value) and "char_cnn.projection.bias" in str(error.value)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_weights_are_refused_by_name(saved: Path, tmp_path: Path, value: float):
    """Before: loaded silently (NaN outputs)."""
    folder = copy_of(saved, tmp_path)
    weights = load_file(folder / "model.safetensors")
    weights["char_cnn.projection.weight"][3, 1] = value
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"NaN or infinite values: char_cnn\.projection\.weight$"):
        ElmoModel.from_pretrained(folder)


def test_float16_weights_and_a_tagger_with_a_bool_buffer_still_load(saved: Path, tmp_path: Path):
    """The checks refuse only what is wrong: float16 weights, and the CRF's bool constraint mask, load."""
    half = copy_of(saved, tmp_path, "half")
    weights = {k: v.half() for k, v in load_file(half / "model.safetensors").items()}
    save_file(weights, half / "model.safetensors", metadata={"format": "pt"})
    model = ElmoModel.from_pretrained(half)
    assert torch.equal(model.char_cnn.projection.weight, MODEL.char_cnn.projection.weight.half().float())
    torch.manual_seed(0)
    tagger = ElmoForTokenClassification(ElmoConfig(**TINY, num_labels=3, use_crf=True))
    tagger.save_pretrained(tmp_path / "tagger")
    assert any(not v.is_floating_point() for v in load_file(tmp_path / "tagger" / "model.safetensors").values())
    loaded = ElmoForTokenClassification.from_pretrained(tmp_path / "tagger")
    assert all(torch.equal(loaded.state_dict()[k], v) for k, v in tagger.state_dict().items())
    ElmoModel.from_pretrained(tmp_path / "tagger")  # the base model of a tagger folder


# ---------------------------------------------------------------------------------------------
# Item 14: attention_mask holds 0 and 1 only, of a bool or integer dtype
# ---------------------------------------------------------------------------------------------


def _batch():
    return TOKENIZER(SENTENCES, is_split_into_words=True, padding=True, return_tensors="pt")


@pytest.mark.parametrize(
    "mask, error",
    [
        ([[1, 1, 1, 0], [1, 1, 2, 1]], r"only 0 \(padding\) and 1 \(words\), got 2 at \(1, 2\)"),
        ([[1, 1, 1, 0], [1, -1, 1, 1]], r"only 0 \(padding\) and 1 \(words\), got -1 at \(1, 1\)"),
        ([[1, 1, 1, 0], [1, 0.5, 1, 1]], r"bool or integer dtype .* got torch\.float32"),
        ([[1, 1, 1, float("nan")], [1, 1, 1, 1]], r"bool or integer dtype .* got torch\.float32"),
        ([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0]], r"bool or integer dtype .* got torch\.float32"),
    ],
    ids=["two", "minus-one", "half", "nan", "exact-float"],
)
def test_attention_mask_values_other_than_0_and_1_are_refused(mask, error):
    """Before: 2, -1 and NaN were taken as words (NaN also at a padding position), 0.5 as a word."""
    with pytest.raises(ValueError, match=error):
        MODEL(_batch()["input_ids"], attention_mask=torch.tensor(mask))


@pytest.mark.parametrize("kind", [list, np.array, tuple])
def test_attention_mask_that_is_not_a_tensor_is_refused_by_name(kind):
    """Before: AttributeError ('list' object has no attribute 'shape')."""
    mask = kind([[1, 1, 1, 0], [1, 1, 1, 1]])
    with pytest.raises(TypeError, match=f"attention_mask must be a torch.Tensor .* got {type(mask).__name__}"):
        MODEL(_batch()["input_ids"], attention_mask=mask)


@pytest.mark.parametrize("dtype", [torch.bool, torch.uint8, torch.int8, torch.int32, torch.int64])
def test_attention_mask_of_any_bool_or_integer_dtype_is_accepted(dtype):
    enc = _batch()
    with torch.no_grad():
        expected = MODEL(enc["input_ids"]).elmo
        got = MODEL(enc["input_ids"], attention_mask=enc["attention_mask"].to(dtype)).elmo
    assert torch.equal(got, expected)


# ---------------------------------------------------------------------------------------------
# Item 15: the token cache is dropped when the character encoder's weights change
# ---------------------------------------------------------------------------------------------


def _train_step(model: ElmoModel, optimizer: torch.optim.Optimizer) -> None:
    model.train()
    model(**_batch()).elmo.pow(2).sum().backward()
    optimizer.step()
    optimizer.zero_grad()
    model.eval()


def _change_weights(model: ElmoModel, kind: str) -> None:
    if kind == "sgd-step":
        _train_step(model, torch.optim.SGD(model.parameters(), lr=0.5))
    elif kind == "adamw-fused-step":  # fused kernels do not bump autograd's version counters
        _train_step(model, torch.optim.AdamW(model.parameters(), lr=0.1, fused=True))
    elif kind == "load-state-dict":
        model.load_state_dict(tiny_model(seed=1).state_dict())
    elif kind == "no-grad-add":
        with torch.no_grad():
            model.char_cnn.projection.weight.add_(1.0)
    elif kind == "data-add":
        model.char_cnn.highways[0].carry.bias.data.add_(1.0)
    elif kind == "to-float64":
        model.to(torch.float64)
    elif kind == "through-float16":
        model.to(torch.float16).to(torch.float32)
    else:
        raise AssertionError(kind)


@pytest.mark.parametrize(
    "kind",
    ["sgd-step", "adamw-fused-step", "load-state-dict", "no-grad-add", "data-add", "to-float64", "through-float16"],
)
def test_token_cache_follows_weight_changes(kind: str):
    """Before: the cache kept the old vectors and was used again in eval mode (outputs off by 0.1 to 8)."""
    model = tiny_model()
    model.config.elmo_dropout = 0.0
    enc = _batch()
    build_token_cache(model, WORDS, progress=False)
    _change_weights(model, kind)
    with torch.no_grad():
        cached = model(**enc, output_hidden_states=True).hidden_states
    assert token_cache_size(model) == 0  # dropped, not used
    with torch.no_grad():
        fresh = model(**enc, output_hidden_states=True).hidden_states
    for x, y in zip(cached, fresh, strict=True):
        assert torch.equal(x, y)
    # A cache built again is used for the new weights and gives their outputs.
    assert build_token_cache(model, WORDS, progress=False) == len(WORDS)
    with torch.no_grad():
        again = model(**enc, output_hidden_states=True).hidden_states
    assert token_cache_size(model) == len(WORDS)
    for x, y in zip(again, fresh, strict=True):  # float rounding of the batched vs. one-by-one CNN only
        torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-5)


def test_token_cache_is_kept_while_the_weights_do_not_change():
    model = copy.deepcopy(MODEL)
    enc = _batch()
    build_token_cache(model, WORDS, progress=False)
    with torch.no_grad():
        model(**enc)
        model.train()
        model(**enc)  # training other parts (or dropout) leaves the character encoder alone
        model.eval()
        model.token_cache.vectors.fill_(123.0)
        poisoned = model(**enc, output_hidden_states=True).hidden_states[0]
    assert poisoned.abs().max() >= 123.0  # the cache is really used


# ---------------------------------------------------------------------------------------------
# Item 17: the exported graph's input contract, checked before the graph
# ---------------------------------------------------------------------------------------------


def _left_padded(ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return ids.flip(1), mask.flip(1)


@pytest.mark.parametrize(
    "damage, error",
    [
        ("left-padded", "right-padded"),
        ("negative-id", r"character ids must be in \[0, 262\)"),
        ("id-262", r"character ids must be in \[0, 262\)"),
        ("mask-2", "only 0 .* and 1"),
        ("int32-ids", "input_ids of an exported ELMo graph must be int64"),
        ("float-mask", "attention_mask of an exported ELMo graph must be int64"),
        ("wrong-width", r"input_ids must be a \(batch, words, 50\) tensor"),
    ],
)
@pytest.mark.parametrize("as_numpy", [False, True], ids=["tensor", "numpy"])
def test_export_input_check_refuses_what_the_eager_model_refuses(damage: str, error: str, as_numpy: bool):
    """Before: no check existed, and the exported graph ran on these inputs (e.g. a left-padded mask)."""
    ids, mask = example_inputs(MODEL.config, batch=3, words=4, seed=1)
    check_export_inputs(ids.numpy() if as_numpy else ids, mask.numpy() if as_numpy else mask, MODEL.config)
    if damage == "left-padded":
        ids, mask = _left_padded(ids, mask)
    elif damage == "negative-id":
        ids[0, 0, 3] = -5
    elif damage == "id-262":
        ids[1, 0, 2] = 262
    elif damage == "mask-2":
        mask[0, 0] = 2
    elif damage == "int32-ids":
        ids = ids.int()
    elif damage == "float-mask":
        mask = mask.float()
    elif damage == "wrong-width":
        ids = ids[..., :20].contiguous()
    if as_numpy:
        ids, mask = ids.numpy(), mask.numpy()
    with pytest.raises(ValueError, match=error):
        check_export_inputs(ids, mask, MODEL.config)
    if not as_numpy and damage in ("left-padded", "negative-id", "mask-2"):
        with pytest.raises(ValueError, match=error):  # the eager wrapper checks too
            ElmoExportWrapper(MODEL)(ids, mask)
        with pytest.raises(ValueError, match=error):  # as the eager model does
            MODEL(ids, attention_mask=mask)


def test_export_input_check_refuses_other_types():
    ids, mask = example_inputs(MODEL.config, batch=2, words=3)
    with pytest.raises(TypeError, match="attention_mask must be a numpy array or a torch.Tensor, got list"):
        check_export_inputs(ids, mask.tolist(), MODEL.config)


# ---------------------------------------------------------------------------------------------
# Item 23: clear errors for a wrong model source, fast for an unreachable Hub; decode of huge ids
# ---------------------------------------------------------------------------------------------


def test_folder_without_config_json_is_named_as_such(saved: Path, tmp_path: Path, monkeypatch, capsys):
    """Before: "the weights ... do not fit the config" (the default config's full-size model was built). The command
    runs in this process (issue 51: its own launch is tested in tests/test_cli*.py)."""
    folder = copy_of(saved, tmp_path)
    (folder / "config.json").unlink()
    with pytest.raises(OSError, match=r"copy is not a folder with config\.json"):
        ElmoModel.from_pretrained(folder)
    assert ElmoModel.from_pretrained(folder, config=MODEL.config) is not None  # an explicit config still works
    capsys.readouterr()
    monkeypatch.setattr("sys.stdin", io.StringIO("a b\n"))
    code = cli.main(["embed", "-", "-o", str(tmp_path / "o.hdf5"), "--model", str(folder)])
    stderr = capsys.readouterr().err
    assert code == 1 and stderr.count("\n") == 1, stderr
    assert stderr.startswith("error: --model") and "is not a folder with config.json" in stderr


@pytest.mark.parametrize("name", ["no-such-dir/deeper/model", "/no/such/folder", "./relative/missing/x"])
def test_missing_folder_is_named_as_such(name: str):
    """Before: "Repo id must be in the form 'repo_name' or 'namespace/repo_name'"."""
    with pytest.raises(OSError, match=r"no such folder .* \(and not a Hugging Face Hub id"):
        ElmoModel.from_pretrained(name)


def _embed_command(tmp_path: Path, model: str) -> list[str]:
    return [sys.executable, "-m", "elmo_cli", "embed", "-", "-o", str(tmp_path / "o.hdf5"), "--model", model]


@pytest.mark.slow  # issue 51: a fresh interpreter
def test_unreachable_hub_fails_fast_and_clearly_in_the_command(tmp_path: Path):
    """The command checks the Hub once before loading (``hub/remote_code.hub_local_files_only``; from_pretrained itself
    makes no network call of its own). Before: huggingface_hub's retries, ~24 s per file (212 s for `elmo
    embed`), then a misleading message."""
    env = _hub_env(tmp_path, f"http://127.0.0.1:{_closed_port()}")
    start = time.monotonic()
    try:
        result = subprocess.run(
            _embed_command(tmp_path, "some-user/some-model"),
            input="a b\n", env=env, capture_output=True, text=True, timeout=FAST * 2, cwd=tmp_path,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        pytest.fail(f"no answer after {FAST * 2} s")
    seconds = time.monotonic() - start
    assert result.returncode == 1
    assert "no such folder some-user/some-model, and the Hugging Face Hub (http://127.0.0.1:" in result.stderr
    assert "cannot be reached" in result.stderr and seconds < FAST
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: --model some-user/some-model")
    assert not (tmp_path / "o.hdf5").exists()


SHORT_NAME_LOADERS = ["ElmoModel", "ElmoTokenizer", "ElmoForTokenClassification"]
# (label, class, name) of each load from a Hub that cannot be reached: a released model's short name by each loader,
# and a cached Hub model whose index names a pickle.
_CLOSED_HUB_LOADS = [*((loader, loader, "elmo-original") for loader in SHORT_NAME_LOADERS)]
_CLOSED_HUB_LOADS.append(("pickled", "ElmoModel", "some-user/pickled"))
# Each load timed, in one interpreter (issue 51: one launch for the four), a marker line before its outcome.
_CLOSED_HUB_SCRIPT = """
import sys, time, traceback
import modeling_elmo
for label, loader, name in eval(sys.argv[1]):
    start = time.monotonic()
    try:
        getattr(modeling_elmo, loader).from_pretrained(name)
    except Exception:
        message = traceback.format_exc()
    else:
        message = "loaded"
    print(f"=== {label} {time.monotonic() - start:.3f}\\n{message}", file=sys.stderr, flush=True)
"""


@pytest.fixture(scope="module")
def closed_hub_loads(saved, tmp_path_factory) -> tuple[dict[str, tuple[float, str]], Path]:
    """Each load's (seconds, error) by label, and the marker file the pickle would create; the subprocess's
    timeout bounds the whole."""
    tmp_path = tmp_path_factory.mktemp("closed-hub")
    marker = _cache_pickled_hub_model(saved, tmp_path)
    env = _hub_env(tmp_path, f"http://127.0.0.1:{_closed_port()}")
    try:
        result, _ = _python(_CLOSED_HUB_SCRIPT, env, timeout=FAST * 2, args=[repr(_CLOSED_HUB_LOADS)])
    except subprocess.TimeoutExpired:
        pytest.fail(f"no answer after {FAST * 2} s")
    assert result.returncode == 0, result.stderr[-2000:]
    parts = re.split(r"^=== (\w+) ([\d.]+)$", result.stderr, flags=re.MULTILINE)
    loads = {
        name: (float(time_), text) for name, time_, text in zip(parts[1::3], parts[2::3], parts[3::3], strict=True)
    }
    assert list(loads) == [label for label, _, _ in _CLOSED_HUB_LOADS], result.stderr[-2000:]
    return loads, marker


@pytest.mark.slow  # issue 51: a fresh interpreter (one for the four closed-Hub loads)
@pytest.mark.parametrize("loader", SHORT_NAME_LOADERS)
def test_released_short_name_fails_at_once(closed_hub_loads, loader: str):
    """Issue 29 item 3: a name that is no folder and no owner/name Hub id (a released model's short name) fails at
    once, naming `elmo download`, with no network call; the subprocess's own timeout bounds the test. Before: the
    tokenizer waited ~230 s through the Hub client's retries (the model ~5 s behind a probe of the Hub)."""
    seconds, error = closed_hub_loads[0][loader]
    assert "OSError: 'elmo-original' is no folder" in error, error[-2000:]
    assert "elmo download NAME" in error and seconds < FAST


@pytest.mark.slow  # issue 51: a fresh interpreter
def test_silent_hub_times_out_quickly_in_the_command(tmp_path: Path):
    """A Hub that accepts connections and never answers costs the command's probe timeout, not minutes."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:  # accept and never answer
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                pass

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        env = _hub_env(tmp_path, f"http://127.0.0.1:{server.getsockname()[1]}")
        start = time.monotonic()
        result = subprocess.run(
            _embed_command(tmp_path, "some-user/some-model"),
            input="a b\n", env=env, capture_output=True, text=True, timeout=FAST * 4, cwd=tmp_path,
        )  # fmt: skip
        seconds = time.monotonic() - start
    finally:
        stop.set()
        thread.join()
        for conn in held:
            conn.close()
        server.close()
    assert result.returncode == 1 and "cannot be reached" in result.stderr and seconds < FAST


@pytest.mark.slow  # issue 51: a fresh interpreter
def test_offline_hub_ids_load_from_the_cache_at_once(saved: Path, tmp_path: Path):
    """HF_HUB_OFFLINE=1 (transformers' documented switch): a cached Hub model loads at once, a missing one fails
    at once; the command also uses the cache when the Hub cannot be reached."""
    _cache_as_hub_model(saved, tmp_path, "some-user/cached")
    env = {**_hub_env(tmp_path, f"http://127.0.0.1:{_closed_port()}"), "HF_HUB_OFFLINE": "1"}
    code = (
        "from modeling_elmo import ElmoModel\n"
        "m = ElmoModel.from_pretrained('some-user/cached')\n"
        "print('layers', m.config.n_layers)"
    )
    result, seconds = _python(code, env)
    assert result.returncode == 0 and "layers 2" in result.stdout and seconds < FAST, result.stderr
    code = "from modeling_elmo import ElmoModel\nElmoModel.from_pretrained('some-user/not-cached')"
    result, seconds = _python(code, env)
    assert result.returncode != 0 and "OSError" in result.stderr and seconds < FAST
    del env["HF_HUB_OFFLINE"]
    result = subprocess.run(
        _embed_command(tmp_path, "some-user/cached"),
        input="a b\n", env=env, capture_output=True, text=True, timeout=FAST * 2, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0 and (tmp_path / "o.hdf5").exists(), result.stderr[-2000:]


@pytest.mark.parametrize("ids", [[10**12], [2**32], [5, 10**6], 10**12])
def test_decode_of_an_id_outside_the_vocabulary_is_a_value_error(ids):
    """Before: OverflowError from the Rust tokenizer for ids >= 2**32 (and an empty string for the others)."""
    with pytest.raises(ValueError, match="is not in the vocabulary"):
        TOKENIZER.decode(ids)
