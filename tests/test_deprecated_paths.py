"""The import paths that moved with the new layout keep working for one release, each with a FutureWarning that
names the new path; the new paths import without one."""

from __future__ import annotations

import importlib
import subprocess
import sys
import warnings

import pytest

import modeling_elmo
from modeling_elmo.deprecated_paths import MOVED_MODULES


def _public_name(module_name: str) -> str:
    module = importlib.import_module(module_name)
    names = [
        n for n, v in vars(module).items() if not n.startswith("_") and getattr(v, "__module__", None) == module_name
    ]
    assert names, f"{module_name} defines no public function or class"
    return sorted(names)[0]


@pytest.mark.parametrize(("old", "new"), sorted(MOVED_MODULES.items()))
def test_old_path_warns_and_gives_the_new_object(old, new):
    name = _public_name(new)
    with pytest.warns(FutureWarning, match=new.replace(".", r"\.")):
        value = getattr(importlib.import_module(old), name)
    assert value is getattr(importlib.import_module(new), name)


def test_from_import_of_every_old_path_in_a_fresh_interpreter():
    """`from OLD import NAME`, as user code writes it, in a new process where nothing was imported beforehand."""
    lines = ["import warnings", "warnings.simplefilter('error', FutureWarning)"]
    for old, new in sorted(MOVED_MODULES.items()):
        name = _public_name(new)
        lines += [f"try:\n    from {old} import {name}\n    print('SILENT', {old!r})", "except FutureWarning as e:"]
        lines.append(f"    print('WARNED' if {new!r} in str(e) else 'WRONG', {old!r})")
    out = subprocess.run([sys.executable, "-c", "\n".join(lines)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split("\n").count("") == 1 and out.stdout.count("WARNED") == len(MOVED_MODULES), out.stdout


def test_new_paths_and_public_accessors_do_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        for new in MOVED_MODULES.values():
            importlib.import_module(new)
        from modeling_elmo import demo_language_model_path, demo_model_path

    assert demo_model_path() == importlib.import_module("modeling_elmo.demo_models.model").DEMO_MODEL_DIR
    assert callable(demo_language_model_path)
    assert "demo_model_path" in modeling_elmo.__all__ and "demo_language_model_path" in modeling_elmo.__all__
