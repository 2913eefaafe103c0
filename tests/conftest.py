"""Shared test fixtures.

The original TensorFlow fixture model (``bilm-residual``: AllenNLP's ELMo test fixtures with outputs computed by
the original bilm-tf code, Apache-2.0, see its NOTICE) is vendored in ``tests/fixtures/``, so the parity tests run
on any clone. Only the large data sets (CoNLL-2003, WikiText-2) come from ``../shared/data`` next to the
checkout, or from the folder in ``ELMO_SHARED_DIR``. Without it those tests skip, saying why; with
``ELMO_REQUIRE_SHARED=1`` (set by ``.ci/run``) a missing folder fails them instead.

The optional libraries (``OPTIONAL_LIBRARIES``, each with the extra of pyproject.toml that installs it; the README's
``.[train,test]`` installs them all): a test that needs one that is not installed skips, and its reason ends with the
``pip install`` of the extra, whether it skipped itself (``pytest.importorskip``) or stopped on the
``ModuleNotFoundError``. In CI (``CI=true`` or ``ELMO_REQUIRE_SHARED=1``), which installs every extra, such a test
fails instead.
"""

from __future__ import annotations

import importlib.util
import os
import re
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

REPO = Path(__file__).resolve().parent.parent
# Each pytest-xdist worker compiles into its own inductor cache: two processes compiling the same kernel into one
# cache at once left a truncated .so there ("file too short"). A cache the environment names is kept.
if "PYTEST_XDIST_WORKER" in os.environ and "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(
        tempfile.gettempdir(), f"torchinductor_elmo_tests_{os.environ['PYTEST_XDIST_WORKER']}"
    )
# The compiled path's C++ step loop (modeling_elmo/native_steps_elmo.py) is built into a folder of the tests', not
# the user's ~/.cache/torch_extensions (its build renames a whole library into place: workers may share it).
os.environ.setdefault("TORCH_EXTENSIONS_DIR", os.path.join(tempfile.gettempdir(), "torch_extensions_elmo_tests"))
VENDORED_FIXTURES = Path(__file__).resolve().parent / "fixtures"


def shared_dir() -> Path:
    return Path(os.environ.get("ELMO_SHARED_DIR", REPO.parent / "shared"))


def _require(path: Path, what: str) -> Path:
    """``path``, or a skip (a failure under ``ELMO_REQUIRE_SHARED=1``) whose reason says what is missing: ``what``."""
    if path.exists():
        return path
    reason = f"{what}: {path} does not exist"
    if os.environ.get("ELMO_REQUIRE_SHARED") == "1":
        pytest.fail(reason + "; ELMO_REQUIRE_SHARED=1 forbids skipping them")
    pytest.skip(reason)


# The optional libraries that tests use, each with the extra of pyproject.toml that installs it (`[test]` installs
# them all: tests/test_packaging.py and tests/test_docs.py check this table against pyproject.toml).
OPTIONAL_LIBRARIES = {
    "accelerate": "train",
    "datasets": "train",
    "seqeval": "train",
    "gradio": "demo",
    "matplotlib": "demo",
    "onnx": "export",
    "onnxscript": "export",
    "gensim": "gensim",
    "sentence_transformers": "sentence-transformers",
    "spacy": "spacy",
    "onnxruntime": "test",
    "peft": "test",
    "playwright": "test",
    "nbclient": "test",
    "nbformat": "test",
    "ipykernel": "notebook",
    "ipywidgets": "notebook",
    "nbconvert": "notebook",
    "hypothesis": "test",
    "parameterized": "test",
}


def install_hint(libraries) -> str:
    """``pip install -e ".[extra,...]"`` for the optional ``libraries``."""
    return f'pip install -e ".[{",".join(sorted({OPTIONAL_LIBRARIES[name] for name in libraries}))}]"'


def extras_required() -> bool:
    """CI installs every extra (.ci/run): there a missing optional library fails its tests instead of skipping them."""
    return os.environ.get("CI") == "true" or os.environ.get("ELMO_REQUIRE_SHARED") == "1"


def _missing_library(error: BaseException) -> str | None:
    """The optional library that ``error`` (a ModuleNotFoundError) is about, if it is not installed here."""
    library = (getattr(error, "name", None) or "").split(".")[0]
    if library in OPTIONAL_LIBRARIES and importlib.util.find_spec(library) is None:
        return library
    return None


