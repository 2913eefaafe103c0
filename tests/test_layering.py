"""The package's layering: library code never imports the command layer, not even inside a function.

Library code is every module under ``modeling_elmo/`` but ``commands/``; the command layer is ``modeling_elmo.commands``
(the subcommands) and ``elmo_cli`` (the ``elmo`` command, beside the package)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "modeling_elmo"
COMMAND_LAYER = ("modeling_elmo.commands", "elmo_cli", "elmo_flags")


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


def test_subcommands_never_import_the_dispatcher():
    """``elmo_cli`` dispatches to ``commands/``; what the subcommands share is in ``commands/common.py`` and
    ``commands/output_files.py``, never imported back from ``elmo_cli`` (issue 37.3: export-vectors, score and
    demo took the model loading and the error class from it)."""
    files = sorted((PACKAGE / "commands").glob("*.py"))
    assert {"common.py", "output_files.py", "embed.py"} <= {path.name for path in files}
    offenders = [
        f"{path.name} {hit}"
        for path in files
        for hit in command_imports(path.read_text(encoding="utf-8"), "modeling_elmo.commands")
        if hit.endswith(": elmo_cli") or ": elmo_cli." in hit
    ]
    assert not offenders, "subcommands import elmo_cli:\n" + "\n".join(offenders)


# ---------------------------------------------------------------------------------------------
# No import cycles (issue 37.2): two modules that import each other, directly or through a longer loop, are one
# concept cut in the wrong place
# ---------------------------------------------------------------------------------------------

ROOT = PACKAGE.parent


def package_modules() -> dict[str, Path]:
    """Every module of the package (``modeling_elmo.hub.download``; a package by its ``__init__.py``), and
    ``elmo_cli``: dotted name -> file."""
    modules = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        modules[".".join(parts[:-1] if path.name == "__init__.py" else parts)] = path
    modules["elmo_cli"] = ROOT / "elmo_cli.py"
    for path in sorted((ROOT / "elmo_flags").glob("*.py")):  # the subcommands' flags
        modules["elmo_flags" if path.name == "__init__.py" else f"elmo_flags.{path.stem}"] = path
    return modules


def module_imports(source: str, module: str, is_package: bool, known: set[str]) -> dict[str, int]:
    """The modules of ``known`` that ``source`` (the module ``module``) imports, each with the line of its first
    import: ``import``, ``from ... import`` (relative ones resolved; ``from pkg import sub`` imports the submodule
    ``pkg.sub``, ``from pkg import name`` the package ``pkg``), and ``importlib.import_module``/``__import__`` of a
    constant name, wherever they are (top level, functions, classes, ``try`` blocks)."""
    package = module if is_package else module.rpartition(".")[0]
    found: dict[str, int] = {}

    def add(target: str, line: int) -> None:
        if target in known and target != module:
            found.setdefault(target, line)

    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1])
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            for alias in node.names:
                add(f"{target}.{alias.name}" if f"{target}.{alias.name}" in known else target, node.lineno)
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
            if name in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                add(node.args[0].value, node.lineno)
    return found


def import_cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """One cycle ``[a, b, ..., a]`` of each strongly connected group of modules that import each other (Tarjan's
    algorithm, iterative); ``[]`` if the graph has none."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, {}))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, targets = work[-1]
            target = next(targets, None)
            if target is not None:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph.get(target, {})))))
                elif target in on_stack:
                    low[node] = min(low[node], index[target])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.add(member)
                    if member == node:
                        break
                if len(group) > 1 or node in graph.get(node, {}):
                    groups.append(group)
    return [_cycle_in(group, graph) for group in groups]


def _cycle_in(group: set[str], graph: dict[str, dict[str, int]]) -> list[str]:
    """A shortest loop through the first module of ``group`` (all of whose modules reach each other)."""
    start = min(group)
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for target in sorted(graph.get(node, {})):
                if target == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [start, *reversed(path[:-1]), start] if node != start else [start, start]
                if target in group and target not in came_from:
                    came_from[target] = node
                    following.append(target)
        frontier = following
    raise AssertionError(f"no loop through {start}")  # unreachable: a group's modules reach each other


