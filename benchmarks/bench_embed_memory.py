"""Memory of ``embed_corpus`` over a long corpus: resident set (RSS) after each chunk and the peak, per corpus size.

Each corpus size runs in a fresh process (so that its peak is its own) on a random model of a given size, over a
synthetic corpus whose vocabulary keeps growing as a real one does (Zipf-distributed words out of 300,000), and
consumes the outputs as ``elmo embed`` does (nothing kept). It prints, per size, the peak RSS and the RSS after
each chunk; with ``--tracemalloc``, the Python allocations alive after each chunk and where the largest come from.

    python benchmarks/bench_embed_memory.py --size small --sentences 2048 8192 32768
    python benchmarks/bench_embed_memory.py --size tiny --sentences 8192 --chunk_size 1024 --tracemalloc
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import resource
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))


def zipf_corpus(count: int, vocabulary: int = 300_000, seed: int = 0) -> list[list[str]]:
    """``count`` sentences of 5-40 words drawn with Zipf frequencies (exponent 1.1) from ``vocabulary`` words."""
    import numpy as np

    rng = np.random.default_rng(seed)
    lengths = rng.integers(5, 41, size=count)
    ranks = np.minimum(rng.zipf(1.1, size=int(lengths.sum())), vocabulary)
    words, start = [], 0
    for length in lengths:
        words.append([f"w{rank:x}" for rank in ranks[start : start + length]])
        start += length
    return words


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def _run(queue, size: str, count: int, args: dict) -> None:
    import torch

    from benchmarks.bench_inference import SIZES
    from modeling_elmo import ElmoConfig, ElmoModel, ElmoTokenizer
    from modeling_elmo.inference.embed_corpus import embed_corpus

    torch.set_num_threads(args["threads"])
    torch.manual_seed(0)
    model = ElmoModel(ElmoConfig(**SIZES[size], initializer_range=0.02)).eval()
    tokenizer = ElmoTokenizer()
    corpus = zipf_corpus(count)
    if args["tracemalloc"]:
        import tracemalloc

        tracemalloc.start(5)
        first = None
    after_chunks, traced = [], []
    chunk = args["chunk_size"]
    results = embed_corpus(model, tokenizer, corpus, output=args["output"], batch_size=args["batch_size"],
                           chunk_size=chunk, progress=False, ordered=args["ordered"])  # fmt: skip
    for done, (_, array) in enumerate(results, 1):
        del array  # consumed, as `elmo embed` writes it to the file
        if done % chunk == 0 or done == count:
            after_chunks.append(round(_rss_mib(), 1))
            if args["tracemalloc"]:
                snapshot = tracemalloc.take_snapshot()
                traced.append(round(sum(s.size for s in snapshot.statistics("filename")) / 2**20, 2))
                if first is None:
                    first = snapshot
    top = []
    if args["tracemalloc"]:
        growth = tracemalloc.take_snapshot().compare_to(first, "traceback")[:5]
        top = [f"{stat.size_diff / 2**20:+.2f} MiB {stat.traceback.format()[-1].strip()}" for stat in growth]
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    queue.put({"sentences": count, "peak_rss_mib": round(peak, 1), "rss_after_chunks_mib": after_chunks,
               "traced_mib_after_chunks": traced, "largest_growth": top})  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="small", help="a size of bench_inference.SIZES (tiny, small, ...)")
    parser.add_argument("--sentences", type=int, nargs="+", default=[2048, 8192, 32768])
    parser.add_argument("--chunk_size", type=int, default=4096)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--output", default="elmo")
    parser.add_argument("--ordered", action="store_true", help="embed_corpus's ordered=True (the default of the API)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--tracemalloc", action="store_true", help="also trace Python's allocations (slower)")
    args = parser.parse_args(argv)
    ctx = mp.get_context("spawn")
    for count in args.sentences:
        queue = ctx.Queue()
        child = ctx.Process(target=_run, args=(queue, args.size, count, vars(args)))
        child.start()
        result = queue.get()
        child.join()
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