def _with_install_hint(report) -> None:
    """A skip whose reason names a missing optional library (``pytest.importorskip``'s "could not import 'X'") or an
    extra ("needs the [spacy] extra") also says what to install."""
    if not (report.skipped and isinstance(report.longrepr, tuple) and len(report.longrepr) == 3):
        return
    path, line, reason = report.longrepr
    if "pip install" in reason:
        return
    library = re.search(r"could not import '([\w.]+)'", reason)
    extra = re.search(r"needs the \[([\w-]+)\] extra", reason)
    if library and library.group(1).split(".")[0] in OPTIONAL_LIBRARIES:
        report.longrepr = (path, line, f"{reason} ({install_hint([library.group(1).split('.')[0]])})")
    elif extra:
        report.longrepr = (path, line, f'{reason} (pip install -e ".[{extra.group(1)}]")')


# The skip summary (issue 51). ``-rs`` prints one line per place and reason. transformers' common tests skip about
# 90 of their tests on ELMo, for reasons of their own, each at its own line of transformers' file, and a
# ``skipif`` mark gives a line per test: about 140 lines in all. So every skip is reported at the test file that
# ran it, without a line number (equal reasons of one file fold into one line, with a count), and the reason of a
# common test skipped inside transformers' own code is replaced by its group below. The reasons stay in the tests:
# ``ELMO_SKIP_DETAILS=1`` reports every skip where and as it was raised.
COMMON_TESTS = "transformers' common tests"
COMMON_TEST_FILES = ("test_transformers_common.py", "test_transformers_tokenizer_common.py")
COMMON_SKIP_GROUPS = [
    (r"attention|sdpa|flash|grouped_mm", f"{COMMON_TESTS} of attention (eager, SDPA, flash): ELMo has no attention"),
    (r"rope|position embeddings", f"{COMMON_TESTS} of position embeddings and RoPE: ELMo's LSTMs have none"),
    (
        r"cache|decoder-only|sequence-to-sequence|seq2seq|chat template",
        f"{COMMON_TESTS} of generation (KV cache, decoders, seq2seq, chat templates): ELMo generates nothing",
    ),
    (r"accelerator|cuda|\bmps\b|deepspeed", f"{COMMON_TESTS} that need a GPU or DeepSpeed: none here"),
    (
        r"resize_embeddings|conversion found|_keep_in_fp32|subconfigs|not composite|capture|sparse experts|"
        r"router_logits|tp plan|integration expected tokens|tokenizersextractor",
        f"{COMMON_TESTS} of features ELMo does not declare (resizing, conversions, fp32 modules, experts, TP...)",
    ),
    (
        r"base_model_class|classification linear layer|differentiable loss",
        f"{COMMON_TESTS} that find no part they check in a head (base model class, Linear classifier, loss)",
    ),
    (r"test is slow", f"{COMMON_TESTS} that transformers marks slow (RUN_SLOW=1 runs them)"),
]


def _grouped_skip(report, item) -> None:
    """``report``, a skip, reported at ``item``'s test file without a line number; a common test skipped for one of
    transformers' reasons gets its group's reason (``COMMON_SKIP_GROUPS``)."""
    if os.environ.get("ELMO_SKIP_DETAILS") == "1":
        return
    if not (report.skipped and isinstance(report.longrepr, tuple) and len(report.longrepr) == 3):
        return
    _, _, reason = report.longrepr
    if item.path.name in COMMON_TEST_FILES:  # the package's own reasons there are no group's
        reason = next((group for pattern, group in COMMON_SKIP_GROUPS if re.search(pattern, reason, re.I)), reason)
    report.longrepr = (str(item.path), None, reason)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    error = call.excinfo.value if call.excinfo is not None else None
    library = _missing_library(error) if isinstance(error, ModuleNotFoundError) and report.failed else None
    if library is not None and not extras_required():
        path, line, _ = item.location
        report.outcome = "skipped"
        report.longrepr = (path, (line or 0) + 1, f"needs {library}, which is not installed: {install_hint([library])}")
    _with_install_hint(report)
    _grouped_skip(report, item)
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector):
    report = yield
    _with_install_hint(report)
    return report


def pytest_configure(config):
    # Markers of transformers' own common tests (fetched by tests/transformers_common.py).
    for name in ("accelerate_tests", "flash_attn_test", "flash_attn_3_test", "flash_attn_4_test", "torch_compile_test"):
        config.addinivalue_line("markers", f"{name}: a marker of transformers' common tests")


