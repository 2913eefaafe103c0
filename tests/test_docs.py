"""Every command and code block of README.md and docs/*.md runs as written: the docs must stay accurate.

The pages run in PAGES order (then any other page of docs/, by name) in one scratch folder, each page's Python
blocks in a namespace of its own, against small stand-ins for what a user would have: the released weights' file
names hold the TensorFlow fixture model (random weights in the released HDF5 layout), and the corpus, vocabulary and
CoNLL files hold a few sentences. Only these changes are made, each for a reason a user would not meet:

- training commands get ``--max_steps 2`` (and small evaluation sets) appended: the docs' budgets take hours;
- loading the Hub id ``you/elmo-original`` loads the local folder instead, and ``HfApi.upload_folder`` records
  what it would upload (no network here; ``tests/test_hub.py`` tests ``push_to_hub`` at the HTTP boundary);
- ``elmo download`` and ``download_released_model`` fetch from a local HTTP server that serves the fixture under the
  released file names (``ELMO_DOWNLOAD_BASE_URL``), into a cache in the scratch folder (``ELMO_CACHE_DIR``);
- launcher lines that need GPUs, several machines or stand for "the same flags" (``...``) are not run: their
  launcher must exist and their flags must parse.

Blocks that other tests already run are listed in ``COVERED_ELSEWHERE`` and checked to be there. ``text`` blocks
are output shown to the reader and are not run. A new block that no rule covers fails the test: add a rule here when
you add it to a page.
"""

from __future__ import annotations

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


def _check_not_runnable(argv: list[str], block: Block) -> None:
    """A launcher line that cannot run here: the launcher exists and the module's flags parse."""
    assert argv[0] in ("torchrun", "accelerate"), f"{block}: only launcher lines may be left unrun: {argv}"
    assert shutil.which(argv[0]), f"{block}: {argv[0]} is not installed"
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
            found = shutil.which(argv[0])
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
# Running Python blocks


def run_python_block(block: Block, namespace: dict) -> None:
    # Loading from the Hub id: the local folder that would have been uploaded.
    code = block.code.replace('from_pretrained("you/elmo-original"', 'from_pretrained("elmo-original"')
    exec(compile(code, str(block), "exec"), namespace)  # noqa: S102  (the docs' own code)


def test_every_docs_block_runs(workspace: Path, download_server: str, monkeypatch):
    import huggingface_hub

    monkeypatch.setenv("ELMO_DOWNLOAD_BASE_URL", download_server)
    monkeypatch.setenv("ELMO_CACHE_DIR", str(workspace / "elmo-cache"))

    uploads: list[dict] = []

    def upload_folder(self, *, folder_path, repo_id, **kwargs):
        uploads.append({"repo_id": repo_id, "files": sorted(os.listdir(folder_path))})

    monkeypatch.setattr(huggingface_hub.HfApi, "upload_folder", upload_folder)
    monkeypatch.chdir(workspace)
    namespaces: dict[str, dict] = {}
    report = []
    for block in all_blocks():
        namespace = namespaces.setdefault(block.page, {"__name__": "__docs__"})
        where = _covered_elsewhere(block)
        if where:
            report.append(f"{block}: covered by {where}")
        elif block.language == "bash":
            report.append(f"{block}: ran {run_shell_block(block, workspace)} command(s)")
        elif block.language == "python":
            run_python_block(block, namespace)
            report.append(f"{block}: ran")
        elif block.language == "text":
            report.append(f"{block}: output, not run")
        else:
            pytest.fail(f"{block}: mark the block bash, python or text")
    print("\n".join(report))

    # What the blocks promise, checked on what they made.
    readme, usage, training = namespaces["README.md"], namespaces["docs/usage.md"], namespaces["docs/training.md"]
    assert tuple(readme["out"].elmo.shape) == (2, 7, 128)  # the demo model: 2 * projection 64
    assert (workspace / "elmo-cache" / "small" / "model.safetensors").is_file()
    assert (workspace / "elmo-original" / "model.safetensors").is_file()
    assert tuple(usage["out"].elmo.shape[:2]) == (2, 7)  # "The cat sat on the mat ." and "Hello !"
    assert uploads and uploads[0]["repo_id"] == "you/elmo-original"
    assert {"config.json", "model.safetensors", "README.md"} <= set(uploads[0]["files"])
    assert (workspace / "elmo.onnx").is_file()
    for folder in ("elmo-mine", "elmo-original-domain"):
        results = json.loads((workspace / folder / "eval_results.json").read_text())
        assert {"eval_forward_perplexity", "eval_backward_perplexity", "eval_perplexity"} <= set(results)
    assert json.loads((workspace / "ner-elmo" / "all_results.json").read_text())["train_steps"] == 2
    tags = training["tagger"].predict(**training["batch"])
    assert len(tags) == 1 and len(tags[0]) == 5
    assert all("entity_group" in span for span in training["ner"]("John Smith lives in New York."))


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


def test_readme_is_short_and_links_every_page():
    """The README is the first screen: at most 12 KiB, and it links every page of docs/."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(readme.encode("utf-8")) <= 12288
    for page in (REPO / "docs").glob("*.md"):
        assert f"(docs/{page.name})" in readme, f"README.md does not link docs/{page.name}"
