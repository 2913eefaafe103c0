"""The import paths that moved with the new layout keep working for one release, each with a FutureWarning that
names the new path; the new paths import without one."""

from __future__ import annotations

import importlib
import json
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


# Issue 44 L6-L8: monkeypatching through an old path, `import *`, and the stand-ins' specs.

OLD, NEW = "modeling_elmo.utils.convert", "modeling_elmo.hub.convert"


def test_patching_through_an_old_path_reaches_the_new_module():
    """``mock.patch`` and a plain setattr through the old path land on the new module, where the code reads the name
    (before: on the stand-in only, silently), with a FutureWarning naming the new path; the patch undoes cleanly."""
    from unittest import mock

    new = importlib.import_module(NEW)
    name = _public_name(NEW)
    original = getattr(new, name)
    with pytest.warns(FutureWarning, match=NEW.replace(".", r"\.")), mock.patch(f"{OLD}.{name}", "patched"):
        assert getattr(new, name) == "patched"
    assert getattr(new, name) is original
    old = importlib.import_module(OLD)
    with pytest.warns(FutureWarning, match=rf"`{name}` was set on `{NEW}`"):
        setattr(old, name, "set")
    try:
        assert getattr(new, name) == "set"
    finally:
        setattr(new, name, original)


def test_star_import_of_an_old_path_gives_the_new_names_with_one_warning():
    """``from OLD import *`` (before: nothing, silently) in a fresh interpreter: the new module's public names, one
    FutureWarning for the whole import."""
    code = f"""
import json, warnings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    from {OLD} import *
import {NEW} as new
names = getattr(new, "__all__", None) or [n for n in vars(new) if not n.startswith("_")]
missing = [n for n in names if globals().get(n) is not getattr(new, n)]
moved = [str(w.message) for w in caught if issubclass(w.category, FutureWarning) and "{NEW}" in str(w.message)]
print(json.dumps([len(names), missing, len(moved)]))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    count, missing, warned = json.loads(out.stdout)
    assert count > 0 and missing == [] and warned == 1, out.stdout


@pytest.mark.parametrize("old", sorted([*MOVED_MODULES, "modeling_elmo.utils"]))
def test_old_paths_have_a_spec_and_pydoc_finds_them(old):
    """``importlib.util.find_spec`` (before: ValueError, ``__spec__`` is None) and ``pydoc.locate``, which ``help()``
    uses (before: None for every old path: it walks the parents' attributes)."""
    import importlib.util
    import pydoc

    spec = importlib.util.find_spec(old)
    assert spec is not None and spec.name == old
    assert pydoc.locate(old) is sys.modules[old]
