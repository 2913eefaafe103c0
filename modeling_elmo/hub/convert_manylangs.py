"""Convert an ELMoForManyLangs (HIT-SCIR) model folder to an ELMo model folder of this package.

Command::

    elmo convert --manylangs_dir DIR --output_dir OUT [--overwrite]

``DIR`` is a released folder (``char.dic``, ``word.dic``, ``encoder.pkl``, ``token_embedder.pkl``, ``config.json``,
e.g. one of the 44 NLPL zips unpacked). ``OUT`` loads with ``ElmoModel.from_pretrained`` and
``ElmoTokenizer.from_pretrained`` and gives that package's outputs (``Embedder.sents2elmo(..., output_layer=-2)``)
without any of its code: see ``modeling_elmo/manylangs.py`` for what differs from AllenNLP's ELMo, and
``docs/manylangs.md``.

Everything is read as that package reads it: the dictionaries with its reader (``line.strip().split('\\t')``; a line
with one field is the character U+3000), the architecture from the file that ``config.json``'s ``config_path`` names
(in ``DIR``, or the package's default ``cnn_50_100_512_4096_sample.json``, whose values are built in here). The
``.pkl`` files are pickles from the internet: they are opened with ``torch.load(..., weights_only=True)`` only, and
anything but a plain state dict of floating-point tensors with exactly the expected names and shapes is refused.
The output is written through the same staging, lock and atomic swap as ``elmo convert`` of AllenNLP's files.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import torch

from ..configuration_elmo import ElmoConfig
from ..manylangs import BOS_WORD, EOS_WORD, MARKS, WORD_MARKS
from ..modeling_elmo import ElmoModel
from ..tokenization_elmo import ElmoTokenizer
from .convert import check_output_dir_early, check_readable, install_output_dir
from .errors import ConversionError
from .model_card import write_model_card

FILES = ("char.dic", "word.dic", "encoder.pkl", "token_embedder.pkl", "config.json")
# The architecture of the released models: the package's configs/cnn_50_100_512_4096_sample.json (and
# cnn_0_100_512_4096_sample.json, the same content), which their config.json names.
DEFAULT_ARCHITECTURE: dict[str, Any] = {
    "encoder": {"name": "elmo", "projection_dim": 512, "cell_clip": 3, "proj_clip": 3, "dim": 4096, "n_layers": 2},
    "token_embedder": {
        "name": "cnn",
        "activation": "relu",
        "filters": [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]],
        "n_highway": 2,
        "word_dim": 100,
        "char_dim": 50,
        "max_characters_per_token": 50,
    },
    "classifier": {"name": "sampled_softmax", "n_samples": 8192},
    "dropout": 0.1,
}
DEFAULT_ARCHITECTURE_FILES = ("cnn_50_100_512_4096_sample.json", "cnn_0_100_512_4096_sample.json")
_JSON_MAX_BYTES = 1 << 20
_DIC_MAX_BYTES = 256 << 20  # the releases' word.dic: about 3 MB
_PKL_MAX_BYTES = 4 << 30  # the releases' encoder.pkl: about 380 MB


# ---------------------------------------------------------------------------------------------
# Reading the folder
# ---------------------------------------------------------------------------------------------


def _read_json(path: Path, what: str) -> Any:
    if path.stat().st_size > _JSON_MAX_BYTES:
        raise ConversionError(f"{path} is too large for {what} ({path.stat().st_size} bytes)")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as err:
        raise ConversionError(f"{path} is not a valid JSON {what}: {str(err)[:200]}") from None


def read_architecture(folder: Path) -> tuple[dict[str, Any], str]:
    """The architecture config that ``folder/config.json``'s ``config_path`` names, and where it came from.

    As the package resolves it, but never outside ``folder``: the file ``basename(config_path)`` in ``folder``, else
    the package's default (built in). ``ConversionError`` for any other name.
    """
    options = _read_json(folder / "config.json", "config.json")
    path = options.get("config_path") if isinstance(options, dict) else None
    if not isinstance(path, str) or not path:
        raise ConversionError(f"{folder / 'config.json'} has no config_path naming the model's architecture file")
    name = path.replace("\\", "/").rsplit("/", 1)[-1]
    local = folder / name
    if name and name not in (".", "..") and local.is_file():
        return _read_json(local, "architecture config"), str(local)
    if name in DEFAULT_ARCHITECTURE_FILES:
        return DEFAULT_ARCHITECTURE, f"the package's default {name}"
    raise ConversionError(
        f"config.json names the architecture file {path!r}, which is neither in {folder} nor one of the package's "
        f"defaults ({', '.join(DEFAULT_ARCHITECTURE_FILES)}): copy it into {folder}"
    )


def config_of(arch: dict[str, Any], n_characters: int, word_vocab_size: int) -> ElmoConfig:
    """The [`ElmoConfig`] of an architecture config (``ConversionError`` naming what is missing or unsupported)."""

    def section(name: str) -> dict[str, Any]:
        value = arch.get(name) if isinstance(arch, dict) else None
        if not isinstance(value, dict):
            raise ConversionError(f"the architecture config has no {name!r} object")
        return value

    def need(part: dict[str, Any], where: str, key: str) -> Any:
        if key not in part:
            raise ConversionError(f"the architecture config is missing {where}.{key}")
        return part[key]

    encoder, embedder = section("encoder"), section("token_embedder")
    if need(encoder, "encoder", "name") != "elmo":
        raise ConversionError(f"only the 'elmo' encoder converts, not {encoder['name']!r}")
    if str(need(embedder, "token_embedder", "name")).lower() != "cnn":
        raise ConversionError(f"only the 'cnn' token embedder converts, not {embedder['name']!r}")
    if not isinstance(embedder.get("char_dim"), int) or embedder["char_dim"] < 1:
        raise ConversionError("only models with a character CNN (token_embedder.char_dim > 0) convert")
    word_dim = need(embedder, "token_embedder", "word_dim")
    if not isinstance(word_dim, int) or isinstance(word_dim, bool) or word_dim < 0:
        raise ConversionError(f"token_embedder.word_dim must be an integer >= 0, got {word_dim!r}")

    def clip(key: str) -> float | None:  # the package clips only when the value is truthy
        value = encoder.get(key)
        return value if value else None

    try:
        return ElmoConfig(
            char_embedding_dim=embedder["char_dim"],
            char_cnn_filters=need(embedder, "token_embedder", "filters"),
            char_cnn_activation=need(embedder, "token_embedder", "activation"),
            n_highway=need(embedder, "token_embedder", "n_highway"),
            max_characters_per_token=need(embedder, "token_embedder", "max_characters_per_token"),
            n_characters=n_characters,
            char_vocabulary="manylangs",
            word_vocab_size=word_vocab_size if word_dim else 0,
            word_embedding_dim=word_dim,
            lstm_dim=need(encoder, "encoder", "dim"),
            projection_dim=need(encoder, "encoder", "projection_dim"),
            n_layers=need(encoder, "encoder", "n_layers"),
            cell_clip=clip("cell_clip"),
            proj_clip=clip("proj_clip"),
            use_skip_connections=True,  # its ElmobiLm adds every layer's input to its output but the first's
        )
    except (TypeError, ValueError) as err:
        raise ConversionError(f"unsupported architecture config: {err}") from None


def read_dictionary(path: Path) -> dict[str, int]:
    """``char.dic``/``word.dic`` as the package reads them (elmo.py): per line ``line.strip().split('\\t')``, a
    single field being the id of U+3000, later lines winning; ``ConversionError`` naming the line where the package
    would fail."""
    if path.stat().st_size > _DIC_MAX_BYTES:
        raise ConversionError(f"{path} is too large for a dictionary ({path.stat().st_size} bytes)")
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as err:
        raise ConversionError(f"{path} is not UTF-8 text: {err.reason} at byte {err.start}") from None
    entries: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), start=1):  # the line breaks of its codecs reader
        fields = line.strip().split("\t")
        if len(fields) == 1:
            fields.insert(0, "\u3000")
        if len(fields) != 2 or not fields[1].strip().isdecimal() or len(fields[1]) > 24:
            raise ConversionError(f"{path} line {number}: not 'entry<TAB>id' ({line[:60]!r})")
        entries[fields[0]] = int(fields[1])
    if not entries:
        raise ConversionError(f"{path} is empty")
    return entries


def _gather_order(entries: dict[str, int], first: tuple[str, ...]) -> list[str]:
    """The entries ``first`` (those present), then the others by id (ties in file order)."""
    rest = sorted((key for key in entries if key not in first), key=lambda key: entries[key])
    return [key for key in first if key in entries] + rest


# torch wraps what its weights-only unpickler refused in advice: to load with weights_only=False, to allowlist the
# global, to file an issue. None of it applies to a file from the internet; the lines that hold it are dropped.
_TORCH_ADVICE = ("weights only load failed", "weights_only", "please file an issue", "check the documentation")
_ALLOWLIST_ADVICE = re.compile(r"(,? or (?:classes|types) )?allowlisted via `add_safe_globals`,?")
_REFUSED_GLOBAL = re.compile(r"\bGLOBAL ([\w.]+)")


def _torch_reason(err: BaseException) -> str:
    """The gist of an error of ``torch.load``: its type and first line of its own (torch's advice dropped, and the
    sentences after the first: "This is an internal miniz error. If you are seeing...")."""
    lines = [line.strip() for line in str(err).splitlines()]
    kept = [line for line in lines if line and not any(advice in line.lower() for advice in _TORCH_ADVICE)]
    text = kept[0].removeprefix("WeightsUnpickler error:").strip() if kept else ""
    text = _ALLOWLIST_ADVICE.sub("", text.split(". ")[0])[:200]
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def _load_error(path: Path, err: Exception) -> ConversionError:
    """The one error of a ``.pkl`` that ``torch.load(weights_only=True)`` does not load, naming the file, and the
    global that the unpickler refused where there is one (the name is the whole story: a state dict never needs
    one). Never torch's advice to load it with ``weights_only=False``."""
    refused = _REFUSED_GLOBAL.search(str(err))
    if refused is not None:
        return ConversionError(
            f"{path} is refused: unpickling it would call {refused.group(1)}, which a state dict of tensors never "
            "does (the .pkl files are read with torch.load(weights_only=True) only; nothing else is ever unpickled)"
        )
    if "weights only load failed" in str(err).lower():
        return ConversionError(
            f"{path} is not a plain PyTorch state dict: the weights-only unpickler refused it ({_torch_reason(err)}); "
            "the .pkl files are read with torch.load(weights_only=True) only"
        )
    return ConversionError(
        f"{path} is not a readable PyTorch state dict (damaged or cut short?): {_torch_reason(err)}; the .pkl files "
        "are read with torch.load(weights_only=True) only"
    )


