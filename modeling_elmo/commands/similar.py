"""``elmo similar``: cosine similarities of one word's vectors in different sentences (one word, two senses).

The sentence table and [`word_similarities`] also serve the web demo's word-senses view (``commands/demo.py``)
and ``benchmarks/pick_demo_word.py``. ``--plot FILE`` draws the heatmap with ``modeling_elmo.plots`` and publishes
it through ``output_files``.
"""

from __future__ import annotations

import argparse
import importlib.util
import os

from elmo_flags.similar import DEFAULT_SIMILAR_WORD, SIMILAR_EXAMPLES, SimilarExample

from .common import (
    CliError,
    check_device_name,
    check_model_name,
    check_precision_flags,
    describe_model,
    load_model,
    resolve_device,
    resolve_precision,
)
from .output_files import check_output, model_files, writing

COMMAND = "similar"


def word_similarities(model, tokenizer, sentences: list[str], word: str, layer: int | str):
    """Vectors of ``word`` in each sentence and their cosine similarities.

    Returns ``(labels, similarity, similarity_layer0)``: one label ``"<sentence>"`` per occurrence (a
    sentence with the word twice gives two), the ``(n, n)`` cosine matrix of the chosen layer's vectors
    (``layer`` an index into the ``L + 1`` biLM layers, or ``"elmo"`` for the model's scalar mix),
    and the same for layer 0 (characters only, no context). Matching is exact, or case-insensitive
    when the exact word is absent from a sentence. [`CliError`] if a sentence lacks the word.
    """
    import torch

    words = [tokenizer.tokenize(s) for s in sentences]
    positions = []
    for i, ws in enumerate(words):
        hits = [k for k, w in enumerate(ws) if w == word] or [k for k, w in enumerate(ws) if w.lower() == word.lower()]
        if not hits:
            raise CliError(f"the word {word!r} is not in sentence {i + 1}: {sentences[i]!r} (words: {' '.join(ws)})")
        positions += [(i, k) for k in hits]
    batch = tokenizer(words, is_split_into_words=True, padding=True, return_tensors="pt")
    batch = {k: v.to(model.device) for k, v in batch.items()}
    with torch.inference_mode():
        out = model(**batch, output_hidden_states=True)
    chosen = out.elmo if layer == "elmo" else out.hidden_states[layer]

    def cosine(states):
        vectors = torch.stack([states[i, k] for i, k in positions]).float()
        vectors = torch.nn.functional.normalize(vectors, dim=-1)
        return (vectors @ vectors.T).cpu()

    labels = [sentences[i] for i, _ in positions]
    return labels, cosine(chosen), cosine(out.hidden_states[0])


def format_similarity_table(word: str, labels: list[str], sim, width: int = 60) -> str:
    """A small text table: one row per occurrence, cosine similarity to each other occurrence."""
    shown = [label if len(label) <= width else label[: width - 3] + "..." for label in labels]
    label_width = max(len(s) for s in shown)
    head = f"{'#':>2}  {'sentence':<{label_width}}  " + "  ".join(f"{j + 1:>5}" for j in range(len(labels)))
    rows = [head]
    for i, label in enumerate(shown):
        cells = "  ".join(f"{float(sim[i, j]):5.3f}" for j in range(len(labels)))
        rows.append(f"{i + 1:>2}  {label:<{label_width}}  {cells}")
    return "\n".join(rows)


# The least gap between the two means that says something: untrained models of the demo's size give gaps of at most
# 0.010 (20 random initialisations, both built-in words, the top layer and the scalar mix; issue 49), the bundled
# demo model 0.24 for its default word. Five times the largest chance gap.
MEANINGFUL_GAP = 0.05


def sense_summary(example: SimilarExample, sim) -> str:
    """One line saying what the table of a built-in example shows: the mean cosine similarity of the word's vectors
    between sentences of the same sense against that between sentences of different senses. ``sim``: ``(4, 4)``.

    It concludes that the vectors depend on the context only when the senses separate: each same-sense pair more
    alike than each different-sense pair, and the means at least ``MEANINGFUL_GAP`` apart (an untrained model's
    gaps are chance, up to 0.01); otherwise it gives the numbers and says that they tell nothing."""
    first, second = example.senses
    same_pairs = [float(sim[0, 1]), float(sim[2, 3])]
    across = [float(sim[i, j]) for i in range(2) for j in range(2, 4)]
    same, different = sum(same_pairs) / 2, sum(across) / 4
    pairs = f"(means of {first}/{first}, {second}/{second} and {first}/{second} pairs)"
    if min(same_pairs) > max(across) and same - different >= MEANINGFUL_GAP:
        return f"Same sense {same:.3f} > different sense {different:.3f} {pairs}: the vectors depend on the context."
    why = (
        "some pair across senses is as alike as a pair within one"
        if min(same_pairs) <= max(across)
        else f"a gap under {MEANINGFUL_GAP} is what an untrained model gives by chance"
    )
    return (
        f"Same sense {same:.3f}, different sense {different:.3f} {pairs}: this model does not tell these senses "
        f"apart ({why})."
    )


