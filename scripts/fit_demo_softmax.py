"""Fits the demo LM softmax on the frozen demo biLM: modeling_elmo/demo_models/demo_softmax/softmax.safetensors.

The shipped demo biLM (modeling_elmo/demo_models/demo_bilm) came from a training run that kept no softmax, and a
rerun does not reproduce it. Its LM head is therefore fitted afresh: the biLM stays frozen, and only the softmax
(``W`` (V, P), ``b`` (V,), shared by both directions as in ELMo's released models) is trained on the top layer's
outputs over WikiText-2 ``valid.txt``, the demo's training text. That is multinomial logistic regression, a convex
problem, so a fixed number of Adam steps from a fixed start gives the same file each time (same machine, same
thread count). The targets are those of ``ElmoForPreTraining``: the forward output at word k predicts word k+1
(``</S>`` after the last), the backward one word k-1 (``<S>`` before the first), over the training windows of
at most 20 words of each line, as the biLM was trained.

    OMP_NUM_THREADS=2 OMP_WAIT_POLICY=PASSIVE python scripts/fit_demo_softmax.py   # ELMO_SHARED_DIR=.../shared

It prints, and writes beside the softmax as fit_results.json, the perplexity on ``test.txt`` with the float16
``W`` that ships, and the float16 rounding's effect on the test words' log-probabilities.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from tqdm.auto import tqdm

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from modeling_elmo.demo_models.language_model import DEMO_SOFTMAX_FILE, demo_bilm_for_pretraining  # noqa: E402
from modeling_elmo.demo_models.model import DEMO_MODEL_DIR  # noqa: E402
from modeling_elmo.tokenization_elmo import ElmoTokenizer, load_bilm_vocab  # noqa: E402
from modeling_elmo.training.lm_data import ElmoLMCollator, make_windows  # noqa: E402

DATA = Path(os.environ.get("ELMO_SHARED_DIR", ROOT.parent / "shared")) / "data" / "wikitext-2"


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train_file", default=str(DATA / "valid.txt"))
    parser.add_argument("--eval_file", default=str(DATA / "test.txt"))
    parser.add_argument("--output", default=str(DEMO_SOFTMAX_FILE))
    parser.add_argument("--steps", type=int, default=800, help="Adam steps (the fixed budget)")
    parser.add_argument("--batch_size", type=int, default=4096, help="target words per step")
    parser.add_argument("--learning_rate", type=float, default=0.02)
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def read_windows(path: str, vocab: dict[str, int]) -> dict[str, list]:
    """WikiText-2 is tokenized already: one line is one sentence, split on spaces (as the demo was trained)."""
    with open(path, encoding="utf-8") as f:
        sentences = [line.split() for line in f]
    return make_windows(sentences, vocab, max_words=20)


@torch.no_grad()
def top_layer_features(model, tokenizer, windows: dict[str, list], batch_size: int = 128, desc: str = ""):
    """The frozen biLM's top-layer outputs and their targets, both directions stacked.

    Returns ``states (N, P)`` (float32) and ``targets (N,)``: first every forward position, then every backward one.
    """
    collate = ElmoLMCollator(tokenizer)
    features = [dict(zip(windows, values, strict=True)) for values in zip(*windows.values(), strict=True)]
    states = {0: [], 1: []}
    targets = {0: [], 1: []}
    for start in tqdm(range(0, len(features), batch_size), desc=desc, unit="batch"):
        batch = collate(features[start : start + batch_size])
        base = model.elmo(batch["input_ids"], attention_mask=batch["attention_mask"], output_hidden_states=True)
        mask = base.mask.bool()
        shifted = model.lm_targets(batch["labels"], mask, batch["boundary_labels"])  # (2, B, W)
        for direction, half in enumerate(base.hidden_states[-1].float().chunk(2, dim=-1)):  # (B, W, P) each
            states[direction].append(half[mask])
            targets[direction].append(shifted[direction][mask])
    return torch.cat(states[0] + states[1]), torch.cat(targets[0] + targets[1])


def fit(states: torch.Tensor, targets: torch.Tensor, vocab_size: int, args) -> tuple[torch.Tensor, torch.Tensor]:
    """Full-softmax cross entropy, Adam with a linearly decaying rate, ``args.steps`` minibatches in a seeded order.

    Starts from ``W = 0`` and ``b`` = the log unigram frequencies of the targets (add-one), the best
    context-free answer, so that the steps only have to learn what the context adds.
    """
    counts = torch.bincount(targets, minlength=vocab_size).double() + 1.0
    bias = (counts / counts.sum()).log().float().requires_grad_()
    weight = torch.zeros(vocab_size, states.shape[1], requires_grad=True)
    optimizer = torch.optim.Adam([weight, bias], lr=args.learning_rate)
    # Linear decay to 0: the minibatch noise fades out, so the last steps settle near the optimum.
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 - step / args.steps)
    generator = torch.Generator().manual_seed(args.seed)
    order = torch.randperm(len(targets), generator=generator)
    cursor = 0
    bar = tqdm(range(args.steps), desc="fit", unit="step")
    for _ in bar:
        if cursor + args.batch_size > len(order):
            order, cursor = torch.randperm(len(targets), generator=generator), 0
        index = order[cursor : cursor + args.batch_size]
        cursor += args.batch_size
        loss = F.cross_entropy(F.linear(states[index], weight, bias), targets[index])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
        bar.set_postfix(loss=f"{loss.item():.3f}")
    return weight.detach(), bias.detach()


@torch.no_grad()
def target_logprobs(states, targets, weight, bias, chunk: int = 8192) -> torch.Tensor:
    """``(N,)`` log-probability of each target under ``softmax(states W^T + b)``, in float32."""
    out = []
    for start in range(0, len(targets), chunk):
        logits = F.linear(states[start : start + chunk], weight.float(), bias.float())
        out.append(-F.cross_entropy(logits, targets[start : start + chunk], reduction="none"))
    return torch.cat(out)


def main(argv=None) -> int:
    args = parse_args(argv)
    for path in (args.train_file, args.eval_file):
        if not Path(path).is_file():
            print(f"error: {path} not found (set ELMO_SHARED_DIR)", file=sys.stderr)
            return 1
    torch.manual_seed(args.seed)
    model = demo_bilm_for_pretraining()
    tokenizer = ElmoTokenizer.from_pretrained(DEMO_MODEL_DIR)
    vocab = load_bilm_vocab(DEMO_MODEL_DIR / "vocab.txt")
    vocab_size = model.config.lm_vocab_size
    if len(vocab) != vocab_size:
        print(f"error: the demo vocabulary has {len(vocab)} words, its config {vocab_size}", file=sys.stderr)
        return 1

    started = time.monotonic()
    train_states, train_targets = top_layer_features(
        model, tokenizer, read_windows(args.train_file, vocab), desc="valid"
    )
    eval_states, eval_targets = top_layer_features(model, tokenizer, read_windows(args.eval_file, vocab), desc="test")
    weight, bias = fit(train_states, train_targets, vocab_size, args)
    shipped_weight = weight.half()  # what ships: float16 W (1.3 MB instead of 2.6), float32 b

    exact = target_logprobs(eval_states, eval_targets, weight, bias)
    shipped = target_logprobs(eval_states, eval_targets, shipped_weight, bias)
    half = len(eval_targets) // 2  # forward positions first, then as many backward ones
    train_shipped = target_logprobs(train_states, train_targets, shipped_weight, bias)
    results = {
        "fit_steps": args.steps,
        "fit_batch_size": args.batch_size,
        "fit_learning_rate": args.learning_rate,
        "fit_seed": args.seed,
        "train_words": len(train_targets) // 2,
        "train_perplexity": math.exp(-train_shipped.mean().item()),
        "eval_words": half,
        "eval_forward_perplexity": math.exp(-shipped[:half].mean().item()),
        "eval_backward_perplexity": math.exp(-shipped[half:].mean().item()),
        "eval_perplexity": math.exp(-shipped.mean().item()),
        "eval_perplexity_float32_W": math.exp(-exact.mean().item()),
        "float16_max_abs_logprob_change": (shipped - exact).abs().max().item(),
        "float16_mean_abs_logprob_change": (shipped - exact).abs().mean().item(),
    }
    print(json.dumps(results, indent=2), f"\n{time.monotonic() - started:.0f} s", flush=True)

    bilm_sha256 = hashlib.sha256((DEMO_MODEL_DIR / "model.safetensors").read_bytes()).hexdigest()
    target = Path(args.output)
    target.parent.mkdir(parents=True, exist_ok=True)
    tensors = {"softmax.weight": shipped_weight.contiguous(), "softmax.bias": bias.float().contiguous()}
    # One metadata entry only: safetensors writes several in a random order, and the file should be byte-reproducible.
    save_file(tensors, str(target) + ".part", metadata={"bilm_sha256": bilm_sha256})
    os.chmod(str(target) + ".part", 0o644)
    os.replace(str(target) + ".part", target)
    with open(target.parent / "fit_results.json", "w") as f:
        json.dump({k: round(v, 6) if isinstance(v, float) else v for k, v in results.items()}, f, indent=2)
        f.write("\n")
    print(f"wrote {target} and {target.parent / 'fit_results.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
