"""One module per subcommand (issue 37.3): ``elmo_cli`` lists and dispatches, each module of ``modeling_elmo/commands/``
has ``run(args)``, and its flags are the module of the same name in ``elmo_flags/`` (``add_arguments(parser)``), so
that ``--help`` and usage errors import neither torch nor transformers nor the package (issue 44 F5)."""

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
FLAGS_DIR = REPO / "elmo_flags"
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


_SUBCOMMAND = """
import contextlib, io, json, sys
import elmo_cli
out, err = io.StringIO(), io.StringIO()
with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
    code = elmo_cli.main(sys.argv[1:])
heavy = sorted({m.split(".")[0] for m in sys.modules} & {"torch", "transformers", "modeling_elmo"})
print(json.dumps([code, out.getvalue(), err.getvalue(), heavy]))
"""


def _subcommand(*argv: str) -> tuple[int, str, str, list[str]]:
    """``elmo ARGV`` in a fresh interpreter: exit code, stdout, stderr, and which of torch, transformers and
    modeling_elmo it imported."""
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    done = subprocess.run(
        [sys.executable, "-c", _SUBCOMMAND, *argv], cwd=REPO, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return tuple(json.loads(done.stdout.splitlines()[-1]))


def test_elmo_embed_help_imports_neither_torch_nor_transformers():
    """``elmo embed --help`` (issue 44 F5: it took 4.6 s idle, 12-19 s under load, importing torch and transformers
    first) prints its flags from ``elmo_flags.embed`` alone."""
    code, out, _, heavy = _subcommand("embed", "--help")
    assert code == 0 and out.startswith("usage: elmo embed ") and "--output_type" in out, out[:300]
    assert heavy == []


@pytest.mark.parametrize(
    "argv, message",
    [
        (["embed", "--bogus"], "unrecognized arguments: --bogus"),
        # A prefix of a flag is no flag (argparse's allow_abbrev=False): --train_fil is not --train_file.
        (["embed", "--train_fil", "x.txt", "--output_dir", "out"], "unrecognized arguments: --train_fil"),
        (["embed", "--output_type", "bogus"], "invalid choice: 'bogus'"),
        (["similar", "--lay", "2"], "unrecognized arguments: --lay"),
        (["score", "in.txt"], "--model demo"),  # the missing --model names the offline first try
        (["convert", "--output_dir", "out", "--overwrit"], "unrecognized arguments: --overwrit"),
    ],
)
def test_a_usage_error_answers_before_the_package_loads(argv, message):
    code, _, err, heavy = _subcommand(*argv)
    assert code == 2 and message in err, err
    assert heavy == []


@pytest.mark.parametrize(
    "name, suggestion", [("embd", "embed"), ("simlar", "similar"), ("train-tager", "train-tagger"), ("xyzzy", None)]
)
def test_a_mistyped_subcommand_gets_a_suggestion(name, suggestion):
    code, _, err, heavy = _subcommand(name)
    assert code == 2 and f"unknown subcommand {name!r}" in err, err
    assert (f"did you mean {suggestion!r}?" in err) if suggestion else ("did you mean" not in err), err
    assert heavy == []


def test_every_subcommands_help_imports_nothing_heavy():
    """``elmo SUBCOMMAND --help`` for each of ``COMMANDS``, in one fresh interpreter: usage lines, and none of torch,
    transformers, the package, h5py, gradio, matplotlib... imported."""
    code = f"""
import contextlib, io, json, sys
import elmo_cli
found = {{}}
for name in elmo_cli.COMMANDS:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = elmo_cli.main([name, "--help"])
    found[name] = [code, out.getvalue().startswith(f"usage: elmo {{name}} ")]
found["imported"] = sorted({{m.split(".")[0] for m in sys.modules}} & set({list(HEAVY_FOR_HELP)!r} + ["modeling_elmo"]))
print(json.dumps(found))
"""
    done = _python(code)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.splitlines()[-1])
    assert found.pop("imported") == []
    assert found == {name: [0, True] for name in elmo_cli.COMMANDS}


@pytest.mark.parametrize("name", sorted(elmo_cli.COMMANDS))
def test_every_command_has_a_run_module_and_a_flags_module(name):
    module = importlib.import_module(elmo_cli.COMMANDS[name][0])
    assert callable(module.run) and Path(module.__file__).parent == COMMANDS_DIR
    flags = elmo_cli.flags_module(name)
    assert (
        Path(flags.__file__).parent == FLAGS_DIR
        and flags.__name__.rpartition(".")[2] == module.__name__.rpartition(".")[2]
    )
    parser = argparse.ArgumentParser(prog=f"elmo {name}")
    flags.add_arguments(parser)
    assert parser.description and parser.format_help().startswith(f"usage: elmo {name} ")


def test_the_flags_modules_import_only_the_standard_library():
    """Checked on the sources, top level and functions alike: ``elmo_flags`` imports no third-party module and
    nothing of ``modeling_elmo`` (any of its modules imports the package, which imports torch and transformers)."""
    offenders = []
    for path in sorted(FLAGS_DIR.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            offenders += [f"{path.name}: {n}" for n in names if n.split(".")[0] not in sys.stdlib_module_names]
    assert len(list(FLAGS_DIR.glob("*.py"))) == len(elmo_cli.COMMANDS) + 1  # one per command, and __init__.py
    assert not offenders, offenders


def test_the_download_flags_name_the_librarys_environment_variables():
    """``elmo_flags.download`` names the download's environment variables without importing the library: the same
    names as ``modeling_elmo.hub.download``."""
    from elmo_flags import download as flags
    from modeling_elmo.hub import download

    for name in ("CACHE_DIR_ENV", "BASE_URL_ENV", "MIN_RATE_ENV", "DEFAULT_BASE_URL"):
        assert getattr(flags, name) == getattr(download, name), name


def test_the_embed_flags_offer_the_librarys_output_types():
    from elmo_flags import embed as flags
    from modeling_elmo.inference import embed_corpus

    assert flags.OUTPUT_TYPES == embed_corpus.OUTPUTS
    assert flags.DEPRECATED_OUTPUT_TYPES == embed_corpus.DEPRECATED_OUTPUTS


def test_the_command_modules_import_nothing_heavy_at_the_top():
    """Checked on the sources: no module of commands/ imports torch, transformers, h5py, gradio, matplotlib... outside
    a function (``--help`` imports every module it lists)."""
    offenders = []
    for path in sorted([*COMMANDS_DIR.glob("*.py"), *FLAGS_DIR.glob("*.py")]):
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
        "flags_module",
        "unknown_command",
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
