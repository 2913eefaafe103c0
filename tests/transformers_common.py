"""transformers' own common tests (``ModelTesterMixin``, ``ConfigTester``, ``TokenizerTesterMixin``), fetched
for the installed transformers version.

The wheel does not ship transformers' ``tests/`` folder; its source distribution does. [`load`] finds the
needed files in the ``tests/`` folder of a cache folder (``ELMO_TRANSFORMERS_TESTS``, default
``.cache/transformers-tests/<version>/`` in the checkout; a transformers checkout of that version also works),
fetches them once with ``pip download --no-binary :all: --no-deps transformers==<version>`` when they are
missing, and imports that ``tests/`` folder as the package ``transformers_common_tests``. Where they cannot be
fetched the tests skip, saying why; with ``ELMO_REQUIRE_SHARED=1`` (CI) they fail instead.

A few modules that the common tests import are not in the source distribution. Small stand-ins (below) take
their place when the cache folder lacks them (a folder pointing at a transformers checkout's ``tests/`` has
the real ones):

- ``exporters/test_export.py`` (``ExportTesterMixin``, the ``torch.export`` tests that ``ModelTesterMixin``
  inherits): an empty mixin, so those tests are not run here.
- ``generation/test_utils.py`` (``GenerationTesterMixin``): an empty class; the common tests only check
  that a model that cannot ``generate`` does not inherit it.
- ``utils/test_configuration_utils.py`` (``config_common_kwargs``): non-default values of the attributes
  every ``PreTrainedConfig`` takes, which ``ConfigTester.check_config_arguments_init`` passes to the config
  and reads back.

- ``fixtures/sample_text.txt``, which ``TokenizerTesterMixin.setUpClass`` reads (into an attribute no test
  uses): a few lines of our own text, written into the cache.

``tests/utils/tiny_model_summary.json`` is only read by the pipeline mixin, which is not used here. The folder
is named ``tests`` because transformers' ``get_tests_dir()`` looks for the nearest folder whose name ends so.

Fetch from the command line (``.ci/run`` does, before pytest): ``python tests/transformers_common.py``.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import types
from pathlib import Path

import transformers

REPO = Path(__file__).resolve().parent.parent
PACKAGE = "transformers_common_tests"
# The files of transformers' tests/ that the three mixins need (the tokenizer mixin imports the two backend mixins).
NEEDED = (
    "test_modeling_common.py",
    "test_configuration_common.py",
    "test_tokenization_common.py",
    "test_tokenizers_backend_mixin.py",
    "test_sentencepiece_backend_mixin.py",
)


class TransformersTestsUnavailable(RuntimeError):
    """transformers' common tests could not be found or fetched; the message says why."""


def cache_dir(version: str = transformers.__version__) -> Path:
    """Where the common tests of ``version`` are (or go): ``$ELMO_TRANSFORMERS_TESTS`` or the checkout's cache."""
    override = os.environ.get("ELMO_TRANSFORMERS_TESTS")
    return Path(override) if override else REPO / ".cache" / "transformers-tests" / version


SAMPLE_TEXT = "The cat sat on the mat.\nELMo reads characters, not word pieces.\nNew York is a city.\n"


def missing_files(folder: Path) -> list[str]:
    """The needed files that ``folder/tests/`` lacks."""
    return [name for name in NEEDED if not (folder / "tests" / name).is_file()]


def fetch(folder: Path, version: str = transformers.__version__, timeout: float = 300) -> Path:
    """Download transformers' source distribution and extract the needed test files into ``folder/tests/``.

    The files land in a temporary folder beside ``folder`` that is then renamed: an interrupted fetch leaves
    nothing half-written. Raises [`TransformersTestsUnavailable`] naming the cause.
    """
    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder.parent, prefix=f".{folder.name}-fetch-") as work:
        work = Path(work)
        command = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-binary",
            ":all:",
            "--no-deps",
            "--timeout",
            "30",
            f"transformers=={version}",
            "-d",
            str(work / "sdist"),
        ]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired as error:
            message = f"pip download of transformers=={version} took over {timeout:.0f} s"
            raise TransformersTestsUnavailable(message) from error
        archives = sorted((work / "sdist").glob("transformers-*.tar.gz"))
        if done.returncode != 0 or not archives:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise TransformersTestsUnavailable(f"pip download of transformers=={version} failed: {last}")
        staged = work / "cache"
        (staged / "tests" / "fixtures").mkdir(parents=True)
        with tarfile.open(archives[0]) as archive:
            members = {Path(m.name).relative_to(Path(m.name).parts[0]).as_posix(): m for m in archive.getmembers()}
            for name in NEEDED:
                member = members.get(f"tests/{name}")
                if member is None or not member.isfile():
                    raise TransformersTestsUnavailable(
                        f"the source distribution of transformers=={version} has no tests/{name}"
                    )
                (staged / "tests" / name).write_bytes(archive.extractfile(member).read())
        # transformers' tests/ is a package; test_configuration_common.py also executes this file.
        (staged / "tests" / "__init__.py").write_text("")
        (staged / "tests" / "fixtures" / "sample_text.txt").write_text(SAMPLE_TEXT, encoding="utf-8")
        if missing_files(folder):
            if folder.exists():
                shutil.rmtree(folder)
            try:
                staged.rename(folder)
            except OSError:  # another process fetched them meanwhile
                if missing_files(folder):
                    raise
    return folder