def check_plot_file(path: str, overwrite: bool, model: str | None = None) -> None:
    """[`CliError`] for a ``--plot`` FILE that cannot be written (see ``output_files.check_output``; nor one of the
    files of ``model``, the ``--model``), whose extension names no image format matplotlib writes (the message lists
    them), or when matplotlib is missing."""
    check_output(path, overwrite, model_files(model), flag="--plot")
    if importlib.util.find_spec("matplotlib") is None:
        raise CliError('--plot needs matplotlib: pip install matplotlib (or pip install "modeling-elmo[demo]")')
    from matplotlib.backend_bases import FigureCanvasBase

    formats = sorted(FigureCanvasBase.get_supported_filetypes())
    extension = os.path.splitext(path)[1][1:].lower()
    if not extension:
        raise CliError(f"--plot {path} has no extension, which names the image format: use one of {', '.join(formats)}")
    if extension not in formats:
        raise CliError(f"--plot {path}: .{extension} is not an image format; use one of {', '.join(formats)}")


def run(args: argparse.Namespace) -> int:
    """``elmo similar``: see ``--help``. Errors: [`CliError`] (a word not in a sentence, a bad layer, plot file...)."""
    word = args.word or DEFAULT_SIMILAR_WORD
    example = None if args.sentences else SIMILAR_EXAMPLES.get(word)
    if not args.sentences and example is None:
        raise CliError(
            f"no built-in sentences for --word {word!r} (there are for {', '.join(sorted(SIMILAR_EXAMPLES))}): "
            "give two or more sentences that contain it"
        )
    sentences = list(args.sentences) if example is None else list(example.sentences)
    if len(sentences) < 2:
        raise CliError("give at least two sentences to compare")
    if args.overwrite and not args.plot:
        raise CliError("--overwrite needs --plot FILE (it replaces an existing plot file)")
    check_model_name(args.model)
    check_device_name(args.device)
    check_precision_flags(args)
    if args.plot:  # before the model loads
        check_plot_file(args.plot, args.overwrite, args.model)
    device = resolve_device(args.device)
    resolve_precision(args, device)
    tokenizer, model = load_model(args.model, device, args.dtype, args.quantize)
    n_layers = model.config.n_layers
    if args.layer == "elmo":
        layer: int | str = "elmo"
        if not model.config.num_output_representations:
            raise CliError("--layer elmo needs a scalar mix; this model has none (use a layer number)")
        layer_name = "the ELMo scalar mix"
    else:
        try:
            layer = n_layers if args.layer == "top" else int(args.layer)
        except ValueError:
            raise CliError(f"--layer must be top, elmo or a number 0..{n_layers}, got {args.layer!r}") from None
        if not 0 <= layer <= n_layers:
            raise CliError(f"--layer must be between 0 and {n_layers} for this model, got {layer}")
        layer_name = f"biLM layer {layer} of {n_layers}" + (" (characters only)" if layer == 0 else "")
    labels, sim, sim0 = word_similarities(model, tokenizer, sentences, word, layer)
    print(f"Model: {describe_model(args.model)}")
    print(f'Cosine similarity of "{word}" in context ({layer_name}):')
    print()
    print(format_similarity_table(word, labels, sim))
    print()
    off_diagonal = [float(sim0[i, j]) for i in range(len(labels)) for j in range(len(labels)) if i != j]
    low = min(off_diagonal) if off_diagonal else 1.0
    same = "1.000 for every pair" if low > 0.99995 else f"at least {low:.3f} for every pair"
    print(f"Layer 0 (characters only, no context) gives {same}: the differences above come from the context.")
    if example is not None and len(labels) == 4:
        print(sense_summary(example, sim))
    if args.plot:
        from ..plots import save_similarity_plot

        # plots takes the format from the name's extension: the temporary name ends with the plot's
        extension = os.path.splitext(args.plot)[1]
        inputs = model_files(args.model)
        with writing(args.plot, COMMAND, args.overwrite, inputs, suffix=extension, flag="--plot") as temp:
            try:
                save_similarity_plot(temp, word, labels, sim, layer_name)
            except (ValueError, RuntimeError) as err:  # e.g. .pgf without LaTeX
                raise CliError(f"--plot {args.plot}: matplotlib could not write it ({err})") from err
        print(f"Wrote the heatmap to {args.plot}")
    return 0
