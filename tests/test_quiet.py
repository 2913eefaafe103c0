"""What a user sees (issue 15 items 3 and 4): quiet loads, one error for a real mismatch, and an ``elmo --help``
that imports neither torch nor transformers, while ``import modeling_elmo`` still registers the Auto classes.

Each check runs in a fresh interpreter (the import state and transformers' logging at its default level are the
point), on tiny folders written once by this module.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import TINY_SIZES

from modeling_elmo import ElmoConfig, ElmoForPreTraining, ElmoForTokenClassification, ElmoModel, ElmoTokenizer

REPO = Path(__file__).resolve().parent.parent
HEAVY = ("torch", "transformers")
# transformers' and tqdm's progress bars ("Loading weights: 100%|...| 23/23 [00:00<...]"): not noise.
_PROGRESS = re.compile(r"^[^|]*\d+%\|.*\| *\d+/\d+ \[")


def _env() -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), str(REPO / "tests")]))
    for name in ("TRANSFORMERS_VERBOSITY", "TRANSFORMERS_NO_ADVISORY_WARNINGS", "PYTHONWARNINGS"):
        env.pop(name, None)  # transformers' logging and Python's warnings at their defaults
    return env


def _python(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args], cwd=REPO, env=_env(), capture_output=True, text=True, timeout=timeout
    )


def _lines(text: str) -> list[str]:
    """Output lines, progress-bar redraws (``\\r``) split apart, progress bars and blank lines dropped."""
    lines = (part.strip() for line in text.splitlines() for part in line.split("\r"))
    return [line for line in lines if line and not _PROGRESS.match(line)]


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> Path:
    """Every kind of saved folder: an ElmoModel (as converted), a train_lm output (ElmoForPreTraining: biLM +
    softmax, no mixes) and a tagger."""
    root = tmp_path_factory.mktemp("kinds")
    torch.manual_seed(0)
    tokenizer = ElmoTokenizer()
    ElmoModel(ElmoConfig(**TINY_SIZES)).save_pretrained(root / "bilm")
    ElmoForPreTraining(ElmoConfig(**TINY_SIZES, lm_vocab_size=20)).save_pretrained(root / "lm")
    config = ElmoConfig(**TINY_SIZES, num_labels=3)
    ElmoForTokenClassification(config).save_pretrained(root / "tagger")
    for kind in ("bilm", "lm", "tagger"):
        tokenizer.save_pretrained(root / kind)
    return root


_LOADS = """
import sys
root = sys.argv[1]
from modeling_elmo import ElmoForPreTraining, ElmoForTokenClassification, ElmoModel, ElmoTokenizer
from transformers import AutoModel, AutoTokenizer
ElmoModel.from_pretrained(f"{root}/bilm")
ElmoModel.from_pretrained(f"{root}/lm")                                    # train_lm output: softmax.* left out
ElmoForPreTraining.from_pretrained(f"{root}/lm")
ElmoForPreTraining.from_pretrained(f"{root}/bilm", lm_vocab_size=20)       # LM fine-tuning: a new softmax
ElmoForTokenClassification.from_pretrained(f"{root}/bilm", num_labels=5)   # a new tagger head
ElmoForTokenClassification.from_pretrained(f"{root}/lm", num_labels=5)     # a new tagger on a trained LM
ElmoForTokenClassification.from_pretrained(f"{root}/tagger")
AutoModel.from_pretrained(f"{root}/lm")
for kind in ("bilm", "lm", "tagger"):
    ElmoTokenizer.from_pretrained(f"{root}/{kind}")
    AutoTokenizer.from_pretrained(f"{root}/{kind}")
print("LOADED")
try:
    ElmoModel.from_pretrained(f"{root}/bilm", lstm_dim=32)
except ValueError as error:
    print(f"ValueError: {error}")
