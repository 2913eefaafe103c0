"""CoNLL-2003 dev F1 of a tagger trained in float32, with its biLM run in float32, bfloat16 and int8 (issue 17).

The tagger (``--tagger``, a folder written by ``train_tagger``) is trained in float32. Only its biLM changes:

- ``float32``: as trained;
- ``bfloat16``: ``tagger.elmo.to(torch.bfloat16)`` (products in bfloat16, cell state in float32; the head stays
  float32 and reads the biLM's outputs cast to float32);
- ``int8``: ``quantize_int8(tagger)`` (the biLM's LSTM, highway and projection products in int8; the head stays
  float32).

For each, it tags the whole dev set and prints entity-level F1 (seqeval, as ``train_tagger`` computes it), the
difference to float32, the fraction of tags identical to float32's, and words/s of the tagger (biLM, BiLSTM and
CRF decoding; batches of ``--batch_size`` sentences sorted by length, tokenized beforehand, no token cache; the
median over ``--rounds`` passes, modes alternating). Without ``--tagger`` it first trains one for
``--time_budget`` seconds on the biLM of ``--bilm`` (default: the bundled demo biLM), with the recipe of
``bench_ner.py``'s ``elmo`` run.

    python benchmarks/bench_tagger_precision.py --time_budget 600              # train on the demo biLM, evaluate
    python benchmarks/bench_tagger_precision.py --tagger runs/bench_tagger_precision/elmo

The data is ``$ELMO_SHARED_DIR/data/conll2003`` (default ``../shared``), or ``--train_file``/``--dev_file``.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

from modeling_elmo.inference.quantize import needs_reduced_range, quantize_int8
from modeling_elmo.training.tagging_data import detect_scheme, iob1_to_bio, read_conll
from modeling_elmo.training.train_tagger import load_tagger

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))  # bench_ner, for the training recipe
DATA = Path(os.environ.get("ELMO_SHARED_DIR", REPO.parent / "shared")) / "data" / "conll2003"
DEMO = REPO / "modeling_elmo" / "demo_models" / "demo_bilm"
MODES = ("float32", "bfloat16", "int8")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--tagger", help="a tagger folder trained in float32 (without it, one is trained first)")
    parser.add_argument("--bilm", default=str(DEMO), help="the biLM to train a tagger on (default: the demo biLM)")
    parser.add_argument("--time_budget", type=float, default=600, help="training seconds, without --tagger")
    parser.add_argument("--train_file", default=str(DATA / "train.txt"))
    parser.add_argument("--dev_file", default=str(DATA / "dev.txt"))
    parser.add_argument("--output_dir", default=str(REPO / "runs" / "bench_tagger_precision"))
    parser.add_argument("--threads", type=int, default=1, help="torch threads, for training and evaluation")
    parser.add_argument("--batch_size", type=int, default=32, help="sentences per evaluation batch")
    parser.add_argument("--rounds", type=int, default=2, help="timed passes over the dev set per mode")
    return parser.parse_args(argv)


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux), else what ``platform`` knows."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_units() -> str:
    """The CPU's units for reduced-precision products (from ``/proc/cpuinfo``) and what int8 runs with here."""
    flags: set[str] = set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            flags = next((set(line.split(":", 1)[1].split()) for line in f if line.startswith("flags")), set())
    except OSError:
        pass
    wanted = ("avx512f", "avx512_bf16", "avx512_vnni", "avx_vnni", "amx_bf16", "amx_int8")
    present = ", ".join(name for name in wanted if name in flags) or "none of AVX-512, VNNI, AMX"
    bits = 7 if needs_reduced_range() else 8
    return f"{present}; torch kernels {torch.backends.cpu.get_cpu_capability()}; int8 activations {bits}-bit"


def train(args: argparse.Namespace) -> tuple[Path, dict]:
    """Train a float32 tagger on ``args.bilm`` for ``args.time_budget`` seconds (bench_ner's ``elmo`` recipe):
    its folder and its ``train_tagger`` metrics."""
    import bench_ner

    ner_args = bench_ner.parse_args(
        ["--bilm", args.bilm, "--train_file", args.train_file, "--dev_file", args.dev_file, "--output_dir",
         args.output_dir, "--time_budget", str(args.time_budget), "--threads", str(args.threads)]
    )  # fmt: skip
    metrics = bench_ner.run("elmo", ner_args, ["--bilm", args.bilm])
    return Path(args.output_dir) / "elmo", metrics


def in_mode(tagger, mode: str):
    """A copy of the float32 ``tagger`` with its biLM in ``mode``; the head stays float32."""
    if mode == "float32":
        return tagger
    reduced = copy.deepcopy(tagger)
    if mode == "bfloat16":
        reduced.elmo.to(torch.bfloat16)
        return reduced
    return quantize_int8(reduced)


