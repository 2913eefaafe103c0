"""Shared test fixtures.

The original TensorFlow fixture model (``bilm-residual``: AllenNLP's ELMo test fixtures with outputs computed by
the original bilm-tf code, Apache-2.0, see its NOTICE) is vendored in ``tests/fixtures/``, so the parity tests run
on any clone. Only the large data sets (CoNLL-2003, WikiText-2) come from ``../shared/data`` next to the
checkout, or from the folder in ``ELMO_SHARED_DIR``. Without it those tests skip, saying why; with
``ELMO_REQUIRE_SHARED=1`` (set by ``.ci/run``) a missing folder fails them instead.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

REPO = Path(__file__).resolve().parent.parent
VENDORED_FIXTURES = Path(__file__).resolve().parent / "fixtures"


def shared_dir() -> Path:
    return Path(os.environ.get("ELMO_SHARED_DIR", REPO.parent / "shared"))


def _require(path: Path) -> Path:
    if path.exists():
        return path
    reason = (
        f"{path} not found: these tests need the CoNLL-2003 / WikiText-2 data from ../shared "
        "(or set ELMO_SHARED_DIR to the folder that holds data/)"
    )
    if os.environ.get("ELMO_REQUIRE_SHARED") == "1":
        pytest.fail(reason + "; ELMO_REQUIRE_SHARED=1 forbids skipping them")
    pytest.skip(reason)


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
    return _require(VENDORED_FIXTURES / "bilm-residual")


@pytest.fixture(scope="session")
def shared_data_dir() -> Path:
    """CoNLL-2003 and WikiText-2 text from ``../shared/data``."""
    return _require(shared_dir() / "data")


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
        _hypothesis_cases[item.nodeid] = sum(int(a) + int(b) for a, b in counts)


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
