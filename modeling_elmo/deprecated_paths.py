"""Import paths that moved in 0.2 (issue 37's new layout), kept working for one release with a ``FutureWarning``.

``modeling_elmo/utils/`` became ``hub/``, ``inference/``, ``compat/`` and ``demo_models/``, and the demo models left
``commands/``. No folder is kept for the old names: each old module is a small stand-in placed in ``sys.modules``
when the package is imported, which hands every attribute over from its new module, warning with the new path.
Setting an attribute through the old path (``mock.patch``) sets it on the new module; ``from old import *`` works;
each stand-in has a ``__spec__`` (``importlib.util.find_spec``, ``pydoc``, ``help()`` find it). Importing the new
module is deferred to that first attribute (the stand-ins cost nothing to create).
"""

from __future__ import annotations

import importlib
import importlib.machinery
import sys
import types
import warnings

# old module -> new module
MOVED_MODULES = {
    "modeling_elmo.utils.allennlp_compat": "modeling_elmo.compat.allennlp",
    "modeling_elmo.utils.convert": "modeling_elmo.hub.convert",
    "modeling_elmo.utils.convert_manylangs": "modeling_elmo.hub.convert_manylangs",
    "modeling_elmo.utils.convert_softmax": "modeling_elmo.hub.convert_softmax",
    "modeling_elmo.utils.demo_model": "modeling_elmo.demo_models.model",
    "modeling_elmo.utils.download": "modeling_elmo.hub.download",
    "modeling_elmo.utils.download_manylangs": "modeling_elmo.hub.download_manylangs",
    "modeling_elmo.utils.embedding_elmo": "modeling_elmo.inference.embed_corpus",
    "modeling_elmo.utils.embedding_file": "modeling_elmo.inference.hdf5_file",
    "modeling_elmo.utils.export_elmo": "modeling_elmo.inference.export",
    "modeling_elmo.utils.hub": "modeling_elmo.hub.remote_code",
    "modeling_elmo.utils.inference": "modeling_elmo.inference.tf_hub",
    "modeling_elmo.utils.model_card": "modeling_elmo.hub.model_card",
    "modeling_elmo.utils.plots": "modeling_elmo.plots",
    "modeling_elmo.utils.precision": "modeling_elmo.inference.precision",
    "modeling_elmo.utils.quantize_elmo": "modeling_elmo.inference.quantize",
    "modeling_elmo.utils.reference_elmo": "modeling_elmo.reference_elmo",
    "modeling_elmo.utils.static_vectors": "modeling_elmo.inference.static_vectors",
    "modeling_elmo.utils.token_cache": "modeling_elmo.inference.token_cache",
    "modeling_elmo.commands.demo_lm": "modeling_elmo.demo_models.language_model",
    "modeling_elmo.commands.demo_model_card": "modeling_elmo.demo_models.model_card",
}
# old packages that no longer exist as folders
MOVED_PACKAGES = ("modeling_elmo.utils",)


class MovedModule(types.ModuleType):
    """Stands in for ``old``: every attribute comes from ``new``, with a ``FutureWarning`` naming the new path.
    Setting or deleting an attribute through the old path (``mock.patch``, ``monkeypatch.setattr``) sets
    or deletes it on ``new``, where the code that uses it looks, with the same warning; ``from old import *``
    imports ``new``'s public names (its ``__all__``), with one warning."""

    def __init__(self, old: str, new: str):
        super().__init__(old, f"Moved to {new}; this name is kept for one release.")
        self.__moved_to__ = new
        self.__star__: set[str] = set()  # the names a `from old import *` is fetching, after its one warning
        self.__spec__ = importlib.machinery.ModuleSpec(old, None, origin=f"moved to {new}")

    def _new_module(self) -> types.ModuleType:
        return importlib.import_module(self.__moved_to__)

    def _warn(self, what: str) -> None:
        warnings.warn(
            f"`{self.__name__}` moved to `{self.__moved_to__}`: {what} (the old path goes in the next release)",
            FutureWarning,
            stacklevel=3,
        )

    def __getattr__(self, name: str):
        if name == "__all__":  # `from old import *` and pydoc ask for it first
            module = self._new_module()
            names = list(getattr(module, "__all__", None) or [n for n in vars(module) if not n.startswith("_")])
            self._warn("import its names from there")
            self.__star__ = set(names)
            return names
        if name.startswith("__"):
            raise AttributeError(name)
        if name in self.__star__:  # warned once for the whole `import *`
            self.__star__.discard(name)
        else:
            self._warn(f"import `{name}` from there")
        return getattr(self._new_module(), name)

    def __setattr__(self, name: str, value) -> None:
        if name.startswith("__") and name.endswith("__"):  # the stand-in's own (module) attributes
            super().__setattr__(name, value)
            return
        self._warn(f"`{name}` was set on `{self.__moved_to__}`, where the code reads it; set it there")
        setattr(self._new_module(), name, value)

    def __delattr__(self, name: str) -> None:
        if name.startswith("__") and name.endswith("__"):
            super().__delattr__(name)
            return
        delattr(self._new_module(), name)

    def __dir__(self):
        return dir(self._new_module())


class MovedPackage(types.ModuleType):
    """Stands in for an old package folder: its submodules are the [`MovedModule`]s registered under it."""

    def __init__(self, old: str):
        super().__init__(old, "Removed in 0.2: its modules moved (modeling_elmo.deprecated_paths.MOVED_MODULES).")
        self.__path__ = []  # a package, so that `import old.sub` looks its submodules up in sys.modules
        self.__spec__ = importlib.machinery.ModuleSpec(old, None, origin="removed in 0.2", is_package=True)
        self.__spec__.submodule_search_locations = []


def moved_submodule(package: str, name: str) -> types.ModuleType:
    """The stand-in for ``package.name``, for a real package's ``__getattr__`` (``import package.name`` finds the
    stand-in in ``sys.modules`` but does not set it on ``package``); ``AttributeError`` if there is none."""
    module = sys.modules.get(f"{package}.{name}")
    if not isinstance(module, MovedModule):
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    return module


def install() -> None:
    """Puts the stand-ins in ``sys.modules`` (where none is there yet: a real module always wins), each also an
    attribute of its parent where the parent is a stand-in or already imported (``pydoc`` walks the attributes)."""
    for old in MOVED_PACKAGES:
        package = sys.modules.setdefault(old, MovedPackage(old))
        parent, _, child = old.rpartition(".")
        if parent in sys.modules:
            setattr(sys.modules[parent], child, package)
    for old, new in MOVED_MODULES.items():
        module = sys.modules.setdefault(old, MovedModule(old, new))
        parent, _, child = old.rpartition(".")
        if parent in MOVED_PACKAGES:
            setattr(sys.modules[parent], child, module)
