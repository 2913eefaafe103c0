"""Issue 51: the README's test command ends with a skip summary (``-rs``) that fits on a screen, each line saying
something to this package's user. Before, it printed about 140 lines, most of them transformers' common tests
skipped for reasons of their own (attention, flash attention, DeepSpeed, RoPE), one line per place in their file."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
COMMON_FILES = ["tests/test_transformers_common.py", "tests/test_transformers_tokenizer_common.py"]

_SKIPS = """
import pytest

pytestmark = pytest.mark.skipif(True, reason="needs a CUDA GPU")


def test_one():
    pass


def test_two():
    pass


def test_three():
    pass
"""
_MORE_SKIPS = """
import pytest


@pytest.mark.parametrize("n", range(3))
def test_first(n):
    pytest.skip("the same reason")


def test_second():
    pytest.skip("the same reason")
"""


def _skip_lines(args: list[str], cwd: Path, env: dict | None = None) -> tuple[list[str], str]:
    argv = [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "-o", "addopts=", *args]
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, env=env, timeout=900)
    assert done.returncode in (0, 1), done.stdout[-3000:] + done.stderr[-3000:]
    return [line for line in done.stdout.splitlines() if line.startswith("SKIPPED ")], done.stdout


@pytest.mark.parametrize("details", [False, True], ids=["grouped", "details"])
def test_equal_reasons_of_a_file_fold_into_one_line(tmp_path, details):
    """A ``skipif`` mark on a module gave one summary line per test, and a reason raised at two places two lines:
    now one line per file and reason, with the count; ``ELMO_SKIP_DETAILS=1`` gives pytest's own lines back."""
    (tmp_path / "test_marked.py").write_text(_SKIPS, encoding="utf-8")
    (tmp_path / "test_more.py").write_text(_MORE_SKIPS, encoding="utf-8")
    (tmp_path / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "tests"), os.environ.get("PYTHONPATH", "")])}
    env["ELMO_SKIP_DETAILS"] = "1" if details else "0"
    lines, out = _skip_lines(["-p", "conftest", "test_marked.py", "test_more.py"], tmp_path, env)
    if details:
        assert len(lines) == 3 + 2 and all(re.search(r"\.py:\d+: ", line) for line in lines), out[-3000:]
    else:
        assert lines == [
            "SKIPPED [3] test_marked.py: needs a CUDA GPU",
            "SKIPPED [4] test_more.py: the same reason",
        ], out[-3000:]


@pytest.mark.slow  # runs transformers' common tests once more (about 30 s on an idle 2-core machine)
def test_the_common_tests_skip_summary_is_short_and_every_line_speaks_of_elmo():
    """transformers' common tests gave 95 summary lines. Now their skips fold into a few groups
    (``conftest.COMMON_SKIP_GROUPS``), each saying why the tests do not apply to ELMo; a reason that is no group's is
    one of the package's own (written in its test files). A new reason from transformers fails here: give it a group."""
    from conftest import COMMON_TESTS

    lines, out = _skip_lines(COMMON_FILES, REPO)
    assert lines, out[-3000:]
    assert len(lines) <= 20, "\n".join(lines)
    # the test files' text, with implicitly concatenated string literals joined ("a " "b" -> "a b")
    sources = re.sub(
        r'"\s*"', "", " ".join(" ".join((REPO / n).read_text(encoding="utf-8").split()) for n in COMMON_FILES)
    )
    for line in lines:
        where, reason = re.match(r"SKIPPED \[\d+\] ([^:]+): (.*)$", line).groups()
        assert where in COMMON_FILES, line  # no line of transformers' own files
        assert reason.startswith(COMMON_TESTS) or reason in sources, line
