"""The package's layering: library code never imports the command layer, not even inside a function.

Library code is every module under ``modeling_elmo/`` but ``commands/``; the command layer is ``modeling_elmo.commands``
(the subcommands) and ``elmo_cli`` (the ``elmo`` command, beside the package)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "modeling_elmo"
COMMAND_LAYER = ("modeling_elmo.commands", "elmo_cli")


def _is_command_layer(module: str) -> bool:
    return any(module == top or module.startswith(top + ".") for top in COMMAND_LAYER)


def command_imports(source: str, package: str) -> list[str]:
    """``"line N: module"`` for each import of the command layer in ``source``, a module of ``package`` (dotted):
    ``import``, ``from ... import`` (relative ones resolved against ``package``), and ``importlib.import_module`` or
    ``__import__`` of a constant name, wherever they are (top level, functions, classes, ``try`` blocks)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1])
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module or ""
            # `from modeling_elmo import commands` imports the subpackage: check the names too
            targets = [module, *(f"{module}.{alias.name}" for alias in node.names)]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
            if name in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                targets = [node.args[0].value]
        hits = [target for target in targets if _is_command_layer(target)]
        if hits:
            found.append(f"line {node.lineno}: {hits[0]}")
    return found


def _library_files() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "commands" not in p.relative_to(PACKAGE).parts)


@pytest.mark.parametrize(
    ("source", "package", "bad"),
    [
        ("from ..commands.download import resolve_pretrained", "modeling_elmo.hub", True),
        ("from .commands import convert", "modeling_elmo", True),
        ("from .. import commands", "modeling_elmo.training", True),
        ("def f():\n    import elmo_cli as cli\n", "modeling_elmo.hub", True),
        ("def f():\n    from elmo_cli import demo_model_path\n", "modeling_elmo.integrations", True),
        ("import importlib\nimportlib.import_module('modeling_elmo.commands.convert')", "modeling_elmo", True),
        ("from modeling_elmo.commands.convert import convert", "modeling_elmo.hub", True),
        ("from ..hub.download import resolve_pretrained", "modeling_elmo.training", False),
        ("from .download import resolve_pretrained", "modeling_elmo.hub", False),
        ("import elmo_cli_extra\nfrom ..commands_of_others import x", "modeling_elmo.hub", False),
    ],
)
def test_the_check_finds_command_imports(source, package, bad):
    assert bool(command_imports(source, package)) == bad


def test_library_never_imports_the_command_layer():
    files = _library_files()
    assert len(files) > 30, files  # the whole package was scanned, not an empty folder
    offenders = []
    for path in files:
        relative = path.relative_to(PACKAGE.parent)
        package = ".".join(relative.with_suffix("").parts[:-1])
        if path.name == "__init__.py":
            package = ".".join(relative.parts[:-1])
        offenders += [f"{relative} {hit}" for hit in command_imports(path.read_text(encoding="utf-8"), package)]
    assert not offenders, "library modules import the command layer:\n" + "\n".join(offenders)
