"""The wheel: what it installs, and that building it warns about nothing undeclared (issue #16)."""

from __future__ import annotations

import email
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHIPPED = {
    "__init__.py",
    "__main__.py",  # python -m modeling_elmo SCRIPT.py ARGS
    "auto_map_elmo.py",
    "bptt_elmo.py",  # backpropagation through time for the compiled path's training operators
    "character_inputs_elmo.py",
    "characters.py",
    "checks_elmo.py",
    "compiled_ops_elmo.py",
    "configuration_elmo.py",
    "crf.py",
    "esim_elmo.py",
    "fast_path_elmo.py",
    "graph_path_elmo.py",
    "lstm_state_elmo.py",
    "manylangs.py",
    "modeling_elmo.py",
    "modeling_elmo_classification.py",
    "modeling_elmo_pretraining.py",
    "modeling_elmo_qa.py",
    "modeling_elmo_tagging.py",
    "native_steps_elmo.py",  # the compiled path's C++ step loop (its source a string: built at the first compiled call)
    "pairs_elmo.py",
    "pipelines_elmo.py",
    "pipelines_fill_mask_elmo.py",
    "py.typed",
    "scalar_mix_elmo.py",
    "scoring_elmo.py",
    "softmax_elmo.py",
    "task_lstm_elmo.py",
    "tokenization_elmo.py",
    "tokenization_pairs_elmo.py",
}
# The sub-packages (issue 35's layout), each installed whole: code, and the demo models' data.
SUBPACKAGES = {
    "commands",
    "compat",
    "demo_models",
    "demo_models/demo_bilm",
    "demo_models/demo_softmax",
    "hub",
    "inference",
    "integrations",
    "plots",  # the figures (matplotlib)
    "reference",  # the step-by-step biLM the tests and benchmarks compare against
    "pipelines",  # the pipelines that no saved folder carries (the QA task)
    "training",
}


def _source_files() -> list[str]:
    try:
        out = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("needs a git checkout to know the source files")
    return [line for line in out.splitlines() if line and (REPO / line).is_file()]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> tuple[Path, str]:
    pytest.importorskip("setuptools", minversion="77")
    src = tmp_path_factory.mktemp("src")
    for name in _source_files():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, src / name)
    out = tmp_path_factory.mktemp("wheel")
    build = f"from setuptools import build_meta; print(build_meta.build_wheel({str(out)!r}))"
    done = subprocess.run([sys.executable, "-c", build], cwd=src, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    return out / done.stdout.strip().splitlines()[-1], done.stdout + done.stderr


def test_build_warns_about_nothing_undeclared(wheel):
    _, log = wheel
    for sign in ("absent from the `packages` configuration", "SetuptoolsDeprecationWarning", "BuildBackendWarning"):
        assert sign not in log, log[-3000:]


def test_wheel_installs_only_the_package(wheel):
    path, _ = wheel
    names = zipfile.ZipFile(path).namelist()
    top = {name.split("/")[0] for name in names}
    # No generic top-level modules (configuration_elmo.py, convert_original_weights.py are checkout entries); the
    # `elmo` command's module and its subcommands' flags live beside the package, so that `elmo --help` and
    # `elmo SUBCOMMAND --help` do not import it.
    assert {t for t in top if not t.endswith(".dist-info")} == {"modeling_elmo", "elmo_cli.py", "elmo_flags"}, top
    package = {name.split("/", 1)[1] for name in names if name.startswith("modeling_elmo/") and name.count("/") == 1}
    assert package == SHIPPED, package ^ SHIPPED
    demo = {Path(n).name for n in names if n.startswith("modeling_elmo/demo_models/demo_bilm/")}
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "vocab.txt"} <= demo
    assert not [n for n in demo if n.endswith(".py")]  # the demo model is data only
    demo_lm = {Path(n).name for n in names if n.startswith("modeling_elmo/demo_models/demo_softmax/")}
    assert demo_lm == {"softmax.safetensors", "fit_results.json"}, demo_lm  # the demo's LM head, data only
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)


def test_wheel_installs_every_file_of_the_package_and_its_subpackages(wheel):
    """Every file of ``modeling_elmo/`` in git is in the wheel, where it is in the checkout: a folder missing from
    pyproject's ``packages`` (or data missing from ``package-data``) loses its files without a word for data-only
    folders."""
    path, _ = wheel
    tracked = {name for name in _source_files() if name.startswith("modeling_elmo/")}
    installed = {name for name in zipfile.ZipFile(path).namelist() if name.startswith("modeling_elmo/")}
    assert tracked == installed, {
        "not installed": sorted(tracked - installed),
        "not in git": sorted(installed - tracked),
    }
    folders = {str(Path(name).parent.relative_to("modeling_elmo")) for name in installed} - {"."}
    assert folders == SUBPACKAGES, folders ^ SUBPACKAGES


def test_the_top_of_the_package_holds_exactly_what_a_saved_folder_may_need():
    """Issue 51 (STYLE.md, "One concept per file"): ``ls modeling_elmo/`` shows what travels with a saved model, the
    modules a remote-code folder holds (``shipped_files``), besides ``__init__.py`` and ``__main__.py``; every tool
    (plots, the reference biLM, the commands...) is in a sub-package. Before: plots.py, reference_elmo.py and
    deprecated_paths.py sat at the top, shipped by no folder."""
    from modeling_elmo.hub.remote_code import shipped_files

    top = {path.name for path in (REPO / "modeling_elmo").glob("*.py")} - {"__init__.py", "__main__.py"}
    shipped = {path.name for path in shipped_files()}
    assert top == shipped, {"at the top but shipped by no folder (move it to a sub-package)": sorted(top - shipped)}


