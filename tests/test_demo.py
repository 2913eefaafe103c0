"""``elmo demo``: the views' functions, and the whole app in a real browser (Chromium driven by Playwright)."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import torch

from modeling_elmo.demo_models.model import DEMO_MODEL_DIR

REPO = Path(__file__).resolve().parent.parent
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
TAGS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true" or os.environ.get("ELMO_REQUIRE_SHARED") == "1"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def tagger_dir(tmp_path_factory) -> Path:
    """An untrained tagger on the demo biLM whose classifier favours B-LOC: every word comes out as a location, so
    the page must highlight LOC entities."""
    from modeling_elmo import ElmoForTokenClassification, ElmoTokenizer

    folder = tmp_path_factory.mktemp("tagger")
    tagger = ElmoForTokenClassification.from_pretrained(
        DEMO_MODEL_DIR,
        id2label=dict(enumerate(TAGS)),
        label2id={t: i for i, t in enumerate(TAGS)},
        tagger_hidden_size=8,
        tagger_num_layers=1,
    )
    with torch.no_grad():
        tagger.classifier.bias.zero_()
        tagger.classifier.bias[TAGS.index("B-LOC")] = 100.0
    tagger.save_pretrained(folder)
    ElmoTokenizer.from_pretrained(DEMO_MODEL_DIR).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def lm_models():
    """``DemoModels`` with an LM head: the demo biLM under a random softmax over the tokenizer's vocabulary."""
    from modeling_elmo import ElmoTokenizer
    from modeling_elmo.commands.demo import DemoModels
    from modeling_elmo.modeling_elmo_pretraining import ElmoForPreTraining

    torch.manual_seed(0)
    tokenizer = ElmoTokenizer.from_pretrained(DEMO_MODEL_DIR)
    lm = ElmoForPreTraining.from_pretrained(DEMO_MODEL_DIR, lm_vocab_size=len(tokenizer)).eval()
    return DemoModels("demo + random softmax", tokenizer, lm.elmo, lm=lm)


def test_fill_blank_scores_are_the_two_directions_losses(lm_models):
    """A word's score is -(forward loss predicting it) - (backward loss predicting it), checked against the LM
    head's own per-word losses of the sentence with that word in the blank."""
    best = lm_models.fill_blank("The ___ sat on the mat .", top_k=3)
    assert len(best) == 3 and list(best.values()) == sorted(best.values(), reverse=True)
    lm, tokenizer = lm_models.lm, lm_models.tokenizer
    log_scores = {}
    for word in best:
        words = ["The", word, "sat", "on", "the", "mat", "."]
        batch = tokenizer([words], is_split_into_words=True, return_tensors="pt", return_vocab_ids=True)
        labels = batch.pop("vocab_ids")
        with torch.no_grad():
            base = lm.elmo(**batch, output_hidden_states=True)
            states = torch.stack(base.hidden_states[-1].chunk(2, dim=-1))  # (2, B, W, P); eval: no dropout
            losses = lm.word_losses(states, lm.lm_targets(labels, base.mask.bool()))
        log_scores[word] = -(losses[0, 0, 0] + losses[1, 0, 2]).item()  # forward at "The", backward at "sat"
    # Ratios of the probabilities = differences of the summed log-probabilities (float32 log-softmax: ~1e-6).
    first, *others = best
    for word in others:
        expected = log_scores[first] - log_scores[word]
        assert abs(float(torch.tensor(best[first] / best[word]).log()) - expected) < 1e-4


def test_fill_blank_needs_an_lm_head_and_one_blank(lm_models):
    from modeling_elmo.commands.demo import DemoModels

    with pytest.raises(ValueError, match="exactly one blank"):
        lm_models.fill_blank("no blank here")
    without = DemoModels("x", lm_models.tokenizer, lm_models.model)
    with pytest.raises(ValueError, match="no LM head"):
        without.fill_blank("The ___ sat .")


def test_gradio_is_imported_only_by_the_demo():
    code = (
        "import sys; import elmo_cli as cli; cli.build_parser(); assert 'gradio' not in sys.modules, 'gradio imported'"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=REPO)


def test_bad_tagger_folder_is_refused_before_gradio_starts(tmp_path, capsys):
    from elmo_cli import main

    gradio_before = "gradio" in sys.modules
    assert main(["demo", "--tagger", str(tmp_path / "missing"), "--port", "1"]) == 1
    assert "--tagger" in capsys.readouterr().err
    assert gradio_before or "gradio" not in sys.modules  # refused before the slow import


