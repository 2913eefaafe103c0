"""One module per subcommand (issue 37.3): ``elmo_cli`` lists and dispatches, each module of ``modeling_elmo/commands/``
has ``add_arguments(parser)`` and ``run(args)``, and ``--help`` stays light."""

from __future__ import annotations

import argparse
import ast
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import elmo_cli

REPO = Path(__file__).resolve().parent.parent
COMMANDS_DIR = REPO / "modeling_elmo" / "commands"
# What a command module must not import before it runs: each costs from a tenth of a second to seconds.
HEAVY_FOR_HELP = ("torch", "transformers", "h5py", "gradio", "matplotlib", "datasets", "accelerate", "onnx")


def _python(code: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)


_TOP_LEVEL = """
import contextlib, io, json, sys
import elmo_cli
codes = []
for argv in (["--help"], [], ["--version"], ["no-such-command"]):
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        codes.append(elmo_cli.main(argv))
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "transformers", "modeling_elmo"))
print(json.dumps([codes, heavy]))
"""


def test_elmo_help_imports_neither_torch_nor_transformers_nor_the_package():
    done = _python(_TOP_LEVEL)
    assert done.returncode == 0, done.stderr[-3000:]
    codes, heavy = json.loads(done.stdout.splitlines()[-1])
    assert codes == [0, 2, 0, 2]
    assert heavy == []


_SUBCOMMAND_HELP = """
import contextlib, io, json, sys
import elmo_cli
elmo_cli.import_package()
before = set(sys.modules)
found = {}
for name in elmo_cli.COMMANDS:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = elmo_cli.main([name, "--help"])
    found[name] = [code, out.getvalue().startswith(f"usage: elmo {name} ")]
found["imported"] = sorted({m.split(".")[0] for m in set(sys.modules) - before})
print(json.dumps(found))
"""


def test_a_subcommands_help_imports_nothing_beyond_the_package():
    """``elmo SUBCOMMAND --help`` imports the package (``import modeling_elmo`` registers it with transformers, so it
    brings torch and transformers) and the command's module, which imports its heavy tools (the converter and its
    h5py, matplotlib, gradio...) only when it runs."""
    done = _python(_SUBCOMMAND_HELP)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.splitlines()[-1])
    imported = found.pop("imported")
    assert found == {name: [0, True] for name in elmo_cli.COMMANDS}
    assert not set(imported) & set(HEAVY_FOR_HELP), imported


@pytest.mark.parametrize("name", sorted(elmo_cli.COMMANDS))
def test_every_command_module_has_add_arguments_and_run(name):
    module = importlib.import_module(elmo_cli.COMMANDS[name][0])
    assert callable(module.add_arguments) and callable(module.run)
    parser = argparse.ArgumentParser(prog=f"elmo {name}")
    module.add_arguments(parser)
    assert parser.description and parser.format_help().startswith(f"usage: elmo {name} ")
    assert Path(module.__file__).parent == COMMANDS_DIR


def test_the_command_modules_import_nothing_heavy_at_the_top():
    """Checked on the sources: no module of commands/ imports torch, transformers, h5py, gradio, matplotlib... outside
    a function (``--help`` imports every module it lists)."""
    offenders = []
    for path in sorted(COMMANDS_DIR.glob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            offenders += [f"{path.name}: {n}" for n in names if n.split(".")[0] in HEAVY_FOR_HELP]
    assert not offenders, offenders


def test_elmo_cli_keeps_only_the_list_and_the_dispatch():
    """What a subcommand does lives in its module: ``elmo_cli`` defines no command's flags or work."""
    tree = ast.parse(Path(elmo_cli.__file__).read_text(encoding="utf-8"))
    functions = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
    assert functions <= {
        "_error",
        "convert_input_problem",
        "import_package",
        "_import_command",
        "run_subcommand",
        "build_parser",
        "main",
        "convert_main",
    }, functions
    assert not [node for node in tree.body if isinstance(node, ast.ClassDef)]
    assert len(Path(elmo_cli.__file__).read_text(encoding="utf-8").splitlines()) < 300


def test_build_parser_holds_every_commands_flags():
    parser = elmo_cli.build_parser()
    args = parser.parse_args(["embed", "corpus.txt", "-o", "out.hdf5"])
    assert (args.command, args.input, args.output, args.batch_size) == ("embed", "corpus.txt", "out.hdf5", 64)
    assert parser.parse_args(["score", "in.txt", "--model", "demo"]).model == "demo"