def _tensor_problem(key: str, value: Any, shape: tuple[int, ...]) -> str | None:
    """Why ``value`` is not a finite (also in float32), dense floating-point tensor of ``shape`` on the CPU, or
    None."""
    if type(value) not in (torch.Tensor, torch.nn.Parameter):
        return f"{key} is a {type(value).__name__}, not a tensor"
    if value.layout != torch.strided:
        kind = "sparse" if "sparse" in str(value.layout) else "non-dense"
        return f"{key} is a {kind} tensor ({value.layout}), not a dense one"
    if value.is_meta:
        return f"{key} is a meta tensor (it holds no data)"
    if value.device.type != "cpu":
        return f"{key} is on the {value.device.type} device, which loading to the CPU did not move"
    if not value.is_floating_point():
        return f"{key} has dtype {value.dtype}, not a floating-point one"
    if tuple(value.shape) != shape:
        return f"{key} has shape {tuple(value.shape)}, the architecture needs {shape}"
    if not bool(torch.isfinite(value).all()):
        return f"{key} holds NaN or infinite values"
    if not bool(torch.isfinite(value.to(torch.float32)).all()):  # float64 beyond float32's range: infinite there
        largest = float(value.abs().max())
        return (
            f"{key} holds values beyond float32's range (largest magnitude {largest:.3g}, float32 holds up to "
            f"{torch.finfo(torch.float32).max:.3g}): the converted model, in float32, would hold infinities"
        )
    return None


