"""Where transformers' common tests cannot be had, their test modules skip saying why, and fail under
ELMO_REQUIRE_SHARED=1 (CI). ELMO_TRANSFORMERS_TESTS points at an empty folder, so nothing is downloaded."""

from __future__ import annotations

import pytest
from transformers_common import load_or_skip


@pytest.mark.parametrize("require", [False, True], ids=["skips", "fails-in-ci"])
def test_missing_common_tests_skip_with_reason_or_fail_in_ci(tmp_path, monkeypatch, require):
    monkeypatch.setenv("ELMO_TRANSFORMERS_TESTS", str(tmp_path))
    if require:
        monkeypatch.setenv("ELMO_REQUIRE_SHARED", "1")
    else:
        monkeypatch.delenv("ELMO_REQUIRE_SHARED", raising=False)
    outcome = pytest.fail.Exception if require else pytest.skip.Exception
    with pytest.raises(outcome) as caught:
        load_or_skip("test_modeling_common")
    message = str(caught.value)
    assert f"ELMO_TRANSFORMERS_TESTS={tmp_path} lacks tests/test_modeling_common.py" in message
    assert ("ELMO_REQUIRE_SHARED=1 forbids skipping them" in message) == require
