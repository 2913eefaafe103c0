"""CPU/GPU inference benchmark: ElmoModel's fast path against a common-style implementation.

Builds random-weight models at the released sizes and times, in one run, interleaved, after warm-up:

- ``common``: the approach of the common PyTorch ELMo (a Python loop over time steps of one LSTM
  cell per direction and layer, over length-sorted batches that shrink as sentences end; input
  and recurrent products computed at every step; the character CNN over all 50 positions),
  written here against the same weights;
- ``fast``: ``ElmoModel`` under ``torch.inference_mode`` (the package's default path);
- ``fast+cache``: the same with the word-vector cache built for the benchmark's vocabulary;
- ``plain`` (``--plain``): the step-by-step reference, one sentence at a time (slow).

It prints words/s (median over repeats), the speedup of each path over ``common``, the largest
difference of each path's top layer to ``fast``, and the peak memory of one forward pass, measured
in a child process (growth of the resident set over its level before the call, sampled every
millisecond, on CPU; ``max_memory_allocated`` on CUDA), after one warm-up call.

    python benchmarks/bench_inference.py                          # original size, batch 32, 2 threads
    python benchmarks/bench_inference.py --sizes small medium original --batch-sizes 8 32 64
    python benchmarks/bench_inference.py --smoke                   # tiny model, seconds (CI)

With ``--allennlp_python REFENV/bin/python`` (the reference environment that
``../shared/tools/allennlp/make_refenv.sh`` builds) it instead compares this package with AllenNLP 2.10's
``Elmo`` (see [`compare_with_allennlp`]): the original 2x4096_512 size with random weights written in the original
format and converted, so that both load identical weights; real sentences from WikiText-2; one process per
measurement, ours and AllenNLP's alternating; float32, bfloat16 and int8 at batch 32 and batch 1, and
``elmo embed`` on a corpus against AllenNLP's loop of batches of 64 in file order. It prints the CPU and its
matrix units, the matrix-product rates measured at the model's own shapes (the ceiling; the LSTM steps' products in
the model's own order, see [`measure_steps`]), and for each row the median words/s, the ratio to AllenNLP and the
fraction of the ceiling reached.

    python benchmarks/bench_inference.py --allennlp_python /work/refenv-allennlp/bin/python
    python benchmarks/bench_inference.py --ceiling      # the same words/s and ceiling tables, without AllenNLP

With ``--embed_sweep`` it times ``embed_corpus`` (what ``elmo embed`` runs, ``--output_type elmo``) on the first
``--corpus_sentences`` WikiText-2 sentences in file order, for a few ``batch_size``/``max_batch_words`` pairs
(default 32/2048, 64/4096, 128/8192), in float32 and bfloat16 (``--modes``): words/s (median of interleaved passes after
warm-up), and the peak resident set of one pass in a child process (after a warm-up pass). A pair written
``64/4096/nocache`` runs with ``word_cache=False`` (the character encoder once per batch instead of once per chunk).

    python benchmarks/bench_inference.py --embed_sweep --corpus_sentences 200 --repeats 3
    python benchmarks/bench_inference.py --embed_sweep 64/4096 96/6144 --modes float32
    python benchmarks/bench_inference.py --embed_sweep 64/4096 64/4096/nocache --modes float32 --sizes original
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import math
import multiprocessing as mp
import os
import platform
import random
import resource
import statistics
import string
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import torch

from modeling_elmo import ElmoConfig, ElmoModel, ElmoTokenizer
from modeling_elmo.characters import word_to_char_ids
from modeling_elmo.inference.token_cache import build_token_cache
from modeling_elmo.reference import reference_forward

SIZES = {
    "tiny": dict(lstm_dim=64, projection_dim=16, char_cnn_filters=[[1, 4], [2, 8], [3, 16]], n_highway=1),
    "small": dict(
        lstm_dim=1024,
        projection_dim=128,
        n_highway=1,
        char_cnn_filters=[[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]],
    ),
    "medium": dict(
        lstm_dim=2048,
        projection_dim=256,
        n_highway=1,
        char_cnn_filters=[[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]],
    ),
    "original": dict(),  # the ElmoConfig defaults: 2x4096_512, 2 highway, 2048 channels
}


def make_batch(batch_size: int, min_words: int, max_words: int, vocab: list[str], seed: int):
    rng = random.Random(seed)
    lengths = [rng.randint(min_words, max_words) for _ in range(batch_size)]
    ids = torch.zeros(batch_size, max(lengths), 50, dtype=torch.long)
    mask = torch.zeros(batch_size, max(lengths), dtype=torch.long)
    for b, n in enumerate(lengths):
        ids[b, :n] = torch.tensor([word_to_char_ids(rng.choice(vocab)) for _ in range(n)])
        mask[b, :n] = 1
    return ids, mask


def make_vocab(size: int = 5000, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choices(string.ascii_lowercase, k=rng.randint(1, 12))) for _ in range(size)]


# --------------------------------------------------------------------------- common-style baseline


def _common_char_cnn(model: ElmoModel, ids: torch.Tensor) -> torch.Tensor:
    enc = model.char_cnn
    chars = enc.char_embedding(ids).transpose(1, 2)  # all 50 positions
    x = torch.cat([enc.activation(conv(chars).amax(-1)) for conv in enc.convolutions], dim=-1)
    for highway in enc.highways:
        x = highway(x)
    return enc.projection(x)


def _common_lstm(layer, direction: int, inputs: torch.Tensor, lengths: list[int]) -> torch.Tensor:
    """One direction of one layer: the input and recurrent products at every step, gates as slices."""
    batch, steps, _ = inputs.shape
    w_in, w_state = layer.input_kernel[direction], layer.state_kernel[direction]
    bias, w_proj = layer.bias[direction], layer.projection[direction]
    d = w_proj.shape[0]
    h = inputs.new_zeros(batch, w_proj.shape[1])
    c = inputs.new_zeros(batch, d)
    output = inputs.new_zeros(batch, steps, w_proj.shape[1])
    for t in range(steps):
        n = sum(1 for length in lengths if length > t)
        gates = inputs[:n, t] @ w_in + bias + h[:n] @ w_state
        i, j = torch.sigmoid(gates[:, :d]), torch.tanh(gates[:, d : 2 * d])
        f, o = torch.sigmoid(gates[:, 2 * d : 3 * d] + 1.0), torch.sigmoid(gates[:, 3 * d :])
        memory = i * j + f * c[:n]
        if layer.cell_clip is not None:
            memory = memory.clamp(-layer.cell_clip, layer.cell_clip)
        out = (o * torch.tanh(memory)) @ w_proj
        if layer.proj_clip is not None:
            out = out.clamp(-layer.proj_clip, layer.proj_clip)
        h, c = h.clone(), c.clone()
        h[:n], c[:n] = out, memory
        output[:n, t] = out
    return output + inputs if layer.residual else output


def _reverse(x: torch.Tensor, lengths: list[int]) -> torch.Tensor:
    out = x.clone()
    for b, n in enumerate(lengths):
        out[b, :n] = x[b, :n].flip(0)
    return out


@torch.inference_mode()
def common_forward(model: ElmoModel, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Top layer ``(B, W, 2P)`` the common way."""
    lengths = mask.sum(1)
    order = lengths.argsort(descending=True)
    ids, mask = ids[order], mask[order]
    full, steps = model.add_boundaries(ids, mask.bool())
    n_steps = steps.tolist()
    tokens = torch.zeros(*full.shape[:2], model.config.projection_dim, device=ids.device)
    present = full.ne(0).any(-1)
    tokens[present] = _common_char_cnn(model, full[present])
    directions = []
    for d in range(2):
        x = tokens if d == 0 else _reverse(tokens, n_steps)
        for layer in model.bilm.layers:
            x = _common_lstm(layer, d, x, n_steps)
        directions.append(x if d == 0 else _reverse(x, n_steps))
    top = torch.cat(directions, dim=-1)[:, 1 : ids.shape[1] + 1] * mask.unsqueeze(-1)
    return top[order.argsort()]