@pytest.fixture(scope="module")
def one_thread():
    """One intra-op thread for a module of tiny-model tests: thread hand-offs cost more than they save on tiny
    tensors (far more on a shared, busy machine). Use with ``pytestmark = pytest.mark.usefixtures("one_thread")``."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    """A tiny random ELMo model folder (weights + tokenizer), for the command tests."""
    import torch

    from modeling_elmo import ElmoConfig, ElmoModel, ElmoTokenizer

    torch.manual_seed(0)
    from helpers import TINY_SIZES

    model = ElmoModel(ElmoConfig(**TINY_SIZES))
    with torch.no_grad():  # non-zero mix weights, so that "elmo" is not simply the mean of the layers
        model.scalar_mixes[0].scalar_parameters.copy_(torch.tensor([0.5, -1.0, 1.0]))
        model.scalar_mixes[0].gamma.fill_(1.5)
    out = tmp_path_factory.mktemp("tiny") / "tiny"
    model.save_pretrained(out)
    ElmoTokenizer().save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def fixture_dir() -> Path:
    """The TensorFlow fixture model ``bilm-residual``: the vendored copy in ``tests/fixtures``."""
    return _require(
        VENDORED_FIXTURES / "bilm-residual", "the TensorFlow fixture model is vendored in git: restore tests/fixtures"
    )


@pytest.fixture(scope="session")
def shared_data_dir() -> Path:
    """CoNLL-2003 and WikiText-2 text from ``../shared/data``."""
    return _require(
        shared_dir() / "data",
        "these tests read CoNLL-2003 and WikiText-2 from data/conll2003 and data/wikitext-2 of the shared folder: put "
        "it beside the checkout as ../shared, or set ELMO_SHARED_DIR to it (README.md)",
    )


@pytest.fixture(scope="session")
def converted_fixture(fixture_dir: Path, tmp_path_factory) -> Path:
    """The fixture model converted once per session with ``convert_original_weights.convert``."""
    from modeling_elmo.hub.convert import convert

    out = tmp_path_factory.mktemp("converted") / "bilm-residual"
    convert(fixture_dir / "options.json", fixture_dir / "lm_weights.hdf5", out, progress=False)
    return out


# ---------------------------------------------------------------------------------------------
# Hypothesis profiles (issue #8): "ci" (default, fast) and "nightly" (>= 10,000 cases over the
# property tests of tests/test_reliability.py), chosen with ELMO_HYPOTHESIS_PROFILE=nightly.
# Tests with their own @settings(max_examples=...) keep them. The number of cases each run is
# printed at the end of every pytest run.
# ---------------------------------------------------------------------------------------------

_QUIET = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]
settings.register_profile("ci", max_examples=120, deadline=None, suppress_health_check=_QUIET, print_blob=True)
settings.register_profile("nightly", max_examples=2500, deadline=None, suppress_health_check=_QUIET, print_blob=True)
HYPOTHESIS_PROFILE = os.environ.get("ELMO_HYPOTHESIS_PROFILE", "ci")
settings.load_profile(HYPOTHESIS_PROFILE)

_hypothesis_cases: dict[str, int] = {}


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item):
    stats = getattr(item, "hypothesis_statistics", None)  # set by hypothesis' pytest plugin
    if stats:
        # "- 60 passing, 0 failing, and 26 invalid test cases" (hypothesis >= 6.1xx; older: "... examples"),
        # one line per phase. Invalid cases (rejected by filters/assume) did not run the property.
        counts = re.findall(r"(\d+) passing[^,]*, (\d+) failing", stats)
        if not counts:
            raise RuntimeError(f"hypothesis statistics in an unknown format; update conftest.py:\n{stats}")
        # On the report (user_properties), not only in this process: under pytest-xdist the summary is written by
        # the controller, which sees the workers' reports.
        item.user_properties.append(("hypothesis_cases", sum(int(a) + int(b) for a, b in counts)))


def pytest_runtest_logreport(report):
    for name, value in report.user_properties:
        if name == "hypothesis_cases" and report.when == "teardown":
            _hypothesis_cases[report.nodeid] = value


def pytest_terminal_summary(terminalreporter):
    if not _hypothesis_cases:
        return
    by_file: dict[str, int] = {}
    for nodeid, cases in _hypothesis_cases.items():
        by_file[nodeid.split("::")[0]] = by_file.get(nodeid.split("::")[0], 0) + cases
    details = ", ".join(f"{name}: {cases}" for name, cases in sorted(by_file.items()))
    terminalreporter.write_line(
        f"hypothesis: {sum(by_file.values())} cases run in {len(_hypothesis_cases)} property tests "
        f"(profile {HYPOTHESIS_PROFILE!r}; ELMO_HYPOTHESIS_PROFILE=nightly for >= 10,000) [{details}]"
    )
