"""Every command and code block of README.md and docs/*.md runs as written: the docs must stay accurate.

The pages run in PAGES order (then any other page of docs/, by name) in one scratch folder, each Python block in
a namespace of its own, as a reader who copies that block alone runs it (issue 51: a block used a class that an
earlier block had imported); a block that goes on from the one above says so in a comment (``CONTINUES``) and
runs with that block's names. They run against small stand-ins for what a user would have: the released weights' file
names hold the TensorFlow fixture model (random weights in the released HDF5 layout), and the corpus, vocabulary and
CoNLL files hold a few sentences. Only these changes are made, each for a reason a user would not meet:

- training commands get ``--max_steps 2`` (and small evaluation sets) appended: the docs' budgets take hours;
- loading the Hub id ``you/elmo-original`` loads the local folder instead, and ``HfApi.upload_folder`` records
  what it would upload (no network here; ``tests/test_hub.py`` tests ``push_to_hub`` at the HTTP boundary);
- ``elmo download`` and ``download_released_model`` fetch from a local HTTP server that serves the fixture under the
  released file names (``ELMO_DOWNLOAD_BASE_URL``), into a cache in the scratch folder (``ELMO_CACHE_DIR``);
- launcher lines that need GPUs, several machines or stand for "the same flags" (``...``) are not run: their
  launcher must exist and their flags must parse.

Each block is one test, ``test_docs_block_runs[PAGE:LINE]``, run in page order (selected alone, a block first runs
the blocks before it). A block that needs an optional library that is not installed skips, and says which library
and which extra installs it (``pip install -e ".[demo]"``; ``-rfEs`` in pyproject's addopts prints every reason):
what a block needs is read from its imports (with ``ast``) and its commands, and looked up in ``NEEDS`` for the
package's names that import a library only when they run. A block that uses what a skipped or failed block made (a
name of the block it continues, a file or folder) skips too, naming that block. CI installs every extra, so there
(``CI=true`` or ``ELMO_REQUIRE_SHARED=1``) a missing library fails the block instead. What a block promises
(shapes, files, results) is checked right after it runs (``PROMISES``).

Blocks that other tests already run are listed in ``COVERED_ELSEWHERE`` and checked to be there. ``text`` blocks
are output shown to the reader and are not run. A new block that no rule covers fails the test: add a rule here when
you add it to a page.
"""

from __future__ import annotations

import ast
import builtins
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import OPTIONAL_LIBRARIES, extras_required, install_hint

REPO = Path(__file__).resolve().parent.parent
RELEASED = "elmo_2x4096_512_2048cnn_2xhighway"  # the file names in the converter examples
# The order matters where a page uses what an earlier one made (the converted "elmo-original" folder).
PAGES = ["README.md", "docs/released-models.md", "docs/usage.md", "docs/training.md", "docs/migrating.md"]


def pages() -> list[str]:
    others = sorted(f"docs/{p.name}" for p in (REPO / "docs").glob("*.md") if f"docs/{p.name}" not in PAGES)
    return PAGES + others


@dataclass
class Block:
    page: str
    language: str
    code: str
    line: int  # of the opening fence
    section: str  # the "## " heading above it ("" before the first)

    def __str__(self) -> str:
        return f"{self.page}:{self.line} ({self.section or 'first screen'}, {self.language})"


def page_blocks(page: str) -> list[Block]:
    text = (REPO / page).read_text(encoding="utf-8")
    blocks = []
    for match in re.finditer(r"^```(\w*)\n(.*?)^```", text, re.S | re.M):
        before = text[: match.start()]
        headings = re.findall(r"^## (.+)$", before, re.M)
        section = headings[-1] if headings else ""
        blocks.append(Block(page, match.group(1), match.group(2), before.count("\n") + 1, section))
    return blocks


def all_blocks() -> list[Block]:
    return [block for page in pages() for block in page_blocks(page)]


def shell_commands(code: str) -> list[list[str]]:
    """The commands of a bash block: continuation lines joined, ``&&`` chains split, comments dropped."""
    commands = []
    for line in code.replace("\\\n", " ").splitlines():
        for part in line.split("&&"):
            argv = shlex.split(part, comments=True)
            if argv:
                commands.append(argv)
    return commands


# Blocks run by other tests or by .ci/run: (section, the first words every command starts with) -> where.
COVERED_ELSEWHERE = {
    ("", ("pip", "elmo", "python")): (
        "the main job: tests/test_cli.py::test_readme_main_job_command_runs_on_the_demo_model; the test command: "
        ".ci/run (tests/test_cli.py::test_readme_first_screen checks that they are the same)"
    ),
    ("Install", ("pip",)): ".ci/run installs torch, then the package with its extras, in a fresh virtual environment",
    ("The `elmo` command", ("elmo", "echo")): "tests/test_cli.py::test_readme_elmo_examples_run",
    ("Tests", ("python",)): ".ci/run runs the README's test command",
    ("Unmodified transformers scripts", ("python", "torchrun", "accelerate")): (
        "tests/test_official_recipes.py (python -m modeling_elmo alone, under torchrun and accelerate launch); the "
        "official scripts are not in the checkout"
    ),
}