def test_the_changelog_starts_with_this_version():
    """Issue 51: pyproject said 0.1.0 while the package's docstrings spoke of 0.2; CHANGELOG.md's latest release is
    the version that pyproject.toml gives."""
    import re

    tomllib = pytest.importorskip("tomllib", reason="reading pyproject.toml needs Python 3.11")
    version = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
    releases = re.findall(r"^## (\S+)", (REPO / "CHANGELOG.md").read_text(encoding="utf-8"), re.M)
    assert releases and releases[0] == version, (releases[:1], version)


def test_the_test_extra_installs_every_extra_and_dev_adds_only_ruff():
    """Issue 36: the README's test command installs ``.[train,test]``; the suite exercises every extra with its real
    library (gradio, gensim, sentence-transformers, spaCy, ONNX...), so ``test`` must pull in all of them."""
    tomllib = pytest.importorskip("tomllib", reason="reading pyproject.toml needs Python 3.11")
    extras = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]

    def included(extra: str) -> set[str]:
        """The extras that ``extra`` pulls in through ``modeling-elmo[...]``, itself included."""
        found = {extra}
        for requirement in extras[extra]:
            if requirement.startswith("modeling-elmo["):
                for name in requirement.partition("[")[2].rstrip("]").split(","):
                    found |= included(name.strip())
        return found

    assert included("test") == set(extras) - {"dev"}, included("test")
    assert extras["dev"] == ["modeling-elmo[train,test]", "ruff>=0.6"], extras["dev"]


def test_wheel_metadata(wheel):
    path, _ = wheel
    archive = zipfile.ZipFile(path)
    meta_name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
    meta = email.message_from_bytes(archive.read(meta_name))
    assert meta["License-Expression"] == "Apache-2.0"
    assert "Typing :: Typed" in meta.get_all("Classifier")
    assert meta.get_all("Project-URL")
    extras = set(meta.get_all("Provides-Extra"))
    assert {"train", "export", "test", "dev"} <= extras
    entry_points = archive.read(meta_name.replace("METADATA", "entry_points.txt")).decode()
    assert "elmo = elmo_cli:main" in entry_points
    assert "elmo-convert = elmo_cli:convert_main" in entry_points


# A subprocess in which the named modules cannot be imported (as in an install without that extra).
_WITHOUT = """
import importlib.abc, sys
BLOCKED = set(sys.argv[1].split(","))

class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Blocker())
_find_spec = importlib.util.find_spec
importlib.util.find_spec = lambda name, *a: None if name.split(".")[0] in BLOCKED else _find_spec(name, *a)
sys.argv = sys.argv[1:]
"""


def _run_without(modules: str, code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", _WITHOUT + code, modules], cwd=REPO, capture_output=True, text=True, timeout=300
    )


@pytest.mark.parametrize("command", ["train-lm", "train-tagger"])
def test_training_command_without_its_extra_names_the_extra(command):
    code = f"from elmo_cli import main; raise SystemExit(main([{command!r}, '--help']))"
    done = _run_without("accelerate", code)
    assert done.returncode == 1, done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), done.stderr[-2000:]
    assert "accelerate" in lines[0] and "modeling-elmo[train]" in lines[0] and "transformers[torch]" not in lines[0]


def test_export_onnx_without_its_extra_names_the_extra():
    code = (
        "import torch\n"
        "from modeling_elmo import ElmoConfig, ElmoModel\n"
        "from modeling_elmo.inference.export import ElmoExportWrapper, export_onnx\n"
        "config = ElmoConfig(lstm_dim=8, projection_dim=4, char_cnn_filters=[[1, 4]], n_highway=0)\n"
        "try:\n"
        "    export_onnx(ElmoExportWrapper(ElmoModel(config)).eval(), 'x.onnx')\n"
        "except ImportError as err:\n"
        "    print(err)\n"
    )
    done = _run_without("onnxscript", code)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "onnxscript" in done.stdout and "modeling-elmo[export]" in done.stdout, done.stdout


def test_wheel_declares_the_plugin_extras_and_the_spacy_factory(wheel):
    path, _ = wheel
    archive = zipfile.ZipFile(path)
    meta_name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
    meta = email.message_from_bytes(archive.read(meta_name))
    assert {"gensim", "sentence-transformers", "spacy"} <= set(meta.get_all("Provides-Extra"))
    entry_points = archive.read(meta_name.replace("METADATA", "entry_points.txt")).decode()
    assert "[spacy_factories]\nelmo = modeling_elmo.integrations.spacy:make_elmo" in entry_points
    assert "modeling_elmo/integrations/spacy.py" in archive.namelist()


def test_plugins_without_their_libraries_name_the_extra():
    code = (
        "import modeling_elmo, modeling_elmo.integrations, modeling_elmo.inference.static_vectors\n"
        "for name, extra in [('sentence_transformers', 'sentence-transformers'), ('spacy', 'spacy')]:\n"
        "    try:\n"
        "        __import__('modeling_elmo.integrations.' + name)\n"
        "    except ModuleNotFoundError as err:\n"
        "        assert f'modeling-elmo[{extra}]' in str(err), err\n"
        "        print('refused', name)\n"
    )
    done = _run_without("gensim,sentence_transformers,spacy", code)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[:2] == ["refused sentence_transformers", "refused spacy"], done.stdout
