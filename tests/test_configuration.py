"""The configuration (issues #13 and #14): strict types, bounded sizes, short errors that name the field, hostile
``options.json``/``config.json``/``tokenizer_config.json`` files, the transformers 5 ``@strict`` idiom, and the
config as the ground floor (saving it writes ``config.json`` only; the model's save prepares the Hub folder).

The property tests run under a memory limit (``RLIMIT_DATA``, set around each test in this process and restored
after; ``RLIMIT_AS`` would break torch, which reserves address space it never uses): an allocation beyond it fails
with ``MemoryError``/``RuntimeError`` instead of swapping, so "0 out-of-memory" is checked, not hoped for.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import math
import os
import resource
import typing
from pathlib import Path
from unittest import mock

import pytest
import torch
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from modeling_elmo import (
    ElmoConfig,
    ElmoForPreTraining,
    ElmoForTokenClassification,
    ElmoModel,
    ElmoTokenizer,
    configuration_elmo,
)
from modeling_elmo.commands.convert import main as convert_main
from modeling_elmo.configuration_elmo import MAX_PARAMETERS, SIZE_LIMITS

pytestmark = pytest.mark.usefixtures("one_thread")

REPO = Path(__file__).resolve().parent.parent
TINY = dict(lstm_dim=32, projection_dim=8, char_embedding_dim=4, char_cnn_filters=[[1, 4], [2, 8]], n_highway=1)
LABELS = {0: "O", 1: "B-X", 2: "I-X"}
MAX_MESSAGE = 300  # characters of an error line (the issue saw a 39 MB one)


def tiny_options() -> dict:
    """An original ``options.json`` for a tiny biLM (the keys bilm-tf writes)."""
    return {
        "bidirectional": True,
        "char_cnn": {
            "activation": "relu",
            "embedding": {"dim": 4},
            "filters": [[1, 4], [2, 8]],
            "max_characters_per_token": 50,
            "n_characters": 262,
            "n_highway": 1,
        },
        "lstm": {
            "cell_clip": 3,
            "dim": 32,
            "n_layers": 2,
            "proj_clip": 3,
            "projection_dim": 8,
            "use_skip_connections": True,
        },
    }


def assert_short_refusal(error: pytest.ExceptionInfo, *names: str) -> str:
    """A ``ValueError``/``TypeError`` of one short line that names one of ``names``."""
    message = str(error.value)
    assert error.type in (ValueError, TypeError), f"{error.type.__name__}: {message[:200]}"
    assert "\n" not in message and len(message) <= MAX_MESSAGE + 100, message[:400]
    assert any(name in message for name in names), f"{names} not named in: {message}"
    return message


def _data_segment() -> int:
    """Bytes in this process's data segment (what RLIMIT_DATA counts), from /proc."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmData:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmData in /proc/self/status")


@pytest.fixture
def memory_limit():
    """At most 1 GiB more data than the process holds now, for the test's duration; the limit is restored after.
    Yields the limit in bytes."""
    soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
    limit = _data_segment() + (1 << 30)
    if hard != resource.RLIM_INFINITY and hard < limit:
        pytest.skip(f"the hard RLIMIT_DATA ({hard}) is below the {limit} bytes this test sets: raise it (ulimit -Hd)")
    resource.setrlimit(resource.RLIMIT_DATA, (limit, hard))
    try:
        yield limit
    finally:
        resource.setrlimit(resource.RLIMIT_DATA, (soft, hard))


def test_the_memory_limit_is_real(memory_limit):
    """The limit the property tests run under does refuse a big allocation (else "0 OOM" would prove nothing)."""
    with pytest.raises(MemoryError):
        bytearray(2 << 30)
    with pytest.raises(RuntimeError, match="can't allocate memory"):
        torch.empty(600_000_000)  # 2.4 GB


# ---------------------------------------------------------------------------------------------------------------
# Item 3 of issue #13: every size has an upper bound, checked before anything is allocated
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(SIZE_LIMITS))
def test_every_size_has_an_upper_bound(name):
    limit = SIZE_LIMITS[name]
    settings = {**TINY, name: limit + 1}
    if name == "num_labels":
        settings["id2label"] = {i: f"L{i}" for i in range(limit + 1)}
        del settings[name]
    with pytest.raises(ValueError) as error:
        ElmoConfig(**settings)
    message = assert_short_refusal(error, name)
    assert str(limit) in message


