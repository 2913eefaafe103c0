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
"""

from __future__ import annotations

import argparse
import gc
import multiprocessing as mp
import platform
import random
import resource
import statistics
import string
import threading
import time

import torch

from modeling_elmo import ElmoConfig, ElmoModel
from modeling_elmo.characters import word_to_char_ids
from modeling_elmo.utils.reference_elmo import reference_forward

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
    full, steps = model._add_boundaries(ids, mask.bool())
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
        model.build_token_cache(cache_vocab, progress=False)
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
    args = parser.parse_args(argv)
    if args.smoke:
        args.sizes, args.batch_sizes, args.repeats, args.plain, args.no_memory = ["tiny"], [4], 2, True, True
        args.min_words, args.max_words = 3, 8
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


if __name__ == "__main__":
    main()