def load_state_dict(path: Path, expected: dict[str, tuple[int, ...]]) -> dict[str, torch.Tensor]:
    """A ``.pkl`` state dict, loaded with ``torch.load(weights_only=True)`` only, checked to hold exactly the
    ``expected`` names with those shapes, as finite, dense floating-point tensors (returned in float32).

    Every failure is one [`ConversionError`] naming the file: whatever ``torch.load`` raises on a hostile or
    damaged file (an ``UnpicklingError`` naming a refused global, but also ``IndexError``, ``KeyError``,
    ``OSError``, ``RuntimeError``, ``EOFError``... of random or cut bytes), and sparse or meta tensors.
    """
    size = path.stat().st_size
    if size > _PKL_MAX_BYTES:
        raise ConversionError(f"{path} is too large ({size} bytes) for this architecture's weights")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # a hostile file makes the unpickler raise almost anything
        raise _load_error(path, err) from None
    if not isinstance(state, dict):
        raise ConversionError(f"{path} holds a {type(state).__name__}, not a state dict (a dict of tensors)")
    problems = []
    for key, value in state.items():
        if not isinstance(key, str) or key not in expected:
            problems.append(f"unexpected entry {str(key)[:80]!r}")
            continue
        try:
            problem = _tensor_problem(key, value, expected[key])
        except Exception as err:  # a tensor the unpickler built but torch cannot use
            problem = f"{key} cannot be checked ({_torch_reason(err)})"
        if problem is not None:
            problems.append(problem)
    problems += [f"missing {key}" for key in expected if key not in state]
    if problems:
        shown = "; ".join(problems[:8]) + (f"; and {len(problems) - 8} more" if len(problems) > 8 else "")
        raise ConversionError(f"{path} does not hold the expected weights: {shown}")
    return {key: value.detach().to(torch.float32) for key, value in state.items()}