def test_filter_bounds_name_the_filter():
    cases = {
        "char_cnn_filters must hold 1 to 64": [[1, 1]] * 65,
        "char_cnn_filters[1] count must be in [1, 16384]": [[1, 4], [2, 16385]],
        "char_cnn_filters[0] width must be in [1, max_characters_per_token=50]": [[51, 4]],
        "char_cnn_filters has 16386 channels in all, more than 16384": [[1, 8193], [2, 8193]],
        "char_cnn_filters must hold 1 to 64 [width, count] pairs, got 0": [],
    }
    for expected, filters in cases.items():
        with pytest.raises(ValueError) as error:
            ElmoConfig(**{**TINY, "char_cnn_filters": filters})
        assert expected in assert_short_refusal(error, "char_cnn_filters")


def test_lstm_dim_of_a_billion_is_a_config_error_not_the_allocators(tmp_path, memory_limit):
    """The issue's case: ``lstm_dim: 10**9`` in config.json gave torch's "tried to allocate 2 TB"."""
    with pytest.raises(ValueError) as error:
        ElmoConfig(**{**TINY, "lstm_dim": 10**9})
    assert_short_refusal(error, "lstm_dim")
    folder = tmp_path / "model"
    ElmoModel(ElmoConfig(**TINY)).save_pretrained(folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "lstm_dim": 10**9}))
    with pytest.raises(ValueError) as error:
        ElmoModel.from_pretrained(folder)
    assert "lstm_dim must be at most 32768" in assert_short_refusal(error, "lstm_dim")


def test_max_characters_per_token_of_a_billion_everywhere(tmp_path, memory_limit):
    """options.json (the converter grew to 23 GB), config.json and tokenizer_config.json (MemoryError)."""
    options = tiny_options()
    options["char_cnn"]["max_characters_per_token"] = 10**9
    with pytest.raises(ValueError) as error:
        ElmoConfig.from_options(options)
    assert_short_refusal(error, "char_cnn.max_characters_per_token")
    with pytest.raises(ValueError) as error:
        ElmoConfig(**TINY, max_characters_per_token=10**9)
    assert_short_refusal(error, "max_characters_per_token")
    with pytest.raises(ValueError) as error:
        ElmoTokenizer(max_characters_per_token=10**9)
    assert_short_refusal(error, "max_characters_per_token")
    ElmoTokenizer().save_pretrained(tmp_path)
    settings = json.loads((tmp_path / "tokenizer_config.json").read_text())
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({**settings, "max_characters_per_token": 10**9}))
    with pytest.raises(ValueError) as error:
        ElmoTokenizer.from_pretrained(tmp_path)
    assert_short_refusal(error, "max_characters_per_token")


def test_the_largest_released_model_and_its_lm_are_within_the_bounds():
    config = ElmoConfig(lm_vocab_size=793471)  # 2x4096_512 with its training-time softmax (1B Word Benchmark)
    counts = config.parameter_counts()
    bilm = sum(v for k, v in counts.items() if not k.startswith(("lm_", "tagger_", "num_labels", "classifier_")))
    assert round(bilm / 1e6, 1) == 93.6 and bilm < MAX_PARAMETERS / 10
    assert sum(counts.values()) < MAX_PARAMETERS
    for name, limit in SIZE_LIMITS.items():
        assert getattr(config, name) <= limit / 4, name  # far above, not just above


def test_total_parameter_bound_names_the_fields_that_drive_it():
    # Each size within its own bound, together 2 x 32 layers of a 32768-cell LSTM: 1.1e11 parameters.
    with pytest.raises(ValueError) as error:
        ElmoConfig(**{**TINY, "lstm_dim": 32768, "projection_dim": 8192, "n_layers": 32})
    message = assert_short_refusal(error, "lstm_dim, projection_dim, n_layers")
    assert "more than 1e+09" in message and "4 GB" in message
    with pytest.raises(ValueError) as error:
        ElmoConfig(**{**TINY, "lm_vocab_size": 1 << 22, "projection_dim": 512})
    assert_short_refusal(error, "lm_vocab_size, projection_dim")
    with pytest.raises(ValueError) as error:
        ElmoConfig(**TINY, tagger_word_input="embedding", tagger_word_vocab_size=1 << 22, tagger_word_embedding_dim=300)
    assert_short_refusal(error, "tagger_word_vocab_size, tagger_word_embedding_dim")


