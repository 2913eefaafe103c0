"""Pretrain a small biLM on WikiText-2 for a fixed budget on this CPU: training words/s and perplexities.

Runs ``python -m modeling_elmo.training.train_lm`` (in process) on ``valid.txt`` of ../shared/data/wikitext-2 and
evaluates on ``test.txt`` with the full softmax. The budget is a number of optimizer steps, not seconds, so that
the model (and its perplexity) does not depend on how busy the machine is; only the words/s do. The defaults are
the recipe of the package's bundled demo model (``scripts/train_demo_model.sh`` runs this script and then
exports ``modeling_elmo/demo_models/demo_bilm`` from its output folder):

    python benchmarks/bench_lm.py                       # the demo recipe: preset tiny, 2000 steps of 32 windows
    python benchmarks/bench_lm.py --max_steps 100 --preset small --max_eval_samples 500

Prints a Markdown table (and ``bench_results.json`` in ``--output_dir``): parameters, steps, training words
(input words of the training windows), training seconds and words/s, and forward, backward and mean perplexity.
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

from modeling_elmo import ElmoConfig
from modeling_elmo.hub.model_card import bilm_parameter_count
from modeling_elmo.training.train_lm import PRESETS
from modeling_elmo.training.train_lm import main as train_lm

REPO = Path(__file__).resolve().parent.parent
DATA = Path(os.environ.get("ELMO_SHARED_DIR", REPO.parent / "shared")) / "data" / "wikitext-2"


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train_file", default=str(DATA / "valid.txt"))
    parser.add_argument("--eval_file", default=str(DATA / "test.txt"))
    parser.add_argument("--output_dir", default=str(REPO / "runs" / "bench_lm"))
    parser.add_argument("--preset", choices=sorted(PRESETS), default="tiny")
    parser.add_argument("--max_steps", type=int, default=2000, help="the training budget, in optimizer steps")
    parser.add_argument("--batch_size", type=int, default=32, help="windows of <= 20 words per step")
    parser.add_argument("--max_vocab", type=int, default=10000)
    parser.add_argument("--num_samples", type=int, default=1024, help="sampled-softmax negatives (0: full)")
    parser.add_argument("--learning_rate", type=float, default=2e-3)
    parser.add_argument("--max_eval_samples", type=int, default=0, help="0: every window of --eval_file")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--progress", action="store_true", help="show progress bars")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    for path in (args.train_file, args.eval_file):
        if not Path(path).is_file():
            print(f"error: {path} not found (set ELMO_SHARED_DIR or pass --train_file/--eval_file)", file=sys.stderr)
            return 1
    if args.threads:
        torch.set_num_threads(args.threads)
    command = [
        "--train_file", args.train_file, "--eval_file", args.eval_file, "--output_dir", args.output_dir,
        # WikiText-2 is tokenized already: split on spaces only.
        "--no_split_punctuation", "--max_vocab", str(args.max_vocab),
        "--preset", args.preset, "--num_samples", str(args.num_samples),
        "--optim", "adamw_torch", "--learning_rate", str(args.learning_rate), "--max_steps", str(args.max_steps),
        "--per_device_train_batch_size", str(args.batch_size), "--seed", str(args.seed),
        "--logging_steps", "25", "--save_steps", "100000", "--overwrite_output_dir",
    ]  # fmt: skip
    if args.max_eval_samples:
        command += ["--max_eval_samples", str(args.max_eval_samples)]
    if not args.progress:
        command.append("--disable_tqdm")
    print(f"python -m modeling_elmo.training.train_lm {' '.join(command)}", flush=True)
    started = time.monotonic()
    status = train_lm(command)
    if status != 0:
        print(f"error: train_lm exited with status {status}", file=sys.stderr)
        return status
    results = json.loads((Path(args.output_dir) / "all_results.json").read_text())
    results["wall_seconds"] = round(time.monotonic() - started, 1)
    config = ElmoConfig.from_pretrained(args.output_dir)
    results["bilm_parameters"] = bilm_parameter_count(config)
    results["softmax_parameters"] = config.lm_vocab_size * (config.projection_dim + 1)

    cpu = platform.processor() or platform.machine()
    print(
        f"\nWikiText-2 biLM: train {Path(args.train_file).name}, perplexity on {Path(args.eval_file).name} "
        f"({results['eval_words']} words, full softmax); preset {args.preset} (LSTM {config.lstm_dim}, "
        f"projection {config.projection_dim}), vocabulary {config.lm_vocab_size}; {cpu}, "
        f"{torch.get_num_threads()} torch threads, torch {torch.__version__}\n"
    )
    print("| biLM params | steps | train words | train s | train words/s | ppl forward | ppl backward | ppl mean |")
    print("|---|---|---|---|---|---|---|---|")
    print(
        f"| {results['bilm_parameters'] / 1e6:.2f}M | {args.max_steps} | {results['train_words']} "
        f"| {results['train_runtime']:.0f} | {results['train_words_per_second']:.0f} "
        f"| {results['eval_forward_perplexity']:.1f} | {results['eval_backward_perplexity']:.1f} "
        f"| {results['eval_perplexity']:.1f} |"
    )
    (Path(args.output_dir) / "bench_results.json").write_text(json.dumps(results, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
