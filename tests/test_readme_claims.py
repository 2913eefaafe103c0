"""The README's "How it hooks into transformers" paragraph: each statement, and the tests that check it.

Cheap statements are checked here directly; the ones that need a trained model or a clean environment name the
test that checks them, and this file checks that those tests exist (they run in the same suite).
"""

from __future__ import annotations

import ast
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "modeling_elmo"

# A phrase of the paragraph -> the tests (file::name) that check it.
CLAIMS = {
    "registers ELMo with transformers through public calls only": [
        "test_readme_claims.py::test_import_registers_the_auto_classes_and_pipelines",
        "test_readme_claims.py::test_no_import_hooks_private_overrides_or_log_filters",
    ],
    "unchanged for other models": ["test_pipelines.py::test_other_models_get_the_same_results_as_from_the_stock_class"],
    "work on saved ELMo folders without `trust_remote_code`": [
        "test_pipelines.py::test_stock_pipeline_on_a_trained_crf_tagger_folder_gives_viterbi_on_every_dev_word",
        "test_pipelines.py::test_stock_text_classification_pipeline_on_a_saved_classifier_folder",
    ],
    "their argmax is the Viterbi path": [
        "test_pipelines.py::test_crf_logits_are_the_max_marginals_and_their_argmax_is_viterbi"
    ],
    "Saved folders are plain": ["test_hub.py::test_saved_folders_are_plain"],
    "such a folder loads without the package": ["test_hub.py::test_remote_code_loads_without_the_package"],
    "maps every Auto class the package registers": [
        "test_remote_code_clean_env.py::test_auto_map_names_every_auto_class_the_package_registers",
        "test_remote_code_clean_env.py::test_without_the_package_each_auto_class_loads_and_a_tagger_fine_tunes",
    ],
    "`python -m modeling_elmo SCRIPT.py ARGS`": [
        "test_official_recipes.py::test_python_m_modeling_elmo_runs_an_unmodified_script",
        "test_official_recipes.py::test_python_m_modeling_elmo_under_torchrun_and_accelerate",
    ],
    "declared in `_keys_to_ignore_on_load_missing`": [
        "test_quiet.py::test_loads_print_no_table_and_a_mismatch_one_error"
    ],
    "network calls of the package's own": ["test_loading_safety.py::test_released_short_name_fails_at_once"],
    "imports the package only once a subcommand's flags parse": [
        "test_quiet.py::test_elmo_help_imports_neither_torch_nor_transformers",
        "test_cli_layout.py::test_every_subcommands_help_imports_nothing_heavy",
        "test_cli_layout.py::test_a_usage_error_answers_before_the_package_loads",
    ],
    "import modeling_elmo` prints nothing": ["test_quiet.py::test_import_prints_nothing_and_keeps_the_users_verbosity"],
}


def paragraph() -> str:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    match = re.search(r"^## How it hooks into transformers\n(.*?)^## ", text, re.S | re.M)
    assert match, "README.md has no 'How it hooks into transformers' section"
    return " ".join(match.group(1).split())


def test_every_claim_is_in_the_readme_and_has_its_tests():
    text = paragraph()
    for phrase, tests in CLAIMS.items():
        assert " ".join(phrase.split()) in text, f"the README no longer says {phrase!r}: update CLAIMS"
        for test in tests:
            file, name = test.split("::")
            tree = ast.parse((REPO / "tests" / file).read_text(encoding="utf-8"))
            names = {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}
            assert name in names, f"{test}, which checks {phrase!r}, does not exist"


def test_import_registers_the_auto_classes_and_pipelines():
    from transformers import AutoConfig, AutoModel, AutoModelForTokenClassification
    from transformers.pipelines import PIPELINE_REGISTRY

    import modeling_elmo

    assert AutoConfig.for_model("elmo").__class__ is modeling_elmo.ElmoConfig
    config = modeling_elmo.ElmoConfig()
    assert AutoModel._model_mapping[type(config)] is modeling_elmo.ElmoModel
    assert AutoModelForTokenClassification._model_mapping[type(config)] is modeling_elmo.ElmoForTokenClassification
    from transformers.models.auto.tokenization_auto import TOKENIZER_MAPPING

    assert TOKENIZER_MAPPING[type(config)] is modeling_elmo.ElmoTokenizer
    tasks = PIPELINE_REGISTRY.supported_tasks
    assert tasks["token-classification"]["impl"] is modeling_elmo.ElmoTokenClassificationPipeline
    assert tasks["elmo-feature-extraction"]["impl"] is modeling_elmo.ElmoFeatureExtractionPipeline
    assert tasks["elmo-fill-mask"]["impl"] is modeling_elmo.ElmoFillMaskPipeline