def test_space_app_builds_the_demo_from_a_checkout():
    """``examples/space/app.py`` finds the checkout's package by itself and builds the same app (not served)."""
    pytest.importorskip("gradio")
    code = (
        "import runpy, gradio; ns = runpy.run_path('examples/space/app.py'); "
        "assert isinstance(ns['demo'], gradio.Blocks); print(ns['demo'].title)"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0 and "ELMo demo" in done.stdout, done.stderr[-3000:]


def _playwright_or_skip():
    missing = []
    if not CHROMIUM.exists():
        missing.append(f"{CHROMIUM} (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        sync_playwright = None
        missing.append('the playwright package (pip install -e ".[dev]")')
    try:
        import gradio  # noqa: F401
    except ImportError:
        missing.append('gradio (pip install -e ".[demo]")')
    if missing:
        reason = "the browser test needs " + " and ".join(missing)
        if in_ci():
            pytest.fail(reason + "; CI must run it (.ci/run installs them)")
        pytest.skip(reason)
    return sync_playwright


def _wait_until_served(url: str, server: subprocess.Popen, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise AssertionError(f"elmo demo exited with {server.returncode}: {server.stdout.read()}")
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise AssertionError(f"elmo demo did not serve {url} within {timeout:.0f} s")


@contextlib.contextmanager
def served_page(tmp_path: Path, *options: str):
    """``elmo demo --port P *options`` in a subprocess, and a Chromium page on it; yields ``(page, requests)``,
    ``requests`` the URL of every request the page made. The server is stopped on the way out."""
    sync_playwright = _playwright_or_skip()
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    elmo = shutil.which("elmo", path=str(Path(sys.executable).parent))
    command = [elmo] if elmo else [sys.executable, "-m", "elmo_cli"]
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    env.pop("GRADIO_ANALYTICS_ENABLED", None)  # the command itself must turn analytics off
    server = subprocess.Popen(
        [*command, "demo", "--port", str(port), *options],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    requests: list[str] = []
    try:
        _wait_until_served(url + "/", server)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
            try:
                page = browser.new_page(viewport={"width": 1280, "height": 1000})
                page.on("request", lambda request: requests.append(request.url))
                page.goto(url + "/", wait_until="networkidle")
                yield page, requests
            finally:
                browser.close()
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    assert requests, "the browser recorded no request at all"
    outside = sorted({r for r in requests if not r.startswith((url + "/", "data:", "blob:"))})
    assert not outside, f"the page fetched from outside {url}: {outside}"


def _enter(page, elem_id: str, text: str) -> None:
    """Type ``text`` into the textbox ``elem_id`` as a person would, and check that the page holds it.

    A view's textbox shows the app's starting value once Gradio has mounted it; text filled in before that can be
    replaced by the starting value, so the click would send the old sentence (seen once in CI). Waiting for a
    non-empty value, then leaving the box (Tab) after typing, makes the page take the typed text before any click.
    """
    from playwright.sync_api import expect

    box = page.locator(f"#{elem_id} textarea, #{elem_id} input").first
    expect(box).not_to_have_value("", timeout=60_000)
    box.fill(text)
    box.press("Tab")
    expect(box).to_have_value(text)


@pytest.mark.slow
def test_demo_in_a_browser(tmp_path, tagger_dir):
    """Start ``elmo demo`` on the bundled demo model, compare a word's senses and tag a sentence in Chromium, take
    screenshots, and check that the page asked nothing of any other address than the demo's own."""
    with served_page(tmp_path, "--tagger", str(tagger_dir)) as (page, _):
        from playwright.sync_api import expect  # served_page has skipped the test where playwright is missing

        # Word senses: "bank" in sentences typed by the user.
        _enter(page, "senses-word", "bank")
        _enter(
            page,
            "senses-text",
            "He sat on the bank of the river .\nShe went to the bank to open an account .\n"
            "The bank raised the interest rate .",
        )
        page.locator("#senses-run").click()
        summary = page.locator("#senses-summary")
        summary.get_by_text("occurrences of").wait_for(timeout=120_000)
        assert "3 occurrences of “bank”" in summary.inner_text()
        page.locator("#senses-plot img").wait_for(timeout=60_000)
        page.screenshot(path=tmp_path / "senses.png", full_page=True)

        # Tagging: the forced tagger marks every word as a location.
        page.get_by_role("tab", name="Tagging").click()
        _enter(page, "tag-text", "Ada went to Rome .")
        page.locator("#tag-run").click()
        result = page.locator("#tag-result")
        # The result's visible text, not one element found in it: the first element with a word may be a hidden one.
        expect(result).to_contain_text("Rome", timeout=120_000, use_inner_text=True)
        text = result.inner_text()
        assert "Rome" in text and "LOC" in text, text
        page.screenshot(path=tmp_path / "tagging.png", full_page=True)

        # Fill-in-the-blank: the demo model's fitted LM head ranks "November" among the first (0.062, after "the").
        page.get_by_role("tab", name="Fill in the blank").click()
        _enter(page, "fill-text", "The game was released in ___ 2010 .")
        page.locator("#fill-run").click()
        expect(page.locator("#fill-result")).to_contain_text("November", timeout=120_000, use_inner_text=True)
        page.screenshot(path=tmp_path / "fill-demo.png", full_page=True)
    assert (tmp_path / "senses.png").stat().st_size > 10_000


@pytest.mark.slow
def test_fill_in_the_blank_in_a_browser(tmp_path, lm_models):
    """A model folder with an LM head (the demo biLM under a random softmax): the view shows the words that
    ``fill_blank`` ranks first."""
    folder = tmp_path / "lm"
    lm_models.lm.save_pretrained(folder)
    lm_models.tokenizer.save_pretrained(folder)
    sentence = "The ___ sat on the mat ."
    best = next(iter(lm_models.fill_blank(sentence)))
    with served_page(tmp_path, "--model", str(folder)) as (page, _):
        page.get_by_role("tab", name="Fill in the blank").click()
        _enter(page, "fill-text", sentence)
        page.locator("#fill-run").click()
        from playwright.sync_api import expect  # served_page has skipped the test where playwright is missing

        expect(page.locator("#fill-result")).to_contain_text(best, timeout=120_000, use_inner_text=True)
        page.screenshot(path=tmp_path / "fill.png", full_page=True)