def _counted(model: torch.nn.Module) -> int:
    return sum(p.numel() for name, p in model.named_parameters() if "scalar_mix" not in name)


@pytest.mark.parametrize(
    "head",
    [
        {},
        {"use_crf": False, "tagger_num_layers": 1},
        {"tagger_word_input": "embedding", "tagger_word_vocab_size": 11, "tagger_elmo_output": True},
        {"tagger_word_input": None, "tagger_num_layers": 0},
    ],
)
def test_parameter_counts_are_exact(head):
    """The bound is honest: ``parameter_counts`` is what the models hold (scalar mixes aside)."""
    config = ElmoConfig(**TINY, id2label=LABELS, lm_vocab_size=7, tagger_hidden_size=5, **head)
    counts = config.parameter_counts()
    bilm = sum(v for k, v in counts.items() if not k.startswith(("lm_", "tagger_", "num_labels", "classifier_")))
    assert _counted(ElmoModel(config)) == bilm
    assert _counted(ElmoForPreTraining(config)) == bilm + counts["lm_vocab_size, projection_dim"]
    tagger = bilm + sum(v for k, v in counts.items() if k.startswith(("tagger_", "num_labels")))
    assert _counted(ElmoForTokenClassification(config)) == tagger


# ---------------------------------------------------------------------------------------------------------------
# Item 13 of issue #13: strict types, in config.json and in options.json
# ---------------------------------------------------------------------------------------------------------------

WRONG_TYPES = [
    ("use_skip_connections", "false"),
    ("stateful", "yes"),
    ("freeze_bilm", 0),
    ("use_crf", "true"),
    ("n_highway", True),
    ("lstm_dim", 2.0),
    ("lstm_dim", "32"),
    ("n_layers", None),
    ("elmo_dropout", "0.5"),
    ("elmo_dropout", True),
    ("cell_clip", "3"),
    ("char_cnn_activation", "RELU"),
    ("scalar_mix_layer_norm", "layer"),
    ("tagger_word_input", "words"),
    ("crf_constraints", "bio"),
    ("char_cnn_filters", [[1, 4], [2, True]]),
    ("char_cnn_filters", [[1, 4], [2.0, 8]]),
    ("char_cnn_filters", {"1": 4}),
    ("num_labels", "3"),
]


@pytest.mark.parametrize(("name", "value"), WRONG_TYPES)
def test_config_types_are_strict(name, value):
    with pytest.raises(TypeError) as error:
        ElmoConfig(**{**TINY, name: value})
    assert_short_refusal(error, name)


@pytest.mark.parametrize(
    ("section", "key", "value"),
    [
        ("lstm", "use_skip_connections", "false"),
        ("lstm", "use_skip_connections", 0),
        ("char_cnn", "n_highway", True),
        ("lstm", "dim", 32.0),
        ("lstm", "cell_clip", "3"),
        ("char_cnn", "activation", None),
    ],
)
def test_options_types_are_strict(section, key, value):
    options = tiny_options()
    options[section][key] = value
    with pytest.raises(TypeError) as error:
        ElmoConfig.from_options(options)
    assert_short_refusal(error, f"{section}.{key}")


def test_use_skip_connections_false_in_options_is_false():
    options = tiny_options()
    options["lstm"]["use_skip_connections"] = False
    assert ElmoConfig.from_options(options).use_skip_connections is False
    del options["lstm"]["use_skip_connections"]  # absent: bilm-tf's default, no skip connections
    assert ElmoConfig.from_options(options).use_skip_connections is False


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("cell_clip", math.inf),
        ("proj_clip", math.nan),
        ("elmo_dropout", math.nan),
        ("lm_dropout", -math.inf),
        ("tagger_dropout", 1.0),
        ("scalar_mix_l2_coef", math.inf),
        ("initializer_range", math.nan),
        ("cell_clip", 0),
        ("cell_clip", 10**400),  # an int beyond float range (math.isfinite raised OverflowError)
        ("elmo_dropout", 10**1000),
    ],
)
def test_numbers_must_be_finite_and_in_range(name, value):
    with pytest.raises(ValueError) as error:
        ElmoConfig(**{**TINY, name: value})
    assert_short_refusal(error, name)


