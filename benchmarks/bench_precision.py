"""Accuracy of the reduced-precision paths: cosine of every layer's word vectors to float32, on real text.

For each model (the bundled demo model, and a random model at the original 2x4096_512 size written in the
original format with weights ``normal / sqrt(fan_in)``, so that its activations have unit order, and converted:
the one ``bench_inference.py --allennlp_python`` uses) and each mode, embeds the same sentences
of WikiText-2 and prints, per layer, the minimum and the mean over all words of the cosine between the word's
vector in that mode and in float32:

- ``bfloat16``: ``from_pretrained(..., dtype=torch.bfloat16)``, the designed path (products in bfloat16, cell
  state, its update and clip in float32; the gate pre-activations in bfloat16);
- ``bfloat16-all`` (``--ablation``): the same with the cell state and the gates in bfloat16 too, to show what
  the float32 state buys;
- ``int8``: ``modeling_elmo.inference.quantize.quantize_int8`` (dynamic int8 products) on the float32 model.

    python benchmarks/bench_precision.py                          # demo + original size, 200 sentences
    python benchmarks/bench_precision.py --models demo --sentences 50 --ablation
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import tempfile
from pathlib import Path

import torch

from modeling_elmo import ElmoModel, ElmoTokenizer
from modeling_elmo.inference.quantize import quantize_int8
from modeling_elmo.modeling_elmo import ElmoBiLstmLayer

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # bench_inference, for the original-size model
SHARED = os.environ.get("ELMO_SHARED_DIR", os.path.join(HERE, "..", "..", "shared"))  # holds data/, as for the tests
WIKITEXT = os.path.join(SHARED, "data", "wikitext-2", "test.txt")
DEMO = os.path.join(HERE, "..", "modeling_elmo", "demo_models", "demo_bilm")
MODES = ("bfloat16", "int8")


def wikitext_sentences(path: str, count: int, min_words: int = 4, max_words: int = 60) -> list[list[str]]:
    """The first ``count`` sentences of a WikiText-2 file (lines cut at `` . ``), headings left out."""
    sentences = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("="):
                continue
            for sentence in line.split(" . "):
                words = sentence.split()
                if min_words <= len(words) <= max_words:
                    sentences.append(words)
                    if len(sentences) == count:
                        return sentences
    return sentences


def load(model_name: str, work_dir: str) -> ElmoModel:
    if model_name == "demo":
        return ElmoModel.from_pretrained(DEMO).eval()
    from bench_inference import original_model

    return ElmoModel.from_pretrained(original_model(Path(work_dir))[2]).eval()


def in_mode(model: ElmoModel, mode: str) -> ElmoModel:
    """A copy of the float32 ``model`` in ``mode``."""
    if mode.startswith("bfloat16"):
        return copy.deepcopy(model).to(torch.bfloat16)
    if mode == "int8":
        return quantize_int8(copy.deepcopy(model))
    return model


@torch.inference_mode()
def layers_of(model: ElmoModel, tokenizer: ElmoTokenizer, sentences, batch_size: int) -> list[torch.Tensor]:
    """Per layer, the word vectors of all sentences ``(words, 2P)`` in float32."""
    per_layer = None
    for start in range(0, len(sentences), batch_size):
        batch = tokenizer(
            sentences[start : start + batch_size], is_split_into_words=True, padding=True, return_tensors="pt"
        )
        out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], output_hidden_states=True)
        mask = out.mask.bool()
        vectors = [layer[mask].float() for layer in out.hidden_states]
        per_layer = (
            vectors if per_layer is None else [torch.cat([a, b]) for a, b in zip(per_layer, vectors, strict=True)]
        )
    return per_layer


def cosines(reduced: list[torch.Tensor], reference: list[torch.Tensor]) -> list[tuple[float, float]]:
    """Per layer ``(min, mean)`` over the words of the cosine between ``reduced`` and ``reference``."""
    result = []
    for a, b in zip(reduced, reference, strict=True):
        cos = torch.nn.functional.cosine_similarity(a.double(), b.double(), dim=-1)
        result.append((float(cos.min()), float(cos.mean())))
    return result


def measure(model_name: str, modes, sentences, work_dir: str, batch_size: int = 32):
    """``{mode: [(min, mean) per layer]}`` for ``model_name`` (``demo`` or ``original``)."""
    tokenizer = ElmoTokenizer.from_pretrained(DEMO)
    model = load(model_name, work_dir)
    reference = layers_of(model, tokenizer, sentences, batch_size)
    results = {}
    for mode in modes:
        if mode == "bfloat16-all":  # the undesigned path: everything in bfloat16
            saved = ElmoBiLstmLayer.state_dtype
            ElmoBiLstmLayer.state_dtype = staticmethod(lambda dtype: dtype)
            try:
                results[mode] = cosines(layers_of(in_mode(model, mode), tokenizer, sentences, batch_size), reference)
            finally:
                ElmoBiLstmLayer.state_dtype = saved
        else:
            results[mode] = cosines(layers_of(in_mode(model, mode), tokenizer, sentences, batch_size), reference)
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["demo", "original"], choices=["demo", "original"])
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=[*MODES, "bfloat16-all"])
    parser.add_argument("--ablation", action="store_true", help="also bfloat16 with the cell state in bfloat16")
    parser.add_argument("--sentences", type=int, default=200)
    parser.add_argument(
        "--text",
        default=WIKITEXT,
        help="WikiText-2 file (default: $ELMO_SHARED_DIR or ../shared: data/wikitext-2/test.txt)",
    )
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--work_dir", default=os.path.join(tempfile.gettempdir(), "elmo-bench-allennlp"))
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    modes = args.modes + (["bfloat16-all"] if args.ablation and "bfloat16-all" not in args.modes else [])
    sentences = wikitext_sentences(args.text, args.sentences)
    words = sum(len(s) for s in sentences)
    print(f"# cosine to float32 per layer, {len(sentences)} WikiText-2 sentences ({words} words)")
    print("| model | mode | " + " | ".join(f"layer {k} min / mean" for k in range(3)) + " |")
    print("|---|---|" + "---|" * 3)
    for model_name in args.models:
        for mode, per_layer in measure(model_name, modes, sentences, args.work_dir).items():
            cells = " | ".join(f"{low:.5f} / {mean:.6f}" for low, mean in per_layer)
            print(f"| {model_name} | {mode} | {cells} |", flush=True)


if __name__ == "__main__":
    main()
