"""Import paths that moved in 0.2 (issue 37's new layout), kept working for one release with a ``FutureWarning``.

``modeling_elmo/utils/`` became ``hub/``, ``inference/``, ``compat/`` and ``demo_models/``, and the demo models left
``commands/``. No folder is kept for the old names: each old module is a small stand-in placed in ``sys.modules``
when the package is imported, which hands every attribute over from its new module, warning once per name with the
new path. Importing the new module is deferred to that first attribute (the stand-ins cost nothing to create).
"""

from __future__ import annotations

import importlib
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
    """Stands in for ``old``: every attribute comes from ``new``, with a ``FutureWarning`` naming the new path."""

    def __init__(self, old: str, new: str):
        super().__init__(old, f"Moved to {new}; this name is kept for one release.")
        self.__moved_to__ = new

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        warnings.warn(
            f"`{self.__name__}` moved to `{self.__moved_to__}`: import `{name}` from there (the old path goes in "
            "the next release)",
            FutureWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(self.__moved_to__), name)

    def __dir__(self):
        return dir(importlib.import_module(self.__moved_to__))


class MovedPackage(types.ModuleType):
    """Stands in for an old package folder: its submodules are the [`MovedModule`]s registered under it."""

    def __init__(self, old: str):
        super().__init__(old, "Removed in 0.2: its modules moved (modeling_elmo.deprecated_paths.MOVED_MODULES).")
        self.__path__ = []  # a package, so that `import old.sub` looks its submodules up in sys.modules


def install() -> None:
    """Puts the stand-ins in ``sys.modules`` (where none is there yet: a real module always wins)."""
    for old in MOVED_PACKAGES:
        sys.modules.setdefault(old, MovedPackage(old))
    for old, new in MOVED_MODULES.items():
        module = sys.modules.setdefault(old, MovedModule(old, new))
        parent, _, child = old.rpartition(".")
        if parent in MOVED_PACKAGES:
            setattr(sys.modules[parent], child, module)
