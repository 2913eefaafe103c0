"""Peak memory of the ``"elmo-question-answering"`` pipeline over one long context (issue 49).

Each context size runs in a fresh process (so that its peak is its own): the demo biLM with an untrained QA head
(``classifier_hidden_size`` 16), one question, a context of N words (sentences of the QA tests' toy task, repeated),
and one pipeline call. It prints, per size, the resident set (RSS) before the call, the peak during it (``ru_maxrss``)
and the seconds the call took; ``--max_seq_len``/``--doc_stride``/``--batch_size`` pass through to the pipeline.

    python benchmarks/bench_qa_memory.py --words 12000 48000
    python benchmarks/bench_qa_memory.py --words 16000 --max_seq_len 20000 --doc_stride 128
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import resource
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

SENTENCE = "Yesterday John Smith flew from London to Paris ."  # 9 words


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def _run(queue, words: int, args: dict) -> None:
    import torch
    from transformers import AutoModelForQuestionAnswering, pipeline

    from modeling_elmo import ElmoTokenizer, demo_model_path

    torch.set_num_threads(args["threads"])
    torch.manual_seed(0)
    path = demo_model_path()
    model = AutoModelForQuestionAnswering.from_pretrained(path, classifier_hidden_size=16).eval()
    qa = pipeline("elmo-question-answering", model=model, tokenizer=ElmoTokenizer.from_pretrained(path))
    count = -(-words // len(SENTENCE.split()))
    context = " ".join([SENTENCE] * count)
    options = {k: args[k] for k in ("max_seq_len", "doc_stride", "batch_size") if args[k] is not None}
    before = _rss_mib()
    start = time.perf_counter()
    answer = qa(question="Who flew to Paris ?", context=context, **options)
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    queue.put(
        {
            "words": len(context.split()),
            "rss_before_mib": round(before),
            "peak_mib": round(peak),
            "seconds": round(seconds, 1),
            "answer": answer["answer"],
            **options,
        }
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--words", type=int, nargs="+", default=[12000])
    parser.add_argument("--max_seq_len", type=int)
    parser.add_argument("--doc_stride", type=int)
    parser.add_argument("--batch_size", type=int)
    parser.add_argument("--threads", type=int, default=1)
    args = vars(parser.parse_args(argv))
    context = mp.get_context("spawn")
    for words in args["words"]:
        queue = context.Queue()
        process = context.Process(target=_run, args=(queue, words, args))
        process.start()
        print(json.dumps(queue.get()), flush=True)
        process.join()


if __name__ == "__main__":
    main()
