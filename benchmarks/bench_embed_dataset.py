"""The dataset path against the HDF5 path: Parquet shards (``write_shards``, what ``elmo embed --output_dir`` runs)
and the HDF5 file (``write_sentences``, what ``elmo embed -o FILE`` runs), on the same sentences, same model.

Both read the same lines (WikiText-2 sentences from ``../shared/data``, joined by spaces, split again by the
tokenizer), embed them with the same batches (``batch_size`` 64, ``max_batch_words`` 4096, chunks of 4096) and write
every vector to disk (a temporary folder, on the same file system for both). One warm-up run of each, then
``--rounds`` rounds, each running both paths, in alternating order; it prints words/s per run, the medians and their
ratio (dataset / HDF5), the median of the rounds' own ratios, and the CPU's name.

    python benchmarks/bench_embed_dataset.py                              # demo model, 2,000 sentences, elmo
    python benchmarks/bench_embed_dataset.py --output_type all --sentences 4000 --rounds 5

With ``--compare_features`` it instead measures the two ways `datasets` can hold the ELMo column, on random vectors
of WikiText-2's sentence lengths: ``Array2D(shape=(None, 2P))`` against ``List(List(Value, length=2P))`` for
``(words, 2P)`` vectors, and ``Array3D(shape=(None, L + 1, 2P))`` (words first) against a nested list that keeps
the layers first, ``(L + 1, words, 2P)``: the time to build the column from numpy and write the Parquet file, and to
read it back through ``datasets`` formatted as numpy, in contiguous batches of 32, random batches of 32 (what a
``Trainer``'s data loader asks for) and single rows. Medians of ``--rounds``.

    python benchmarks/bench_embed_dataset.py --compare_features --sentences 4000
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="model folder (default: the bundled demo model)")
    parser.add_argument("--output_type", default="elmo", help="as elmo embed's (default: %(default)s)")
    parser.add_argument("--sentences", type=int, default=2000, help="WikiText-2 sentences (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds after the warm-up (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default: %(default)s)")
    parser.add_argument("--compare_features", action="store_true", help="measure the column's feature types instead")
    return parser.parse_args(argv)


def cpu_name() -> str:
    from benchmarks.bench_tagger_precision import cpu_model

    return f"{cpu_model()} ({os.cpu_count()} CPUs visible)"


def corpus(count: int) -> list[str]:
    from benchmarks.bench_inference import wikitext_sentences

    return [" ".join(words) for words in wikitext_sentences(count, 1, 100)]


def run_hdf5(model, tokenizer, lines: list[str], output_type: str, folder: str) -> float:
    from modeling_elmo.inference.hdf5_file import write_sentences

    path = os.path.join(folder, "out.hdf5")
    start = time.perf_counter()
    write_sentences(path, model, tokenizer, lines, output_type, 64, 4096, progress=False, total=len(lines), attrs={})
    seconds = time.perf_counter() - start
    os.remove(path)
    return seconds


def run_dataset(model, tokenizer, lines: list[str], output_type: str, folder: str) -> float:
    import datasets

    from modeling_elmo.inference.parquet_shards import write_shards

    out = os.path.join(folder, "shards")
    start = time.perf_counter()
    dataset = datasets.Dataset.from_dict({"text": lines})
    write_shards(model, tokenizer, dataset, out, output_type=output_type, progress=False, log=lambda line: None)
    seconds = time.perf_counter() - start
    shutil.rmtree(out)
    return seconds


def compare_paths(args: argparse.Namespace) -> None:
    import datasets
    import torch

    from modeling_elmo import ElmoModel, ElmoTokenizer, demo_model_path

    datasets.disable_progress_bars()
    torch.set_num_threads(args.threads)
    folder = args.model or str(demo_model_path())
    model, tokenizer = ElmoModel.from_pretrained(folder).eval(), ElmoTokenizer.from_pretrained(folder)
    lines = corpus(args.sentences)
    words = sum(len(tokenizer.tokenize(line)) for line in lines)
    print(
        f"CPU: {cpu_name()}; torch threads {args.threads}; torch {torch.__version__}, datasets {datasets.__version__}"
    )
    print(f"model {folder}, --output_type {args.output_type}: {len(lines)} WikiText-2 sentences, {words} words")
    paths = {"hdf5": run_hdf5, "dataset": run_dataset}
    rates: dict[str, list[float]] = {name: [] for name in paths}
    with tempfile.TemporaryDirectory() as work:
        for run in paths.values():  # warm-up
            run(model, tokenizer, lines, args.output_type, work)
        for round_ in range(args.rounds):
            order = list(paths) if round_ % 2 == 0 else list(reversed(paths))
            for name in order:
                seconds = paths[name](model, tokenizer, lines, args.output_type, work)
                rates[name].append(words / seconds)
            print(f"round {round_ + 1}: " + ", ".join(f"{n} {rates[n][-1]:,.0f} words/s" for n in paths))
    medians = {name: statistics.median(values) for name, values in rates.items()}
    # Each round's two runs are close in time: the median of their ratios leaves out most of a busy machine's drift.
    paired = statistics.median(d / h for d, h in zip(rates["dataset"], rates["hdf5"], strict=True))
    print(
        f"median words/s: HDF5 {medians['hdf5']:,.0f}, dataset (Parquet shards) {medians['dataset']:,.0f}; "
        f"ratio dataset/HDF5 {medians['dataset'] / medians['hdf5']:.3f} (median of the rounds' ratios {paired:.3f})"
    )


def compare_features(args: argparse.Namespace) -> None:
    import datasets
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    from datasets import Array2D, Array3D, Features, List, Value

    from modeling_elmo.inference.embed_dataset import vectors_to_arrow

    datasets.disable_progress_bars()
    rng = np.random.default_rng(0)
    lengths = [len(line.split()) for line in corpus(args.sentences)]
    dim, layers = 128, 3  # the demo model's 2P and L + 1
    two = [rng.standard_normal((n, dim), dtype=np.float32) for n in lengths]
    three = [rng.standard_normal((layers, n, dim), dtype=np.float32) for n in lengths]
    cases = [
        ("(words, 2P)", "Array2D((None, 2P))", Array2D((None, dim), "float32"), two, "elmo"),
        ("(words, 2P)", "List(List(Value, length=2P))", List(List(Value("float32"), length=dim)), two, "elmo"),
        ("all", "Array3D((None, L+1, 2P)), words first", Array3D((None, layers, dim), "float32"), three, "all"),
        ("all", "List(List(List(Value, length=2P)), length=L+1)", List(List(List(Value("float32"), length=dim)),
                                                                       length=layers), three, "all-layers-first"),
    ]  # fmt: skip
    print(f"CPU: {cpu_name()}; datasets {datasets.__version__}, pyarrow {pa.__version__}")
    print(
        f"{len(lengths)} rows of WikiText-2 sentence lengths ({sum(lengths)} words), float32; medians of {args.rounds}"
    )
    order = np.random.default_rng(1).permutation(len(lengths)).tolist()
    with tempfile.TemporaryDirectory() as work:
        for output, name, feature, arrays, layout in cases:
            arrow_type = Features({"x": feature}).arrow_schema.field("x").type
            times: dict[str, list[float]] = {}
            path = os.path.join(work, "x.parquet")
            for _ in range(args.rounds):
                start = time.perf_counter()
                if layout == "all-layers-first":
                    column = _layers_first(arrays, dim, layers)
                else:
                    column = vectors_to_arrow(arrays, layout, arrow_type)
                pq.write_table(pa.table({"x": column}, schema=Features({"x": feature}).arrow_schema), path)
                times.setdefault("build + write", []).append(time.perf_counter() - start)
                rows = datasets.Dataset.from_parquet(path, cache_dir=os.path.join(work, "cache")).with_format("numpy")
                start = time.perf_counter()
                for i in range(0, len(rows), 32):
                    rows[i : i + 32]["x"]
                times.setdefault("read, batches of 32", []).append(time.perf_counter() - start)
                start = time.perf_counter()
                for i in range(0, len(rows), 32):
                    rows.__getitems__(order[i : i + 32])
                times.setdefault("read, random batches of 32", []).append(time.perf_counter() - start)
                start = time.perf_counter()
                for i in range(min(1000, len(rows))):
                    rows[i]["x"]
                times.setdefault("read, 1000 single rows", []).append(time.perf_counter() - start)
                del rows
                shutil.rmtree(os.path.join(work, "cache"))
            size = os.path.getsize(path) / 2**20
            cells = ", ".join(f"{k} {statistics.median(v) * 1000:,.0f} ms" for k, v in times.items())
            print(f"{output:>12} {name:<50} {size:,.0f} MiB: {cells}")


def _layers_first(arrays, dim: int, layers: int):
    """``(L + 1, words, 2P)`` arrays as a fixed-size list (layers) of lists (words) of fixed-size lists (2P)."""
    import numpy as np
    import pyarrow as pa

    flat = np.concatenate([a.reshape(-1) for a in arrays])
    counts = np.repeat([a.shape[1] for a in arrays], layers)
    offsets = np.zeros(len(counts) + 1, np.int32)
    np.cumsum(counts, out=offsets[1:])
    words = pa.ListArray.from_arrays(pa.array(offsets), pa.FixedSizeListArray.from_arrays(pa.array(flat), dim))
    return pa.FixedSizeListArray.from_arrays(words, layers)


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.compare_features:
        compare_features(args)
    else:
        compare_paths(args)


if __name__ == "__main__":
    main()
