"""``elmo demo``: a Gradio web app with three views of ELMo: word senses, tagging, fill-in-the-blank.

The views call three plain functions (``compare_senses``, ``tag_entities``, ``fill_blank``) of a [`DemoModels`],
which the tests and other front ends can call without Gradio. Everything runs locally: Gradio's analytics are off,
the theme uses the system's fonts (no web fonts) and nothing is loaded from outside the server. Gradio is imported
only here, when the app is built (``pip install "modeling-elmo[demo]"``).

The fill-in-the-blank view is the ``elmo-fill-mask`` pipeline, so the page shows the scores a script gets. Each
request of a view is bounded ([`RequestLimits`]: characters, words, sentences) and the requests queue, one computing
at a time; Gradio's upload route takes no file. An input error shows on the page and is one line in the server's log.

``examples/space/app.py`` runs the same app in a Hugging Face Space.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from elmo_flags import new_parser
from elmo_flags.demo import add_arguments

from .common import CliError, quiet_loading, run_command
from .similar import DEFAULT_SIMILAR_WORD, SIMILAR_EXAMPLES, sense_summary, word_similarities

PROG = "elmo demo"
# What a user writes for the blank in the fill-in-the-blank view.
BLANK = re.compile(r"_{2,}|\[MASK\]|<mask>")
SYSTEM_FONTS = ("ui-sans-serif", "system-ui", "-apple-system", "Segoe UI", "Roboto", "sans-serif")
MONO_FONTS = ("ui-monospace", "SFMono-Regular", "Menlo", "Consolas", "monospace")


logger = logging.getLogger(__name__)

# Serving: one request computes at a time (torch already uses every CPU thread), QUEUE_SIZE more may wait and the
# next ones are told the queue is full. The views take text only, so Gradio's upload route takes no file.
QUEUE_CONCURRENCY = 1
QUEUE_SIZE = 16
UPLOAD_LIMIT_BYTES = 0
# Shown on the word-senses view when the page runs the bundled demo model. The words are benchmarks/pick_demo_word.py's
# measurement (held-out sentences, top layer): the default example's word has the largest gap of its 8 words, "bank"
# none (same sense 0.811, different sense 0.811).
TOY_MODEL_NOTE = (
    "The bundled demo model is a toy biLM (0.9M parameters, trained on WikiText-2 by this project), far weaker than "
    "the released ELMo (93.6M parameters: `elmo demo --model original`). It separates the senses of some words and "
    f"not of others: measured on held-out sentences, it separates those of “{DEFAULT_SIMILAR_WORD}” (the example "
    "below) best of the eight words tried, and those of “bank” (river or money) not at all."
)


@dataclass(frozen=True)
class RequestLimits:
    """What one request (a click, or a call of the app's API) may ask of the server; a view refuses more with a
    message. The commands (`elmo similar`, `elmo embed`) and the Python API take more.

    ``characters``: of the request's text, all boxes together; ``words``: as the tokenizer splits them;
    ``sentences``: lines of the word-senses view, and occurrences of its word (the rows of each heatmap).
    """

    characters: int = 5_000
    words: int = 1_000
    sentences: int = 40

    def check_characters(self, *texts: str) -> None:
        count = sum(len(text) for text in texts)
        if count > self.characters:
            raise ValueError(
                f"too long: {count:,} characters; the demo takes at most {self.characters:,} per request "
                "(the `elmo` commands and the Python API take more)"
            )

    def check_words(self, count: int) -> None:
        if count > self.words:
            raise ValueError(
                f"too many words: {count:,}; the demo takes at most {self.words:,} per request "
                "(the `elmo` commands and the Python API take more)"
            )

    def check_sentences(self, count: int, what: str = "sentences") -> None:
        if count > self.sentences:
            raise ValueError(
                f"too many {what}: {count:,}; the demo compares at most {self.sentences} per request "
                "(`elmo similar` takes more)"
            )


@dataclass
class DemoModels:
    """The models behind the views: the biLM (``ElmoModel``), and optionally a tagger pipeline and an LM head.

    With an LM head, ``fill_mask`` is the ``elmo-fill-mask`` pipeline on it (made from ``lm`` when not given): the
    fill-in-the-blank view is that pipeline. ``limits`` bounds each request of the views.
    """

    name: str  # what the page says the model is
    tokenizer: object
    model: object  # ElmoModel, eval mode
    tagger: object | None = None  # a token-classification pipeline of an ElmoForTokenClassification
    lm: object | None = None  # an ElmoForPreTraining (the biLM with its softmax), eval mode
    fill_mask: object | None = None  # pipeline("elmo-fill-mask") of ``lm``
    bundled: bool = False  # the bundled demo model (a toy biLM): the page says so
    limits: RequestLimits = field(default_factory=RequestLimits)

    def __post_init__(self):
        if self.fill_mask is None and self.lm is not None:
            from transformers import pipeline

            from ..pipelines_fill_mask_elmo import FILL_MASK_TASK

            self.fill_mask = pipeline(FILL_MASK_TASK, model=self.lm, tokenizer=self.tokenizer, device=self.lm.device)

    @classmethod
    def load(cls, model: str | None = None, tagger: str | None = None, device: str = "cpu") -> DemoModels:
        """Load ``model`` (a folder, Hub id or released name; default the bundled demo model) and ``tagger``."""
        from .common import DEMO_MODEL_NOTE, load_model, resolve_device, resolve_model

        if tagger is not None and not Path(tagger, "config.json").is_file():
            raise CliError(f"--tagger {tagger}: not a tagger folder (made by `elmo train-tagger`; no config.json)")
        torch_device = resolve_device(device)
        tokenizer, elmo = load_model(model, torch_device)
        lm = None
        if "ElmoForPreTraining" in (elmo.config.architectures or ()):
            from ..modeling_elmo_pretraining import ElmoForPreTraining

            lm = ElmoForPreTraining.from_pretrained(resolve_model(model)).to(torch_device).eval()
        elif model is None:  # the bundled demo biLM: its softmax ships beside it (demo_models/demo_softmax)
            from ..demo_models.language_model import has_demo_language_model, load_demo_language_model

            if has_demo_language_model():
                lm = load_demo_language_model()[0].to(torch_device)
        tag_pipeline = None
        if tagger is not None:
            from transformers import AutoModelForTokenClassification, AutoTokenizer, pipeline

            # Objects, not the folder: the package (imported here) routes token-classification for ELMo taggers,
            # with no remote code to trust.
            try:
                tag_model = AutoModelForTokenClassification.from_pretrained(tagger).to(torch_device).eval()
                tag_tokenizer = AutoTokenizer.from_pretrained(tagger)
            except (OSError, ValueError) as err:
                raise CliError(f"--tagger {tagger}: could not load a tagger ({err})") from err
            tag_pipeline = pipeline(
                "token-classification", model=tag_model, tokenizer=tag_tokenizer, aggregation_strategy="simple"
            )
        try:
            return cls(model or DEMO_MODEL_NOTE, tokenizer, elmo, tag_pipeline, lm, bundled=model is None)
        except ValueError as err:  # the fill-mask pipeline refuses an LM folder without its softmax
            raise CliError(f"--model {model}: {err}") from err

    # -- word senses ---------------------------------------------------------------------------------------------

    def compare_senses(self, word: str, text: str):
        """``word`` in each line of ``text``: a figure with one similarity heatmap per biLM layer, and a summary.

        Returns ``(figure, markdown)``. ``ValueError`` (or ``CliError``: the word is missing from a line) for input
        the view cannot take, past ``self.limits`` included.
        """
        import torch

        from ..plots import similarity_figure

        self.limits.check_characters(word, text)
        word, sentences = word.strip(), [line.strip() for line in text.splitlines() if line.strip()]
        if not word or len(sentences) < 2:
            raise ValueError("give a word and at least two sentences (one per line) that contain it")
        self.limits.check_sentences(len(sentences))
        words = [self.tokenizer.tokenize(sentence) for sentence in sentences]
        self.limits.check_words(sum(map(len, words)))
        # Occurrences as word_similarities finds them (exact, else case-insensitive): the heatmaps' rows.
        occurrences = sum(ws.count(word) or [w.lower() for w in ws].count(word.lower()) for ws in words)
        self.limits.check_sentences(occurrences, f"occurrences of “{word}”")
        n_layers = self.model.config.n_layers
        sims = []
        for layer in range(1, n_layers + 1):
            labels, sim, sim0 = word_similarities(self.model, self.tokenizer, sentences, word, layer)
            sims.append(sim)
        titles = ["layer 0 (characters only)"] + [f"layer {k} (biLSTM)" for k in range(1, n_layers + 1)]
        figure = similarity_figure(word, labels, [sim0, *sims], titles, sentence_labels=False)
        lines = [f"**{len(labels)} occurrences of “{word}”**, cosine similarity per layer (top layer: {n_layers})."]
        example = SIMILAR_EXAMPLES.get(word)
        if example is not None and list(example.sentences) == sentences:
            lines.append(sense_summary(example, sims[-1]))
        else:
            top = sims[-1].float()
            upper = torch.ones_like(top, dtype=torch.bool).triu(diagonal=1)  # each pair i < j once
            flat = int(top.masked_fill(~upper, float("inf")).argmin())
            i, j = divmod(flat, top.shape[1])
            lines.append(f"Least similar in the top layer: sentences {i + 1} and {j + 1} ({float(top[i, j]):.3f}).")
        return figure, "\n\n".join(lines)

    # -- tagging ---------------------------------------------------------------------------------------------------

    def tag_entities(self, text: str) -> dict:
        """The tagger's entities in ``text``, as Gradio's ``HighlightedText`` takes them: ``{"text", "entities"}``."""
        if self.tagger is None:
            raise ValueError("no tagger: start the demo with --tagger FOLDER (a folder made by `elmo train-tagger`)")
        self.limits.check_characters(text)
        if not text.strip():
            raise ValueError("type a sentence to tag")
        self.limits.check_words(len(self.tokenizer.tokenize(text)))
        found = self.tagger(text)
        entities = [{"entity": e["entity_group"], "start": int(e["start"]), "end": int(e["end"])} for e in found]
        return {"text": text, "entities": entities}

    # -- fill-in-the-blank -----------------------------------------------------------------------------------------

    def fill_blank(self, text: str, top_k: int = 10) -> dict[str, float]:
        """The best words for the blank in ``text``: ``{word: score}``, best first.

        The blank is written ``___`` (two underscores or more), ``[MASK]`` or ``<mask>``, once. This is the
        ``elmo-fill-mask`` pipeline on the text with ``[MASK]`` for the blank (``self.fill_mask(text, top_k=top_k)``),
        so the scores are the pipeline's: each direction of the biLM predicts the blank from its own side, a word is
        ranked by the mean of the two log-probabilities (LAMA's combination), soft-maxed over the whole vocabulary
        (``<S>``, ``</S>`` and ``<UNK>`` included). The softmax runs at the blank only, never over every word.
        """
        from ..pipelines_fill_mask_elmo import MASK

        if self.fill_mask is None:
            raise ValueError(
                "this model has no LM head (softmax): fill-in-the-blank needs a model from `elmo train-lm`"
            )
        self.limits.check_characters(text)
        blanks = list(BLANK.finditer(text))
        if len(blanks) != 1:
            raise ValueError(f"write exactly one blank (___) in the sentence, found {len(blanks)}")
        before, after = text[: blanks[0].start()], text[blanks[0].end() :]
        self.limits.check_words(len(self.tokenizer.tokenize(before)) + 1 + len(self.tokenizer.tokenize(after)))
        best = self.fill_mask(before + MASK + after, top_k=top_k)
        return {item["token_str"]: item["score"] for item in best}


def _theme(gr):
    """Gradio's default look with the system's fonts: no web font is fetched."""
    return gr.themes.Default(font=list(SYSTEM_FONTS), font_mono=list(MONO_FONTS))


def _one_line(message: str, width: int = 300) -> str:
    line = " ".join(message.split())
    return line if len(line) <= width else line[: width - 3] + "..."


def build_app(models: DemoModels):
    """The Gradio ``Blocks`` app: one tab per view, behind a queue (``QUEUE_CONCURRENCY`` request at a time,
    ``QUEUE_SIZE`` waiting). An input error of a view shows as a message on the page and one line in the server's
    log (this module's logger), not a traceback."""
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    import gradio as gr

    def guarded(view: str, function):
        def run(*args):
            try:
                return function(*args)
            except (ValueError, CliError) as err:
                logger.warning("%s: refused a request: %s", view, _one_line(str(err)))
                raise gr.Error(str(err), print_exception=False) from err

        return run

    limits = models.limits
    example = SIMILAR_EXAMPLES[DEFAULT_SIMILAR_WORD]
    with gr.Blocks(title="ELMo demo", analytics_enabled=False) as app:
        gr.Markdown(
            f"# ELMo: deep contextualized word vectors\nModel: {models.name}.\n\nEach request takes at most "
            f"{limits.characters:,} characters, {limits.words:,} words and {limits.sentences} sentences."
        )
        with gr.Tab("Word senses"):
            gr.Markdown(
                "One word in several sentences: layer 0 sees only its characters, the biLSTM layers its context."
            )
            if models.bundled:
                gr.Markdown(TOY_MODEL_NOTE, elem_id="senses-note")
            with gr.Row():
                word = gr.Textbox(DEFAULT_SIMILAR_WORD, label="Word", elem_id="senses-word", scale=1)
                sentences = gr.Textbox(
                    "\n".join(example.sentences),
                    label="Sentences, one per line",
                    lines=4,
                    max_length=limits.characters,
                    elem_id="senses-text",
                    scale=4,
                )
            compare = gr.Button("Compare", variant="primary", elem_id="senses-run")
            summary = gr.Markdown(elem_id="senses-summary")
            heatmaps = gr.Plot(label="Cosine similarity per layer", elem_id="senses-plot")
            compare.click(
                guarded("word senses", models.compare_senses),
                [word, sentences],
                [heatmaps, summary],
                api_name="compare_senses",
            )
        with gr.Tab("Tagging"):
            if models.tagger is None:
                gr.Markdown(
                    "No tagger loaded: start with `elmo demo --tagger FOLDER` (a folder made by `elmo train-tagger`)."
                )
            else:
                text = gr.Textbox(
                    "John Smith flew from Paris to New York .",
                    label="Sentence",
                    max_length=limits.characters,
                    elem_id="tag-text",
                )
                tag = gr.Button("Tag", variant="primary", elem_id="tag-run")
                tagged = gr.HighlightedText(label="Entities", elem_id="tag-result")
                tag.click(guarded("tagging", models.tag_entities), [text], [tagged], api_name="tag_entities")
        with gr.Tab("Fill in the blank"):
            if models.fill_mask is None:
                gr.Markdown(
                    "Unavailable: this model has no LM head (softmax). Fill-in-the-blank needs a biLM trained with "
                    "`elmo train-lm`, which saves its softmax."
                )
            else:
                gr.Markdown(
                    "The `elmo-fill-mask` pipeline: each direction of the biLM predicts the blank from its own side "
                    "(the forward LSTM from the words before it, the backward one from the words after it), and a "
                    "word's score is the mean of the two log-probabilities, soft-maxed over the vocabulary (LAMA's "
                    "probe of ELMo)."
                )
                blank_text = gr.Textbox(
                    "The game was released in ___ 2010 .",
                    label="Sentence with one blank (___ or [MASK])",
                    max_length=limits.characters,
                    elem_id="fill-text",
                )
                fill = gr.Button("Fill", variant="primary", elem_id="fill-run")
                best = gr.Label(num_top_classes=10, label="Best words (the pipeline's scores)", elem_id="fill-result")
                fill.click(guarded("fill in the blank", models.fill_blank), [blank_text], [best], api_name="fill_blank")
    app.queue(default_concurrency_limit=QUEUE_CONCURRENCY, max_size=QUEUE_SIZE)
    return app


def exposure_warning(host: str, port: int) -> str | None:
    """A warning when ``host`` is not a loopback address (``0.0.0.0``, a LAN address, a host name that resolves to
    one): other machines can then reach the demo. ``None`` for this machine only (``127.0.0.1``, ``localhost``)."""
    import ipaddress
    import socket

    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(host, None)}
    except OSError:
        addresses = {host}
    try:
        if addresses and all(ipaddress.ip_address(str(a).split("%")[0]).is_loopback for a in addresses):
            return None
    except ValueError:
        pass
    return (
        f"warning: serving on {host}, which other machines can reach: anyone who reaches port {port} of this "
        "machine can use the demo (there is no login; each request is bounded and they queue). Leave out --host to "
        "serve this machine only."
    )


def launch(app, host: str = "127.0.0.1", port: int = 7860, **kwargs):
    """Serve ``app`` on ``host:port`` (blocks until interrupted), with the system-font theme. Gradio's upload route
    takes no file (``max_file_size=UPLOAD_LIMIT_BYTES``: the views take text only) unless ``kwargs`` say otherwise."""
    import gradio as gr

    kwargs.setdefault("max_file_size", UPLOAD_LIMIT_BYTES)
    return app.launch(server_name=host, server_port=port, theme=_theme(gr), ssr_mode=False, share=False, **kwargs)


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    return new_parser(prog, add_arguments)


def main(argv: Sequence[str] | None = None, prog: str = PROG) -> int:
    """Entry point of ``elmo demo``; returns the exit code."""
    return run_command(add_arguments, run, None if argv is None else list(argv), prog)


def run(args: argparse.Namespace) -> int:
    """``elmo demo``: see ``--help``. Errors: [`CliError`]."""
    if not 0 < args.port < 65536:
        raise CliError(f"--port must be between 1 and 65535, got {args.port}")
    if args.tagger is not None and not Path(args.tagger, "config.json").is_file():  # before the slow imports
        raise CliError(f"--tagger {args.tagger}: not a tagger folder (made by `elmo train-tagger`; no config.json)")
    os.environ["GRADIO_ANALYTICS_ENABLED"] = "False"  # before gradio is imported: no calls home
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    try:
        import gradio  # noqa: F401
    except ImportError as err:
        raise CliError('`elmo demo` needs gradio: pip install "modeling-elmo[demo]"') from err
    with quiet_loading():  # no "Loading weights" bars (TRANSFORMERS_VERBOSITY=info shows them)
        models = DemoModels.load(args.model, args.tagger, args.device)
    print(f"ELMo demo on http://{args.host}:{args.port} (Ctrl-C stops it)", flush=True)
    warning = exposure_warning(args.host, args.port)
    if warning is not None:
        print(warning, file=sys.stderr, flush=True)
    launch(build_app(models), args.host, args.port, quiet=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
