"""One timed process of AllenNLP's ``Elmo``, for ``bench_inference.py --allennlp_python`` (runs in the reference
environment that ``../shared/tools/allennlp/make_refenv.sh`` builds, not in this project's).

    REFENV/bin/python benchmarks/allennlp_worker.py SPEC.json     # prints one JSON line

``SPEC`` holds ``allennlp_dir`` (the folder of ``allennlp_ref.py``), ``options``, ``weights``, ``threads`` and
either ``batches`` (lists of sentences, each a list of words), ``repeats``, ``warmup`` and ``dump`` (where to
save the first batch's output, a ``.npy``), or ``corpus`` (a text file, one sentence per line), ``output``
(HDF5 file) and ``batch_size``: AllenNLP's usual loop, batches of ``batch_size`` lines in file order, each
sentence's vectors written to the file. AllenNLP's ``Elmo`` is stateful: a fresh instance starts from zero
states, so its first batch matches a stateless model.
"""

from __future__ import annotations

import json
import sys
import time


def main(spec_path: str) -> None:
    with open(spec_path, encoding="utf-8") as f:
        spec = json.load(f)
    sys.path.insert(0, spec["allennlp_dir"])
    import allennlp_ref  # noqa: F401  (stubs the AllenNLP modules that ELMo does not need)
    import numpy as np
    import torch
    from allennlp_ref import Elmo, batch_to_ids

    torch.set_num_threads(spec["threads"])
    start = time.perf_counter()
    elmo = Elmo(spec["options"], spec["weights"], 1, dropout=0.0).eval()
    load_s = time.perf_counter() - start
    if "corpus" in spec:
        import h5py

        with open(spec["corpus"], encoding="utf-8") as f:
            sentences = [line.split() for line in f]
        start = time.perf_counter()
        with h5py.File(spec["output"], "w") as out, torch.no_grad():
            for first in range(0, len(sentences), spec["batch_size"]):
                batch = sentences[first : first + spec["batch_size"]]
                result = elmo(batch_to_ids(batch))
                vectors = result["elmo_representations"][0].numpy()
                for k, words in enumerate(batch):
                    out.create_dataset(str(first + k), data=vectors[k, : len(words)])
        print(json.dumps({"load_s": load_s, "run_s": time.perf_counter() - start}))
        return
    ids = [batch_to_ids(batch) for batch in spec["batches"]]
    times = []
    with torch.no_grad():
        for repeat in range(spec["warmup"] + spec["repeats"]):
            start = time.perf_counter()
            for k, batch in enumerate(ids):
                result = elmo(batch)
                if repeat == 0 and k == 0 and spec.get("dump"):
                    np.save(spec["dump"], result["elmo_representations"][0].numpy())
            if repeat >= spec["warmup"]:
                times.append(time.perf_counter() - start)
    print(json.dumps({"load_s": load_s, "times": times}))


if __name__ == "__main__":
    main(sys.argv[1])
