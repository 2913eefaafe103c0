"""CPU benchmark of ``torch.compile(ElmoModel)`` (plain: inductor, the default) against eager, issue 50.

For each dtype (float32, bfloat16: the model's weights cast) and batch size (1, 32), one batch of random words
(sentences of ``--min-words``-``--max-words`` words, the lengths differing as in real text), inference under
``torch.inference_mode``: the first compiled call apart (the compile, and in a new process the build of the C++
steps: ``native_steps_elmo.py``), one warm-up call per path, then ``--repeats`` rounds in which eager and compiled
alternate; each path's words/s is its median. Prints a Markdown table, the CPU (``/proc/cpuinfo``), the load
(``os.getloadavg``) before and after (the machine may be shared), and whether the C++ steps ran.

With ``--train``, training steps instead (float32, forward and backward, the gradients compared): ``ElmoModel``
with its biLM trained (the loss: the mean square of every layer) and the CRF tagger with 2 task layers over the
frozen biLM, without dropout (a compiled dropout draws other numbers than eager's, and the gradients would differ),
eager and compiled alternating, each path's median step time.

    python benchmarks/bench_compile.py                       # original size (2x4096_512), ~3 min on 2 cores
    python benchmarks/bench_compile.py --size tiny --repeats 3 --batch-sizes 1 4    # seconds: the harness
    python benchmarks/bench_compile.py --train --size small --batch-sizes 16        # training steps, ~2 min
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_inference import SIZES, cpu_description, make_batch, make_vocab  # noqa: E402

from modeling_elmo import (  # noqa: E402
    ElmoConfig,
    ElmoForPreTraining,
    ElmoForQuestionAnswering,
    ElmoForSequenceClassification,
    ElmoForTokenClassification,
    ElmoModel,
)
from modeling_elmo.native_steps_elmo import native_steps_available  # noqa: E402

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
LM_VOCAB = 2000  # the LM head's softmax: every word a negative (the full softmax), so that the gradients compare
NO_DROPOUT = {f"{part}_dropout": 0.0 for part in ("elmo", "tagger", "classifier", "lm")}  # compiled: other draws
# The models of --train, from a size's settings: the biLM trained (ElmoModel, the LM head) or frozen (the task heads).
TRAINED = {
    "ElmoModel, biLM trained": lambda size: ElmoModel(ElmoConfig(**size, freeze_bilm=False, **NO_DROPOUT)),
    "CRF tagger, 2 task layers": lambda size: ElmoForTokenClassification(
        ElmoConfig(**size, num_labels=9, use_crf=True, tagger_num_layers=2, **NO_DROPOUT)
    ),
    "tagger, 1 task layer": lambda size: ElmoForTokenClassification(
        ElmoConfig(**size, num_labels=9, use_crf=False, tagger_num_layers=1, **NO_DROPOUT)
    ),
    "sentence classifier": lambda size: ElmoForSequenceClassification(ElmoConfig(**size, num_labels=3, **NO_DROPOUT)),
    "pair classifier": lambda size: ElmoForSequenceClassification(
        ElmoConfig(**size, num_labels=3, classifier_head="pair", **NO_DROPOUT)
    ),
    "question answering": lambda size: ElmoForQuestionAnswering(ElmoConfig(**size, **NO_DROPOUT)),
    "LM head": lambda size: ElmoForPreTraining(
        ElmoConfig(**size, lm_vocab_size=LM_VOCAB, lm_num_samples=LM_VOCAB, **NO_DROPOUT)
    ),
}


def top_layer(module, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    with torch.inference_mode():
        return module(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states[-1]


def measure(model: ElmoModel, ids, mask, repeats: int) -> dict:
    """Eager and compiled on one batch: first-call seconds, median seconds, words/s, largest difference."""
    compiled = torch.compile(model)
    start = time.perf_counter()
    top = top_layer(compiled, ids, mask)
    first = time.perf_counter() - start
    want = top_layer(model, ids, mask)
    top_layer(compiled, ids, mask)  # warm-up of both
    times = {"eager": [], "compiled": []}
    for _ in range(repeats):  # interleaved: load changes hit both paths alike
        for name, module in (("eager", model), ("compiled", compiled)):
            start = time.perf_counter()
            top_layer(module, ids, mask)
            times[name].append(time.perf_counter() - start)
    words = int(mask.sum())
    medians = {name: statistics.median(values) for name, values in times.items()}
    return {
        "first_call_s": first,
        "eager_words_s": words / medians["eager"],
        "compiled_words_s": words / medians["compiled"],
        "ratio": medians["eager"] / medians["compiled"],
        "max_diff": float((top.float() - want.float()).abs().max()),
    }


def training_models(size: str, ids: torch.Tensor, mask: torch.Tensor, names: list[str]) -> dict:
    """name -> (model, its loss on the batch), for ``--train``: each of ``names`` (keys of ``TRAINED``)."""
    batch, words = ids.shape[:2]
    generator = torch.Generator().manual_seed(0)
    # A pair: the second text from the sentence's middle on (each row has at least 10 words).
    types = (torch.arange(words) >= mask.sum(dim=1, keepdim=True) // 2).long() * mask
    labels = {
        "tags": torch.randint(0, 9, (batch, words), generator=generator).masked_fill(mask == 0, -100),
        "classes": torch.randint(0, 3, (batch,), generator=generator),
        "words": torch.randint(0, LM_VOCAB, (batch, words), generator=generator).masked_fill(mask == 0, -100),
        "span": types.argmax(dim=1),  # the second text's first word
    }
    inputs = {
        "ElmoModel, biLM trained": {},
        "CRF tagger, 2 task layers": {"labels": labels["tags"]},
        "tagger, 1 task layer": {"labels": labels["tags"]},
        "sentence classifier": {"labels": labels["classes"]},
        "pair classifier": {"labels": labels["classes"], "token_type_ids": types},
        "question answering": {
            "token_type_ids": types,
            "start_positions": labels["span"],
            "end_positions": labels["span"],
        },
        "LM head": {"labels": labels["words"]},
    }

    def loss_of(extra: dict, bilm: bool):
        def loss(module) -> torch.Tensor:
            out = module(input_ids=ids, attention_mask=mask, output_hidden_states=bilm, **extra)
            return sum(layer.pow(2).mean() for layer in out.hidden_states) if bilm else out.loss

        return loss

    models = {}
    for name in names:
        torch.manual_seed(0)
        models[name] = (TRAINED[name](SIZES[size]), loss_of(inputs[name], name.startswith("ElmoModel")))
    return models


def measure_training(model: torch.nn.Module, loss, repeats: int) -> dict:
    """Eager and compiled training steps (forward and backward) of one batch: first-call seconds, median seconds,
    the largest gradient difference relative to the largest gradient."""
    model.train()
    compiled = torch.compile(model)

    def step(module) -> tuple[float, dict]:
        model.zero_grad(set_to_none=True)
        start = time.perf_counter()
        loss(module).backward()
        seconds = time.perf_counter() - start
        return seconds, {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}

    first, got = step(compiled)
    _, want = step(model)
    step(compiled)  # warm-up of both
    times = {"eager": [], "compiled": []}
    for _ in range(repeats):
        for name, module in (("eager", model), ("compiled", compiled)):
            times[name].append(step(module)[0])
    medians = {name: statistics.median(values) for name, values in times.items()}
    scale = max(float(g.abs().max()) for g in want.values())
    difference = max(float((got[name] - g).abs().max()) for name, g in want.items())
    return {
        "first_call_s": first,
        "eager_s": medians["eager"],
        "compiled_s": medians["compiled"],
        "ratio": medians["eager"] / medians["compiled"],
        "grad_diff": difference / scale,
    }


def report(steps: str, title: str, columns: list[tuple[str, str, str]], rows: list[dict]) -> None:
    """The load after the runs, whether the C++ steps ran, then ``title`` and a Markdown table of ``rows`` with
    ``columns`` (header, key, format)."""
    print(f"load after: {os.getloadavg()}")
    # Asked after the runs: the first compiled call builds the library, and its time belongs to that call.
    native = "yes" if native_steps_available() else "no: the Python steps (see the warning above)"
    print(f"{steps} (modeling_elmo/native_steps_elmo.py): {native}")
    print(f"\n{title}\n")
    print("| " + " | ".join(header for header, _, _ in columns) + " |")
    print("|" + "---|" * len(columns))
    for row in rows:
        print("| " + " | ".join(form.format(row[key]) for _, key, form in columns) + " |")


def train_main(args) -> list[dict]:
    vocab, rows = make_vocab(), []
    for batch in args.batch_sizes:
        ids, mask = make_batch(batch, args.min_words, args.max_words, vocab, seed=batch)
        for name, (model, loss) in training_models(args.size, ids, mask, args.models).items():
            torch._dynamo.reset()
            rows.append({"model": name, "batch": batch, **measure_training(model, loss, args.repeats)})
    columns = [
        ("model", "model", "{}"),
        ("batch", "batch", "{}"),
        ("eager step (s)", "eager_s", "{:.3f}"),
        ("compiled step (s)", "compiled_s", "{:.3f}"),
        ("compiled/eager speed", "ratio", "{:.2f}x"),
        ("first call (s)", "first_call_s", "{:.1f}"),
        ("grad diff", "grad_diff", "{:.1e}"),
    ]
    title = f"{args.size} size, float32 training steps, median of {args.repeats} interleaved runs after warm-up"
    report("the compiled recurrences' C++ steps", title, columns, rows)
    return rows


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="original", choices=sorted(SIZES))
    parser.add_argument("--dtypes", nargs="+", default=list(DTYPES), choices=sorted(DTYPES))
    parser.add_argument("--batch-sizes", nargs="+", type=int, default=[1, 32])
    parser.add_argument("--min-words", type=int, default=10)
    parser.add_argument("--max-words", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--train", action="store_true", help="training steps (float32) instead of inference")
    parser.add_argument("--models", nargs="+", default=list(TRAINED)[:2], choices=list(TRAINED), help="with --train")
    args = parser.parse_args(argv)

    print(f"CPU: {cpu_description()}; torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(f"load before: {os.getloadavg()}")
    if args.train:
        return train_main(args)
    vocab = make_vocab()
    rows = []
    for dtype_name in args.dtypes:
        torch.manual_seed(0)
        config = ElmoConfig(**SIZES[args.size], initializer_range=0.02)
        model = ElmoModel(config).eval().to(DTYPES[dtype_name])
        torch._dynamo.reset()  # each dtype's first compile from scratch, as in a fresh process
        for batch in args.batch_sizes:
            ids, mask = make_batch(batch, args.min_words, args.max_words, vocab, seed=batch)
            rows.append({"dtype": dtype_name, "batch": batch, **measure(model, ids, mask, args.repeats)})
    columns = [
        ("dtype", "dtype", "{}"),
        ("batch", "batch", "{}"),
        ("eager words/s", "eager_words_s", "{:.1f}"),
        ("compiled words/s", "compiled_words_s", "{:.1f}"),
        ("compiled/eager", "ratio", "{:.2f}x"),
        ("first call (s)", "first_call_s", "{:.1f}"),
        ("max diff", "max_diff", "{:.1e}"),
    ]
    title = f"{args.size} size, median of {args.repeats} interleaved runs after warm-up"
    report("the compiled biLM's C++ steps", title, columns, rows)
    return rows


if __name__ == "__main__":
    main()