def _covered_elsewhere(block: Block) -> str | None:
    if block.language != "bash":
        return None
    firsts = {argv[0] for argv in shell_commands(block.code)}
    for (section, allowed), where in COVERED_ELSEWHERE.items():
        if block.section == section and firsts <= set(allowed):
            return where
    return None


# --------------------------------------------------------------------------------------------------
# The scratch folder: what a reader of the docs would have


SENTENCES = [
    "The cat sat on the mat .",
    "A dog sees the cat .",
    "The bank of the river is muddy .",
    "She went to the bank to open an account .",
    "John Smith lives in New York .",
    "The river runs past the old mill .",
] * 4
CONLL = [
    [("John", "B-PER"), ("Smith", "I-PER"), ("lives", "O"), ("in", "O"), ("Paris", "B-LOC"), (".", "O")],
    [("EU", "B-ORG"), ("rejects", "O"), ("German", "B-MISC"), ("call", "O"), (".", "O")],
    [("Mary", "B-PER"), ("went", "O"), ("to", "O"), ("London", "B-LOC"), ("yesterday", "O"), (".", "O")],
] * 6


@pytest.fixture(scope="module")
def workspace(fixture_dir: Path, tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("docs")
    shutil.copy(fixture_dir / "options.json", work / f"{RELEASED}_options.json")
    shutil.copy(fixture_dir / "lm_weights.hdf5", work / f"{RELEASED}_weights.hdf5")
    text = "\n".join(SENTENCES) + "\n"
    for name in ("corpus.txt", "heldout.txt", "domain.txt", "domain-dev.txt"):
        (work / name).write_text(text, encoding="utf-8")
    words = sorted({w for s in SENTENCES for w in s.split()})
    (work / "vocab-2016-09-10.txt").write_text("\n".join(["<S>", "</S>", "<UNK>", *words]) + "\n", encoding="utf-8")
    (work / "conll2003").mkdir()
    conll = "-DOCSTART- -X- -X- O\n\n" + "".join(
        "".join(f"{word} NNP O {tag}\n" for word, tag in sentence) + "\n" for sentence in CONLL
    )
    for name in ("train.txt", "dev.txt"):
        (work / "conll2003" / name).write_text(conll, encoding="utf-8")
    # The docs' own sample data, read by its path in a checkout (docs/training.md's first example).
    shutil.copytree(REPO / "docs" / "data", work / "docs" / "data")
    return work


@pytest.fixture(scope="module")
def download_server(fixture_dir: Path, tmp_path_factory):
    """A local HTTP server holding the fixture under every released model's file names (no network here)."""
    import functools
    import threading
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    from modeling_elmo.hub.download import RELEASED_MODELS

    root = tmp_path_factory.mktemp("released")
    for model in RELEASED_MODELS.values():
        for source, name in (
            (fixture_dir / "options.json", model.options),
            (fixture_dir / "lm_weights.hdf5", model.weights),
        ):
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(source, root / name)

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


# --------------------------------------------------------------------------------------------------
# Running shell commands


TRAINING_BUDGET = {
    "modeling_elmo.training.train_lm": ["--max_steps", "2", "--max_eval_samples", "8", "--save_steps", "1000"],
    "modeling_elmo.training.train_tagger": ["--max_steps", "2", "--save_steps", "1000"],
}
GPU_ONLY = ("--nproc_per_node 8", "--num_processes 8", "--nnodes")


def _module(argv: list[str]) -> str | None:
    return argv[argv.index("-m") + 1] if "-m" in argv else None


def which(command: str) -> str | None:
    """The command of the environment that runs the tests (beside its Python), else the first on PATH."""
    return shutil.which(command, path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")


def _check_not_runnable(argv: list[str], block: Block) -> None:
    """A launcher line that cannot run here: the launcher exists and the module's flags parse."""
    assert argv[0] in ("torchrun", "accelerate"), f"{block}: only launcher lines may be left unrun: {argv}"
    assert which(argv[0]), f"{block}: {argv[0]} is not installed"
    module = _module(argv)
    assert module == "modeling_elmo.training.train_lm", f"{block}: unexpected module in {argv}"
    from modeling_elmo.training.train_lm import build_parser

    flags = [a for a in argv[argv.index("-m") + 2 :] if a != "..."]
    known, unknown = build_parser().parse_known_args([*flags, "--output_dir", "x"])
    assert not unknown, f"{block}: flags the command does not know: {unknown}"


# Plain shell tools a block may use to make its input or show its output: such a block runs whole, in bash.
SHELL_TOOLS = ("printf", "echo", "head", "ls", "cat", "wc", "grep")


def run_whole_in_bash(block: Block, work: Path) -> int:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"  # `elmo` of this environment
    done = subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", block.code],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"{block}\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    return len(shell_commands(block.code))


def run_shell_block(block: Block, work: Path) -> int:
    pipes = any(part in ("|", ">", "<") for argv in shell_commands(block.code) for part in argv)
    if pipes or any(argv[0] in SHELL_TOOLS for argv in shell_commands(block.code)):
        return run_whole_in_bash(block, work)
    ran = 0
    for argv in shell_commands(block.code):
        line = " ".join(argv)
        if "..." in argv or any(marker in line for marker in GPU_ONLY):
            _check_not_runnable(argv, block)
            continue
        if argv[0] == "python":
            argv = [sys.executable, *argv[1:]]
            if argv[1].endswith(".py"):
                argv[1] = str(REPO / argv[1])  # the docs run it from the checkout
        elif argv[0] in ("elmo", "elmo-convert", "torchrun", "accelerate"):
            found = which(argv[0])
            assert found, f"{block}: {argv[0]} is not installed (pip install -e .)"
            argv = [found, *argv[1:]]
        else:
            pytest.fail(f"{block}: no rule to run {argv[0]!r}; extend tests/test_docs.py")
        if "--predict" not in argv:  # tagging with a saved tagger takes no training options
            argv += TRAINING_BUDGET.get(_module(argv) or "", [])
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
        if argv[1:2] == ["download"]:  # it fetches from the local server (download_server), never the Hub
            env.pop("HF_HUB_OFFLINE")
        done = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"{block}: {line}\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
        ran += 1
    return ran


# --------------------------------------------------------------------------------------------------
# What a block needs: optional libraries, and what earlier blocks made

# What imports an optional library only when it runs, so that the block's own imports do not show it: names of the
# package (a module, or a name in one) that a Python block imports or a shell block runs with ``-m``, and commands
# (``elmo SUBCOMMAND``, ``elmo SUBCOMMAND --FLAG``, a launcher).
NEEDS = {
    "modeling_elmo.commands.demo.build_app": ("gradio",),
    "modeling_elmo.commands.demo.DemoModels": ("matplotlib",),  # its views draw figures
    "modeling_elmo.plots": ("matplotlib",),
    "modeling_elmo.inference.export.export_onnx": ("onnx", "onnxscript"),
    "modeling_elmo.inference.export.ElmoOnnxSession": ("onnxruntime",),
    "modeling_elmo.integrations.sentence_transformers": ("sentence_transformers",),
    "modeling_elmo.integrations.spacy": ("spacy",),
    "modeling_elmo.training": ("datasets", "accelerate", "seqeval"),
    "elmo train-lm": ("datasets", "accelerate", "seqeval"),
    "elmo train-tagger": ("datasets", "accelerate", "seqeval"),
    "elmo demo": (),  # `elmo demo --help` runs without gradio; serving the app is not in the docs' blocks
    "elmo similar --plot": ("matplotlib",),
    "elmo embed --output_dir": ("datasets",),  # Parquet shards (issue 39)
    "elmo embed --dataset_name": ("datasets",),
    "elmo embed --data_files": ("datasets",),
    "elmo embed --train_file": ("datasets",),
    "modeling_elmo.inference.embed_dataset": ("datasets",),
    "modeling_elmo.inference.parquet_shards": ("datasets",),
    "accelerate": ("accelerate",),
}
# Calls whose last string argument names what the block makes (a file or a folder that later blocks may use).
MAKERS = {"save", "save_pretrained", "save_with_remote_code", "to_disk", "savefig", "export_onnx", "export_word2vec"}
# The flags of shell commands that name what they make.
OUTPUT_FLAGS = ("--output_dir", "--output_file", "-o", ">")


def _needs_of_name(name: str) -> set[str]:
    """The optional libraries that importing or running ``name`` (a dotted Python name or a command) needs."""
    found = {name.split(".")[0]} & set(OPTIONAL_LIBRARIES)
    for key, libraries in NEEDS.items():
        if name == key or name.startswith(key + "."):
            found |= set(libraries)
    return found


def _imported_names(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return names


def _shell_names(argv: list[str]) -> set[str]:
    names = {argv[0]}
    if "-m" in argv:
        names.add(_module(argv))
    if argv[0] == "elmo" and len(argv) > 1:
        names |= {f"elmo {argv[1]}"} | {f"elmo {argv[1]} {a}" for a in argv[2:] if a.startswith("--")}
    return names


def block_needs(block: Block) -> set[str]:
    """The optional libraries ``block`` needs: what it imports (read with ast) or runs, looked up in NEEDS."""
    if block.language == "python":
        names = _imported_names(ast.parse(block.code))
    else:
        names = {name for argv in shell_commands(block.code) for name in _shell_names(argv)}
    return set().union(*map(_needs_of_name, names)) if names else set()


def missing_extras(block: Block) -> str | None:
    """Why ``block`` cannot run here: the libraries it needs that are not installed, and the pip extra to install;
    None if it has them all."""
    missing = sorted(lib for lib in block_needs(block) if importlib.util.find_spec(lib) is None)
    return f"needs {', '.join(missing)}: {install_hint(missing)}" if missing else None


def _defines_and_uses(code: str) -> tuple[set[str], set[str]]:
    """The names a Python block defines, and those it uses without defining them (from earlier blocks)."""
    tree = ast.parse(code)
    defined, loaded = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (defined if isinstance(node.ctx, ast.Store | ast.Del) else loaded).add(node.id)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            defined |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            defined.add(node.name)
        elif isinstance(node, ast.arg):  # a function's parameters
            defined.add(node.arg)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            defined.add(node.name)
    return defined, loaded - defined - set(dir(builtins))


# A comment that says a Python block goes on from the Python block above it on its page: it runs with that block's
# names (and, through it, with those of the block that one continues).
CONTINUES = re.compile(r"#.*\bcontinues the block above\b")


def continued(block: Block, earlier: list[Block]) -> Block | None:
    """The Python block of its page that ``block`` says it continues (``CONTINUES``), or None: it runs alone."""
    if block.language != "python" or not CONTINUES.search(block.code):
        return None
    above = [b for b in earlier if b.page == block.page and b.language == "python"]
    assert above, f"{block} says it continues the block above, and there is none"
    return above[-1]


def made_by(block: Block) -> set[str]:
    """The files and folders ``block`` makes, as named in its code (see MAKERS and OUTPUT_FLAGS)."""
    made = set()
    if block.language == "python":
        for node in ast.walk(ast.parse(block.code)):
            if isinstance(node, ast.Call):
                name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                strings = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
                if name in MAKERS and strings:
                    made.add(strings[-1])
    elif block.language == "bash":
        for argv in shell_commands(block.code):
            made |= {argv[i + 1] for i, a in enumerate(argv[:-1]) if a in OUTPUT_FLAGS}
    return made


def uses_file(block: Block, name: str) -> bool:
    """Whether ``block`` names the file or folder ``name`` (alone or as part of a path) in its strings (Python) or
    its commands' words (bash); comments do not count."""
    if block.language == "python":
        words = [n.value for n in ast.walk(ast.parse(python_code(block))) if isinstance(n, ast.Constant)]
    else:
        words = [word for argv in shell_commands(block.code) for word in argv]
    pattern = re.compile(rf"(?<![\w./-]){re.escape(name)}(?![\w-])")  # "x/vocab.txt" is another file
    return any(isinstance(word, str) and pattern.search(word) for word in words)


def dependencies(block: Block, earlier: list[Block]) -> list[tuple[Block, str]]:
    """The earlier blocks whose results ``block`` uses, with what it uses: the names of the block it continues (and
    of the blocks that one continues), and files or folders that an earlier block (of any page) made."""
    found: dict[str, tuple[Block, str]] = {}
    chain, above = [], continued(block, earlier)
    while above is not None:
        chain.append(above)
        above = continued(above, earlier[: earlier.index(above)])
    for name in sorted(_defines_and_uses(block.code)[1] if chain else ()):
        for before in chain:
            if name in _defines_and_uses(before.code)[0]:
                found.setdefault(str(before), (before, f"`{name}`"))
                break
    own = made_by(block)  # a file the block makes itself is no dependency
    for before in reversed(earlier):
        for name in sorted(made_by(before) - own):
            if uses_file(block, name):
                found.setdefault(str(before), (before, name))
    return list(found.values())


# --------------------------------------------------------------------------------------------------
# Running Python blocks


def python_code(block: Block) -> str:
    """The block's code as it runs here: loading from the Hub id loads the local folder that would have been
    uploaded."""
    return block.code.replace('from_pretrained("you/elmo-original"', 'from_pretrained("elmo-original"')


def run_python_block(block: Block, namespace: dict) -> None:
    exec(compile(python_code(block), str(block), "exec"), namespace)  # noqa: S102  (the docs' own code)


# --------------------------------------------------------------------------------------------------
# What the blocks promise, checked on what they made, right after the block ran: (page, a line of the block) -> check


def _readme_quick_start(run: DocsRun, names: dict) -> None:
    assert tuple(names["out"].elmo.shape) == (2, 7, 128)  # the demo model: 2 * projection 64


def _readme_download(run: DocsRun, names: dict) -> None:
    assert (run.work / "elmo-cache" / "small" / "model.safetensors").is_file()


def _converted(run: DocsRun, names: dict) -> None:
    assert (run.work / "elmo-original" / "model.safetensors").is_file()


def _uploaded(run: DocsRun, names: dict) -> None:
    assert run.uploads and run.uploads[0]["repo_id"] == "you/elmo-original"
    assert {"config.json", "model.safetensors", "README.md"} <= set(run.uploads[0]["files"])


def _exported(run: DocsRun, names: dict) -> None:
    assert (run.work / "elmo.onnx").is_file()


def _usage_vectors(run: DocsRun, names: dict) -> None:
    # "The cat sat on the mat ." and "Hello !"
    assert tuple(names["out"].elmo.shape[:2]) == (2, 7)


def _lm_trained(folder: str):
    def check(run: DocsRun, names: dict) -> None:
        results = json.loads((run.work / folder / "eval_results.json").read_text())
        assert {"eval_forward_perplexity", "eval_backward_perplexity", "eval_perplexity"} <= set(results)

    return check


def _tagger_trained(run: DocsRun, names: dict) -> None:
    assert json.loads((run.work / "ner-elmo" / "all_results.json").read_text())["train_steps"] == 2


def _tagger_tags(run: DocsRun, training: dict) -> None:
    tags = training["tagger"].predict(**training["batch"])
    assert len(tags) == 1 and len(tags[0]) == 5
    assert all("entity_group" in span for span in training["ner"]("John Smith lives in New York."))


PROMISES = [
    ("README.md", "out = model(**batch, output_hidden_states=True)", _readme_quick_start),
    ("README.md", 'download_released_model("small")', _readme_download),
    ("docs/released-models.md", "--output_dir elmo-original", _converted),
    ("docs/released-models.md", "HfApi().upload_folder(", _uploaded),
    ("docs/released-models.md", 'export_onnx(wrapper, "elmo.onnx")', _exported),
    ("docs/usage.md", "out = model(**batch, output_hidden_states=True)", _usage_vectors),
    ("docs/training.md", "--output_dir elmo-mine", _lm_trained("elmo-mine")),
    ("docs/training.md", "--output_dir elmo-original-domain", _lm_trained("elmo-original-domain")),
    ("docs/training.md", "--output_dir ner-elmo", _tagger_trained),
    ("docs/training.md", "tagger.predict(**batch)", _tagger_tags),
]


# --------------------------------------------------------------------------------------------------
# The run: every block in order, each one a test


def runnable_blocks() -> list[Block]:
    """The blocks this file runs: bash and Python blocks that no other test covers."""
    return [b for b in all_blocks() if b.language in ("bash", "python") and not _covered_elsewhere(b)]


@dataclass
class DocsRun:
    """The blocks run so far, in order, in one scratch folder: what each one gave (``"ran"``, or why it skipped or
    failed), the Python namespace of each page, and what was "uploaded"."""

    work: Path
    blocks: list[Block]
    outcomes: dict[str, tuple[str, str]]
    namespaces: dict[str, dict]  # the names of each Python block that ran, by str(block)
    uploads: list[dict]

    def run_through(self, index: int) -> None:
        """Run the blocks before ``index`` that have not run yet (their outcomes kept for their own tests), then
        block ``index``: ``pytest.skip`` with the reason where it cannot run here, its error where it fails."""
        for before in range(index):
            if str(self.blocks[before]) not in self.outcomes:
                try:
                    self._run(before)
                except (Exception, pytest.fail.Exception, pytest.skip.Exception):
                    pass  # kept in self.outcomes; its own test reports it
        self._run(index)

    def _run(self, index: int) -> None:
        block = self.blocks[index]
        key = str(block)
        if key in self.outcomes:  # ran in an earlier test: repeat what it gave
            status, why = self.outcomes[key]
            if status == "skipped":
                pytest.skip(f"{block}: {why}")
            if status == "failed":
                pytest.fail(why, pytrace=False)
            return
        why = missing_extras(block)
        if why is None:
            for before, what in dependencies(block, self.blocks[:index]):
                status, cause = self.outcomes.get(str(before), ("ran", ""))
                if status != "ran":
                    why = f"uses {what} from {before}, which {'failed' if status == 'failed' else 'was skipped'}"
                    why += f" ({cause})" if status == "skipped" else ""
                    break
        elif extras_required():
            self.outcomes[key] = ("failed", f"{block}: {why}; CI installs every extra")
            pytest.fail(self.outcomes[key][1], pytrace=False)
        if why is not None:
            self.outcomes[key] = ("skipped", why)
            pytest.skip(f"{block}: {why}")
        try:
            self._execute(block)
        except BaseException as error:
            self.outcomes[key] = ("failed", f"{block}: {type(error).__name__}: {str(error)[-2000:]}")
            raise
        self.outcomes[key] = ("ran", "")

    def _execute(self, block: Block) -> None:
        if block.language == "bash":
            run_shell_block(block, self.work)
        else:
            try:
                above = continued(block, self.blocks[: self.blocks.index(block)])
                names = dict(self.namespaces.get(str(above), {})) if above is not None else {}
                namespace = self.namespaces[str(block)] = {**names, "__name__": "__docs__"}
                run_python_block(block, namespace)
            except ModuleNotFoundError as error:
                library = (error.name or "").split(".")[0]
                if library in OPTIONAL_LIBRARIES:
                    raise AssertionError(
                        f"{block} imports {error.name} without a rule that says so: add it to NEEDS in "
                        f"tests/test_docs.py, so that the block skips where the [{OPTIONAL_LIBRARIES[library]}] "
                        "extra is not installed"
                    ) from error
                raise
        for page, needle, check in PROMISES:
            if page == block.page and needle in block.code:
                check(self, self.namespaces.get(str(block), {}))


@pytest.fixture(scope="module")
def docs_run(workspace: Path, download_server: str) -> DocsRun:
    return DocsRun(workspace, RUNNABLE, {}, {}, [])


@pytest.fixture
def docs_env(docs_run: DocsRun, download_server: str, monkeypatch):
    """What a reader's machine has instead of the network: the local mirror, a cache in the scratch folder, and
    ``HfApi.upload_folder`` recording what it would upload; the scratch folder is the working directory."""
    import huggingface_hub

    monkeypatch.setenv("ELMO_DOWNLOAD_BASE_URL", download_server)
    monkeypatch.setenv("ELMO_CACHE_DIR", str(docs_run.work / "elmo-cache"))

    def upload_folder(self, *, folder_path, repo_id, **kwargs):
        docs_run.uploads.append({"repo_id": repo_id, "files": sorted(os.listdir(folder_path))})

    monkeypatch.setattr(huggingface_hub.HfApi, "upload_folder", upload_folder)
    monkeypatch.chdir(docs_run.work)
    return docs_run


RUNNABLE = runnable_blocks()


@pytest.mark.parametrize("index", range(len(RUNNABLE)), ids=[f"{b.page}:{b.line}" for b in RUNNABLE])
@pytest.mark.slow  # measured over 30 s on a busy 2-core machine (issue 44 F1)
def test_docs_block_runs(index: int, docs_env: DocsRun):
    """Each block of the docs runs as written (after the blocks before it, in page order). A block that needs an
    optional library that is not installed skips, naming the library and the extra to install, and so does a block
    that uses what a skipped or failed block made."""
    docs_env.run_through(index)


# --------------------------------------------------------------------------------------------------
# Fast checks of the rules


def test_docs_blocks_are_all_recognised():
    """A fast check that fails on a block no rule knows, before the slow test runs them."""
    for block in all_blocks():
        assert block.language in ("bash", "python", "text"), f"{block}: mark the block bash, python or text"
        if block.language == "bash" and not _covered_elsewhere(block):
            for argv in shell_commands(block.code):
                assert argv[0] in ("python", "elmo", "elmo-convert", "torchrun", "accelerate", *SHELL_TOOLS), (
                    block,
                    argv,
                )


def test_every_promise_names_one_block_that_runs():
    for page, needle, check in PROMISES:
        matches = [b for b in runnable_blocks() if b.page == page and needle in b.code]
        assert len(matches) == 1, f"{check.__name__}: {len(matches)} blocks of {page} hold {needle!r}"


def test_the_optional_libraries_are_those_of_the_extras():
    """OPTIONAL_LIBRARIES (tests/conftest.py) names, for each library, an extra of pyproject.toml that installs it,
    and NEEDS names only those libraries."""
    tomllib = pytest.importorskip("tomllib", reason="reading pyproject.toml needs Python 3.11")
    extras = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    for library, extra in OPTIONAL_LIBRARIES.items():
        names = {re.split(r"[<>=!~;\[ ]", r, maxsplit=1)[0].replace("-", "_").lower() for r in extras[extra]}
        assert library in names, f"{library} is not in the [{extra}] extra: {extras[extra]}"
    assert {library for libraries in NEEDS.values() for library in libraries} <= set(OPTIONAL_LIBRARIES)
    # And the other way: every library of the package's extras is in the table, so that a block using it can skip.
    for extra, requirements in extras.items():
        for requirement in requirements if extra not in ("test", "dev") else []:
            name = re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0].replace("-", "_").lower()
            assert name == "modeling_elmo" or name in OPTIONAL_LIBRARIES, (extra, requirement)


def _block(page: str, needle: str) -> Block:
    (block,) = [b for b in all_blocks() if b.page == page and needle in b.code]
    return block


@pytest.mark.parametrize(
    ("page", "needle", "libraries", "install"),
    [
        ("docs/demo.md", "build_app(models)", ["gradio", "matplotlib"], 'pip install -e ".[demo]"'),
        ("docs/integrations.md", "from gensim.models import KeyedVectors", ["gensim"], 'pip install -e ".[gensim]"'),
        ("docs/integrations.md", "import spacy", ["spacy"], 'pip install -e ".[spacy]"'),
        ("docs/released-models.md", "export_onnx(", ["onnx", "onnxscript"], 'pip install -e ".[export]"'),
        ("docs/training.md", "--output_dir elmo-mine", ["accelerate", "datasets", "seqeval"], '".[train]"'),
        ("docs/demo.md", "--plot record.png", ["matplotlib"], 'pip install -e ".[demo]"'),
    ],
    ids=["demo", "gensim", "spacy", "onnx", "train", "plot"],
)
def test_a_block_without_its_libraries_skips_naming_the_extra(page, needle, libraries, install, monkeypatch):
    """Issue 36: without gradio (or gensim...), the docs test failed on ModuleNotFoundError; the block's needs are
    read from its imports and commands, and the reason names the extra."""
    block = _block(page, needle)
    assert set(libraries) <= block_needs(block)
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name in libraries else find_spec(name))
    why = missing_extras(block)
    assert why and install in why and all(lib in why for lib in libraries), why


def test_a_block_that_uses_a_skipped_blocks_results_skips_too(tmp_path, monkeypatch):
    """The names of the block a block continues, and files an earlier block made, are dependencies."""
    made = Block("x.md", "bash", "python -m modeling_elmo.training.train_tagger --output_dir ner-elmo\n", 1, "")
    defines = Block("x.md", "python", "import gensim\nvectors = gensim.models.KeyedVectors(4)\n", 5, "")
    uses = Block(
        "x.md", "python", '# continues the block above\ntagger = load("ner-elmo")\nprint(vectors, tagger)\n', 9, ""
    )
    alone = Block("x.md", "python", 'print(open("ner-elmo-other").read())\n', 13, "")
    assert made_by(made) == {"ner-elmo"}
    assert [(str(b), what) for b, what in dependencies(uses, [made, defines])] == [
        (str(defines), "`vectors`"),
        (str(made), "ner-elmo"),
    ]
    assert dependencies(alone, [made, defines]) == []
    run = DocsRun(tmp_path, [made, defines, uses, alone], {}, {}, [])
    run.outcomes[str(made)] = ("skipped", 'needs datasets: pip install -e ".[train]"')
    run.outcomes[str(defines)] = ("skipped", 'needs gensim: pip install -e ".[gensim]"')
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.delenv("ELMO_REQUIRE_SHARED", raising=False)
    with pytest.raises(pytest.skip.Exception, match=r"uses `vectors` from x.md:5 .*, which was skipped \(needs gensim"):
        run.run_through(2)


def test_every_python_block_stands_alone_or_says_which_block_it_continues():
    """Issue 51: docs/usage.md's stateful block used ``ElmoModel`` without importing it: pasted alone, it stopped on a
    NameError (the docs test ran each page's blocks in one namespace and did not see it). A Python block defines
    every name it uses, or says in a comment that it continues the block above (``CONTINUES``), which defines them;
    the slow test runs each block so, in a namespace of its own."""
    blocks = runnable_blocks()
    unbound = []
    for index, block in enumerate(blocks):
        if block.language != "python":
            continue
        _, uses = _defines_and_uses(block.code)
        chain, above = [], continued(block, blocks[:index])
        while above is not None:
            chain.append(above)
            above = continued(above, blocks[: blocks.index(above)])
        given = set().union(*(_defines_and_uses(before.code)[0] for before in chain))
        unbound += [f"{block}: {name}" for name in sorted(uses - given)]
    assert not unbound, "names that a block uses and neither defines nor continues from the block above:\n" + "\n".join(
        unbound
    )


def test_readme_is_short_and_links_every_page():
    """The README is the first screen: at most 12 KiB, and it links every page of docs/."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(readme.encode("utf-8")) <= 12288
    for page in (REPO / "docs").glob("*.md"):
        assert f"(docs/{page.name})" in readme, f"README.md does not link docs/{page.name}"


# A flag that makes a library run code from a folder, and the warning that must come with it in the same section.
RUNS_FOLDER_CODE = re.compile(r"trust_remote_code=True")
WARNING = re.compile(r"only (for )?folders (you|they) (made or )?trust")


def test_every_flag_that_runs_a_folders_code_comes_with_a_warning():
    """Issue 36: the docs showed ``trust_remote_code=True`` for ElmoModule folders without saying that the folder's
    code then runs (a planted module ran). Each section of the README and docs/ that shows it warns."""
    unwarned = []
    for page in pages():
        for section in sections(page):
            if RUNS_FOLDER_CODE.search(section) and not WARNING.search(" ".join(section.split())):
                unwarned.append(f"{page}: {section.splitlines()[0]}")
    assert not unwarned, unwarned


def sections(page: str) -> list[str]:
    """The page cut at its headings (not at a ``#`` comment inside a code block), each with its heading line."""
    found, fenced = [[]], False
    for line in (REPO / page).read_text(encoding="utf-8").splitlines():
        fenced ^= line.startswith("```")
        if not fenced and re.match(r"#{1,6} ", line):
            found.append([])
        found[-1].append(line)
    return ["\n".join(lines) for lines in found if lines]


def test_the_frozen_feature_recipe_is_reproducible(tmp_path, monkeypatch):
    """docs/usage.md's frozen-feature recipe, run twice in one process as written, gives the same training loss
    (issue 44 F3: the head was built before the seed was set, and three runs gave 0.397, 0.383 and 0.394)."""
    pytest.importorskip("datasets")
    (block,) = [b for b in page_blocks("docs/usage.md") if "class MeanPoolClassifier" in b.code]
    monkeypatch.chdir(tmp_path)
    losses = []
    for _ in range(2):
        namespace = {"__name__": "__docs__"}
        run_python_block(block, namespace)
        losses.append(namespace["trained"].training_loss)
    assert losses[0] == losses[1], losses


# What the scratch folder holds for the blocks that a reader does not have (the workspace fixture writes them), and
# the Hub id that python_code replaces by the local folder.
STAND_INS = (
    f"{RELEASED}_options.json",
    f"{RELEASED}_weights.hdf5",
    "corpus.txt",
    "heldout.txt",
    "domain.txt",
    "domain-dev.txt",
    "vocab-2016-09-10.txt",
    "conll2003",
    "you/elmo-original",
)


def needs_from_elsewhere(block: Block, earlier: list[Block]) -> list[str]:
    """The files and folders ``block`` uses that neither it nor an earlier block of its page makes: this file's
    stand-ins (``STAND_INS``), or what a block of another page made."""
    names = set(STAND_INS) | {name for before in earlier if before.page != block.page for name in made_by(before)}
    names -= made_by(block) | {name for before in earlier if before.page == block.page for name in made_by(before)}
    return sorted(name for name in names if uses_file(block, name))


def block_comments(block: Block) -> str:
    return "\n".join(re.findall(r"#(.*)$", block.code, re.M))


def test_a_block_says_in_a_comment_what_it_needs_first():
    """Issue 44 F2: a block runs for a reader as written (offline, on the demo model), or names in a comment each file
    or folder it needs from elsewhere (the released weights, the reader's corpus, a folder another page makes), so
    that the scratch folder here supplies nothing a reader is not told to have."""
    missing = [
        f"{block}: {name}"
        for index, block in enumerate(RUNNABLE)
        for name in needs_from_elsewhere(block, RUNNABLE[:index])
        if name not in block_comments(block)
    ]
    assert not missing, "blocks that need these without saying so in a comment:\n" + "\n".join(missing)


def test_the_tagger_quick_start_writes_into_an_ignored_folder_and_explains_its_checkpoint():
    """Issue 44 F7: docs/training.md's first example wrote ``ner-demo/`` into the checkout, where git showed it as
    untracked, and kept ``checkpoint-120`` (23 MB of optimizer state) without a word."""
    block = next(b for b in page_blocks("docs/training.md") if b.language == "bash")
    commands = shell_commands(block.code)
    outputs = [argv[i + 1] for argv in commands for i, a in enumerate(argv[:-1]) if a == "--output_dir"]
    ignored = {line.strip() for line in (REPO / ".gitignore").read_text(encoding="utf-8").splitlines()}
    assert outputs and all(f"/{Path(out).parts[0]}/" in ignored for out in outputs), (outputs, ignored)
    text = " ".join((REPO / "docs" / "training.md").read_text(encoding="utf-8").split())
    assert "`checkpoint-120/`" in text and "`--save_strategy no`" in text