def _expected_shapes(config: ElmoConfig, char_rows: int, word_rows: int) -> tuple[dict, dict]:
    """The names and shapes of ``token_embedder.pkl`` and ``encoder.pkl`` for ``config``."""
    cd, n, p, d = config.char_embedding_dim, config.n_filters, config.projection_dim, config.lstm_dim
    wd = config.word_embedding_dim
    embedder = {"char_emb_layer.embedding.weight": (char_rows, cd)}
    if wd:
        embedder["word_emb_layer.embedding.weight"] = (word_rows, wd)
    for i, (width, count) in enumerate(config.char_cnn_filters):
        embedder[f"convolutions.{i}.weight"] = (count, cd, width)
        embedder[f"convolutions.{i}.bias"] = (count,)
    for k in range(config.n_highway):
        embedder[f"highways._layers.{k}.weight"] = (2 * n, n)
        embedder[f"highways._layers.{k}.bias"] = (2 * n,)
    embedder["projection.weight"] = (p, wd + n)
    embedder["projection.bias"] = (p,)
    encoder = {}
    for layer in range(config.n_layers):
        for direction in ("forward", "backward"):
            prefix = f"{direction}_layer_{layer}"
            encoder[f"{prefix}.input_linearity.weight"] = (4 * d, p)
            encoder[f"{prefix}.state_linearity.weight"] = (4 * d, p)
            encoder[f"{prefix}.state_linearity.bias"] = (4 * d,)
            encoder[f"{prefix}.state_projection.weight"] = (p, d)
    return embedder, encoder


# ---------------------------------------------------------------------------------------------
# Mapping the weights
# ---------------------------------------------------------------------------------------------


def _gates(weight: torch.Tensor, d: int) -> torch.Tensor:
    """Its LSTM's gate blocks ``i, f, g, o`` (rows) -> this package's ``i, j(=g), f, o``."""
    i, f, g, o = weight.split(d, dim=0)
    return torch.cat([i, g, f, o], dim=0)