def test_saved_configs_still_load(tmp_path):
    """Every existing field name and default is kept; JSON ints are accepted where floats are meant."""
    config = ElmoConfig(**{**TINY, "char_cnn_filters": ((1, 4), (2, 8))}, cell_clip=3, elmo_dropout=0, n_characters=261)
    assert config.n_characters == 262 and config.char_cnn_filters == [[1, 4], [2, 8]]
    config.save_pretrained(tmp_path)
    loaded = ElmoConfig.from_pretrained(tmp_path)
    ignored = ("_name_or_path", "transformers_version")
    assert {k: v for k, v in loaded.to_dict().items() if k not in ignored} == {
        k: v for k, v in config.to_dict().items() if k not in ignored
    }
    defaults = ElmoConfig()
    assert (defaults.lstm_dim, defaults.projection_dim, defaults.n_filters, defaults.stateful) == (
        4096,
        512,
        2048,
        False,
    )


# ---------------------------------------------------------------------------------------------------------------
# Item 22 of issue #13 (the config part): non-finite numbers and deep nesting in the JSON files
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('"filters": [[1, Infinity], [2, 8]]', "Infinity is not a JSON number"),
        ('"filters": [[1, 1e400], [2, 8]]', "the number 1e400 is out of range"),
        ('"filters": [[1, NaN], [2, 8]]', "NaN is not a JSON number"),
        ('"filters": [[1, -Infinity], [2, 8]]', "-Infinity is not a JSON number"),
    ],
)
def test_options_file_with_non_finite_numbers(tmp_path, text, expected):
    options = json.dumps(tiny_options()).replace('"filters": [[1, 4], [2, 8]]', text)
    assert text in options
    path = tmp_path / "options.json"
    path.write_text(options)
    with pytest.raises(ValueError) as error:
        ElmoConfig.from_options(path)
    assert expected in assert_short_refusal(error, str(path))


def test_deeply_nested_json_is_refused(tmp_path):
    deep = "[" * 100_000 + "]" * 100_000
    path = tmp_path / "options.json"
    path.write_text(deep)
    with pytest.raises(ValueError) as error:
        ElmoConfig.from_options(path)
    assert "nests too deeply" in assert_short_refusal(error, str(path))
    config_file = tmp_path / "config.json"
    config_file.write_text('{"model_type": "elmo", "extra": ' + deep + "}")
    with pytest.raises(ValueError) as error:
        ElmoConfig.from_pretrained(tmp_path)
    assert "nests too deeply" in assert_short_refusal(error, "config.json")