def encode(tagger, tokenizer, sentences: list[list[str]], batch_size: int) -> tuple[list[int], list[dict]]:
    """Batches of ``batch_size`` sentences, longest first (little padding): ``(order, batches)``, where
    ``order[i]`` is the sentence at position ``i`` of the batches."""
    order = sorted(range(len(sentences)), key=lambda i: -len(sentences[i]))
    batches = []
    for start in range(0, len(order), batch_size):
        chunk = [sentences[i] for i in order[start : start + batch_size]]
        batches.append(
            dict(
                tokenizer(
                    chunk,
                    is_split_into_words=True,
                    padding=True,
                    return_tensors="pt",
                    return_vocab_ids=tagger.needs_vocab_ids,
                )
            )
        )
    return order, batches


@torch.inference_mode()
def tag(tagger, order: list[int], batches: list[dict]) -> tuple[list[list[int]], float]:
    """Tag ids per sentence (in the original order) and the seconds the tagger took (forward and decoding)."""
    tagger(**batches[-1])  # warm-up (e.g. the prepacked weights of the biLM's products), on the smallest batch
    started = time.perf_counter()
    ordered = []
    for batch in batches:
        ordered += tagger.decode(tagger(**batch).logits, batch["attention_mask"])
    seconds = time.perf_counter() - started
    tags: list[list[int]] = [[] for _ in order]
    for position, index in enumerate(order):
        tags[index] = ordered[position]
    return tags, seconds


def main(argv=None) -> int:
    from seqeval.metrics import f1_score

    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    for path in (args.dev_file,) if args.tagger else (args.train_file, args.dev_file):
        if not Path(path).is_file():
            print(f"error: {path} not found (set ELMO_SHARED_DIR or pass --train_file/--dev_file)", file=sys.stderr)
            return 1
    training = None
    folder = Path(args.tagger) if args.tagger else None
    if folder is None:
        folder, training = train(args)
    elif (folder / "all_results.json").is_file():
        training = json.loads((folder / "all_results.json").read_text())
    torch.set_num_threads(args.threads)  # training may have set it

    tagger, tokenizer = load_tagger(folder)
    sentences, gold = read_conll(args.dev_file)
    if detect_scheme(gold) != "other":  # the tagger predicts BIO: IOB1 tags as train_tagger converts them (BIO stays)
        gold = [iob1_to_bio(tags) for tags in gold]
    words = sum(map(len, sentences))
    order, batches = encode(tagger, tokenizer, sentences, args.batch_size)
    models = {mode: in_mode(tagger, mode) for mode in MODES}
    load = os.getloadavg()[0]  # the machine may be shared: say how busy it was
    tags, seconds = {}, {mode: [] for mode in MODES}
    for _ in range(args.rounds):  # modes alternate, so that a change in the machine's load touches all alike
        for mode, model in models.items():
            tags[mode], taken = tag(model, order, batches)
            seconds[mode].append(taken)

    id2label = tagger.config.id2label
    results = {}
    for mode in MODES:
        names = [[id2label[t] for t in row] for row in tags[mode]]
        pairs = zip(tags[mode], tags["float32"], strict=True)
        same = sum(a == b for row, ref in pairs for a, b in zip(row, ref, strict=True))
        results[mode] = dict(
            f1=100 * float(f1_score(gold, names, zero_division=0)),
            tags_identical=same / words,
            words_per_second=words / statistics.median(seconds[mode]),
            seconds=seconds[mode],
        )
    reference = results["float32"]

    print(
        f"\nCoNLL-2003 dev ({len(sentences)} sentences, {words} words), tagger {folder}\nCPU {cpu_model()} "
        f"({cpu_units()}), {torch.get_num_threads()} torch thread(s), torch {torch.__version__}; load average "
        f"before evaluating {load:.2f}"
    )
    if training:
        print(
            f"tagger trained in float32 for {training.get('train_seconds', float('nan')):.0f} s "
            f"({training.get('train_steps', '?')} steps); train_tagger's own dev F1 "
            f"{100 * training.get('eval_f1', float('nan')):.2f}"
        )
    print(f"words/s: the median of {args.rounds} passes, batches of {args.batch_size} sentences, no token cache\n")
    print("| biLM | dev F1 | F1 - float32 | tags identical to float32 | words/s | vs float32 |")
    print("|---|---|---|---|---|---|")
    for mode, r in results.items():
        print(
            f"| {mode} | {r['f1']:.2f} | {r['f1'] - reference['f1']:+.3f} | {100 * r['tags_identical']:.3f}% "
            f"| {r['words_per_second']:.0f} | {r['words_per_second'] / reference['words_per_second']:.2f}x |"
        )
    Path(args.output_dir).mkdir(parents=True, exist_ok=True)
    summary = dict(tagger=str(folder), cpu=cpu_model(), units=cpu_units(), threads=torch.get_num_threads())
    summary.update(load_average=load, training=training)
    (Path(args.output_dir) / "precision_results.json").write_text(json.dumps({**summary, "modes": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
