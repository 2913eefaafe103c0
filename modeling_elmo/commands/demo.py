"""``elmo demo``: a Gradio web app with three views of ELMo: word senses, tagging, fill-in-the-blank.

The views call three plain functions (``compare_senses``, ``tag_entities``, ``fill_blank``) of a [`DemoModels`],
which the tests and other front ends can call without Gradio. Everything runs locally: Gradio's analytics are off,
the theme uses the system's fonts (no web fonts) and nothing is loaded from outside the server. Gradio is imported
only here, when the app is built (``pip install "modeling-elmo[demo]"``).

``examples/space/app.py`` runs the same app in a Hugging Face Space.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from elmo_cli import DEFAULT_SIMILAR_WORD, SIMILAR_EXAMPLES, CliError, sense_summary, word_similarities

PROG = "elmo demo"
# What a user writes for the blank in the fill-in-the-blank view.
BLANK = re.compile(r"_{2,}|\[MASK\]|<mask>")
SYSTEM_FONTS = ("ui-sans-serif", "system-ui", "-apple-system", "Segoe UI", "Roboto", "sans-serif")
MONO_FONTS = ("ui-monospace", "SFMono-Regular", "Menlo", "Consolas", "monospace")


@dataclass
class DemoModels:
    """The models behind the views: the biLM (``ElmoModel``), and optionally a tagger pipeline and an LM head."""

    name: str  # what the page says the model is
    tokenizer: object
    model: object  # ElmoModel, eval mode
    tagger: object | None = None  # a token-classification pipeline of an ElmoForTokenClassification
    lm: object | None = None  # an ElmoForPreTraining (the biLM with its softmax), eval mode

    @classmethod
    def load(cls, model: str | None = None, tagger: str | None = None, device: str = "cpu") -> DemoModels:
        """Load ``model`` (a folder, Hub id or released name; default the bundled demo model) and ``tagger``."""
        from elmo_cli import DEMO_MODEL_NOTE, load_model, resolve_device, resolve_model

        if tagger is not None and not Path(tagger, "config.json").is_file():
            raise CliError(f"--tagger {tagger}: not a tagger folder (made by `elmo train-tagger`; no config.json)")
        torch_device = resolve_device(device)
        tokenizer, elmo = load_model(model, torch_device)
        lm = None
        if "ElmoForPreTraining" in (elmo.config.architectures or ()):
            from ..modeling_elmo_pretraining import ElmoForPreTraining

            lm = ElmoForPreTraining.from_pretrained(resolve_model(model)).to(torch_device).eval()
        elif model is None:  # the bundled demo biLM: its softmax ships beside it (demo_model_lm)
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
        return cls(model or DEMO_MODEL_NOTE, tokenizer, elmo, tag_pipeline, lm)

    # -- word senses ---------------------------------------------------------------------------------------------

    def compare_senses(self, word: str, text: str):
        """``word`` in each line of ``text``: a figure with one similarity heatmap per biLM layer, and a summary.

        Returns ``(figure, markdown)``.
        """
        from ..plots import similarity_figure

        word, sentences = word.strip(), [line.strip() for line in text.splitlines() if line.strip()]
        if not word or len(sentences) < 2:
            raise ValueError("give a word and at least two sentences (one per line) that contain it")
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
            pairs = [(i, j) for i in range(len(labels)) for j in range(i + 1, len(labels))]
            i, j = min(pairs, key=lambda p: float(sims[-1][p]))
            lines.append(
                f"Least similar in the top layer: sentences {i + 1} and {j + 1} ({float(sims[-1][i, j]):.3f})."
            )
        return figure, "\n\n".join(lines)

    # -- tagging ---------------------------------------------------------------------------------------------------

    def tag_entities(self, text: str) -> dict:
        """The tagger's entities in ``text``, as Gradio's ``HighlightedText`` takes them: ``{"text", "entities"}``."""
        if self.tagger is None:
            raise ValueError("no tagger: start the demo with --tagger FOLDER (a folder made by `elmo train-tagger`)")
        if not text.strip():
            raise ValueError("type a sentence to tag")
        found = self.tagger(text)
        entities = [{"entity": e["entity_group"], "start": int(e["start"]), "end": int(e["end"])} for e in found]
        return {"text": text, "entities": entities}

    # -- fill-in-the-blank -----------------------------------------------------------------------------------------

    def fill_blank(self, text: str, top_k: int = 10) -> dict[str, float]:
        """The LM head's best words for the blank (``___``) in ``text``: ``{word: probability}``, best first.

        Each direction of the biLM predicts the blank from its own side (the forward LSTM from the words before
        it, the backward one from the words after it), as in LAMA's probing of ELMo; a word's score is the sum of
        the two log-probabilities, normalised over the vocabulary. The ``elmo-fill-mask`` pipeline, where
        installed, offers the same for scripts.
        """
        import torch

        if self.lm is None:
            raise ValueError(
                "this model has no LM head (softmax): fill-in-the-blank needs a model from `elmo train-lm`"
            )
        blanks = list(BLANK.finditer(text))
        if len(blanks) != 1:
            raise ValueError(f"write exactly one blank (___) in the sentence, found {len(blanks)}")
        left = self.tokenizer.tokenize(text[: blanks[0].start()])
        right = self.tokenizer.tokenize(text[blanks[0].end() :])
        k = len(left)  # the blank's position; its own characters play no part in either direction's prediction
        words = [*left, "___", *right]
        batch = self.tokenizer([words], is_split_into_words=True, return_tensors="pt").to(self.lm.device)
        with torch.inference_mode():
            out = self.lm(**batch, return_logits=True)
        scores = torch.zeros(out.forward_logits.shape[-1], device=out.forward_logits.device)
        if k > 0:  # forward direction at the word before the blank predicts the blank
            scores += torch.log_softmax(out.forward_logits[0, k - 1].float(), dim=-1)
        if k + 1 < len(words):  # backward direction at the word after it
            scores += torch.log_softmax(out.backward_logits[0, k + 1].float(), dim=-1)
        config = self.lm.config
        for special in {config.lm_bos_vocab_id, config.lm_eos_vocab_id, self.tokenizer.unk_token_id}:
            if special is not None and 0 <= special < scores.numel():
                scores[special] = float("-inf")
        probabilities = torch.softmax(scores, dim=-1)
        best = torch.topk(probabilities, min(top_k, probabilities.numel()))
        ids, values = best.indices.tolist(), best.values.tolist()
        return {self.tokenizer.convert_ids_to_tokens(i): v for i, v in zip(ids, values, strict=True)}


def _theme(gr):
    """Gradio's default look with the system's fonts: no web font is fetched."""
    return gr.themes.Default(font=list(SYSTEM_FONTS), font_mono=list(MONO_FONTS))


def build_app(models: DemoModels):
    """The Gradio ``Blocks`` app: one tab per view. Errors of a view show as a message, not a traceback."""
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    import gradio as gr

    def guarded(function):
        def run(*args):
            try:
                return function(*args)
            except (ValueError, CliError) as err:
                raise gr.Error(str(err)) from err

        return run

    example = SIMILAR_EXAMPLES[DEFAULT_SIMILAR_WORD]
    with gr.Blocks(title="ELMo demo", analytics_enabled=False) as app:
        gr.Markdown(f"# ELMo: deep contextualized word vectors\nModel: {models.name}.")
        with gr.Tab("Word senses"):
            gr.Markdown(
                "One word in several sentences: layer 0 sees only its characters, the biLSTM layers its context."
            )
            with gr.Row():
                word = gr.Textbox(DEFAULT_SIMILAR_WORD, label="Word", elem_id="senses-word", scale=1)
                sentences = gr.Textbox(
                    "\n".join(example.sentences),
                    label="Sentences, one per line",
                    lines=4,
                    elem_id="senses-text",
                    scale=4,
                )
            compare = gr.Button("Compare", variant="primary", elem_id="senses-run")
            summary = gr.Markdown(elem_id="senses-summary")
            heatmaps = gr.Plot(label="Cosine similarity per layer", elem_id="senses-plot")
            compare.click(guarded(models.compare_senses), [word, sentences], [heatmaps, summary])
        with gr.Tab("Tagging"):
            if models.tagger is None:
                gr.Markdown(
                    "No tagger loaded: start with `elmo demo --tagger FOLDER` (a folder made by `elmo train-tagger`)."
                )
            else:
                text = gr.Textbox("John Smith flew from Paris to New York .", label="Sentence", elem_id="tag-text")
                tag = gr.Button("Tag", variant="primary", elem_id="tag-run")
                tagged = gr.HighlightedText(label="Entities", elem_id="tag-result")
                tag.click(guarded(models.tag_entities), [text], [tagged])
        with gr.Tab("Fill in the blank"):
            if models.lm is None:
                gr.Markdown(
                    "Unavailable: this model has no LM head (softmax). Fill-in-the-blank needs a biLM trained with "
                    "`elmo train-lm`, which saves its softmax."
                )
            else:
                blank_text = gr.Textbox(
                    "The ___ sat on the mat .", label="Sentence with one blank (___)", elem_id="fill-text"
                )
                fill = gr.Button("Fill", variant="primary", elem_id="fill-run")
                best = gr.Label(num_top_classes=10, label="Best words", elem_id="fill-result")
                fill.click(guarded(models.fill_blank), [blank_text], [best])
    return app


def launch(app, host: str = "127.0.0.1", port: int = 7860, **kwargs):
    """Serve ``app`` on ``host:port`` (blocks until interrupted), with the system-font theme."""
    import gradio as gr

    return app.launch(server_name=host, server_port=port, theme=_theme(gr), ssr_mode=False, share=False, **kwargs)


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="A web demo of ELMo in the browser (Gradio), served on this machine: word senses (similarity "
        "heatmaps per layer), tagging (with --tagger) and fill-in-the-blank (for a model with an LM head).",
    )
    parser.add_argument("--model", help="model folder, Hub id or released name (default: the bundled demo model)")
    parser.add_argument("--tagger", metavar="FOLDER", help="a tagger folder made by `elmo train-tagger`")
    parser.add_argument("--port", type=int, default=7860, help="port to serve on (default: %(default)s)")
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to serve on (default: %(default)s, this machine only)"
    )
    parser.add_argument("--device", default="cpu", help="cpu (default), cuda, cuda:1, mps or auto")
    return parser


def main(argv: Sequence[str] | None = None, prog: str = PROG) -> int:
    """Entry point of ``elmo demo``; returns the exit code."""
    args = build_parser(prog).parse_args(argv)
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
    models = DemoModels.load(args.model, args.tagger, args.device)
    print(f"ELMo demo on http://{args.host}:{args.port} (Ctrl-C stops it)", flush=True)
    launch(build_app(models), args.host, args.port, quiet=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