def _named(cycle: list[str], graph: dict[str, dict[str, int]]) -> str:
    return " -> ".join(f"{a} (line {graph[a][b]})" for a, b in zip(cycle, cycle[1:], strict=False)) + f" -> {cycle[-1]}"


@pytest.mark.parametrize(
    ("graph", "expected"),
    [
        ({"a": {"b": 1}, "b": {"a": 2}}, [["a", "b", "a"]]),
        ({"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {"a": 1}}, [["a", "b", "c", "a"]]),
        ({"a": {"a": 1}}, [["a", "a"]]),
        ({"a": {"b": 1, "c": 1}, "b": {"c": 1}, "c": {}}, []),
        ({"a": {"b": 1}, "b": {"a": 1}, "c": {"d": 1}, "d": {"c": 1}}, [["a", "b", "a"], ["c", "d", "c"]]),
    ],
)
def test_the_cycle_check_finds_loops(graph, expected):
    assert sorted(import_cycles(graph)) == expected


@pytest.mark.parametrize(
    ("sources", "cycle"),
    [
        (  # the old hub: download.py imported download_manylangs.py inside a function, and the other way round
            {
                "pkg.hub.download": "def f():\n    from .download_manylangs import download_manylangs\n",
                "pkg.hub.download_manylangs": "from .download import _fetch, DownloadError\n",
            },
            ["pkg.hub.download", "pkg.hub.download_manylangs", "pkg.hub.download"],
        ),
        (  # `from pkg import sub` imports the submodule; `from . import name` the package
            {
                "pkg": "from .a import thing\n",
                "pkg.a": "from pkg import b\n",
                "pkg.b": "def f():\n    from . import c\n",
            },
            ["pkg", "pkg.a", "pkg.b", "pkg"],
        ),
        (
            {"pkg.a": "import importlib\nimportlib.import_module('pkg.b')\n", "pkg.b": "import pkg.a\n"},
            ["pkg.a", "pkg.b", "pkg.a"],
        ),
        ({"pkg.a": "from . import b\n", "pkg.b": "from .c import x\n", "pkg.c": "import os\n"}, None),
    ],
)
def test_the_import_graph_resolves_every_kind_of_import(sources, cycle):
    known = set(sources)
    graph = {name: module_imports(text, name, name == "pkg", known) for name, text in sources.items()}
    assert import_cycles(graph) == ([cycle] if cycle else [])


def test_no_import_cycles():
    modules = package_modules()
    assert len(modules) > 30 and "modeling_elmo.hub.download" in modules, sorted(modules)
    known = set(modules)
    graph = {
        name: module_imports(path.read_text(encoding="utf-8"), name, path.name == "__init__.py", known)
        for name, path in modules.items()
    }
    cycles = import_cycles(graph)
    assert not cycles, "modules that import each other:\n" + "\n".join(_named(c, graph) for c in cycles)


def test_hub_modules_import_no_private_name_of_another_module():
    """A private name (``_fetch``) imported across a module border is the smell of a concept cut in the wrong place:
    what two modules of ``hub/`` share is public in the module that owns it."""
    offenders = []
    for path in sorted((PACKAGE / "hub").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("modeling_elmo")):
                names = [a.name for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
                offenders += [f"{path.relative_to(ROOT)} line {node.lineno}: {name}" for name in names]
    assert not offenders, "private names imported from another module:\n" + "\n".join(offenders)


def test_no_source_file_over_a_thousand_lines():
    """The project's rule: a file that long holds more than one thing; cut it where the concepts part."""
    files = [p for p in ROOT.rglob("*.py") if not any(part.startswith(".") for part in p.relative_to(ROOT).parts)]
    files = [p for p in files if "egg-info" not in str(p)]
    assert len(files) > 50, files
    long = {str(p.relative_to(ROOT)): n for p in files if (n := len(p.read_text(encoding="utf-8").splitlines())) > 1000}
    assert not long, f"files over 1,000 lines: {long}"
