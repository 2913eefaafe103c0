"""What storing the demo model's softmax ``W`` in float16 costs: log-probabilities against the float32 original.

Needs the training run of ``scripts/train_demo_model.sh`` (its ``ELMO_DEMO_WORK_DIR``, an ``ElmoForPreTraining``
folder with the float32 softmax) and WikiText-2's test.txt. Computes the log-probability of every word (and
``</S>``, ``<S>``) of the first ``--lines`` lines, as ``elmo score`` sums them, in float64 under the float32 ``W``
and under the shipped one (float16, widened); prints their differences and both perplexities:

    python benchmarks/demo_softmax_precision.py --run_dir /tmp/elmo-demo-lm --lines 500
"""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path

import torch
from tqdm.auto import tqdm

from modeling_elmo.commands.demo_lm import load_demo_language_model
from modeling_elmo.modeling_elmo_pretraining import ElmoForPreTraining
from modeling_elmo.scoring_elmo import top_layer_with_boundaries

REPO = Path(__file__).resolve().parent.parent
DATA = Path(os.environ.get("ELMO_SHARED_DIR", REPO.parent / "shared")) / "data" / "wikitext-2"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run_dir", required=True, help="the training run's folder (float32 softmax)")
    parser.add_argument("--eval_file", default=str(DATA / "test.txt"))
    parser.add_argument("--lines", type=int, default=500)
    args = parser.parse_args()

    shipped, tokenizer = load_demo_language_model()
    original = ElmoForPreTraining.from_pretrained(args.run_dir).eval()
    for name, tensor in shipped.elmo.state_dict().items():  # the same biLM: only W differs
        assert torch.equal(tensor, original.elmo.state_dict()[name]), name
    assert torch.equal(shipped.softmax.bias, original.softmax.bias)
    w_error = (shipped.softmax.weight - original.softmax.weight).abs()
    print(f"W: max |float16 - float32| {w_error.max():.2e}, mean {w_error.mean():.2e}")

    lines = [line.strip() for line in Path(args.eval_file).read_text(encoding="utf-8").splitlines()]
    lines = [line for line in lines if line and not line.startswith("=")][: args.lines]
    vocab = tokenizer.get_vocab()
    weights = {"float32": original.softmax.weight, "float16": shipped.softmax.weight}
    bias = original.softmax.bias
    errors, totals, count = [], {name: 0.0 for name in weights}, 0
    with torch.no_grad():
        for line in tqdm(lines, unit="line"):
            words = line.split()
            enc = tokenizer([words], is_split_into_words=True, return_tensors="pt")
            top, _ = top_layer_with_boundaries(shipped.elmo, enc["input_ids"], enc["attention_mask"])
            forward, backward = top[0].chunk(2, dim=-1)  # (n + 2, P)
            ids = torch.tensor([0] + [vocab.get(w, vocab["<UNK>"]) for w in words] + [1])
            # forward at t predicts t + 1, backward at t predicts t - 1: the targets elmo score sums
            hidden = torch.cat([forward[:-1], backward[1:]])
            targets = torch.cat([ids[1:], ids[:-1]])
            got = {}
            for name, weight in weights.items():
                log_probs = torch.log_softmax(hidden.double() @ weight.double().T + bias.double(), dim=-1)
                got[name] = log_probs.gather(1, targets[:, None])[:, 0]
                totals[name] += float(got[name].sum())
            errors.append((got["float16"] - got["float32"]).abs())
            count += targets.numel()
    errors = torch.cat(errors)
    print(f"{len(lines)} lines of {Path(args.eval_file).name}, {count} predictions (both directions, with </S>, <S>)")
    print(
        f"|log p(float16 W) - log p(float32 W)| per prediction: mean {errors.mean():.2e}, max {errors.max():.2e} nats"
    )
    for name, total in totals.items():
        print(f"perplexity with {name} W: {math.exp(-total / count):.4f}")


if __name__ == "__main__":
    main()
