"""Training a head on precomputed ELMo vectors against the same training with the biLM in the loop.

The recipe of docs/usage.md ("Training on precomputed vectors"): a mean-pooling linear classifier trained with
``Trainer`` on the ``elmo`` column that ``embed_dataset`` stored, against the same head over the same frozen biLM
run on every batch of every epoch (in eval mode, without gradients: the vectors are the same). Same sentences
(WikiText-2 from ``../shared/data``, labelled by whether they hold a digit), same batches, epochs, optimizer and
seed. After one warm-up training of each, ``--rounds`` rounds of both in alternating order; it prints the CPU name,
the median training seconds of each, the one-off cost of embedding the sentences, and the speed-ups: per
training, and with the embedding counted in.

    python benchmarks/bench_frozen_features.py                       # demo model, 1,000 sentences, 3 epochs
    python benchmarks/bench_frozen_features.py --sentences 2000 --epochs 5 --rounds 3
"""

from __future__ import annotations

import argparse
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
    parser.add_argument("--sentences", type=int, default=1000, help="WikiText-2 sentences (default: %(default)s)")
    parser.add_argument("--epochs", type=int, default=3, help="epochs per training (default: %(default)s)")
    parser.add_argument("--batch_size", type=int, default=32, help="sentences per step (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds after the warm-up (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default: %(default)s)")
    return parser.parse_args(argv)


def build(elmo_dim: int):
    import torch

    class MeanPoolClassifier(torch.nn.Module):
        """docs/usage.md's head: a linear classifier over a sentence's mean ELMo vector."""

        def __init__(self, dim: int, num_labels: int):
            super().__init__()
            self.linear = torch.nn.Linear(dim, num_labels)

        def forward(self, elmo, mask, labels=None):
            pooled = (elmo * mask.unsqueeze(-1)).sum(1) / mask.sum(1, keepdim=True).clamp(min=1)
            logits = self.linear(pooled)
            loss = None if labels is None else torch.nn.functional.cross_entropy(logits, labels)
            return {"loss": loss, "logits": logits}

    class BiLmInTheLoop(torch.nn.Module):
        """The same head over the frozen biLM, run on every batch (eval mode, no gradients)."""

        def __init__(self, elmo, head):
            super().__init__()
            self.elmo, self.head = elmo, head
            self.elmo.requires_grad_(False)

        def forward(self, input_ids, attention_mask, labels=None):
            self.elmo.eval()
            with torch.no_grad():
                vectors = self.elmo(input_ids=input_ids, attention_mask=attention_mask).elmo
            return self.head(vectors, attention_mask.float(), labels)

    return MeanPoolClassifier, BiLmInTheLoop


def main(argv=None) -> None:
    import datasets
    import torch
    from transformers import PrinterCallback, Trainer, TrainingArguments
    from transformers.utils import logging as hf_logging

    from benchmarks.bench_embed_dataset import corpus, cpu_name
    from modeling_elmo import ElmoModel, ElmoTokenizer, demo_model_path
    from modeling_elmo.inference.embed_dataset import embed_dataset

    args = parse_args(argv)
    datasets.disable_progress_bars()
    hf_logging.set_verbosity_error()
    torch.set_num_threads(args.threads)
    folder = args.model or str(demo_model_path())
    elmo, tokenizer = ElmoModel.from_pretrained(folder).eval(), ElmoTokenizer.from_pretrained(folder)
    lines = corpus(args.sentences)
    labels = [int(any(c.isdigit() for c in line)) for line in lines]
    sentences = datasets.Dataset.from_dict({"text": lines, "label": labels})
    MeanPoolClassifier, BiLmInTheLoop = build(2 * elmo.config.projection_dim)

    start = time.perf_counter()
    stored = embed_dataset(elmo, tokenizer, sentences, output_type="elmo", progress=False).with_format("torch")
    embed_seconds = time.perf_counter() - start

    def pad(rows):
        vectors = torch.nn.utils.rnn.pad_sequence([row["elmo"] for row in rows], batch_first=True)
        lengths = torch.tensor([len(row["elmo"]) for row in rows])
        mask = (torch.arange(vectors.shape[1]) < lengths[:, None]).float()
        return {"elmo": vectors, "mask": mask, "labels": torch.stack([row["label"] for row in rows])}

    def tokenize(rows):
        batch = tokenizer([row["text"] for row in rows], padding=True, return_tensors="pt")
        return {**batch, "labels": torch.tensor([row["label"] for row in rows])}

    losses = set()

    def train(in_the_loop: bool, work: str) -> float:
        """Seconds of ``Trainer``'s training loop (its ``train_runtime``: the set-up before it is left out)."""
        torch.manual_seed(0)
        head = MeanPoolClassifier(2 * elmo.config.projection_dim, num_labels=2)
        model = BiLmInTheLoop(elmo, head) if in_the_loop else head
        training = TrainingArguments(
            work, num_train_epochs=args.epochs, per_device_train_batch_size=args.batch_size, learning_rate=0.05,
            remove_unused_columns=False, save_strategy="no", logging_strategy="no", report_to=[], disable_tqdm=True,
            use_cpu=True, seed=0, dataloader_num_workers=0,
        )  # fmt: skip
        data, collator = (sentences, tokenize) if in_the_loop else (stored, pad)
        trainer = Trainer(model, training, train_dataset=data, data_collator=collator)
        trainer.remove_callback(PrinterCallback)
        result = trainer.train()
        losses.add(round(result.training_loss, 5))  # the same vectors, the same steps: the same loss
        return result.metrics["train_runtime"]

    words = sum(len(tokenizer.tokenize(line)) for line in lines)
    print(f"CPU: {cpu_name()}; torch threads {args.threads}; torch {torch.__version__}")
    print(
        f"model {folder}: {len(lines)} WikiText-2 sentences ({words} words), {args.epochs} epochs of batches of "
        f"{args.batch_size}; embedding them once took {embed_seconds:.1f} s"
    )
    times: dict[str, list[float]] = {"stored vectors": [], "biLM in the loop": []}
    with tempfile.TemporaryDirectory() as work:
        train(False, work)  # warm-up
        train(True, work)
        for round_ in range(args.rounds):
            order = [False, True] if round_ % 2 == 0 else [True, False]
            for in_the_loop in order:
                times["biLM in the loop" if in_the_loop else "stored vectors"].append(train(in_the_loop, work))
            print(f"round {round_ + 1}: " + ", ".join(f"{name} {values[-1]:.2f} s" for name, values in times.items()))
    print(f"training loss of every run: {sorted(losses)} (one value: both paths trained on the same vectors)")
    stored_s, loop_s = statistics.median(times["stored vectors"]), statistics.median(times["biLM in the loop"])
    print(
        f"median training time: stored vectors {stored_s:.2f} s, biLM in the loop {loop_s:.2f} s: "
        f"{loop_s / stored_s:.1f}x faster per training ({args.epochs} epochs); with the one-off embedding counted "
        f"in ({embed_seconds:.1f} s): {loop_s / (stored_s + embed_seconds):.1f}x"
    )


if __name__ == "__main__":
    main()