"""


def test_loads_print_no_table_and_a_mismatch_one_error(folders):
    done = _python("-c", _LOADS, str(folders))
    assert done.returncode == 0, done.stderr[-3000:]
    lines = _lines(done.stdout + done.stderr)
    loaded = lines.index("LOADED")
    assert lines[:loaded] == [], "\n".join(lines[:loaded])  # no LOAD REPORT, no warning: nothing at all
    # A real mismatch: the package's one error, no "Reinit due to size mismatch" table before it.
    rest = lines[loaded + 1 :]
    assert len(rest) == 1 and rest[0].startswith("ValueError: the weights in"), "\n".join(rest)
    assert "do not fit the config" in rest[0] and "Reinit" not in done.stderr


def test_an_unexpected_head_is_still_reported(folders):
    """What the declarations leave out is only what a load from another kind of folder rightly lacks: a tagger
    whose head differs from the saved one's still gets transformers' report."""
    code = (
        "import sys\nfrom modeling_elmo import ElmoForTokenClassification\n"
        "ElmoForTokenClassification.from_pretrained(sys.argv[1], tagger_num_layers=1)"
    )
    done = _python("-c", code, str(folders / "tagger"))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "LOAD REPORT" in done.stderr and "encoder.lstm.weight_ih_l1" in done.stderr


# ---------------------------------------------------------------------------------------------
# elmo --help: no torch, no transformers
# ---------------------------------------------------------------------------------------------


def _import_report(stderr: str) -> tuple[float, set[str]]:
    """Total import time (s) and the top-level packages imported, from ``python -X importtime`` output."""
    total_us, names = 0, set()
    for line in stderr.splitlines():
        match = re.match(r"import time:\s+(\d+) \|\s+\d+ \|\s*(\S+)", line)
        if match:
            total_us += int(match.group(1))
            names.add(match.group(2).split(".")[0])
    return total_us / 1e6, names


def _elmo_commands() -> list[list[str]]:
    commands = [[sys.executable, "-X", "importtime", "-m", "elmo_cli"]]
    script = Path(sys.executable).parent / "elmo"  # the installed console script, if this environment has it
    if script.is_file():
        commands.append([sys.executable, "-X", "importtime", str(script)])
    return commands


@pytest.mark.parametrize("args, code", [(["--help"], 0), (["--version"], 0), (["no-such-command"], 2)])
def test_elmo_help_imports_neither_torch_nor_transformers(args, code):
    for command in _elmo_commands():
        done = subprocess.run([*command, *args], cwd=REPO, env=_env(), capture_output=True, text=True, timeout=120)
        assert done.returncode == code, done.stderr[-3000:]
        seconds, imported = _import_report(done.stderr)
        print(f"{' '.join(command[3:])} {' '.join(args)}: {seconds:.3f} s of imports, {len(imported)} packages")
        assert not imported & set(HEAVY), sorted(imported & set(HEAVY))
        assert seconds > 0


def test_package_import_is_light_and_still_registers(folders):
    """``import modeling_elmo`` imports neither torch nor transformers; the documented use still works afterwards,
    also when transformers imports its Auto classes in the middle of another import (``PreTrainedModel`` pulls
    them in through its quantizers), and also for a submodule imported directly."""
    code = f"""
import sys
import modeling_elmo
heavy = sorted(name for name in {HEAVY!r} if name in sys.modules)
assert not heavy, heavy
assert "ElmoModel" in dir(modeling_elmo) and modeling_elmo.__all__
from transformers import PreTrainedModel  # imports the Auto classes while PreTrainedModel is not defined yet
from transformers import AutoConfig, AutoModel, AutoModelForTokenClassification, AutoTokenizer, pipeline
root = sys.argv[1]
print(type(AutoConfig.from_pretrained(f"{{root}}/bilm")).__name__,
      type(AutoModel.from_pretrained(f"{{root}}/lm")).__name__,
      type(AutoTokenizer.from_pretrained(f"{{root}}/bilm")).__name__,
      type(AutoModelForTokenClassification.from_pretrained(f"{{root}}/tagger")).__name__)
tagger = pipeline("elmo-token-classification", model=f"{{root}}/tagger")
print(type(tagger).__name__, len(tagger("John lives in Paris .")))
"""
    done = _python("-c", code, str(folders))
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == [
        "ElmoConfig",
        "ElmoModel",
        "ElmoTokenizer",
        "ElmoForTokenClassification",
        "ElmoTokenClassificationPipeline",
        "5",
    ], done.stdout
    # A shipped submodule imported directly (the package's __init__ runs first, lightly), then the Auto classes.
    code = (
        "import sys\nfrom modeling_elmo.modeling_elmo import ElmoModel\nfrom transformers import AutoModel\n"
        "print(type(AutoModel.from_pretrained(sys.argv[1])).__name__)"
    )
    done = _python("-c", code, str(folders / "bilm"))
    assert done.returncode == 0 and done.stdout.split() == ["ElmoModel"], done.stderr[-3000:]