def map_weights(
    config: ElmoConfig,
    embedder: dict[str, torch.Tensor],
    encoder: dict[str, torch.Tensor],
    char_rows: list[int],
    word_rows: list[int],
) -> dict[str, torch.Tensor]:
    """This package's ``char_cnn.*`` and ``bilm.*`` parameters from the package's two state dicts.

    ``char_rows[k]`` is the old row of new character id ``k + 1`` (row 0, "no word", is zero); ``word_rows[k]``
    the old row of new word id ``k``.
    """
    n, d, wd = config.n_filters, config.lstm_dim, config.word_embedding_dim
    chars = embedder["char_emb_layer.embedding.weight"]
    state = {
        "char_cnn.char_embedding.weight": torch.cat([chars.new_zeros(1, chars.shape[1]), chars[char_rows]]),
        "char_cnn.projection.weight": embedder["projection.weight"][:, wd:],
        "char_cnn.projection.bias": embedder["projection.bias"],
    }
    if wd:  # the word part of the projection: its first wd columns (word embedding first in the concatenation)
        state["char_cnn.word_input.embedding.weight"] = embedder["word_emb_layer.embedding.weight"][word_rows]
        state["char_cnn.word_input.projection.weight"] = embedder["projection.weight"][:, :wd]
    for i in range(len(config.char_cnn_filters)):
        for part in ("weight", "bias"):
            state[f"char_cnn.convolutions.{i}.{part}"] = embedder[f"convolutions.{i}.{part}"]
    for k in range(config.n_highway):
        weight, bias = embedder[f"highways._layers.{k}.weight"], embedder[f"highways._layers.{k}.bias"]
        # Its gate g multiplies the input (y = g x + (1 - g) relu(.)); this package's gate t = 1 - g multiplies the
        # transform: t = sigmoid(-(W_g x + b_g)).
        state[f"char_cnn.highways.{k}.transform.weight"] = weight[:n]
        state[f"char_cnn.highways.{k}.transform.bias"] = bias[:n]
        state[f"char_cnn.highways.{k}.carry.weight"] = -weight[n:]
        state[f"char_cnn.highways.{k}.carry.bias"] = -bias[n:]
    forget = slice(2 * d, 3 * d)  # the f block in this package's order
    for layer in range(config.n_layers):
        parts: dict[str, list[torch.Tensor]] = {"input_kernel": [], "state_kernel": [], "bias": [], "projection": []}
        for direction in ("forward", "backward"):
            prefix = f"{direction}_layer_{layer}"
            parts["input_kernel"].append(_gates(encoder[f"{prefix}.input_linearity.weight"], d).T)
            parts["state_kernel"].append(_gates(encoder[f"{prefix}.state_linearity.weight"], d).T)
            bias = _gates(encoder[f"{prefix}.state_linearity.bias"], d).clone()
            bias[forget] -= 1.0  # this package adds the forget bias 1 at run time (the original TF cell's); it has none
            parts["bias"].append(bias)
            parts["projection"].append(encoder[f"{prefix}.state_projection.weight"].T)
        for name, tensors in parts.items():
            state[f"bilm.layers.{layer}.{name}"] = torch.stack(tensors).contiguous()
    return state