# ------------------------------------------------------------------------------------- the paths


def run_path(name: str, model: ElmoModel, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    if name == "common":
        return common_forward(model, ids, mask)
    if name == "plain":
        top = torch.zeros(*ids.shape[:2], 2 * model.config.projection_dim, device=ids.device)
        for b in range(ids.shape[0]):
            n = int(mask[b].sum())
            top[b, :n] = reference_forward(model, ids[b, :n])[0][-1]
        return top
    with torch.inference_mode():
        return model(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states[-1]


def build_model(size: str, device: str, cache_vocab: list[str] | None = None) -> ElmoModel:
    torch.manual_seed(0)
    model = ElmoModel(ElmoConfig(**SIZES[size], initializer_range=0.02)).eval().to(device)
    if cache_vocab is not None:
        build_token_cache(model, cache_vocab, progress=False)
    return model


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def _peak_memory_child(queue, size, device, path, batch, args, vocab):
    torch.set_num_threads(args.threads)
    model = build_model(size, device, vocab if path == "fast+cache" else None)
    ids, mask = make_batch(batch, args.min_words, args.max_words, vocab, seed=1)
    ids, mask = ids.to(device), mask.to(device)
    run_path(path, model, ids, mask)  # warm-up: allocator pools and caches settle
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        run_path(path, model, ids, mask)
        queue.put((torch.cuda.max_memory_allocated() - base) / 2**20)
        return
    # RSS sampled every millisecond while the forward pass runs in another thread.
    gc.collect()
    base = _rss_mib()
    worker = threading.Thread(target=run_path, args=(path, model, ids, mask))
    peak = base
    worker.start()
    while worker.is_alive():
        peak = max(peak, _rss_mib())
        time.sleep(0.001)
    queue.put(peak - base)


def peak_memory_mib(size, device, path, batch, args, vocab) -> float:
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    child = ctx.Process(target=_peak_memory_child, args=(queue, size, device, path, batch, args, vocab))
    child.start()
    child.join()
    return queue.get() if child.exitcode == 0 else float("nan")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", nargs="+", default=["original"], choices=list(SIZES))
    parser.add_argument("--batch-sizes", nargs="+", type=int, default=[32])
    parser.add_argument("--min-words", type=int, default=12)
    parser.add_argument("--max-words", type=int, default=37)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--plain", action="store_true", help="also time the step-by-step reference (slow)")
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-memory measurement")
    parser.add_argument("--smoke", action="store_true", help="tiny model, 2 repeats: a quick check that it runs")
    parser.add_argument("--allennlp_python", help="the AllenNLP reference environment's python: compare with it")
    parser.add_argument(
        "--ceiling",
        action="store_true",
        help="the --allennlp_python tables (words/s and fraction of ceiling per mode) without AllenNLP's columns",
    )
    parser.add_argument(
        "--modes",
        nargs="+",
        choices=list(MODES),
        help="with --allennlp_python (default: all) or --embed_sweep (default: float32 bfloat16)",
    )
    parser.add_argument("--rounds", type=int, default=3, help="alternating process pairs per row (--allennlp_python)")
    parser.add_argument(
        "--corpus_sentences", type=int, default=400, help="WikiText-2 sentences for the corpus rows and --embed_sweep"
    )
    parser.add_argument(
        "--embed_sweep",
        nargs="*",
        metavar="BATCH/WORDS[/nocache]",
        help=f"time embed_corpus at these batch_size/max_batch_words pairs (default: {' '.join(EMBED_SWEEP)}); "
        "/nocache: without the word cache",
    )
    parser.add_argument("--work_dir", default=os.path.join(tempfile.gettempdir(), "elmo-bench-allennlp"))
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # internal: one timed process of ours
    args = parser.parse_args(argv)
    if args.worker:
        return _our_worker(args.worker)
    if args.allennlp_python or args.ceiling:
        args.modes = args.modes or list(MODES)
        return compare_with_allennlp(args)
    if args.smoke:
        args.sizes, args.batch_sizes, args.repeats, args.plain, args.no_memory = ["tiny"], [4], 2, True, True
        args.min_words, args.max_words = 3, 8
    if args.embed_sweep is not None:
        return embed_sweep(args)
    torch.set_num_threads(args.threads)
    vocab = make_vocab()
    paths = ["common", "fast", "fast+cache"] + (["plain"] if args.plain else [])
    print(
        f"# {platform.processor() or platform.machine()}, torch {torch.__version__}, {args.threads} threads, "
        f"device {args.device}, sentences of {args.min_words}-{args.max_words} words"
    )
    print("| size | batch | path | words/s (median) | speedup vs common | max abs diff to fast | peak MiB |")
    print("|---|---|---|---|---|---|---|")
    for size in args.sizes:
        models = {"plain": build_model(size, args.device), "common": None}
        models["fast"] = models["common"] = models["plain"]
        models["fast+cache"] = build_model(size, args.device, vocab)
        for batch in args.batch_sizes:
            ids, mask = make_batch(batch, args.min_words, args.max_words, vocab, seed=1)
            ids, mask = ids.to(args.device), mask.to(args.device)
            words = int(mask.sum())
            outputs = {p: run_path(p, models[p], ids, mask) for p in paths}  # warm-up 1, and the diffs
            for _ in range(args.warmup - 1):
                for p in paths:
                    run_path(p, models[p], ids, mask)
            times = {p: [] for p in paths}
            for _ in range(args.repeats):
                for p in paths:  # interleaved, so that noise hits every path alike
                    if args.device == "cuda":
                        torch.cuda.synchronize()
                    start = time.perf_counter()
                    run_path(p, models[p], ids, mask)
                    if args.device == "cuda":
                        torch.cuda.synchronize()
                    times[p].append(time.perf_counter() - start)
            common = statistics.median(times["common"])
            for p in paths:
                median = statistics.median(times[p])
                diff = float((outputs[p] - outputs["fast"]).abs().max())
                memory = float("nan") if args.no_memory else peak_memory_mib(size, args.device, p, batch, args, vocab)
                print(
                    f"| {size} | {batch} | {p} | {words / median:.0f} | {common / median:.2f}x | {diff:.1e} "
                    f"| {memory:.0f} |",
                    flush=True,
                )


# ---------------------------------------------------------------------- against AllenNLP, process by process

HERE = Path(__file__).resolve().parent
SHARED = Path(os.environ.get("ELMO_SHARED_DIR", HERE.parent.parent / "shared"))  # as for the tests
ALLENNLP_DIR = SHARED / "tools" / "allennlp"
# Read in this order: 9,364 sentences in test.txt, then 8,057 in valid.txt (17,421 in all, of 1 word or more).
WIKITEXT_FILES = [SHARED / "data" / "wikitext-2" / name for name in ("test.txt", "valid.txt")]
ORIGINAL_FILTERS = [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]]
MODES = ("float32", "bfloat16", "int8")
EMBED_SWEEP = ("32/2048", "64/4096", "128/8192")  # --embed_sweep's batch_size/max_batch_words pairs
MATRIX_UNITS = ("amx_tile", "amx_bf16", "amx_int8", "avx512_bf16", "avx512_vnni", "avx_vnni", "avx512f")


def cpu_description() -> str:
    """The CPU model and which of its matrix/vector units of interest ``/proc/cpuinfo`` lists."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or platform.machine()
    fields = {}
    for line in text.splitlines():  # the first processor's fields
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    flags = set(fields.get("flags", "").split())
    units = ", ".join(f"{unit} {'yes' if unit in flags else 'no'}" for unit in MATRIX_UNITS)
    # A virtual machine may show only "AMD EPYC": the family and model tell the generation (23/1: Zen 1).
    generation = f"family {fields.get('cpu family', '?')} model {fields.get('model', '?')}"
    return f"{fields.get('model name', '?')}, {generation} ({os.cpu_count()} CPUs visible; {units})"


def original_model(work_dir: Path) -> tuple[Path, Path, Path]:
    """``(options.json, weights.hdf5, our folder)`` of a random original-size model, written once into
    ``work_dir``: the original format (weights ``normal / sqrt(fan_in)``, activations of order one), converted."""
    sys.path.insert(0, str(HERE.parent / "tests"))
    from original_format import write_original_model

    from modeling_elmo.hub.convert import convert

    folder = work_dir / "ours"
    options, weights = work_dir / "original" / "options.json", work_dir / "original" / "lm_weights.hdf5"
    if not (folder / "model.safetensors").exists():
        options, weights = write_original_model(
            work_dir / "original", lstm_dim=4096, projection_dim=512, filters=ORIGINAL_FILTERS, char_dim=16,
            n_highway=2,
        )  # fmt: skip
        convert(options, weights, folder, overwrite=True, progress=False)
    return options, weights, folder


def wikitext_sentences(count: int, min_words: int, max_words: int, skip: int = 0) -> list[list[str]]:
    """``count`` sentences of ``min_words``-``max_words`` words of WikiText-2's test set, then its validation set
    (lines cut at `` . ``), after the first ``skip``. Fewer than ``count`` exist: a note on stderr, and those; none,
    or a missing file: an error."""
    found = []
    for path in WIKITEXT_FILES:
        if not path.is_file():
            raise SystemExit(
                f"error: {path} not found (WikiText-2's raw test.txt and valid.txt are read from there;"
                " set ELMO_SHARED_DIR)"
            )
        for line in path.read_text(encoding="utf-8").splitlines():
            if not line.strip() or line.strip().startswith("="):
                continue
            for sentence in line.split(" . "):
                words = sentence.split()
                if min_words <= len(words) <= max_words:
                    found.append(words)
                    if len(found) == skip + count:
                        return found[skip:]
    have = max(0, len(found) - skip)
    where = f"WikiText-2's {' and '.join(p.name for p in WIKITEXT_FILES)} hold {have}"
    if skip:
        where += f" (after the first {skip})"
    if not have:
        raise SystemExit(f"error: {where} sentences of {min_words}-{max_words} words")
    print(f"note: {where} sentences of {min_words}-{max_words} words, not {count}: using those", file=sys.stderr)
    return found[skip:]


def load_in_mode(folder: str, mode: str) -> ElmoModel:
    """Our model in ``mode``: float32, ``from_pretrained(..., dtype=torch.bfloat16)``, or ``quantize_int8``."""
    if mode == "bfloat16":
        return ElmoModel.from_pretrained(folder, dtype=torch.bfloat16).eval()
    model = ElmoModel.from_pretrained(folder).eval()
    if mode == "int8":
        from modeling_elmo.inference.quantize import quantize_int8

        quantize_int8(model)
    return model


def _our_worker(spec_path: str) -> None:
    """One timed process of ours (see ``allennlp_worker.py`` for the spec); prints one JSON line."""
    spec = json.loads(Path(spec_path).read_text())
    torch.set_num_threads(spec["threads"])
    if spec.get("ceiling"):
        print(json.dumps(measure_ceiling(spec["ceiling"])))
        return
    from modeling_elmo import ElmoTokenizer

    start = time.perf_counter()
    model = load_in_mode(spec["folder"], spec["mode"])
    tokenizer = ElmoTokenizer.from_pretrained(spec["folder"])
    load_s = time.perf_counter() - start
    inputs = [tokenizer(b, is_split_into_words=True, padding=True, return_tensors="pt") for b in spec["batches"]]
    times = []
    with torch.inference_mode():
        for repeat in range(spec["warmup"] + spec["repeats"]):
            start = time.perf_counter()
            for k, batch in enumerate(inputs):
                out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
                if repeat == 0 and k == 0 and spec.get("dump"):
                    import numpy as np

                    np.save(spec["dump"], out.elmo.float().numpy())
            if repeat >= spec["warmup"]:
                times.append(time.perf_counter() - start)
    print(json.dumps({"load_s": load_s, "times": times}))


def ceiling_spec(sentences: list[list[str]], modes: list[str]) -> dict:
    """``measure_ceiling``'s spec for ``sentences`` run as one batch: the rows still running at each LSTM step (with
    ``<S>`` and ``</S>``), the distinct words (and the two boundaries), and ``modes``."""
    steps = [len(s) + 2 for s in sentences]
    return {
        "rows": [sum(n > t for n in steps) for t in range(max(steps))],
        "distinct": len({w for s in sentences for w in s}) + 2,
        "modes": modes,
    }


def product_shapes(rows: list[int], distinct: int, p: int = 512, d: int = 4096, filters: int = 2048):
    """The model's matrix products for one batch, as it runs them: ``{name: [((groups, rows, inner, outer), calls,
    weights), ...]}``, with ``calls`` per batch and how many different weights of that shape the model holds (its
    layers). ``rows`` are the rows running at each LSTM step (the batch's rows still inside their sentence, so they
    shrink as sentences end), ``distinct`` the distinct words."""
    counts = sorted(Counter(rows).items())
    return {
        "LSTM input": [((2, sum(rows), p, 4 * d), 2, 2)],  # per layer, all packed steps at once
        "LSTM recurrent": [((2, n, p, 4 * d), 2 * calls, 2) for n, calls in counts],  # per layer and step
        "LSTM projection": [((2, n, d, p), 2 * calls, 2) for n, calls in counts],
        "highway": [((1, distinct, filters, filters), 4, 4)],
        "token projection": [((1, distinct, filters, p), 1, 1)],
    }


def _packed(kernel: str, weights: list[torch.Tensor], rows: int = 32) -> list[list]:
    """Per weight ``(G, in, out)`` of ``weights``, each group's ``(in, out)`` packed for ``kernel``: ``int8``
    (``linear_dynamic``'s packed int8) or ``prepacked`` (oneDNN's layout, for products of about ``rows`` rows)."""
    from modeling_elmo.inference.quantize import _pack

    if kernel == "int8":
        return [[_pack(w[g].t()) for g in range(w.shape[0])] for w in weights]
    reorder = torch.ops.mkldnn._reorder_linear_weight
    return [[reorder(w[g].t().contiguous(), rows) for g in range(w.shape[0])] for w in weights]


def measure_ceiling(spec: dict) -> dict:
    """GFLOP/s of the matrix products at the model's own shapes (``product_shapes``): per kind of product, and
    combined (all the products' work over their summed time). Per shape, the best of the kernels the package can
    use: ``torch.bmm`` and oneDNN's prepacked products (``_PrepackedWeights``, float32 and bfloat16), the int8
    products (``linear_dynamic``). The plain ``bmm`` rates are kept too (``plain``), the ceiling without prepacking.

    The once-per-batch products cycle through as many different weights as the model has of each shape (one per
    layer), so that the weights come from memory as they do in the model, not from a cache that holds one layer's.
    The per-step products (recurrent and projection) run in the model's own order instead (``measure_steps``): what
    stays in the caches from one step to the next depends on it."""
    from modeling_elmo.fast_path_elmo import _PrepackedWeights
    from modeling_elmo.inference.quantize import _linear

    def median_seconds(run, layers: int) -> float:
        run()
        samples = []
        for _ in range(5):
            start = time.perf_counter()
            run()
            samples.append((time.perf_counter() - start) / layers)
        return statistics.median(samples)

    def kernels(mode: str, entries: list) -> list:
        """One kind of product's weights, as each kernel takes them: [(name, run(a) -> outputs), ...]."""
        (groups, rows, inner, outer), _, layers = entries[0]
        weights = [torch.randn(groups, inner, outer) / inner**0.5 for _ in range(layers)]
        if mode == "int8":
            packed = _packed("int8", weights)
            return [("best", lambda a: [_linear(a[g], each[g]) for each in packed for g in range(groups)])]
        dtype = getattr(torch, mode)
        weights = [w.to(dtype) for w in weights]
        found = [("plain", lambda a: [torch.bmm(a, w) for w in weights])]
        if _PrepackedWeights.supported(dtype):
            linear = torch.ops.mkldnn._linear_pointwise
            packed = _packed("prepacked", weights, max(shape[1] for shape, _, _ in entries))
            found.append(
                (
                    "prepacked",
                    lambda a: [linear(a[g], each[g], None, "none", [], "") for each in packed for g in range(groups)],
                )
            )
        return found

    result = {}
    for mode in spec.get("modes", MODES):
        best, plain = {}, {}
        for name, by_kernel in measure_steps(mode, spec["rows"]).items():
            best[name] = [min(by_kernel.values(), key=lambda each: each[1])]
            if "plain" in by_kernel:
                plain[name] = [by_kernel["plain"]]
        for name, entries in product_shapes(spec["rows"], spec["distinct"]).items():
            if name in STEP_PRODUCTS:
                continue
            found = kernels(mode, entries)
            for shape, calls, layers in entries:
                a = torch.randn(*shape[:3]).to(torch.float32 if mode == "int8" else getattr(torch, mode))
                times = {kernel: median_seconds(lambda run=run, a=a: run(a), layers) for kernel, run in found}
                work = 2 * math.prod(shape) * calls
                best.setdefault(name, []).append((work, min(times.values()) * calls))
                if "plain" in times:
                    plain.setdefault(name, []).append((work, times["plain"] * calls))
        result[mode] = _rates(best)
        if plain:
            result[mode]["plain"] = _rates(plain)
    return result


STEP_PRODUCTS = ("LSTM recurrent", "LSTM projection")


def measure_steps(mode: str, rows: list[int], p: int = 512, d: int = 4096, repeats: int = 3) -> dict:
    """``{name: {kernel: (FLOP, seconds)}}`` of the per-step products of one batch (``STEP_PRODUCTS``), run in
    the model's order, for each kernel the model can run them with: ``plain``, ``torch.bmm`` over both directions
    (each layer's steps, the two directions in one call: the model's float32 path at batch 1), and ``prepacked``
    (oneDNN's, float32 and bfloat16) or ``int8`` (``linear_dynamic``), one direction after the other (each
    direction's steps in turn: the model's path elsewhere). Each call is timed; the median over ``repeats`` runs
    of the batch's steps, after one untimed run.

    The order matters: running one direction's steps in turn reuses that direction's weights at every step (20 MB
    in bfloat16 at the original size, 10 MB in int8), which a large last-level cache keeps, while both directions
    together (80 MB in float32) come from memory at every step."""
    from modeling_elmo.fast_path_elmo import _PrepackedWeights
    from modeling_elmo.inference.quantize import _linear

    dtype = torch.float32 if mode == "int8" else getattr(torch, mode)
    layers = 2
    weights = {
        name: [torch.randn(2, inner, outer) / inner**0.5 for _ in range(layers)]
        for name, (inner, outer) in zip(STEP_PRODUCTS, ((p, 4 * d), (d, p)), strict=True)
    }
    kernels = {}
    if mode == "int8":
        packed = {name: _packed("int8", each) for name, each in weights.items()}
        kernels["int8"] = (False, lambda name, a, layer, g: _linear(a, packed[name][layer][g]))
    else:
        weights = {name: [w.to(dtype) for w in each] for name, each in weights.items()}
        kernels["plain"] = (True, lambda name, a, layer, g: torch.bmm(a, weights[name][layer]))
        if _PrepackedWeights.supported(dtype):
            linear = torch.ops.mkldnn._linear_pointwise
            packed = {name: _packed("prepacked", each) for name, each in weights.items()}
            kernels["prepacked"] = (
                False,
                lambda name, a, layer, g: linear(a, packed[name][layer][g], None, "none", [], ""),
            )
    inputs = {n: {name: torch.randn(2, n, w[0].shape[1]).to(dtype) for name, w in weights.items()} for n in set(rows)}
    work = {name: sum(2 * 2 * n * w[0].shape[1] * w[0].shape[2] for n in rows) * layers for name, w in weights.items()}

    def run(joined: bool, call) -> dict[str, float]:
        seconds = dict.fromkeys(STEP_PRODUCTS, 0.0)
        for layer in range(layers):
            for g in [None] if joined else range(2):
                for n in rows:
                    for name in STEP_PRODUCTS:
                        a = inputs[n][name] if joined else inputs[n][name][g]
                        start = time.perf_counter()
                        call(name, a, layer, g)
                        seconds[name] += time.perf_counter() - start
        return seconds

    result = {name: {} for name in STEP_PRODUCTS}
    for kernel, (joined, call) in kernels.items():
        run(joined, call)
        runs = [run(joined, call) for _ in range(repeats)]
        for name in STEP_PRODUCTS:
            result[name][kernel] = (work[name], statistics.median(r[name] for r in runs))
    return result


def _rates(measured: dict[str, list[tuple[float, float]]]) -> dict:
    """GFLOP/s per kind of product and combined, from its shapes' (FLOP, seconds) per batch."""
    rates = {name: sum(w for w, _ in each) / sum(t for _, t in each) / 1e9 for name, each in measured.items()}
    work = sum(w for each in measured.values() for w, _ in each)
    return {"shapes": rates, "combined": work / sum(t for each in measured.values() for _, t in each) / 1e9}


def useful_gflop(batches: list[list[list[str]]], p: int = 512, d: int = 4096, filters: int = 2048) -> float:
    """The products' work (GFLOP) of ``batches``: the LSTMs over every sentence's words and ``<S>``, ``</S>``,
    the highway and projection layers once per distinct word (the character convolutions, a few %, left out)."""
    steps = sum(len(s) + 2 for b in batches for s in b)
    distinct = sum(len({w for s in b for w in s}) + 2 for b in batches)
    lstm = 2 * 2 * (2 * p * 4 * d + d * p)
    token = 2 * 2 * filters * filters + filters * p
    return 2 * (lstm * steps + token * distinct) / 1e9


def _run_json(command: list[str], spec: dict, work_dir: Path) -> dict:
    path = work_dir / "spec.json"
    path.write_text(json.dumps(spec))
    done = subprocess.run([*command, str(path)], capture_output=True, text=True, env=_bench_env())
    if done.returncode != 0:
        raise SystemExit(f"error: {' '.join(command)} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _bench_env() -> dict:
    here = str(HERE.parent)
    path = os.environ.get("PYTHONPATH", "")
    return {**os.environ, "PYTHONPATH": here + (os.pathsep + path if path else "")}


def _timed(command: list[str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=_bench_env())
    if done.returncode != 0:
        raise SystemExit(f"error: {' '.join(command)} failed:\n{done.stderr[-3000:]}")
    return time.perf_counter() - start


def compare_with_allennlp(args) -> None:
    """Ours against AllenNLP's ``Elmo`` (see the module's docstring); prints markdown tables."""
    work_dir = Path(args.work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    options, weights, folder = original_model(work_dir)
    ours = [sys.executable, str(Path(__file__).resolve()), "--worker"]
    theirs = [args.allennlp_python, str(HERE / "allennlp_worker.py")] if args.allennlp_python else None
    common = {"threads": args.threads, "warmup": args.warmup, "repeats": args.repeats}
    allennlp_spec = {"allennlp_dir": str(ALLENNLP_DIR), "options": str(options), "weights": str(weights)}
    print(f"# CPU: {cpu_description()}")
    print(f"# torch {torch.__version__}, {args.threads} threads; load before: {os.getloadavg()}")
    print("# original 2x4096_512 size, random weights (the original format, converted: both load the same ones)")

    sentences = wikitext_sentences(32, args.min_words, args.max_words)
    rows = {32: [sentences], 1: [[s] for s in sentences[:8]]}
    shapes = {batch: ceiling_spec(sentences if batch > 1 else sentences[:1], args.modes) for batch in rows}

    def median_round(measured: list[dict]) -> dict:
        """Per mode, the round whose ceiling has the median combined rate (the one shown in the ceiling table)."""
        return {
            m: sorted((r[m] for r in measured), key=lambda r: r["combined"])[len(measured) // 2] for m in measured[0]
        }

    print("\nFraction of ceiling: the products' work at the measured words/s over the best kernels' combined rate")
    print("(in brackets: over plain `bmm`'s). The ceiling is measured in every round, right after that round's")
    print("processes of ours; the fraction is the median over the rounds of each round's rate over its ceiling.")
    print("| mode | batch | this package, words/s | AllenNLP Elmo float32, words/s | ratio | fraction of ceiling |")
    print("|---|---|---|---|---|---|")
    ceiling = {}
    for batch, batches in rows.items():
        words = sum(len(s) for b in batches for s in b)
        gflop = useful_gflop(batches)
        times = {mode: [] for mode in args.modes}
        times["allennlp"] = []
        fractions = {mode: {"best": [], "plain": []} for mode in args.modes}
        dumps = {"allennlp": work_dir / "allennlp.npy", "float32": work_dir / "ours.npy"}
        measured = []
        for _ in range(args.rounds):  # alternate: ours in each mode, the ceiling, then AllenNLP, and again
            round_times = {}
            for mode in args.modes:
                spec = {**common, "folder": str(folder), "mode": mode, "batches": batches}
                if mode in dumps:  # only float32's first batch is compared with AllenNLP's
                    spec["dump"] = str(dumps[mode])
                round_times[mode] = _run_json(ours, spec, work_dir)["times"]
                times[mode] += round_times[mode]
            measured.append(_run_json(ours, {**common, "ceiling": shapes[batch]}, work_dir))
            for mode in args.modes:
                achieved = gflop / statistics.median(round_times[mode])
                fractions[mode]["best"].append(achieved / measured[-1][mode]["combined"])
                if "plain" in measured[-1][mode]:
                    fractions[mode]["plain"].append(achieved / measured[-1][mode]["plain"]["combined"])
            if theirs:
                spec = {**common, **allennlp_spec, "batches": batches, "dump": str(dumps["allennlp"])}
                times["allennlp"] += _run_json(theirs, spec, work_dir)["times"]
        ceiling[batch] = median_round(measured)
        theirs_rate = words / statistics.median(times["allennlp"]) if theirs else None
        for mode in args.modes:
            rate = words / statistics.median(times[mode])
            fraction = f"{statistics.median(fractions[mode]['best']):.0%}"
            if fractions[mode]["plain"]:
                fraction += f" ({statistics.median(fractions[mode]['plain']):.0%})"
            against = f"{theirs_rate:.0f} | {rate / theirs_rate:.1f}x" if theirs else "- | -"
            print(f"| {mode} | {batch} | {rate:.0f} | {against} | {fraction} |")
        if theirs and batch == 32 and "float32" in args.modes:
            import numpy as np

            a, b = np.load(dumps["float32"]), np.load(dumps["allennlp"])
            print(f"(float32, first batch: largest difference to AllenNLP's vectors {np.abs(a - b).max():.1e})")

    print("\nMatrix-product rates at the model's own shapes for the first batch (GFLOP/s): each LSTM step's products")
    print("with the rows still running at that step, run in the model's order (each layer's steps; one direction's")
    print("steps after the other's, or both in one call for plain `bmm`); the combined rate is all the work over the")
    print("summed time. The best kernel per shape (the ceiling), and plain `torch.bmm` (the ceiling without prepacked")
    print("weights); the round with the median combined rate:")
    kinds = list(product_shapes([1], 1))
    print("| batch | precision | kernel | " + " | ".join(kinds) + " | combined |")
    print("|---|---|---|" + "---|" * (len(kinds) + 1))
    for batch, by_mode in ceiling.items():
        for mode, rates in by_mode.items():
            for kernel, each in (("best", rates), ("plain bmm", rates.get("plain"))):
                if each is not None:
                    cells = " | ".join(f"{each['shapes'][kind]:.0f}" for kind in kinds)
                    print(f"| {batch} | {mode} | {kernel} | {cells} | {each['combined']:.0f} |")

    if args.corpus_sentences and theirs:
        corpus = work_dir / "corpus.txt"
        text = [" ".join(s) for s in wikitext_sentences(args.corpus_sentences, 1, 10_000)]
        corpus.write_text("\n".join(text) + "\n", encoding="utf-8")
        one = work_dir / "one.txt"
        one.write_text(text[0] + "\n", encoding="utf-8")
        words = sum(len(line.split()) for line in text)
        cli = [sys.executable, "-m", "elmo_cli", "embed", "--model", str(folder)]
        cli += ["--device", "cpu", "--output_type", "elmo", "--disable_tqdm", "--overwrite", "-o"]
        flags = {"float32": [], "bfloat16": ["--dtype", "bfloat16"], "int8": ["--quantize", "int8"]}
        walls = {mode: [] for mode in args.modes}
        walls["allennlp"] = []
        for _ in range(max(1, args.rounds - 1)):
            for mode in args.modes:
                full = _timed([*cli, str(work_dir / "ours.hdf5"), str(corpus), *flags[mode]])
                start_up = _timed([*cli, str(work_dir / "ours1.hdf5"), str(one), *flags[mode]])
                walls[mode].append((full, start_up))
            for source, key in ((corpus, "full"), (one, "one")):
                spec = {**allennlp_spec, "threads": args.threads, "corpus": str(source), "batch_size": 64}
                spec["output"] = str(work_dir / f"allennlp-{key}.hdf5")
                start = time.perf_counter()
                _run_json(theirs, spec, work_dir)
                if key == "full":
                    full = time.perf_counter() - start
                else:
                    walls["allennlp"].append((full, time.perf_counter() - start))

        def rates(pairs):  # words/s over the whole run, and without the start-up (a 1-sentence run)
            full = statistics.median(f for f, _ in pairs)
            net = statistics.median(f - s for f, s in pairs)
            return words / full, words / max(net, 1e-9)

        theirs_full, theirs_net = rates(walls["allennlp"])
        print(f"\nCorpus: {len(text)} WikiText-2 sentences ({words} words), one per line; words/s of the whole run")
        print("(process start and model load included), then without the start-up measured on a 1-sentence file.")
        print("| mode | `elmo embed` | AllenNLP loop (batches of 64, file order) | ratio | ratio without start-up |")
        print("|---|---|---|---|---|")
        for mode in args.modes:
            full, net = rates(walls[mode])
            print(
                f"| {mode} | {full:.0f} ({net:.0f} net) | {theirs_full:.0f} ({theirs_net:.0f} net) "
                f"| {full / theirs_full:.1f}x | {net / theirs_net:.1f}x |"
            )
    print(f"# load after: {os.getloadavg()}")


# ---------------------------------------------------------------------- embed_corpus's batch sizes (--embed_sweep)


def _embed(
    model: ElmoModel, tokenizer, sentences: list[list[str]], batch_size: int, max_batch_words: int, word_cache: bool
) -> None:
    """One pass of ``embed_corpus`` over ``sentences`` (word lists), with ``elmo embed``'s ``--output_type elmo``:
    each sentence's ``(words, 2P)`` array is computed and copied to a numpy array, then dropped."""
    from modeling_elmo.inference.embed_corpus import embed_corpus

    for _ in embed_corpus(
        model, tokenizer, sentences, output="elmo", batch_size=batch_size, max_batch_words=max_batch_words,
        progress=False, word_cache=word_cache,
    ):  # fmt: skip
        pass


def _in_mode(model: ElmoModel, mode: str) -> ElmoModel:
    """``model`` (float32) for ``--embed_sweep`` in ``mode``: itself, a bfloat16 copy or an int8 copy."""
    if mode == "bfloat16":
        return copy.deepcopy(model).to(torch.bfloat16)
    if mode == "int8":
        from modeling_elmo.inference.quantize import quantize_int8

        return quantize_int8(copy.deepcopy(model))
    return model


def _embed_peak_child(queue, size: str, mode: str, pair: tuple[int, int], sentences, threads: int) -> None:
    """Peak RSS (MiB) of one ``_embed`` pass, sampled every millisecond, and its level before the pass (the
    model, its prepacked weights and the allocator's pools after a one-batch warm-up pass)."""
    torch.set_num_threads(threads)
    model, tokenizer = _in_mode(build_model(size, "cpu"), mode), ElmoTokenizer()
    _embed(model, tokenizer, sentences[: pair[0]], *pair)  # warm-up: prepacked weights, oneDNN's kernels
    gc.collect()
    base = peak = _rss_mib()
    worker = threading.Thread(target=_embed, args=(model, tokenizer, sentences, *pair))
    worker.start()
    while worker.is_alive():
        peak = max(peak, _rss_mib())
        time.sleep(0.001)
    queue.put((peak, base))


def _sweep_setting(text: str) -> tuple[int, int, bool]:
    """``"64/4096"`` -> ``(64, 4096, True)``; ``"64/4096/nocache"`` -> ``(64, 4096, False)`` (word_cache off)."""
    parts = text.split("/")
    if len(parts) not in (2, 3) or not all(p.isdigit() for p in parts[:2]) or parts[2:] not in ([], ["nocache"]):
        raise SystemExit(f"error: --embed_sweep takes BATCH/WORDS or BATCH/WORDS/nocache, got {text!r}")
    return int(parts[0]), int(parts[1]), len(parts) == 2


def embed_sweep(args) -> None:
    """``embed_corpus``'s words/s and peak RSS at each ``--embed_sweep`` pair (see the module's docstring);
    prints a markdown table per model size."""
    from modeling_elmo.inference.embed_corpus import _batches

    pairs = [_sweep_setting(pair) for pair in (args.embed_sweep or EMBED_SWEEP)]
    modes = args.modes or ["float32", "bfloat16"]
    sentences = wikitext_sentences(args.corpus_sentences, 1, 10_000)
    lengths = [len(s) for s in sentences]
    words = sum(lengths)
    torch.set_num_threads(args.threads)
    print(f"# CPU: {cpu_description()}")
    print(f"# torch {torch.__version__}, {args.threads} threads, device {args.device}; load before: {os.getloadavg()}")
    print(
        f"# embed_corpus(output='elmo') on the first {len(sentences)} WikiText-2 sentences ({words} words, "
        f"{min(lengths)}-{max(lengths)} each, file order; chunk_size 4096), random weights; words/s: median "
        f"(min-max) of {args.repeats} interleaved passes after {args.warmup} warm-up"
    )
    print("| size | precision | batch_size / max_batch_words | batches | words/s | min-max | vs first | peak RSS MiB |")
    print("|---|---|---|---|---|---|---|---|")
    for size in args.sizes:
        base = build_model(size, args.device)
        models = {mode: _in_mode(base, mode) for mode in modes}
        tokenizer = ElmoTokenizer()
        times = {(mode, pair): [] for mode in modes for pair in pairs}
        for repeat in range(args.warmup + args.repeats):
            for mode, pair in times:  # interleaved, so that the machine's load hits every setting alike
                start = time.perf_counter()
                _embed(models[mode], tokenizer, sentences, *pair)
                if repeat >= args.warmup:
                    times[mode, pair].append(time.perf_counter() - start)
        for mode in modes:
            first = None
            for pair in pairs:
                rate = words / statistics.median(times[mode, pair])
                first = first or rate
                slowest, fastest = words / max(times[mode, pair]), words / min(times[mode, pair])
                memory = "-"
                if not args.no_memory and args.device == "cpu":
                    ctx = mp.get_context("spawn")
                    queue = ctx.Queue()
                    child = ctx.Process(
                        target=_embed_peak_child, args=(queue, size, mode, pair, sentences, args.threads)
                    )
                    child.start()
                    child.join()
                    if child.exitcode == 0:
                        peak, before = queue.get()
                        memory = f"{peak:.0f} (+{peak - before:.0f} over the model)"
                batches = len(list(_batches(lengths, *pair[:2])))
                cache = "" if pair[2] else " (no word cache)"
                print(
                    f"| {size} | {mode} | {pair[0]} / {pair[1]}{cache} | {batches} | {rate:.0f} "
                    f"| {slowest:.0f}-{fastest:.0f} | {rate / first:.2f}x | {memory} |",
                    flush=True,
                )
    print(f"# load after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