def _stand_in(name: str, doc: str, **attributes) -> None:
    """Register module ``PACKAGE.name`` (and its parent package) in ``sys.modules`` with ``attributes``."""
    parent, _, _ = name.rpartition(".")
    package_name = f"{PACKAGE}.{parent}"
    if package_name not in sys.modules:
        package = types.ModuleType(package_name, f"Stand-in package {parent} (not in transformers' sdist).")
        package.__path__ = []
        sys.modules[package_name] = package
    module = types.ModuleType(f"{PACKAGE}.{name}", doc)
    module.__dict__.update(attributes)
    sys.modules[module.__name__] = module


class ExportTesterMixin:
    """Stand-in for transformers' ``tests/exporters/test_export.py`` mixin (not in the sdist): no export tests."""


class GenerationTesterMixin:
    """Stand-in for transformers' ``tests/generation/test_utils.py`` mixin (not in the sdist): ELMo cannot generate,
    and the common tests only check that such a model's test does not inherit this class."""


# Stand-in for ``config_common_kwargs`` of transformers' ``tests/utils/test_configuration_utils.py``: a value
# other than the default for each attribute that every PreTrainedConfig of this transformers version takes.
CONFIG_COMMON_KWARGS = {
    "return_dict": False,
    "output_hidden_states": True,
    "output_attentions": True,
    "dtype": "float16",
    "chunk_size_feed_forward": 5,
    "is_encoder_decoder": True,
    "architectures": ["ElmoModel"],
    "id2label": {0: "A", 1: "B"},
    "label2id": {"A": 0, "B": 1},
    "problem_type": "single_label_classification",
    "tie_word_embeddings": False,
}


def _install_stand_ins(folder: Path) -> None:
    stand_ins = {
        "exporters.test_export": {"ExportTesterMixin": ExportTesterMixin},
        "generation.test_utils": {"GenerationTesterMixin": GenerationTesterMixin},
        "utils.test_configuration_utils": {"config_common_kwargs": CONFIG_COMMON_KWARGS},
    }
    for name, attributes in stand_ins.items():
        if not (folder / (name.replace(".", "/") + ".py")).is_file():
            _stand_in(name, f"Stand-in for transformers' tests/{name.replace('.', '/')}.py", **attributes)


def load() -> types.ModuleType:
    """Import transformers' common tests as the package ``transformers_common_tests`` (fetching them if needed).

    Raises [`TransformersTestsUnavailable`] when they cannot be had.
    """
    folder = cache_dir()
    if missing_files(folder):
        if "ELMO_TRANSFORMERS_TESTS" in os.environ:
            raise TransformersTestsUnavailable(
                f"ELMO_TRANSFORMERS_TESTS={folder} lacks tests/{', tests/'.join(missing_files(folder))} "
                "(point it at a folder whose tests/ holds transformers' common tests of the installed version)"
            )
        fetch(folder)
    if PACKAGE in sys.modules:  # imported once per process
        return sys.modules[PACKAGE]
    tests = folder / "tests"
    init = tests / "__init__.py"
    if not init.is_file():
        init.write_text("")
    sample = tests / "fixtures" / "sample_text.txt"
    if not sample.is_file():
        sample.parent.mkdir(exist_ok=True)
        sample.write_text(SAMPLE_TEXT, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(PACKAGE, init, submodule_search_locations=[str(tests)])
    package = importlib.util.module_from_spec(spec)
    sys.modules[PACKAGE] = package
    spec.loader.exec_module(package)
    _install_stand_ins(tests)
    return package


def load_or_skip(*modules: str) -> list[types.ModuleType]:
    """The modules ``PACKAGE.<name>`` for each name, for a test module to call at import time.

    Skips the calling test module when the common tests cannot be had (fails it under ``ELMO_REQUIRE_SHARED=1``).
    """
    import pytest

    try:
        load()
        return [importlib.import_module(f"{PACKAGE}.{name}") for name in modules]
    except (TransformersTestsUnavailable, ImportError) as error:
        cause = str(error) if isinstance(error, TransformersTestsUnavailable) else f"{error} (pip install -e '.[test]')"
        reason = (
            f"transformers' common tests (transformers=={transformers.__version__}) are not available: {cause}; "
            f"with network, `python tests/transformers_common.py` fetches them into {cache_dir()}"
        )
        if os.environ.get("ELMO_REQUIRE_SHARED") == "1":
            pytest.fail(reason + "; ELMO_REQUIRE_SHARED=1 forbids skipping them", pytrace=False)
        pytest.skip(reason, allow_module_level=True)


if __name__ == "__main__":
    try:
        load()
    except TransformersTestsUnavailable as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(1)
    print(f"transformers {transformers.__version__} common tests in {cache_dir()}")
