"""CoNLL-2003 NER on this CPU for a fixed time budget: the ELMo tagger against the same tagger without ELMo.

Trains, with ``python -m modeling_elmo.training.train_tagger`` (in process), for ``--time_budget`` seconds each:

- ``elmo``: a biLSTM-CRF over ``[word embedding; ELMo]`` with the frozen biLM of ``--bilm`` (an ``ElmoModel``
  folder: converted original weights or one trained by this project); skipped, saying so, without ``--bilm``;
- ``no_elmo``: the same tagger (same word embedding, BiLSTM, CRF, optimiser and budget) without ELMo;
- with ``--runs``, also ``layer0_elmo`` (the biLM's layer 0 as ``x_k`` instead of the word embedding, plus the
  ELMo mix) and ``layer0_only`` (layer 0 alone: characters without context). These two differ only by the
  biLM's context, which separates what the contextual layers add from what the character CNN adds.

Then it evaluates each on the whole dev set and prints entity-level F1 (seqeval), the training time, steps and
words/s of training and of evaluation, as a Markdown table (and ``results.json`` in ``--output_dir``).

    python benchmarks/bench_ner.py --bilm elmo-small --time_budget 1200
    python benchmarks/bench_ner.py --time_budget 300            # the baseline only
    python benchmarks/bench_ner.py --bilm elmo-small --runs layer0_elmo,layer0_only

Numbers from a short budget are far from converged (the paper trains for many epochs on a GPU): compare the two
rows of one run, not with the paper.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import torch

from modeling_elmo.training.train_tagger import main as train_tagger

REPO = Path(__file__).resolve().parent.parent
# $ELMO_SHARED_DIR (default ../shared) holds data/, as for the tests.
DATA = Path(os.environ.get("ELMO_SHARED_DIR", REPO.parent / "shared")) / "data" / "conll2003"


# name -> (what it is, train_tagger flags); "{bilm}" is --bilm.
RUNS = {
    "elmo": ("word embedding + ELMo mix at the BiLSTM input", ["--bilm", "{bilm}"]),
    "no_elmo": ("word embedding only", ["--no_elmo"]),
    "layer0_elmo": ("x_k = the biLM's layer 0 + ELMo mix", ["--bilm", "{bilm}", "--word_input", "bilm"]),
    "layer0_only": (
        "x_k = the biLM's layer 0 (characters, no context), no mix",
        ["--bilm", "{bilm}", "--word_input", "bilm", "--no_elmo_input"],
    ),
}


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--bilm", help="ElmoModel folder for the ELMo run (without it, only the baseline runs)")
    parser.add_argument("--train_file", default=str(DATA / "train.txt"))
    parser.add_argument("--dev_file", default=str(DATA / "dev.txt"))
    parser.add_argument("--time_budget", type=float, default=600, help="training seconds per model")
    parser.add_argument("--output_dir", default=str(REPO / "runs" / "bench_ner"))
    parser.add_argument("--max_eval_sentences", type=int, default=0, help="0: the whole dev set")
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--learning_rate", type=float, default=1e-3)
    parser.add_argument("--hidden_size", type=int, default=200)
    parser.add_argument("--num_layers", type=int, default=2)
    parser.add_argument("--word_dim", type=int, default=100)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument(
        "--runs",
        default="elmo,no_elmo",
        help="comma-separated, of: " + ", ".join(f"{name} ({text})" for name, (text, _) in RUNS.items()),
    )
    parser.add_argument("--progress", action="store_true", help="show progress bars")
    return parser.parse_args(argv)


def run(name: str, args: argparse.Namespace, extra: list[str]) -> dict:
    out = Path(args.output_dir) / name
    argv = [
        "--train_file", args.train_file, "--eval_file", args.dev_file, "--output_dir", str(out),
        "--time_budget", str(args.time_budget), "--num_train_epochs", "1000", "--lr_scheduler_type", "constant",
        "--eval_strategy", "no", "--save_strategy", "no", "--logging_steps", "100",
        "--per_device_train_batch_size", str(args.batch_size), "--learning_rate", str(args.learning_rate),
        "--hidden_size", str(args.hidden_size), "--num_layers", str(args.num_layers), "--word_dim", str(args.word_dim),
        "--max_eval_sentences", str(args.max_eval_sentences), *extra,
    ]  # fmt: skip
    if args.threads:
        argv += ["--num_threads", str(args.threads)]
    if not args.progress:
        argv += ["--disable_tqdm", "true"]
    print(f"\n=== {name}: python -m modeling_elmo.training.train_tagger {' '.join(argv)}", flush=True)
    started = time.monotonic()
    status = train_tagger(argv)
    if status != 0:
        raise SystemExit(f"{name}: train_tagger exited with status {status}")
    metrics = json.loads((out / "all_results.json").read_text())
    metrics["wall_seconds"] = round(time.monotonic() - started, 1)
    return metrics


def main(argv=None) -> int:
    args = parse_args(argv)
    for path in (args.train_file, args.dev_file):
        if not Path(path).is_file():
            print(f"error: {path} not found (set ELMO_SHARED_DIR or pass --train_file/--dev_file)", file=sys.stderr)
            return 1
    names = [name.strip() for name in args.runs.split(",") if name.strip()]
    unknown = [name for name in names if name not in RUNS]
    if unknown or not names:
        print(f"error: unknown --runs {unknown or names}: choose from {', '.join(RUNS)}", file=sys.stderr)
        return 2
    results: dict[str, dict] = {}
    for name in names:
        flags = RUNS[name][1]
        if "{bilm}" in flags and not args.bilm:
            print(f"note: no --bilm given: {name} is skipped (pass an ElmoModel folder to compare)")
            continue
        results[name] = run(name, args, [args.bilm if flag == "{bilm}" else flag for flag in flags])

    cpu = platform.processor() or platform.machine()
    print(
        f"\nCoNLL-2003 NER, {args.time_budget:.0f} s training budget per model; {cpu}, "
        f"{torch.get_num_threads()} torch threads, torch {torch.__version__}; biLM: {args.bilm or '-'}\n"
    )
    print("| model | dev F1 | precision | recall | steps | epochs | train s | train words/s | dev words/s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, m in results.items():
        print(
            f"| {name} | {100 * m['eval_f1']:.2f} | {100 * m['eval_precision']:.2f} | {100 * m['eval_recall']:.2f} "
            f"| {m['train_steps']} | {m.get('epoch', 0):.2f} | {m['train_seconds']:.0f} "
            f"| {m['train_words_per_second']:.0f} | {m['eval_words_per_second']:.0f} |"
        )
    Path(args.output_dir).mkdir(parents=True, exist_ok=True)
    (Path(args.output_dir) / "results.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
