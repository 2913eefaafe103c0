"""Two checkouts of this package side by side: ElmoModel's words/s at one size, in alternating processes.

Each round runs one process per checkout (``PYTHONPATH`` set to it), in turn, every other round in reverse order;
each process builds the same random-weight model (seeded), warms up, and times a few passes over the same sentences.
The table gives the median words/s over every timed pass of each checkout, the ratio to the first, and the CPU.

    git worktree add /tmp/before <commit>
    python benchmarks/bench_versions.py /tmp/before . --size original --batch-size 32 --rounds 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent

# One timed process: the model code comes from the checkout on PYTHONPATH; the character ids come ready-made in a
# file, so that every checkout reads the same batches.
WORKER = r"""
import json, sys, time
import torch
import modeling_elmo
from modeling_elmo import ElmoConfig, ElmoModel
spec = json.loads(sys.argv[1])
if not modeling_elmo.__file__.startswith(sys.argv[2]):
    raise SystemExit(f"imported {modeling_elmo.__file__}, not the checkout {sys.argv[2]}")
torch.set_num_threads(spec["threads"])
torch.manual_seed(0)
model = ElmoModel(ElmoConfig(**spec["config"], initializer_range=0.02)).eval()
if spec["dtype"] == "int8":
    from modeling_elmo.inference.quantize import quantize_int8
    quantize_int8(model)
else:
    model.to(getattr(torch, spec["dtype"]))
batches = torch.load(spec["batches_file"])
words = sum(int(m.sum()) for _, m in batches)
rates = []
with torch.inference_mode():
    for repeat in range(spec["warmup"] + spec["repeats"]):
        start = time.perf_counter()
        for ids, mask in batches:
            model(input_ids=ids, attention_mask=mask)
        if repeat >= spec["warmup"]:
            rates.append(words / (time.perf_counter() - start))
print(json.dumps(rates))
"""

SIZES = {
    "original": {},
    "medium": {"lstm_dim": 2048, "projection_dim": 256, "n_highway": 1},
}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkouts", nargs="+", help="repository roots to compare (the first is the baseline)")
    parser.add_argument("--size", default="original", choices=list(SIZES))
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "int8"])
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--batches", type=int, default=2, help="batches per timed pass")
    parser.add_argument("--rounds", type=int, default=5, help="alternating processes per checkout")
    parser.add_argument("--repeats", type=int, default=3, help="timed passes per process")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(HERE))
    import torch
    from bench_inference import cpu_description, make_batch, make_vocab

    spec = {key: getattr(args, key) for key in ("dtype", "repeats", "warmup", "threads")}
    spec["config"] = SIZES[args.size]
    vocab = make_vocab()
    work_dir = tempfile.TemporaryDirectory()
    spec["batches_file"] = os.path.join(work_dir.name, "batches.pt")
    torch.save([make_batch(args.batch_size, 12, 37, vocab, seed) for seed in range(args.batches)], spec["batches_file"])
    roots = [str(Path(c).resolve()) for c in args.checkouts]
    for root in roots:
        if not (Path(root) / "modeling_elmo" / "__init__.py").is_file():
            raise SystemExit(f"error: {root} is not a checkout of this package (no modeling_elmo/__init__.py)")
    rates: dict[str, list[float]] = {root: [] for root in roots}
    for round_ in range(args.rounds):
        # Every other round in reverse order: which process runs first showed up as a few % at batch 1 (1.15x one
        # way, 1.00x the other, AMD EPYC Zen 4), and alternating the order spreads that over the checkouts.
        for root in roots if round_ % 2 == 0 else roots[::-1]:
            env = {**os.environ, "PYTHONPATH": root}
            done = subprocess.run(
                [sys.executable, "-c", WORKER, json.dumps(spec), root],
                capture_output=True,
                text=True,
                env=env,
                cwd=root,
            )
            if done.returncode != 0:
                raise SystemExit(f"error: the run in {root} failed:\n{done.stderr[-2000:]}")
            rates[root] += json.loads(done.stdout.strip().splitlines()[-1])
    print(f"# CPU: {cpu_description()}; {args.threads} threads; load after: {os.getloadavg()}")
    print(f"# {args.size} size, {args.dtype}, batch {args.batch_size}, {args.rounds} alternating rounds")
    print("| checkout | words/s (median) | min | max | ratio to the first |")
    print("|---|---|---|---|---|")
    base = statistics.median(rates[roots[0]])
    for root in roots:
        median = statistics.median(rates[root])
        print(f"| {root} | {median:.1f} | {min(rates[root]):.1f} | {max(rates[root]):.1f} | {median / base:.3f} |")


if __name__ == "__main__":
    main()