def read_manylangs(folder: str | os.PathLike) -> tuple[ElmoConfig, dict[str, torch.Tensor], ElmoTokenizer, str]:
    """Read and check an ELMoForManyLangs folder: the config, the state dict (this package's names, scalar mixes
    excluded), the tokenizer and where the architecture came from. ``ConversionError`` if anything is wrong."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"ELMoForManyLangs folder not found: {folder}")
    for name in FILES:
        check_readable(name, str(folder / name))
    arch, arch_source = read_architecture(folder)
    chars = read_dictionary(folder / "char.dic")
    words = read_dictionary(folder / "word.dic")
    missing = [mark for mark in MARKS if mark not in chars]
    if missing:
        raise ConversionError(f"{folder / 'char.dic'} lacks the marks {', '.join(missing)}")
    missing = [mark for mark in ("<oov>", "<pad>") if mark not in words]
    if missing:
        raise ConversionError(f"{folder / 'word.dic'} lacks {', '.join(missing)}")
    # Characters: the single code points (a lookup is per code point: other entries are never used), by id.
    characters = [key for key in _gather_order(chars, ()) if len(key) == 1]
    char_rows = [chars[mark] for mark in MARKS] + [chars[c] for c in characters]
    # Words: <oov> <bos> <eos> <pad> first (its word.dic order; a missing <bos>/<eos> reads as <oov> there too).
    vocab_words = [*WORD_MARKS, *(w for w in _gather_order(words, WORD_MARKS) if w not in WORD_MARKS)]
    word_rows = [words.get(word, words["<oov>"]) for word in vocab_words]
    assert word_rows[BOS_WORD] == words.get("<bos>", words["<oov>"]) and len(vocab_words) > EOS_WORD
    config = config_of(arch, n_characters=1 + len(char_rows), word_vocab_size=len(vocab_words))
    # Its embedding layers have one row per dictionary entry (EmbeddingLayer: len(word2id)).
    embedder_shapes, encoder_shapes = _expected_shapes(config, len(chars), len(words))
    embedder = load_state_dict(folder / "token_embedder.pkl", embedder_shapes)
    encoder = load_state_dict(folder / "encoder.pkl", encoder_shapes)
    for name, entries in (("char.dic", chars), ("word.dic", words)):
        bad = next((key for key, index in entries.items() if index >= len(entries)), None)
        if bad is not None and (name == "char.dic" or config.word_vocab_size):
            raise ConversionError(
                f"{folder / name}: the id {entries[bad]} of {bad!r} is not a row of its embedding ({len(entries)} rows)"
            )
    state = map_weights(config, embedder, encoder, char_rows, word_rows)
    tokenizer = ElmoTokenizer(
        vocab={word: index for index, word in enumerate(vocab_words)},
        char_vocab=[*MARKS, *characters],
        max_characters_per_token=config.max_characters_per_token,
        bos_token="<bos>",
        eos_token="<eos>",
        unk_token="<oov>",
        pad_token="<pad>",
        model_input_names=["input_ids", "attention_mask", "vocab_ids"]
        if config.word_vocab_size
        else ["input_ids", "attention_mask"],
    )
    return config, state, tokenizer, arch_source


def convert_manylangs(
    manylangs_dir: str | os.PathLike,
    output_dir: str | os.PathLike,
    overwrite: bool = False,
    language: str | None = None,
) -> Path:
    """Convert an ELMoForManyLangs folder to a folder that ``ElmoModel.from_pretrained`` and
    ``ElmoTokenizer.from_pretrained`` load (atomically, as [`convert`]). ``language`` (an ISO code) goes into the
    model card's metadata; a folder does not say its language.

    Raises:
        FileNotFoundError: the folder or one of its files does not exist.
        ConversionError: the folder is invalid (its message says why); nothing is written.
        OSError: writing failed; nothing is left behind, an old ``output_dir`` is kept.
    """
    source = Path(manylangs_dir)
    output_dir = Path(output_dir)
    real_source, real_output = Path(os.path.realpath(source)), Path(os.path.realpath(output_dir))
    if real_output == real_source or real_output in real_source.parents or real_source in real_output.parents:
        raise ConversionError(f"output_dir {output_dir} and the ELMoForManyLangs folder {source} overlap")
    check_output_dir_early(output_dir, overwrite)
    config, state, tokenizer, arch_source = read_manylangs(source)
    model = ElmoModel(config)
    state.update({k: v for k, v in model.state_dict().items() if k.startswith("scalar_mixes.")})
    model.load_state_dict(state, strict=True)

    def write(new: Path) -> None:
        model.save_pretrained(new)
        tokenizer.save_pretrained(new)
        write_model_card(new, model.config, how_made=_provenance(source, arch_source, config), language=language)

    install_output_dir(output_dir, overwrite, write)
    return output_dir


def _provenance(source: Path, arch_source: str, config: ElmoConfig) -> str:
    words = (
        f"a {config.word_vocab_size}-word embedding of size {config.word_embedding_dim} before the projection"
        if config.word_vocab_size
        else "no word embedding"
    )
    return (
        f"Converted from the ELMoForManyLangs (HIT-SCIR) model folder `{source.name}` (architecture: {arch_source}) "
        "by `elmo convert --manylangs_dir` of the `modeling_elmo` package, in float32, without retraining and without "
        f"that package's code: its own {config.n_characters - 7} characters (and six marks), {words}. Its outputs "
        "match `Embedder.sents2elmo(..., output_layer=-2)` of `elmoformanylangs` to within 5e-5. The scalar-mix "
        "weights are new (equal weights, gamma 1)."
    )


__all__ = ["DEFAULT_ARCHITECTURE", "convert_manylangs", "map_weights", "read_dictionary", "read_manylangs"]
