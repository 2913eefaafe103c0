"""Where a forward pass spends its time, per precision and batch size: the shares of the matrix products, of the LSTM
cell's element-wise work, of the character CNN and of other ops in torch's ops' time, and how much of the wall time
those ops take (the rest: Python and dispatch between them).

The same random original-size model and WikiText-2 batches as ``bench_inference.py --ceiling`` (32 sentences at
once, and 8 sentences one at a time), in float32, bfloat16 and int8. Each row: words/s without the profiler (median
of ``--repeats`` passes after warm-up), then one pass under ``torch.profiler``, whose ops' self CPU time is sorted
into the groups of ``GROUPS`` by op name, and set against the unprofiled wall time.

    python benchmarks/bench_profile.py                       # all modes, batch 32 and 1
    python benchmarks/bench_profile.py --modes int8 --batch-sizes 1 --top 15
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_inference import MODES, cpu_description, load_in_mode, original_model, wikitext_sentences  # noqa: E402

# Op names per group (torch 2.x CPU). The LSTM cell's element-wise ops also serve the highway layers, a few % of
# their calls at most; ``aten::amax`` and the convolutions appear only in the character CNN.
GROUPS = {
    "products": {
        "mkldnn::_linear_pointwise",
        "quantized::linear_dynamic",
        "aten::baddbmm",
        "aten::bmm",
        "aten::addmm",
        "aten::mm",
    },
    "cell element-wise": {
        "aten::sigmoid",
        "aten::tanh",
        "aten::mul",
        "aten::mul_",
        "aten::add",
        "aten::add_",
        "aten::sub_",
        "aten::addcmul",
        "aten::clamp",
        "aten::clamp_",
        "aten::copy_",
    },
    "character CNN": {"aten::mkldnn_convolution", "aten::_slow_conv2d_forward", "aten::amax", "aten::maximum"},
}


def breakdown(model, inputs: list[dict], repeats: int = 3, top: int = 0) -> dict:
    """``{"seconds": wall seconds of one pass over ``inputs`` (the median of ``repeats``, unprofiled), "shares":
    {group: fraction of the ops' self time}, "ops_over_wall": the profiled ops' self time over that wall time,
    "top": [(op, self seconds), ...]}``; the groups are ``GROUPS`` and "other ops".

    What runs outside the ops (Python, dispatch) is ``1 - ops_over_wall``, roughly: the profiler adds a few us to
    each call it records, which at batch 1 (thousands of calls of a few us) can take that ratio past 1."""
    from torch.profiler import ProfilerActivity, profile

    def one_pass():
        with torch.inference_mode():
            for batch in inputs:
                model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])

    one_pass()
    walls = []
    for _ in range(repeats):
        start = time.perf_counter()
        one_pass()
        walls.append(time.perf_counter() - start)
    wall = statistics.median(walls)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        one_pass()
    by_op = {event.key: event.self_cpu_time_total / 1e6 for event in prof.key_averages()}
    seconds = dict.fromkeys([*GROUPS, "other ops"], 0.0)
    for op, spent in by_op.items():
        seconds[next((group for group, ops in GROUPS.items() if op in ops), "other ops")] += spent
    total = sum(seconds.values())
    return {
        "seconds": wall,
        "shares": {group: spent / total for group, spent in seconds.items()},
        "ops_over_wall": total / wall,
        "top": sorted(by_op.items(), key=lambda item: -item[1])[:top],
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--modes", nargs="+", choices=list(MODES), default=list(MODES))
    parser.add_argument("--batch-sizes", nargs="+", type=int, choices=[1, 32], default=[32, 1])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--top", type=int, default=0, help="also list the N ops with the most self time per row")
    parser.add_argument("--work_dir", default=os.path.join(tempfile.gettempdir(), "elmo-bench-allennlp"))
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    from modeling_elmo import ElmoTokenizer

    work_dir = Path(args.work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    _, _, folder = original_model(work_dir)
    tokenizer = ElmoTokenizer.from_pretrained(folder)
    sentences = wikitext_sentences(32, 12, 37)
    print(f"# CPU: {cpu_description()}")
    print(f"# torch {torch.__version__}, {args.threads} threads; load before: {os.getloadavg()}")
    header = ["products", "cell element-wise", "character CNN", "other ops"]
    print("Shares of the ops' self CPU time; the last column: that time over the unprofiled wall time.")
    print("| mode | batch | words/s | " + " | ".join(header) + " | ops / wall |")
    print("|---|---|---|" + "---|" * (len(header) + 1))
    tops = []
    for mode in args.modes:
        model = load_in_mode(str(folder), mode)
        for batch in args.batch_sizes:
            batches = [sentences] if batch == 32 else [[s] for s in sentences[:8]]
            inputs = [tokenizer(b, is_split_into_words=True, padding=True, return_tensors="pt") for b in batches]
            words = sum(len(s) for b in batches for s in b)
            found = breakdown(model, inputs, args.repeats, args.top)
            cells = " | ".join(f"{found['shares'][group]:.0%}" for group in header)
            print(f"| {mode} | {batch} | {words / found['seconds']:.0f} | {cells} | {found['ops_over_wall']:.0%} |")
            tops.append((mode, batch, found["top"]))
        del model
    for mode, batch, ranked in tops if args.top else []:
        print(f"\n{mode}, batch {batch}: the ops with the most self time (ms)")
        for op, spent in ranked:
            print(f"  {op:<36} {spent * 1e3:9.1f}")
    print(f"# load after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
