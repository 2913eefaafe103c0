"""Shared test fixtures.

Tests that need the original TensorFlow fixtures read them from ``../shared`` (next to the
checkout), or from the folder in ``ELMO_SHARED_DIR``. Without it they skip, saying why; with
``ELMO_REQUIRE_SHARED=1`` (set by ``.ci/run``) a missing folder fails them instead.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def shared_dir() -> Path:
    return Path(os.environ.get("ELMO_SHARED_DIR", REPO.parent / "shared"))


def _require(path: Path) -> Path:
    if path.exists():
        return path
    reason = (
        f"{path} not found: these tests need the original ELMo fixtures from ../shared "
        "(or set ELMO_SHARED_DIR to their folder)"
    )
    if os.environ.get("ELMO_REQUIRE_SHARED") == "1":
        pytest.fail(reason + "; ELMO_REQUIRE_SHARED=1 forbids skipping them")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def fixture_dir() -> Path:
    """The TensorFlow fixture model ``fixtures/bilm-residual``."""
    return _require(shared_dir() / "fixtures" / "bilm-residual")


@pytest.fixture(scope="session")
def shared_data_dir() -> Path:
    """CoNLL-2003 and WikiText-2 text from ``../shared/data``."""
    return _require(shared_dir() / "data")


@pytest.fixture(scope="session")
def converted_fixture(fixture_dir: Path, tmp_path_factory) -> Path:
    """The fixture model converted once per session with ``convert_original_weights.convert``."""
    from convert_original_weights import convert

    out = tmp_path_factory.mktemp("converted") / "bilm-residual"
    convert(fixture_dir / "options.json", fixture_dir / "lm_weights.hdf5", out, progress=False)
    return out
