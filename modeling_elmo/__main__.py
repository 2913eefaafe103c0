"""``python -m modeling_elmo SCRIPT.py ARGS``: run an unmodified transformers script on plain ELMo folders.

A plain saved ELMo folder loads through the Auto classes only once ``import modeling_elmo`` has registered the
package with transformers (transformers has no plugin entry point for third-party model types). The official example
scripts (``run_ner.py``, ``run_classification.py``, ``run_glue.py``...) never import it. Running them through this
module imports the package first (Python imports a package before its ``__main__``), then runs the script as
``__main__`` with ``runpy.run_path``, as ``python SCRIPT.py ARGS`` would: ``sys.argv`` is ``[SCRIPT.py, *ARGS]``,
``__file__`` the script's absolute path, and the script's folder (through symbolic links), not the current one,
leads ``sys.path``; a folder or a zip file with a ``__main__.py`` runs as ``python FOLDER`` runs it. The package's
own imports run before this module, with the current folder first on ``sys.path`` (``python -m`` puts it there): a
``filelock.py`` or ``torch/`` in the current folder would shadow a library; ``python -P -m modeling_elmo`` keeps it
out. Launchers take it with their module flag:

    torchrun --nproc_per_node 2 -m modeling_elmo run_ner.py ARGS
    accelerate launch -m modeling_elmo run_ner.py ARGS
"""

from __future__ import annotations

import os
import runpy
import sys
import zipfile

USAGE = (
    "usage: python -m modeling_elmo SCRIPT.py [ARGS...]\n"
    "Registers ELMo with transformers' Auto classes, then runs SCRIPT.py as __main__ with ARGS, as\n"
    "`python SCRIPT.py ARGS` would. Under a launcher: `torchrun [OPTIONS] -m modeling_elmo SCRIPT.py ARGS`,\n"
    "`accelerate launch [OPTIONS] -m modeling_elmo SCRIPT.py ARGS`."
)


def main(argv: list[str] | None = None) -> None:
    """Run ``argv[0]`` (a Python file) as ``__main__`` with ``argv[1:]`` as its arguments.

    Raises:
        SystemExit: 2 with the usage when no script is given or it is not a file; otherwise whatever the script
            raises, its own exit status included.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE, file=sys.stdout if argv else sys.stderr)
        raise SystemExit(0 if argv else 2)
    script = argv[0]
    if not os.path.exists(script):
        print(f"python -m modeling_elmo: no such script file {script!r}\n{USAGE}", file=sys.stderr)
        raise SystemExit(2)
    # `python SCRIPT.py` puts the script's folder (through symbolic links) first on sys.path, where `python -m` put
    # the current folder: the script may import its neighbours (utils_qa.py), and a folder in the current one (a
    # local metric such as ./seqeval/) must not shadow an installed library of the same name. A folder or a zip
    # file with __main__.py goes first itself (runpy.run_path puts it there). Under -P (PYTHONSAFEPATH) the current
    # folder is not there to replace: the script's folder is put first all the same, as `python SCRIPT.py` does.
    if sys.path and sys.path[0] in ("", os.getcwd()) and not getattr(sys.flags, "safe_path", False):
        del sys.path[0]
    if os.path.isfile(script) and not zipfile.is_zipfile(script):
        sys.path.insert(0, os.path.dirname(os.path.realpath(script)))
        script = os.path.abspath(script)  # __file__, as `python SCRIPT.py` gives it
    sys.argv = [argv[0], *argv[1:]]
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
