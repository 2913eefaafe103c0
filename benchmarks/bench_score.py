"""`elmo score` at the original size: conversion peak memory, words/s, and the error of the reduced precision.

Writes (once, into ``--work_dir``) a random model of the original's size in the released layout: biLM
2x4096_512_2048cnn_2xhighway, softmax 793,471 x 512 (1.6 GB) with its vocabulary. Then, each in a fresh process:

1. ``elmo convert ... --softmax_weight_file`` (and, for comparison, without it): the peak RSS (``ru_maxrss``);
2. scoring ``--words`` words of WikiText-2 (or random vocabulary words) with ``ElmoSentenceScorer``, float32 and
   ``--softmax_dtype`` bfloat16: words/s (each word costs two products with W, one per direction), and the
   reduced precision's error against float32 in log-probability per word (mean and max over sentences).

    python benchmarks/bench_score.py --work_dir /tmp/elmo-bench-score [--threads 2] [--words 400] [--device cuda]

Prints a Markdown table and the CPU (or GPU). Needs ~6 GB of disk and ~4 GB of memory.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ORIGINAL = {
    "lstm_dim": 4096,
    "projection_dim": 512,
    "filters": [(1, 32), (2, 32), (3, 64), (4, 128), (5, 256), (6, 512), (7, 1024)],
    "char_dim": 16,
    "n_highway": 2,
}
VOCAB_SIZE = 793_471
WIKITEXT = Path(os.environ.get("ELMO_SHARED_DIR", REPO.parent / "shared")) / "data" / "wikitext-2" / "test.txt"


def write_inputs(work: Path) -> dict[str, Path]:
    sys.path.insert(0, str(REPO / "tests"))
    from original_format import write_original_model
    from softmax_format import vocabulary, write_softmax, write_vocab

    src = work / "released"
    files = {
        "options": src / "options.json",
        "weights": src / "lm_weights.hdf5",
        "vocab": src / "vocab.txt",
        "softmax": src / "softmax_weights.hdf5",
    }
    if all(path.exists() for path in files.values()):
        return files
    src.mkdir(parents=True, exist_ok=True)
    write_original_model(src, seed=0, **ORIGINAL)
    words = []
    if WIKITEXT.exists():  # real words first, so that most scored words are in the vocabulary
        seen = {}
        for line in WIKITEXT.read_text(encoding="utf-8").split():
            seen.setdefault(line, None)
        words = [w for w in seen if w not in ("<S>", "</S>", "<UNK>")][: VOCAB_SIZE - 3]
    write_vocab(files["vocab"], vocabulary(VOCAB_SIZE, (0, 1, 2), words))
    write_softmax(files["softmax"], VOCAB_SIZE, ORIGINAL["projection_dim"], seed=1)
    return files


def convert_peak(files: dict[str, Path], out: Path, softmax: bool) -> tuple[float, float]:
    args = [
        sys.executable,
        "-m",
        "elmo_cli",
        "convert",
        "--options_file",
        str(files["options"]),
        "--weight_file",
        str(files["weights"]),
        "--vocab_file",
        str(files["vocab"]),
        "--output_dir",
        str(out),
        "--overwrite",
        "--disable_tqdm",
    ]
    if softmax:
        args += ["--softmax_weight_file", str(files["softmax"])]
    # a fresh interpreter per measurement: RUSAGE_CHILDREN's peak is the largest child so far, so run the
    # smaller one first
    code = (
        "import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True); "
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
    )
    start = time.perf_counter()
    result = subprocess.run([sys.executable, "-c", code, *args], check=True, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    return int(result.stdout.strip().splitlines()[-1]) / 1024, seconds


def sentences_for(words: int) -> list[str]:
    if WIKITEXT.exists():
        lines = [line.strip() for line in WIKITEXT.read_text(encoding="utf-8").splitlines() if len(line.split()) > 5]
    else:
        lines = ["the cat sat on the mat ."] * 1000
    chosen, total = [], 0
    for line in lines:
        cut = " ".join(line.split()[:40])  # sentences of at most 40 words
        chosen.append(cut)
        total += len(cut.split())
        if total >= words:
            break
    return chosen


def score_run(folder: Path, sentences: list[str], batch_size: int, device: str) -> dict:
    import torch

    from modeling_elmo.scoring_elmo import ElmoSentenceScorer, load_language_model

    model, tokenizer = load_language_model(folder, torch.device(device))
    results = {}
    for dtype in ("float32", "bfloat16"):
        scorer = ElmoSentenceScorer(model, tokenizer, softmax_dtype=dtype)
        list(scorer.score(sentences[:2], tokenized=True, batch_size=batch_size))  # warm-up
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        start = time.perf_counter()
        scores = list(scorer.score(sentences, tokenized=True, batch_size=batch_size))
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        words = sum(len(s["tokens"]) for s in scores)
        results[dtype] = {"seconds": seconds, "words": words, "words_per_s": words / seconds, "scores": scores}
    errors = [
        abs(a[key] - b[key]) / (len(a["tokens"]) + 1)
        for a, b in zip(results["float32"]["scores"], results["bfloat16"]["scores"], strict=True)
        for key in ("forward_logprob", "backward_logprob")
    ]
    results["bfloat16"]["error_per_word_mean"] = sum(errors) / len(errors)
    results["bfloat16"]["error_per_word_max"] = max(errors)
    for entry in results.values():
        entry.pop("scores")
    return results


def device_description(device: str) -> str:
    if device.startswith("cuda"):
        import torch

        return torch.cuda.get_device_name(torch.device(device))
    fields = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return f"{fields.get('model name', platform.processor() or '?')} ({os.cpu_count()} CPUs visible)"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work_dir", default="/tmp/elmo-bench-score")
    parser.add_argument("--words", type=int, default=400, help="words to score per precision")
    parser.add_argument("--batch_size", type=int, default=16)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--skip_convert_memory", action="store_true", help="only the scoring numbers")
    args = parser.parse_args(argv)
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    work = Path(args.work_dir)
    files = write_inputs(work)
    report = {"device": device_description(args.device), "threads": torch.get_num_threads()}
    lm = work / "converted-lm"
    if not args.skip_convert_memory or not lm.exists():
        report["convert_peak_rss_mib_without_softmax"], _ = convert_peak(files, work / "converted-plain", False)
        report["convert_peak_rss_mib_with_softmax"], report["convert_seconds"] = convert_peak(files, lm, True)
    sentences = sentences_for(args.words)
    report["score"] = score_run(lm, [s.split() for s in sentences], args.batch_size, args.device)
    print(json.dumps(report, indent=1))
    print(f"\n{report['device']}, {report['threads']} threads, V = {VOCAB_SIZE}, P = 512\n")
    print("| precision | words | seconds | words/s | error per word (mean / max) |")
    print("|---|---|---|---|---|")
    for dtype, entry in report["score"].items():
        error = (
            f"{entry['error_per_word_mean']:.2e} / {entry['error_per_word_max']:.2e}"
            if "error_per_word_max" in entry
            else "-"
        )
        print(f"| {dtype} | {entry['words']} | {entry['seconds']:.1f} | {entry['words_per_s']:.1f} | {error} |")
    if "convert_peak_rss_mib_with_softmax" in report:
        print(
            f"\nconvert peak RSS: {report['convert_peak_rss_mib_with_softmax']:.0f} MiB with the softmax "
            f"({report['convert_seconds']:.0f} s), {report['convert_peak_rss_mib_without_softmax']:.0f} MiB without"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
