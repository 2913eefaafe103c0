"""GPU (and CPU) benchmark of ElmoModel's two paths: eager against torch.compile, in one run (issue 43).

Rows, each timed after warm-up as the median of interleaved repeats (the paths alternate within a repeat):

- ``common``: ``bench_inference.py``'s common-style loop (one LSTM cell per direction and layer, a Python loop over
  time steps), float32 only;
- ``eager``: ``ElmoModel`` under ``torch.inference_mode`` (the package's default path);
- ``compiled``: ``torch.compile(model, fullgraph=True)`` (the graph path, ``graph_path_elmo.py``, its recurrences
  the custom operators of ``compiled_ops_elmo.py``: on CUDA every step of the padded batch, no host read);
- ``reduce-overhead``: the same with ``mode="reduce-overhead"`` (CUDA graphs; CUDA only);

in float32, bfloat16 and float16 (the model's weights cast; the cell state stays float32), at batch 1, 32 and 256;
and one ``ElmoForPreTraining`` training step (sampled softmax, bf16 autocast, AdamW), eager. Each row reports
words/s, the peak memory of one call (``torch.cuda.max_memory_allocated`` on CUDA; not measured on the CPU), the
largest difference of the top layer to eager, and for compiled rows the time of the first call (the compile) apart.

    python benchmarks/bench_gpu.py --device cuda --out bench-gpu           # original size (meant: < 8 min, H100)
    python benchmarks/bench_gpu.py --device cpu --size small --dtypes float32 bfloat16 --batch-sizes 1 32
    python benchmarks/bench_gpu.py --device cpu --smoke --out /tmp/bench    # tiny model, seconds (CI)

``--smoke`` uses the tiny model, batch 1 and 4, two repeats and (unless ``--backend`` is given) the ``aot_eager``
backend: it checks the harness and the graph path, not inductor's speed. Results go to ``OUT/results.json`` and
``OUT/results.md``; the Markdown table is printed as well. It has not run on a GPU yet (none was available): the
8-minute budget on an H100 or H200 is the aim, not a measurement; trim ``--dtypes``/``--batch-sizes`` if it runs over.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_inference import SIZES, common_forward, cpu_description, make_batch, make_vocab  # noqa: E402

from modeling_elmo import ElmoConfig, ElmoForPreTraining, ElmoModel  # noqa: E402

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _peak_start(device: str) -> None:
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()


def _peak_mib(device: str) -> float | None:
    return torch.cuda.max_memory_allocated() / 2**20 if device == "cuda" else None


def build(size: str, device: str, dtype: torch.dtype) -> ElmoModel:
    torch.manual_seed(0)
    return ElmoModel(ElmoConfig(**SIZES[size], initializer_range=0.02)).eval().to(device=device, dtype=dtype)


def make_paths(model: ElmoModel, device: str, dtype_name: str, backend: str) -> dict:
    """Name -> callable ``(ids, mask) -> top layer (B, W, 2P)``."""

    def call(module):
        def run(ids, mask):
            with torch.inference_mode():
                return module(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states[-1]

        return run

    paths = {}
    if dtype_name == "float32":
        paths["common"] = lambda ids, mask: common_forward(model, ids, mask)
    paths["eager"] = call(model)
    paths["compiled"] = call(torch.compile(model, fullgraph=True, backend=backend))
    if device == "cuda" and backend == "inductor":
        paths["reduce-overhead"] = call(torch.compile(model, fullgraph=True, mode="reduce-overhead"))
    return paths


def time_paths(paths: dict, ids, mask, device: str, repeats: int) -> dict:
    """Per path: first-call seconds (compile for compiled paths), median seconds, peak MiB, top layer."""
    results = {}
    for name, run in paths.items():  # first calls apart: they hold the compile
        _sync(device)
        start = time.perf_counter()
        top = run(ids, mask)
        _sync(device)
        first = time.perf_counter() - start
        run(ids, mask)  # warm-up (CUDA graphs record on a later call)
        _sync(device)
        _peak_start(device)
        top = run(ids, mask).clone()
        _sync(device)
        results[name] = {"first_call_s": first, "peak_mib": _peak_mib(device), "top": top, "times": []}
    for _ in range(repeats):
        for name, run in paths.items():
            _sync(device)
            start = time.perf_counter()
            run(ids, mask)
            _sync(device)
            results[name]["times"].append(time.perf_counter() - start)
    return results


def training_step(size: str, device: str, batch: int, vocab: list[str], smoke: bool) -> dict:
    """One ElmoForPreTraining step (sampled softmax) under bf16 autocast, eager: seconds and peak memory."""
    torch.manual_seed(0)
    lm_vocab, samples = (100, 16) if smoke else (50000, 8192)
    config = ElmoConfig(**SIZES[size], lm_vocab_size=lm_vocab, lm_num_samples=samples)
    model = ElmoForPreTraining(config).to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids, mask = make_batch(batch, 10, 30, vocab, seed=1)
    ids, mask = ids.to(device), mask.to(device)
    labels = torch.randint(0, lm_vocab, mask.shape, device=device)

    def step():
        with torch.autocast(device, torch.bfloat16):
            loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    step()  # warm-up
    _sync(device)
    _peak_start(device)
    start = time.perf_counter()
    loss = step()
    _sync(device)
    seconds = time.perf_counter() - start
    return {
        "batch": batch,
        "seconds": seconds,
        "words_per_s": int(mask.sum()) / seconds,
        "peak_mib": _peak_mib(device),
        "loss": float(loss),
    }


def _fmt(value, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--size", default=None, choices=sorted(SIZES))
    parser.add_argument("--dtypes", nargs="+", default=None, choices=sorted(DTYPES))
    parser.add_argument("--batch-sizes", nargs="+", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument(
        "--backend", default=None, help="torch.compile backend (default inductor; aot_eager in --smoke)"
    )
    parser.add_argument("--train-batch", type=int, default=None)
    parser.add_argument("--skip-training", action="store_true", help="leave out the training step")
    parser.add_argument("--smoke", action="store_true", help="tiny model, seconds: checks the harness (CI)")
    parser.add_argument("--out", default="bench-gpu", help="folder for results.json and results.md")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device is visible (use --device cpu)")
    size = args.size or ("tiny" if args.smoke else "original")
    dtypes = args.dtypes or (["float32", "bfloat16"] if args.smoke else ["float32", "bfloat16", "float16"])
    batches = args.batch_sizes or ([1, 4] if args.smoke else [1, 32, 256])
    repeats = args.repeats or (2 if args.smoke else 5)
    backend = args.backend or ("aot_eager" if args.smoke else "inductor")
    if args.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False  # float32 means float32 (the GPU tests compare with it)
        torch.backends.cudnn.allow_tf32 = False

    vocab = make_vocab()
    rows = []
    for dtype_name in dtypes:
        model = build(size, args.device, DTYPES[dtype_name])
        paths = make_paths(model, args.device, dtype_name, backend)
        for batch in batches:
            ids, mask = make_batch(batch, 10, 30, vocab, seed=batch)
            ids, mask = ids.to(args.device), mask.to(args.device)
            words = int(mask.sum())
            results = time_paths(paths, ids, mask, args.device, repeats)
            eager_top = results["eager"]["top"].float()
            for name, result in results.items():
                median = statistics.median(result["times"])
                diff = (result["top"].float() - eager_top).abs().max().item()
                rows.append(
                    {
                        "dtype": dtype_name,
                        "batch": batch,
                        "path": name,
                        "words_per_s": words / median,
                        "median_s": median,
                        "first_call_s": result["first_call_s"],
                        "peak_mib": result["peak_mib"],
                        "max_abs_diff_to_eager": diff,
                    }
                )
        torch._dynamo.reset()  # the next dtype compiles afresh (and memory of the graphs is freed)
    train = None
    if not args.skip_training:
        train = training_step(size, args.device, args.train_batch or (4 if args.smoke else 128), vocab, args.smoke)

    device_name = torch.cuda.get_device_name() if args.device == "cuda" else cpu_description()
    report = {
        "device": device_name,
        "torch": torch.__version__,
        "size": size,
        "backend": backend,
        "threads": torch.get_num_threads(),
        "rows": rows,
        "training_step": train,
    }
    lines = [
        f"{device_name}; torch {torch.__version__}; size {size}; compile backend {backend}",
        "",
        "| dtype | batch | path | words/s | vs eager | first call s | peak MiB | max abs diff to eager |",
        "|---|---|---|---|---|---|---|---|",
    ]
    eager = {(r["dtype"], r["batch"]): r["words_per_s"] for r in rows if r["path"] == "eager"}
    for r in rows:
        ratio = r["words_per_s"] / eager[(r["dtype"], r["batch"])]
        first = f"{r['first_call_s']:.1f}" if r["path"] in ("compiled", "reduce-overhead") else "-"
        lines.append(
            f"| {r['dtype']} | {r['batch']} | {r['path']} | {r['words_per_s']:.0f} | {ratio:.2f}x | {first} | "
            f"{_fmt(r['peak_mib'], '.0f')} | {r['max_abs_diff_to_eager']:.1e} |"
        )
    if train is not None:
        lines += [
            "",
            f"Training step (ElmoForPreTraining, sampled softmax, bf16 autocast, eager), batch {train['batch']}: "
            f"{train['seconds']:.3f} s, {train['words_per_s']:.0f} words/s, peak {_fmt(train['peak_mib'], '.0f')} MiB",
        ]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(report, indent=1), encoding="utf-8")
    (out / "results.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    return report


if __name__ == "__main__":
    main()
