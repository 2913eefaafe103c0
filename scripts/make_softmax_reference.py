"""Write tests/fixtures/softmax-lm: a random biLM and softmax in the released layout, and AllenNLP's scores of them.

Run in the AllenNLP 2.10.1 reference environment (``../shared/tools/allennlp/make_refenv.sh REFENV``)::

    REFENV/bin/python scripts/make_softmax_reference.py [--allennlp_dir ../shared/tools/allennlp]

The model files are written with ``tests/original_format.py`` and ``tests/softmax_format.py`` (seeded), with
``<S>``, ``</S>`` and ``<UNK>`` on lines 58, 4 and 191 of the vocabulary. AllenNLP's ``_ElmoBiLm`` (a fresh,
stateful instance: its first batch starts from zero states) gives the top layer at every position of
``<S> w_1 .. w_n </S>``; the top layer times ``W`` plus ``b`` then gives, in float64 here:

- per sentence the forward and backward log-probabilities as issue 28 defines them (out-of-vocabulary words
  count as ``<UNK>``), for a first batch and a second one that continues the first's states (stateful);
- per masked sentence (the biLM reads ``<UNK>`` at the masks, as LAMA) the mean of the forward log-softmax just
  before each mask and the backward one just after it, soft-maxed over the vocabulary: the top 5 words and scores.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FIXTURE = REPO / "tests" / "fixtures" / "softmax-lm"
SPECIALS_AT = (57, 3, 190)  # 0-based lines of <S>, </S>, <UNK> (lines 58, 4, 191)
VOCAB_SIZE = 240
WORDS = (
    "the cat sat on mat . a dog ran quietly to park and saw bird in tree it was small brown , of my house "
    "is red blue green big fast slow old new man woman child car book paris france capital city"
).split()
MODEL = {"lstm_dim": 32, "projection_dim": 16, "filters": [(1, 4), (2, 8), (3, 8)], "char_dim": 4, "n_highway": 1}
# First batch (longest first, so that AllenNLP's states stay in row order for the second batch).
BATCH_1 = [
    "the big brown dog ran quietly to the old park and saw a small bird in the tree .".split(),
    "a zebra quietly ran to my house .".split(),  # "zebra": out of vocabulary
    "the cat sat on the mat .".split(),
    "hello".split(),  # out of vocabulary, one word
]
BATCH_2 = [
    "paris is the capital city of france .".split(),
    "my car is red and fast .".split(),
    "the woman saw xylophones .".split(),
    "book".split(),
]
# (words, indices of the masks): first, middle and last word, two masks.
MASKED = [
    ("[MASK] is the capital city of france .".split(), [0]),
    ("paris is the [MASK] city of france .".split(), [3]),
    ("the cat sat on the".split() + ["[MASK]"], [5]),
    ("a [MASK] ran to the [MASK] .".split(), [1, 5]),
]


def write_model(folder: Path) -> None:
    sys.path.insert(0, str(REPO / "tests"))
    from original_format import write_original_model
    from softmax_format import vocabulary, write_softmax, write_vocab

    folder.mkdir(parents=True, exist_ok=True)
    write_original_model(folder, seed=28, **MODEL)
    write_vocab(folder / "vocab.txt", vocabulary(VOCAB_SIZE, SPECIALS_AT, WORDS))
    # scale 4: logits of spread ~4, so that the ranks of the top words are well separated
    write_softmax(folder / "softmax_weights.hdf5", VOCAB_SIZE, MODEL["projection_dim"], seed=29, scale=4.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--allennlp_dir", default=str(REPO.parent / "shared" / "tools" / "allennlp"))
    args = parser.parse_args()
    write_model(FIXTURE)

    sys.path.insert(0, args.allennlp_dir)
    import allennlp_ref  # noqa: F401  (stubs the AllenNLP modules that ELMo does not need)
    import h5py
    import numpy as np
    import torch
    from allennlp_ref import _ElmoBiLm, batch_to_ids

    with h5py.File(FIXTURE / "softmax_weights.hdf5", "r") as f:
        weight = np.asarray(f["softmax/W"][()], dtype=np.float64)
        bias = np.asarray(f["softmax/b"][()], dtype=np.float64)
    words = (FIXTURE / "vocab.txt").read_text(encoding="utf-8").split("\n")[:-1]
    ids = {w: i for i, w in enumerate(words)}
    bos, eos, unk = ids["<S>"], ids["</S>"], ids["<UNK>"]

    def log_softmax(h):  # (P,) float64 -> (V,)
        logits = weight @ h + bias
        return logits - (logits.max() + np.log(np.exp(logits - logits.max()).sum()))

    def top_layer(bilm, batch):
        with torch.no_grad():
            out = bilm(batch_to_ids(batch))
        return out["activations"][-1].double().numpy()  # (B, T + 2, 2P), <S> at 0

    p = MODEL["projection_dim"]

    def sentence_scores(top, batch):
        results = []
        for row, sentence in enumerate(batch):
            targets = [bos] + [ids.get(w, unk) for w in sentence] + [eos]
            n = len(sentence)
            forward = sum(log_softmax(top[row, t, :p])[targets[t + 1]] for t in range(n + 1))
            backward = sum(log_softmax(top[row, t, p:])[targets[t - 1]] for t in range(1, n + 2))
            results.append({"words": sentence, "forward_logprob": forward, "backward_logprob": backward})
        return results

    bilm = _ElmoBiLm(str(FIXTURE / "options.json"), str(FIXTURE / "lm_weights.hdf5"))
    stateless = sentence_scores(top_layer(bilm, BATCH_1), BATCH_1)
    stateful = sentence_scores(top_layer(bilm, BATCH_2), BATCH_2)  # the same instance: states carried

    masked_inputs = [[("<UNK>" if i in masks else w) for i, w in enumerate(s)] for s, masks in MASKED]
    top = top_layer(_ElmoBiLm(str(FIXTURE / "options.json"), str(FIXTURE / "lm_weights.hdf5")), masked_inputs)
    fill = []
    for row, (sentence, masks) in enumerate(MASKED):
        per_mask = []
        for i in masks:  # word i sits at position i + 1
            mean = (log_softmax(top[row, i, :p]) + log_softmax(top[row, i + 2, p:])) / 2
            scores = np.exp(mean - mean.max())
            scores /= scores.sum()
            best = np.argsort(-scores)[:5]
            per_mask.append(
                {"token": best.tolist(), "token_str": [words[k] for k in best], "score": scores[best].tolist()}
            )
        fill.append({"text": " ".join(sentence), "masks": per_mask})

    reference = {
        "source": "AllenNLP 2.10.1 _ElmoBiLm top layer x W + b, float64 (scripts/make_softmax_reference.py)",
        "stateless_batch": stateless,
        "stateful_second_batch": stateful,
        "fill_mask": fill,
    }
    (FIXTURE / "reference.json").write_text(json.dumps(reference, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {FIXTURE}")


if __name__ == "__main__":
    main()