@pytest.mark.parametrize(
    "pattern",
    [
        r"sys\.meta_path",
        r"_load_pretrained_model",
        r"addFilter",
        r"set_verbosity_error",
        r"supported_tasks\[[^]]+\]\s*=",
    ],
)
def test_no_import_hooks_private_overrides_or_log_filters(pattern):
    """No import hook, no override of transformers' private loader, no filter on its loggers, no lasting level change
    (the package's one ``set_verbosity`` call quiets its own ``register_pipeline`` call and restores the user's level:
    tests/test_quiet.py), no write into the pipeline registry's dictionaries, in any file of the package."""
    files = [*PACKAGE.rglob("*.py")] + ([REPO / "elmo_cli.py"] if pattern != "set_verbosity_error" else [])
    found = [f"{p.relative_to(REPO)}" for p in files if re.search(pattern, p.read_text(encoding="utf-8"))]
    assert not found, f"{pattern!r} in {found}"


# --------------------------------------------------------------------------------------------------
# The README's test command is CI's (issue 36)


def readme_test_command() -> list[str]:
    """The README's second command (the tests), split at ``&&``: ``pip install ...`` parts, then the pytest call."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    block = re.search(r"```bash\n(.*?)```", text, re.S)
    assert block, "README.md has no ```bash block"
    lines = [line.split("#")[0].strip() for line in block.group(1).splitlines() if line.split("#")[0].strip()]
    return [part.strip() for part in lines[1].split("&&")]


def ci_commands() -> list[list[str]]:
    """The commands of ``.ci/run`` at the top level of the script (continuations joined, comments dropped)."""
    text = (REPO / ".ci" / "run").read_text(encoding="utf-8").replace("\\\n", " ")
    return [shlex.split(line, comments=True) for line in text.splitlines() if line and not line[0].isspace()]


def _pip_install_arguments(argv: list[str]) -> list[str] | None:
    """What ``pip install`` (or ``python -m pip install``) installs, without ``--quiet``; None for other commands."""
    start = 1 if argv[:1] == ["pip"] else 3 if argv[:3] == ["python", "-m", "pip"] else None
    if start is None or argv[start : start + 1] != ["install"]:
        return None
    return [a for a in argv[start + 1 :] if a not in ("--quiet", "-q")]


def test_ci_installs_what_the_readme_test_command_installs_and_runs_its_pytest_call():
    """A newcomer's copy of the README's test command gets CI's test environment and CI's pytest call: the same
    installs in the same order (CI adds only ruff, the one thing [dev] adds, and upgrades pip), then the same call."""
    *installs, pytest_call = readme_test_command()
    readme = [_pip_install_arguments(shlex.split(part)) for part in installs]
    assert None not in readme, installs
    ci = [args for args in map(_pip_install_arguments, ci_commands()) if args is not None]
    ci_own = [args for args in ci if args not in (["--upgrade", "pip"], ["ruff>=0.6"])]
    assert ci_own == readme, f".ci/run installs {ci_own}, the README {readme}"
    assert ["ruff>=0.6"] in ci  # and tests/test_packaging.py checks that [dev] is [train,test] plus that
    tests = [argv for argv in ci_commands() if argv[:3] == ["python", "-m", "pytest"]]
    assert tests and tests[0] == shlex.split(pytest_call), f"CI's first pytest call is {tests[:1]}, not {pytest_call}"


def test_the_readme_says_how_long_the_tests_take_and_gives_a_quick_subset():
    """Issue 44 F1: the README says how long its test command takes, with the machine, and names a quicker subset
    (``-m "not slow"``, pyproject's declared marker), while CI's pytest call selects no marker: it runs everything."""
    text = " ".join((REPO / "README.md").read_text(encoding="utf-8").split())
    assert re.search(r"\d+ minutes on an idle \d-core machine", text), "the README gives no time for the tests"
    assert '`python -m pytest -m "not slow"`' in text
    tomllib = pytest.importorskip("tomllib", reason="reading pyproject.toml needs Python 3.11")
    markers = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["pytest"]["ini_options"]
    assert any(marker.startswith("slow:") for marker in markers["markers"]), markers
    marked = [p.name for p in (REPO / "tests").glob("test_*.py") if "pytest.mark.slow" in p.read_text(encoding="utf-8")]
    assert len(marked) >= 5, marked  # the subset leaves something out
    tests = [argv for argv in ci_commands() if argv[:3] == ["python", "-m", "pytest"]]
    assert tests and all("-m" not in argv[3:] for argv in tests), tests


_FAILING_TEST = """
import logging

import torch  # noqa: F401  (its structured-trace logger, torch.__trace: always at DEBUG, and it does not propagate)


def test_fails():  # the messages are formatted, so that the traceback's source lines do not hold them
    logging.getLogger("torch.__trace").debug("a torch %s", "trace event")
    logging.getLogger("modeling_elmo").info("an %s", "info line")
    logging.getLogger("modeling_elmo").warning("a %s", "warning line")
    assert False
"""


def test_a_failure_report_holds_warnings_but_no_debug_log(tmp_path):
    """Issue 36: a failing docs test's report held 314 lines of captured ``DEBUG torch.__trace`` log before its
    error. With pyproject's pytest settings, a failure shows the captured warnings only."""
    (tmp_path / "test_report.py").write_text(_FAILING_TEST, encoding="utf-8")
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", str(REPO / "pyproject.toml")]
    done = subprocess.run(
        [*argv, "--rootdir", str(tmp_path), str(tmp_path / "test_report.py")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    assert "a warning line" in done.stdout, done.stdout[-3000:]
    assert "a torch trace event" not in done.stdout and "an info line" not in done.stdout, done.stdout[-3000:]


_MISSING_GENSIM = """
import importlib.abc
import importlib.util
import sys

import pytest


class Blocker(importlib.abc.MetaPathFinder):  # gensim as in an install without the [gensim] extra
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "gensim":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)


sys.meta_path.insert(0, Blocker())
_find_spec = importlib.util.find_spec
importlib.util.find_spec = lambda name, *a, **k: None if name.split(".")[0] == "gensim" else _find_spec(name, *a, **k)
for name in [m for m in sys.modules if m.split(".")[0] == "gensim"]:
    del sys.modules[name]


def test_stops_on_the_import():
    import gensim  # noqa: F401


def test_skips_itself():
    pytest.importorskip("gensim")


def test_skips_naming_the_extra():
    pytest.importorskip("gensim", reason="needs the [gensim] extra")


def test_misses_a_module_that_is_no_optional_library():
    raise ModuleNotFoundError("No module named 'not_a_library'", name="not_a_library")
"""


@pytest.mark.parametrize("ci", [False, True], ids=["here", "ci"])
def test_a_test_without_its_optional_library_skips_naming_the_extra(tmp_path, ci):
    """Issue 36: a test that needs an optional library skips with the reason and the extra to install, whether it
    skips itself or stops on the ModuleNotFoundError (tests/conftest.py); CI, which installs every extra, fails it."""
    (tmp_path / "test_missing.py").write_text(_MISSING_GENSIM, encoding="utf-8")
    (tmp_path / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "ELMO_REQUIRE_SHARED")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "tests"), env.get("PYTHONPATH", "")])
    if ci:
        env["CI"] = "true"
    argv = [sys.executable, "-m", "pytest", "-q", "-rfs", "-p", "no:cacheprovider", "-p", "conftest"]
    done = subprocess.run(
        [*argv, "--rootdir", str(tmp_path), str(tmp_path / "test_missing.py")],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    out = done.stdout
    hint = 'pip install -e ".[gensim]"'
    assert f"could not import 'gensim': No module named 'gensim' ({hint})" in out, out[-3000:]
    assert f"needs the [gensim] extra ({hint})" in out, out[-3000:]
    assert "FAILED test_missing.py::test_misses_a_module_that_is_no_optional_library" in out, out[-3000:]
    if ci:
        assert "FAILED test_missing.py::test_stops_on_the_import" in out and "2 failed, 2 skipped" in out, out[-3000:]
    else:
        assert f"needs gensim, which is not installed: {hint}" in out and "1 failed, 3 skipped" in out, out[-3000:]