@pytest.mark.parametrize("case", ["infinity", "deep", "string boolean", "huge"])
def test_converter_reports_one_error_line(tmp_path, capsys, case, memory_limit):
    """The converter checks the options before touching the weights: a bad options file is one ``error:`` line."""
    options = tiny_options()
    text = {
        "infinity": json.dumps(options).replace("[[1, 4]", "[[1, Infinity]"),
        "deep": "[" * 100_000 + "]" * 100_000,
        "string boolean": json.dumps({**options, "lstm": {**options["lstm"], "use_skip_connections": "false"}}),
        "huge": json.dumps({**options, "lstm": {**options["lstm"], "n_layers": 10**9}}),
    }[case]
    (tmp_path / "options.json").write_text(text)
    (tmp_path / "weights.hdf5").write_bytes(b"")  # never opened
    argv = ["--options_file", str(tmp_path / "options.json"), "--weight_file", str(tmp_path / "weights.hdf5")]
    assert convert_main([*argv, "--output_dir", str(tmp_path / "out"), "--disable_tqdm"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: invalid options file") and err.count("\n") == 1 and len(err) < 600, err[:600]
    assert not (tmp_path / "out").exists()


def test_options_missing_and_extra_keys():
    for section, key in [("lstm", "dim"), ("char_cnn", "filters"), ("char_cnn", "embedding"), ("lstm", None)]:
        options = tiny_options()
        if key is None:
            del options[section]
            expected = f"missing required key {section}"
        else:
            del options[section][key]
            expected = f"missing required key {section}.{key}"
        with pytest.raises(ValueError) as error:
            ElmoConfig.from_options(options)
        assert expected in assert_short_refusal(error, section)
    options = tiny_options()
    options["lstm"]["unknown"] = [1] * 10
    options["n_epochs"] = 10
    assert ElmoConfig.from_options(options).lstm_dim == 32
    with pytest.raises(TypeError) as error:
        ElmoConfig.from_options({**options, "lstm": [1, 2]})
    assert_short_refusal(error, "lstm")


def test_errors_never_echo_huge_values():
    huge = list(range(10**6))
    for name, value in [("lstm_dim", huge), ("char_cnn_filters", [[1, huge]]), ("stateful", "x" * 10**6)]:
        with pytest.raises(TypeError) as error:
            ElmoConfig(**{**TINY, name: value})
        assert len(assert_short_refusal(error, name)) <= MAX_MESSAGE
    with pytest.raises(ValueError) as error:
        ElmoConfig(**{**TINY, "n_layers": 10**5000})
    assert "an int of 16610 bits" in assert_short_refusal(error, "n_layers")


# ---------------------------------------------------------------------------------------------------------------
# Acceptance of issue #13: property tests over config.json and options.json fields, under a memory limit
# ---------------------------------------------------------------------------------------------------------------

HOSTILE_VALUES = st.one_of(
    st.sampled_from(["false", "true", "yes", "no", "0", "1", "", "relu", "BIO", "batch"]),
    st.booleans(),
    st.none(),
    st.integers(-3, 3),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.sampled_from([10**9, 10**12, 2**63, 10**400, 4096, 4097, 32768, 32769, 1 << 22]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, 0.5, 1.0, -0.0, 1e400, -1e400, float("nan")]),
    st.lists(st.integers(0, 10), max_size=3),
    st.lists(st.lists(st.integers(-2, 10**6), max_size=3), max_size=70),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
CONFIG_FIELDS = sorted(configuration_elmo.ElmoConfig._elmo_field_types) + ["num_labels"]
FIELD_TYPES = {**configuration_elmo.ElmoConfig._elmo_field_types, "num_labels": int}
FIELD_OF_OPTION = {tuple(key.rsplit(".", 1))[-2:]: name for name, key in configuration_elmo.OPTIONS_KEYS.items()}
FIELD_OF_OPTION[("embedding", "dim")] = "char_embedding_dim"


def typed_values(name: str) -> st.SearchStrategy:
    """Values of the field's own type, edge cases included (around its bound, zero, negative, non-finite)."""
    if name == "char_cnn_filters":
        pair = st.tuples(st.integers(-1, 60), st.sampled_from([1, 4, 16383, 16384, 16385]) | st.integers(-1, 9))
        return st.lists(pair.map(list), min_size=0, max_size=66)
    limit = SIZE_LIMITS.get(name, 64)
    ints = st.integers(-2, 64) | st.sampled_from([limit - 1, limit, limit + 1, 10**9])
    floats = st.floats(-1.0, 2.0) | st.sampled_from([0, 1, 3, math.inf, -math.inf, math.nan])
    kinds = {"int": ints, "bool": st.booleans(), "float": floats, "NoneType": st.none()}
    options = []
    for kind in typing.get_args(FIELD_TYPES[name]) or (FIELD_TYPES[name],):
        if typing.get_origin(kind) is typing.Literal:
            options.append(st.sampled_from(typing.get_args(kind)))
        elif getattr(kind, "__name__", "") in kinds:
            options.append(kinds[kind.__name__])
    if typing.get_origin(FIELD_TYPES[name]) is typing.Literal:
        options.append(st.sampled_from(typing.get_args(FIELD_TYPES[name])))
    return st.one_of(options)


def changes_of(keys: list, field_of) -> st.SearchStrategy:
    """Up to 3 changed keys, each to a hostile value or (as often) to a value of its own type."""

    def value_of(key) -> st.SearchStrategy:
        if field_of(key) is None:
            return HOSTILE_VALUES
        return st.booleans().flatmap(lambda hostile: HOSTILE_VALUES if hostile else typed_values(field_of(key)))

    change = st.sampled_from(keys).flatmap(lambda key: st.tuples(st.just(key), value_of(key)))
    return st.lists(change, min_size=1, max_size=3).map(dict)


def _check_accepted(config: ElmoConfig) -> None:
    for name, limit in SIZE_LIMITS.items():
        assert 0 <= getattr(config, name) <= limit, name
    assert all(1 <= w <= config.max_characters_per_token and 1 <= n for w, n in config.char_cnn_filters)
    total = sum(config.parameter_counts().values())
    assert total <= MAX_PARAMETERS
    for name in ("elmo_dropout", "lm_dropout", "tagger_dropout", "scalar_mix_l2_coef", "initializer_range"):
        assert math.isfinite(getattr(config, name)), name
    if total < 200_000:  # cheap: build the biLM, as a loader would
        ElmoModel(config)


# The memory limit is set once around the whole property loop (a function-scoped fixture, on purpose).
UNDER_LIMIT = settings(suppress_health_check=[*settings().suppress_health_check, HealthCheck.function_scoped_fixture])


@UNDER_LIMIT
@given(
    changes=changes_of(CONFIG_FIELDS, lambda name: name),
    removed=st.lists(st.sampled_from(sorted(TINY)), max_size=2),
    extra=st.dictionaries(st.text("abcxyz_", min_size=1, max_size=6).map("x_".__add__), HOSTILE_VALUES, max_size=2),
)
def test_property_config_json_fields(memory_limit, changes, removed, extra):
    """config.json (``ElmoConfig(**dict)``, as ``from_pretrained`` builds it): any value of any field, missing
    fields (their defaults apply) and extra keys (kept, as transformers does) give an accepted config within the
    bounds or a short ``TypeError``/``ValueError`` naming a changed field; nothing else, no OOM."""
    settings = {k: v for k, v in TINY.items() if k not in removed}
    settings.update(extra)
    settings.update(changes)
    try:
        config = ElmoConfig(**settings)
    except (TypeError, ValueError) as error:
        event(f"refused: {type(error).__name__}")
        message = str(error)
        assert "\n" not in message and len(message) <= MAX_MESSAGE, message[:400]
        named = [*changes, *removed]
        assert any(name in message for name in named), f"{sorted(changes)} not named in: {message}"
        return
    event("accepted")
    _check_accepted(config)


OPTION_KEYS = [
    ("char_cnn", "activation"),
    ("char_cnn", "filters"),
    ("char_cnn", "max_characters_per_token"),
    ("char_cnn", "n_characters"),
    ("char_cnn", "n_highway"),
    ("char_cnn", "embedding"),
    ("embedding", "dim"),
    ("lstm", "cell_clip"),
    ("lstm", "dim"),
    ("lstm", "n_layers"),
    ("lstm", "proj_clip"),
    ("lstm", "projection_dim"),
    ("lstm", "use_skip_connections"),
    ("", "lstm"),
    ("", "char_cnn"),
]


@UNDER_LIMIT
@given(
    changes=changes_of(OPTION_KEYS, FIELD_OF_OPTION.get),
    removed=st.lists(st.sampled_from(OPTION_KEYS), max_size=2),
    extra=st.dictionaries(st.text("abcxyz_", min_size=1, max_size=6), HOSTILE_VALUES, max_size=2),
)
def test_property_options_json_fields(memory_limit, tmp_path_factory, changes, removed, extra):
    """options.json, through a real file: wrong types, string booleans, negative, zero, huge and non-finite numbers
    (1e400 and NaN written as JSON), missing and extra keys. Accepted within the bounds, or a short
    ``TypeError``/``ValueError`` naming the key (or the file, for a number JSON cannot hold)."""
    options = tiny_options()
    sections = {"": options, "char_cnn": options["char_cnn"], "lstm": options["lstm"]}
    sections["embedding"] = options["char_cnn"]["embedding"]
    for (section, key), value in changes.items():
        sections[section][key] = value
    for section, key in removed:
        sections[section].pop(key, None)
    options.update(extra)
    path = tmp_path_factory.getbasetemp() / "property-options.json"
    path.write_text(json.dumps(options))  # NaN/Infinity written as Python writes them (not JSON)
    try:
        config = ElmoConfig.from_options(path)
    except (TypeError, ValueError) as error:
        event(f"refused: {type(error).__name__}")
        message = str(error)
        assert "\n" not in message and len(message) <= MAX_MESSAGE + len(str(path)), message[:400]
        named = [key for _, key in [*changes, *removed]] + ["JSON number", "out of range", "filters"]
        assert any(name in message for name in named), f"{sorted(changes)} not named in: {message}"
        return
    event("accepted")
    _check_accepted(config)


# ---------------------------------------------------------------------------------------------------------------
# Issue #14, item 7: the transformers 5 idiom (typed fields, Literal, validate_* run by @strict)
# ---------------------------------------------------------------------------------------------------------------


def test_fields_are_typed_with_literal_choices():
    hints = {f.name: f.type for f in dataclasses.fields(ElmoConfig)}  # the types @strict checks
    assert hints["char_cnn_activation"] == typing.Literal["relu", "tanh"]
    assert hints["scalar_mix_layer_norm"] == typing.Literal["batch", "token"] | None
    assert hints["tagger_word_input"] == typing.Literal["embedding", "bilm"] | None
    assert hints["crf_constraints"] == typing.Literal["auto", "BIO"] | None
    assert hints["stateful"] is bool and hints["lstm_dim"] is int


def test_validate_methods_run_when_built_and_when_saved(tmp_path):
    validators = {v.__name__ for v in ElmoConfig.__class_validators__}
    assert {"validate_bilm", "validate_lm", "validate_tagger", "validate_total_size"} <= validators
    config = ElmoConfig(**TINY)
    config.lstm_dim = 10**6  # a valid int: the field's type check lets it through; validate() refuses it
    from huggingface_hub.errors import StrictDataclassError

    with pytest.raises(StrictDataclassError, match="lstm_dim must be at most 32768"):
        config.save_pretrained(tmp_path)
    assert not (tmp_path / "config.json").exists()
    with pytest.raises(StrictDataclassError, match="stateful"):
        config.stateful = "yes"
    # The public validators keep their behaviour when called directly.
    config = ElmoConfig(**TINY)
    config.lm_num_samples = -1
    with pytest.raises(ValueError, match="lm_num_samples must be a non-negative integer"):
        config.validate_lm()


# ---------------------------------------------------------------------------------------------------------------
# Issue #14, item 6, and issue 27: the config is the ground floor; saved folders are plain
# ---------------------------------------------------------------------------------------------------------------


def test_configuration_imports_nothing_of_the_package():
    tree = ast.parse((REPO / "modeling_elmo" / "configuration_elmo.py").read_text())
    relative = [node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.level > 0]
    assert relative == []


def test_config_save_writes_config_json_only(tmp_path):
    ElmoConfig(**TINY).save_pretrained(tmp_path)
    assert os.listdir(tmp_path) == ["config.json"]
    assert "auto_map" not in json.loads((tmp_path / "config.json").read_text())


def test_model_save_writes_a_plain_folder(tmp_path):
    tagger = ElmoForTokenClassification(ElmoConfig(**TINY, id2label=LABELS, tagger_hidden_size=5))
    tagger.save_pretrained(tmp_path)
    assert sorted(os.listdir(tmp_path)) == ["config.json", "model.safetensors"]
    saved = json.loads((tmp_path / "config.json").read_text())
    assert "auto_map" not in saved and "custom_pipelines" not in saved


def test_save_pretrained_with_push_to_hub_uploads_the_plain_folder(tmp_path):
    """``save_pretrained(push_to_hub=True)`` uploads the saved folder, with no code files (the Hub client is
    replaced by a recorder at ``HfApi``, as in test_hub.py)."""
    uploads: list[set[str]] = []

    def create_commit(repo_id, operations, *args, **kwargs):
        uploads.append({op.path_in_repo for op in operations})
        return mock.Mock(commit_url=f"https://huggingface.co/{repo_id}/commit/0")

    def no_card(*args, **kwargs):
        from huggingface_hub.errors import EntryNotFoundError

        raise EntryNotFoundError("README.md not found (new repository)")

    with (
        mock.patch("huggingface_hub.HfApi.create_repo", side_effect=lambda repo_id, **kw: mock.Mock(repo_id=repo_id)),
        mock.patch("huggingface_hub.HfApi.create_commit", side_effect=create_commit),
        mock.patch("huggingface_hub.HfApi.create_branch"),
        mock.patch("huggingface_hub.ModelCard.load", side_effect=no_card),
    ):
        ElmoModel(ElmoConfig(**TINY)).save_pretrained(tmp_path / "elmo-tiny", push_to_hub=True, repo_id="me/elmo")
    assert len(uploads) == 1
    assert {"config.json", "model.safetensors"} <= uploads[0]
    assert not [name for name in uploads[0] if name.endswith(".py")]
